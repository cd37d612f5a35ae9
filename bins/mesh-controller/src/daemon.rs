//! `mesh-controller serve`: the controller as a daemon on a fleet — it hears merges announced
//! on the bus and drives the open plans, several at once (its `drives` module).
//!
//! Start at [`serve`].

pub(crate) mod collect;
mod drives;
mod heard;
pub(crate) mod retry;

pub use crate::hooks::forge::{push as forge_push, Push};
pub use crate::hooks::verify::{verify, Proof};
pub use crate::hooks::{bind as bind_hooks, Hooks};

use crate::bus::credentials::connect;
use crate::error::{bus_error, Error, Result};
use crate::runtime::{MergeOptions, Runtime};
use drives::{Drives, Ended};
use mesh_bus::discovery;
use mesh_bus::jetstream;
use mesh_store::problems::ProblemKind;
use std::time::Duration;

pub(crate) use crate::bus::announce::MERGE_CONSUMER;

/// How long one turn of the daemon's loop waits for a merge.
const TURN: Duration = Duration::from_secs(1);

/// How often the daemon makes the intents current ([`crate::intent::keep_current`]) besides
/// after each drive.
const INTENTS_EVERY: Duration = Duration::from_secs(60);

/// The subject of the merge problem an unreadable merge announcement is: cleared when a
/// readable one is heard.
pub(crate) const UNREADABLE_ANNOUNCEMENT: &str = "unreadable-announcement";

/// How many times the daemon tries to make the mesh's streams at start, a second apart: a
/// server busy enough to time each request out (CI saw five attempts fail under load) is
/// waited for, each attempt said, before the daemon gives up.
const STREAM_ATTEMPTS: u32 = 30;

/// How many plans `serve` drives at once unless told (`serve --max-drives`).
pub const MAX_DRIVES: u16 = 4;

/// How the daemon runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// How many plans are driven at once (plans of other repositories, or branches).
    pub max_drives: usize,
    /// How often the daemon publishes its heartbeat ([`crate::bus::heartbeat`]).
    pub heartbeat: Duration,
    /// How often the daemon collects the records ([`collect`]); also soon after a plan ends.
    pub collect_every: Duration,
    /// How many plans are kept whole ([`crate::plans::fold::KEEP_PLANS`] by default).
    pub keep_plans: usize,
    /// How long a declaration no record names is kept after it was written.
    pub declaration_grace: Duration,
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            max_drives: usize::from(MAX_DRIVES),
            heartbeat: Duration::from_secs(crate::bus::heartbeat::HEARTBEAT_SECS),
            collect_every: collect::COLLECT_EVERY,
            keep_plans: crate::plans::fold::KEEP_PLANS,
            declaration_grace: crate::records::DECLARATION_GRACE,
        }
    }
}

/// This machine's name, for the controller's discovery answer.
fn machine_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "controller".to_owned())
}

