//! The seam for containers (the rule “The host touches only its own containers”):
//! [`ContainerRuntime`]. The real one is [`crate::Podman`]; [`NoContainerRuntime`] reports every
//! container `failed{reason: "not supported"}` rather than pretend, for hosts configured without
//! containers.
//!
//! A runtime is passed to [`crate::apply_with`] in [`crate::Seams`]; [`crate::apply`] picks one
//! from [`crate::HostConfig::containers`]. The engine orders a container after the files named in
//! its `restart_on` (and after the whole together group they belong to), and tells the runtime
//! whether one of them changed in this apply, so a restart happens only once its group is whole.

use crate::state::ContainerWas;
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
/// belongs to commits (the rule “Resources declared together apply all-or-nothing”): put back
/// ([`ContainerRuntime::restore`]) if the group does not apply whole, let go once it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAside {
    /// The name it is kept under (`<name>.mesh-old`).
    pub kept_as: String,
    /// The fields its replacement changes (what the apply reports).
    pub changed: Vec<String>,
}

/// How a job's container ended ([`ContainerRuntime::run_job`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRun {
    /// Its main process's exit code.
    pub exit_code: i32,
    /// The last lines of its log, joined with ` | ` (`(empty)` when it wrote nothing).
    pub log: String,
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

    /// Whether the container runs as declared, changing nothing: this host made it for this
    /// resource, it runs, and its spec is the declared one, so that bringing it to its spec
    /// (without a restart) would change nothing. An apply asks first, so that one that changes
    /// nothing never says `mid-change` (the rule “Mid-change is said before anything
    /// changes”). The default, for a runtime that cannot tell: no (the apply says it changes).
    ///
    /// # Errors
    /// Why it could not be asked (the apply then brings it to its spec, and says so).
    fn runs_as_declared(&self, _declared: &DeclaredContainer<'_>) -> Result<bool, String> {
        Ok(false)
    }

    /// Whether there is a container this host made for the resource, whatever it runs,
    /// changing nothing: one made by an apply that then failed its judgement is the mesh's to
    /// judge again and to remove once undeclared. The default, for a runtime that cannot tell:
    /// no.
    ///
    /// # Errors
    /// Why it could not be asked.
    fn made(&self, _declared: &DeclaredContainer<'_>) -> Result<bool, String> {
        Ok(false)
    }

    /// Judges again, changing nothing, a container the mesh made whose last judgement failed (the
    /// rule “A container is applied only when it runs”): after its settle time it must be running,
    /// not restarted meanwhile by its restart policy, and its health command, if it declares one,
    /// must pass within its deadline. A failed judgement is never forgotten because the container
    /// was not changed since: it is judged on every apply until it passes. The default, for a
    /// runtime that cannot judge: it did not pass.
    ///
    /// # Errors
    /// Why it did not pass (its exit code and log, or its health command's answer).
    fn judge_again(&self, declared: &DeclaredContainer<'_>) -> Result<(), String> {
        Err(format!(
            "container `{}` cannot be judged again by this runtime",
            declared.spec.name
        ))
    }

    /// Removes a container the mesh made and no longer declares, never a mount's data. Returns
    /// what was done.
    ///
    /// # Errors
    /// Why it could not.
    fn remove(&self, name: &str) -> Result<String, String>;

    /// Runs a job's container to its end, for at most `timeout_secs`, and removes it: how it
    /// ended. A container of its name the mesh made for the job (left by a run the host did
    /// not see end) is removed first; one it did not make is never touched. The default, for
    /// a runtime without containers: that it has none.
    ///
    /// # Errors
    /// Why it could not be run to its end (a job that ran past its timeout is stopped).
    fn run_job(
        &self,
        declared: &DeclaredContainer<'_>,
        _timeout_secs: u64,
    ) -> Result<JobRun, String> {
        Err(format!("job `{}`: {NOT_SUPPORTED}", declared.spec.name))
    }

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

    /// Before its together group commits, changing nothing: what the container is now, as
    /// [`ContainerRuntime::restore`] needs it to put it back (kept in the group's record,
    /// `group-commit.json`, before the first commit step). The default, for a runtime that
    /// cannot tell: an error (its containers cannot be in a together group).
    ///
    /// # Errors
    /// Why it cannot tell.
    fn before_commit(&self, declared: &DeclaredContainer<'_>) -> Result<ContainerWas, String> {
        Err(format!(
            "container `{}` cannot be in a together group with this runtime",
            declared.spec.name
        ))
    }

    /// Before its together group commits: when bringing the container to its spec would replace
    /// it (its spec changed), stops the one there and keeps it under another name, so that
    /// [`ContainerRuntime::restore`] can give it back if the group does not apply whole.
    /// `None`: nothing to keep (no container there, or its spec is the declared one). The
    /// default keeps nothing.
    ///
    /// # Errors
    /// Why it could not (nothing was changed then, or the container runs as it did).
    fn set_aside(&self, _declared: &DeclaredContainer<'_>) -> Result<Option<SetAside>, String> {
        Ok(None)
    }

    /// Puts the container named `name` (made for `resource`) back to what it was before its
    /// together group's commit (`was`, from [`ContainerRuntime::before_commit`]), wherever that
    /// commit stopped — in this process when another member failed, or after a host was killed
    /// in the middle (the rule “Resources declared together apply all-or-nothing”): a container the
    /// commit created is removed, one it started is stopped, and one it replaced gets its name back
    /// from the kept `<name>.mesh-old` (only the container with the recorded id) and is started if
    /// it ran, its replacement removed.
    ///
    /// # Guarantees
    /// Idempotent; a container the mesh did not make is never changed.
    ///
    /// # Errors
    /// Why it could not (the next apply tries again).
    fn restore(&self, _resource: &str, name: &str, _was: &ContainerWas) -> Result<(), String> {
        Err(format!(
            "container `{name}` cannot be put back by this runtime"
        ))
    }

    /// Once its group applied whole: removes the container set aside.
    ///
    /// # Errors
    /// Why it could not.
    fn let_go(&self, _aside: &SetAside) -> Result<(), String> {
        Ok(())
    }

    /// After an interrupted apply: removes `<name>.mesh-old`, a container kept aside by a
    /// together group that was whole when the host stopped (its record gone) — only when this
    /// host's mesh made it. Returns what was done, `None` when there was nothing to remove.
    /// The default removes nothing.
    ///
    /// # Errors
    /// Why it could not.
    fn let_go_leftover(&self, _name: &str) -> Result<Option<String>, String> {
        Ok(None)
    }

    /// Makes the podman network `name` for resource `resource` of `module` when it is not there
    /// (labelled as the host's own). Returns what changed (`created`; empty: it was there, made
    /// by this host for this resource).
    ///
    /// # Errors
    /// Why it could not, including that a network of that name is there that the mesh did not
    /// make (it is left alone). The default, for a runtime without networks: that it has none.
    fn ensure_network(
        &self,
        _resource: &str,
        _module: &str,
        name: &str,
    ) -> Result<Vec<String>, String> {
        Err(format!("network `{name}`: {NOT_SUPPORTED}"))
    }

    /// Whether the network `name` is there, made by this host for `resource`, changing nothing
    /// (as [`ContainerRuntime::runs_as_declared`] for a container). The default: no.
    ///
    /// # Errors
    /// Why it could not be asked.
    fn network_made(&self, _resource: &str, _name: &str) -> Result<bool, String> {
        Ok(false)
    }

    /// Removes the network `name` the mesh made and no longer declares; a network the mesh did
    /// not make is left alone, and that is said. Returns what was done.
    ///
    /// # Errors
    /// Why it could not (a container the mesh did not make still joins it, say).
    fn remove_network(&self, name: &str) -> Result<String, String> {
        Ok(format!(
            "network `{name}` was not removed: this host runs no containers"
        ))
    }

    /// Whether a container the host made runs, changing nothing (drift, the rule “Drift is seen,
    /// and reported even when corrected”): `None` when it runs, else what was found instead
    /// (`exited with code N …; the last lines of its log: …`, or that it is gone). The default, for
    /// a runtime that cannot tell: `None`.
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
