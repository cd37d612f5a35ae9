//! The host as a daemon on a fleet: `mesh-host --node NODE --bus URL --password-file FILE
//! --root DIR --state-dir DIR serve`.
//!
//! [`run`] is the daemon as `mesh-host serve` runs it, taking a [`ServeOptions`]: the node's
//! credential read from its file, the state directory made, a runtime of its own, and a stop
//! bounded in time ([`shutdown_signal_within`]); it calls [`serve`].
//!
//! Start at [`serve`]. It connects to the bus as the node's own user, hears the node's
//! declarations on its subject (`mesh.declaration.<node>`) and asks the declarations stream
//! for the last one whenever it may have missed one (see below), applies each (on a blocking
//! thread unless it is small, see [`applies_in_place`]), and publishes a report on every apply
//! and on a heartbeat. It re-applies the last declaration when a failed resource's backoff
//! elapses, answers discovery with its node and modules, and keeps going across a bus restart.
//! A maintenance window opening is reported at once, and one closing applies again
//! (`windows`).
//! The daemon's state between declarations is `agent`'s; the declarations are read by `reader`.
//!
//! # The truth while an apply runs (the rule “Mid-change is said before anything changes”)
//! Before an apply changes anything it publishes a `mid-change` report naming the declaration
//! being applied ([`mesh_apply::ApplyProgress`]); the heartbeat runs on its own task and repeats
//! the latest report — that `mid-change` one until the apply's own report replaces it — so an
//! observer never reads the last converged report while the machine changes, and a host in a
//! long apply is never taken for a silent one.
//!
//! # A subscription, and the stream's last declaration asked for
//! A host started after its declaration was published must still get it. It subscribes to its
//! subject, then asks the declarations stream for the last declaration stored there (a direct
//! get naming its own subject, the one its grants allow), and asks again each time its
//! connection comes back: whether the host was down, not yet started, or the server restarted
//! in between, the newest declaration sent is read (the stream is on disk). Only the newest is
//! ever applied: each declaration is the whole machine, so the newest says all. The same send
//! heard twice (live and as the last) is applied once: each send's message id is kept beside
//! the declaration (`serve/declaration.send`). The host once read a durable consumer of its
//! own instead, which cost the server a consumer's state a node (the `mesh_bus::jetstream`
//! declarations module says how much).
//!
//! # Guarantees
//! - A declaration is written to the state directory (`serve/declaration.json`) **before** it
//!   is applied: a host killed at any point either reads it again from the stream when it
//!   starts or finds it on disk. On start, a stored declaration is applied again; if the host was
//!   killed mid-apply, it first reports the machine **mid-change**, then applies (the rule
//!   “Resources declared together apply all-or-nothing”).
//! - A panic in an apply is a report whose every resource failed naming the panic
//!   ([`crate::apply_guarded`]); the daemon goes on serving.
//! - A stop (SIGTERM, SIGINT) lets the apply under way finish and its report go out, then
//!   stops; nothing is left half-written by the stop itself. Stopping always stops: a bus that
//!   is gone is not waited for (the last flush is bounded), a second signal ends the process at
//!   once, and so does the stop's bound ([`shutdown_signal_within`]).
//! - Every failure — a report that cannot be published, a stream that does not answer — is
//!   logged and retried; the daemon never exits because the bus went away.
//! - A state directory that cannot be written (full, read-only, an I/O error) is a failure of
//!   the node: a declaration that cannot be stored is not applied, and an apply that cannot
//!   write its state changes nothing more; either is reported with the system's reason
//!   ([`mesh_model::report::Report::host_failure`]), logged, and tried again with the backoff
//!   (the last declaration heard, not the one before it). The daemon never exits on it, and a
//!   drift it could not put back is reported left as found, never put back.
//! - After every apply the archive cache is pruned ([`crate::archives::prune_after_apply`],
//!   through [`crate::apply_received`]); a prune that could not be done is a note in the report,
//!   never a failed apply.
//!
//! What it must never do: apply a declaration for another node (refused by
//! [`crate::parse`]), or apply outside its root.

