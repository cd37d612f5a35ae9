//! `settings`: reading and replacing settings layers, every replaced layer kept.

use crate::{render, Output};
use anyhow::Result;
use clap::Subcommand;
use mesh_cli_docs::exit::Exit;
use mesh_controller::settings;
use mesh_controller::{SettingsEdit, SettingsOptions};

use std::process::ExitCode;

/// `settings` subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Prints a layer as it is (JSON); with `--history`, every earlier layer too.
    Show {
        /// The module.
        module: String,
        /// The node's layer (default: the mesh layer).
        #[arg(long)]
        node: Option<String>,
        /// Also print every layer it replaced, newest first, with when and by which command.
        #[arg(long)]
        history: bool,
    },
    /// Replaces a layer whole with JSON, answering with the keys added, changed and removed.
    ///
    /// A set that would remove any key is refused (nothing changes, exit 2) unless
    /// `--replace`. A set that only adds or changes keys needs nothing. The replaced layer is
    /// kept in the history.
    ///
    /// The layer is checked against the newest version of the module the mesh knows (an open
    /// plan's commit, else what the nodes run), and it says which: a key only an open plan's
    /// version accepts is kept and waits for that plan to roll out.
    Set {
        /// The module.
        module: String,
        /// The new layer, a JSON object (e.g. '{"port": 8097}').
        json: String,
        /// The node's layer (default: the mesh layer).
        #[arg(long)]
        node: Option<String>,
        /// Allow the new layer to remove keys.
        #[arg(long)]
        replace: bool,
    },
    /// Sets one key of a layer to a secret read from standard input (never from the command
    /// line): stored encrypted to the mesh's secrets key and the operators' keys, shown
    /// everywhere as `<secret sha256:…>`. The layer's other keys are kept, and the replaced
    /// layer is kept in the history. A trailing newline is part of the value: use
    /// `printf %s` (or `< file`) to leave it out. The layer is checked as `settings set`
    /// checks it, against the newest version of the module the mesh knows: a key only an open
    /// plan's version accepts waits for that plan.
    ///
    /// Exit codes: 0 set (or unchanged: the same value); 1 error (nothing changed).
    SetSecret {
        /// The module.
        module: String,
        /// The setting's key (dotted for a nested one: `tls.key`).
        key: String,
        /// The node's layer (default: the mesh layer).
        #[arg(long)]
        node: Option<String>,
    },
    /// Removes a layer; it is kept in the history like a set.
    Clear {
        /// The module.
        module: String,
        /// The node's layer (default: the mesh layer).
        #[arg(long)]
        node: Option<String>,
    },
    /// Renames a key in every layer of the module that sets it (the mesh layer and each
    /// node's), keeping its value: what a module's new version that renamed a setting needs.
    ///
    /// The new name must be accepted by the newest version of the module the mesh knows (an
    /// open plan's commit, else what the nodes run); it says which. Each layer it replaces is
    /// kept in the history. Refused, nothing changed (exit 2), when no layer sets the old key,
    /// a layer already sets the new one, or the new one is not accepted.
    Rename {
        /// The module.
        module: String,
        /// The key's old name (dotted for a nested key: `places.media`).
        old: String,
        /// Its new name.
        new: String,
    },
    /// Puts back a layer from the history (`settings show --history` lists revisions).
    ///
    /// The layer is checked as `settings set` checks it, against the newest version of the
    /// module the mesh knows: a key only an open plan's version accepts waits for that plan.
    Restore {
        /// The module.
        module: String,
        /// The revision to put back.
        revision: u64,
        /// The node's layer (default: the mesh layer).
        #[arg(long)]
        node: Option<String>,
    },
}

impl Command {
    /// Whether it only reads (`show`).
    pub fn reads_only(&self) -> bool {
        match self {
            Command::Show { .. } => true,
            Command::Set { .. }
            | Command::SetSecret { .. }
            | Command::Clear { .. }
            | Command::Rename { .. }
            | Command::Restore { .. } => false,
        }
    }
}

/// Shows a layer, or changes one: exit 2 when the change was refused.
pub fn exec(command: Command, env: &super::Env) -> Result<ExitCode> {
    let now = mesh_store::clock::now();
    let command_line = settings::invoked_command();
    let layer = |module, node| SettingsOptions {
        module,
        node,
        command: &command_line,
    };
    let answer = match command {
        Command::Show {
            module,
            node,
            history,
        } => {
            let shown = env.runtime.block_on(
                env.mesh
                    .settings_show(&layer(&module, node.as_deref()), history),
            )?;
            match env.output {
                Output::Json => env.print_json(&shown)?,
                Output::Text => print!("{}", render::settings_shown(&shown)?),
            }
            return Ok(ExitCode::SUCCESS);
        }
        Command::Set {
            module,
            json,
            node,
            replace,
        } => env.runtime.block_on(env.mesh.settings_edit(
            &layer(&module, node.as_deref()),
            &SettingsEdit::Set {
                json: &json,
                replace,
            },
            now,
        ))?,
        Command::Rename { module, old, new } => {
            let renamed = env.runtime.block_on(env.mesh.settings_rename(
                &module,
                (&old, &new),
                &command_line,
                now,
            ))?;
            match env.output {
                Output::Json => env.print_json(&renamed)?,
                Output::Text => print!("{}", render::settings_renamed(&renamed)),
            }
            return Ok(ExitCode::SUCCESS);
        }
        Command::SetSecret { module, key, node } => {
            // A home with no mesh, or a catalogue that cannot be read, is said before standard
            // input is read.
            env.checked()?;
            let value = super::secrets::read_standard_input()?;
            env.runtime.block_on(env.mesh.settings_edit(
                &layer(&module, node.as_deref()),
                &SettingsEdit::SetSecret {
                    key: &key,
                    value: &value,
                },
                now,
            ))?
        }
        Command::Clear { module, node } => env.runtime.block_on(env.mesh.settings_edit(
            &layer(&module, node.as_deref()),
            &SettingsEdit::Clear,
            now,
        ))?,
        Command::Restore {
            module,
            revision,
            node,
        } => env.runtime.block_on(env.mesh.settings_edit(
            &layer(&module, node.as_deref()),
            &SettingsEdit::Restore { revision },
            now,
        ))?,
    };
    match env.output {
        Output::Json => env.print_json(&answer)?,
        Output::Text => print!("{}", render::settings_answer(&answer)),
    }
    Ok(if answer.refused() {
        Exit::Refused.into()
    } else {
        ExitCode::SUCCESS
    })
}
