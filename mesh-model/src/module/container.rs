//! A module's containers and jobs: what `[containers.NAME]` and `[jobs.NAME]` say (one
//! [`ContainerDefinition`]), and the checks of it.

use super::{check_absolute, check_name, parse_duration_ms, ModuleDefinition};
use crate::declaration::{
    capability_problem, cpus_problem, label_problem, memory_problem, restart_problem, user_problem,
    Device, PortMapping, NETWORK_BRIDGE, NETWORK_HOST,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A mount of a place into a container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct MountDefinition {
    /// The place mounted (one the module declares).
    pub place: String,
    /// Where inside the container.
    pub at: String,
    /// Mounted read-only.
    #[serde(default)]
    pub read_only: bool,
}

/// A container the module runs under podman: one that serves (`[containers.NAME]`), or one it
/// runs to completion (`[jobs.NAME]`), such as a migration, which must exit 0 and which what
/// names it in `after` waits for. A job runs again only when its image, command, environment or
/// a file in `rerun-on` changes.
///
/// Both say how the container runs with the same keys; what only serves (ports, a restart
/// policy, a stop timeout, a health command, a settle time, `restart-on`) a job may not say, and
/// what only a job says (`rerun-on`, `timeout`) a container may not: [`check_container`] and
/// [`check_job`] name such a key.
///
/// Each key may be left out: a missing `image` is named by the check, with every other problem.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ContainerDefinition {
    /// The image reference (required).
    pub image: String,
    /// The command and its arguments (default: the image's).
    pub command: Vec<String>,
    /// Environment variables (values may use settings).
    pub env: BTreeMap<String, String>,
    /// Places mounted into it.
    pub mounts: Vec<MountDefinition>,
    /// Files of this module whose change restarts the container.
    pub restart_on: Vec<String>,
    /// How long after it is created, started or restarted the host judges it (`"2s"`,
    /// `"500ms"`, `"1m"`; default 2 s).
    pub settle: Option<String>,
    /// A command that must pass inside it for it to be healthy.
    pub health: Option<HealthDefinition>,
    /// Ports it publishes, in podman's form `[ADDRESS:]HOST-PORT:CONTAINER-PORT[/PROTOCOL]`
    /// (each may use settings).
    pub ports: Vec<String>,
    /// `bridge`, `host`, or a network the module declares (`[networks.NAME]`); absent: `bridge`
    /// when it publishes a port, podman's own default otherwise.
    pub network: Option<String>,
    /// The user it runs as: `UID[:GID]` or a name (may use settings).
    pub user: Option<String>,
    /// Memory limit (`64m`).
    pub memory: Option<String>,
    /// CPU limit (`0.5`, `2`; a number or its text).
    #[serde(deserialize_with = "text_or_number")]
    pub cpus: Option<String>,
    /// Process limit.
    pub pids: Option<u32>,
    /// Capabilities added.
    pub cap_add: Vec<String>,
    /// Capabilities dropped.
    pub cap_drop: Vec<String>,
    /// A read-only root filesystem (its mounts keep their own flag).
    #[serde(rename = "read-only")]
    pub read_only_root: bool,
    /// The working directory (may use settings).
    pub workdir: Option<String>,
    /// The entrypoint in place of the image's (each may use settings).
    pub entrypoint: Option<Vec<String>>,
    /// Labels of its own (values may use settings).
    pub labels: BTreeMap<String, String>,
    /// How long podman waits after SIGTERM before it kills it (`"20s"`).
    pub stop_timeout: Option<String>,
    /// Podman's restart policy for a crash (`on-failure`, `always`, …; default `no`).
    pub restart: Option<String>,
    /// Host devices it reaches (`source` may use settings: a node maps its own device path).
    pub devices: Vec<Device>,
    /// Resources of this module (`kind/NAME`, such as `job/migrate`) it comes after: it waits
    /// until they have applied (a job: succeeded).
    pub after: Vec<String>,
    /// A job's: the files of this module (`file/NAME`) whose change runs it again.
    pub rerun_on: Vec<String>,
    /// A job's: how long it may run before it is stopped and failed (`"30s"`, `"5m"`; default
    /// 10 m).
    pub timeout: Option<String>,
}

impl ContainerDefinition {
    /// A job's timeout in seconds, when it declares one that is a duration (rounded up).
    pub fn timeout_secs(&self) -> Option<u64> {
        self.timeout
            .as_deref()
            .and_then(parse_duration_ms)
            .map(|ms| ms.div_ceil(1000))
    }
}

/// A number written as TOML text or as a number, kept as its text.
pub(super) fn text_or_number<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum TextOrNumber {
        Text(String),
        Whole(u64),
        Decimal(f64),
    }
    Ok(
        Option::<TextOrNumber>::deserialize(deserializer)?.map(|value| match value {
            TextOrNumber::Text(text) => text,
            TextOrNumber::Whole(n) => n.to_string(),
            TextOrNumber::Decimal(n) => n.to_string(),
        }),
    )
}