mod agent;
mod daemon;
mod reader;
mod windows;

pub use daemon::{run, RunError, ServeOptions};

use agent::Agent;
use mesh_apply::HostConfig;
use mesh_bus::{subjects, Bus, NatsBus, NatsOptions};
use mesh_model::declaration::Declaration;
use mesh_model::report::{Outcome, Report};
use mesh_store::clock::now;
use reader::DeclarationReader;
use std::collections::BTreeSet;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The default time between two heartbeat reports.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(30);

/// How long the daemon waits before trying again what failed on the bus (connect, subscribe, asking
/// the stream).
pub const RETRY_DELAY: Duration = Duration::from_secs(1);

/// The file, under the state directory, holding the last declaration received.
pub const STORED_DECLARATION: &str = "serve/declaration.json";

/// The file, under the state directory, holding the send (its message id) the last declaration
/// came in.
pub const STORED_SEND: &str = "serve/declaration.send";

/// What `serve` needs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The node this host is.
    pub node: String,
    /// The bus, e.g. `nats://bus.example:4222`.
    pub bus_url: String,
    /// What the node proves itself with: its NKey seed (`mesh-host keygen`), or until it is
    /// enrolled its bus password (the controller keeps it under `<home>/bus/passwords/<node>`).
    pub secret: mesh_bus::NodeSecret,
    /// How the bus server is checked (its CA) and this host's certificate for mTLS.
    pub bus_tls: mesh_bus::BusTls,
    /// Root prefix, state directory, retry policy.
    pub host: HostConfig,
    /// Where archived files are read from: the cache under the state directory, then the store.
    pub archives: crate::ArchiveSource,
    /// Time between heartbeat reports.
    pub heartbeat: Duration,
    /// Time between two examinations for drift when nothing watched changed (the backstop,
    /// [`DEFAULT_RECONCILE`]).
    pub reconcile: Duration,
    /// Time between two examinations that hash every managed file whatever its stamp
    /// ([`DEFAULT_FULL_CHECK`]).
    pub full_check: Duration,
}

/// The default [`ServeConfig::reconcile`]: 5 minutes.
pub const DEFAULT_RECONCILE: Duration = Duration::from_secs(300);

/// The default [`ServeConfig::full_check`]: a day.
pub const DEFAULT_FULL_CHECK: Duration = Duration::from_secs(86_400);

