//! The daemon's state between declarations: the declaration served, the latest report, discovery,
//! retries, and drift watched and examined.

use super::reader::Heard;
use super::{
    applies_in_place, next_retry, publish_report, LiveProgress, ServeConfig, ServeError,
    STORED_DECLARATION, STORED_SEND,
};
use crate::{apply_guarded_live, apply_on_blocking_thread_live, receive, receive_sealed};
use mesh_bus::discovery::{serve_discovery, DiscoveryService, RuntimeAnnouncement, HOST_SERVICE};
use mesh_bus::NatsBus;
use mesh_model::declaration::Declaration;
use mesh_model::report::{
    Drift, DriftAction, Finding, MachineState, Outcome, Report, REPORT_FORMAT,
};
use mesh_store::clock::now;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long answering discovery waits for the bus to confirm its subscriptions.
const DISCOVERY_BOUND: Duration = Duration::from_secs(5);

pub(super) struct Agent {
    pub(super) bus: NatsBus,
    pub(super) config: Arc<ServeConfig>,
    /// The declaration being served (its bytes as received).
    pub(super) payload: Option<Vec<u8>>,
    /// The send it came in (its message id), kept beside it: the same send heard again — live
    /// and as the stream's last, or after a restart — is not applied again.
    pub(super) send: Option<String>,
    /// It, parsed and sealed once when received: every look for drift uses it, neither parsing
    /// nor hashing it again.
    pub(super) sealed: Option<Arc<mesh_model::declaration::Sealed>>,
    /// The latest report published (an apply's, or the `mid-change` one of an apply under
    /// way): what the heartbeat repeats.
    pub(super) live: Arc<Mutex<Option<Report>>>,
    /// The modules announced on discovery.
    pub(super) modules: Option<BTreeSet<String>>,
    pub(super) discovery: Option<DiscoveryService>,
    /// When a failed resource's backoff elapses (seconds since the epoch).
    pub(super) retry_at: Option<u64>,
    /// Examines for drift (taken while it runs on a blocking thread).
    pub(super) examiner: Option<mesh_apply::drift::Examiner>,
    /// The drift already reported: `(resource, field, found)`.
    pub(super) known_drift: BTreeSet<(String, String, String)>,
    /// Resources whose drift their policy says to leave as found, until the next declaration.
    pub(super) left: Arc<Mutex<BTreeSet<String>>>,
    /// The watch on the declared paths' directories, and the declaration it is for.
    pub(super) watch: Option<crate::watch::Watch>,
    pub(super) watched_for: Option<String>,
    /// Where the watch says something changed.
    pub(super) changes: tokio::sync::mpsc::UnboundedSender<()>,
    /// When every managed file was last hashed.
    pub(super) last_full: tokio::time::Instant,
    /// The drift the apply under way corrects: its report lists it.
    pub(super) pending_drift: Vec<Drift>,
    /// The maintenance windows open as last reported (`windows`).
    pub(super) windows: Vec<mesh_model::report::WindowSummary>,
    /// A declaration heard that could not be stored (the state directory full, read-only, an
    /// I/O error): never applied before it is stored; tried again with the backoff, and by
    /// anything that would apply ([`Agent::apply`]).
    pub(super) unstored: Option<Heard>,
    /// How many applies in a row the host could not make at all (its state could not be
    /// written): the backoff before the next try grows with it.
    pub(super) host_attempts: u32,
}

impl Agent {
    pub(super) fn stored_path(&self) -> PathBuf {
        self.config.host.state_dir.join(STORED_DECLARATION)
    }

