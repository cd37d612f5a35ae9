//! Network resources: a podman network the host makes for a module's containers, through the
//! [`crate::ContainerRuntime`] seam; recorded once made, removed when no longer declared (see
//! `release`), and never one the mesh did not make.

use super::super::{Attempt, Engine};
use crate::ApplyError;
use mesh_model::declaration::{NetworkSpec, Resource};

impl<'a> Engine<'a, '_> {
    /// Makes a network that is not there yet, and records it as made. One recorded and there
    /// is left without marking the machine mid-change.
    pub(super) fn apply_network(
        &mut self,
        resource: &Resource,
        spec: &NetworkSpec,
    ) -> Result<Attempt, ApplyError> {
        if self.state.resources.contains_key(&resource.id)
            && matches!(
                self.seams.containers.network_made(&resource.id, &spec.name),
                Ok(true)
            )
        {
            return Ok(Attempt::Took(Vec::new()));
        }
        self.begin_change()?;
        let result =
            self.seams
                .containers
                .ensure_network(&resource.id, &resource.module, &spec.name);
        if result.is_ok() {
            self.record_made(resource)?;
        }
        Ok(result.into())
    }
}
