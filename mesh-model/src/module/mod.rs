//! Module definitions (`modules/<name>/module.toml`) and the catalogue that holds them.
//!
//! A catalogue arrives as a [`CatalogueSource`]: every module directory's entries read by the
//! caller (mesh-model does no IO). [`load_catalogue`] parses and validates all of it and returns
//! the modules that are sound together with every [`Diagnostic`] found.
//!
//! A `module.toml`:
//!
//! ```toml
//! name = "media"
//! depends = ["base"]
//! upgrade = "one-first"          # or "together"
//!
//! [settings]                     # the settings it accepts, each with its default
//! port = 8096
//!
//! [places.media]                 # a named directory; its location is the setting `places.media`
//! default = "/srv/media"
//!
//! [files.config]
//! source = "files/config.toml"   # inside the module directory
//! path = "/etc/media/config.toml"
//! template = true
//!
//! [containers.media]
//! image = "localhost/mesh-busybox:latest"
//! command = ["httpd", "-f", "-p", "{{port}}"]
//! mounts = [{ place = "media", at = "/media" }]
//! restart-on = ["config"]
//! settle = "2s"                  # judged alive this long after it (re)starts (default 2s)
//! health = { command = ["wget", "-q", "-O-", "http://127.0.0.1:{{port}}/"], within = "30s" }
//! after = ["job/migrate"]        # waits until the job has succeeded
//!
//! [jobs.migrate]                 # a container run to completion; it must exit 0
//! image = "localhost/mesh-busybox:latest"
//! command = ["sh", "-c", "echo migrated"]
//! rerun-on = ["file/config"]     # runs again when this file (or image, command, env) changes
//!
//! [lines.hosts]                  # one line kept in a file the mesh did not make
//! path = "/etc/hosts"
//! line = "10.0.0.5 media.internal"
//! match = "10.0.0.5 "            # replaces the first line starting so (default: added)
//! ```
//!
//! `drift = "correct" | "report"` (top level, default `correct`) says what the host does with
//! a managed resource changed by hand between declarations: put it back, or only report it.

mod check;
mod container;
mod cycles;

pub use container::{ContainerDefinition, HealthDefinition, MountDefinition};
pub use cycles::find_cycles;

use crate::drift::DriftPolicy;
use crate::Diagnostic;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The file name of a module definition inside its directory.
pub const DEFINITION_FILE: &str = "module.toml";

/// How a module's new build reaches its nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Upgrade {
    /// The first running node by name, then the rest once it reports the new declaration applied.
    #[default]
    OneFirst,
    /// Every node at once.
    Together,
}

/// What a rollout does when a node fails.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnFailure {
    /// Stop the module's rollout; every node keeps what it ran.
    #[default]
    Stop,
    /// Stop, and send the node that failed back what it was sent before — the first node, or
    /// one sent after it.
    Revert,
}

/// A place: a named directory whose location on a machine is the setting `places.<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PlaceDefinition {
    /// Where the place is when no layer sets `places.<name>`.
    pub default: String,
    /// Permission bits of the directory, octal text (default `0755`).
    #[serde(default = "default_dir_mode")]
    pub mode: String,
    /// Owning account (default `root`).
    #[serde(default = "root")]
    pub owner: String,
    /// Owning group (default `root`).
    #[serde(default = "root")]
    pub group: String,
}

/// A file the module puts on a machine, from a source inside its directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileDefinition {
    /// Path of the source inside the module directory.
    pub source: String,
    /// Absolute path on the machine (may use settings).
    pub path: String,
    /// Whether the source is a template rendered from settings.
    #[serde(default)]
    pub template: bool,
    /// Whether the source is a secret: the module directory holds it encrypted
    /// (`mesh-controller secrets encrypt FILE`, a [`SecretValue`](crate::secret::SecretValue)'s
    /// JSON), and only the host it is sent to opens it, with its own key.
    #[serde(default)]
    pub secret: bool,
    /// Permission bits, octal text (default `0644`).
    #[serde(default = "default_file_mode")]
    pub mode: String,
    /// Owning account (default `root`).
    #[serde(default = "root")]
    pub owner: String,
    /// Owning group (default `root`).
    #[serde(default = "root")]
    pub group: String,
}

