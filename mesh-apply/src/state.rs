//! The host's state directory: its disk formats, each a versioned type of its own.
//!
//! ```text
//! <state-dir>/state.json        StateFile: what the mesh made and found, failures retried
//! <state-dir>/in-progress.json  InProgress: present while an apply runs (mid-change)
//! <state-dir>/group-commit.json GroupCommit: present while a together group commits (the rule
//!                               “Resources declared together apply all-or-nothing”)
//! <state-dir>/found/<sha256>    the bytes of a file the mesh wrote over, to give back
//! ```
//!
//! Every file here is written with temp + fsync + rename (+ fsync of the directory), so a host
//! killed at any point leaves either the old or the new version. Nothing here is ever a planner or
//! wire struct serialized by reflex: these types change only with [`STATE_FORMAT`].

use crate::fsops;
use crate::ApplyError;
use mesh_model::declaration::Spec;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

/// The version of the state directory's formats this build writes and reads.
pub const STATE_FORMAT: u32 = 1;

const STATE_FILE: &str = "state.json";
const IN_PROGRESS_FILE: &str = "in-progress.json";
const GROUP_COMMIT_FILE: &str = "group-commit.json";
const FOUND_DIR: &str = "found";

/// What the host keeps between applies (`state.json`, version [`STATE_FORMAT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct StateFile {
    /// The format version.
    pub format: u32,
    /// Per resource id the mesh holds: what it is and whether the mesh made or found it.
    pub resources: BTreeMap<String, Record>,
    /// Machine paths of directories the mesh created only as parents of declared paths; removed
    /// again (when empty) once no declared path needs them.
    #[serde(default)]
    pub made_parents: BTreeSet<String>,
    /// Per resource id, the failure being retried.
    #[serde(default)]
    pub failures: BTreeMap<String, FailureRecord>,
    /// Resource ids of declared containers that owe a restart: a file in their `restart_on` is
    /// about to change (written before the file's commit), and the restart has not been made
    /// yet. A host killed between the two restarts them on the next apply (the rule “Resources
    /// declared together apply all-or-nothing”); a failed restart stays owed. Absent from the file
    /// when empty (an older build reads it).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub pending_restarts: BTreeSet<String>,
    /// Per declared job's resource id, the digest of what it ran when it last succeeded
    /// ([`mesh_model::declaration::JobSpec::run_digest`]): while it is the same, the job does
    /// not run again. Absent from the file when empty (an older build reads it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub jobs: BTreeMap<String, String>,
}

impl Default for StateFile {
    fn default() -> Self {
        StateFile {
            format: STATE_FORMAT,
            resources: BTreeMap::new(),
            made_parents: BTreeSet::new(),
            failures: BTreeMap::new(),
            pending_restarts: BTreeSet::new(),
            jobs: BTreeMap::new(),
        }
    }
}

/// One resource the mesh holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Record {
    /// What on the machine it is.
    pub target: Target,
    /// Whether the mesh made it or found it (and what it found).
    pub origin: Origin,
}

/// What on the machine a resource is (externally tagged: `{"file": {"path": "/etc/motd"}}`,
/// which reads faster than an internal tag for the tens of thousands of records a host keeps).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// A regular file at a machine path.
    File {
        /// The machine path.
        path: String,
    },
    /// A directory at a machine path.
    Directory {
        /// The machine path.
        path: String,
    },
    /// An account's membership of a group.
    Membership {
        /// The account.
        account: String,
        /// The group.
        group: String,
    },
    /// A container by name.
    Container {
        /// Its name on the machine.
        name: String,
    },
    /// A podman network by name.
    Network {
        /// Its name on the machine.
        name: String,
    },
    /// A system account (and its group) by name.
    Account {
        /// The account's name.
        name: String,
    },
    /// One line in a file the mesh did not make.
    Line {
        /// The file's machine path.
        path: String,
        /// The line.
        line: String,
    },
}

