//! The host's apply engine: brings a machine (a root prefix) to what its declaration says, and
//! reports truthfully what took.
//!
//! Start with [`apply`] (the whole contract is in its docs), then [`HostConfig`] and
//! [`RetryPolicy`]. The IO seams are small traits: [`Accounts`] (group memberships, real
//! implementation [`ShadowUtils`]) and [`ContainerRuntime`] (containers, real implementation
//! [`Podman`], chosen by [`HostConfig::containers`]); [`apply_with`] takes them explicitly.
//! Maintenance windows (a step run with containers held still) are in [`window`].
//!
//! What the host keeps between applies lives in its state directory, in versioned disk formats of
//! their own (see the `state` module): per resource whether the mesh **made** it or **found** it
//! (and what it found), the failures being retried with backoff, a marker saying an apply is
//! under way (the machine is **mid-change** while it exists), and the open maintenance windows
//! ([`window`]).
//!
//! # Invariants
//! - Every declared machine path is applied under [`HostConfig::root`]; nothing outside the
//!   declared paths (and the temporary files beside them) is touched.
//! - It never destroys what it did not make: what it found is recorded before anything is changed
//!   and given back when the resource is undeclared (the rule “The host never destroys what it did
//!   not make”).
//! - It never follows a symbolic link, and never manages one (the rule “No symbolic links to move
//!   data”).
//! - An apply is not a transaction, except for a together group (the rules “An apply is not a
//!   transaction” and “Resources declared together apply all-or-nothing”); only what took is
//!   recorded as applied.
//! - Every write under the root and in the state directory is atomic (temp file, fsync, rename).
//! - It reads the clock never: `now` is an argument.

mod accounts;
mod containers;
pub mod drift;
mod engine;
pub mod filebucket;
mod fsops;
mod order;
mod outcomes;
mod paths;
mod podman;
pub mod progress;
pub mod sealed;
pub mod stamps;
pub mod state;
pub mod window;

pub use accounts::{
    AccountDatabase, AccountSource, Accounts, AccountsError, GroupEntry, ShadowUtils, UserEntry,
};
pub use containers::{
    ContainerRuntime, DeclaredContainer, JobRun, NoContainerRuntime, SetAside, NOT_SUPPORTED,
};
pub use engine::{
    apply, apply_archived, apply_archived_live, apply_archived_with, apply_with,
    put_back_interrupted_group, put_back_interrupted_group_with, ArchivedContents, Seams,
};
pub use podman::{
    ContainerStatus, Podman, PodmanConfig, PodmanError, RunFields, RunMount, RunSpec, LABEL_HOST,
    LABEL_MADE_BY, LABEL_MODULE, LABEL_RESOURCE, LABEL_SPEC, LABEL_SPEC_DIGEST, MADE_BY,
    RUN_SPEC_FORMAT,
};
pub use progress::{ApplyProgress, NoProgress};
pub use state::{is_mid_change, ContainerWas};

use std::path::PathBuf;

/// Where a host applies and keeps its state, and how it retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfig {
    /// The root prefix every machine path is applied under (`/` on a real machine, a sandbox
    /// directory in tests and the demo).
    pub root: PathBuf,
    /// The host's own state directory (what it made and found, failures, the mid-change marker).
    pub state_dir: PathBuf,
    /// When failed resources are retried and when they are called stuck.
    pub retry: RetryPolicy,
    /// The container runtime [`apply`] uses.
    pub containers: ContainerRuntimeChoice,
    /// Put before every declared container's name to make its name on this machine (empty by
    /// default: the declared name, `mesh-<module>-<container>`). Two hosts sharing one
    /// machine's podman (the embedded mode, tests) each need their own, or they collide on
    /// names: each refuses the other's container as made by another host. A report, a window
    /// and the state name containers by their name on the machine.
    pub container_prefix: String,
}

/// Whether `prefix` may start a container's name (`[A-Za-z0-9][A-Za-z0-9_.-]*`, as podman
/// requires), or is empty.
pub fn is_container_prefix(prefix: &str) -> bool {
    let mut chars = prefix.chars();
    match chars.next() {
        None => true,
        Some(first) => {
            first.is_ascii_alphanumeric()
                && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        }
    }
}

