//! The declaration: the resolved, canonical list of resources one node should hold.
//!
//! Each resource has a stable id `<module>/<kind>/<name>`. Resources are kept sorted by id, so the
//! canonical JSON of a declaration (and so its digest) is a pure function of its content.
//!
//! # Formats
//! - Format [`DECLARATION_FORMAT`] (1): every file carries its content.
//! - Format [`DECLARATION_FORMAT_ARCHIVES`] (2): the declaration names archives
//!   ([`Declaration::archives`], module → archive digest and size), and a file of such a module
//!   that is not a template names its place in the archive and its content's digest
//!   ([`FileSpec::source`]) instead of carrying its content. The host fetches the archive from
//!   the store, checks its digest, and reads the file from it.
//!
//! - Format [`DECLARATION_FORMAT_SECRETS`] (3): a file may be a template of secrets
//!   ([`FileSpec::sealed`]: text and sealed secrets its host opens with its own key). A host
//!   that reads only formats 1 and 2 refuses it, naming the format, rather than ignore the
//!   field and leave the file without its content.
//!
//! A declaration is written in the lowest format that holds it ([`Declaration::with_archives`]
//! picks it), so a declaration naming no archive has the bytes, and the digest, it always had; a
//! host that reads only format 1 refuses a format-2 declaration rather than misread it.

mod container;
mod job;
mod outgoing;
mod port;
mod rules;
mod sealed;
mod spec_de;

pub use container::{
    capability_problem, cpus_problem, label_problem, memory_problem, network_problem,
    restart_problem, says_nothing, user_problem, ContainerSpec, Device, HealthCheck, Limits, Mount,
    DEFAULT_HEALTH_WITHIN_MS, DEFAULT_SETTLE_MS, NETWORK_BRIDGE, NETWORK_HOST, RESERVED_LABELS,
};
pub use job::{rerun_file_digest, JobSpec, DEFAULT_JOB_TIMEOUT_SECS};
pub use outgoing::Outgoing;
pub use port::{PortMapping, Protocol};
use rules::is_builtin_network;
pub use rules::{account_name_problem, path_problem};
pub use sealed::{Declared, Sealed};

use crate::build::ArchiveRef;
use crate::drift::DriftPolicy;
use crate::{is_sha256_digest, sha256_digest, WireError};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The declaration wire format of a declaration whose files all carry their content.
pub const DECLARATION_FORMAT: u32 = 1;

/// The declaration wire format of a declaration that names archives its files are read from.
pub const DECLARATION_FORMAT_ARCHIVES: u32 = 2;

/// The declaration wire format of a declaration a file of which is a template of secrets
/// (whether or not it names archives).
pub const DECLARATION_FORMAT_SECRETS: u32 = 3;

/// A node's declaration (wire format, version [`DECLARATION_FORMAT`],
/// [`DECLARATION_FORMAT_ARCHIVES`] or [`DECLARATION_FORMAT_SECRETS`]). A field this build does not
/// know, here or in a resource — a newer minor version's, from a controller upgraded before its
/// hosts — is read and ignored; the digest is then this build's reading of it, so the node reports
/// another digest than it was sent until it is upgraded too (see the book's *Upgrading the mesh*).
/// A newer major format is refused as [`WireError::Format`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Declaration {
    /// The wire format version.
    pub format: u32,
    /// The node it is for.
    pub node: String,
    /// The archives files are read from, by module (format 2 only; absent when empty).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub archives: BTreeMap<String, ArchiveRef>,
    /// Every resource, sorted by id.
    pub resources: Vec<Resource>,
    /// The modules whose drift is only reported, not corrected (the rule “Drift is seen, and
    /// reported even when corrected”); a module not named here is corrected. Absent when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub drift: BTreeMap<String, DriftPolicy>,
}

/// One resource of a declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
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

/// The kinds of resource. Written with its `kind` first; read by `spec_de` (the kind first,
/// then its fields straight from the object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Spec {
    /// A regular file with content.
    File(FileSpec),
    /// A directory.
    Directory(DirectorySpec),
    /// An account's membership of a group.
    Membership(MembershipSpec),
    /// A container under podman.
    Container(Box<ContainerSpec>),
    /// A podman network the module's containers join.
    Network(NetworkSpec),
    /// A system account and its group.
    Account(AccountSpec),
    /// A container run to completion before what comes after it.
    Job(Box<JobSpec>),
    /// One line kept in a file the mesh did not make.
    Line(LineSpec),
}