/// Why `serve` stopped other than by being asked to.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The stored declaration could not be read (at start) or written (never the daemon's end:
    /// a declaration that cannot be stored is a report of the node's failure).
    #[error("{path}: {source}")]
    State {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The bus cannot be reached as configured, which trying again does not change: its
    /// certificate is not signed by the CA given, it offers no TLS to a client that requires
    /// it, or a secret file of the connection cannot be used. (A bus that is down or refuses
    /// for a moment is tried again.)
    #[error("{0}; not trying again: fix the configuration and start it again")]
    Bus(#[source] mesh_bus::NatsError),
}

/// How long a daemon takes at most to stop once it heard SIGTERM or SIGINT, by default
/// ([`shutdown_signal`]).
pub const STOP_BOUND: Duration = Duration::from_secs(30);

/// How long publishing a report waits for the bus to take it (`publish_report`).
pub const PUBLISH_BOUND: Duration = Duration::from_secs(5);

/// How long the last flush of what is queued for the bus may take when a daemon stops: a bus
/// that is gone never completes it.
pub const FLUSH_BOUND: Duration = Duration::from_secs(2);

/// [`shutdown_signal_within`] [`STOP_BOUND`].
pub fn shutdown_signal() -> impl Future<Output = ()> {
    shutdown_signal_within(STOP_BOUND)
}

/// A future that completes at SIGTERM or SIGINT; the handlers are installed when this is
/// called (inside a tokio runtime), so a signal arriving before the future is first polled is
/// not lost.
///
/// Stopping always stops: once a signal is heard, a second one ends the process at once (exit
/// 1), and so does `bound` elapsing before the daemon is done (exit 1, saying so) — whatever the
/// bus, the store or an apply is doing. Both are as safe as a kill, which every write survives
/// (temp file, fsync, rename; a declaration is on disk before it is acknowledged).
///
/// A handler that cannot be installed is logged: that signal then keeps its default action
/// (it ends the process without waiting for the apply under way), and the other still stops
/// the daemon gracefully.
pub fn shutdown_signal_within(bound: Duration) -> impl Future<Output = ()> {
    use tokio::signal::unix::{signal, Signal, SignalKind};
    let install = |kind: SignalKind, name: &'static str| match signal(kind) {
        Ok(signal) => Some(signal),
        Err(error) => {
            tracing::error!(%error, "cannot install a {name} handler: a {name} ends the process at once");
            None
        }
    };
    async fn heard(signal: &mut Option<Signal>) {
        match signal {
            Some(signal) => {
                signal.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    let mut term = install(SignalKind::terminate(), "SIGTERM");
    let mut int = install(SignalKind::interrupt(), "SIGINT");
    // Heard on a task of its own, so the bound holds even while the daemon's loop is busy.
    let (heard_first, stop) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        tokio::select! {
            () = heard(&mut term) => tracing::info!(bound_secs = bound.as_secs(), "SIGTERM: stopping"),
            () = heard(&mut int) => tracing::info!(bound_secs = bound.as_secs(), "SIGINT: stopping"),
        }
        let _ = heard_first.send(());
        // A thread, not a task: it ends the process even when every runtime worker is stuck.
        std::thread::spawn(move || {
            std::thread::sleep(bound);
            tracing::error!(
                bound_secs = bound.as_secs(),
                "not stopped within the bound: stopping at once"
            );
            std::process::exit(1);
        });
        tokio::select! {
            () = heard(&mut term) => {}
            () = heard(&mut int) => {}
        }
        tracing::warn!("a second signal: stopping at once");
        std::process::exit(1);
    });
    async move {
        // A sender dropped without a signal (the runtime shutting down) stops too.
        let _ = stop.await;
    }
}

/// Connects to the bus as `config.node`, trying again every [`RETRY_DELAY`] until it works or
/// `shutdown` completes (`None`).
///
/// # Errors
/// [`ServeError::Bus`] at once for what trying again does not change: a certificate the CA
/// did not sign, a server offering no TLS to a client requiring it, an unusable secret file,
/// an address that is not one.
async fn connect(
    config: &ServeConfig,
    shutdown: &mut (impl Future<Output = ()> + Unpin),
) -> Result<Option<NatsBus>, ServeError> {
    let options = NatsOptions::for_node_with(&config.bus_url, &config.node, &config.secret)
        .with_tls(config.bus_tls.clone());
    loop {
        match NatsBus::connect(&options).await {
            Ok(bus) => return Ok(Some(bus)),
            Err(
                error @ (mesh_bus::NatsError::Untrusted { .. }
                | mesh_bus::NatsError::TlsNotOffered { .. }
                | mesh_bus::NatsError::Secret { .. }
                | mesh_bus::NatsError::Url { .. }),
            ) => return Err(ServeError::Bus(error)),
            Err(error) => {
                tracing::warn!(node = %config.node, %error, "cannot connect to the bus; trying again");
            }
        }
        tokio::select! {
            _ = &mut *shutdown => return Ok(None),
            _ = tokio::time::sleep(RETRY_DELAY) => {}
        }
    }
}

/// Serves the node until `shutdown` completes (see the module's documentation).
///
/// A declaration that cannot be stored (the state directory full, read-only, an I/O error) is
/// a failure of the node, reported with the system's reason and tried again with the backoff;
/// the daemon serves on.
///
/// # Errors
/// [`ServeError::State`] when the declaration stored before cannot be read at start;
/// [`ServeError::Bus`] when the bus cannot be reached as configured (see `connect`).
pub async fn serve(
    config: ServeConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let mut shutdown = Box::pin(shutdown);
    let Some(bus) = connect(&config, &mut shutdown).await? else {
        return Ok(());
    };
    tracing::info!(node = %config.node, url = %config.bus_url, "connected to the bus");
    let live = Arc::new(Mutex::new(None));
    let beating = tokio::spawn(heartbeats(
        bus.clone(),
        config.node.clone(),
        Arc::clone(&live),
        config.heartbeat,
    ));
    let state_dir = config.host.state_dir.clone();
    let (change_sender, mut changes) = tokio::sync::mpsc::unbounded_channel();
    let mut reconcile = tokio::time::interval(config.reconcile);
    reconcile.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    reconcile.tick().await; // the first tick is now
    let mut agent = Agent {
        bus: bus.clone(),
        config: Arc::new(config),
        payload: None,
        send: None,
        sealed: None,
        live,
        modules: None,
        discovery: None,
        retry_at: None,
        examiner: Some(mesh_apply::drift::Examiner::open(&state_dir)),
        known_drift: BTreeSet::new(),
        left: Arc::new(Mutex::new(BTreeSet::new())),
        watch: None,
        watched_for: None,
        changes: change_sender,
        last_full: tokio::time::Instant::now(),
        pending_drift: Vec::new(),
        windows: Vec::new(),
        unstored: None,
        host_attempts: 0,
    };
    let (window_sender, mut window_changes) = tokio::sync::mpsc::unbounded_channel();
    let _windows_watch = windows::watch(&state_dir, window_sender);
    agent.announce(BTreeSet::new()).await;
    if let Some(payload) = agent.stored()? {
        agent.send = agent.stored_send()?;
        agent.resume(payload).await;
    }
    agent.check_windows().await;
    let mut declarations = DeclarationReader::new(bus.clone(), agent.config.node.clone());
    let outcome = loop {
        let at = |at: u64| {
            let wait = at.saturating_sub(now());
            tokio::time::Instant::now() + Duration::from_secs(wait)
        };
        let retry = agent.retry_at.map(at);
        let lapse = windows::next_lapse(&agent.windows).map(at);
        tokio::select! {
            _ = &mut shutdown => break Ok(()),
            message = declarations.next() => agent.receive(message).await,
            _ = sleep_until(retry), if retry.is_some() => {
                tracing::info!(node = %agent.config.node, "a failed resource's backoff elapsed: applying again");
                match (agent.payload.clone(), agent.unstored.take()) {
                    (_, Some(heard)) => agent.receive(heard).await,
                    (Some(payload), None) => agent.apply(payload).await,
                    (None, None) => {}
                }
            }
            Some(()) = changes.recv() => {
                while changes.try_recv().is_ok() {}
                agent.check_drift(false).await;
            }
            Some(()) = window_changes.recv() => {
                while window_changes.try_recv().is_ok() {}
                agent.check_windows().await;
            }
            _ = sleep_until(lapse), if lapse.is_some() => {
                agent.check_windows().await;
            }
            _ = reconcile.tick() => {
                let full = agent.last_full.elapsed() >= agent.config.full_check;
                agent.check_drift(full).await;
                // A window whose process was killed leaves its record: judged closed here
                // (the drift it left, a container stopped, was reported just above).
                agent.check_windows().await;
                agent.announce_again_if_needed().await;
            }
        }
    };
    beating.abort();
    if let Some(discovery) = agent.discovery.take() {
        discovery.stop();
    }
    #[cfg(feature = "fail-points")]
    fail::fail_point!(crate::SERVE_STOPPING);
    // What is queued goes out if the bus is there; a bus that is gone never takes it.
    if tokio::time::timeout(FLUSH_BOUND, bus.flush())
        .await
        .is_err()
    {
        tracing::warn!(node = %agent.config.node, "the bus did not take what was queued: stopping without it");
    }
    tracing::info!(node = %agent.config.node, "stopped");
    outcome
}

/// Publishes the latest report (`live`) every `period`, whatever the daemon is doing.
async fn heartbeats(
    bus: NatsBus,
    node: String,
    live: Arc<Mutex<Option<Report>>>,
    period: Duration,
) {
    let mut heartbeat = tokio::time::interval(period);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    heartbeat.tick().await; // the first tick is now
    loop {
        heartbeat.tick().await;
        let latest = live.lock().expect("the live report lock").clone();
        if let Some(report) = latest {
            // A window past its lapse holds nothing: it is not repeated.
            let report = windows::without_lapsed(report, now());
            publish_report(&bus, &node, &report).await;
        }
    }
}

/// Publishes `report` on the node's report subject, stamped with this host's clock as it goes
/// out (a heartbeat anew: set against the time the bus stores it, it tells the controller how far
/// this clock is off); a failure is logged.
async fn publish_report(bus: &NatsBus, node: &str, report: &Report) {
    let mut stamped = report.clone();
    stamped.published_at = Some(now());
    let payload = serde_json::to_vec(&stamped).expect("a report always serializes");
    // Bounded: a bus that is gone never confirms the flush, and neither the loop, nor an apply
    // saying `mid-change`, nor a stop may wait on it. The report stays queued for the
    // connection, and the heartbeat repeats the latest.
    match tokio::time::timeout(PUBLISH_BOUND, bus.publish(&subjects::report(node), payload)).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::error!(%node, %error, "cannot publish the report"),
        Err(_) => tracing::warn!(
            %node,
            bound_secs = PUBLISH_BOUND.as_secs(),
            "the bus did not take the report; the heartbeat repeats it"
        ),
    }
}

