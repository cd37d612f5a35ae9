//! A module's containers: what `[containers.NAME]` says, and the checks of it.

use super::check::{check_absolute, check_name};
use super::{parse_duration_ms, ModuleDefinition};
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

/// A container the module runs under podman.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ContainerDefinition {
    /// The image reference.
    pub image: String,
    /// The command and its arguments (default: the image's).
    #[serde(default)]
    pub command: Vec<String>,
    /// Environment variables (values may use settings).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Places mounted into it.
    #[serde(default)]
    pub mounts: Vec<MountDefinition>,
    /// Files of this module whose change restarts the container.
    #[serde(default)]
    pub restart_on: Vec<String>,
    /// How long after it is created, started or restarted the host judges it (`"2s"`,
    /// `"500ms"`, `"1m"`; default 2 s).
    #[serde(default)]
    pub settle: Option<String>,
    /// A command that must pass inside it for it to be healthy.
    #[serde(default)]
    pub health: Option<HealthDefinition>,
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

/// Checks the container `name` of module `d` (its key is `key`, `containers.<name>`).
pub(super) fn check_container(
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
}