/// A directory the module puts on a machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DirectoryDefinition {
    /// Absolute path on the machine (may use settings).
    pub path: String,
    /// Permission bits, octal text (default `0755`).
    #[serde(default = "default_dir_mode")]
    pub mode: String,
    /// Owning account (default `root`).
    #[serde(default = "root")]
    pub owner: String,
    /// Owning group (default `root`).
    #[serde(default = "root")]
    pub group: String,
}

/// Reads a duration as a module writes it: a whole number and a unit, `ms`, `s` or `m`
/// (`"500ms"`, `"2s"`, `"1m"`), in milliseconds; `None` when it is not one.
pub fn parse_duration_ms(text: &str) -> Option<u64> {
    let text = text.trim();
    let (number, scale) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1000)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60_000)
    } else {
        return None;
    };
    let number = number.trim();
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    number.parse::<u64>().ok()?.checked_mul(scale)
}

/// A group membership the module needs: an account added to a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct MembershipDefinition {
    /// The account (may use settings, e.g. `{{operator}}`).
    pub account: String,
    /// The group.
    pub group: String,
}

/// A podman network the module declares (`[networks.NAME]`): the host makes it, as
/// `mesh-<module>-<name>`, and removes it when it is no longer declared. Its containers join it
/// with `network = "NAME"`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct NetworkDefinition {}

/// A line the module keeps in a file it did not make (`[lines.NAME]`), as Puppet's `file_line`
/// and Ansible's `lineinfile`: added at the end of the file, or in place of the first line that
/// starts with `match`. The file's other lines are never touched; when the module leaves the
/// node the line is given back (removed, or the line it replaced put back).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct LineDefinition {
    /// The file's absolute path on the machine (may use settings); it must be there.
    pub path: String,
    /// The line (may use settings).
    pub line: String,
    /// The start of the line it replaces (may use settings); absent: it is added.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
}

/// A system account the module declares (`[accounts.NAME]`): the account `NAME` and its group
/// `NAME`, made with shadow-utils. Its ids may be fixed, as numbers or from settings (a node's
/// layer can set them).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct AccountDefinition {
    /// Its uid (a number, or text that may use settings).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "container::text_or_number"
    )]
    pub uid: Option<String>,
    /// Its group's gid (likewise).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "container::text_or_number"
    )]
    pub gid: Option<String>,
    /// Its home directory (absolute; not made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
    /// Its shell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
}

/// What a module needs on the bus before its code runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Grants {
    /// Key-value state buckets it reads and writes.
    #[serde(default)]
    pub buckets: Vec<String>,
    /// Event subjects it publishes and subscribes to.
    #[serde(default)]
    pub subjects: Vec<String>,
}

