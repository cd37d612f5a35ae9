//! The host agent: receives its node's declaration, applies it with mesh-apply under a root
//! prefix, and reports what took.
//!
//! A declaration is taken in two steps: [`receive`] parses and checks it and reads its archived
//! files from their archives (the host's cache, then the store: [`archives`]), then
//! [`apply_received`] applies it with mesh-apply and makes the report. [`start`] subscribes
//! an agent to its node's declarations on any [`Bus`] (the embedded controller runs one per
//! node in-process); [`serve`] is the daemon on a fleet (`mesh-host serve`: NATS JetStream,
//! heartbeats, retries, discovery), and [`serve::run`] the daemon as the binary runs it.
//! [`handle_declaration`] is both steps at once, reading archives from the cache only.
//!
//! # Invariants
//! - A declaration that does not parse or breaks the format's rules changes nothing under the
//!   root: it is refused before any apply, and the refusal is reported.
//! - The host never applies outside its root prefix (mesh-apply guarantees it).
//! - A report names the digest of the declaration as it was sent (the rollout gate compares
//!   it), whatever was read from archives to apply it.
//! - An archive that cannot be had fails only the files read from it ([`archives`]).
//! - Pruning the archive cache after an apply never removes an archive the declaration names,
//!   nor anything the host did not make, and never fails the apply ([`prune_archive_cache`]).
//! - A state directory that cannot be written or read is a failure of the node, said with the
//!   system's reason in the report ([`host_failed`]), never a refusal of the declaration.
//! - A panic in an apply ends neither the agent nor the daemon: it is a report whose every
//!   resource failed naming the panic ([`apply_guarded`]).

pub mod archives;
pub mod forget;
pub mod kept;
pub mod sealed;
pub mod serve;
pub mod watch;

/// Where, under the state directory, the host keeps its NKey seed (`mesh-host keygen` makes
/// it, mode 0600; it never leaves this machine): `<state-dir>/bus/nkey.seed`.
pub const NKEY_SEED_FILE: &str = "bus/nkey.seed";

/// Makes this host's NKey (or finds the one it has) under `state_dir` (see
/// [`NKEY_SEED_FILE`]): the public key is what the operator enrolls with the controller.
///
/// # Guarantees
/// The seed is written 0600 in a 0700 directory and never replaced: a second call answers
/// the same public key.
///
/// # Errors
/// [`mesh_bus::keys::KeyError`] when the seed cannot be written, or the one there is not a
/// seed or is readable by others.
pub fn keygen(
    state_dir: &std::path::Path,
) -> Result<mesh_bus::keys::MadeSeed, mesh_bus::keys::KeyError> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = state_dir.join(NKEY_SEED_FILE);
    if let Some(dir) = path.parent() {
        let made_dir = |source| {
            mesh_bus::keys::KeyError::File(mesh_store::secret::SecretFileError::Io {
                path: dir.to_owned(),
                operation: "make the directory",
                source,
            })
        };
        std::fs::create_dir_all(dir).map_err(made_dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(made_dir)?;
    }
    mesh_bus::keys::make_seed_file(&path)
}

pub use archives::{ArchiveSource, DEFAULT_FETCH_SPREAD};

