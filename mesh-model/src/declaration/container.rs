//! A container resource: how the host runs it under podman.

use super::port::PortMapping;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A container under podman.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
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
    /// it (*a container is applied only when it runs*); absent: [`DEFAULT_SETTLE_MS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle_ms: Option<u64>,
    /// A command that must pass inside it (`podman exec`) for it to be healthy, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthCheck>,
    // What follows was added later: each is absent when it says nothing, so a declaration
    // without it reads as it always did and keeps its bytes (and digest).
    /// Ports it publishes (with `network = "host"`: the host ports it listens on itself, each
    /// the same inside and out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<PortMapping>,
    /// Its network: `bridge`, `host`, or the name of a podman network; absent: podman's own
    /// default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// The user it runs as (`UID[:GID]`, or a name its image knows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Its limits.
    #[serde(default, skip_serializing_if = "Limits::is_none")]
    pub limits: Limits,
    /// Capabilities added to podman's default set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cap_add: Vec<String>,
    /// Capabilities dropped from it (`ALL`: every one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cap_drop: Vec<String>,
    /// Its root filesystem is read-only (its mounts keep their own flag).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only_root: bool,
    /// The working directory of its command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// The entrypoint in place of the image's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// Labels of its own (never in the `io.mesh.` namespace, which is the host's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Seconds podman waits after SIGTERM before it kills it when it is stopped; absent: the
    /// host's default. (On the wire `stop-timeout-secs`, as hosts have always read it.)
    #[serde(
        default,
        rename = "stop-timeout-secs",
        skip_serializing_if = "Option::is_none"
    )]
    pub stop_timeout: Option<u32>,
    /// Podman's restart policy for a crash (`no`, `on-failure`, `on-failure:N`, `always`,
    /// `unless-stopped`); absent: `no`. A crash is still reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<String>,
    /// Host devices it reaches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<Device>,
}

/// A host device a container reaches, at a path inside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Device {
    /// The device on the host (`/dev/dri/renderD128`): the machine's own, never under a root
    /// prefix.
    pub source: String,
    /// Its path inside the container.
    pub at: String,
    /// What the container may do with it: some of `r`, `w`, `m`; absent: all three.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<String>,
}

impl Device {
    /// Podman's form: `SOURCE:AT[:PERMISSIONS]`.
    pub fn podman_form(&self) -> String {
        match &self.permissions {
            Some(permissions) => format!("{}:{}:{permissions}", self.source, self.at),
            None => format!("{}:{}", self.source, self.at),
        }
    }

    /// Every rule it breaks, each a sentence.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for path in [&self.source, &self.at] {
            if !path.starts_with('/') || path.contains(':') || path.split('/').any(|s| s == "..") {
                out.push(format!(
                    "device `{path}` is not an absolute path without `:` or `..`"
                ));
            }
        }
        if let Some(permissions) = &self.permissions {
            if permissions.is_empty() || !permissions.chars().all(|c| matches!(c, 'r' | 'w' | 'm'))
            {
                out.push(format!(
                    "device permissions `{permissions}` are not some of `r`, `w` and `m`"
                ));
            }
        }
        out
    }
}

/// A container's limits; each absent says nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Limits {
    /// Memory, as podman reads it (`64m`, `1g`, a number of bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// CPUs, a decimal number (`0.5`, `2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    /// Processes (`--pids-limit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u32>,
}

impl Limits {
    /// Whether it limits nothing.
    pub fn is_none(&self) -> bool {
        *self == Limits::default()
    }
}

/// The networks a container may name besides a podman network the module declares.
pub const NETWORK_BRIDGE: &str = "bridge";
/// Host networking: the container's ports are the host's.
pub const NETWORK_HOST: &str = "host";

/// The label namespace the host keeps for itself.
pub const RESERVED_LABELS: &str = "io.mesh.";

/// Why a memory limit is not one, if it is not: a whole number with an optional unit `b`, `k`,
/// `m` or `g`.
pub fn memory_problem(text: &str) -> Option<String> {
    let digits = text.trim_end_matches(['b', 'k', 'm', 'g', 'B', 'K', 'M', 'G']);
    let unit = &text[digits.len()..];
    let sound = !digits.is_empty()
        && unit.len() <= 1
        && digits.bytes().all(|b| b.is_ascii_digit())
        && digits.parse::<u64>().is_ok_and(|n| n > 0);
    (!sound).then(|| {
        format!("`{text}` is not a memory limit (a whole number and `b`, `k`, `m` or `g`)")
    })
}