/// A validated module definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ModuleDefinition {
    /// The module's name; equals its directory's name.
    pub name: String,
    /// Modules it is built from or after.
    #[serde(default)]
    pub depends: Vec<String>,
    /// How a new build rolls out.
    #[serde(default)]
    pub upgrade: Upgrade,
    /// What a failed node does to the rollout.
    #[serde(default)]
    pub on_failure: OnFailure,
    /// Seconds the first node has to report a new declaration applied (default 600).
    #[serde(default = "default_deadline")]
    pub deadline_secs: u64,
    /// How many nodes are sent to at once after the first (default: all).
    #[serde(default)]
    pub max_parallel: Option<u32>,
    /// Settings accepted, with their defaults.
    #[serde(default)]
    pub settings: BTreeMap<String, Value>,
    /// Settings a layer must set before the module is sent to a node (a password, say): each a
    /// key of `settings`, whose default is then only a placeholder. A node whose layers leave
    /// one unset is not sent the module: a push refuses it and a rollout holds it, naming node,
    /// module and key, until a layer sets it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required: Vec<String>,
    /// Named directories, placed by the setting `places.<name>`.
    #[serde(default)]
    pub places: BTreeMap<String, PlaceDefinition>,
    /// Files, by name.
    #[serde(default)]
    pub files: BTreeMap<String, FileDefinition>,
    /// Directories, by name.
    #[serde(default)]
    pub directories: BTreeMap<String, DirectoryDefinition>,
    /// Containers, by name.
    #[serde(default)]
    pub containers: BTreeMap<String, ContainerDefinition>,
    /// Group memberships, by name.
    #[serde(default)]
    pub memberships: BTreeMap<String, MembershipDefinition>,
    /// Podman networks its containers join, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub networks: BTreeMap<String, NetworkDefinition>,
    /// System accounts (each with its own group), by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub accounts: BTreeMap<String, AccountDefinition>,
    /// Containers run to completion, by name (said as a container is, with a job's own keys).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub jobs: BTreeMap<String, ContainerDefinition>,
    /// Lines kept in files the mesh did not make, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub lines: BTreeMap<String, LineDefinition>,
    /// Bus grants.
    #[serde(default)]
    pub grants: Grants,
    /// Groups of resources (`kind/name`) that apply all-or-nothing, by group name.
    #[serde(default)]
    pub together: BTreeMap<String, Vec<String>>,
    /// What its hosts do with drift (default `correct`).
    #[serde(default)]
    pub drift: DriftPolicy,
    /// Its own `[rollout]`: waves, budget, windows, over the inventory's key by key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::waves::RolloutPolicy>,
}

fn root() -> String {
    "root".to_owned()
}
fn default_file_mode() -> String {
    "0644".to_owned()
}
fn default_dir_mode() -> String {
    "0755".to_owned()
}
fn default_deadline() -> u64 {
    600
}

/// The settings key under which a module's places are placed.
pub const PLACES_KEY: &str = "places";

impl ModuleDefinition {
    /// The module's defaults as one JSON object, places included under `places`.
    pub fn defaults(&self) -> Value {
        let mut object: serde_json::Map<String, Value> = self
            .settings
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let places = self
            .places
            .iter()
            .map(|(name, place)| (name.clone(), Value::String(place.default.clone())))
            .collect();
        object.insert(PLACES_KEY.to_owned(), Value::Object(places));
        Value::Object(object)
    }

    /// The top-level settings keys a layer may hold for this module.
    pub fn known_keys(&self) -> BTreeSet<String> {
        let mut keys: BTreeSet<String> = self.settings.keys().cloned().collect();
        keys.insert(PLACES_KEY.to_owned());
        keys
    }

    /// Every `kind/name` this module declares, for `together` and `restart-on` references.
    pub fn resource_refs(&self) -> BTreeSet<String> {
        let mut refs = BTreeSet::new();
        refs.extend(self.places.keys().map(|n| format!("directory/{n}")));
        refs.extend(self.files.keys().map(|n| format!("file/{n}")));
        refs.extend(self.directories.keys().map(|n| format!("directory/{n}")));
        refs.extend(self.containers.keys().map(|n| format!("container/{n}")));
        refs.extend(self.memberships.keys().map(|n| format!("membership/{n}")));
        refs.extend(self.networks.keys().map(|n| format!("network/{n}")));
        refs.extend(self.accounts.keys().map(|n| format!("account/{n}")));
        refs.extend(self.jobs.keys().map(|n| format!("job/{n}")));
        refs.extend(self.lines.keys().map(|n| format!("line/{n}")));
        refs
    }

    /// The together group a `kind/name` belongs to, if any.
    pub fn together_group_of(&self, reference: &str) -> Option<&str> {
        self.together
            .iter()
            .find(|(_, members)| members.iter().any(|m| m == reference))
            .map(|(group, _)| group.as_str())
    }
}

/// One entry of a module directory, as read by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file and its bytes.
    File {
        /// The content.
        bytes: Vec<u8>,
        /// Whether any execute bit is set.
        executable: bool,
    },
    /// A directory.
    Directory,
    /// A symbolic link (never allowed in a module).
    Symlink {
        /// Where it points.
        target: String,
    },
    /// Anything else (device, socket, fifo): never allowed.
    Other,
}

/// A module directory as read from disk or git: relative paths (with `/`) to entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModuleTree {
    /// Every entry under the module directory, keyed by relative path.
    pub entries: BTreeMap<String, EntryKind>,
}

