//! The apply loop: release what is no longer declared, record what is about to be taken, apply
//! unit by unit in dependency order, report.

use crate::accounts::{AccountDatabase, Accounts, ShadowUtils};
use crate::containers::{ContainerRuntime, DeclaredContainer, NoContainerRuntime, SetAside};
use crate::fsops::{self, Wanted};
use crate::order::{order_of, Unit};
use crate::outcomes::Outcomes;
use crate::paths::{is_ancestor, Opened, Resolved, RootPaths};
use crate::podman::Podman;
use crate::progress::{pause_point, ApplyProgress, NoProgress};
use crate::state::STATE_FORMAT;
use crate::state::{
    ContainerWas, FailureRecord, GroupCommit, GroupContainer, GroupDirectory, GroupFile,
    GroupMembership, InProgress, Origin, Record, StateDir, StateFile, Target,
};
use crate::{ApplyError, ContainerRuntimeChoice, HostConfig};
use mesh_model::declaration::{
    ContainerSpec, Declaration, Declared, DirectorySpec, FileSpec, MembershipSpec, Resource, Spec,
};
use mesh_model::report::{Finding, MachineState, Outcome, Report, REPORT_FORMAT};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;

/// How many owner and group pairs an apply keeps the ids of ([`Engine::owner_ids`]).
const OWNERS_KEPT: usize = 16;

/// The IO seams an apply uses.
pub struct Seams<'a> {
    /// Accounts and memberships.
    pub accounts: &'a dyn Accounts,
    /// Containers.
    pub containers: &'a dyn ContainerRuntime,
    /// Told before the apply changes anything ([`crate::NoProgress`] when nobody listens).
    pub progress: &'a dyn ApplyProgress,
}

/// Applies a declaration to the machine under `config.root`; `now` is seconds since the epoch.
///
/// Uses the real seams: [`ShadowUtils`] for memberships, and for containers the runtime
/// [`HostConfig::containers`] names ([`Podman`] by default). See [`apply_with`] for the whole
/// contract.
///
/// # Errors
/// As [`apply_with`].
pub fn apply(
    config: &HostConfig,
    declaration: &dyn Declared,
    now: u64,
) -> Result<Report, ApplyError> {
    apply_archived(config, declaration, &ArchivedContents::default(), now)
}

/// Applies a declaration with the given seams.
///
/// The steps: resources no longer declared are released (what the mesh made is removed, what it
/// found is given back); what is at each newly declared path is recorded (made or found, with the
/// found bytes kept) **before** anything is changed; then every resource is attempted in
/// dependency order, a together group as one unit; the state is written. The mid-change marker
/// (see [`crate::is_mid_change`]) is written before the first change, in the state directory or
/// under the root, and removed at the end; an apply that changes nothing writes nothing but
/// (when a stamp was new) the stat cache ([`crate::stamps`]).
///
/// A file's content is read only when its stamp (size, mtime, ctime, inode) differs from the
/// one kept when it was last read or written as declared; otherwise one lstat says its mode
/// and owner.
///
/// # Guarantees
/// - Every declared resource gets an outcome; a failure of one never stops another (except
///   those that come after it, which are `skipped{gated_by}`, and the members of its together
///   group, which fail with it).
/// - Nothing outside the declared paths under the root is touched, save temporary files beside
///   them and parent directories the mesh creates (and removes again once they are not needed and
///   empty).
/// - Every file write is atomic; a host killed at any point leaves every declared path holding
///   either what it held or what was declared, and a state directory the next apply reads (that
///   apply reports `resumed_from_mid_change`).
/// - A together group is staged first; if a member cannot be staged nothing live changed, and if a
///   commit step fails the members already committed are put back.
/// - A failed resource is retried only once its backoff has elapsed (`waiting` until then) and is
///   reported `stuck` past the [`crate::RetryPolicy`] threshold.
/// - A container held still by an open maintenance window ([`crate::window`]) is not touched —
///   not created, started, restarted, recreated nor removed — and is reported
///   `held-still{step}`; the report lists the open windows. The first apply after the window
///   converges it (a stopped container is started).
///
/// # Idempotency
/// Applying the same declaration again changes nothing and reports every resource `unchanged`
/// (or still failing).
///
/// # Errors
/// [`ApplyError::Declaration`] for a declaration that breaks its rules, and the `State*` errors
/// when the state directory cannot be read or written. When the error comes before anything was
/// changed (an invalid declaration, an unreadable state directory, a marker that cannot be
/// written), nothing under the root changed. A state write failing later leaves the marker, so
/// the machine stays mid-change until an apply finishes.
pub fn apply_with(
    config: &HostConfig,
    declaration: &dyn Declared,
    now: u64,
    seams: &Seams<'_>,
) -> Result<Report, ApplyError> {
    apply_archived_with(
        config,
        declaration,
        &ArchivedContents::default(),
        now,
        seams,
    )
}

/// Applies a declaration whose archived files ([`FileSpec::source`]) the host read from their
/// archives: `contents` holds each one's content, or why it could not be read.
///
/// The declaration is applied as sent (the report names its digest). A file whose content
/// could not be read is not attempted, and nothing of it is written or released: it is
/// reported failed with the reason given (and retried with backoff, as any failure), the
/// members of its together group fail with it, and what comes after it is skipped. Everything
/// else is applied as [`apply_with`] says.
///
/// # Errors
/// As [`apply_with`].
pub fn apply_archived(
    config: &HostConfig,
    declaration: &dyn Declared,
    contents: &ArchivedContents,
    now: u64,
) -> Result<Report, ApplyError> {
    apply_archived_live(config, declaration, contents, now, &NoProgress)
}

/// [`apply_archived`], telling `progress` before the first change (rule 30: a daemon publishes
/// the `mid-change` report it is given).
///
/// # Errors
/// As [`apply_with`].
pub fn apply_archived_live(
    config: &HostConfig,
    declaration: &dyn Declared,
    contents: &ArchivedContents,
    now: u64,
    progress: &dyn ApplyProgress,
) -> Result<Report, ApplyError> {
    with_real_seams(config, progress, |seams| {
        apply_archived_with(config, declaration, contents, now, seams)
    })
}

