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

/// A container kept, stopped and under another name, while the together group its replacement
/// belongs to commits (rule 5): put back if the group does not apply whole, let go once it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAside {
    /// The name it is kept under (`<name>.mesh-old`).
    pub kept_as: String,
    /// The fields its replacement changes (what the apply reports).
    pub changed: Vec<String>,
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

    /// Before its together group commits: when bringing the container to its spec would replace
    /// it (its spec changed), stops the one there and keeps it under another name, so that
    /// [`ContainerRuntime::put_back`] can give it back if the group does not apply whole.
    /// `None`: nothing to keep (no container there, or its spec is the declared one). The
    /// default keeps nothing.
    ///
    /// # Errors
    /// Why it could not (nothing was changed then, or the container runs as it did).
    fn set_aside(&self, _declared: &DeclaredContainer<'_>) -> Result<Option<SetAside>, String> {
        Ok(None)
    }

    /// Gives a container set aside back: removes its replacement, if any, gives it its name
    /// back and starts it.
    ///
    /// # Errors
    /// Why it could not.
    fn put_back(&self, declared: &DeclaredContainer<'_>, _aside: &SetAside) -> Result<(), String> {
        Err(format!(
            "container `{}` cannot be put back by this runtime",
            declared.spec.name
        ))
    }

    /// Once its group applied whole: removes the container set aside.
    ///
    /// # Errors
    /// Why it could not.
    fn let_go(&self, _aside: &SetAside) -> Result<(), String> {
        Ok(())
    }

    /// Whether a container the host made runs, changing nothing (drift, rule 28): `None` when
    /// it runs, else what was found instead (`exited with code N …; the last lines of its
    /// log: …`, or that it is gone). The default, for a runtime that cannot tell: `None`.
    ///
    /// # Errors
    /// Why it could not be asked.
    fn examine(&self, _name: &str) -> Result<Option<String>, String> {
        Ok(None)
    }
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
