//! How a container runs, as its [`super::LABEL_SPEC`] label keeps it: the fields whose change
//! recreates it, and which of them changed.

use super::{ContainerStatus, LABEL_SPEC, LABEL_SPEC_DIGEST, RUN_SPEC_FORMAT};
use mesh_model::declaration::{says_nothing, ContainerSpec, NETWORK_HOST};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::OsString;

/// How a container runs, as kept in its [`LABEL_SPEC`] label (version [`RUN_SPEC_FORMAT`]):
/// every field whose change makes the mesh recreate the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RunSpec {
    /// The format version.
    pub format: u32,
    /// The image reference.
    pub image: String,
    /// Command and arguments (empty: the image's).
    pub command: Vec<String>,
    /// Per environment variable, the sha256 of its value (values are not kept in labels).
    pub env: BTreeMap<String, String>,
    /// The mounts, sorted by `at`.
    pub mounts: Vec<RunMount>,
    /// How it runs beyond those ([`ContainerSpec::run_fields`]: ports, network, user, limits and
    /// the rest), absent when it says nothing, so that the label of a container made before
    /// these fields existed is unchanged.
    #[serde(default, skip_serializing_if = "RunFields::is_empty")]
    pub serves: RunFields,
}

/// [`ContainerSpec::run_fields`] as the label keeps them: an object, its keys in that order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFields(pub Vec<(String, serde_json::Value)>);

impl RunFields {
    /// What a declared container says.
    pub fn of(spec: &ContainerSpec) -> Self {
        RunFields(
            spec.run_fields()
                .into_iter()
                .filter(|(_, value)| !says_nothing(value))
                .map(|(name, value)| (name.to_owned(), value))
                .collect(),
        )
    }

    /// Whether it says nothing.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of the field `name`, if it says one.
    fn get(&self, name: &str) -> Option<&serde_json::Value> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value)
    }
}

impl Serialize for RunFields {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, value) in &self.0 {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for RunFields {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = serde_json::Map::<String, serde_json::Value>::deserialize(deserializer)?;
        // Read back in the one order, as it was written.
        let order = ContainerSpec::default().run_fields().map(|(name, _)| name);
        let mut fields: Vec<(String, serde_json::Value)> = map.into_iter().collect();
        fields.sort_by_key(|(name, _)| order.iter().position(|n| n == name));
        Ok(RunFields(fields))
    }
}

/// The arguments of `podman run` that say how `spec` runs beyond its image, command,
/// environment and mounts (a port is published only off host networking, where the
/// container's ports are the host's own).
pub fn run_args(spec: &ContainerSpec) -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::new();
    let mut put = |flag: &str, value: &str| {
        args.push(flag.into());
        args.push(value.into());
    };
    if let Some(network) = &spec.network {
        put("--network", network);
    }
    if spec.network.as_deref() != Some(NETWORK_HOST) {
        for port in &spec.ports {
            put("--publish", &port.to_string());
        }
    }
    for (flag, value) in [
        ("--user", &spec.user),
        ("--memory", &spec.limits.memory),
        ("--cpus", &spec.limits.cpus),
        ("--workdir", &spec.workdir),
        ("--restart", &spec.restart),
    ] {
        if let Some(value) = value {
            put(flag, value);
        }
    }
    if let Some(pids) = spec.limits.pids {
        put("--pids-limit", &pids.to_string());
    }
    for cap in &spec.cap_add {
        put("--cap-add", cap);
    }
    for cap in &spec.cap_drop {
        put("--cap-drop", cap);
    }
    if let Some(entrypoint) = &spec.entrypoint {
        put(
            "--entrypoint",
            &serde_json::to_string(entrypoint).expect("a list of texts serializes"),
        );
    }
    for (name, value) in &spec.labels {
        put("--label", &format!("{name}={value}"));
    }
    if let Some(secs) = spec.stop_timeout {
        put("--stop-timeout", &secs.to_string());
    }
    for device in &spec.devices {
        put("--device", &device.podman_form());
    }
    if spec.read_only_root {
        args.push("--read-only".into());
    }
    args
}

/// One mount of a [`RunSpec`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RunMount {
    /// The host directory, as a machine path (before the root prefix).
    pub source: String,
    /// The path inside the container.
    pub at: String,
    /// Read-only.
    pub read_only: bool,
}

impl RunSpec {
    /// The run spec of a declared container.
    pub fn of(spec: &ContainerSpec) -> Self {
        let mut mounts: Vec<RunMount> = spec
            .mounts
            .iter()
            .map(|m| RunMount {
                source: m.source.clone(),
                at: m.at.clone(),
                read_only: m.read_only,
            })
            .collect();
        mounts.sort_by(|a, b| a.at.cmp(&b.at));
        RunSpec {
            format: RUN_SPEC_FORMAT,
            image: spec.image.clone(),
            command: spec.command.clone(),
            env: spec
                .env
                .iter()
                .map(|(k, v)| (k.clone(), mesh_model::sha256_digest(v.as_bytes())))
                .collect(),
            mounts,
            serves: RunFields::of(spec),
        }
    }

    /// Its label value (JSON) and that value's digest.
    pub fn label(&self) -> (String, String) {
        let json = serde_json::to_string(self).expect("a run spec always serializes");
        let digest = mesh_model::sha256_digest(json.as_bytes());
        (json, digest)
    }