/// Runs `then` with the real seams: [`ShadowUtils`], and the runtime
/// [`HostConfig::containers`] names.
fn with_real_seams<T>(
    config: &HostConfig,
    progress: &dyn ApplyProgress,
    then: impl FnOnce(&Seams<'_>) -> T,
) -> T {
    let accounts = ShadowUtils::new(&config.root);
    let podman;
    let containers: &dyn ContainerRuntime = match &config.containers {
        ContainerRuntimeChoice::Podman(podman_config) => {
            podman = Podman::new(podman_config.clone(), &config.root);
            &podman
        }
        ContainerRuntimeChoice::Unsupported => &NoContainerRuntime,
    };
    then(&Seams {
        accounts: &accounts,
        containers,
        progress,
    })
}

/// Puts back a together group whose commit was interrupted (a [`crate::state::GroupCommit`]
/// left in the state directory), with the real seams ([`apply`]'s): the first step of the next
/// apply, public so that a test can look at the machine as that apply will find it. See
/// [`put_back_interrupted_group_with`].
///
/// # Errors
/// As [`put_back_interrupted_group_with`].
pub fn put_back_interrupted_group(config: &HostConfig) -> Result<Option<String>, ApplyError> {
    with_real_seams(config, &NoProgress, |seams| {
        put_back_interrupted_group_with(config, seams)
    })
}

/// Puts back a together group whose commit was interrupted, with the given seams; returns the
/// group's name when there was one. Every apply does this first (rule 5).
///
/// # Guarantees
/// The whole group is as it was before its commit, whichever step the host stopped at: each
/// member file that was there gets its `.mesh-old` copy back and each that was not is removed
/// (with its staged copy); each membership the commit added is removed; each directory it
/// created is removed (left, and said, when it holds something) and each it changed gets its
/// mode and owner back; each container is put back by [`ContainerRuntime::restore`] (one it
/// created removed, one it started stopped, one it replaced given its name back from
/// `<name>.mesh-old` and started if it ran). Then the record goes. Containers come last, so a
/// container given back starts with the group's old files. Idempotent.
///
/// # Errors
/// When the record cannot be read or removed, or a member cannot be put back
/// ([`ApplyError::GroupPutBack`]): the record stays, the `.mesh-old` copies and containers are
/// kept, and the next apply tries again.
pub fn put_back_interrupted_group_with(
    config: &HostConfig,
    seams: &Seams<'_>,
) -> Result<Option<String>, ApplyError> {
    let dir = StateDir::open(&config.state_dir)?;
    Ok(put_back_group(&dir, seams)?.map(|(group, _)| group))
}

/// [`put_back_interrupted_group_with`]: the group's name and what was left (a created
/// directory that holds something), when there was one.
fn put_back_group(
    dir: &StateDir,
    seams: &Seams<'_>,
) -> Result<Option<(String, Vec<String>)>, ApplyError> {
    let Some(record) = dir.read_group_commit()? else {
        return Ok(None);
    };
    let failed = |reason: String| ApplyError::GroupPutBack {
        group: record.group.clone(),
        reason,
    };
    let mut left = Vec::new();
    for file in &record.files {
        let old = fsops::old_name(&file.target);
        let result = if file.existed {
            match fs::symlink_metadata(&old) {
                // Committed (or about to be): the copy is the file as it was.
                Ok(_) => fs::rename(&old, &file.target),
                // Not committed yet: the file is as it was.
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            }
        } else {
            fsops::remove_if_present(&file.target)
        }
        .and_then(|()| fsops::remove_if_present(&fsops::new_name(&file.target)));
        result.map_err(|source| ApplyError::StateWrite {
            path: file.target.clone(),
            source,
        })?;
        if let Some(parent) = file.target.parent() {
            let _ = fsops::sync_dir(parent);
        }
    }
    for membership in &record.memberships {
        let (account, group) = (&membership.account, &membership.group);
        let db = seams
            .accounts
            .read()
            .map_err(|e| failed(format!("cannot read the accounts: {e}")))?;
        if db.is_member(account, group) {
            seams
                .accounts
                .remove_membership(account, group)
                .map_err(|e| failed(format!("cannot remove `{account}` from `{group}`: {e}")))?;
        }
    }
    for directory in record.directories.iter().rev() {
        let target = &directory.target;
        let result = if directory.created {
            match fs::remove_dir(target) {
                Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => {
                    left.push(format!(
                        "directory `{}`, which the group created, holds something: it is left",
                        target.display()
                    ));
                    Ok(())
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        } else {
            fsops::set_mode_owner(target, directory.mode, directory.uid, directory.gid)
        };
        result.map_err(|e| failed(format!("directory `{}`: {e}", target.display())))?;
    }
    for container in record.containers.iter().rev() {
        seams
            .containers
            .restore(&container.resource, &container.name, &container.before)
            .map_err(|e| failed(format!("container `{}`: {e}", container.name)))?;
    }
    dir.clear_group_commit()?;
    Ok(Some((record.group, left)))
}

/// The record of a together group about to commit: every member its commit changes, with
/// what it was.
fn group_record(unit: &Unit, members: &[&Resource], staged: &[Staged]) -> GroupCommit {
    let mut record = GroupCommit {
        format: STATE_FORMAT,
        group: unit.group.clone().unwrap_or_default(),
        files: Vec::new(),
        directories: Vec::new(),
        memberships: Vec::new(),
        containers: Vec::new(),
    };
    for (member, step) in members.iter().zip(staged) {
        match step {
            Staged::Nothing => {}
            Staged::File {
                target, existed, ..
            } => record.files.push(GroupFile {
                target: target.clone(),
                existed: *existed,
            }),
            Staged::Directory {
                full,
                create,
                before: (mode, uid, gid),
                ..
            } => record.directories.push(GroupDirectory {
                target: full.clone(),
                created: *create,
                mode: *mode,
                uid: *uid,
                gid: *gid,
            }),
            Staged::Membership { account, group } => record.memberships.push(GroupMembership {
                account: account.clone(),
                group: group.clone(),
            }),
            Staged::Container { spec, was, .. } => record.containers.push(GroupContainer {
                resource: member.id.clone(),
                name: spec.name.clone(),
                before: was.clone(),
            }),
        }
    }
    record
}

/// File resource id → the declared containers that restart on it.
fn restarters_of(declaration: &Declaration) -> BTreeMap<&str, Vec<&str>> {
    let mut out: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for resource in &declaration.resources {
        if let Spec::Container(c) = &resource.spec {
            for file in &c.restart_on {
                out.entry(file.as_str())
                    .or_default()
                    .push(resource.id.as_str());
            }
        }
    }
    out
}

/// [`apply_archived`] with the given seams.
///
/// # Errors
/// As [`apply_with`].
pub fn apply_archived_with(
    config: &HostConfig,
    declaration: &dyn Declared,
    contents: &ArchivedContents,
    now: u64,
    seams: &Seams<'_>,
) -> Result<Report, ApplyError> {
    // Containers are applied under their names on this machine; the report still names the
    // declaration as sent.
    let sent = declaration;
    let renamed = with_container_prefix(sent.declaration(), &config.container_prefix);
    let declaration = renamed.as_ref().unwrap_or(sent.declaration());
    // The digest is needed only for the marker and the report: a declaration not sealed
    // (`mesh_model::declaration::Sealed`, which knows it) is hashed on another core while it
    // is checked, the state read and the resources examined.
    std::thread::scope(|scope| {
        let hashing = scope.spawn(|| sent.digest().into_owned());
        let problems = match &renamed {
            Some(renamed) => renamed.problems(),
            None => sent.problems().into_owned(),
        };
        if !problems.is_empty() {
            return Err(ApplyError::Declaration {
                node: declaration.node.clone(),
                problems,
            });
        }
        let dir = StateDir::open(&config.state_dir)?;
        let state = dir.read_state()?;
        let interrupted = dir.read_in_progress()?;
        apply_examined(
            config,
            (declaration, sent, contents),
            now,
            seams,
            (dir, state, interrupted),
            Digest::Hashing(hashing),
        )
    })
}

/// `declaration` with every container under its name on this machine ([`HostConfig::container_prefix`]
/// before its declared name); `None` when that changes nothing (no prefix, or no container).
fn with_container_prefix(declaration: &Declaration, prefix: &str) -> Option<Declaration> {
    let has_container = declaration
        .resources
        .iter()
        .any(|r| matches!(r.spec, Spec::Container(_)));
    if prefix.is_empty() || !has_container {
        return None;
    }
    let mut renamed = declaration.clone();
    for resource in &mut renamed.resources {
        if let Spec::Container(container) = &mut resource.spec {
            container.name = format!("{prefix}{}", container.name);
        }
    }
    Some(renamed)
}

/// The declaration's digest, being hashed or known.
enum Digest<'s> {
    Hashing(std::thread::ScopedJoinHandle<'s, String>),
    Known(String),
}

impl Digest<'_> {
    fn get(&mut self) -> &str {
        if let Digest::Hashing(_) = self {
            let Digest::Hashing(hashing) = std::mem::replace(self, Digest::Known(String::new()))
            else {
                unreachable!("just matched")
            };
            *self = Digest::Known(hashing.join().expect("hashing a declaration never panics"));
        }
        match self {
            Digest::Known(digest) => digest,
            Digest::Hashing(_) => unreachable!("joined above"),
        }
    }
}

/// The rest of [`apply_with`], once the state directory is read.
fn apply_examined<'s>(
    config: &HostConfig,
    (declaration, sent, contents): (&Declaration, &dyn Declared, &ArchivedContents),
    now: u64,
    seams: &Seams<'_>,
    (dir, state, interrupted): (StateDir, StateFile, Option<InProgress>),
    digest: Digest<'s>,
) -> Result<Report, ApplyError> {
    // A together group left mid-commit is put back whole before anything else (rule 5), and
    // before the accounts are read: putting it back may remove a membership.
    let put_back = put_back_group(&dir, seams)?;
    // Windows that lapsed or whose process is gone ended abnormally (a released window leaves
    // no record): their records go (best effort), and the report says so (issue 13, rule 6).
    let ended = crate::window::prune_closed(&config.state_dir, now).unwrap_or_default();
    let windows = crate::window::open_windows(&config.state_dir, now).map_err(window_error)?;
    let held = windows
        .iter()
        .flat_map(|w| w.containers.iter().map(|c| (c.clone(), w.step.clone())))
        .collect();
    let mut engine = Engine {
        held,
        digest,
        marked: false,
        config,
        declaration,
        sent,
        contents,
        now,
        seams,
        dir,
        state,
        dirty: false,
        paths: RootPaths::new(&config.root),
        accounts: seams.accounts.read().map_err(|e| e.to_string()),
        owners: Vec::new(),
        outcomes: Outcomes::new(declaration),
        undeclared: BTreeMap::new(),
        findings: Vec::new(),
        blocked: unreadable_files(declaration, contents),
        touched_dirs: BTreeSet::new(),
        read_buffer: vec![0; 64 * 1024],
        stamps: crate::stamps::StatCache::take(&config.state_dir),
        restarters: None,
    };
    for closed in &ended {
        engine.findings.push(Finding {
            resource: String::new(),
            message: crate::window::ended_abnormally(closed),
        });
    }
    if let Some((group, left)) = put_back {
        engine.findings.push(Finding {
            resource: String::new(),
            message: format!(
                "together group `{group}` was interrupted in the middle of its commit: it was put \
                 back whole"
            ),
        });
        for message in left {
            engine.findings.push(Finding {
                resource: String::new(),
                message,
            });
        }
    }
    if let Some(interrupted) = &interrupted {
        engine.begin_change()?;
        engine.findings.push(Finding {
            resource: String::new(),
            message: format!(
                "the apply started at {} (declaration {}) was interrupted; the machine was \
                 mid-change and this apply converges it",
                interrupted.started_at, interrupted.declaration
            ),
        });
        engine.remove_leftovers();
    }
    engine.release_undeclared()?;
    engine.discover()?;
    let order = order_of(declaration, sent);
    let (units, cyclic) = &*order;
    for unit in units {
        engine.apply_unit(unit)?;
    }
    for unit in cyclic {
        for &member in &unit.members {
            let id = &declaration.resources[member].id;
            engine.fail(id, "it is part of a dependency cycle (`after`)".to_owned());
        }
    }
    engine.release_unneeded_parents()?;
    engine.finish()?;

    let digest = engine.digest.get().to_owned();
    let outcomes = engine.outcomes.into_map();
    let undeclared = engine.undeclared;
    let whole = outcomes
        .values()
        .chain(undeclared.values())
        .all(Outcome::took);
    Ok(Report {
        format: REPORT_FORMAT,
        node: declaration.node.clone(),
        declaration: digest,
        machine: if whole {
            MachineState::Converged
        } else {
            MachineState::Partial
        },
        resources: outcomes,
        undeclared,
        findings: engine.findings,
        windows: windows.iter().map(crate::window::summary).collect(),
        resumed_from_mid_change: interrupted.is_some(),
        drift: Vec::new(),
        started_at: now,
        finished_at: now,
    })
}

struct Engine<'a, 's> {
    /// Containers held still by an open maintenance window: name → the step's name.
    held: BTreeMap<String, String>,
    /// The declaration's digest (for the marker and the report).
    digest: Digest<'s>,
    /// Whether the marker is written.
    marked: bool,
    config: &'a HostConfig,
    declaration: &'a Declaration,
    /// The declaration as sent (`declaration` is it with containers under their names on this
    /// machine): what it knows of its files' contents.
    sent: &'a dyn Declared,
    /// The content of the declaration's archived files, as the host read it.
    contents: &'a ArchivedContents,
    now: u64,
    seams: &'a Seams<'a>,
    dir: StateDir,
    state: StateFile,
    /// The state changed since it was last written.
    dirty: bool,
    paths: RootPaths,
    accounts: Result<AccountDatabase, String>,
    /// Owner and group pairs already looked up in `accounts`, with their uid and gid
    /// ([`Engine::owner_ids`]); emptied when the accounts are read again.
    owners: Vec<(String, String, (u32, u32))>,
    /// The declared resources' outcomes, by their place in `declaration`.
    outcomes: Outcomes<'a>,
    undeclared: BTreeMap<String, Outcome>,
    findings: Vec<Finding>,
    /// Declared resources that cannot be attempted, and why (the resource they replace could
    /// not be released).
    blocked: BTreeMap<String, String>,
    /// Directories (under the root) whose entries changed: fsynced before the state is written.
    touched_dirs: BTreeSet<PathBuf>,
    /// Reused to compare files with what is declared.
    read_buffer: Vec<u8>,
    /// What each file was when last read or written as declared: a file whose stamp matches
    /// is not read again ([`crate::stamps`]).
    stamps: crate::stamps::StatCache,
    /// File resource id → the declared containers that restart on it (`restart_on`), made the
    /// first time a file is about to change ([`Engine::owe_restarts`]).
    restarters: Option<BTreeMap<&'a str, Vec<&'a str>>>,
}

/// The content of the declaration's archived files, as the host read them from their archives
/// (see [`apply_archived`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArchivedContents {
    /// File resource id → its content, read from its archive and checked against its digest.
    pub read: BTreeMap<String, String>,
    /// File resource id → why its content could not be read (naming the archive and the store).
    pub unavailable: BTreeMap<String, String>,
}