use mesh_apply::{ArchivedContents, HostConfig};
use mesh_bus::{subjects, Bus, BusError};
use mesh_model::declaration::{Declaration, Declared, Sealed};
use mesh_model::report::{Finding, MachineState, Outcome, Report, REPORT_FORMAT};
use mesh_store::clock::now;
use mesh_store::clock::rfc3339;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Whether log lines on standard error may carry colour (ANSI codes): only when standard error
/// is a terminal and `NO_COLOR` is not set (<https://no-color.org>). For a binary's
/// `tracing_subscriber::fmt().with_ansi(..)`.
pub fn log_in_colour() -> bool {
    use std::io::IsTerminal as _;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// A declaration received and checked, with its archived files read: ready to apply.
#[derive(Debug, Clone)]
pub struct Received {
    /// The declaration as sent, sealed once on receipt ([`Sealed`]): the apply neither hashes
    /// it nor checks its rules again.
    pub declaration: Arc<Sealed>,
    /// The content of its archived files, or why each could not be read.
    pub contents: ArchivedContents,
}

/// The report refusing a payload: nothing applied, a finding saying why.
fn refused(node: &str, declaration: String, message: String, now: u64) -> Report {
    Report {
        format: REPORT_FORMAT,
        node: node.to_owned(),
        declaration,
        machine: MachineState::Partial,
        resources: BTreeMap::new(),
        undeclared: BTreeMap::new(),
        findings: vec![Finding {
            resource: String::new(),
            message,
        }],
        windows: Vec::new(),
        resumed_from_mid_change: false,
        host_failure: None,
        drift: Vec::new(),
        started_at: now,
        finished_at: now,
        send: None,
        published_at: None,
    }
}

/// Parses a payload meant for `node`.
///
/// # Errors
/// The report refusing it (machine `partial`, no resources, a finding naming the problem) when
/// it is not a valid declaration for `node`.
pub fn parse(node: &str, payload: &[u8], now: u64) -> Result<Declaration, Box<Report>> {
    let declaration = Declaration::from_json(payload).map_err(|error| {
        Box::new(refused(
            node,
            mesh_model::sha256_digest(payload),
            format!("declaration refused, nothing applied: {error}"),
            now,
        ))
    })?;
    if declaration.node != node {
        return Err(Box::new(refused(
            node,
            declaration.digest(),
            format!(
                "declaration refused, nothing applied: it is for `{}`, this host is `{node}`",
                declaration.node
            ),
            now,
        )));
    }
    Ok(declaration)
}

/// Receives one payload: parses it ([`parse`]) and reads its archived files from their
/// archives ([`archives::read_archived`]: the cache, then the store).
///
/// # Errors
/// The report refusing a payload that is not a valid declaration for `node`.
pub async fn receive(
    source: &ArchiveSource,
    node: &str,
    payload: &[u8],
    now: u64,
) -> Result<Received, Box<Report>> {
    let declaration = Arc::new(Sealed::new(parse(node, payload, now)?));
    receive_sealed(source, node, declaration, now).await
}

/// [`receive`] of a payload already parsed and sealed (a host keeps the declaration it
/// received sealed: it is neither parsed nor hashed twice).
///
/// # Errors
/// The report refusing a declaration that is not for `node`.
pub async fn receive_sealed(
    source: &ArchiveSource,
    node: &str,
    declaration: Arc<Sealed>,
    now: u64,
) -> Result<Received, Box<Report>> {
    if declaration.node != node {
        return Err(Box::new(refused(
            node,
            Declared::digest(&*declaration).into_owned(),
            format!(
                "declaration refused, nothing applied: it is for `{}`, this host is `{node}`",
                declaration.node
            ),
            now,
        )));
    }
    let mut contents = archives::read_archived(&declaration, source).await;
    sealed::render_sealed(&declaration, source.state_dir(), &mut contents);
    Ok(Received {
        declaration,
        contents,
    })
}

/// Applies a received declaration and returns the report to publish. The report names the
/// digest of the declaration as sent; an archived file that could not be read is reported
/// failed with the reason, and nothing of it is written.
///
/// After the apply, the host's archive cache is pruned ([`archives::prune_after_apply`]): the
/// archives the declaration names and the few most recently used others are kept. A prune that
/// could not be done never changes the outcome ([`prune_archive_cache`]).
pub fn apply_received(config: &HostConfig, received: &Received, now: u64) -> Report {
    apply_received_live(config, received, now, &mesh_apply::NoProgress)
}

/// [`apply_received`], telling `progress` the `mid-change` report before the apply changes
/// anything (the rule “Mid-change is said before anything changes”;
/// [`mesh_apply::apply_archived_live`]).
pub fn apply_received_live(
    config: &HostConfig,
    received: &Received,
    now: u64,
    progress: &dyn mesh_apply::ApplyProgress,
) -> Report {
    let Received {
        declaration,
        contents,
    } = received;
    #[cfg(feature = "fail-points")]
    fail::fail_point!(PANIC_IN_APPLY);
    match mesh_apply::apply_archived_live(config, &**declaration, contents, now, progress) {
        Ok(mut report) => {
            prune_archive_cache(config, declaration, &mut report);
            report
        }
        Err(error @ mesh_apply::ApplyError::Declaration { .. }) => refused(
            &declaration.node,
            Declared::digest(&**declaration).into_owned(),
            format!("apply refused, nothing applied: {error}"),
            now,
        ),
        Err(
            error @ (mesh_apply::ApplyError::StateRead { .. }
            | mesh_apply::ApplyError::StateWrite { .. }
            | mesh_apply::ApplyError::StateFormat { .. }
            | mesh_apply::ApplyError::GroupPutBack { .. }),
        ) => host_failed(
            config,
            &declaration.node,
            Declared::digest(&**declaration).into_owned(),
            with_causes(&error),
            now,
        ),
    }
}

/// The report of a host that could not apply at all (its state directory cannot be written or
/// read): [`Report::host_failure`] says why with the system's reason, and so does a finding
/// (what a controller before that field reads); no resource is named. The machine is
/// `mid-change` when an apply had begun changing it (its marker is there), else `partial`.
/// Logged as an error: a host that cannot apply says so on its machine too.
pub fn host_failed(
    config: &HostConfig,
    node: &str,
    declaration: String,
    reason: String,
    now: u64,
) -> Report {
    tracing::error!(%node, %declaration, "the host cannot apply: {reason}; trying again after its backoff");
    let machine = match mesh_apply::is_mid_change(&config.state_dir) {
        Ok(true) => MachineState::MidChange,
        Ok(false) | Err(_) => MachineState::Partial,
    };
    let mut report = refused(
        node,
        declaration,
        format!("the host cannot apply: {reason}; it tries again after its backoff"),
        now,
    );
    report.machine = machine;
    report.host_failure = Some(reason);
    report
}

/// `said` with its first letter lower-cased when it opens a word in lower case after it (the
/// system's `No space left on device`; not an acronym such as `NFS`).
pub fn lower_first(said: &str) -> String {
    let mut chars = said.chars();
    match (chars.next(), chars.next()) {
        (Some(first), Some(second)) if first.is_uppercase() && second.is_lowercase() => {
            first.to_lowercase().chain(said.chars().skip(1)).collect()
        }
        _ => said.to_owned(),
    }
}

/// `error` in words with every cause after it (`…: no space left on device (os error 28)`):
/// the system's reason is what a person needs, and an error's own words leave it out. A cause
/// that opens with a capital (the system's `No space left on device`) is lower-cased, as every
/// message of the mesh is.
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut words = error.to_string();
    let mut cause = error.source();
    while let Some(source) = cause {
        let lowered = lower_first(&source.to_string());
        if !words.ends_with(&lowered) {
            words.push_str(": ");
            words.push_str(&lowered);
        }
        cause = source.source();
    }
    words
}