/// Why a CPU limit is not one, if it is not: a positive decimal number.
pub fn cpus_problem(text: &str) -> Option<String> {
    let (whole, part) = text.split_once('.').unwrap_or((text, "0"));
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let sound = digits(whole) && digits(part) && text.parse::<f64>().is_ok_and(|n| n > 0.0);
    (!sound).then(|| format!("`{text}` is not a number of CPUs (such as `0.5` or `2`)"))
}

/// Why a capability name is not one, if it is not: upper-case letters, digits and `_`
/// (`NET_BIND_SERVICE`, `CAP_CHOWN`, `ALL`).
pub fn capability_problem(text: &str) -> Option<String> {
    let sound = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    (!sound).then(|| format!("`{text}` is not a capability (such as `NET_BIND_SERVICE`)"))
}

/// Why a restart policy is not one, if it is not.
pub fn restart_problem(text: &str) -> Option<String> {
    let sound = match text.split_once(':') {
        Some(("on-failure", count)) => {
            !count.is_empty() && count.bytes().all(|b| b.is_ascii_digit())
        }
        Some(_) => false,
        None => matches!(text, "no" | "on-failure" | "always" | "unless-stopped"),
    };
    (!sound).then(|| {
        format!(
            "`{text}` is not a restart policy (`no`, `on-failure`, `on-failure:N`, `always`, \
             `unless-stopped`)"
        )
    })
}

/// Why a user is not one, if it is not: `UID[:GID]` in numbers, or a name (`[a-z_][a-z0-9_-]*`).
pub fn user_problem(text: &str) -> Option<String> {
    let number = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let name = |t: &str| {
        t.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
            && t.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    };
    let sound = match text.split_once(':') {
        Some((uid, gid)) => number(uid) && number(gid),
        None => number(text) || name(text),
    };
    (!sound).then(|| format!("`{text}` is not a user (`UID`, `UID:GID` or an account's name)"))
}

/// Why a network is not one a container can name, if it is not: `bridge`, `host`, or a podman
/// network's name (`[a-z0-9][a-z0-9_.-]*`).
pub fn network_problem(text: &str) -> Option<String> {
    let sound = text
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && text.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.' | b'-')
        });
    (!sound).then(|| format!("`{text}` is not a network (`bridge`, `host`, or a network's name)"))
}

/// Why a label's name is not one a module may set, if it is not.
pub fn label_problem(name: &str) -> Option<String> {
    if name.is_empty() || name.contains(['=', '\n', '\0']) {
        Some(format!("`{}` is not a label name", name.escape_debug()))
    } else if name.starts_with(RESERVED_LABELS) {
        Some(format!(
            "`{name}` is in `{RESERVED_LABELS}`, which the host keeps for itself"
        ))
    } else {
        None
    }
}

impl ContainerSpec {
    /// Every rule its fields break, each a sentence (empty when sound); the ports' collisions
    /// with other containers are the declaration's to find.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let host = self.network.as_deref() == Some(NETWORK_HOST);
        for (i, port) in self.ports.iter().enumerate() {
            if host && port.host_port != port.port {
                out.push(format!(
                    "port `{port}`: with host networking a container's port is the host's; the \
                     two ports must be equal"
                ));
            }
            if let Some(other) = self.ports[..i].iter().find(|p| p.collides_with(port)) {
                out.push(format!(
                    "ports `{other}` and `{port}` both take host port {}",
                    port.host_side()
                ));
            }
        }
        out.extend(self.network.as_deref().and_then(network_problem));
        out.extend(self.user.as_deref().and_then(user_problem));
        out.extend(self.limits.memory.as_deref().and_then(memory_problem));
        out.extend(self.limits.cpus.as_deref().and_then(cpus_problem));
        if self.limits.pids == Some(0) {
            out.push("a pids limit of 0 lets nothing run".to_owned());
        }
        for cap in self.cap_add.iter().chain(&self.cap_drop) {
            out.extend(capability_problem(cap));
        }
        if let Some(workdir) = &self.workdir {
            if !workdir.starts_with('/') {
                out.push(format!("workdir `{workdir}` is not an absolute path"));
            }
        }
        if self.entrypoint.as_ref().is_some_and(Vec::is_empty) {
            out.push("an entrypoint needs at least the program".to_owned());
        }
        for name in self.labels.keys() {
            out.extend(label_problem(name));
        }
        out.extend(self.restart.as_deref().and_then(restart_problem));
        for device in &self.devices {
            out.extend(device.problems());
        }
        out
    }
}