/// The archived files whose content was not read, and why: they cannot be attempted.
fn unreadable_files(
    declaration: &Declaration,
    contents: &ArchivedContents,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for resource in &declaration.resources {
        let Spec::File(file) = &resource.spec else {
            continue;
        };
        if file.content.is_some() || contents.read.contains_key(&resource.id) {
            continue;
        }
        let reason = contents
            .unavailable
            .get(&resource.id)
            .cloned()
            .unwrap_or_else(|| {
                let archive = declaration
                    .archives
                    .get(&resource.module)
                    .map_or("none", |a| a.digest.as_str());
                format!(
                    "its content is in the archive of `{}` ({archive}), which was not read",
                    resource.module
                )
            });
        out.insert(resource.id.clone(), reason);
    }
    out
}

/// The bytes a file should hold: its content, or what was read from its archive. A file with
/// neither is blocked before it is attempted ([`unreadable_files`]), so this is never asked.
fn content_of<'a>(contents: &'a ArchivedContents, id: &str, spec: &'a FileSpec) -> &'a [u8] {
    match &spec.content {
        Some(content) => content.as_bytes(),
        None => contents.read.get(id).map_or(&[], |c| c.as_bytes()),
    }
}

/// Whether `target` is what the declared `spec` is on the machine (`target_of(spec) == target`,
/// without making one).
fn is_target(spec: &Spec, target: &Target) -> bool {
    match (spec, target) {
        (Spec::File(f), Target::File { path }) => f.path == *path,
        (Spec::Directory(d), Target::Directory { path }) => d.path == *path,
        (Spec::Membership(m), Target::Membership { account, group }) => {
            m.account == *account && m.group == *group
        }
        (Spec::Container(c), Target::Container { name }) => c.name == *name,
        (Spec::File(_) | Spec::Directory(_) | Spec::Membership(_) | Spec::Container(_), _) => false,
    }
}

/// What a declared resource is on the machine.
fn target_of(spec: &Spec) -> Target {
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
    }
}

fn resource_digest(resource: &Resource) -> String {
    mesh_model::sha256_digest(&serde_json::to_vec(resource).expect("a resource serializes"))
}

/// How a file resource's path is read to compare it with what is declared.
enum FileRead {
    /// One open that never follows a link, compared as it is read through the engine's buffer:
    /// a lone file, the no-op apply's path.
    Opened,
    /// An lstat, then the whole file read by its path: a together group's member.
    ByPath,
}

/// What applying a file resource would change, found before anything changes.
struct FileChange<'c> {
    /// The path under the root.
    full: PathBuf,
    /// Ancestors (machine paths) that do not exist yet.
    missing_parents: Vec<String>,
    /// The content, mode and owner declared.
    wanted: Wanted<'c>,
    /// Whether a regular file is there now.
    existed: bool,
    /// What differs (`created` when nothing is there); empty when it is as declared.
    changed: Vec<String>,
}

/// What applying a directory resource would change, found before anything changes.
struct DirectoryChange {
    /// The path under the root.
    full: PathBuf,
    /// Ancestors (machine paths) that do not exist yet.
    missing_parents: Vec<String>,
    /// Nothing is there: the directory is made.
    create: bool,
    /// Mode, uid and gid declared.
    wanted: (u32, u32, u32),
    /// Mode, uid and gid now (the declared ones when it is to be made).
    before: (u32, u32, u32),
    /// What differs (`created` when nothing is there); empty when it is as declared.
    changed: Vec<String>,
}

/// One member of a together group, staged.
enum Staged {
    /// Already as declared.
    Nothing,
    /// A file written beside its target.
    File {
        target: PathBuf,
        temp: PathBuf,
        existed: bool,
        changed: Vec<String>,
    },
    /// A directory to create or to fix.
    Directory {
        full: PathBuf,
        machine_path: String,
        create: bool,
        wanted: (u32, u32, u32),
        before: (u32, u32, u32),
        changed: Vec<String>,
    },
    /// A membership to add.
    Membership { account: String, group: String },
    /// A container to bring to its spec.
    Container {
        spec: ContainerSpec,
        restart: bool,
        /// What it is now (kept in the group's record, to put it back).
        was: ContainerWas,
    },
}

/// What a committed member needs to be put back.
enum Committed {
    Nothing,
    File {
        target: PathBuf,
        old: Option<PathBuf>,
    },
    Directory {
        full: PathBuf,
        machine_path: String,
        created: bool,
        before: (u32, u32, u32),
    },
    Membership {
        account: String,
        group: String,
    },
    Container {
        id: String,
        module: String,
        spec: Box<ContainerSpec>,
        /// What it was before ([`ContainerRuntime::restore`] puts it back).
        was: ContainerWas,
        /// The container it replaced, kept aside until the group is whole.
        aside: Option<SetAside>,
        /// Restart it once the group is whole (a `restart_on` file changed, and it was running
        /// as declared already).
        restart: bool,
    },
}