/// Which container runtime [`apply`] uses (the rule “The host touches only its own containers”).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerRuntimeChoice {
    /// Real podman ([`Podman`]), mount sources under [`HostConfig::root`]. The default. When
    /// `podman` is not installed, each container is reported
    /// `failed{reason: "podman is not installed"}`; nothing else is affected.
    Podman(PodmanConfig),
    /// No container support ([`NoContainerRuntime`]): each container is reported
    /// `failed{reason: "not supported yet"}`.
    Unsupported,
}

impl Default for ContainerRuntimeChoice {
    /// [`ContainerRuntimeChoice::Podman`] with [`PodmanConfig::from_environment`]: podman from
    /// `PATH`, with the `podman run` arguments in `MESH_PODMAN_ULIMITS` when it is set.
    fn default() -> Self {
        ContainerRuntimeChoice::Podman(PodmanConfig::from_environment())
    }
}

impl Default for HostConfig {
    /// Root `/`, state directory `/var/lib/mesh-host`, the default [`RetryPolicy`], the default
    /// [`ContainerRuntimeChoice`] (podman), no container prefix.
    fn default() -> Self {
        HostConfig {
            root: PathBuf::from("/"),
            state_dir: PathBuf::from("/var/lib/mesh-host"),
            retry: RetryPolicy::default(),
            containers: ContainerRuntimeChoice::default(),
            container_prefix: String::new(),
        }
    }
}

/// When a failed resource is tried again, and when it is reported **stuck** (the rule “A resource
/// that keeps failing is stuck”).
///
/// After its `n`-th consecutive failure a resource waits `initial_backoff_secs × 2^(n-1)` seconds
/// (at most `max_backoff_secs`) before the next apply tries it again; until then it is reported
/// `waiting`. It is reported `stuck` instead of `failed` once it has failed at least
/// `stuck_after_attempts` times **and** its first failure is at least `stuck_after_secs` old. It
/// stays stuck until it applies or its declaration changes (a changed declaration starts afresh).
///
/// The defaults: first retry after 30 s, doubling up to 1 hour; stuck after 5 attempts and
/// 10 minutes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The wait after the first failure, in seconds.
    pub initial_backoff_secs: u64,
    /// The longest wait between two attempts, in seconds.
    pub max_backoff_secs: u64,
    /// Consecutive failures before a resource can be stuck.
    pub stuck_after_attempts: u32,
    /// Seconds since the first failure before a resource can be stuck.
    pub stuck_after_secs: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial_backoff_secs: 30,
            max_backoff_secs: 3600,
            stuck_after_attempts: 5,
            stuck_after_secs: 600,
        }
    }
}

impl RetryPolicy {
    /// The wait after the `attempts`-th consecutive failure.
    pub fn backoff_secs(&self, attempts: u32) -> u64 {
        let doublings = attempts.saturating_sub(1).min(63);
        self.initial_backoff_secs
            .saturating_mul(1u64 << doublings)
            .min(self.max_backoff_secs)
    }

    /// Whether a resource that failed `attempts` times, first at `since`, is stuck at `now`.
    pub fn is_stuck(&self, attempts: u32, since: u64, now: u64) -> bool {
        attempts >= self.stuck_after_attempts && now.saturating_sub(since) >= self.stuck_after_secs
    }
}

/// Why an apply could not run at all. When one is returned, nothing under the root changed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The declaration breaks the declaration rules (every problem listed).
    #[error("the declaration for `{node}` is invalid: {}", problems.join("; "))]
    Declaration {
        /// The node it is for.
        node: String,
        /// Every rule it breaks.
        problems: Vec<String>,
    },
    /// The state directory could not be read.
    #[error("cannot read the host state at {}", path.display())]
    StateRead {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The state directory could not be written.
    #[error("cannot write the host state at {}", path.display())]
    StateWrite {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A state file holds something this build does not read.
    #[error("the host state file {} is unreadable: {reason}", path.display())]
    StateFormat {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A together group left mid-commit (`group-commit.json`) could not be put back; its record
    /// and what it kept stay, and the next apply tries again.
    #[error(
        "together group `{group}` was left in the middle of its commit and cannot be put back \
         (its record `group-commit.json` stays, and the next apply tries again): {reason}"
    )]
    GroupPutBack {
        /// The group (`<module>/<group>`).
        group: String,
        /// What could not be put back, and why.
        reason: String,
    },
}