impl Target {
    /// Whether it is what the declared `spec` is on the machine (`Target::of(spec) == self`,
    /// without making one).
    pub fn is_of(&self, spec: &Spec) -> bool {
        match (spec, self) {
            (Spec::File(f), Target::File { path }) => f.path == *path,
            (Spec::Directory(d), Target::Directory { path }) => d.path == *path,
            (Spec::Membership(m), Target::Membership { account, group }) => {
                m.account == *account && m.group == *group
            }
            (Spec::Container(c), Target::Container { name }) => c.name == *name,
            (Spec::Network(n), Target::Network { name }) => n.name == *name,
            (Spec::Account(a), Target::Account { name }) => a.name == *name,
            (Spec::Line(l), Target::Line { path, line }) => l.path == *path && l.line == *line,
            (
                Spec::File(_)
                | Spec::Directory(_)
                | Spec::Membership(_)
                | Spec::Container(_)
                | Spec::Network(_)
                | Spec::Account(_)
                | Spec::Job(_)
                | Spec::Line(_),
                _,
            ) => false,
        }
    }

    /// What a declared resource is on the machine.
    pub fn of(spec: &Spec) -> Target {
        match spec {
            Spec::File(f) => Target::File {
                path: f.path.clone(),
            },
            Spec::Directory(d) => Target::Directory {
                path: d.path.clone(),
            },
            Spec::Membership(m) => Target::Membership {
                account: m.account.clone(),
                group: m.group.clone(),
            },
            Spec::Container(c) => Target::Container {
                name: c.name.clone(),
            },
            Spec::Network(n) => Target::Network {
                name: n.name.clone(),
            },
            Spec::Account(a) => Target::Account {
                name: a.name.clone(),
            },
            Spec::Line(l) => Target::Line {
                path: l.path.clone(),
                line: l.line.clone(),
            },
            // Never recorded (the state keeps what it last ran); its container, while it runs.
            Spec::Job(j) => Target::Container {
                name: j.run.name.clone(),
            },
        }
    }

    /// When it is given back among the others no longer declared: containers, networks,
    /// memberships, then files, then directories deepest first, then accounts (last: what one
    /// owned is released first, and what is kept keeps it).
    pub fn release_rank(&self) -> (u8, usize) {
        match self {
            Target::Container { .. } => (0, 0),
            Target::Network { .. } => (1, 0),
            Target::Membership { .. } => (2, 0),
            Target::Line { .. } => (2, 1),
            Target::File { .. } => (3, 0),
            Target::Directory { path } => (4, usize::MAX - crate::paths::depth(path)),
            Target::Account { .. } => (5, 0),
        }
    }

    /// The machine path it holds whole (a file's, a directory's), if it holds one.
    pub fn whole_path(&self) -> Option<&str> {
        match self {
            Target::File { path } | Target::Directory { path } => Some(path),
            Target::Line { .. }
            | Target::Membership { .. }
            | Target::Container { .. }
            | Target::Network { .. }
            | Target::Account { .. } => None,
        }
    }
}

/// Whether the mesh made a resource or found it there, and what it found (`"made"`, or
/// `{"found-file": {...}}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// Nothing was there: the mesh made it, and removes it when it is undeclared.
    Made,
    /// A regular file was there; it is given back byte for byte, with mode and owner.
    FoundFile {
        /// The sha256 (hex) of its bytes, kept in `found/<sha256>`.
        content: String,
        /// Its permission bits.
        mode: u32,
        /// Its owner's uid.
        uid: u32,
        /// Its group's gid.
        gid: u32,
    },
    /// A directory was there; its mode and owner are given back, it is never removed.
    FoundDirectory {
        /// Its permission bits.
        mode: u32,
        /// Its owner's uid.
        uid: u32,
        /// Its group's gid.
        gid: u32,
    },
    /// The account was already a member of the group; it stays one when undeclared.
    FoundMembership,
    /// The account was there, with the ids declared (or none declared): adopted, never removed.
    FoundAccount,
    /// The line was in the file already: it stays when undeclared.
    FoundLine,
    /// The line took the place of another (the first that started with its `match`), put back
    /// when undeclared.
    ReplacedLine {
        /// The line it replaced.
        was: String,
    },
}

impl Origin {
    /// The digest of the found bytes it keeps in the state directory (`found/<sha256>`), if it
    /// keeps some.
    pub fn kept_content(&self) -> Option<&str> {
        match self {
            Origin::FoundFile { content, .. } => Some(content),
            Origin::Made
            | Origin::FoundDirectory { .. }
            | Origin::FoundMembership
            | Origin::FoundAccount
            | Origin::FoundLine
            | Origin::ReplacedLine { .. } => None,
        }
    }
}