/// Publishes an apply's `mid-change` report before it changes anything, from the thread the
/// apply runs on, and makes it the report the heartbeat repeats.
struct LiveProgress {
    bus: NatsBus,
    node: String,
    live: Arc<Mutex<Option<Report>>>,
    handle: tokio::runtime::Handle,
    /// The apply runs on a runtime worker (in place), not on a blocking thread.
    on_worker: bool,
    /// Resources to leave as found (drift their policy says to report).
    left: Arc<Mutex<BTreeSet<String>>>,
    /// The send the declaration applied came in: its reports name it.
    send: Option<String>,
    /// The apply answers a new send: what failed is tried now, not after its backoff.
    retry_now: bool,
}

impl mesh_apply::ApplyProgress for LiveProgress {
    fn leave(&self, resource: &str) -> bool {
        self.left.lock().expect("the left lock").contains(resource)
    }

    fn retry_now(&self) -> bool {
        self.retry_now
    }

    fn changing(&self, report: &Report) {
        tracing::info!(node = %self.node, declaration = %report.declaration, "mid-change");
        let mut report = report.clone();
        report.send.clone_from(&self.send);
        *self.live.lock().expect("the live report lock") = Some(report.clone());
        let publish = publish_report(&self.bus, &self.node, &report);
        if self.on_worker {
            tokio::task::block_in_place(|| self.handle.block_on(publish));
        } else {
            self.handle.block_on(publish);
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The most resources a declaration applied in place may have (see [`applies_in_place`]).
pub const IN_PLACE_RESOURCES: usize = 32;

/// Whether a declaration is applied on the daemon's own thread rather than handed to a
/// blocking thread: only a small one of files and directories, whose apply (a few file reads
/// when nothing changed) costs less than the hand-off. Memberships (shadow-utils) and
/// containers (podman) run processes, and a large declaration takes long: those go to a
/// blocking thread, so discovery and heartbeats are answered meanwhile.
pub fn applies_in_place(payload: &[u8]) -> bool {
    payload.len() <= 64 * 1024
        && Declaration::from_json(payload).is_ok_and(|declaration| {
            declaration.resources.len() <= IN_PLACE_RESOURCES
                && declaration.resources.iter().all(|resource| {
                    matches!(
                        resource.spec,
                        mesh_model::declaration::Spec::File(_)
                            | mesh_model::declaration::Spec::Directory(_)
                    )
                })
        })
}

/// When the first failed resource of `report` is due to be tried again: a waiting one at its
/// `retry_at`, a failed or stuck one when its backoff after this apply elapses — never sooner
/// than a second after the apply, so a resource due now is not tried in a loop.
pub fn next_retry(report: &Report, retry: &mesh_apply::RetryPolicy) -> Option<u64> {
    report
        .resources
        .values()
        .filter_map(|outcome| match outcome {
            Outcome::Waiting { retry_at, .. } => Some(*retry_at),
            Outcome::Failed { attempts, .. } | Outcome::Stuck { attempts, .. } => {
                Some(report.finished_at + retry.backoff_secs(*attempts))
            }
            Outcome::Applied { .. }
            | Outcome::Unchanged
            | Outcome::HeldStill { .. }
            | Outcome::Skipped { .. }
            | Outcome::Removed { .. } => None,
        })
        .min()
        .map(|at| at.max(report.finished_at + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_model::report::{MachineState, REPORT_FORMAT};
    use std::collections::BTreeMap;

    fn report(resources: Vec<(&str, Outcome)>) -> Report {
        Report {
            format: REPORT_FORMAT,
            node: "a".into(),
            declaration: "sha256:x".into(),
            machine: MachineState::Partial,
            resources: resources
                .into_iter()
                .map(|(id, o)| (id.to_owned(), o))
                .collect(),
            undeclared: BTreeMap::new(),
            findings: Vec::new(),
            windows: Vec::new(),
            resumed_from_mid_change: false,
            host_failure: None,
            drift: Vec::new(),
            started_at: 1000,
            finished_at: 1000,
            send: None,
            published_at: None,
        }
    }

    #[test]
    fn only_a_small_declaration_of_files_and_directories_is_applied_in_place() {
        use mesh_model::declaration::{MembershipSpec, Resource, Spec};
        let file = |i: usize| Resource {
            id: format!("m/file/f{i:03}"),
            module: "m".into(),
            together: None,
            after: Vec::new(),
            spec: Spec::File(mesh_model::declaration::FileSpec {
                path: format!("/etc/f{i:03}"),
                content: Some("x\n".into()),
                source: None,
                sealed: None,
                mode: 0o644,
                owner: "root".into(),
                group: "root".into(),
            }),
        };
        let small: Vec<Resource> = (0..IN_PLACE_RESOURCES).map(file).collect();
        assert!(applies_in_place(
            &Declaration::new("a", small.clone()).canonical_json()
        ));
        let large: Vec<Resource> = (0..=IN_PLACE_RESOURCES).map(file).collect();
        assert!(!applies_in_place(
            &Declaration::new("a", large).canonical_json()
        ));
        let mut with_membership = small;
        with_membership.truncate(1);
        with_membership.push(Resource {
            id: "m/membership/video".into(),
            module: "m".into(),
            together: None,
            after: Vec::new(),
            spec: Spec::Membership(MembershipSpec {
                account: "alice".into(),
                group: "video".into(),
            }),
        });
        assert!(!applies_in_place(
            &Declaration::new("a", with_membership).canonical_json()
        ));
        assert!(!applies_in_place(b"not a declaration"));
    }

    #[test]
    fn a_first_failure_is_tried_again_after_its_backoff_not_only_a_waiting_one() {
        let retry = mesh_apply::RetryPolicy::default(); // 30 s, doubling
        let failed = |attempts| Outcome::Failed {
            reason: "no".into(),
            attempts,
            since: 900,
        };
        assert_eq!(
            next_retry(&report(vec![("x", failed(1))]), &retry),
            Some(1030)
        );
        assert_eq!(
            next_retry(&report(vec![("x", failed(2))]), &retry),
            Some(1060)
        );
        let waiting = Outcome::Waiting {
            last_reason: "no".into(),
            attempts: 3,
            retry_at: 1010,
        };
        assert_eq!(
            next_retry(&report(vec![("x", failed(1)), ("y", waiting)]), &retry),
            Some(1010)
        );
        assert_eq!(
            next_retry(&report(vec![("x", Outcome::Unchanged)]), &retry),
            None
        );
        // Due already: not sooner than a second after the apply.
        let due = Outcome::Waiting {
            last_reason: "no".into(),
            attempts: 3,
            retry_at: 990,
        };
        assert_eq!(next_retry(&report(vec![("x", due)]), &retry), Some(1001));
    }
}