impl Spec {
    /// The kind's name as it appears in resource ids.
    pub fn kind(&self) -> &'static str {
        match self {
            Spec::File(_) => "file",
            Spec::Directory(_) => "directory",
            Spec::Membership(_) => "membership",
            Spec::Container(_) => "container",
            Spec::Network(_) => "network",
            Spec::Account(_) => "account",
            Spec::Job(_) => "job",
            Spec::Line(_) => "line",
        }
    }

    /// The kinds' names, as `kind` names them on the wire.
    pub const KINDS: &'static [&'static str] = &[
        "file",
        "directory",
        "membership",
        "container",
        "network",
        "account",
        "job",
        "line",
    ];

    /// The spec of the kind named `kind` read from `fields` (an object without its `kind`):
    /// how the declaration's reader ([`Spec`]'s `Deserialize`) reads each kind.
    ///
    /// # Errors
    /// A kind not in [`Spec::KINDS`] (`unknown variant`), or its fields' error.
    pub fn read<'de, D: serde::Deserializer<'de>>(kind: &str, fields: D) -> Result<Spec, D::Error> {
        Ok(match kind {
            "file" => Spec::File(FileSpec::deserialize(fields)?),
            "directory" => Spec::Directory(DirectorySpec::deserialize(fields)?),
            "membership" => Spec::Membership(MembershipSpec::deserialize(fields)?),
            "container" => Spec::Container(Box::<ContainerSpec>::deserialize(fields)?),
            "network" => Spec::Network(NetworkSpec::deserialize(fields)?),
            "account" => Spec::Account(AccountSpec::deserialize(fields)?),
            "job" => Spec::Job(Box::<JobSpec>::deserialize(fields)?),
            "line" => Spec::Line(LineSpec::deserialize(fields)?),
            other => return Err(serde::de::Error::unknown_variant(other, Spec::KINDS)),
        })
    }

    /// The machine path of the file whose content it keeps, whole or in part (a file's own);
    /// `None` for a kind that keeps no file's content. A host watches its directory.
    pub fn file_path(&self) -> Option<&str> {
        match self {
            Spec::File(f) => Some(&f.path),
            Spec::Line(l) => Some(&l.path),
            Spec::Directory(_)
            | Spec::Membership(_)
            | Spec::Container(_)
            | Spec::Network(_)
            | Spec::Account(_)
            | Spec::Job(_) => None,
        }
    }
}

/// One line the mesh keeps in a file it did not make (as Puppet's `file_line` and Ansible's
/// `lineinfile`): the line is added at the end, or put in place of the first line that starts
/// with [`LineSpec::replaces`]. The file's other lines are never touched; when the line is no
/// longer declared it is given back (removed, or the line it replaced put back). A file the
/// declaration declares whole holds no line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct LineSpec {
    /// The file's absolute path on the machine; it must be there (the mesh never makes it).
    pub path: String,
    /// The line, without its newline.
    pub line: String,
    /// The start of the line it replaces (the module file's `match`); absent: it is added.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
}

impl LineSpec {
    /// Every rule it breaks, each a sentence (empty when sound).
    pub fn problems(&self) -> Vec<String> {
        let mut out: Vec<String> = path_problem(&self.path).into_iter().collect();
        if self.line.is_empty() || self.line.contains(['\n', '\r']) {
            out.push("a line is one line of text, not empty".to_owned());
        }
        if let Some(replaces) = &self.replaces {
            if replaces.is_empty() || replaces.contains(['\n', '\r']) {
                out.push("`match` is the start of one line, not empty".to_owned());
            }
        }
        out
    }
}

/// A regular file: it carries its content, or names where it is in its module's archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct FileSpec {
    /// Absolute path on the machine.
    pub path: String,
    /// The content (UTF-8 text), when the declaration carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Where the content is in the module's archive ([`Declaration::archives`]), when the
    /// declaration does not carry it (format 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<ArchivedFile>,
    /// A template that uses secrets: text and sealed secrets its host opens and puts in at
    /// apply time (the rule “A secret is readable only where it is used”), when the
    /// declaration carries neither content nor source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed: Option<Vec<crate::secret::SealedPiece>>,
    /// Permission bits.
    pub mode: u32,
    /// Owning account.
    pub owner: String,
    /// Owning group.
    pub group: String,
}

impl FileSpec {
    /// A file carrying its content.
    pub fn inline(
        path: impl Into<String>,
        content: impl Into<String>,
        mode: u32,
        owner: impl Into<String>,
        group: impl Into<String>,
    ) -> FileSpec {
        FileSpec {
            path: path.into(),
            content: Some(content.into()),
            source: None,
            sealed: None,
            mode,
            owner: owner.into(),
            group: group.into(),
        }
    }