/// A container's health command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct HealthDefinition {
    /// The command and its arguments (values may use settings).
    pub command: Vec<String>,
    /// How long it has to pass after the container settled (default 30 s).
    #[serde(default)]
    pub within: Option<String>,
}

/// A text field's check: its template references name settings the module has.
pub(super) type CheckText<'c> = dyn Fn(String, &str, &mut dyn FnMut(String, String)) + 'c;

/// Checks the container `name` of module `d` (its key is `key`, `containers.<name>`): how it
/// runs, and that it says nothing only a job says.
pub(super) fn check_container(
    key: &str,
    name: &str,
    c: &ContainerDefinition,
    d: &ModuleDefinition,
    say: &mut dyn FnMut(String, String),
    check_text: &CheckText<'_>,
) {
    for (field, said) in [
        ("rerun-on", !c.rerun_on.is_empty()),
        ("timeout", c.timeout.is_some()),
    ] {
        if said {
            say(
                format!("{key}.{field}"),
                "only a job says this (`[jobs.NAME]`): a container is not run to its end".into(),
            );
        }
    }
    check_run(key, name, c, d, say, check_text);
}

/// Checks the job `name` of module `d` (its key is `key`, `jobs.<name>`): how its container
/// runs, as a container's, and what a job alone says.
pub(super) fn check_job(
    key: &str,
    name: &str,
    job: &ContainerDefinition,
    d: &ModuleDefinition,
    say: &mut dyn FnMut(String, String),
    check_text: &CheckText<'_>,
) {
    for (field, said, why) in [
        ("ports", !job.ports.is_empty(), "a job publishes no port"),
        (
            "restart",
            job.restart.is_some(),
            "a job has no restart policy (it is retried with backoff)",
        ),
        (
            "stop-timeout",
            job.stop_timeout.is_some(),
            "a job is stopped at its `timeout`",
        ),
        (
            "health",
            job.health.is_some(),
            "a job has no health command: it exits",
        ),
        (
            "settle",
            job.settle.is_some(),
            "a job has no settle time: it exits",
        ),
        (
            "restart-on",
            !job.restart_on.is_empty(),
            "a job names the files it runs again on in `rerun-on`",
        ),
    ] {
        if said {
            say(format!("{key}.{field}"), why.into());
        }
    }
    check_run(key, name, job, d, say, check_text);
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

/// Checks how the container `name` (a container's or a job's, at `key`) runs.
fn check_run(
    key: &str,
    name: &str,
    c: &ContainerDefinition,
    d: &ModuleDefinition,
    say: &mut dyn FnMut(String, String),
    check_text: &CheckText<'_>,
) {
    check_name(key, name, say);
    check_text(format!("{key}.image"), &c.image, say);
    if c.image.trim().is_empty() {
        say(format!("{key}.image"), "an image is required".into());
    }
    for (i, arg) in c.command.iter().enumerate() {
        check_text(format!("{key}.command[{i}]"), arg, say);
    }
    for (var, value) in &c.env {
        check_text(format!("{key}.env.{var}"), value, say);
    }
    let mut ats = BTreeSet::new();
    for (i, mount) in c.mounts.iter().enumerate() {
        if !d.places.contains_key(&mount.place) {
            say(
                format!("{key}.mounts[{i}].place"),
                format!(
                    "mounts the place `{}`, which the module does not declare",
                    mount.place
                ),
            );
        }
        check_absolute(&format!("{key}.mounts[{i}].at"), &mount.at, say);
        if !ats.insert(mount.at.clone()) {
            say(
                format!("{key}.mounts[{i}].at"),
                format!("two mounts at `{}`", mount.at),
            );
        }
    }
    for (i, f) in c.restart_on.iter().enumerate() {
        if !d.files.contains_key(f) {
            say(
                format!("{key}.restart-on[{i}]"),
                format!("restarts on the file `{f}`, which the module does not declare"),
            );
        }
    }
    let durations = [
        (format!("{key}.settle"), c.settle.as_ref()),
        (
            format!("{key}.health.within"),
            c.health.as_ref().and_then(|h| h.within.as_ref()),
        ),
    ];
    for (at, text) in durations {
        if let Some(text) = text.filter(|t| parse_duration_ms(t).is_none()) {
            say(
                at,
                format!("`{text}` is not a duration (a whole number and `ms`, `s` or `m`)"),
            );
        }
    }
    if let Some(health) = &c.health {
        if health.command.is_empty() {
            say(
                format!("{key}.health.command"),
                "a health command needs at least the program".into(),
            );
        }
        for (i, arg) in health.command.iter().enumerate() {
            check_text(format!("{key}.health.command[{i}]"), arg, say);
        }
    }
    let refs = d.resource_refs();
    for (i, reference) in c.after.iter().enumerate() {
        if !refs.contains(reference) {
            say(
                format!("{key}.after[{i}]"),
                format!("`{reference}` is not a resource of this module (expected kind/name)"),
            );
        }
    }
    check_serving(key, c, d, say, check_text);
}

/// Checks what a container that serves says: its ports, network, user, limits and the rest. A
/// text that uses settings is checked once rendered, when a node's declaration is composed.
fn check_serving(
    key: &str,
    c: &ContainerDefinition,
    d: &ModuleDefinition,
    say: &mut dyn FnMut(String, String),
    check_text: &CheckText<'_>,
) {
    let fixed = |text: &str| !text.contains("{{");
    let host = c.network.as_deref() == Some(NETWORK_HOST);
    let mut ports: Vec<PortMapping> = Vec::new();
    for (i, port) in c.ports.iter().enumerate() {
        let at = format!("{key}.ports[{i}]");
        check_text(at.clone(), port, say);
        if !fixed(port) {
            continue;
        }
        match PortMapping::parse(port) {
            Ok(parsed) => {
                if host && parsed.host_port != parsed.port {
                    say(
                        at.clone(),
                        format!(
                            "`{port}`: with `network = \"host\"` a container's port is the \
                             host's; the two ports must be equal"
                        ),
                    );
                }
                if let Some(other) = ports.iter().find(|p| p.collides_with(&parsed)) {
                    say(
                        at,
                        format!(
                            "`{other}` and `{parsed}` both take host port {}",
                            parsed.host_side()
                        ),
                    );
                }
                ports.push(parsed);
            }
            Err(problem) => say(at, problem),
        }
    }
    let mut problems: Vec<(String, Option<String>)> = vec![
        (
            format!("{key}.network"),
            c.network
                .as_deref()
                .filter(|n| {
                    *n != NETWORK_BRIDGE && *n != NETWORK_HOST && !d.networks.contains_key(*n)
                })
                .map(|n| {
                    format!("`{n}` is not a network: `bridge`, `host`, or one the module declares")
                }),
        ),
        (
            format!("{key}.user"),
            c.user
                .as_deref()
                .filter(|u| fixed(u))
                .and_then(user_problem),
        ),
        (
            format!("{key}.memory"),
            c.memory.as_deref().and_then(memory_problem),
        ),
        (
            format!("{key}.cpus"),
            c.cpus.as_deref().and_then(cpus_problem),
        ),
        (
            format!("{key}.pids"),
            (c.pids == Some(0)).then(|| "a pids limit of 0 lets nothing run".to_owned()),
        ),
        (
            format!("{key}.restart"),
            c.restart.as_deref().and_then(restart_problem),
        ),
        (
            format!("{key}.stop-timeout"),
            c.stop_timeout
                .as_ref()
                .filter(|t| parse_duration_ms(t).is_none())
                .map(|t| format!("`{t}` is not a duration (a whole number and `ms`, `s` or `m`)")),
        ),
        (
            format!("{key}.entrypoint"),
            c.entrypoint
                .as_ref()
                .is_some_and(Vec::is_empty)
                .then(|| "an entrypoint needs at least the program".to_owned()),
        ),
    ];
    for (i, cap) in c.cap_add.iter().enumerate() {
        problems.push((format!("{key}.cap-add[{i}]"), capability_problem(cap)));
    }
    for (i, cap) in c.cap_drop.iter().enumerate() {
        problems.push((format!("{key}.cap-drop[{i}]"), capability_problem(cap)));
    }
    for name in c.labels.keys() {
        problems.push((format!("{key}.labels.{name}"), label_problem(name)));
    }
    for (i, device) in c.devices.iter().enumerate() {
        let at = format!("{key}.devices[{i}]");
        check_text(format!("{at}.source"), &device.source, say);
        // A source that uses settings is checked once rendered.
        let rendered = Device {
            source: if fixed(&device.source) {
                device.source.clone()
            } else {
                "/dev/rendered".to_owned()
            },
            ..device.clone()
        };
        for problem in rendered.problems() {
            problems.push((at.clone(), Some(problem)));
        }
    }
    for (at, problem) in problems {
        if let Some(problem) = problem {
            say(at, problem);
        }
    }
    if let Some(user) = &c.user {
        check_text(format!("{key}.user"), user, say);
    }
    if let Some(workdir) = &c.workdir {
        check_text(format!("{key}.workdir"), workdir, say);
        if fixed(workdir) && !workdir.starts_with('/') {
            say(
                format!("{key}.workdir"),
                format!("`{workdir}` is not an absolute path"),
            );
        }
    }
    for (i, arg) in c.entrypoint.iter().flatten().enumerate() {
        check_text(format!("{key}.entrypoint[{i}]"), arg, say);
    }
    for (name, value) in &c.labels {
        check_text(format!("{key}.labels.{name}"), value, say);
    }
}