/// A resource that failed and is being retried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct FailureRecord {
    /// The digest of the resource as declared when it failed; another declaration starts afresh.
    pub declared: String,
    /// Consecutive failed attempts.
    pub attempts: u32,
    /// When it first failed (seconds since the epoch).
    pub since: u64,
    /// The latest reason.
    pub last_reason: String,
    /// When it may be tried again.
    pub retry_at: u64,
}

/// The marker present while an apply runs (`in-progress.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct InProgress {
    /// The format version.
    pub format: u32,
    /// The digest of the declaration being applied.
    pub declaration: String,
    /// When the apply started.
    pub started_at: u64,
}

/// A together group being committed (`group-commit.json`, the rule “Resources declared together
/// apply all-or-nothing”): written before its first commit step, removed once the group is whole
/// (before its `.mesh-old` copies and containers go) or put back. Found on start, it says the host
/// stopped in the middle of the group's commit: the next apply puts the whole group back before
/// anything else (`crate::put_back_interrupted_group`).
///
/// It holds every member the commit changes, with what it was before. A record written before
/// directories, memberships and containers were recorded (files only) reads as one with none
/// of them; a record of a group with none of them is written as such a record, so an older
/// build reads it. A field a newer minor version adds is read and kept ([`GroupCommit::newer`]);
/// but a record naming members of a kind this build does not know (a non-empty list under an
/// unknown key) is refused by name rather than put back in part (*resources declared together
/// apply all-or-nothing*).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GroupCommit {
    /// The format version.
    pub format: u32,
    /// The group (`<module>/<group>`).
    pub group: String,
    /// Its member files, in commit order.
    pub files: Vec<GroupFile>,
    /// Its member directories the commit creates or whose mode or owner it changes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub directories: Vec<GroupDirectory>,
    /// Its memberships the commit adds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memberships: Vec<GroupMembership>,
    /// Its member containers the commit brings to their spec.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<GroupContainer>,
    /// Fields a newer minor version wrote that this build does not know, kept as read.
    #[serde(flatten)]
    pub newer: std::collections::BTreeMap<String, serde_json::Value>,
}

/// A member file of a [`GroupCommit`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GroupFile {
    /// Its full path (under the root).
    pub target: PathBuf,
    /// Whether a file was there before (kept as `.<name>.mesh-old` while the group commits);
    /// if not, putting back removes it.
    pub existed: bool,
}

/// A member directory of a [`GroupCommit`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GroupDirectory {
    /// Its full path (under the root).
    pub target: PathBuf,
    /// Whether the commit creates it (putting back removes it, when empty); if not, putting
    /// back gives it the mode and owner below.
    pub created: bool,
    /// Its permission bits before.
    pub mode: u32,
    /// Its owner's uid before.
    pub uid: u32,
    /// Its group's gid before.
    pub gid: u32,
}

/// A membership a [`GroupCommit`] adds (the account was not in the group): putting back
/// removes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GroupMembership {
    /// The account.
    pub account: String,
    /// The group.
    pub group: String,
}

/// A member container of a [`GroupCommit`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct GroupContainer {
    /// Its resource id (what its labels name).
    pub resource: String,
    /// Its name on the machine.
    pub name: String,
    /// What it was before the commit.
    pub before: ContainerWas,
}

/// What a together member container was before its group's commit, as putting it back needs
/// it (`"absent"`, or `{"replaced": {...}}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContainerWas {
    /// None was there: the commit creates it, putting back removes it.
    Absent,
    /// It was there as declared, stopped: the commit starts it, putting back stops it.
    Stopped,
    /// It ran as declared: the commit leaves it (a restart waits for the whole group).
    Running,
    /// Its spec changed: the commit stops it, keeps it under `kept_as` and makes its
    /// replacement; putting back removes the replacement and gives it its name back.
    #[serde(rename_all = "kebab-case")]
    Replaced {
        /// The name it is kept under while the group commits (`<name>.mesh-old`).
        kept_as: String,
        /// Its podman id: only the container with this id is given its name back.
        id: String,
        /// Whether it ran (putting back starts it again).
        running: bool,
    },
}

