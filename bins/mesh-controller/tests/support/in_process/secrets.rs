//! The `secrets` commands through the library.

use super::{said, Library};

impl Library {
    /// `secrets recipients add KEY` (`--output json` prints the answer).
    pub fn secrets_recipients_add(
        &self,
        key: &str,
    ) -> Result<mesh_controller::secrets::RecipientsAnswer, String> {
        mesh_controller::secrets::change_recipients(self.home(), key, true).map_err(|e| said(&e))
    }

    /// `secrets recipients remove KEY` (`--output json` prints the answer).
    pub fn secrets_recipients_remove(
        &self,
        key: &str,
    ) -> Result<mesh_controller::secrets::RecipientsAnswer, String> {
        mesh_controller::secrets::change_recipients(self.home(), key, false).map_err(|e| said(&e))
    }

    /// `secrets encrypt FILE` (`--output json` prints it).
    pub fn secrets_encrypt(
        &self,
        file: &std::path::Path,
    ) -> Result<mesh_controller::secrets::Encrypted, String> {
        mesh_controller::secrets::encrypt_file(self.home(), file).map_err(|e| said(&e))
    }

    /// `secrets rotate` (`--output json` prints it; it exits 1 while a repository is pending,
    /// [`Rotated::pending`](mesh_controller::secrets::Rotated::pending)). A repository with
    /// a working tree is committed to by `git` with the identity of this process's environment: a
    /// test that needs its own runs the binary.
    pub fn secrets_rotate(&self) -> Result<mesh_controller::secrets::Rotated, String> {
        let rotated = self
            .tokio
            .block_on(mesh_controller::secrets::rotate(
                self.home(),
                self.mesh.store(),
            ))
            .map_err(|e| said(&e))?;
        // As the command does: every secret's keyed digest is new.
        self.tokio
            .block_on(mesh_controller::status::keep_current_logged(
                self.home(),
                self.mesh.store(),
                "secrets rotate",
            ));
        Ok(rotated)
    }
}