/// The fail point a stopping `mesh-host serve` passes once its loop has ended, before its last
/// flush (`FAILPOINTS=serve-stopping=sleep(600000)` holds it there, for the tests that a second
/// signal, or the stop's bound, still ends it). Compiled only with the `fail-points` feature,
/// and read from `FAILPOINTS` only then.
pub const SERVE_STOPPING: &str = "serve-stopping";

/// The fail point at which `mesh-host serve` asks the declarations stream for the node's last
/// declaration: set (`FAILPOINTS=serve-ask-unanswered=return`), the ask is never answered, as
/// by a bus that does not answer it (the tests that what is sent is applied all the same).
/// Compiled only with the `fail-points` feature, and read from `FAILPOINTS` only then.
pub const ASK_UNANSWERED: &str = "serve-ask-unanswered";

/// The fail point that makes the host's state directory full: set to `return(FILE)`
/// (`FAILPOINTS=mesh-host.state-dir-full=return(FILE)`), every write of a state file — the
/// declaration received, the apply's state, its mid-change marker — fails as a full disk fails
/// it ("No space left on device") for as long as `FILE` exists; removing `FILE` frees the
/// space, the daemon running on (the tests that a host which cannot write its state says so
/// and tries again). Compiled only with the `fail-points` feature, and read from `FAILPOINTS`
/// only then.
pub const STATE_DIR_FULL: &str = mesh_apply::progress::STATE_DIR_FULL;

/// The fail point at which [`apply_received`] fails before it applies anything (a test sets it
/// to panic: `fail::cfg(PANIC_IN_APPLY, "panic(…)")`), so that tests can see what such a
/// failure does. It exists only with the `fail-points` feature, which the crate's tests turn
/// on: a release build has no fail point and reads none from anywhere.
#[cfg(feature = "fail-points")]
pub const PANIC_IN_APPLY: &str = "mesh-host.apply.panic";

/// [`apply_received`], with a panic in it caught and made the report: every resource of the
/// declaration failed with `the host's apply panicked: <message>` ([`panicked`]).
///
/// # Guarantees
/// Returns a report whatever the apply did; the agent or daemon calling it goes on.
pub fn apply_guarded(config: &HostConfig, received: &Received, now: u64) -> Report {
    apply_guarded_live(config, received, now, &mesh_apply::NoProgress)
}