impl ContainerSpec {
    /// How it runs beyond its image, command, environment and mounts, each field by its one
    /// name (the module file's key), in one order: what `plan --diff` shows and what the host
    /// keeps in the container's spec label (each only when it says something,
    /// [`says_nothing`]), and so what recreates it when it changes. Ports and devices are in
    /// podman's form, the stop timeout in seconds.
    pub fn run_fields(&self) -> [(&'static str, serde_json::Value); 15] {
        use serde_json::json;
        let ports: Vec<String> = self.ports.iter().map(ToString::to_string).collect();
        let devices: Vec<String> = self.devices.iter().map(Device::podman_form).collect();
        [
            ("ports", json!(ports)),
            ("network", json!(self.network)),
            ("user", json!(self.user)),
            ("memory", json!(self.limits.memory)),
            ("cpus", json!(self.limits.cpus)),
            ("pids", json!(self.limits.pids)),
            ("cap-add", json!(self.cap_add)),
            ("cap-drop", json!(self.cap_drop)),
            ("read-only", json!(self.read_only_root)),
            ("workdir", json!(self.workdir)),
            ("entrypoint", json!(self.entrypoint)),
            ("labels", json!(self.labels)),
            ("stop-timeout", json!(self.stop_timeout)),
            ("restart", json!(self.restart)),
            ("devices", json!(devices)),
        ]
    }
}

/// Whether a field of [`ContainerSpec::run_fields`] says nothing (absent, empty or off): such a
/// field is left out, so that a container that does not use it reads as it did before it
/// existed.
pub fn says_nothing(value: &serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::Null | Value::Bool(false) => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(fields) => fields.is_empty(),
        Value::Bool(true) | Value::Number(_) | Value::String(_) => false,
    }
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
#[serde(rename_all = "kebab-case")]
pub struct HealthCheck {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Milliseconds it has to pass after the container settled.
    pub within_ms: u64,
}

/// A host directory mounted into a container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_fields_rule_says_what_is_wrong_and_sound_values_pass() {
        for sound in ["64m", "1g", "1048576", "512K"] {
            assert_eq!(memory_problem(sound), None, "{sound}");
        }
        for broken in ["", "m", "64mb", "-1m", "0", "1.5g"] {
            assert!(memory_problem(broken).is_some(), "{broken}");
        }
        for sound in ["0.5", "2", "1.25"] {
            assert_eq!(cpus_problem(sound), None, "{sound}");
        }
        for broken in ["", "0", ".5", "2.", "1e3", "-1", "a"] {
            assert!(cpus_problem(broken).is_some(), "{broken}");
        }
        for sound in [
            "no",
            "on-failure",
            "on-failure:3",
            "always",
            "unless-stopped",
        ] {
            assert_eq!(restart_problem(sound), None, "{sound}");
        }
        for broken in ["", "sometimes", "on-failure:", "always:2"] {
            assert!(restart_problem(broken).is_some(), "{broken}");
        }
        for sound in ["2345", "2345:2345", "svc", "_apt"] {
            assert_eq!(user_problem(sound), None, "{sound}");
        }
        for broken in ["", "root:", ":0", "Svc", "a b"] {
            assert!(user_problem(broken).is_some(), "{broken}");
        }
        assert!(capability_problem("net_admin").is_some());
        assert!(label_problem("io.mesh.spec")
            .unwrap()
            .contains("keeps for itself"));
        assert!(network_problem("Host").is_some());
    }

    #[test]
    fn a_spec_says_every_problem_of_its_fields() {
        let spec = ContainerSpec {
            name: "mesh-a-b".to_owned(),
            image: "img".to_owned(),
            ports: vec![
                PortMapping::parse("8080:80").unwrap(),
                PortMapping::parse("127.0.0.1:8080:81").unwrap(),
            ],
            network: Some(NETWORK_HOST.to_owned()),
            limits: Limits {
                pids: Some(0),
                ..Limits::default()
            },
            workdir: Some("srv".to_owned()),
            entrypoint: Some(Vec::new()),
            ..ContainerSpec::default()
        };
        let problems = spec.problems().join("\n");
        for says in [
            "port `8080:80/tcp`: with host networking",
            "ports `8080:80/tcp` and `127.0.0.1:8080:81/tcp` both take host port 127.0.0.1:8080/tcp",
            "a pids limit of 0",
            "workdir `srv` is not an absolute path",
            "an entrypoint needs at least the program",
        ] {
            assert!(problems.contains(says), "{says}: {problems}");
        }
    }
}