    /// The digest of the content: the one the source names, or that of the content carried;
    /// `None` for a template of secrets, whose content only its host knows.
    pub fn content_digest(&self) -> Option<String> {
        match (&self.source, &self.content) {
            (Some(source), _) => Some(source.sha256.clone()),
            (None, Some(content)) => Some(sha256_digest(content.as_bytes())),
            (None, None) => None,
        }
    }
}

/// Where a file's content is in its module's archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ArchivedFile {
    /// The file's path inside the archive (relative, as in the module directory).
    pub path: String,
    /// `sha256:<hex>` of the file's bytes.
    pub sha256: String,
}

/// A directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
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

/// A podman network the host makes, and removes when it is no longer declared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct NetworkSpec {
    /// Its name on the machine.
    pub name: String,
}

/// A system account and its own group, made with shadow-utils under the host's root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AccountSpec {
    /// The account's name, and its group's.
    pub name: String,
    /// Its uid; absent: one shadow-utils picks among the system ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// Its group's gid; absent: one shadow-utils picks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// Its home directory (not made); absent: `/nonexistent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
    /// Its shell; absent: `/usr/sbin/nologin`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
}

/// An account's membership of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct MembershipSpec {
    /// The account.
    pub account: String,
    /// The group.
    pub group: String,
}

/// Builds a resource id.
pub fn resource_id(module: &str, kind: &str, name: &str) -> String {
    format!("{module}/{kind}/{name}")
}

impl Declaration {
    /// A declaration for `node` from resources in any order (they are sorted by id), every file
    /// carrying its content (format 1).
    pub fn new(node: impl Into<String>, resources: Vec<Resource>) -> Self {
        Declaration::with_archives(node, resources, BTreeMap::new())
    }

    /// A declaration for `node` whose archived files are read from `archives` (module →
    /// archive); format 3 when a file is a template of secrets, else 2 when it names an
    /// archive, 1 otherwise.
    pub fn with_archives(
        node: impl Into<String>,
        mut resources: Vec<Resource>,
        archives: BTreeMap<String, ArchiveRef>,
    ) -> Self {
        resources.sort_by(|a, b| a.id.cmp(&b.id));
        let sealed = resources
            .iter()
            .any(|r| matches!(&r.spec, Spec::File(f) if f.sealed.is_some()));
        Declaration {
            format: if sealed {
                DECLARATION_FORMAT_SECRETS
            } else if archives.is_empty() {
                DECLARATION_FORMAT
            } else {
                DECLARATION_FORMAT_ARCHIVES
            },
            node: node.into(),
            archives,
            resources,
            drift: BTreeMap::new(),
        }
    }

    /// What the host does with drift of a resource of `module` (default `correct`).
    pub fn drift_policy(&self, module: &str) -> DriftPolicy {
        self.drift.get(module).copied().unwrap_or_default()
    }

