//! The seam for containers (rule 8): [`ContainerRuntime`]. The real one is [`crate::Podman`];
//! [`NoContainerRuntime`] reports every container `failed{reason: "not supported"}` rather
//! than pretend, for hosts configured without containers.
//!
//! A runtime is passed to [`crate::apply_with`] in [`crate::Seams`]; [`crate::apply`] picks one
//! from [`crate::HostConfig::containers`]. The engine orders a container after the files named in
//! its `restart_on` (and after the whole together group they belong to), and tells the runtime
//! whether one of them changed in this apply, so a restart happens only once its group is whole.

use mesh_model::declaration::ContainerSpec;

/// A declared container, with who declares it (what its labels say).
#[derive(Debug, Clone, Copy)]
pub struct DeclaredContainer<'a> {
    /// Its resource id (`<module>/container/<name>`).
    pub id: &'a str,
    /// The module that declares it.
    pub module: &'a str,
    /// How it should run.
    pub spec: &'a ContainerSpec,
}

/// Runs containers the host labelled as its own.
///
/// Errors are sentences naming the container; they become the resource's `reason`.
pub trait ContainerRuntime {
    /// Checks, changing nothing, that the container can be brought to its spec (used to stage a
    /// together group before anything in it is committed).
    ///
    /// # Errors
    /// Why it cannot.
    fn check(&self, declared: &DeclaredContainer<'_>) -> Result<(), String>;

    /// Brings the container to its spec, restarting it when `restart` (a `restart_on` file
    /// changed in this apply). Returns the fields that changed (empty: it already matched).
    ///
    /// # Guarantees
    /// Idempotent: a container that runs as declared is left running, untouched, and `restart`
    /// restarts it once. A container the mesh did not make is never changed.
    ///
    /// # Errors
    /// Why it could not.
    fn apply(&self, declared: &DeclaredContainer<'_>, restart: bool)
        -> Result<Vec<String>, String>;

    /// Removes a container the mesh made and no longer declares, never a mount's data. Returns
    /// what was done.
    ///
    /// # Errors
    /// Why it could not.
    fn remove(&self, name: &str) -> Result<String, String>;

    /// Stops a container the mesh made (a maintenance window holds it still).
    ///
    /// # Errors
    /// Why it could not, including that the mesh did not make it.
    fn stop(&self, name: &str) -> Result<(), String>;

    /// Starts a container the mesh made (a no-op when it runs).
    ///
    /// # Errors
    /// Why it could not, including that the mesh did not make it.
    fn start(&self, name: &str) -> Result<(), String>;
}

/// The runtime of a host configured without container support: says so for every container.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoContainerRuntime;

/// The reason [`NoContainerRuntime`] gives.
pub const NOT_SUPPORTED: &str = "not supported yet";

impl ContainerRuntime for NoContainerRuntime {
    fn check(&self, _declared: &DeclaredContainer<'_>) -> Result<(), String> {
        Err(NOT_SUPPORTED.to_owned())
    }

    fn apply(
        &self,
        _declared: &DeclaredContainer<'_>,
        _restart: bool,
    ) -> Result<Vec<String>, String> {
        Err(NOT_SUPPORTED.to_owned())
    }

    fn remove(&self, _name: &str) -> Result<String, String> {
        Err(NOT_SUPPORTED.to_owned())
    }

    fn stop(&self, _name: &str) -> Result<(), String> {
        Err(NOT_SUPPORTED.to_owned())
    }

    fn start(&self, _name: &str) -> Result<(), String> {
        Err(NOT_SUPPORTED.to_owned())
    }
}
