//! The apply loop: release what is no longer declared, record what is about to be taken, apply
//! unit by unit in dependency order, report.
//!
//! One `impl Engine` per file, in the order an apply runs: `group` puts back a together group
//! left mid-commit (and commits one), `release` gives back what is no longer declared, `discover`
//! records what is at each newly declared resource before anything changes, `units` takes each
//! unit in turn (blocked, gated, left, waiting, or attempted); `kinds` holds each kind whole, a
//! file per kind (its observe, apply, release and drift), `owners` reads the accounts' ids, and
//! `look` is what a drift examination looks with; `restarts` keeps the restarts a changed file
//! owes its containers. This file holds the entry points, the engine's state, outcomes and
//! failures, and the end of an apply.

mod discover;
mod group;
pub(crate) mod kinds;
pub(crate) mod look;
mod owners;
mod release;
mod restarts;
mod units;

pub use group::{put_back_interrupted_group, put_back_interrupted_group_with};

use group::put_back_group;

use crate::accounts::{AccountDatabase, Accounts, ShadowUtils};
use crate::containers::{ContainerRuntime, NoContainerRuntime};
use crate::fsops;
use crate::order::order_of;
use crate::outcomes::Outcomes;
use crate::paths::RootPaths;
use crate::podman::Podman;
use crate::progress::{ApplyProgress, NoProgress};
use crate::state::{FailureRecord, InProgress, StateDir, StateFile, STATE_FORMAT};
use crate::{ApplyError, ContainerRuntimeChoice, HostConfig};
use mesh_model::declaration::{ContainerSpec, Declaration, Declared, Resource, Spec};
use mesh_model::report::{Finding, MachineState, Outcome, Report, REPORT_FORMAT};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

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
///   converges it (a stopped container is started). A job of a module whose containers a window
///   holds does not run while it is open (`held-still{step}` too); the first apply after runs it
///   if it is due.
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

/// Applies a declaration whose archived files (`FileSpec::source`) the host read from their
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

/// [`apply_archived`], telling `progress` before the first change (*mid-change is said before
/// anything changes*: a daemon publishes the `mid-change` report it is given).
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

/// `declaration` with every container and network under its name on this machine
/// ([`HostConfig::container_prefix`] before its declared name, and a container joining a declared
/// network joins it under that name); `None` when that changes nothing (no prefix, or no
/// container or network).
fn with_container_prefix(declaration: &Declaration, prefix: &str) -> Option<Declaration> {
    let has_container = declaration
        .resources
        .iter()
        .any(|r| matches!(r.spec, Spec::Container(_) | Spec::Network(_) | Spec::Job(_)));
    if prefix.is_empty() || !has_container {
        return None;
    }
    let networks: BTreeSet<&str> = declaration
        .resources
        .iter()
        .filter_map(|r| match &r.spec {
            Spec::Network(n) => Some(n.name.as_str()),
            _ => None,
        })
        .collect();
    let mut renamed = declaration.clone();
    for resource in &mut renamed.resources {
        match &mut resource.spec {
            Spec::Container(container) => rename(container, prefix, &networks),
            Spec::Job(job) => rename(&mut job.run, prefix, &networks),
            Spec::Network(network) => network.name = format!("{prefix}{}", network.name),
            // No other kind has a name of podman's.
            _ => {}
        }
    }
    Some(renamed)
}

/// A container (or a job's) under its name on this machine, joining a declared network under
/// that network's.
fn rename(container: &mut ContainerSpec, prefix: &str, networks: &BTreeSet<&str>) {
    container.name = format!("{prefix}{}", container.name);
    if let Some(network) = &mut container.network {
        if networks.contains(network.as_str()) {
            *network = format!("{prefix}{network}");
        }
    }
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
    // A together group left mid-commit is put back whole before anything else (*resources
    // declared together apply all-or-nothing*), and
    // before the accounts are read: putting it back may remove a membership.
    let put_back = put_back_group(&dir, &config.root, seams)?;
    // Windows that lapsed or whose process is gone ended abnormally (a released window leaves
    // no record): their records go (best effort), and the report says so (*a maintenance window
    // holds containers still*).
    let ended = crate::window::prune_closed(&config.state_dir, now).unwrap_or_default();
    let windows = crate::window::open_windows(&config.state_dir, now).map_err(window_error)?;
    let held: BTreeMap<String, String> = windows
        .iter()
        .flat_map(|w| w.containers.iter().map(|c| (c.clone(), w.step.clone())))
        .collect();
    // A module whose containers a window holds has its jobs held too: a job run during a
    // backup would change the data being copied.
    let held_modules = declaration
        .resources
        .iter()
        .filter_map(|r| match &r.spec {
            Spec::Container(c) => held
                .get(&c.name)
                .map(|step| (r.module.clone(), step.clone())),
            _ => None,
        })
        .collect();
    let mut engine = Engine {
        held,
        held_modules,
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
        kept_dirs: Vec::new(),
    };
    engine.render_unknown_templates();
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
        host_failure: None,
        drift: Vec::new(),
        started_at: now,
        finished_at: now,
        send: None,
        published_at: None,
    })
}