    /// The canonical JSON bytes: fixed field order, resources sorted, maps sorted, no spaces.
    pub fn canonical_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a declaration always serializes")
    }

    /// The canonical JSON and the digest together, serialized once when no secret is sealed in
    /// it (its digest is then the hash of those bytes); with secrets, the digest leaves their
    /// ciphertexts out ([`Declaration::digest`]) and is made apart.
    pub fn canonical_json_and_digest(&self) -> (Vec<u8>, String) {
        let json = self.canonical_json();
        let digest = if self.holds_secrets() {
            self.digest()
        } else {
            crate::sha256_digest(&json)
        };
        (json, digest)
    }

    /// The sha256 digest of the canonical JSON (hashed as it is serialized, without a copy of
    /// it). A sealed secret counts by its keyed digest only, never its ciphertext (serialized
    /// empty, in place, as it is hashed): the declaration a node
    /// is sent, its secrets sealed again to its own key, has the digest of the one composed
    /// (the rule “A secret is readable only where it is used”).
    pub fn digest(&self) -> String {
        crate::secret::with_ciphertexts_left_out(|| self.digest_as_serialized())
    }

    /// Whether a file of it is a template of secrets ([`FileSpec::sealed`]).
    pub fn holds_secrets(&self) -> bool {
        self.resources
            .iter()
            .any(|r| matches!(&r.spec, Spec::File(f) if f.sealed.is_some()))
    }

    /// Every sealed secret its files use, as `(module, key, secret)`, in the order of its
    /// resources and their pieces, to be sealed again in place.
    pub fn secrets_mut(&mut self) -> Vec<(&str, &str, &mut crate::secret::SecretValue)> {
        let mut secrets = Vec::new();
        for Resource { module, spec, .. } in &mut self.resources {
            let Spec::File(FileSpec {
                sealed: Some(pieces),
                ..
            }) = spec
            else {
                continue;
            };
            for piece in pieces {
                if let crate::secret::SealedPiece::Secret { key, value } = piece {
                    secrets.push((module.as_str(), key.as_str(), value));
                }
            }
        }
        secrets
    }

    fn digest_as_serialized(&self) -> String {
        use sha2::Digest as _;
        struct Hashing(sha2::Sha256);
        impl std::io::Write for Hashing {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.update(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut hashing = Hashing(sha2::Sha256::new());
        serde_json::to_writer(
            std::io::BufWriter::with_capacity(64 * 1024, &mut hashing),
            self,
        )
        .expect("a declaration always serializes");
        crate::sha256_text(hashing.0.finalize().into())
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
        let another_format = |format: u32| {
            (!(DECLARATION_FORMAT..=DECLARATION_FORMAT_SECRETS).contains(&format)).then_some(
                WireError::Format {
                    what: "declaration",
                    found: format,
                    expected: DECLARATION_FORMAT_SECRETS,
                },
            )
        };
        // Read once; its version alone is read (again) only when it is not a declaration of
        // this build's, to say whether it is of another format.
        let declaration = match serde_json::from_slice::<Declaration>(bytes) {
            Ok(declaration) => declaration,
            Err(source) => {
                let format = serde_json::from_slice::<Version>(bytes).map(|v| v.format);
                return Err(format
                    .ok()
                    .and_then(another_format)
                    .unwrap_or(WireError::Json {
                        what: "declaration",
                        source,
                    }));
            }
        };
        if let Some(another) = another_format(declaration.format) {
            return Err(another);
        }
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
        let mut out = self.archive_problems();
        if self.holds_secrets() && self.format < DECLARATION_FORMAT_SECRETS {
            out.push(format!(
                "a file is a template of secrets, which format {} does not hold (format \
                 {DECLARATION_FORMAT_SECRETS} does)",
                self.format
            ));
        }
        let ids: BTreeSet<&str> = self.resources.iter().map(|r| r.id.as_str()).collect();
        if ids.len() != self.resources.len() {
            out.push("two resources share an id".to_owned());
        }
        if !self.resources.windows(2).all(|w| w[0].id < w[1].id) {
            out.push("resources are not sorted by id".to_owned());
        }
        let mut paths: BTreeMap<&str, &str> = BTreeMap::new();
        let mut lines: Vec<(&str, &LineSpec)> = Vec::new();
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
                // Lines share their file (see below).
                Spec::Membership(_)
                | Spec::Container(_)
                | Spec::Network(_)
                | Spec::Account(_)
                | Spec::Job(_)
                | Spec::Line(_) => None,
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
                    out.extend(self.file_source_problem(r, f));
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
                    for problem in c.problems() {
                        out.push(format!("`{}`: {problem}", r.id));
                    }
                    out.extend(self.network_problem(r, c));
                }
                Spec::Network(n) => {
                    if let Some(problem) = network_problem(&n.name)
                        .or_else(|| is_builtin_network(&n.name).then(|| "is podman's own".into()))
                    {
                        out.push(format!("`{}`: network `{}` {problem}", r.id, n.name));
                    }
                    if r.together.is_some() {
                        out.push(format!(
                            "`{}`: a network cannot be in a together group",
                            r.id
                        ));
                    }
                }
                Spec::Account(a) => {
                    if let Some(problem) = account_name_problem(&a.name) {
                        out.push(format!("`{}`: {problem}", r.id));
                    }
                    if let Some(problem) = a.home.as_deref().and_then(path_problem) {
                        out.push(format!("`{}`: home {problem}", r.id));
                    }
                }
                Spec::Job(j) => out.extend(self.job_problems(r, j)),
                Spec::Membership(_) => {}
                Spec::Line(l) => {
                    for problem in l.problems() {
                        out.push(format!("`{}`: {problem}", r.id));
                    }
                    if r.together.is_some() {
                        out.push(format!("`{}`: a line cannot be in a together group", r.id));
                    }
                    lines.push((r.id.as_str(), l));
                }
            }
        }
        // A line is kept in a file the mesh did not make, once.
        let mut kept: BTreeMap<(&str, &str), &str> = BTreeMap::new();
        for (id, line) in lines {
            if let Some(file) = paths.get(line.path.as_str()) {
                out.push(format!(
                    "`{id}` keeps a line in `{}`, which `{file}` declares whole",
                    line.path
                ));
            }
            if let Some(other) = kept.insert((&line.path, &line.line), id) {
                out.push(format!(
                    "`{id}` and `{other}` both keep the same line in `{}`",
                    line.path
                ));
            }
        }
        out.extend(self.port_collisions());
        out.extend(self.container_name_collisions());
        out.extend(self.account_collisions());
        out
    }
}

#[cfg(test)]
mod tests;