/// Makes the mesh's streams on `bus` (as many copies as the mesh wants), trying again a second
/// apart up to `STREAM_ATTEMPTS` (30) times: a busy server may time a JetStream request out, and
/// making a stream that is there already changes nothing. `None` when `shutdown` came first.
///
/// `serve` makes them before anything reads them, and `mesh-controller serve` before its
/// status page answers: a read of a stream while it is being made crashes nats-server 2.9
/// (a nil pointer in its message get, seen on Debian's 2.9.10 when the page was asked for at
/// the daemon's start).
///
/// # Errors
/// When the mesh's replicas cannot be read, or the streams are still not made after the last
/// attempt.
pub async fn make_streams(
    home: &crate::home::Home,
    bus_config: &crate::bus::credentials::BusConfig,
    bus: &mesh_bus::NatsBus,
    shutdown: &mut (impl std::future::Future<Output = ()> + Unpin),
) -> Result<Option<()>> {
    let js = bus.jetstream();
    let replicas = crate::bus::broker::wanted_replicas(home, bus_config, bus)?;
    let mut attempts = 1;
    loop {
        match jetstream::ensure_streams_with(&js, replicas).await {
            Ok(()) => return Ok(Some(())),
            Err(error) if attempts < STREAM_ATTEMPTS => {
                tracing::warn!(%error, attempts, "cannot make the mesh's streams yet; trying again");
                attempts += 1;
                tokio::select! {
                    () = &mut *shutdown => return Ok(None),
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
            Err(error) => {
                return Err(bus_error(|| "making the mesh's streams".to_owned())(error));
            }
        }
    }
}

/// `mesh-controller --bus URL serve`: the controller as a daemon on a fleet, until `shutdown`.
///
/// It makes the mesh's streams, answers discovery as [`discovery::CONTROLLER_SERVICE`] (the
/// rule “Discovery waits for everyone who said they are there”), and hears merges announced on the
/// bus through its durable consumer [`MERGE_CONSUMER`], made from now (the rule “A durable consumer
/// starts from now”): each merge, heard once however often it is announced (the rule “A merge heard
/// twice makes one plan”), is planned as `merge NAME --commit C --plan-only` would, and
/// acknowledged. The open plans are driven over the bus as `plans resume` would (built, rolled out
/// one machine first to the real hosts), each as a task of the runtime's, at most
/// `options.max_drives` at once, while the loop goes on hearing merges. A merge of a repository and
/// branch whose plan is driven takes it over at once: that drive is cancelled at its next step
/// boundary (a rollout waiting on its first machine within a second), and the new plan supersedes
/// it, taking in its unbuilt and unsent modules, and is driven. Open plans left by a controller
/// stopped mid-rollout are driven on when it starts. A merge that cannot be planned (an unknown
/// repository, another branch than the one registered) is logged, recorded as a problem of its
/// repository (shown by `status` until a later merge of it is planned) and acknowledged; a drive
/// that fails is logged, and its plan is driven on after the next merge or start.
///
/// Every plan is driven through `runtime`, on its mesh's bus.
///
/// # Guarantees
/// `shutdown` is heard mid-drive too: the drive stops where it is, its plan saved as of its
/// last step, and is resumed from there.
///
/// # Errors
/// The mesh is not on a bus; the bus cannot be reached at start, or the streams or consumer
/// cannot be made.
pub async fn serve(
    runtime: &Runtime,
    options: &ServeOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let mut shutdown = Box::pin(shutdown);
    let home = runtime.mesh().home();
    let bus_config = runtime.mesh().bus().ok_or_else(|| Error::Given {
        option: crate::error::Given::Bus,
        value: None,
        why: "the controller serves a fleet's bus".to_owned(),
    })?;
    let bus = connect(home, bus_config).await?;
    if make_streams(home, bus_config, &bus, &mut shutdown)
        .await?
        .is_none()
    {
        return Ok(());
    }
    let version = mesh_bus::version::ServerVersion::of_client(bus.client());
    if version.removal_visits_every_consumer() {
        let consumers = declaration_consumers(&bus).await;
        if consumers >= CONSUMERS_WARNED {
            runtime.progress().line(&format!(
                "warning: the declarations stream holds {consumers} consumers, made for the \
                 hosts of an earlier mesh (this mesh's hosts read none), and nats-server \
                 {version} passes over every consumer of a stream for each message it removes \
                 (fixed in 2.10.26): once nodes hold 8 declarations each a rollout's time grows \
                 with their number. Once every host runs this mesh, delete them (`nats consumer \
                 rm MESH_DECLARATIONS host-<node>`), or run nats-server 2.10.26 or later"
            ));
        }
    }
    let js = bus.jetstream();
    let _discovery = discovery::serve_discovery(
        bus.client(),
        &discovery::RuntimeAnnouncement {
            service: discovery::CONTROLLER_SERVICE.to_owned(),
            node: machine_name(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            modules: Vec::new(),
        },
    )
    .await
    .map_err(bus_error(|| "answering discovery".to_owned()))?;
    let mut merges = jetstream::MergeListener::open(&js, MERGE_CONSUMER)
        .await
        .map_err(bus_error(|| "opening the merge consumer".to_owned()))?;
    // Repositories registered with `--poll` are fetched and their new heads announced.
    let _poller = crate::hooks::poll::spawn(home.clone(), bus.clone());
    // Each node's last readable report kept as the reports are heard, status read or not.
    let heard = heard::spawn(home.clone(), bus.clone());
    let _heard = AbortOnDrop(heard);
    tracing::info!(url = %bus_config.url, max_drives = options.max_drives, "serving: hearing merges");
    let mut drives = Drives::new(options.max_drives);
    let machine = machine_name();
    let mut last_beat: Option<tokio::time::Instant> = None;
    let mut last_intents: Option<tokio::time::Instant> = None;
    let mut collections = collect::Collections::new(
        options.collect_every,
        options.keep_plans,
        options.declaration_grace,
    );
    loop {
        // The open plans are driven as tasks of their own, at most so many at once: the loop
        // goes on hearing merges while they run.
        if let Err(error) = drives.start_due(runtime) {
            tracing::error!(
                error = error.chain_line(),
                "the open plans could not be read; read again at the next turn"
            );
        }
        for (plan, ended) in drives.ended().await {
            settle(home, &mut drives, &plan, &ended);
            if matches!(&ended, Ended::Driven(record) if !record.plan.state.is_open()) {
                collections.plan_ended();
            }
        }
        collections.start_due(runtime);
        if last_beat.is_none_or(|at| at.elapsed() >= options.heartbeat) {
            last_beat = Some(tokio::time::Instant::now());
            // The heartbeat waits on the bus, up to the client's retry limit when the bus is
            // gone: the stop is heard meanwhile (a heartbeat cut short is only a late one).
            tokio::select! {
                _ = &mut shutdown => break,
                () = beat(&bus, home, &machine, options, &drives) => {}
            }
        }
        // What the nodes should run, composed again when an input changed by a path that did
        // not (an inventory edited by hand): the status page reads it. Its inputs' fingerprint
        // reads every settings layer, so once a minute.
        if last_intents.is_none_or(|at| at.elapsed() >= INTENTS_EVERY) {
            last_intents = Some(tokio::time::Instant::now());
            crate::intent::keep_current_logged(home, runtime.mesh().store(), "the daemon").await;
        }
        let heard = tokio::select! {
            _ = &mut shutdown => break,
            heard = merges.next(TURN) => heard,
        };
        let heard = match heard {
            Ok(Some(heard)) => heard,
            Ok(None) => continue,
            // Whoever published it, it is theirs (*no single party can blind the fleet*): a
            // problem in `status` until a readable one is heard, and the next is heard at once.
            Err(error @ mesh_bus::NatsError::Decode { .. }) => {
                tracing::warn!(%error, "an unreadable merge announcement");
                if let Err(error) = home.problems().record(
                    ProblemKind::Merge,
                    UNREADABLE_ANNOUNCEMENT,
                    &error.to_string(),
                    Vec::new(),
                    mesh_store::clock::now(),
                ) {
                    tracing::error!(error = error.chain_line(), "recording a problem");
                }
                continue;
            }
            Err(error) => {
                tracing::error!(%error, "the merge consumer failed; reading it again");
                tokio::select! {
                    _ = &mut shutdown => break,
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                continue;
            }
        };
        let merge = &heard.merge;
        if let Err(error) = home
            .problems()
            .clear(ProblemKind::Merge, UNREADABLE_ANNOUNCEMENT)
        {
            tracing::error!(error = error.chain_line(), "clearing a problem");
        }
        let planned = match home.repos().get(&merge.repository) {
            Ok(repo) if repo.branch != merge.branch => Err(Error::refused(format!(
                "repository `{}` is registered on branch `{}`, not `{}`",
                merge.repository, repo.branch, merge.branch
            ))),
            Ok(_) => {
                // A newer merge takes over at once ("A newer merge takes over an older
                // plan"): the repository's plans on this branch stop at their next step, and
                // the plan made supersedes them, taking in what they had not built or sent.
                for (plan, ended) in drives
                    .stop_repository(runtime, &merge.repository, &merge.branch)
                    .await
                {
                    // Cancelled: it did not fail, nor succeed. A failure it had is cleared
                    // when the new plan supersedes it.
                    if matches!(ended, Ended::Failed(_)) {
                        settle(home, &mut drives, &plan, &ended);
                    }
                }
                runtime
                    .merge(
                        &merge.repository,
                        &MergeOptions {
                            commit: Some(merge.commit.clone()),
                            plan_only: true,
                            ..MergeOptions::default()
                        },
                    )
                    .await
            }
            Err(error) => Err(error),
        };
        // The rule “Nothing fails silently”: a merge that cannot be planned reaches `status` (a
        // problem of the repository) until a later merge of it is planned.
        let kept = match planned {
            Ok(outcome) => {
                tracing::info!(
                    repository = %merge.repository,
                    commit = %merge.commit,
                    outcome = %serde_json::to_string(&outcome).unwrap_or_default(),
                    "merge heard"
                );
                if let crate::plans::MergeOutcome::Planned { superseded, .. } = &outcome {
                    for older in superseded {
                        retry::clear_failure(home, older);
                    }
                }
                home.problems()
                    .clear(ProblemKind::Merge, &merge.repository)
                    .map(drop)
            }
            Err(error) => {
                tracing::error!(
                    repository = %merge.repository,
                    commit = %merge.commit,
                    error = error.chain_line(),
                    "a merge heard could not be planned"
                );
                home.problems()
                    .record(
                        ProblemKind::Merge,
                        &merge.repository,
                        &format!(
                            "the merge of `{}` {} at {} could not be planned: {error}",
                            merge.repository,
                            merge.branch,
                            crate::catalogue::builds::short_commit(&merge.commit)
                        ),
                        error.chain().skip(1).map(ToString::to_string).collect(),
                        mesh_store::clock::now(),
                    )
                    .map(drop)
            }
        };
        if let Err(error) = kept {
            tracing::error!(
                repository = %merge.repository,
                error = error.chain_line(),
                "the merge's problem record could not be written"
            );
        }
        if let Err(error) = heard.ack().await {
            tracing::error!(%error, "a merge could not be acknowledged; it may be heard again");
        }
        drives.merge_heard();
    }
    // Stopped by a signal: the last heartbeat says so, and when, so `status` calls the daemon
    // stopped, never silent. The drives stop first (their plans stay open, saved as of their
    // last step); a bus that does not take the beat within [`LAST_BEAT_LIMIT`] is not waited
    // for.
    let driving = drives.driving();
    drop(drives);
    beat_stopped(&bus, home, &machine, options, driving).await;
    Ok(())
}
/// Publishes the daemon's heartbeat: this turn of its loop, the merges waiting on its consumer
/// and the plans it drives. A heartbeat that cannot be published is logged: the next turn
/// tries again, and readers call the daemon silent meanwhile.
async fn beat(
    bus: &mesh_bus::NatsBus,
    home: &crate::home::Home,
    machine: &str,
    options: &ServeOptions,
    drives: &Drives,
) {
    let merges_waiting = jetstream::merges_waiting(&bus.jetstream(), MERGE_CONSUMER)
        .await
        .inspect_err(|error| tracing::warn!(%error, "the merges waiting could not be read"))
        .unwrap_or_default();
    let heartbeat = crate::bus::heartbeat::Heartbeat {
        format: crate::bus::heartbeat::HEARTBEAT_FORMAT,
        machine: machine.to_owned(),
        pid: std::process::id(),
        turn_at: mesh_store::clock::now(),
        interval_secs: options.heartbeat.as_secs().max(1),
        merges_waiting,
        driving: drives.driving(),
        failing: drives.failing(),
        stopped_at: None,
    };
    if let Err(error) = crate::bus::heartbeat::publish(bus, home, &heartbeat).await {
        tracing::error!(
            error = error.chain_line(),
            "the heartbeat could not be published"
        );
    }
}

/// How long the last heartbeat of a stopping daemon may take: well within the time a stop is
/// given, so a bus that is gone never holds the stop.
pub(crate) const LAST_BEAT_LIMIT: Duration = Duration::from_secs(3);

/// Publishes the last heartbeat of a daemon stopped by a signal: when it stopped, and the plans
/// it was driving (left open). Bounded by [`LAST_BEAT_LIMIT`]; one not published is logged, and
/// readers then call the daemon silent.
async fn beat_stopped(
    bus: &mesh_bus::NatsBus,
    home: &crate::home::Home,
    machine: &str,
    options: &ServeOptions,
    driving: Vec<String>,
) {
    let now = mesh_store::clock::now();
    let bus = bus.clone();
    let home = home.clone();
    let machine = machine.to_owned();
    let interval_secs = options.heartbeat.as_secs().max(1);
    // The records are written on a blocking thread: a write waiting on a bus that is gone
    // blocks it, not the stop.
    let publishing = tokio::task::spawn_blocking(move || {
        tokio::runtime::Handle::current().block_on(async move {
            let merges_waiting = jetstream::merges_waiting(&bus.jetstream(), MERGE_CONSUMER)
                .await
                .unwrap_or_default();
            let heartbeat = crate::bus::heartbeat::Heartbeat {
                format: crate::bus::heartbeat::HEARTBEAT_FORMAT,
                machine,
                pid: std::process::id(),
                turn_at: now,
                interval_secs,
                merges_waiting,
                driving,
                failing: Vec::new(),
                stopped_at: Some(now),
            };
            crate::bus::heartbeat::publish(&bus, &home, &heartbeat).await?;
            bus.client().flush().await.map_err(|error| {
                Error::internal(format!("publishing the daemon's last heartbeat: {error}"))
            })
        })
    });
    match tokio::time::timeout(LAST_BEAT_LIMIT, publishing).await {
        Ok(Ok(Ok(()))) => tracing::info!("stopped: the last heartbeat says so"),
        Ok(Ok(Err(error))) => tracing::error!(
            error = error.chain_line(),
            "the last heartbeat could not be published"
        ),
        Ok(Err(error)) => tracing::error!(%error, "the last heartbeat could not be published"),
        Err(_) => tracing::warn!(
            limit_secs = LAST_BEAT_LIMIT.as_secs(),
            "the bus did not take the last heartbeat in time: stopping without it"
        ),
    }
}

/// Settles how a drive ended: one that did not fail clears its plan's problem; one that failed
/// is a problem of its plan (one attempt more) and is driven again after its backoff
/// ([`retry::retry_after`]).
fn settle(home: &crate::home::Home, drives: &mut Drives, plan: &str, ended: &Ended) {
    match ended {
        Ended::Driven(record) => {
            tracing::info!(plan = %plan,
                state = mesh_plan::plans::state_word(&record.plan.state), "plan driven");
            drives.succeeded(plan);
            retry::clear_failure(home, plan);
        }
        Ended::Failed(error) => {
            let attempts = retry::record_failure(home, plan, error).unwrap_or(1);
            let wait = retry::retry_after(attempts);
            tracing::error!(plan = %plan, error = error.chain_line(), attempts,
                retry_in_secs = wait.as_secs(), "driving the plan failed; it is driven again");
            drives.retry_at(plan, tokio::time::Instant::now() + wait);
        }
    }
}

/// A task aborted when the daemon returns.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// From how many consumers on the declarations stream a server that passes over every one of
/// them for each message it removes is said at the daemon's start.
pub(crate) const CONSUMERS_WARNED: usize = 1_000;

/// How many consumers the declarations stream holds (0 when it cannot be read: the warning it
/// feeds is then not said).
async fn declaration_consumers(bus: &mesh_bus::NatsBus) -> usize {
    // Getting the stream asks for its info once; that answer holds the count.
    bus.jetstream()
        .get_stream(mesh_bus::subjects::DECLARATIONS_STREAM)
        .await
        .map_or(0, |stream| stream.cached_info().state.consumer_count)
}