/// What attempting one resource came to, when the apply itself can go on.
enum Attempt {
    /// It is as declared now; what changed to make it so (nothing, when it already was).
    Took(Vec<String>),
    /// It could not be made as declared, and why: the resource fails, the apply goes on.
    Failed(String),
}

impl From<Result<Vec<String>, String>> for Attempt {
    /// A seam's answer: what changed, or why it failed.
    fn from(answer: Result<Vec<String>, String>) -> Self {
        match answer {
            Ok(changed) => Attempt::Took(changed),
            Err(reason) => Attempt::Failed(reason),
        }
    }
}

struct Engine<'a, 's> {
    /// Containers held still by an open maintenance window: name → the step's name.
    held: BTreeMap<String, String>,
    /// Modules a declared container of which a window holds still: module → the step's name
    /// (their jobs do not run while it is open).
    held_modules: BTreeMap<String, String>,
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
    /// Directories the mesh made, kept in this apply because they hold data it did not put
    /// there (machine paths): an account that owns one is kept too.
    kept_dirs: Vec<String>,
}

/// The content of the declaration's archived files, as the host read them from their archives
/// (see [`apply_archived`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArchivedContents {
    /// File resource id → its content, read from its archive and checked against its digest,
    /// or a template of secrets rendered by its host.
    pub read: BTreeMap<String, String>,
    /// File resource id → why its content could not be read (naming the archive and the store).
    pub unavailable: BTreeMap<String, String>,
    /// File resource id → a template of secrets its host renders only when the apply needs
    /// its content ([`crate::sealed`]). Looked up by id for each such file, in no order (a
    /// hash map: a tree's search of 1,000 ids sharing their module's prefix costs more).
    pub deferred: std::collections::HashMap<String, crate::sealed::Deferred>,
}

impl ArchivedContents {
    /// How many of its templates of secrets were rendered (their secrets opened) so far.
    pub fn templates_rendered(&self) -> usize {
        self.deferred.values().filter(|d| d.opened()).count()
    }
}

/// What was read is zeroized when it is let go: a file rendered from a secret holds its value
/// in clear (the rule “A secret is readable only where it is used”: on its machine, and there
/// only as long as it is needed).
impl Drop for ArchivedContents {
    fn drop(&mut self) {
        use zeroize::Zeroize as _;
        for content in self.read.values_mut() {
            content.zeroize();
        }
    }
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
        if file.content.is_some()
            || contents.read.contains_key(&resource.id)
            || contents.deferred.contains_key(&resource.id)
        {
            continue;
        }
        if let (Some(pieces), None) = (&file.sealed, contents.unavailable.get(&resource.id)) {
            // A template of secrets its host did not render: nothing of it is written.
            let keys: Vec<String> = pieces
                .iter()
                .filter_map(|piece| match piece {
                    mesh_model::secret::SealedPiece::Secret { key, .. } => Some(format!("`{key}`")),
                    mesh_model::secret::SealedPiece::Text(_) => None,
                })
                .collect();
            out.insert(
                resource.id.clone(),
                format!(
                    "it uses the secret {} of `{}`, which this host was given no key to open",
                    keys.join(", "),
                    resource.module
                ),
            );
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

fn resource_digest(resource: &Resource) -> String {
    mesh_model::sha256_digest(&serde_json::to_vec(resource).expect("a resource serializes"))
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
                host_failure: None,
                drift: Vec::new(),
                started_at: self.now,
                finished_at: self.now,
                send: None,
                published_at: None,
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
        if self.now >= failure.retry_at
            || failure.declared != resource_digest(resource)
            || self.seams.progress.retry_now()
        {
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
        // What a job no longer declared last ran is forgotten: declared again, it runs.
        let before = self.state.jobs.len();
        self.state.jobs.retain(|id, _| {
            declaration
                .resource(id)
                .is_some_and(|r| matches!(r.spec, Spec::Job(_)))
        });
        if self.state.jobs.len() != before {
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
            .filter_map(|r| r.origin.kept_content().map(str::to_owned))
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
