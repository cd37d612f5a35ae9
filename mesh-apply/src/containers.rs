//! The seam for containers (rule 8). Today only [`NoContainerRuntime`]: every container resource
//! is reported `failed{reason: "not supported yet"}` rather than pretended.
//!
//! A podman runtime implements [`ContainerRuntime`] and is passed to [`crate::apply_with`] in
//! [`crate::Seams`]. The engine already orders a container after the files named in its
//! `restart_on` (and after the whole together group they belong to), and tells the runtime
//! whether one of them changed in this apply, so a restart happens only once its group is whole.

use mesh_model::declaration::ContainerSpec;

/// Runs containers the host labelled as its own.
///
/// Errors are sentences naming the container; they become the resource's `reason`.
pub trait ContainerRuntime {
    /// Checks, changing nothing, that the container can be brought to `spec` (used to stage a
    /// together group before anything in it is committed).
    ///
    /// # Errors
    /// Why it cannot.
    fn check(&self, spec: &ContainerSpec) -> Result<(), String>;

    /// Brings the container to `spec`, restarting it when `restart` (a `restart_on` file changed
    /// in this apply). Returns the fields that changed (empty: it already matched).
    ///
    /// # Errors
    /// Why it could not.
    fn apply(&self, spec: &ContainerSpec, restart: bool) -> Result<Vec<String>, String>;

    /// Removes a container the mesh made and no longer declares. Returns what was done.
    ///
    /// # Errors
    /// Why it could not.
    fn remove(&self, name: &str) -> Result<String, String>;
}

/// The runtime of a host without container support: says so for every container.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoContainerRuntime;

const NOT_SUPPORTED: &str = "not supported yet";

impl ContainerRuntime for NoContainerRuntime {
    fn check(&self, _spec: &ContainerSpec) -> Result<(), String> {
        Err(NOT_SUPPORTED.to_owned())
    }

    fn apply(&self, _spec: &ContainerSpec, _restart: bool) -> Result<Vec<String>, String> {
        Err(NOT_SUPPORTED.to_owned())
    }

    fn remove(&self, _name: &str) -> Result<String, String> {
        Err(NOT_SUPPORTED.to_owned())
    }
}