impl ModuleTree {
    /// The bytes of a regular file, if the tree holds one at `path`.
    pub fn file(&self, path: &str) -> Option<&[u8]> {
        match self.entries.get(path) {
            Some(EntryKind::File { bytes, .. }) => Some(bytes),
            _ => None,
        }
    }
}

/// A catalogue as read: module directory name → its tree. `prefix` is how files are named in
/// diagnostics (e.g. `modules`).
#[derive(Debug, Clone, Default)]
pub struct CatalogueSource {
    /// Path prefix of the module directories, for messages.
    pub prefix: String,
    /// Module directory name → tree.
    pub modules: BTreeMap<String, ModuleTree>,
    /// Module directory name → the archive its tree was unpacked from, for a module that comes
    /// from a build (the tree is then exactly the archive's content).
    pub archives: BTreeMap<String, crate::build::ArchiveRef>,
}

/// A module that validated: its definition and its directory.
#[derive(Debug, Clone)]
pub struct Module {
    /// The definition.
    pub definition: ModuleDefinition,
    /// The directory's entries.
    pub tree: ModuleTree,
    /// The archive the tree is the content of, when the module comes from a build: its files
    /// reach a host inside that archive.
    pub archive: Option<crate::build::ArchiveRef>,
}

/// Validated modules by name.
#[derive(Debug, Clone, Default)]
pub struct Catalogue {
    /// Module name → module.
    pub modules: BTreeMap<String, Module>,
    /// Module directories present but refused by validation (their diagnostics say why), so
    /// that nothing else reports them again as missing.
    pub refused: BTreeSet<String>,
}

impl Catalogue {
    /// A module by name.
    pub fn module(&self, name: &str) -> Option<&Module> {
        self.modules.get(name)
    }
}

/// Parses and validates a whole catalogue.
///
/// Returns the catalogue of modules and every diagnostic found. A module with any diagnostic
/// of its own is left out of the catalogue; a problem across modules (unknown dependency, a
/// cycle) is reported for each module involved, and those modules are left out too.
pub fn load_catalogue(source: &CatalogueSource) -> (Catalogue, Vec<Diagnostic>) {
    let mut diagnostics = Vec::new();
    let mut parsed = BTreeMap::new();
    for (dir, tree) in &source.modules {
        let file = format!("{}/{dir}/{DEFINITION_FILE}", source.prefix);
        let before = diagnostics.len();
        if let Some(definition) = parse_module(&file, dir, tree, &mut diagnostics) {
            if diagnostics.len() == before {
                let tree = (tree.clone(), source.archives.get(dir).cloned());
                parsed.insert(definition.name.clone(), (file, definition, tree));
            }
        }
    }
    // Across modules: dependencies exist and form no cycle.
    let mut broken: BTreeSet<String> = BTreeSet::new();
    for (name, (file, definition, _)) in &parsed {
        for dep in &definition.depends {
            if !parsed.contains_key(dep) && !source.modules.contains_key(dep) {
                diagnostics.push(Diagnostic::new(
                    file.clone(),
                    Some(name),
                    Some("depends"),
                    format!("depends on `{dep}`, which is not in the catalogue"),
                ));
                broken.insert(name.clone());
            }
        }
    }
    let graph: BTreeMap<&str, Vec<&str>> = parsed
        .iter()
        .map(|(n, (_, d, _))| (n.as_str(), d.depends.iter().map(String::as_str).collect()))
        .collect();
    for cycle in find_cycles(&graph) {
        let shown = format!("{} -> {}", cycle.join(" -> "), cycle[0]);
        for member in &cycle {
            let (file, _, _) = &parsed[member];
            diagnostics.push(Diagnostic::new(
                file.clone(),
                Some(member),
                Some("depends"),
                format!("dependency cycle: {shown}"),
            ));
            broken.insert(member.clone());
        }
    }
    // A module built from a refused one cannot be built either: say so, until nothing changes.
    loop {
        let mut more = Vec::new();
        for (name, (file, definition, _)) in &parsed {
            if broken.contains(name) {
                continue;
            }
            let refused_dep = definition.depends.iter().find(|dep| {
                broken.contains(*dep)
                    || (!parsed.contains_key(*dep) && source.modules.contains_key(*dep))
            });
            if let Some(dep) = refused_dep {
                diagnostics.push(Diagnostic::new(
                    file.clone(),
                    Some(name),
                    Some("depends"),
                    format!("depends on `{dep}`, which is refused (see its problems)"),
                ));
                more.push(name.clone());
            }
        }
        if more.is_empty() {
            break;
        }
        broken.extend(more);
    }
    let modules: BTreeMap<String, Module> = parsed
        .into_iter()
        .filter(|(name, _)| !broken.contains(name))
        .map(|(name, (_, definition, (tree, archive)))| {
            (
                name,
                Module {
                    definition,
                    tree,
                    archive,
                },
            )
        })
        .collect();
    let refused = source
        .modules
        .keys()
        .filter(|dir| !modules.contains_key(*dir))
        .cloned()
        .collect();
    diagnostics.sort();
    (Catalogue { modules, refused }, diagnostics)
}