/// [`apply_guarded`], telling `progress` the `mid-change` report before the apply changes
/// anything ([`apply_received_live`]).
///
/// # Guarantees
/// As [`apply_guarded`].
pub fn apply_guarded_live(
    config: &HostConfig,
    received: &Received,
    now: u64,
    progress: &dyn mesh_apply::ApplyProgress,
) -> Report {
    let applied = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        apply_received_live(config, received, now, progress)
    }));
    applied.unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        panicked(config, &received.declaration, &message, now)
    })
}

/// The report of an apply of `declaration` that panicked with `message` (or whose task was
/// lost): every resource failed, naming it; the machine `mid-change` when the apply had begun
/// changing it (the marker is there), else `partial`.
pub fn panicked(config: &HostConfig, declaration: &Declaration, message: &str, now: u64) -> Report {
    let reason = format!("the host's apply panicked: {message}");
    tracing::error!(node = %declaration.node, "{reason}");
    let machine = match mesh_apply::is_mid_change(&config.state_dir) {
        Ok(true) => MachineState::MidChange,
        Ok(false) | Err(_) => MachineState::Partial,
    };
    Report {
        format: REPORT_FORMAT,
        node: declaration.node.clone(),
        declaration: declaration.digest(),
        machine,
        resources: declaration
            .resources
            .iter()
            .map(|resource| {
                let failed = Outcome::Failed {
                    reason: reason.clone(),
                    attempts: 1,
                    since: now,
                };
                (resource.id.clone(), failed)
            })
            .collect(),
        undeclared: BTreeMap::new(),
        findings: vec![Finding {
            resource: String::new(),
            message: reason.clone(),
        }],
        windows: Vec::new(),
        resumed_from_mid_change: false,
        host_failure: None,
        drift: Vec::new(),
        started_at: now,
        finished_at: now,
        send: None,
        published_at: None,
    }
}

/// [`apply_guarded`] on a blocking thread; a task lost to the runtime is a [`panicked`] report
/// too.
pub async fn apply_on_blocking_thread(config: Arc<HostConfig>, received: Received) -> Report {
    apply_on_blocking_thread_live(config, received, Box::new(mesh_apply::NoProgress)).await
}

/// [`apply_on_blocking_thread`], telling `progress` the `mid-change` report before the apply
/// changes anything.
pub async fn apply_on_blocking_thread_live(
    config: Arc<HostConfig>,
    received: Received,
    progress: Box<dyn mesh_apply::ApplyProgress + Send>,
) -> Report {
    let received = Arc::new(received);
    let task = {
        let (config, received) = (Arc::clone(&config), Arc::clone(&received));
        tokio::task::spawn_blocking(move || {
            apply_guarded_live(&config, &received, now(), &*progress)
        })
    };
    match task.await {
        Ok(report) => report,
        Err(error) => panicked(&config, &received.declaration, &error.to_string(), now()),
    }
}

/// Prunes the host's archive cache after `declaration` was applied
/// ([`archives::prune_after_apply`]) and notes in `report` what could not be done: a finding
/// naming the cache, whatever the report holds (the rule “Nothing fails silently”: `status` shows
/// it until a later apply prunes; a report with no resources and a finding is a refusal only when
/// its machine is `partial`, `mesh_plan::merge::module_report`).
pub fn prune_archive_cache(config: &HostConfig, declaration: &Declaration, report: &mut Report) {
    let note = archives::prune_after_apply(
        &config.state_dir,
        declaration,
        &report.declaration,
        report.finished_at,
    );
    if let Some(message) = note {
        report.findings.push(Finding {
            resource: String::new(),
            message,
        });
    }
}

/// Receives one declaration payload, applies it, and returns the report to publish: [`receive`]
/// then [`apply_received`], with archives read from the host's cache under
/// `config.state_dir` only (an archive not there fails the files read from it).
///
/// A payload that is not a valid declaration for `node` is refused: nothing is applied, and
/// the report says why (machine `partial`, no resources, a finding naming the problem).
pub fn handle_declaration(config: &HostConfig, node: &str, payload: &[u8], now: u64) -> Report {
    use futures_util::FutureExt as _;
    let source = ArchiveSource::cache_only(&config.state_dir);
    // With no store, reading archives never waits on anything.
    match receive(&source, node, payload, now)
        .now_or_never()
        .expect("reading archives from the cache alone does not wait")
    {
        Ok(received) => apply_received(config, &received, now),
        Err(report) => *report,
    }
}