    pub(super) fn stored(&self) -> Result<Option<Vec<u8>>, ServeError> {
        let path = self.stored_path();
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(ServeError::State { path, source }),
        }
    }

    /// The send the stored declaration came in (`None`: not known, or none stored).
    pub(super) fn stored_send(&self) -> Result<Option<String>, ServeError> {
        let path = self.config.host.state_dir.join(STORED_SEND);
        match std::fs::read_to_string(&path) {
            Ok(send) => Ok(Some(send.trim().to_owned())),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(ServeError::State { path, source }),
        }
    }

    pub(super) fn store(&self, payload: &[u8]) -> Result<(), ServeError> {
        write_durably(&self.stored_path(), payload)
    }

    /// Keeps the send the stored declaration came in (after the declaration itself: a host
    /// killed between the two applies it again when it hears it again, which changes nothing).
    fn store_send(&self, send: Option<&str>) -> Result<(), ServeError> {
        let path = self.config.host.state_dir.join(STORED_SEND);
        match send {
            Some(send) => write_durably(&path, send.as_bytes()),
            None => match std::fs::remove_file(&path) {
                Ok(()) => Ok(()),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(source) => Err(ServeError::State { path, source }),
            },
        }
    }

    /// On start: the stored declaration is served again; a machine left mid-change is said
    /// first.
    pub(super) async fn resume(&mut self, payload: Vec<u8>) {
        let node = self.config.node.clone();
        match mesh_apply::is_mid_change(&self.config.host.state_dir) {
            Ok(true) => {
                let digest = Declaration::from_json(&payload)
                    .map(|d| d.digest())
                    .unwrap_or_else(|_| mesh_model::sha256_digest(&payload));
                let at = now();
                let report = Report {
                    format: REPORT_FORMAT,
                    node: node.clone(),
                    declaration: digest,
                    machine: MachineState::MidChange,
                    resources: BTreeMap::new(),
                    undeclared: BTreeMap::new(),
                    findings: vec![Finding {
                        resource: String::new(),
                        message: "the host stopped during an apply; applying the declaration again"
                            .to_owned(),
                    }],
                    windows: Vec::new(),
                    resumed_from_mid_change: false,
                    host_failure: None,
                    drift: Vec::new(),
                    started_at: at,
                    finished_at: at,
                    send: None,
                    published_at: None,
                };
                tracing::warn!(%node, "found the machine mid-change: applying again");
                self.publish(&report).await;
            }
            Ok(false) => {}
            Err(error) => tracing::error!(%node, %error, "cannot read the mid-change marker"),
        }
        self.apply(payload).await;
    }

    /// A declaration heard: kept on disk, then applied — unless it is the send already served
    /// (heard live and again as the stream's last, or again after a restart).
    ///
    /// A declaration that cannot be stored (the state directory full, read-only, an I/O error)
    /// is not applied: the report says the host failed, with the system's reason
    /// ([`crate::host_failed`]), the error is logged, and storing it is tried again after the
    /// backoff — the daemon goes on serving, and never exits over it.
    pub(super) async fn receive(&mut self, heard: Heard) {
        if heard.send.is_some() && heard.send == self.send {
            tracing::debug!(node = %self.config.node, send = ?heard.send,
                "the send served already, heard again: not applied again");
            return;
        }
        let stored = if self.payload.as_deref() != Some(&heard.payload[..]) {
            self.store(&heard.payload)
        } else {
            Ok(())
        }
        .and_then(|()| self.store_send(heard.send.as_deref()));
        if let Err(error) = stored {
            self.cannot_store(heard, error).await;
            return;
        }
        self.unstored = None;
        self.send = heard.send;
        // A new send: the controller asked again, so what failed is tried now, not after its
        // backoff (a push, or `plans retry`, once the cause was fixed).
        self.apply_stored(heard.payload, true).await;
    }

    /// Says that the declaration `heard` could not be stored, and keeps it to store and apply
    /// when the backoff elapses.
    async fn cannot_store(&mut self, heard: Heard, error: ServeError) {
        let reason = match &error {
            ServeError::State { path, source } => format!(
                "cannot store the declaration received at {}: {}",
                path.display(),
                crate::lower_first(&source.to_string())
            ),
            ServeError::Bus(_) => crate::with_causes(&error),
        };
        let digest = Declaration::from_json(&heard.payload)
            .map(|d| d.digest())
            .unwrap_or_else(|_| mesh_model::sha256_digest(&heard.payload));
        let mut report =
            crate::host_failed(&self.config.host, &self.config.node, digest, reason, now());
        report.windows = self.windows.clone();
        report.drift = not_put_back(&report, &self.pending_drift);
        self.unstored = Some(heard);
        self.failed_to_apply(&report);
        self.publish(&report).await;
    }

    /// Keeps the count of applies in a row the host could not make, and when to try again.
    fn failed_to_apply(&mut self, report: &Report) {
        if report.host_failure.is_some() {
            self.host_attempts = self.host_attempts.saturating_add(1);
            let again =
                report.finished_at + self.config.host.retry.backoff_secs(self.host_attempts);
            self.retry_at = Some(self.retry_at.map_or(again, |at| at.min(again)));
        } else {
            self.host_attempts = 0;
        }
    }

    /// Applies `payload` — or, when the declaration heard last could not be stored, stores and
    /// applies that one instead (it, not the one before, is what the node was sent).
    pub(super) async fn apply(&mut self, payload: Vec<u8>) {
        if let Some(heard) = self.unstored.take() {
            tracing::info!(node = %self.config.node, "storing the declaration received again");
            self.receive(heard).await;
            return;
        }
        self.apply_stored(payload, false).await;
    }

    /// Applies `payload` (stored) on a blocking thread, publishes the report, and updates
    /// discovery and the next retry; with `retry_now` (a new send), a resource that failed as
    /// declared is tried now rather than after its backoff.
    async fn apply_stored(&mut self, payload: Vec<u8>, retry_now: bool) {
        let config = Arc::clone(&self.config);
        let handle = tokio::runtime::Handle::current();
        // In place only where a worker can hand its other tasks off while the mid-change
        // report is published (block_in_place needs the multi-thread runtime).
        let in_place = applies_in_place(&payload)
            && handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread;
        let sealed = Declaration::from_json(&payload)
            .ok()
            .map(|d| Arc::new(mesh_model::declaration::Sealed::new(d)));
        let digest = sealed
            .as_deref()
            .map(|s| mesh_model::declaration::Declared::digest(s).into_owned());
        if digest != self.watched_for {
            // A new declaration is the operator's say: what was left as found is applied.
            self.left.lock().expect("the left lock").clear();
            self.known_drift.clear();
        }
        let progress = LiveProgress {
            bus: self.bus.clone(),
            node: config.node.clone(),
            live: Arc::clone(&self.live),
            handle,
            on_worker: in_place,
            left: Arc::clone(&self.left),
            send: self.send.clone(),
            retry_now,
        };
        let received = match &sealed {
            Some(sealed) => {
                receive_sealed(&config.archives, &config.node, Arc::clone(sealed), now()).await
            }
            None => receive(&config.archives, &config.node, &payload, now()).await,
        };
        let report = match received {
            Err(report) => *report,
            Ok(received) if in_place => {
                apply_guarded_live(&config.host, &received, now(), &progress)
            }
            Ok(received) => {
                apply_on_blocking_thread_live(
                    Arc::new(config.host.clone()),
                    received,
                    Box::new(progress),
                )
                .await
            }
        };
        self.retry_at = next_retry(&report, &self.config.host.retry);
        self.failed_to_apply(&report);
        let modules: BTreeSet<String> = sealed
            .as_deref()
            .map(|d| d.resources.iter().map(|r| r.module.clone()).collect())
            .unwrap_or_default();
        let mut report = report;
        // Drift the apply could not put back is said left as found, never put back, and is
        // reported again by the next apply (the rule “Drift is seen, and reported even when
        // corrected”).
        let drift = std::mem::take(&mut self.pending_drift);
        report.drift = not_put_back(&report, &drift);
        self.pending_drift = drift
            .into_iter()
            .zip(&report.drift)
            .filter(|(_, said)| said.action == DriftAction::Left)
            .map(|(drift, _)| drift)
            .filter(|drift| drift.action == DriftAction::Corrected)
            .collect();
        if digest != self.watched_for {
            self.rewatch(&payload, digest);
        }
        self.payload = Some(payload);
        self.sealed = sealed;
        self.windows = report.windows.clone();
        self.publish(&report).await;
        self.announce(modules).await;
    }

    /// Watches the directories of the declaration in `payload` (the rule “Drift is seen, and
    /// reported even when corrected”).
    pub(super) fn rewatch(&mut self, payload: &[u8], digest: Option<String>) {
        self.watch = None;
        self.watched_for = digest;
        let Ok(declaration) = Declaration::from_json(payload) else {
            return;
        };
        let directories = crate::watch::watched_directories(&self.config.host.root, &declaration);
        match crate::watch::start(&directories, self.changes.clone()) {
            Ok(watch) => {
                tracing::info!(node = %self.config.node, directories = watch.watched, "watching for drift");
                self.watch = Some(watch);
            }
            Err(error) => tracing::warn!(
                node = %self.config.node,
                %error,
                "cannot watch for drift; the reconcile interval alone finds it"
            ),
        }
    }

    /// Examines the machine for drift (the rule “Drift is seen, and reported even when corrected”);
    /// new drift is reported at once, and corrected by an apply unless its module's policy says to
    /// leave it (then the report says so and the resource is `held-still` until the next
    /// declaration).
    pub(super) async fn check_drift(&mut self, full: bool) {
        // Nothing is taken unless all three are there.
        let (Some(payload), Some(sealed), Some(_)) = (&self.payload, &self.sealed, &self.examiner)
        else {
            return;
        };
        let (payload, sealed) = (payload.clone(), Arc::clone(sealed));
        let Some(mut examiner) = self.examiner.take() else {
            return;
        };
        let Some(report) = self.live.lock().expect("the live report lock").clone() else {
            self.examiner = Some(examiner);
            return;
        };
        if full {
            self.last_full = tokio::time::Instant::now();
        }
        let host = self.config.host.clone();
        let (examiner, drift) = tokio::task::spawn_blocking(move || {
            let podman;
            let containers: &dyn mesh_apply::ContainerRuntime = match &host.containers {
                mesh_apply::ContainerRuntimeChoice::Podman(config) => {
                    podman = mesh_apply::Podman::new(config.clone(), &host.root);
                    &podman
                }
                mesh_apply::ContainerRuntimeChoice::Unsupported => &mesh_apply::NoContainerRuntime,
            };
            let drift = examiner.examine(&host, &*sealed, &report, containers, now(), full);
            (examiner, drift)
        })
        .await
        .expect("examining for drift does not panic");
        self.examiner = Some(examiner);
        let seen: BTreeSet<(String, String, String)> = drift
            .iter()
            .map(|d| (d.resource.clone(), d.field.clone(), d.found.clone()))
            .collect();
        let new: Vec<Drift> = drift
            .iter()
            .filter(|d| {
                !self
                    .known_drift
                    .contains(&(d.resource.clone(), d.field.clone(), d.found.clone()))
            })
            .cloned()
            .collect();
        self.known_drift = seen;
        if new.is_empty() {
            return;
        }
        for d in &new {
            tracing::warn!(
                node = %self.config.node,
                resource = %d.resource,
                field = %d.field,
                was = %d.was,
                found = %d.found,
                action = ?d.action,
                "drift"
            );
        }
        {
            let mut left = self.left.lock().expect("the left lock");
            for d in drift.iter().filter(|d| d.action == DriftAction::Left) {
                left.insert(d.resource.clone());
            }
        }
        if new.iter().any(|d| d.action == DriftAction::Corrected) {
            self.apply_with_drift(payload, drift).await;
        } else {
            let mut report = self
                .live
                .lock()
                .expect("the live report lock")
                .clone()
                .expect("a report was examined");
            for d in &drift {
                report.resources.insert(
                    d.resource.clone(),
                    Outcome::HeldStill {
                        step: mesh_apply::progress::LEFT_AS_FOUND.to_owned(),
                    },
                );
            }
            report.machine = MachineState::Partial;
            report.format = REPORT_FORMAT;
            report.drift = drift;
            report.finished_at = now();
            self.publish(&report).await;
        }
    }

    /// Applies the declaration again to correct drift; its report lists the drift.
    pub(super) async fn apply_with_drift(&mut self, payload: Vec<u8>, drift: Vec<Drift>) {
        self.pending_drift = drift;
        self.apply(payload).await;
    }

    /// Publishes `report`, naming the send it answers, and makes it the one the heartbeat
    /// repeats.
    pub(super) async fn publish(&self, report: &Report) {
        let mut report = report.clone();
        report.send.clone_from(&self.send);
        *self.live.lock().expect("the live report lock") = Some(report.clone());
        publish_report(&self.bus, &self.config.node, &report).await;
    }

    /// Answers discovery with the node and `modules` (started again when they changed, or
    /// when the last try did not take).
    pub(super) async fn announce(&mut self, modules: BTreeSet<String>) {
        if self.modules.as_ref() == Some(&modules) && self.discovery.is_some() {
            return;
        }
        if let Some(old) = self.discovery.take() {
            old.stop();
        }
        let runtime = RuntimeAnnouncement {
            service: HOST_SERVICE.to_owned(),
            node: self.config.node.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            modules: modules.iter().cloned().collect(),
        };
        // Bounded: a bus that is gone never confirms the subscriptions, and the daemon's loop
        // (and its stop) must not wait on it. Tried again at the next reconcile.
        match tokio::time::timeout(
            DISCOVERY_BOUND,
            serve_discovery(self.bus.client(), &runtime),
        )
        .await
        {
            Ok(Ok(service)) => self.discovery = Some(service),
            Ok(Err(error)) => {
                tracing::error!(node = %self.config.node, %error, "cannot answer discovery; trying again at the next reconcile")
            }
            Err(_) => tracing::warn!(
                node = %self.config.node,
                bound_secs = DISCOVERY_BOUND.as_secs(),
                "the bus did not confirm the discovery answer; trying again at the next reconcile"
            ),
        }
        self.modules = Some(modules);
    }

    /// Answers discovery again when the last try did not take ([`Agent::announce`]).
    pub(super) async fn announce_again_if_needed(&mut self) {
        if self.discovery.is_some() {
            return;
        }
        let modules = self.modules.clone().unwrap_or_default();
        self.announce(modules).await;
    }
}

