//! A module's jobs: what `[jobs.NAME]` says, and the checks of it.

use super::container::{check_container, CheckText, ContainerDefinition, MountDefinition};
use super::{parse_duration_ms, DeviceDefinition, ModuleDefinition};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A container the module runs to completion (`[jobs.NAME]`), such as a migration: it must exit
/// 0, and what names it in `after` waits until it has. It runs again only when its image,
/// command, environment or a file in `rerun-on` changes.
///
/// It says what a container says, but for what serves (ports, a restart policy, a health
/// command, a settle time, `restart-on`), which a job has no use for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct JobDefinition {
    /// The image reference.
    pub image: String,
    /// The command and its arguments (default: the image's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Environment variables (values may use settings).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Places mounted into it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<MountDefinition>,
    /// The files of this module (`file/NAME`) whose change runs it again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rerun_on: Vec<String>,
    /// Resources of this module (`kind/NAME`) it runs after.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// How long it may run before it is stopped and failed (`"30s"`, `"5m"`; default 10 m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// `bridge`, `host`, or a network the module declares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// The user it runs as: `UID[:GID]`, a name, or a module account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Memory limit (`64m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// CPU limit.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::container::text_or_number"
    )]
    pub cpus: Option<String>,
    /// Process limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u32>,
    /// Capabilities added.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cap_add: Vec<String>,
    /// Capabilities dropped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cap_drop: Vec<String>,
    /// A read-only root filesystem.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
    /// The working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// The entrypoint in place of the image's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// Labels of its own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Host devices it reaches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceDefinition>,
}

impl JobDefinition {
    /// The container it runs, as a container definition says it (checked and composed as one).
    pub fn container(&self) -> ContainerDefinition {
        ContainerDefinition {
            image: self.image.clone(),
            command: self.command.clone(),
            env: self.env.clone(),
            mounts: self.mounts.clone(),
            restart_on: Vec::new(),
            settle: None,
            health: None,
            ports: Vec::new(),
            network: self.network.clone(),
            user: self.user.clone(),
            memory: self.memory.clone(),
            cpus: self.cpus.clone(),
            pids: self.pids,
            cap_add: self.cap_add.clone(),
            cap_drop: self.cap_drop.clone(),
            read_only: self.read_only,
            workdir: self.workdir.clone(),
            entrypoint: self.entrypoint.clone(),
            labels: self.labels.clone(),
            stop_timeout: None,
            restart: None,
            devices: self.devices.clone(),
            after: self.after.clone(),
        }
    }

    /// Its timeout in seconds, when it declares one that is a duration (rounded up).
    pub fn timeout_secs(&self) -> Option<u64> {
        self.timeout
            .as_deref()
            .and_then(parse_duration_ms)
            .map(|ms| ms.div_ceil(1000))
    }
}

/// Checks the job `name` of module `d` (its key is `key`, `jobs.<name>`).
pub(super) fn check_job(
    key: &str,
    name: &str,
    job: &JobDefinition,
    d: &ModuleDefinition,
    say: &mut dyn FnMut(String, String),
    check_text: &CheckText<'_>,
) {
    check_container(key, name, &job.container(), d, say, check_text);
    for (i, file) in job.rerun_on.iter().enumerate() {
        let named = file.strip_prefix("file/");
        if !named.is_some_and(|f| d.files.contains_key(f)) {
            say(
                format!("{key}.rerun-on[{i}]"),
                format!("runs again on `{file}`, which is not a file of this module (file/NAME)"),
            );
        }
    }
    if let Some(timeout) = &job.timeout {
        if job.timeout_secs().is_none_or(|secs| secs == 0) {
            say(
                format!("{key}.timeout"),
                format!("`{timeout}` is not a duration longer than 0 (such as `30s` or `5m`)"),
            );
        }
    }
}