/// Subscribes an agent for `node` to its declarations and serves them until the bus closes.
///
/// When this returns, the subscription is live: a declaration published afterwards is heard.
/// Each declaration's archived files are read from `archives` (the cache, then the store), then
/// it is applied on a blocking thread and its report published on [`subjects::report`]. A panic
/// in an apply is a failed report ([`apply_guarded`]); the agent goes on.
///
/// # Errors
/// [`BusError`] when the subscription is refused.
pub async fn start(
    bus: Arc<dyn Bus>,
    node: String,
    config: HostConfig,
    archives: ArchiveSource,
) -> Result<tokio::task::JoinHandle<()>, BusError> {
    let mut declarations = bus.subscribe(&subjects::declaration(&node)).await?;
    let config = Arc::new(config);
    Ok(tokio::spawn(async move {
        while let Some(message) = declarations.next().await {
            // Each message is a send: what failed is tried now, not after its backoff.
            let mut report = match receive(&archives, &node, &message.payload, now()).await {
                Ok(received) => {
                    apply_on_blocking_thread_live(Arc::clone(&config), received, Box::new(NewSend))
                        .await
                }
                Err(report) => *report,
            };
            // The send it answers, and this host's clock as it publishes (as the daemon's).
            report.send = message.id;
            report.published_at = Some(now());
            let payload = serde_json::to_vec(&report).expect("a report always serializes");
            if let Err(error) = bus.publish(&subjects::report(&node), payload).await {
                tracing::error!(node = %node, %error, "could not publish the report");
            }
        }
    }))
}

/// An apply answering a new send, nobody listening to its progress: a resource that failed as
/// declared is tried now ([`mesh_apply::ApplyProgress::retry_now`]).
struct NewSend;

impl mesh_apply::ApplyProgress for NewSend {
    fn changing(&self, _report: &Report) {}

    fn retry_now(&self) -> bool {
        true
    }
}

/// A report as a person reads it: a summary line, then each resource with its outcome.
pub fn render_report(report: &Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let tally = report
        .tally()
        .iter()
        .map(|(word, n)| format!("{n} {word}"))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(
        out,
        "{}: {} ({}), declaration {}",
        report.node,
        machine_word(report.machine),
        if report.host_failure.is_some() {
            "the host cannot apply".to_owned()
        } else if tally.is_empty() {
            "nothing declared".to_owned()
        } else {
            tally
        },
        short(&report.declaration)
    );
    for (id, outcome) in report.resources.iter().chain(&report.undeclared) {
        out.push_str(&outcome_line(id, outcome));
    }
    for finding in &report.findings {
        out.push_str(&finding_line(finding));
    }
    for window in &report.windows {
        let _ = writeln!(
            out,
            "  window open: step `{}` holds {} still (since {})",
            window.step,
            window.containers.join(", "),
            rfc3339(window.opened_at)
        );
    }
    out
}

/// One resource's line in a report as a person reads it: `  <word> <id><detail>`.
pub fn outcome_line(id: &str, outcome: &Outcome) -> String {
    format!("  {:<10} {id}{}\n", outcome.word(), outcome_detail(outcome))
}

/// A finding's line in a report as a person reads it.
pub fn finding_line(finding: &Finding) -> String {
    format!("  note: {}: {}\n", finding.resource, finding.message)
}

/// The word for a machine state.
pub fn machine_word(state: MachineState) -> &'static str {
    match state {
        MachineState::Converged => "converged",
        MachineState::MidChange => "mid-change",
        MachineState::Partial => "partial",
    }
}

/// A digest shortened for people (`sha256:` and 12 hex digits).
pub fn short(digest: &str) -> &str {
    &digest[..digest.len().min(19)]
}

/// The detail printed after an outcome word.
pub fn outcome_detail(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Applied { changed } if !changed.is_empty() => format!(" ({})", changed.join(", ")),
        Outcome::Applied { .. } | Outcome::Unchanged => String::new(),
        Outcome::Failed {
            reason, attempts, ..
        } => format!(": {reason} (attempt {attempts})"),
        Outcome::Stuck {
            attempts,
            since,
            last_reason,
        } => format!(
            ": stuck: {attempts} attempts since {}: {last_reason}",
            rfc3339(*since)
        ),
        Outcome::HeldStill { step } => format!(": held still by step `{step}`"),
        Outcome::Skipped { gated_by } => format!(": waits for {gated_by}"),
        Outcome::Waiting {
            last_reason,
            retry_at,
            ..
        } => {
            format!(": tried again at {}: {last_reason}", rfc3339(*retry_at))
        }
        Outcome::Removed { detail } => format!(": {detail}"),
    }
}