/// `drift` as `report` tells it: a drift to be put back whose resource did not take in the apply
/// — or the host could not apply at all — is said left as found, never put back.
fn not_put_back(report: &Report, drift: &[Drift]) -> Vec<Drift> {
    drift
        .iter()
        .map(|d| {
            let took = report.host_failure.is_none()
                && report.resources.get(&d.resource).is_some_and(Outcome::took);
            let mut said = d.clone();
            if d.action == DriftAction::Corrected && !took {
                said.action = DriftAction::Left;
            }
            said
        })
        .collect()
}

/// Writes `bytes` to `path` so that a kill at any point leaves the old file or the new one:
/// a temporary file beside it, synced, renamed over it.
fn write_durably(path: &std::path::Path, bytes: &[u8]) -> Result<(), ServeError> {
    let state = |source| ServeError::State {
        path: path.to_owned(),
        source,
    };
    let dir = path.parent().expect("a state file has a directory");
    std::fs::create_dir_all(dir).map_err(state)?;
    mesh_apply::progress::state_dir_full().map_err(state)?;
    let name = path
        .file_name()
        .expect("a state file has a name")
        .to_string_lossy();
    let temporary = dir.join(format!(".{name}.new"));
    std::fs::write(&temporary, bytes).map_err(state)?;
    std::fs::File::open(&temporary)
        .and_then(|file| file.sync_all())
        .map_err(state)?;
    std::fs::rename(&temporary, path).map_err(state)
}
