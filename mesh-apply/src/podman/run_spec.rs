//! How a container runs, as its [`super::LABEL_SPEC`] label keeps it: the fields whose change
//! recreates it, and which of them changed.

use super::{ContainerStatus, LABEL_SPEC, LABEL_SPEC_DIGEST, RUN_SPEC_FORMAT};
use mesh_model::declaration::ContainerSpec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How a container runs, as kept in its [`LABEL_SPEC`] label (version [`RUN_SPEC_FORMAT`]):
/// every field whose change makes the mesh recreate the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
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
}

/// One mount of a [`RunSpec`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
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
    /// `mounts[<at>].source`, `mounts[<at>].read-only`.
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
}
