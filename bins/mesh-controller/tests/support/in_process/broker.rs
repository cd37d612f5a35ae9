//! The bus's own commands through the library: `broker`, `node enroll`, `runtimes`.

use super::{said, Library};
use mesh_controller::bus;

use serde_json::Value;

impl Library {
    /// `broker users`: the bus's users as the next push would send them to the bus node.
    pub fn broker_users(&self) -> Result<String, String> {
        let checked = self.checked()?;
        // Without a bus, composed from the home alone, as the binary does without `--bus`.
        let bus = self.mesh.bus().cloned().unwrap_or_default();
        bus::users_text(self.home(), &checked, &bus).map_err(|e| said(&e))
    }

    /// `broker keygen`: the controller's seed made under the home, or the one there kept
    /// (`--output json` prints it).
    pub fn broker_keygen(&self) -> Result<mesh_controller::bus::Keygen, String> {
        mesh_controller::bus::controller_keygen(self.home()).map_err(|e| said(&e))
    }

    /// `node enroll NODE PUBLIC_KEY` (`--output json` prints what was enrolled).
    pub fn node_enroll(
        &self,
        node: &str,
        public_key: &str,
    ) -> Result<mesh_controller::bus::Enrolled, String> {
        self.home().require().map_err(|e| said(&e))?;
        mesh_controller::bus::enroll(self.home(), node, public_key).map_err(|e| said(&e))
    }

    /// `node enroll NODE PUBLIC_KEY --age-key KEY`: what was enrolled, with the age key and the
    /// one it replaced, if another.
    pub fn node_enroll_with_age_key(
        &self,
        node: &str,
        public_key: &str,
        age_key: &str,
    ) -> Result<mesh_controller::bus::Enrolled, String> {
        self.home().require().map_err(|e| said(&e))?;
        mesh_controller::bus::enroll_with_age_key(self.home(), node, public_key, age_key)
            .map_err(|e| said(&e))
    }

    /// `runtimes --output json`, and the exit code it ends with (0 every node heard serving
    /// what it is assigned, 2 a module missing or elsewhere, 3 something not heard).
    pub fn runtimes(&self) -> Result<(Value, u8), String> {
        self.home().require().map_err(|e| said(&e))?;
        let found = self
            .tokio
            .block_on(bus::runtimes(self.home(), self.bus()?))
            .map_err(|e| said(&e))?;
        Ok((
            serde_json::to_value(&found).unwrap(),
            bus::runtimes_exit_code(&found),
        ))
    }

    /// `broker consumer-reset STREAM CONSUMER`: what was reset (`--output json` prints it), or
    /// the refusal `broker consumer-reset` prints, exiting 2.
    pub fn consumer_reset(
        &self,
        stream: &str,
        consumer: &str,
    ) -> Result<Result<bus::ResetLine, String>, String> {
        self.tokio
            .block_on(bus::consumer_reset(
                self.home(),
                self.bus()?,
                stream,
                consumer,
            ))
            .map_err(|e| said(&e))
    }
}