impl<'a> Engine<'a, '_> {
    /// Marks the machine mid-change; called before anything under the root or in the state
    /// directory changes. An apply that changes nothing never marks.
    fn begin_change(&mut self) -> Result<(), ApplyError> {
        if !self.marked {
            let marker = InProgress {
                format: STATE_FORMAT,
                declaration: self.digest.get().to_owned(),
                started_at: self.now,
            };
            self.seams.progress.changing(&Report {
                format: REPORT_FORMAT,
                node: self.declaration.node.clone(),
                declaration: marker.declaration.clone(),
                machine: MachineState::MidChange,
                resources: BTreeMap::new(),
                undeclared: BTreeMap::new(),
                findings: vec![Finding {
                    resource: String::new(),
                    message: format!("applying declaration {}", marker.declaration),
                }],
                windows: Vec::new(),
                resumed_from_mid_change: false,
                drift: Vec::new(),
                started_at: self.now,
                finished_at: self.now,
            });
            self.dir.write_in_progress(&marker)?;
            self.marked = true;
        }
        Ok(())
    }

    fn save(&mut self) -> Result<(), ApplyError> {
        self.begin_change()?;
        self.dir.write_state(&self.state)?;
        self.dirty = false;
        Ok(())
    }

    fn touched(&mut self, full: &std::path::Path) {
        if let Some(parent) = full.parent() {
            self.touched_dirs.insert(parent.to_path_buf());
        }
    }

    fn db(&self) -> Result<&AccountDatabase, String> {
        self.accounts
            .as_ref()
            .map_err(|e| format!("cannot read the accounts: {e}"))
    }

    fn reload_accounts(&mut self) {
        self.accounts = self.seams.accounts.read().map_err(|e| e.to_string());
        self.owners.clear();
    }

    /// The uid of account `owner` and gid of group `group`, as the accounts read say; the
    /// answer for each pair is kept until the accounts are read again, so many files of one
    /// owner ask the accounts once (a no-op apply of 10,000 files, issue 13).
    fn owner_ids(&mut self, owner: &str, group: &str) -> Result<(u32, u32), String> {
        if let Some(&(_, _, ids)) = self
            .owners
            .iter()
            .find(|(o, g, _)| o == owner && g == group)
        {
            return Ok(ids);
        }
        let ids = self.look_up_owner_ids(owner, group)?;
        if self.owners.len() < OWNERS_KEPT {
            self.owners.push((owner.to_owned(), group.to_owned(), ids));
        }
        Ok(ids)
    }

    fn look_up_owner_ids(&self, owner: &str, group: &str) -> Result<(u32, u32), String> {
        let db = self.db()?;
        let uid = db.uid(owner).ok_or_else(|| {
            format!(
                "owner `{owner}` is not an account on this machine ({})",
                db.where_accounts()
            )
        })?;
        let gid = db.gid(group).ok_or_else(|| {
            format!(
                "group `{group}` is not a group on this machine ({})",
                db.where_groups()
            )
        })?;
        Ok((uid, gid))
    }

    /// Removes what an interrupted apply may have left: temporary files beside file paths, and
    /// the file copies and containers kept aside by a together group that was whole when the
    /// host stopped. (Those of a group left mid-commit were given back first, by
    /// [`put_back_group`]: a group's record gone says it was whole.)
    fn remove_leftovers(&mut self) {
        let mut containers: BTreeMap<String, String> = self
            .declaration
            .resources
            .iter()
            .filter_map(|r| match &r.spec {
                Spec::Container(c) => Some((c.name.clone(), r.id.clone())),
                _ => None,
            })
            .collect();
        for (id, record) in &self.state.resources {
            if let Target::Container { name } = &record.target {
                containers.entry(name.clone()).or_insert_with(|| id.clone());
            }
        }
        for (name, id) in containers {
            let message = match self.seams.containers.let_go_leftover(&name) {
                Ok(None) => continue,
                Ok(Some(done)) => done,
                Err(e) => {
                    format!("cannot remove the container kept aside as `{name}.mesh-old`: {e}")
                }
            };
            self.findings.push(Finding {
                resource: id,
                message,
            });
        }
        let mut paths: BTreeSet<String> = self
            .declaration
            .resources
            .iter()
            .filter_map(|r| match &r.spec {
                Spec::File(f) => Some(f.path.clone()),
                _ => None,
            })
            .collect();
        paths.extend(
            self.state
                .resources
                .values()
                .filter_map(|r| match &r.target {
                    Target::File { path } => Some(path.clone()),
                    _ => None,
                }),
        );
        for path in paths {
            if let Ok(resolved) = self.paths.resolve(&path) {
                if resolved.missing_parents.is_empty() {
                    let _ = fsops::remove_if_present(&fsops::new_name(&resolved.full));
                    let _ = fsops::remove_if_present(&fsops::old_name(&resolved.full));
                }
            }
        }
    }

    // ---- failures and outcomes ----

    fn succeed(&mut self, id: &str, changed: Vec<String>) {
        let outcome = self.success(id, changed);
        self.outcomes.insert(id.to_owned(), outcome);
    }

    /// The outcome of declared resource `id`, which took (`changed`: what changed); any
    /// failure of it before is forgotten.
    fn success(&mut self, id: &str, changed: Vec<String>) -> Outcome {
        if self.state.failures.remove(id).is_some() {
            self.dirty = true;
        }
        if changed.is_empty() {
            Outcome::Unchanged
        } else {
            Outcome::Applied { changed }
        }
    }

    /// Records a failure of declared resource `id` and reports it `failed` or `stuck`.
    fn fail(&mut self, id: &str, reason: String) {
        let declared = self
            .declaration
            .resource(id)
            .map(resource_digest)
            .unwrap_or_default();
        let outcome = self.failure(id, declared, reason);
        self.outcomes.insert(id.to_owned(), outcome);
    }

    fn failure(&mut self, id: &str, declared: String, reason: String) -> Outcome {
        let policy = self.config.retry;
        let previous = self
            .state
            .failures
            .get(id)
            .filter(|f| f.declared == declared);
        let attempts = previous.map_or(0, |f| f.attempts).saturating_add(1);
        let since = previous.map_or(self.now, |f| f.since);
        self.state.failures.insert(
            id.to_owned(),
            FailureRecord {
                declared,
                attempts,
                since,
                last_reason: reason.clone(),
                retry_at: self.now.saturating_add(policy.backoff_secs(attempts)),
            },
        );
        self.dirty = true;
        if policy.is_stuck(attempts, since, self.now) {
            Outcome::Stuck {
                attempts,
                since,
                last_reason: reason,
            }
        } else {
            Outcome::Failed {
                reason,
                attempts,
                since,
            }
        }
    }

    /// The outcome of a resource still in its backoff, if it is.
    fn waiting(&self, resource: &Resource) -> Option<Outcome> {
        let failure = self.state.failures.get(&resource.id)?;
        if self.now >= failure.retry_at || failure.declared != resource_digest(resource) {
            return None;
        }
        let policy = self.config.retry;
        Some(
            if policy.is_stuck(failure.attempts, failure.since, self.now) {
                Outcome::Stuck {
                    attempts: failure.attempts,
                    since: failure.since,
                    last_reason: failure.last_reason.clone(),
                }
            } else {
                Outcome::Waiting {
                    last_reason: failure.last_reason.clone(),
                    attempts: failure.attempts,
                    retry_at: failure.retry_at,
                }
            },
        )
    }

    // ---- releasing what is no longer declared ----

    fn release_undeclared(&mut self) -> Result<(), ApplyError> {
        // Both are sorted by id: one walk through the two, no search.
        let mut declared = self.declaration.resources.iter().peekable();
        let mut to_release: Vec<(String, Record)> = Vec::new();
        for (id, record) in &self.state.resources {
            while declared.next_if(|r| r.id < *id).is_some() {}
            let same = declared
                .peek()
                .filter(|r| r.id == *id)
                .is_some_and(|r| is_target(&r.spec, &record.target));
            if !same {
                to_release.push((id.clone(), record.clone()));
            }
        }
        if !to_release.is_empty() {
            self.begin_change()?;
        }
        // Containers, memberships, then files, then directories deepest first.
        to_release.sort_by_key(|(id, record)| match &record.target {
            Target::Container { .. } => (0, 0, id.clone()),
            Target::Membership { .. } => (1, 0, id.clone()),
            Target::File { .. } => (2, 0, id.clone()),
            Target::Directory { path } => (3, usize::MAX - crate::paths::depth(path), id.clone()),
        });
        for (id, record) in to_release {
            let declared_again = self.declaration.resource(&id).is_some();
            if let Some(step) = self.held_step(&record.target) {
                // A window holds it still: it is released by the first apply after the window.
                if declared_again {
                    self.blocked.insert(
                        id.clone(),
                        format!("what it declared before is held still by step `{step}`"),
                    );
                }
                self.undeclared.insert(id, Outcome::HeldStill { step });
                continue;
            }
            match self.release(&record) {
                Ok(detail) => {
                    self.state.resources.remove(&id);
                    if self.state.failures.remove(&id).is_some() || !declared_again {
                        self.dirty = true;
                    }
                    self.dirty = true;
                    self.undeclared
                        .insert(id.clone(), Outcome::Removed { detail });
                }
                Err(reason) => {
                    let outcome = self.failure(&id, "undeclared".to_owned(), reason.clone());
                    if declared_again {
                        self.blocked.insert(
                            id.clone(),
                            format!("what it declared before could not be released: {reason}"),
                        );
                    }
                    self.undeclared.insert(id, outcome);
                }
            }
        }
        Ok(())
    }

    /// Whether some declared file or directory lies under machine path `dir`.
    fn needed_as_parent(&self, dir: &str) -> bool {
        let declared = self.declaration.resources.iter().any(|r| match &r.spec {
            Spec::File(f) => is_ancestor(dir, &f.path),
            Spec::Directory(d) => is_ancestor(dir, &d.path),
            Spec::Membership(_) | Spec::Container(_) => false,
        });
        declared
            || self.state.resources.values().any(|r| match &r.target {
                Target::File { path } | Target::Directory { path } => is_ancestor(dir, path),
                Target::Membership { .. } | Target::Container { .. } => false,
            })
    }

    /// Whether a declared or recorded file or directory is at machine path `path` itself.
    fn holds_resource_at(&self, path: &str) -> bool {
        let declared = self.declaration.resources.iter().any(|r| match &r.spec {
            Spec::File(f) => f.path == path,
            Spec::Directory(d) => d.path == path,
            Spec::Membership(_) | Spec::Container(_) => false,
        });
        declared
            || self.state.resources.values().any(|r| match &r.target {
                Target::File { path: p } | Target::Directory { path: p } => p == path,
                Target::Membership { .. } | Target::Container { .. } => false,
            })
    }

    fn release(&mut self, record: &Record) -> Result<String, String> {
        if let Target::File { path } = &record.target {
            self.stamps.forget(path);
        }
        match (&record.target, &record.origin) {
            (Target::File { path }, Origin::Made) => {
                let resolved = self.paths.resolve(path)?;
                match &resolved.meta {
                    None => Ok(format!("`{path}` the mesh made was already gone")),
                    Some(meta) if meta.is_file() => {
                        fs::remove_file(&resolved.full)
                            .map_err(|e| format!("cannot remove `{path}`: {e}"))?;
                        self.touched(&resolved.full);
                        Ok(format!("removed `{path}`, which the mesh made"))
                    }
                    Some(_) => Ok(format!(
                        "left `{path}` alone: it is no longer the file the mesh made"
                    )),
                }
            }
            (
                Target::File { path },
                Origin::FoundFile {
                    content,
                    mode,
                    uid,
                    gid,
                },
            ) => {
                let resolved = self.paths.resolve(path)?;
                if !resolved.missing_parents.is_empty() {
                    return Err(format!("cannot give back `{path}`: its directory is gone"));
                }
                if resolved.meta.as_ref().is_some_and(|m| !m.is_file()) {
                    return Err(format!(
                        "cannot give back `{path}`: something other than a file is there now"
                    ));
                }
                let bytes = self.dir.found(content).map_err(|e| {
                    format!("cannot give back `{path}`: the copy kept when it was found is unreadable: {e}")
                })?;
                fsops::write_atomic(
                    &resolved.full,
                    &Wanted {
                        bytes: &bytes,
                        mode: *mode,
                        uid: *uid,
                        gid: *gid,
                    },
                )
                .map_err(|e| format!("cannot give back `{path}`: {e}"))?;
                self.touched(&resolved.full);
                Ok(format!("gave back `{path}` as the mesh found it"))
            }
            (Target::Directory { path }, Origin::Made) => {
                if self.needed_as_parent(path) {
                    self.state.made_parents.insert(path.clone());
                    return Ok(format!(
                        "kept `{path}`, which the mesh made, as the parent of declared paths"
                    ));
                }
                // Parents the mesh made inside it for other paths go first.
                self.release_unneeded_parents_under(Some(path))
                    .map_err(|e| e.to_string())?;
                let resolved = self.paths.resolve(path)?;
                match &resolved.meta {
                    None => Ok(format!("`{path}` the mesh made was already gone")),
                    Some(meta) if meta.is_dir() => match fs::remove_dir(&resolved.full) {
                        Ok(()) => {
                            self.paths.forget(path);
                            self.touched(&resolved.full);
                            Ok(format!("removed `{path}`, which the mesh made"))
                        }
                        Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => Ok(format!(
                            "kept `{path}`: it holds data the mesh did not put there"
                        )),
                        Err(e) => Err(format!("cannot remove `{path}`: {e}")),
                    },
                    Some(_) => Ok(format!(
                        "left `{path}` alone: it is no longer the directory the mesh made"
                    )),
                }
            }
            (Target::Directory { path }, Origin::FoundDirectory { mode, uid, gid }) => {
                let resolved = self.paths.resolve(path)?;
                match &resolved.meta {
                    Some(meta) if meta.is_dir() => {
                        if fsops::mode_owner(meta) != (*mode, *uid, *gid) {
                            fsops::set_mode_owner(&resolved.full, *mode, *uid, *gid)
                                .map_err(|e| format!("cannot give back `{path}`: {e}"))?;
                        }
                        Ok(format!(
                            "kept `{path}` and gave back its mode and owner as found"
                        ))
                    }
                    _ => Ok(format!(
                        "`{path}` the mesh found is no longer a directory; left alone"
                    )),
                }
            }
            (Target::Membership { account, group }, Origin::Made) => {
                let member = self.db()?.is_member(account, group);
                if !member {
                    return Ok(format!("`{account}` was already out of `{group}`"));
                }
                let result = self.seams.accounts.remove_membership(account, group);
                self.reload_accounts();
                result.map_err(|e| format!("cannot remove `{account}` from `{group}`: {e}"))?;
                Ok(format!(
                    "removed `{account}` from `{group}`, a membership the mesh added"
                ))
            }
            (Target::Membership { account, group }, Origin::FoundMembership) => Ok(format!(
                "kept `{account}` in `{group}`: it was a member before the mesh"
            )),
            (Target::Container { name }, Origin::Made) => self.seams.containers.remove(name),
            (target, origin) => Ok(format!(
                "forgot {target:?}: its record ({origin:?}) does not fit it"
            )),
        }
    }

    /// Removes parent directories the mesh made that no declared path needs any more (when
    /// empty).
    fn release_unneeded_parents(&mut self) -> Result<(), ApplyError> {
        self.release_unneeded_parents_under(None)
    }

    /// As [`Engine::release_unneeded_parents`], for those under machine path `under` only.
    fn release_unneeded_parents_under(&mut self, under: Option<&str>) -> Result<(), ApplyError> {
        let mut parents: Vec<String> = self
            .state
            .made_parents
            .iter()
            .filter(|p| under.is_none_or(|u| is_ancestor(u, p)))
            .cloned()
            .collect();
        parents.sort_by_key(|p| std::cmp::Reverse(crate::paths::depth(p)));
        for parent in parents {
            if self.needed_as_parent(&parent) || self.holds_resource_at(&parent) {
                continue;
            }
            let full = self.paths.full(&parent);
            let gone = match fs::symlink_metadata(&full) {
                Err(_) => true,
                Ok(meta) if !meta.is_dir() => true,
                Ok(_) => {
                    self.begin_change()?;
                    let removed = fs::remove_dir(&full).is_ok();
                    if removed {
                        self.touched(&full);
                    }
                    removed
                }
            };
            if gone {
                self.paths.forget(&parent);
                self.state.made_parents.remove(&parent);
                self.dirty = true;
            }
        }
        Ok(())
    }

    // ---- recording what is taken ----

    /// What is at a declared resource now, as an origin; `None` when it cannot be taken (the
    /// apply will fail it and say why).
    fn observe(&mut self, resource: &Resource) -> Result<Option<Origin>, ApplyError> {
        match &resource.spec {
            Spec::File(f) => {
                let Ok(resolved) = self.paths.resolve(&f.path) else {
                    return Ok(None);
                };
                match &resolved.meta {
                    None => Ok(Some(Origin::Made)),
                    Some(meta) if meta.is_file() => {
                        let Ok(bytes) = fs::read(&resolved.full) else {
                            return Ok(None);
                        };
                        let content = self.dir.keep_found(&bytes)?;
                        let (mode, uid, gid) = fsops::mode_owner(meta);
                        Ok(Some(Origin::FoundFile {
                            content,
                            mode,
                            uid,
                            gid,
                        }))
                    }
                    Some(_) => Ok(None),
                }
            }
            Spec::Directory(d) => {
                let Ok(resolved) = self.paths.resolve(&d.path) else {
                    return Ok(None);
                };
                Ok(match &resolved.meta {
                    None => Some(Origin::Made),
                    Some(meta) if meta.is_dir() => {
                        let (mode, uid, gid) = fsops::mode_owner(meta);
                        Some(Origin::FoundDirectory { mode, uid, gid })
                    }
                    Some(_) => None,
                })
            }
            Spec::Membership(m) => Ok(match self.db() {
                Ok(db) if db.is_member(&m.account, &m.group) => Some(Origin::FoundMembership),
                Ok(db) if db.membership_problem(&m.account, &m.group).is_none() => {
                    Some(Origin::Made)
                }
                _ => None,
            }),
            // A container is recorded once its runtime has made it.
            Spec::Container(_) => Ok(None),
        }
    }

    /// Records, before anything is changed, what is at every newly declared resource.
    fn discover(&mut self) -> Result<(), ApplyError> {
        let declaration = self.declaration;
        // Both are sorted by id: the resources without a record are found in one walk through
        // the two, no search.
        let mut recorded = self.state.resources.keys().peekable();
        let new: Vec<&Resource> = declaration
            .resources
            .iter()
            .filter(|resource| {
                while recorded.next_if(|id| **id < resource.id).is_some() {}
                recorded.peek().is_none_or(|id| **id != resource.id)
            })
            .collect();
        let mut added = false;
        for resource in new {
            if self.blocked.contains_key(&resource.id) {
                continue;
            }
            if let Some(origin) = self.observe(resource)? {
                self.state.resources.insert(
                    resource.id.clone(),
                    Record {
                        target: target_of(&resource.spec),
                        origin,
                    },
                );
                added = true;
            }
        }
        if added || self.dirty {
            self.save()?;
        }
        Ok(())
    }

    /// Makes sure a record exists (written) before the resource is changed.
    fn ensure_record(&mut self, resource: &Resource) -> Result<(), ApplyError> {
        self.begin_change()?;
        if self.state.resources.contains_key(&resource.id) {
            return Ok(());
        }
        if let Some(origin) = self.observe(resource)? {
            self.state.resources.insert(
                resource.id.clone(),
                Record {
                    target: target_of(&resource.spec),
                    origin,
                },
            );
            self.save()?;
        }
        Ok(())
    }

    /// Creates missing parent directories, recording them first.
    fn make_parents(&mut self, missing: &[String]) -> Result<Result<(), String>, ApplyError> {
        if missing.is_empty() {
            return Ok(Ok(()));
        }
        let mut new = false;
        for parent in missing {
            new |= self.state.made_parents.insert(parent.clone());
        }
        if new {
            self.save()?;
        }
        for parent in missing {
            let full = self.paths.full(parent);
            match fs::create_dir(&full) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Ok(Err(format!("cannot create `{parent}`: {e}"))),
            }
            if let Err(e) =
                fs::set_permissions(&full, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            {
                return Ok(Err(format!("cannot set the mode of `{parent}`: {e}")));
            }
            self.touched(&full);
            self.paths.made_dir(parent);
        }
        Ok(Ok(()))
    }

    // ---- applying ----

    fn apply_unit(&mut self, unit: &Unit) -> Result<(), ApplyError> {
        let declaration = self.declaration;
        // A lone resource's unit (nearly every unit) lists its member without an allocation.
        let lone: [&Resource; 1];
        let group: Vec<&Resource>;
        let members: &[&Resource] = match unit.members.as_slice() {
            [only] => {
                lone = [&declaration.resources[*only]];
                &lone
            }
            many => {
                group = many.iter().map(|&i| &declaration.resources[i]).collect();
                &group
            }
        };
        // Blocked members (what they replace could not be released) fail the unit.
        if let Some((id, reason)) = members.iter().find_map(|r| {
            self.blocked
                .get(&r.id)
                .map(|reason| (r.id.clone(), reason.clone()))
        }) {
            for member in members {
                let reason = if member.id == id {
                    reason.clone()
                } else {
                    group_reason(unit, &id, &reason)
                };
                self.fail(&member.id, reason);
            }
            return Ok(());
        }
        // Gating: every dependency must have taken.
        if let Some(gate) = unit
            .deps
            .iter()
            .find(|dep| !self.outcomes.get(dep).is_some_and(Outcome::took))
        {
            for member in members {
                self.outcomes.insert(
                    member.id.clone(),
                    Outcome::Skipped {
                        gated_by: gate.clone(),
                    },
                );
            }
            return Ok(());
        }
        // Drift its policy says to leave (rule 28).
        if members.iter().any(|r| self.seams.progress.leave(&r.id)) {
            for member in members {
                let step = crate::progress::LEFT_AS_FOUND.to_owned();
                self.outcomes
                    .insert(member.id.clone(), Outcome::HeldStill { step });
            }
            return Ok(());
        }
        // Backoff.
        if members
            .iter()
            .any(|r| self.state.failures.contains_key(&r.id))
        {
            return self.apply_unit_after_failures(unit, members);
        }
        self.attempt_unit(unit, members)
    }

    /// [`Engine::apply_unit`] for a unit some member of which failed before.
    fn apply_unit_after_failures(
        &mut self,
        unit: &Unit,
        members: &[&Resource],
    ) -> Result<(), ApplyError> {
        let waiting: Vec<(String, Option<Outcome>)> = members
            .iter()
            .map(|r| (r.id.clone(), self.waiting(r)))
            .collect();
        if let Some(first) = waiting
            .iter()
            .find(|(_, w)| w.is_some())
            .map(|(id, _)| id.clone())
        {
            for (id, outcome) in waiting {
                let outcome = outcome.unwrap_or_else(|| Outcome::Skipped {
                    gated_by: first.clone(),
                });
                self.outcomes.insert(id, outcome);
            }
            return Ok(());
        }
        self.attempt_unit(unit, members)
    }

    fn attempt_unit(&mut self, unit: &Unit, members: &[&Resource]) -> Result<(), ApplyError> {
        if unit.group.is_none() {
            let resource = members[0];
            if let Some(step) = self.held_container(resource) {
                // Issue 224: an apply during a window leaves what it holds alone.
                self.outcomes
                    .insert(resource.id.clone(), Outcome::HeldStill { step });
                return Ok(());
            }
            match self.apply_one(resource)? {
                Ok(changed) => {
                    let outcome = self.success(&resource.id, changed);
                    self.outcomes.set(unit.members[0], outcome);
                }
                Err(reason) => self.fail(&resource.id, reason),
            }
            return Ok(());
        }
        self.apply_group(unit, members)
    }

    fn apply_one(
        &mut self,
        resource: &Resource,
    ) -> Result<Result<Vec<String>, String>, ApplyError> {
        match &resource.spec {
            Spec::File(f) => self.apply_file(resource, f),
            Spec::Directory(d) => self.apply_directory(resource, d),
            Spec::Membership(m) => self.apply_membership(resource, m),
            Spec::Container(c) => {
                self.begin_change()?;
                let restart = self.restart_wanted(&resource.id, c, &BTreeSet::new());
                if restart {
                    pause_point("restart", &resource.id);
                }
                let result = self.seams.containers.apply(&declared(resource, c), restart);
                if result.is_ok() {
                    self.record_container(resource)?;
                    self.paid_restart(&resource.id);
                }
                Ok(result)
            }
        }
    }

    fn record_container(&mut self, resource: &Resource) -> Result<(), ApplyError> {
        if !self.state.resources.contains_key(&resource.id) {
            self.state.resources.insert(
                resource.id.clone(),
                Record {
                    target: target_of(&resource.spec),
                    origin: Origin::Made,
                },
            );
            self.save()?;
        }
        Ok(())
    }

    /// The step holding a declared container still, if a window holds it.
    fn held_container(&self, resource: &Resource) -> Option<String> {
        match &resource.spec {
            Spec::Container(c) => self.held.get(&c.name).cloned(),
            Spec::File(_) | Spec::Directory(_) | Spec::Membership(_) => None,
        }
    }

    /// The step holding a recorded container still, if a window holds it.
    fn held_step(&self, target: &Target) -> Option<String> {
        match target {
            Target::Container { name } => self.held.get(name).cloned(),
            Target::File { .. } | Target::Directory { .. } | Target::Membership { .. } => None,
        }
    }

    /// Whether container `id` must restart: a file it restarts on changed in this apply, or it
    /// owes a restart (such a file changed in an apply that stopped before the restart).
    fn restart_wanted(
        &self,
        id: &str,
        spec: &ContainerSpec,
        changed_in_group: &BTreeSet<String>,
    ) -> bool {
        self.state.pending_restarts.contains(id)
            || spec.restart_on.iter().any(|id| {
                changed_in_group.contains(id)
                    || matches!(self.outcomes.get(id), Some(Outcome::Applied { .. }))
            })
    }

    /// Before files `ids` are committed: records, durably, that the declared containers
    /// restarting on them (and already made: one still to be created starts with the new
    /// files) owe a restart, so that a host killed before the restart makes it on the next
    /// apply (rule 5). Writes nothing when no such container restarts on them, or each owes
    /// one already.
    ///
    /// # Errors
    /// The state could not be written (nothing was committed then).
    fn owe_restarts<'i>(
        &mut self,
        ids: impl IntoIterator<Item = &'i str>,
    ) -> Result<(), ApplyError> {
        let declaration = self.declaration;
        let restarters = self
            .restarters
            .get_or_insert_with(|| restarters_of(declaration));
        if restarters.is_empty() {
            return Ok(());
        }
        let mut added = false;
        for id in ids {
            for container in restarters.get(id).into_iter().flatten() {
                if self.state.resources.contains_key(*container)
                    && !self.state.pending_restarts.contains(*container)
                {
                    self.state.pending_restarts.insert((*container).to_owned());
                    added = true;
                }
            }
        }
        if added {
            self.save()?;
        }
        Ok(())
    }

    /// Container `id` was brought to its spec (restarted, or made, replaced or started with the
    /// files as they are now): it owes no restart any more.
    fn paid_restart(&mut self, id: &str) {
        if self.state.pending_restarts.remove(id) {
            self.dirty = true;
        }
    }

    // ---- examining: what applying a resource would change, before anything changes ----

    /// What applying a file resource would change, read from the machine; a reason when it
    /// cannot be applied (an unknown owner, a path that is not a regular file, an unreadable
    /// file). Both a lone file and a together member start here.
    fn examine_file<'r>(
        &mut self,
        resource: &Resource,
        spec: &'r FileSpec,
        read: FileRead,
    ) -> Result<FileChange<'r>, String>
    where
        'a: 'r,
    {
        let (uid, gid) = self.owner_ids(&spec.owner, &spec.group)?;
        let wanted = Wanted {
            bytes: content_of(self.contents, &resource.id, spec),
            mode: spec.mode,
            uid,
            gid,
        };
        let path = &spec.path;
        if let Some((full, missing_parents, changed)) =
            self.unchanged_by_stamp(resource, spec, &wanted)?
        {
            return Ok(FileChange {
                full,
                missing_parents,
                wanted,
                existed: true,
                changed,
            });
        }
        let cannot_read = |e: io::Error| format!("cannot read `{path}`: {e}");
        let (full, missing_parents, found) = match read {
            FileRead::Opened => {
                let Opened {
                    full,
                    missing_parents,
                    current,
                } = self.paths.open_file(path)?;
                let found = match current {
                    None => None,
                    Some((mut file, meta)) => {
                        regular_file(path, &meta)?;
                        let changed = differences_of_open_file(
                            &mut file,
                            &meta,
                            &wanted,
                            &mut self.read_buffer,
                        )
                        .map_err(cannot_read)?;
                        self.note_read(resource, spec, &meta, &changed);
                        Some(changed)
                    }
                };
                (full, missing_parents, found)
            }
            FileRead::ByPath => {
                let Resolved {
                    full,
                    missing_parents,
                    meta,
                } = self.paths.resolve(path)?;
                let found = match &meta {
                    None => None,
                    Some(meta) => {
                        regular_file(path, meta)?;
                        let changed =
                            file_differences(&full, meta, &wanted).map_err(cannot_read)?;
                        self.note_read(resource, spec, meta, &changed);
                        Some(changed)
                    }
                };
                (full, missing_parents, found)
            }
        };
        Ok(FileChange {
            full,
            missing_parents,
            wanted,
            existed: found.is_some(),
            changed: found.unwrap_or_else(|| vec!["created".to_owned()]),
        })
    }

    /// The change a file resource needs when the stat cache says its content is as declared
    /// (its stamp unchanged since it was last read or written so): its mode and owner alone,
    /// from one lstat; `None` when its content must be read.
    #[allow(clippy::type_complexity)]
    fn unchanged_by_stamp(
        &mut self,
        resource: &Resource,
        spec: &FileSpec,
        wanted: &Wanted<'_>,
    ) -> Result<Option<(PathBuf, Vec<String>, Vec<String>)>, String> {
        // One look-up of the stamp serves both questions: is there one, and is it this file's.
        let Some(stamp) = self.stamps.stamp(&spec.path) else {
            return Ok(None);
        };
        let Some(declared) = self.sent.content_digest(resource) else {
            return Ok(None);
        };
        let Resolved {
            full,
            missing_parents,
            meta,
        } = self.paths.resolve(&spec.path)?;
        let Some(meta) = meta.filter(|meta| meta.is_file()) else {
            return Ok(None);
        };
        if !stamp.same_file(&meta) || stamp.digest != *declared {
            return Ok(None);
        }
        let changed = mode_owner_differences(&meta, (wanted.mode, wanted.uid, wanted.gid));
        Ok(Some((full, missing_parents, changed)))
    }

    /// Keeps the stamp of a file whose content was just read and found as declared.
    fn note_read(
        &mut self,
        resource: &Resource,
        spec: &FileSpec,
        meta: &fs::Metadata,
        changed: &[String],
    ) {
        if changed.iter().any(|c| c == "content") {
            return;
        }
        if let Some(declared) = self.sent.content_digest(resource) {
            self.stamps.record(&spec.path, meta, &declared, self.now);
        }
    }

    /// Keeps the stamp of a file just written (or given its mode and owner) as declared.
    fn note_written(&mut self, resource: &Resource, spec: &FileSpec, full: &std::path::Path) {
        match (
            fs::symlink_metadata(full),
            self.sent.content_digest(resource),
        ) {
            (Ok(meta), Some(declared)) if meta.is_file() => {
                self.stamps.record(&spec.path, &meta, &declared, self.now);
            }
            _ => self.stamps.forget(&spec.path),
        }
    }

    /// What applying a directory resource would change; a reason when it cannot be applied.
    fn examine_directory(&mut self, spec: &DirectorySpec) -> Result<DirectoryChange, String> {
        let (uid, gid) = self.owner_ids(&spec.owner, &spec.group)?;
        let Resolved {
            full,
            missing_parents,
            meta,
        } = self.paths.resolve(&spec.path)?;
        let wanted = (spec.mode, uid, gid);
        let (create, before, changed) = match &meta {
            None => (true, wanted, vec!["created".to_owned()]),
            Some(meta) if meta.is_dir() => (
                false,
                fsops::mode_owner(meta),
                mode_owner_differences(meta, wanted),
            ),
            Some(_) => return Err(format!("`{}` is not a directory", spec.path)),
        };
        Ok(DirectoryChange {
            full,
            missing_parents,
            create,
            wanted,
            before,
            changed,
        })
    }

    /// Whether a membership is still to be added; a reason when it cannot be.
    fn membership_missing(&self, spec: &MembershipSpec) -> Result<bool, String> {
        let db = self.db()?;
        if let Some(problem) = db.membership_problem(&spec.account, &spec.group) {
            return Err(problem);
        }
        Ok(!db.is_member(&spec.account, &spec.group))
    }

    /// Before a file or directory changes: its record is written and its missing parents made.
    fn prepare_change(
        &mut self,
        resource: &Resource,
        missing_parents: &[String],
    ) -> Result<Result<(), String>, ApplyError> {
        self.ensure_record(resource)?;
        self.make_parents(missing_parents)
    }

    fn apply_file(
        &mut self,
        resource: &Resource,
        spec: &FileSpec,
    ) -> Result<Result<Vec<String>, String>, ApplyError> {
        let change = match self.examine_file(resource, spec, FileRead::Opened) {
            Ok(change) => change,
            Err(reason) => return Ok(Err(reason)),
        };
        if change.changed.is_empty() {
            return Ok(Ok(change.changed));
        }
        if let Err(reason) = self.prepare_change(resource, &change.missing_parents)? {
            return Ok(Err(reason));
        }
        self.owe_restarts([resource.id.as_str()])?;
        let FileChange {
            full,
            wanted,
            existed,
            changed,
            ..
        } = change;
        let path = &spec.path;
        let result = if !existed {
            fsops::write_atomic(&full, &wanted).map(|()| self.touched(&full))
        } else if changed.iter().any(|c| c == "content") {
            self.touched(&full);
            fsops::write_atomic(&full, &wanted)
        } else {
            fsops::set_mode_owner(&full, wanted.mode, wanted.uid, wanted.gid)
        };
        if let Err(e) = result {
            self.stamps.forget(path);
            return Ok(Err(format!("cannot write `{path}`: {e}")));
        }
        self.note_written(resource, spec, &full);
        Ok(Ok(changed))
    }

    fn apply_directory(
        &mut self,
        resource: &Resource,
        spec: &DirectorySpec,
    ) -> Result<Result<Vec<String>, String>, ApplyError> {
        let change = match self.examine_directory(spec) {
            Ok(change) => change,
            Err(reason) => return Ok(Err(reason)),
        };
        if change.changed.is_empty() {
            return Ok(Ok(change.changed));
        }
        if let Err(reason) = self.prepare_change(resource, &change.missing_parents)? {
            return Ok(Err(reason));
        }
        let DirectoryChange {
            full,
            create,
            wanted: (mode, uid, gid),
            changed,
            ..
        } = change;
        let path = &spec.path;
        if create {
            if let Err(e) = fsops::make_dir(&full, mode, uid, gid) {
                return Ok(Err(format!("cannot create `{path}`: {e}")));
            }
            self.touched(&full);
            self.paths.made_dir(path);
        } else if let Err(e) = fsops::set_mode_owner(&full, mode, uid, gid) {
            return Ok(Err(format!("cannot set mode and owner of `{path}`: {e}")));
        }
        Ok(Ok(changed))
    }

    fn apply_membership(
        &mut self,
        resource: &Resource,
        spec: &MembershipSpec,
    ) -> Result<Result<Vec<String>, String>, ApplyError> {
        match self.membership_missing(spec) {
            Ok(true) => {}
            Ok(false) => return Ok(Ok(Vec::new())),
            Err(reason) => return Ok(Err(reason)),
        }
        self.ensure_record(resource)?;
        Ok(self.add_membership(&resource.id, &spec.account, &spec.group))
    }

    fn add_membership(
        &mut self,
        id: &str,
        account: &str,
        group: &str,
    ) -> Result<Vec<String>, String> {
        let result = self.seams.accounts.add_membership(account, group);
        self.reload_accounts();
        result.map_err(|e| format!("cannot add `{account}` to `{group}`: {e}"))?;
        if !self.db()?.is_member(account, group) {
            return Err(format!(
                "`{account}` is not in `{group}` after adding it (etc/group)"
            ));
        }
        self.findings.push(Finding {
            resource: id.to_owned(),
            message: format!(
                "`{account}` was added to `{group}`: a new login is needed before `{account}`'s \
                 processes have the group"
            ),
        });
        Ok(vec!["added".to_owned()])
    }

    // ---- together groups ----

    fn apply_group(&mut self, unit: &Unit, members: &[&Resource]) -> Result<(), ApplyError> {
        // Stage every member; nothing live changes.
        let mut staged: Vec<Staged> = Vec::with_capacity(members.len());
        let mut changed_in_group = BTreeSet::new();
        let mut broken: Option<(String, String)> = None;
        for member in members {
            match self.stage(member, &changed_in_group)? {
                Ok(s) => {
                    if !matches!(s, Staged::Nothing) {
                        changed_in_group.insert(member.id.clone());
                    }
                    staged.push(s);
                }
                Err(reason) => {
                    broken = Some((member.id.clone(), reason));
                    break;
                }
            }
        }
        if let Some((breaker, reason)) = broken {
            discard(&staged);
            self.fail_group(unit, members, &breaker, &reason);
            return Ok(());
        }

        // Every member the commit changes is recorded, with what it was, before the first
        // commit step, so that a host killed in the middle puts the whole group back (rule 5).
        let record = group_record(unit, members, &staged);
        let journaled = !(record.files.is_empty()
            && record.directories.is_empty()
            && record.memberships.is_empty()
            && record.containers.is_empty());
        // Containers restarting on a member file owe the restart from before its commit.
        self.owe_restarts(
            members
                .iter()
                .zip(&staged)
                .filter(|(_, s)| matches!(s, Staged::File { .. }))
                .map(|(m, _)| m.id.as_str()),
        )?;
        if journaled {
            self.dir.write_group_commit(&record)?;
        }

        // Commit in order; on a failure put back what was committed.
        let mut restart_failures: Vec<(String, String)> = Vec::new();
        let mut committed: Vec<Committed> = Vec::with_capacity(staged.len());
        let mut changes: Vec<Vec<String>> = Vec::with_capacity(staged.len());
        for (index, step) in staged.iter().enumerate() {
            pause_point("commit", &members[index].id);
            match self.commit(members[index], step) {
                Ok((done, changed)) => {
                    committed.push(done);
                    changes.push(changed);
                }
                Err(reason) => {
                    discard(&staged[index..]);
                    let mut reason = reason;
                    // Containers last, as after a crash: one given back starts with the
                    // group's old files.
                    let (containers, others): (Vec<&Committed>, Vec<&Committed>) = committed
                        .iter()
                        .rev()
                        .partition(|done| matches!(done, Committed::Container { .. }));
                    let mut whole_again = true;
                    for done in others.into_iter().chain(containers) {
                        if let Err(e) = self.put_back(done) {
                            whole_again = false;
                            reason.push_str(&format!("; and putting back failed: {e}"));
                        }
                    }
                    if journaled && whole_again {
                        self.dir.clear_group_commit()?;
                    } else if journaled {
                        // The record stays: the next apply puts the group back first.
                        reason.push_str(" (the next apply puts the group back first)");
                    }
                    self.fail_group(unit, members, &members[index].id, &reason);
                    return Ok(());
                }
            }
        }
        // The group is whole: said so durably first (a host killed from here on finishes with
        // the group new), then what was kept to put it back goes, then the restarts it waited for.
        if journaled {
            self.dir.clear_group_commit()?;
        }
        for (index, done) in committed.iter().enumerate() {
            match done {
                Committed::File { old: Some(old), .. } => {
                    let _ = fsops::remove_if_present(old);
                }
                Committed::Container {
                    id,
                    module,
                    spec,
                    was: _,
                    aside,
                    restart,
                } => {
                    if let Some(aside) = aside {
                        pause_point("let-go", id);
                        if let Err(e) = self.seams.containers.let_go(aside) {
                            self.findings.push(Finding {
                                resource: id.clone(),
                                message: format!(
                                    "the container it replaced, kept as `{}`, could not be \
                                     removed: {e}",
                                    aside.kept_as
                                ),
                            });
                        }
                    }
                    if *restart {
                        pause_point("restart", id);
                        let declared = DeclaredContainer { id, module, spec };
                        match self.seams.containers.apply(&declared, true) {
                            Ok(changed) => changes[index].extend(changed),
                            Err(reason) => restart_failures.push((id.clone(), reason)),
                        }
                    }
                }
                Committed::Nothing
                | Committed::File { old: None, .. }
                | Committed::Directory { .. }
                | Committed::Membership { .. } => {}
            }
        }
        for (member, changed) in members.iter().zip(changes) {
            if let Some((_, reason)) = restart_failures.iter().find(|(id, _)| *id == member.id) {
                self.fail(&member.id, reason.clone());
                continue;
            }
            match self.held_container(member) {
                Some(step) => {
                    self.outcomes
                        .insert(member.id.clone(), Outcome::HeldStill { step });
                }
                None => {
                    self.paid_restart(&member.id);
                    self.succeed(&member.id, changed);
                }
            }
        }
        Ok(())
    }

    fn fail_group(&mut self, unit: &Unit, members: &[&Resource], breaker: &str, reason: &str) {
        for member in members {
            let reason = if member.id == breaker {
                reason.to_owned()
            } else {
                group_reason(unit, breaker, reason)
            };
            self.fail(&member.id, reason);
        }
    }

    fn stage(
        &mut self,
        resource: &Resource,
        changed_in_group: &BTreeSet<String>,
    ) -> Result<Result<Staged, String>, ApplyError> {
        if let Spec::Container(_) = &resource.spec {
            // Its commit changes the machine; files and memberships mark when they record.
            self.begin_change()?;
        }
        match &resource.spec {
            Spec::File(spec) => {
                let change = match self.examine_file(resource, spec, FileRead::ByPath) {
                    Ok(change) => change,
                    Err(reason) => return Ok(Err(reason)),
                };
                if change.changed.is_empty() {
                    return Ok(Ok(Staged::Nothing));
                }
                if let Err(reason) = self.prepare_change(resource, &change.missing_parents)? {
                    return Ok(Err(reason));
                }
                match fsops::stage(&change.full, &change.wanted) {
                    Ok(temp) => Ok(Ok(Staged::File {
                        target: change.full,
                        temp,
                        existed: change.existed,
                        changed: change.changed,
                    })),
                    Err(e) => Ok(Err(format!("cannot stage `{}`: {e}", spec.path))),
                }
            }
            Spec::Directory(spec) => {
                let change = match self.examine_directory(spec) {
                    Ok(change) => change,
                    Err(reason) => return Ok(Err(reason)),
                };
                if change.changed.is_empty() {
                    return Ok(Ok(Staged::Nothing));
                }
                if let Err(reason) = self.prepare_change(resource, &change.missing_parents)? {
                    return Ok(Err(reason));
                }
                Ok(Ok(Staged::Directory {
                    full: change.full,
                    machine_path: spec.path.clone(),
                    create: change.create,
                    wanted: change.wanted,
                    before: change.before,
                    changed: change.changed,
                }))
            }
            Spec::Membership(spec) => {
                match self.membership_missing(spec) {
                    Ok(true) => {}
                    Ok(false) => return Ok(Ok(Staged::Nothing)),
                    Err(reason) => return Ok(Err(reason)),
                }
                self.ensure_record(resource)?;
                Ok(Ok(Staged::Membership {
                    account: spec.account.clone(),
                    group: spec.group.clone(),
                }))
            }
            Spec::Container(spec) if self.held.contains_key(&spec.name) => Ok(Ok(Staged::Nothing)),
            Spec::Container(spec) => {
                let containers = self.seams.containers;
                let declared = declared(resource, spec);
                Ok(containers
                    .check(&declared)
                    .and_then(|()| containers.before_commit(&declared))
                    .map(|was| Staged::Container {
                        spec: spec.clone(),
                        restart: self.restart_wanted(&resource.id, spec, changed_in_group),
                        was,
                    }))
            }
        }
    }

    fn commit(
        &mut self,
        resource: &Resource,
        step: &Staged,
    ) -> Result<(Committed, Vec<String>), String> {
        match step {
            Staged::Nothing => Ok((Committed::Nothing, Vec::new())),
            Staged::File {
                target,
                temp,
                existed,
                changed,
            } => {
                let old = if *existed {
                    let old = fsops::old_name(target);
                    fsops::remove_if_present(&old)
                        .and_then(|()| fs::hard_link(target, &old))
                        .map_err(|e| format!("cannot keep the old `{}`: {e}", show(resource)))?;
                    Some(old)
                } else {
                    None
                };
                fs::rename(temp, target).map_err(|e| {
                    if let Some(old) = &old {
                        let _ = fs::remove_file(old);
                    }
                    format!("cannot commit `{}`: {e}", show(resource))
                })?;
                self.touched(target);
                Ok((
                    Committed::File {
                        target: target.clone(),
                        old,
                    },
                    changed.clone(),
                ))
            }
            Staged::Directory {
                full,
                machine_path,
                create,
                wanted,
                before,
                changed,
            } => {
                let (mode, uid, gid) = *wanted;
                let result = if *create {
                    // A member file's staging may have made it already, as its parent.
                    match fs::create_dir(full) {
                        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
                        _ => fsops::set_mode_owner(full, mode, uid, gid),
                    }
                } else {
                    fsops::set_mode_owner(full, mode, uid, gid)
                };
                result.map_err(|e| format!("cannot commit `{machine_path}`: {e}"))?;
                if *create {
                    self.touched(full);
                    self.paths.made_dir(machine_path);
                }
                Ok((
                    Committed::Directory {
                        full: full.clone(),
                        machine_path: machine_path.clone(),
                        created: *create,
                        before: *before,
                    },
                    changed.clone(),
                ))
            }
            Staged::Membership { account, group } => {
                let changed = self.add_membership(&resource.id, account, group)?;
                Ok((
                    Committed::Membership {
                        account: account.clone(),
                        group: group.clone(),
                    },
                    changed,
                ))
            }
            Staged::Container { spec, restart, was } => {
                // Rule 5: the container it replaces is kept until the group is whole, and a
                // restart waits for the whole group (seed issue 066).
                let containers = self.seams.containers;
                let put_back = |mut reason: String| {
                    if let Err(e) = containers.restore(&resource.id, &spec.name, was) {
                        reason.push_str(&format!("; and putting it back failed: {e}"));
                    }
                    reason
                };
                let aside = containers
                    .set_aside(&declared(resource, spec))
                    .map_err(put_back)?;
                let changed = containers
                    .apply(&declared(resource, spec), false)
                    .map_err(put_back)?;
                let changed = match &aside {
                    Some(aside) => aside.changed.clone(),
                    None => changed,
                };
                if let Err(e) = self.record_container(resource) {
                    return Err(put_back(e.to_string()));
                }
                let restart = *restart && matches!(was, ContainerWas::Running);
                Ok((
                    Committed::Container {
                        id: resource.id.clone(),
                        module: resource.module.clone(),
                        spec: Box::new(spec.clone()),
                        was: was.clone(),
                        aside,
                        restart,
                    },
                    changed,
                ))
            }
        }
    }

    fn put_back(&mut self, done: &Committed) -> Result<(), String> {
        match done {
            Committed::Nothing => Ok(()),
            Committed::File { target, old } => match old {
                Some(old) => fs::rename(old, target),
                None => fs::remove_file(target),
            }
            .map_err(|e| format!("{}: {e}", target.display())),
            Committed::Directory {
                full,
                machine_path,
                created,
                before,
            } => if *created {
                self.paths.forget(machine_path);
                fs::remove_dir(full)
            } else {
                fsops::set_mode_owner(full, before.0, before.1, before.2)
            }
            .map_err(|e| format!("`{machine_path}`: {e}")),
            Committed::Membership { account, group } => {
                let result = self.seams.accounts.remove_membership(account, group);
                self.findings.retain(|f| {
                    !f.message
                        .starts_with(&format!("`{account}` was added to `{group}`"))
                });
                self.reload_accounts();
                result.map_err(|e| format!("`{account}` in `{group}`: {e}"))
            }
            Committed::Container { id, spec, was, .. } => {
                let name = &spec.name;
                self.seams
                    .containers
                    .restore(id, name, was)
                    .map_err(|e| format!("container `{name}`: {e}"))
            }
        }
    }

    // ---- the end ----

    fn finish(&mut self) -> Result<(), ApplyError> {
        for dir in std::mem::take(&mut self.touched_dirs) {
            // A directory that is gone again (removed parent) has nothing to sync.
            let _ = fsops::sync_dir(&dir);
        }
        // A failure of a resource that is neither declared nor held any more is forgotten.
        let declaration = self.declaration;
        let resources = &self.state.resources;
        let before = self.state.failures.len();
        self.state
            .failures
            .retain(|id, _| declaration.resource(id).is_some() || resources.contains_key(id));
        if self.state.failures.len() != before {
            self.dirty = true;
        }
        // A restart owed by a container no longer declared is owed no more.
        let before = self.state.pending_restarts.len();
        self.state.pending_restarts.retain(|id| {
            declaration
                .resource(id)
                .is_some_and(|r| matches!(r.spec, Spec::Container(_)))
        });
        if self.state.pending_restarts.len() != before {
            self.dirty = true;
        }
        if self.dirty {
            self.save()?;
        }
        std::mem::replace(&mut self.stamps, crate::stamps::StatCache::none()).keep();
        let kept: BTreeSet<String> = self
            .state
            .resources
            .values()
            .filter_map(|r| match &r.origin {
                Origin::FoundFile { content, .. } => Some(content.clone()),
                Origin::Made | Origin::FoundDirectory { .. } | Origin::FoundMembership => None,
            })
            .collect();
        self.dir.forget_found_except(&kept);
        if self.marked {
            self.dir.clear_in_progress()?;
        }
        // Written when it changed (above): the next apply takes it without parsing it.
        self.dir.keep_state(std::mem::take(&mut self.state));
        Ok(())
    }
}

