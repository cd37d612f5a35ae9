//! The declaration: the resolved, canonical list of resources one node should hold.
//!
//! Each resource has a stable id `<module>/<kind>/<name>`. Resources are kept sorted by id, so the
//! canonical JSON of a declaration (and so its digest) is a pure function of its content.

use crate::{sha256_digest, WireError};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The declaration wire format this build writes and reads.
pub const DECLARATION_FORMAT: u32 = 1;

/// A node's declaration (wire format, version [`DECLARATION_FORMAT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Declaration {
    /// The wire format version.
    pub format: u32,
    /// The node it is for.
    pub node: String,
    /// Every resource, sorted by id.
    pub resources: Vec<Resource>,
}

/// One resource of a declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Resource {
    /// `<module>/<kind>/<name>`.
    pub id: String,
    /// The module that declares it.
    pub module: String,
    /// The together group it belongs to (within its module), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub together: Option<String>,
    /// Ids of resources that must have applied before this one is attempted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// What the resource is.
    pub spec: Spec,
}

/// The kinds of resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Spec {
    /// A regular file with content.
    File(FileSpec),
    /// A directory.
    Directory(DirectorySpec),
    /// An account's membership of a group.
    Membership(MembershipSpec),
    /// A container under podman.
    Container(ContainerSpec),
}

impl Spec {
    /// The kind's name as it appears in resource ids.
    pub fn kind(&self) -> &'static str {
        match self {
            Spec::File(_) => "file",
            Spec::Directory(_) => "directory",
            Spec::Membership(_) => "membership",
            Spec::Container(_) => "container",
        }
    }
}

/// A regular file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileSpec {
    /// Absolute path on the machine.
    pub path: String,
    /// The content (UTF-8 text).
    pub content: String,
    /// Permission bits.
    pub mode: u32,
    /// Owning account.
    pub owner: String,
    /// Owning group.
    pub group: String,
}

/// A directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DirectorySpec {
    /// Absolute path on the machine.
    pub path: String,
    /// Permission bits.
    pub mode: u32,
    /// Owning account.
    pub owner: String,
    /// Owning group.
    pub group: String,
}

/// An account's membership of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct MembershipSpec {
    /// The account.
    pub account: String,
    /// The group.
    pub group: String,
}

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

/// Builds a resource id.
pub fn resource_id(module: &str, kind: &str, name: &str) -> String {
    format!("{module}/{kind}/{name}")
}

impl Declaration {
    /// A declaration for `node` from resources in any order (they are sorted by id).
    pub fn new(node: impl Into<String>, mut resources: Vec<Resource>) -> Self {
        resources.sort_by(|a, b| a.id.cmp(&b.id));
        Declaration {
            format: DECLARATION_FORMAT,
            node: node.into(),
            resources,
        }
    }

    /// The canonical JSON bytes: fixed field order, resources sorted, maps sorted, no spaces.
    pub fn canonical_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a declaration always serializes")
    }

    /// The sha256 digest of the canonical JSON.
    pub fn digest(&self) -> String {
        sha256_digest(&self.canonical_json())
    }

    /// A resource by id.
    pub fn resource(&self, id: &str) -> Option<&Resource> {
        self.resources
            .binary_search_by(|r| r.id.as_str().cmp(id))
            .ok()
            .map(|i| &self.resources[i])
    }

    /// Reads a declaration from JSON, checking its format version and rules.
    ///
    /// # Errors
    /// [`WireError::Json`] for bytes that are not a declaration, [`WireError::Format`] for
    /// another version, [`WireError::Invalid`] listing every broken rule.
    pub fn from_json(bytes: &[u8]) -> Result<Self, WireError> {
        #[derive(Deserialize)]
        struct Version {
            format: u32,
        }
        let version: Version = serde_json::from_slice(bytes).map_err(|source| WireError::Json {
            what: "declaration",
            source,
        })?;
        if version.format != DECLARATION_FORMAT {
            return Err(WireError::Format {
                what: "declaration",
                found: version.format,
                expected: DECLARATION_FORMAT,
            });
        }
        let declaration: Declaration =
            serde_json::from_slice(bytes).map_err(|source| WireError::Json {
                what: "declaration",
                source,
            })?;
        let problems = declaration.problems();
        if problems.is_empty() {
            Ok(declaration)
        } else {
            Err(WireError::Invalid {
                what: "declaration",
                problems,
            })
        }
    }

    /// Every rule the declaration breaks (empty when sound).
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let ids: BTreeSet<&str> = self.resources.iter().map(|r| r.id.as_str()).collect();
        if ids.len() != self.resources.len() {
            out.push("two resources share an id".to_owned());
        }
        if !self.resources.windows(2).all(|w| w[0].id < w[1].id) {
            out.push("resources are not sorted by id".to_owned());
        }
        let mut paths: BTreeMap<&str, &str> = BTreeMap::new();
        for r in &self.resources {
            let mut parts = r.id.splitn(3, '/');
            let (module, kind, name) = (parts.next(), parts.next(), parts.next());
            if module != Some(r.module.as_str())
                || kind != Some(r.spec.kind())
                || name.is_none_or(str::is_empty)
            {
                out.push(format!(
                    "`{}`: an id is `{}/{}/<name>`",
                    r.id,
                    r.module,
                    r.spec.kind()
                ));
            }
            for dep in &r.after {
                if !ids.contains(dep.as_str()) {
                    out.push(format!(
                        "`{}`: comes after `{dep}`, which is not declared",
                        r.id
                    ));
                }
            }
            let path = match &r.spec {
                Spec::File(f) => Some(f.path.as_str()),
                Spec::Directory(d) => Some(d.path.as_str()),
                Spec::Membership(_) | Spec::Container(_) => None,
            };
            if let Some(path) = path {
                if let Some(problem) = path_problem(path) {
                    out.push(format!("`{}`: {problem}", r.id));
                }
                if let Some(other) = paths.insert(path, &r.id) {
                    out.push(format!("`{}` and `{other}` both declare `{path}`", r.id));
                }
            }
            match &r.spec {
                Spec::File(f) => {
                    if f.mode > 0o7777 {
                        out.push(format!("`{}`: mode {:o} is not a mode", r.id, f.mode));
                    }
                }
                Spec::Directory(d) => {
                    if d.mode > 0o7777 {
                        out.push(format!("`{}`: mode {:o} is not a mode", r.id, d.mode));
                    }
                }
                Spec::Container(c) => {
                    for m in &c.mounts {
                        if let Some(problem) = path_problem(&m.source) {
                            out.push(format!("`{}`: mount source {problem}", r.id));
                        }
                    }
                }
                Spec::Membership(_) => {}
            }
        }
        out
    }
}

/// Why a declared machine path is unacceptable, if it is.
pub fn path_problem(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return Some(format!("`{path}` is not an absolute path"));
    }
    if path.split('/').any(|s| s == ".." || s == ".") {
        return Some(format!("`{path}` has a `.` or `..` segment"));
    }
    if path == "/" {
        return Some("`/` cannot be a resource".to_owned());
    }
    if path.contains('\0') {
        return Some(format!("`{}` holds a NUL byte", path.escape_debug()));
    }
    None
}