    /// The fields that differ from `old`, named as `mesh-controller plan --diff` names them:
    /// `image`, `command`, `env.<NAME>`, `mounts[<at>]` (added or removed),
    /// `mounts[<at>].source`, `mounts[<at>].read-only`, and each of [`RunFields`]' fields.
    pub fn changed_fields(&self, old: &RunSpec) -> Vec<String> {
        let mut changed = Vec::new();
        if self.image != old.image {
            changed.push("image".to_owned());
        }
        if self.command != old.command {
            changed.push("command".to_owned());
        }
        let names: std::collections::BTreeSet<&String> =
            self.env.keys().chain(old.env.keys()).collect();
        for name in names {
            if self.env.get(name) != old.env.get(name) {
                changed.push(format!("env.{name}"));
            }
        }
        let new_mounts: BTreeMap<&str, &RunMount> =
            self.mounts.iter().map(|m| (m.at.as_str(), m)).collect();
        let old_mounts: BTreeMap<&str, &RunMount> =
            old.mounts.iter().map(|m| (m.at.as_str(), m)).collect();
        let ats: std::collections::BTreeSet<&str> = new_mounts
            .keys()
            .chain(old_mounts.keys())
            .copied()
            .collect();
        for at in ats {
            match (old_mounts.get(at), new_mounts.get(at)) {
                (Some(a), Some(b)) => {
                    if a.source != b.source {
                        changed.push(format!("mounts[{at}].source"));
                    }
                    if a.read_only != b.read_only {
                        changed.push(format!("mounts[{at}].read-only"));
                    }
                }
                _ => changed.push(format!("mounts[{at}]")),
            }
        }
        for (name, _) in ContainerSpec::default().run_fields() {
            if self.serves.get(name) != old.serves.get(name) {
                changed.push(name.to_owned());
            }
        }
        changed
    }
}

/// The fields in which the container `current` differs from `spec` — when it does, bringing it to
/// `spec` replaces it — or `None` when its spec is the declared one.
pub(super) fn replaced_fields(
    spec: &ContainerSpec,
    current: &ContainerStatus,
) -> Option<Vec<String>> {
    let wanted = RunSpec::of(spec);
    let (_, digest) = wanted.label();
    if current.labels.get(LABEL_SPEC_DIGEST) == Some(&digest) {
        return None;
    }
    let changed = match current
        .labels
        .get(LABEL_SPEC)
        .and_then(|json| serde_json::from_str::<RunSpec>(json).ok())
        .filter(|old| old.format == RUN_SPEC_FORMAT)
    {
        Some(old) => wanted.changed_fields(&old),
        None => Vec::new(),
    };
    Some(if changed.is_empty() {
        // Its label is from another format: all we know is that it differs.
        vec!["spec".to_owned()]
    } else {
        changed
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_model::declaration::Mount;

    fn spec() -> ContainerSpec {
        ContainerSpec {
            name: "mesh-media-media".to_owned(),
            image: "localhost/busybox:1".to_owned(),
            command: vec!["sleep".to_owned(), "1000".to_owned()],
            env: [("A".to_owned(), "1".to_owned())].into(),
            mounts: vec![Mount {
                place: "media".to_owned(),
                source: "/srv/disk1/media".to_owned(),
                at: "/media".to_owned(),
                read_only: false,
            }],
            restart_on: vec!["media/file/conf".to_owned()],
            settle_ms: None,
            health: None,
            ..ContainerSpec::default()
        }
    }

    #[test]
    fn changed_fields_name_what_differs_and_nothing_else() {
        let old = spec();
        let mut new = spec();
        new.image = "localhost/busybox:2".to_owned();
        new.env.insert("A".to_owned(), "2".to_owned());
        new.env.insert("B".to_owned(), "x".to_owned());
        new.mounts[0].source = "/mnt/disk2/media".to_owned();
        new.mounts.push(Mount {
            place: "config".to_owned(),
            source: "/etc/media".to_owned(),
            at: "/config".to_owned(),
            read_only: true,
        });
        new.restart_on.clear();
        assert_eq!(
            RunSpec::of(&new).changed_fields(&RunSpec::of(&old)),
            [
                "image",
                "env.A",
                "env.B",
                "mounts[/config]",
                "mounts[/media].source"
            ]
        );
    }

    #[test]
    fn restart_on_and_place_names_do_not_change_the_digest() {
        let old = spec();
        let mut new = spec();
        new.restart_on.clear();
        new.mounts[0].place = "other".to_owned();
        assert_eq!(RunSpec::of(&new).label(), RunSpec::of(&old).label());
        assert!(
            !RunSpec::of(&old).label().0.contains("\"1\""),
            "env values are digested"
        );
    }

    #[test]
    fn a_container_saying_nothing_new_keeps_its_label_and_each_new_field_is_named() {
        let (json, _) = RunSpec::of(&spec()).label();
        assert!(!json.contains("serves"), "{json}");
        let mut new = spec();
        new.ports = vec![mesh_model::declaration::PortMapping::parse("127.0.0.1:8080:80").unwrap()];
        new.limits.memory = Some("64m".to_owned());
        new.stop_timeout = Some(20);
        let changed = RunSpec::of(&new).changed_fields(&RunSpec::of(&spec()));
        assert_eq!(changed, ["ports", "memory", "stop-timeout"]);
        // The label's bytes are those containers made before keep (no recreation on upgrade).
        let (json, _) = RunSpec::of(&new).label();
        assert!(
            json.ends_with(
                r#""serves":{"ports":["127.0.0.1:8080:80/tcp"],"memory":"64m","stop-timeout":20}}"#
            ),
            "{json}"
        );
        let read: RunSpec = serde_json::from_str(&json).unwrap();
        assert_eq!(read, RunSpec::of(&new));
        let args: Vec<String> = run_args(&new)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "--publish",
                "127.0.0.1:8080:80/tcp",
                "--memory",
                "64m",
                "--stop-timeout",
                "20"
            ]
        );
    }
}