/// A declared container as its runtime is told of it.
fn declared<'r>(resource: &'r Resource, spec: &'r ContainerSpec) -> DeclaredContainer<'r> {
    DeclaredContainer {
        id: &resource.id,
        module: &resource.module,
        spec,
    }
}

fn window_error(error: crate::window::WindowError) -> ApplyError {
    use crate::window::WindowError;
    match error {
        WindowError::Io { path, source } => ApplyError::StateRead { path, source },
        WindowError::Format { path, reason } => ApplyError::StateFormat { path, reason },
        other @ (WindowError::Invalid { .. }
        | WindowError::Hold { .. }
        | WindowError::Restart { .. }) => ApplyError::StateFormat {
            path: PathBuf::from("windows"),
            reason: other.to_string(),
        },
    }
}

fn group_reason(unit: &Unit, breaker: &str, reason: &str) -> String {
    format!(
        "together group `{}` did not apply: `{breaker}` failed: {reason}",
        unit.group.as_deref().unwrap_or_default()
    )
}

fn show(resource: &Resource) -> String {
    match &resource.spec {
        Spec::File(f) => f.path.clone(),
        Spec::Directory(d) => d.path.clone(),
        Spec::Membership(_) | Spec::Container(_) => resource.id.clone(),
    }
}

/// Removes staged temp files.
fn discard(staged: &[Staged]) {
    for step in staged {
        if let Staged::File { temp, .. } = step {
            let _ = fs::remove_file(temp);
        }
    }
}

