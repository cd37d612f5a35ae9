//! The settings commands as calls on a [`Mesh`]: the catalogue the mesh composes from read, a
//! layer read or changed ([`crate::settings`]), and, after a change, what each node should run
//! composed again.

use super::Mesh;
use crate::error::Result;
use crate::settings::{self, Answer, On, Renamed, Shown};

/// The layer a settings call reads or changes, and the command that asks.
#[derive(Debug, Clone, Copy)]
pub struct SettingsOptions<'a> {
    /// The module.
    pub module: &'a str,
    /// The node's layer; `None`, the mesh layer.
    pub node: Option<&'a str>,
    /// The command as a person would retype it, kept in the history beside every layer it
    /// replaces.
    pub command: &'a str,
}

/// A change to a settings layer ([`Mesh::settings_edit`]).
#[derive(Debug, Clone, Copy)]
pub enum SettingsEdit<'a> {
    /// The layer replaced whole by a JSON object ([`settings::set`]); `replace` allows it to
    /// remove keys.
    Set {
        /// The new layer, a JSON object.
        json: &'a str,
        /// Whether it may remove keys.
        replace: bool,
    },
    /// One key set to a secret ([`settings::set_secret`]).
    SetSecret {
        /// The key (dotted for a nested one).
        key: &'a str,
        /// The secret's value.
        value: &'a [u8],
    },
    /// The layer removed ([`settings::clear`]).
    Clear,
    /// A layer put back from the history ([`settings::restore`]).
    Restore {
        /// The revision.
        revision: u64,
    },
}

impl Mesh {
    /// `settings show`: a layer as it is, with every layer it replaced when `history`.
    ///
    /// # Errors
    /// As [`Mesh::checked`] and [`settings::show`].
    pub async fn settings_show(&self, layer: &SettingsOptions<'_>, history: bool) -> Result<Shown> {
        let (catalogue, _) = self.checked().await?;
        let on = On {
            home: self.home(),
            catalogue: &catalogue,
            command: layer.command,
        };
        settings::show(&on, layer.module, layer.node, history)
    }

    /// `settings set | set-secret | clear | restore`: the layer changed at `now`, and, unless
    /// the change was refused, what each node should run composed again.
    ///
    /// # Errors
    /// As [`Mesh::checked`] and the change's own call ([`SettingsEdit`]); a refusal is an
    /// answer ([`Answer::refused`]), not an error.
    pub async fn settings_edit(
        &self,
        layer: &SettingsOptions<'_>,
        edit: &SettingsEdit<'_>,
        now: u64,
    ) -> Result<Answer> {
        let (catalogue, _) = self.checked().await?;
        let on = On {
            home: self.home(),
            catalogue: &catalogue,
            command: layer.command,
        };
        let (module, node) = (layer.module, layer.node);
        let answer = match *edit {
            SettingsEdit::Set { json, replace } => {
                settings::set(&on, module, node, json, replace, now)?
            }
            SettingsEdit::SetSecret { key, value } => {
                settings::set_secret(&on, module, node, key, value, now)?
            }
            SettingsEdit::Clear => settings::clear(&on, module, node, now)?,
            SettingsEdit::Restore { revision } => {
                settings::restore(&on, module, node, revision, now)?
            }
        };
        if !answer.refused() {
            // What the nodes should run changed: their intents are composed again.
            crate::intent::keep_current_logged(self.home(), self.store(), "a settings change")
                .await;
        }
        Ok(answer)
    }

    /// `settings rename`: the key `old` renamed `new` in every layer of `module` that sets it,
    /// checked against the newest version of the module the mesh knows, then what each node
    /// should run composed again.
    ///
    /// # Errors
    /// As [`Mesh::checked`], [`crate::catalogue::newest::newest_known`] and [`settings::rename`].
    pub async fn settings_rename(
        &self,
        module: &str,
        (old, new): (&str, &str),
        command: &str,
        now: u64,
    ) -> Result<Renamed> {
        let (catalogue, _) = self.checked().await?;
        let on = On {
            home: self.home(),
            catalogue: &catalogue,
            command,
        };
        let newest = crate::catalogue::newest::newest_known(self.home(), &catalogue, module)?;
        let renamed = settings::rename(&on, module, (old, new), &newest, now)?;
        crate::intent::keep_current_logged(self.home(), self.store(), "settings rename").await;
        Ok(renamed)
    }
}
