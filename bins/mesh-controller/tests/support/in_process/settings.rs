//! The `settings` commands through the library.

use super::{said, Library};
use mesh_controller::catalogue;
use mesh_controller::settings;

impl Library {
    /// Calls `f` with what a `settings` command works on: the home and the catalogue the mesh
    /// composes from; `command` is the command line kept in the history (the binary keeps its
    /// own, `settings::invoked_command`).
    fn settings<T>(
        &self,
        command: &str,
        f: impl FnOnce(&settings::On<'_>) -> mesh_controller::Result<T>,
    ) -> Result<T, String> {
        let (catalogue, _) = self.checked()?;
        let command = format!("mesh-controller {command}");
        let on = settings::On {
            home: self.home(),
            catalogue: &catalogue,
            command: &command,
        };
        let answer = f(&on).map_err(|e| said(&e))?;
        // As the commands do: what the nodes should run is composed again when it changed.
        self.tokio
            .block_on(mesh_controller::status::keep_current_logged(
                self.home(),
                self.mesh.store(),
                "a settings change",
            ));
        Ok(answer)
    }

    /// `settings set MODULE JSON [--node NODE] [--replace]`: the answer (`--output json`
    /// prints it; `settings set` exits 2 when it was refused).
    pub fn settings_set(
        &self,
        module: &str,
        node: Option<&str>,
        json: &str,
        replace: bool,
    ) -> Result<settings::Answer, String> {
        self.settings(&format!("settings set {module} {json}"), |on| {
            settings::set(on, module, node, json, replace, mesh_store::clock::now())
        })
    }

    /// `settings set-secret MODULE KEY [--node NODE]`, `value` as read from standard input.
    pub fn settings_set_secret(
        &self,
        module: &str,
        node: Option<&str>,
        key: &str,
        value: &[u8],
    ) -> Result<settings::Answer, String> {
        self.settings(&format!("settings set-secret {module} {key}"), |on| {
            settings::set_secret(on, module, node, key, value, mesh_store::clock::now())
        })
    }

    /// `settings clear MODULE [--node NODE]`.
    pub fn settings_clear(
        &self,
        module: &str,
        node: Option<&str>,
    ) -> Result<settings::Answer, String> {
        self.settings(&format!("settings clear {module}"), |on| {
            settings::clear(on, module, node, mesh_store::clock::now())
        })
    }

    /// `settings restore MODULE REVISION [--node NODE]`.
    pub fn settings_restore(
        &self,
        module: &str,
        node: Option<&str>,
        revision: u64,
    ) -> Result<settings::Answer, String> {
        self.settings(&format!("settings restore {module} {revision}"), |on| {
            settings::restore(on, module, node, revision, mesh_store::clock::now())
        })
    }

    /// `settings show MODULE [--node NODE] [--history]` (`--output json` prints it).
    pub fn settings_show(
        &self,
        module: &str,
        node: Option<&str>,
        history: bool,
    ) -> Result<settings::Shown, String> {
        self.settings(&format!("settings show {module}"), |on| {
            settings::show(on, module, node, history)
        })
    }

    /// `settings rename MODULE OLD NEW`, checked against the newest version of the module the
    /// mesh knows (`--output json` prints it).
    pub fn settings_rename(
        &self,
        module: &str,
        old: &str,
        new: &str,
    ) -> Result<settings::Renamed, String> {
        self.settings(&format!("settings rename {module} {old} {new}"), |on| {
            let newest = catalogue::newest_known(on.home, on.catalogue, module)?;
            settings::rename(on, module, (old, new), &newest, mesh_store::clock::now())
        })
    }
}