/// A reason when what is at a file resource's path is not a regular file.
fn regular_file(path: &str, meta: &fs::Metadata) -> Result<(), String> {
    if meta.is_file() {
        Ok(())
    } else if meta.is_dir() {
        Err(format!("`{path}` is a directory, not a file"))
    } else {
        Err(format!("`{path}` is not a regular file"))
    }
}

fn mode_owner_differences(meta: &fs::Metadata, (mode, uid, gid): (u32, u32, u32)) -> Vec<String> {
    let mut changed = Vec::new();
    if meta.mode() & 0o7777 != mode {
        changed.push("mode".to_owned());
    }
    if meta.uid() != uid {
        changed.push("owner".to_owned());
    }
    if meta.gid() != gid {
        changed.push("group".to_owned());
    }
    changed
}

/// What differs between an open file and what is wanted; reads through `buffer`, comparing as
/// it goes, so nothing is allocated per file.
fn differences_of_open_file(
    file: &mut fs::File,
    meta: &fs::Metadata,
    wanted: &Wanted<'_>,
    buffer: &mut [u8],
) -> io::Result<Vec<String>> {
    let mut changed = Vec::new();
    if meta.len() != wanted.bytes.len() as u64 || !same_bytes(file, wanted.bytes, buffer)? {
        changed.push("content".to_owned());
    }
    changed.extend(mode_owner_differences(
        meta,
        (wanted.mode, wanted.uid, wanted.gid),
    ));
    Ok(changed)
}

/// Whether what `reader` holds is exactly `expected`.
fn same_bytes(reader: &mut impl io::Read, expected: &[u8], buffer: &mut [u8]) -> io::Result<bool> {
    let mut offset = 0;
    loop {
        let read = match reader.read(buffer) {
            Ok(read) => read,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if read == 0 {
            return Ok(offset == expected.len());
        }
        if expected.len() - offset < read || buffer[..read] != expected[offset..offset + read] {
            return Ok(false);
        }
        offset += read;
        if offset == expected.len() {
            // The length was checked against the file's metadata: no read for the end.
            return Ok(true);
        }
    }
}

/// What differs between the file at `full` and what is wanted.
fn file_differences(
    full: &std::path::Path,
    meta: &fs::Metadata,
    wanted: &Wanted<'_>,
) -> io::Result<Vec<String>> {
    let mut changed = Vec::new();
    let same_content = meta.len() == wanted.bytes.len() as u64 && fs::read(full)? == wanted.bytes;
    if !same_content {
        changed.push("content".to_owned());
    }
    changed.extend(mode_owner_differences(
        meta,
        (wanted.mode, wanted.uid, wanted.gid),
    ));
    Ok(changed)
}