/// Parses one module's definition and checks it against its own directory.
fn parse_module(
    file: &str,
    dir: &str,
    tree: &ModuleTree,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<ModuleDefinition> {
    for (path, entry) in &tree.entries {
        match entry {
            EntryKind::Symlink { target } => diagnostics.push(Diagnostic::new(
                file,
                Some(dir),
                None,
                format!("`{path}` is a symbolic link (to `{target}`); modules hold no links"),
            )),
            EntryKind::Other => diagnostics.push(Diagnostic::new(
                file,
                Some(dir),
                None,
                format!("`{path}` is neither a file nor a directory"),
            )),
            EntryKind::File { .. } | EntryKind::Directory => {}
        }
    }
    let Some(text) = tree.file(DEFINITION_FILE) else {
        diagnostics.push(Diagnostic::new(
            file,
            Some(dir),
            None,
            "the module directory has no module.toml",
        ));
        return None;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        diagnostics.push(Diagnostic::new(
            file,
            Some(dir),
            None,
            "module.toml is not UTF-8",
        ));
        return None;
    };
    let raw: toml::Table = match text.parse() {
        Ok(table) => table,
        Err(error) => {
            diagnostics.push(Diagnostic::new(
                file,
                Some(dir),
                None,
                format!("not valid TOML: {}", one_line(&error.to_string())),
            ));
            return None;
        }
    };
    let definition: ModuleDefinition = match toml::Value::Table(raw).try_into() {
        Ok(definition) => definition,
        Err(error) => {
            diagnostics.push(Diagnostic::new(
                file,
                Some(dir),
                None,
                one_line(&error.to_string()),
            ));
            return None;
        }
    };
    check::check_module(file, dir, tree, &definition, diagnostics);
    Some(definition)
}

fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether a name is fit for a resource id segment: `[a-z0-9][a-z0-9_-]*`.
pub fn is_valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// Says a problem at `key` when `name` is not fit for a resource id ([`is_valid_name`]): shared
/// by the checks of every kind, so it lives above them.
pub(crate) fn check_name(key: &str, name: &str, say: &mut dyn FnMut(String, String)) {
    if !is_valid_name(name) {
        say(key.to_owned(), "a name is [a-z0-9][a-z0-9_-]*".into());
    }
}

/// Says a problem at `key` when `path` is neither absolute nor templated, or climbs with `..`.
pub(crate) fn check_absolute(key: &str, path: &str, say: &mut dyn FnMut(String, String)) {
    let templated = path.starts_with("{{");
    if !templated && !path.starts_with('/') {
        say(key.to_owned(), format!("`{path}` is not an absolute path"));
    }
    if path.split('/').any(|s| s == "..") {
        say(key.to_owned(), format!("`{path}` climbs with `..`"));
    }
}

/// Parses an octal mode text such as `0644`.
pub fn parse_mode(text: &str) -> Option<u32> {
    let mode = u32::from_str_radix(text, 8).ok()?;
    (mode <= 0o7777).then_some(mode)
}
