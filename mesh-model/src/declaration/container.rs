//! A container resource: how the host runs it under podman.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A container under podman.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ContainerSpec {
    /// The container's name on the machine.
    pub name: String,
    /// The image reference.
    pub image: String,
    /// Command and arguments (empty: the image's).
    #[serde(default)]
    pub command: Vec<String>,
    /// Environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Host directories mounted into it.
    #[serde(default)]
    pub mounts: Vec<Mount>,
    /// Ids of files whose change in an apply restarts it.
    #[serde(default)]
    pub restart_on: Vec<String>,
    /// Milliseconds the host waits after creating, starting or restarting it before it judges
    /// it (rule 29); absent: [`DEFAULT_SETTLE_MS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle_ms: Option<u64>,
    /// A command that must pass inside it (`podman exec`) for it to be healthy, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthCheck>,
}

/// The settle time of a container that declares none (2 s).
pub const DEFAULT_SETTLE_MS: u64 = 2000;

/// The time a health command has to pass when none is declared (30 s).
pub const DEFAULT_HEALTH_WITHIN_MS: u64 = 30_000;

impl ContainerSpec {
    /// Its settle time in milliseconds (declared, or [`DEFAULT_SETTLE_MS`]).
    pub fn settle_ms(&self) -> u64 {
        self.settle_ms.unwrap_or(DEFAULT_SETTLE_MS)
    }
}

/// A container's health command: run inside it until it exits 0, for at most `within_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct HealthCheck {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Milliseconds it has to pass after the container settled.
    pub within_ms: u64,
}

/// A host directory mounted into a container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Mount {
    /// The place it comes from (its name in the module).
    pub place: String,
    /// The host directory.
    pub source: String,
    /// The path inside the container.
    pub at: String,
    /// Read-only.
    #[serde(default)]
    pub read_only: bool,
}