/// The state directory of one host.
pub(crate) struct StateDir {
    dir: PathBuf,
    /// `state.json` as last read or written here ([`FileIdentity`]).
    state_seen: std::cell::Cell<Option<FileIdentity>>,
}

/// Which file a path held when it was read or written: device, inode, size and mtime. Every
/// state file is written as a new file renamed into place, so another write gives another
/// inode while this one exists.
type FileIdentity = (u64, u64, u64, i64);

fn identity_of(meta: &std::fs::Metadata) -> FileIdentity {
    use std::os::unix::fs::MetadataExt as _;
    (
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime()
            .saturating_mul(1_000_000_000)
            .saturating_add(meta.mtime_nsec()),
    )
}

/// `state.json` as this process last read or wrote it, by state directory, with the identity
/// of that file: an apply takes it instead of parsing the file again when the file is still
/// that one (a no-op apply of 10,000 files), and leaves it when it is done
/// ([`StateDir::keep_state`]).
static KEPT_STATES: std::sync::Mutex<BTreeMap<PathBuf, (FileIdentity, StateFile)>> =
    std::sync::Mutex::new(BTreeMap::new());

impl StateDir {
    /// Opens (creating if needed) a state directory.
    pub(crate) fn open(dir: &Path) -> Result<Self, ApplyError> {
        std::fs::create_dir_all(dir.join(FOUND_DIR)).map_err(|source| ApplyError::StateWrite {
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(StateDir {
            dir: dir.to_path_buf(),
            state_seen: std::cell::Cell::new(None),
        })
    }

    /// Reads `state.json` (a fresh state when there is none): the one this process kept
    /// ([`StateDir::keep_state`]) when the file is still the one it was read from or written
    /// as, else the file.
    pub(crate) fn read_state(&self) -> Result<StateFile, ApplyError> {
        let path = self.dir.join(STATE_FILE);
        let read_error = |source| ApplyError::StateRead {
            path: path.clone(),
            source,
        };
        let mut file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.state_seen.set(None);
                return Ok(StateFile::default());
            }
            Err(source) => return Err(read_error(source)),
        };
        let seen = identity_of(&file.metadata().map_err(read_error)?);
        let kept = KEPT_STATES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.dir);
        if let Some((identity, state)) = kept {
            if identity == seen {
                self.state_seen.set(Some(seen));
                return Ok(state);
            }
        }
        let mut bytes = Vec::new();
        io::Read::read_to_end(&mut file, &mut bytes).map_err(read_error)?;
        let state = parse_json::<StateFile>(&path, &bytes, |s| s.format)?;
        self.state_seen.set(Some(seen));
        Ok(state)
    }

    /// Writes `state.json` atomically.
    pub(crate) fn write_state(&self, state: &StateFile) -> Result<(), ApplyError> {
        let path = self.dir.join(STATE_FILE);
        let bytes = serde_json::to_vec(state).expect("the state always serializes");
        self.state_seen.set(None);
        let written = fsops::write_atomic_private_seen(&path, &bytes)
            .map_err(|source| ApplyError::StateWrite { path, source })?;
        self.state_seen.set(Some(identity_of(&written)));
        Ok(())
    }

    /// Keeps `state` in this process for the next [`StateDir::read_state`] of this directory;
    /// it must be the state as last read or written here (an apply's, once it has written
    /// what it changed).
    pub(crate) fn keep_state(&self, state: StateFile) {
        if let Some(seen) = self.state_seen.get() {
            KEPT_STATES
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(self.dir.clone(), (seen, state));
        }
    }

    /// Reads the mid-change marker, if an apply is (or was left) under way.
    pub(crate) fn read_in_progress(&self) -> Result<Option<InProgress>, ApplyError> {
        read_json::<InProgress>(&self.dir.join(IN_PROGRESS_FILE), |m| m.format)
    }

    /// Writes the mid-change marker atomically.
    pub(crate) fn write_in_progress(&self, marker: &InProgress) -> Result<(), ApplyError> {
        let path = self.dir.join(IN_PROGRESS_FILE);
        let bytes = serde_json::to_vec(marker).expect("the marker always serializes");
        fsops::write_atomic_private(&path, &bytes)
            .map_err(|source| ApplyError::StateWrite { path, source })
    }

    /// Reads the record of a together group left mid-commit, if any. Putting a group back
    /// removes and renames the files it names, so a record naming a path outside `root` (or
    /// one climbing out with `..`, or reaching through a file or a link under it) is refused
    /// whole, before anything is touched: a state directory copied from another machine, or a
    /// damaged one, must not reach outside the machine it applies to (*the host never destroys
    /// what it did not make*).
    pub(crate) fn read_group_commit(&self, root: &Path) -> Result<Option<GroupCommit>, ApplyError> {
        let path = self.dir.join(GROUP_COMMIT_FILE);
        let Some(record) = read_json::<GroupCommit>(&path, |g| g.format)? else {
            return Ok(None);
        };
        let unknown_members: Vec<&str> = record
            .newer
            .iter()
            .filter(|(_, value)| value.as_array().is_some_and(|members| !members.is_empty()))
            .map(|(key, _)| key.as_str())
            .collect();
        if !unknown_members.is_empty() {
            return Err(ApplyError::StateFormat {
                path,
                reason: format!(
                    "a newer mesh-host wrote it, naming members of kinds this build does not \
                     know ({}): it is not put back in part; the newer mesh-host puts it back",
                    unknown_members.join(", ")
                ),
            });
        }
        let targets = record
            .files
            .iter()
            .map(|f| &f.target)
            .chain(record.directories.iter().map(|d| &d.target));
        for target in targets {
            if !is_under(target, root) {
                return Err(ApplyError::StateFormat {
                    path,
                    reason: format!(
                        "it names `{}`, which is not under the root `{}`",
                        target.display(),
                        root.display()
                    ),
                });
            }
            if let Some(through) = not_a_directory_above(target, root) {
                return Err(ApplyError::StateFormat {
                    path,
                    reason: format!(
                        "it names `{}`, under `{}`, which is not a directory (a file, or a \
                         link that could lead out of the root)",
                        target.display(),
                        through.display()
                    ),
                });
            }
        }
        Ok(Some(record))
    }

    /// Writes the record of a together group about to commit, atomically.
    pub(crate) fn write_group_commit(&self, group: &GroupCommit) -> Result<(), ApplyError> {
        let path = self.dir.join(GROUP_COMMIT_FILE);
        let bytes = serde_json::to_vec(group).expect("a group record always serializes");
        fsops::write_atomic_private(&path, &bytes)
            .map_err(|source| ApplyError::StateWrite { path, source })
    }

    /// Removes the record of a together group's commit (durably).
    pub(crate) fn clear_group_commit(&self) -> Result<(), ApplyError> {
        let path = self.dir.join(GROUP_COMMIT_FILE);
        let result = match std::fs::remove_file(&path) {
            Ok(()) => fsops::sync_dir(&self.dir),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        };
        result.map_err(|source| ApplyError::StateWrite { path, source })
    }

    /// Removes the mid-change marker (durably).
    pub(crate) fn clear_in_progress(&self) -> Result<(), ApplyError> {
        let path = self.dir.join(IN_PROGRESS_FILE);
        let result = match std::fs::remove_file(&path) {
            Ok(()) => fsops::sync_dir(&self.dir),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        };
        result.map_err(|source| ApplyError::StateWrite { path, source })
    }

    /// Keeps the bytes of a file the mesh is about to write over; returns their sha256 (hex).
    pub(crate) fn keep_found(&self, bytes: &[u8]) -> Result<String, ApplyError> {
        use sha2::Digest as _;
        let hex = hex::encode(sha2::Sha256::digest(bytes));
        let path = self.dir.join(FOUND_DIR).join(&hex);
        if !path.exists() {
            fsops::write_atomic_private(&path, bytes)
                .map_err(|source| ApplyError::StateWrite { path, source })?;
        }
        Ok(hex)
    }

    /// The bytes kept by [`StateDir::keep_found`].
    pub(crate) fn found(&self, hex: &str) -> io::Result<Vec<u8>> {
        std::fs::read(self.dir.join(FOUND_DIR).join(hex))
    }

    /// Lets go of kept bytes no record names any more.
    pub(crate) fn forget_found_except(&self, keep: &BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(self.dir.join(FOUND_DIR)) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !keep.contains(&name) {
                // Best effort: a blob left behind is only wasted space, never a wrong answer.
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// The first path between `root` and `path` (both excluded) that is there and is not a
/// directory — a file, or a link, which could lead out of the root — if any.
fn not_a_directory_above(path: &Path, root: &Path) -> Option<PathBuf> {
    let mut above: Vec<&Path> = path
        .ancestors()
        .skip(1)
        .take_while(|at| *at != root && at.starts_with(root))
        .collect();
    above.reverse();
    for at in above {
        match std::fs::symlink_metadata(at) {
            Ok(meta) if !meta.is_dir() => return Some(at.to_owned()),
            Ok(_) => {}
            // Nothing there (nor under it): what the group made is gone already.
            Err(_) => return None,
        }
    }
    None
}

/// Whether `path` is `root` itself or below it, with no `..` that could climb out.
fn is_under(path: &Path, root: &Path) -> bool {
    path.starts_with(root)
        && !path
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
}

fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    format_of: impl Fn(&T) -> u32,
) -> Result<Option<T>, ApplyError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ApplyError::StateRead {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    parse_json(path, &bytes, format_of).map(Some)
}

fn parse_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    bytes: &[u8],
    format_of: impl Fn(&T) -> u32,
) -> Result<T, ApplyError> {
    #[derive(Deserialize)]
    struct Version {
        format: u32,
    }
    let version: Version = serde_json::from_slice(bytes).map_err(|e| ApplyError::StateFormat {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    if version.format != STATE_FORMAT {
        return Err(ApplyError::StateFormat {
            path: path.to_path_buf(),
            reason: format!(
                "format {}, this build reads format {STATE_FORMAT}",
                version.format
            ),
        });
    }
    let value: T = serde_json::from_slice(bytes).map_err(|e| ApplyError::StateFormat {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    debug_assert_eq!(format_of(&value), STATE_FORMAT);
    Ok(value)
}

/// What the host with this state directory holds: per resource id, what it is and whether the
/// mesh made or found it (empty when there is no state yet). Changes nothing; a read for
/// people (`mesh-host forget` without `--yes`).
///
/// # Errors
/// [`ApplyError::StateRead`] or [`ApplyError::StateFormat`] when `state.json` cannot be read.
pub fn held(state_dir: &Path) -> Result<BTreeMap<String, Record>, ApplyError> {
    Ok(
        read_json::<StateFile>(&state_dir.join(STATE_FILE), |s| s.format)?
            .map(|state| state.resources)
            .unwrap_or_default(),
    )
}

/// Whether the host with this state directory is **mid-change**: an apply is under way, or one was
/// interrupted and no apply has finished since.
///
/// # Errors
/// [`ApplyError::StateRead`] or [`ApplyError::StateFormat`] when the marker cannot be read.
pub fn is_mid_change(state_dir: &Path) -> Result<bool, ApplyError> {
    Ok(read_json::<InProgress>(&state_dir.join(IN_PROGRESS_FILE), |m| m.format)?.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_file_another_writer_replaced_is_read_again_not_taken_from_memory() {
        let dir = tempfile::tempdir().unwrap();
        let state_dir = StateDir::open(dir.path()).unwrap();
        let mut ours = StateFile::default();
        ours.made_parents.insert("/ours".to_owned());
        state_dir.write_state(&ours).unwrap();
        state_dir.keep_state(ours.clone());
        assert_eq!(
            StateDir::open(dir.path()).unwrap().read_state().unwrap(),
            ours
        );
        state_dir.keep_state(ours.clone());

        // Another process writes the file (as every writer does: a new file renamed in).
        let mut theirs = StateFile::default();
        theirs.made_parents.insert("/theirs".to_owned());
        let other = dir.path().join("other.json");
        std::fs::write(&other, serde_json::to_vec(&theirs).unwrap()).unwrap();
        std::fs::rename(&other, dir.path().join(STATE_FILE)).unwrap();
        assert_eq!(
            StateDir::open(dir.path()).unwrap().read_state().unwrap(),
            theirs,
            "the file, not what this process kept"
        );
    }

    #[test]
    fn a_state_file_without_restarts_owed_reads_as_before_and_one_with_them_round_trips() {
        // As written before restarts owed were recorded.
        let old = br#"{"format":1,"resources":{},"made-parents":[],"failures":{}}"#;
        let state = parse_json::<StateFile>(Path::new("state.json"), old, |s| s.format).unwrap();
        assert!(state.pending_restarts.is_empty());
        // None owed: written as before (an older build reads it).
        assert_eq!(serde_json::to_vec(&state).unwrap(), old.to_vec());

        let mut owing = state;
        owing
            .pending_restarts
            .insert("app/container/app".to_owned());
        let bytes = serde_json::to_vec(&owing).unwrap();
        assert!(
            String::from_utf8_lossy(&bytes).contains(r#""pending-restarts":["app/container/app"]"#),
            "{}",
            String::from_utf8_lossy(&bytes)
        );
        let read = parse_json::<StateFile>(Path::new("state.json"), &bytes, |s| s.format).unwrap();
        assert_eq!(read, owing);
    }

    #[test]
    fn a_group_record_of_files_only_reads_as_before_and_one_with_containers_round_trips() {
        // As written before directories, memberships and containers were recorded.
        let old =
            br#"{"format":1,"group":"app/pair","files":[{"target":"/r/etc/a","existed":true}]}"#;
        let record =
            parse_json::<GroupCommit>(Path::new("group-commit.json"), old, |g| g.format).unwrap();
        assert_eq!(record.files.len(), 1);
        assert!(record.directories.is_empty() && record.memberships.is_empty());
        assert!(record.containers.is_empty());
        // A record of files only is written as such a record (an older build reads it).
        assert_eq!(serde_json::to_vec(&record).unwrap(), old.to_vec());

        let full = GroupCommit {
            containers: vec![GroupContainer {
                resource: "app/container/app".to_owned(),
                name: "mesh-app-app".to_owned(),
                before: ContainerWas::Replaced {
                    kept_as: "mesh-app-app.mesh-old".to_owned(),
                    id: "0123abcd".to_owned(),
                    running: true,
                },
            }],
            memberships: vec![GroupMembership {
                account: "alice".to_owned(),
                group: "wheel".to_owned(),
            }],
            directories: vec![GroupDirectory {
                target: PathBuf::from("/r/srv/data"),
                created: true,
                mode: 0,
                uid: 0,
                gid: 0,
            }],
            ..record
        };
        let bytes = serde_json::to_vec(&full).unwrap();
        assert!(
            String::from_utf8_lossy(&bytes)
                .contains(r#""replaced":{"kept-as":"mesh-app-app.mesh-old""#),
            "{}",
            String::from_utf8_lossy(&bytes)
        );
        let read = parse_json::<GroupCommit>(Path::new("group-commit.json"), &bytes, |g| g.format)
            .unwrap();
        assert_eq!(read, full);
    }

    /// A rolling upgrade, or a host taken back a version: what a newer minor version wrote
    /// reads here, its unknown fields ignored (`state.json`) or kept (`group-commit.json`).
    #[test]
    fn a_newer_minor_versions_fields_are_read() {
        let newer = br#"{"format":1,"resources":{},"made-parents":["/x"],"uptime":{"secs":3}}"#;
        let state = parse_json::<StateFile>(Path::new("state.json"), newer, |s| s.format).unwrap();
        assert!(state.made_parents.contains("/x"));

        let dir = tempfile::tempdir().unwrap();
        let state_dir = StateDir::open(dir.path()).unwrap();
        let path = dir.path().join(GROUP_COMMIT_FILE);
        std::fs::write(
            &path,
            br#"{"format":1,"group":"app/pair","files":[{"target":"/r/etc/a","existed":true}],"note":"x","sockets":[]}"#,
        )
        .unwrap();
        let record = state_dir
            .read_group_commit(Path::new("/r"))
            .unwrap()
            .unwrap();
        assert_eq!(record.files.len(), 1);
        assert_eq!(record.newer["note"], "x");

        // Members of a kind this build does not know: refused by name, never put back in part.
        std::fs::write(
            &path,
            br#"{"format":1,"group":"app/pair","files":[],"sockets":[{"target":"/r/run/s"}]}"#,
        )
        .unwrap();
        let refused = state_dir
            .read_group_commit(Path::new("/r"))
            .unwrap_err()
            .to_string();
        assert!(refused.contains("group-commit.json"), "{refused}");
        assert!(
            refused.contains("kinds this build does not know (sockets)"),
            "{refused}"
        );
    }
}
