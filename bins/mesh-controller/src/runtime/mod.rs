//! The controller's runtime, in the shape of kube-runtime's `Controller`: a [`Mesh`] opened
//! once (its home, store and fleet, [`Mesh::open`]), and a [`Runtime`] that owns the drives of
//! its plans — each a task of its own, cancelled at any step boundary ([`Runtime::cancel`]) —
//! and that every command drives through: `merge` ([`Runtime::merge`]), `plans resume`,
//! `push --behind` and `build --behind` ([`Runtime::drive_open`]), `push` ([`Runtime::push`])
//! and the daemon ([`crate::daemon`]).
//!
//! A drive ([`drive`]) goes tier by tier: each module built, then rolled out one machine first
//! through the executor ([`crate::executor::roll_out`]), the plan saved after every step.
//!
//! # Guarantees
//! - A cancelled drive stops at its next step boundary — between two builds, two rollouts or
//!   two steps of a rollout — having saved everything it did, and writes nothing after: its
//!   plan is resumed from there.
//! - A drive whose task is dropped (its caller gone: a daemon stopped mid-rollout) is aborted
//!   where it awaits, its plan saved as of its last step.
//! - The runtime holds the plans lock while any of its merges or drives runs
//!   ([`Runtime::hold_plans`]): taken by the first, shared by the others (a daemon drives plans
//!   of several repositories at once), let go when the last ends — so no other controller
//!   plans or drives meanwhile, and one waits while it is idle for nothing.

pub(crate) mod check;
pub(crate) mod init;
pub(crate) mod preview;

mod drive;
mod mesh;
mod settings;
mod status;

pub(crate) use drive::drive;
pub use drive::DriveMode;
pub(crate) use mesh::{Ctx, Started};
pub use mesh::{GivenFleet, Mesh, MeshOptions};
pub use settings::{SettingsEdit, SettingsOptions};
pub use status::StatusRead;

use crate::catalogue::repos;
use crate::error::{Context, Error, Result};
use crate::executor::cancel::Cancel;
use crate::plans::merge::Heard;
use crate::plans::{MergeOutcome, PlanRecord, PlansLock};
use crate::push::{Checked, PushResult};
use mesh_model::plan::Plan;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How a merge is heard ([`Runtime::merge`], [`preview::merge`]).
#[derive(Debug, Clone, Default)]
pub struct MergeOptions {
    /// The merged commit; `None`: the registered branch's head.
    pub commit: Option<String>,
    /// Only plan it: nothing is built or sent (the plan waits, open, for a later merge of the
    /// same commit or `plans resume`), and [`preview::merge`] previews it.
    pub plan_only: bool,
    /// Modules whose running containers' data may move: their held nodes are sent ("A moved
    /// mount is held"). Empty: every move is held.
    pub moves: BTreeSet<String>,
    /// Modules whose nodes held for orphaned settings are sent anyway, those settings dropped
    /// ("An orphaned setting is a removal"). Empty: every such node is held.
    pub drop_settings: BTreeSet<String>,
}

/// How the open plans are driven ([`Runtime::drive_open`]).
#[derive(Debug, Clone, Default)]
pub struct DriveOptions {
    /// Only this plan (an error when it is not open); `None`: every open plan, one after
    /// another.
    pub plan: Option<String>,
    /// How far each is driven.
    pub mode: DriveMode,
    /// Modules whose running containers' data may move, as [`MergeOptions::moves`].
    pub moves: BTreeSet<String>,
    /// Modules whose held nodes are sent with their orphaned settings dropped, as
    /// [`MergeOptions::drop_settings`].
    pub drop_settings: BTreeSet<String>,
}

/// How a push is sent ([`Runtime::push`]).
#[derive(Debug, Clone)]
pub struct PushOptions {
    /// Modules whose running containers' data may move, as [`MergeOptions::moves`].
    pub moves: BTreeSet<String>,
    /// Modules a node may be taken back to an older build of than it runs (a stopped
    /// rollout's build, [`crate::push::Downgrade`]); any other such node is held.
    pub downgrades: BTreeSet<String>,
    /// How long each node's report is waited for.
    pub timeout: Duration,
}

impl Default for PushOptions {
    /// Nothing may move or go back; each node's report is waited for
    /// [`PushOptions::DEFAULT_TIMEOUT`].
    fn default() -> PushOptions {
        PushOptions {
            moves: BTreeSet::new(),
            downgrades: BTreeSet::new(),
            timeout: PushOptions::DEFAULT_TIMEOUT,
        }
    }
}

impl PushOptions {
    /// How long a push waits for each node's report unless told: two minutes.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
}

/// The drives running, by plan, each with its cancellation.
type Running = Arc<Mutex<BTreeMap<String, Cancel>>>;

/// The plans lock as a runtime holds it: taken by the first merge or drive that needs it, shared
/// by the others, let go when the last of them drops it.
type SharedLock = Arc<Mutex<std::sync::Weak<PlansLock>>>;

/// The plans lock held for one merge or drive of a runtime ([`Runtime::hold_plans`]).
pub(crate) type PlansHold = Arc<PlansLock>;

/// Takes a runtime's plans lock, or shares the hold it has ([`Runtime::plans_holder`]).
pub struct PlansHolder {
    mesh: Arc<Mesh>,
    lock: SharedLock,
}

impl PlansHolder {
    /// The plans lock, shared with the runtime's merges and drives holding it now.
    ///
    /// # Errors
    /// As [`PlansLock::acquire`].
    pub fn hold(&self, doing: &str) -> Result<PlansHold> {
        let mut shared = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = shared.upgrade() {
            return Ok(held);
        }
        let held = Arc::new(PlansLock::acquire(self.mesh.home(), doing)?);
        *shared = Arc::downgrade(&held);
        Ok(held)
    }
}

/// The controller's runtime: a mesh, where progress goes, and the drives it owns.
pub struct Runtime {
    mesh: Arc<Mesh>,
    progress: Arc<dyn crate::Progress>,
    running: Running,
    lock: SharedLock,
}

/// A plan's drive, running as a task of its own: [`DriveTask::finish`] awaits it; dropped, the
/// task is aborted where it awaits.
pub struct DriveTask {
    plan: String,
    cancel: Cancel,
    task: tokio::task::JoinHandle<Result<PlanRecord>>,
    running: Running,
}

impl DriveTask {
    /// The plan driven.
    pub fn plan(&self) -> &str {
        &self.plan
    }

    /// Awaits the drive: the plan as it stands when the drive ended (or was cancelled).
    ///
    /// # Errors
    /// As [`drive`]. A drive that panicked panics here.
    pub async fn finish(mut self) -> Result<PlanRecord> {
        let joined = (&mut self.task).await;
        match joined {
            Ok(driven) => driven,
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(error) => Err(Error::internal(format!(
                "the drive of {} ended: {error}",
                self.plan
            ))),
        }
    }
}

impl Drop for DriveTask {
    fn drop(&mut self) {
        self.task.abort();
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if running
            .get(&self.plan)
            .is_some_and(|cancel| cancel.is(&self.cancel))
        {
            running.remove(&self.plan);
        }
    }
}

impl Runtime {
    /// The runtime of `mesh`, saying what it does to `progress`.
    pub fn new(mesh: Arc<Mesh>, progress: Arc<dyn crate::Progress>) -> Runtime {
        Runtime {
            mesh,
            progress,
            running: Arc::default(),
            lock: Arc::default(),
        }
    }

    /// Where the runtime says what it does.
    pub(crate) fn progress(&self) -> &dyn crate::Progress {
        self.progress.as_ref()
    }

    /// The plans lock for `doing`: the one this runtime holds already, shared, else taken
    /// (waiting while another controller holds it). Let go when the last hold is dropped.
    ///
    /// # Errors
    /// As [`PlansLock::acquire`].
    pub fn hold_plans(&self, doing: &str) -> Result<PlansHold> {
        self.plans_holder().hold(doing)
    }

    /// What takes the plans lock as [`Runtime::hold_plans`] does, to be sent where the wait
    /// for it blocks nothing else (a blocking thread): on a bus the lock is a lease there.
    pub fn plans_holder(&self) -> PlansHolder {
        PlansHolder {
            mesh: Arc::clone(&self.mesh),
            lock: Arc::clone(&self.lock),
        }
    }

    /// The mesh.
    pub fn mesh(&self) -> &Arc<Mesh> {
        &self.mesh
    }

    /// A context for one drive or push: `moves` allowed to move ("A moved mount is held"),
    /// the held nodes of `drop_settings` sent with their orphaned settings dropped ("An
    /// orphaned setting is a removal").
    pub fn ctx(&self, moves: &BTreeSet<String>, drop_settings: &BTreeSet<String>) -> Ctx {
        Ctx {
            mesh: Arc::clone(&self.mesh),
            progress: Arc::clone(&self.progress),
            moves: moves.clone(),
            drop_settings: drop_settings.clone(),
            cancel: Cancel::new(),
        }
    }

    /// Starts driving `record` as far as `mode` says, as a task the runtime owns, in `ctx`
    /// ([`Runtime::ctx`]: what may move, what is sent with its orphaned settings dropped). A
    /// plan driven already is cancelled first.
    pub fn drive(&self, record: PlanRecord, mode: DriveMode, ctx: Ctx) -> DriveTask {
        let plan = record.plan.id.clone();
        if let Some(earlier) = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(plan.clone(), ctx.cancel.clone())
        {
            earlier.cancel();
        }
        let cancel = ctx.cancel.clone();
        let task = tokio::spawn(async move {
            let mut record = record;
            drive(&ctx, &mut record, mode).await?;
            Ok(record)
        });
        DriveTask {
            plan,
            cancel,
            task,
            running: Arc::clone(&self.running),
        }
    }

    /// Cancels the drive of `plan`, if one runs: it stops at its next step boundary. Says
    /// whether one ran.
    pub fn cancel(&self, plan: &str) -> bool {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        running
            .get(plan)
            .inspect(|cancel| cancel.cancel())
            .is_some()
    }

    /// The plans driven now.
    pub fn driving(&self) -> Vec<String> {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    /// Hears a merge to a registered repository: makes its plan and, unless
    /// [`MergeOptions::plan_only`], drives it and then any other open plan.
    ///
    /// # Errors
    /// When git cannot be read, the affected modules depend on each other in a cycle (named),
    /// or a plan cannot be saved; a failed build or rollout is not an error but a stopped plan.
    pub async fn merge(&self, name: &str, options: &MergeOptions) -> Result<MergeOutcome> {
        let MergeOptions {
            commit,
            plan_only,
            moves,
            drop_settings,
        } = options;
        let (commit, plan_only) = (commit.as_deref(), *plan_only);
        let ctx = || self.ctx(moves, drop_settings);
        let home = self.mesh.home();
        let repo = home.repos().get(name)?;
        let commit = repos::resolve_merged(&repo, commit)
            .for_repo(name, || format!("repository `{name}`"))?;
        let _lock = self.hold_plans(&format!("merge {name}"))?;
        let (mut record, superseded) =
            match crate::plans::merge::merge(home, self.progress.as_ref(), repo, &commit)? {
                Heard::AlreadyPlanned(plan) if plan_only || !plan.state.is_open() => {
                    return Ok(MergeOutcome::AlreadyPlanned {
                        plan,
                        driven: false,
                    })
                }
                // The commit's plan is still open (made with `--plan-only`, or holding a node
                // for a move): this merge drives it, with its flags.
                Heard::AlreadyPlanned(plan) => {
                    let record = home.plans().get(&plan.id)?;
                    let record = self.drive(record, DriveMode::All, ctx()).finish().await?;
                    return Ok(MergeOutcome::AlreadyPlanned {
                        plan: record.plan,
                        driven: true,
                    });
                }
                Heard::Planned { record, superseded } => (record, superseded),
            };
        if !plan_only {
            record = self.drive(record, DriveMode::All, ctx()).finish().await?;
            for other in home.plans().all()? {
                if other.plan.id != record.plan.id && other.plan.state.is_open() {
                    self.progress
                        .line(&format!("resuming the open plan {}", other.plan.id));
                    self.drive(other, DriveMode::All, ctx()).finish().await?;
                }
            }
            self.fold_ended()?;
        }
        Ok(MergeOutcome::Planned {
            plan: record.plan,
            superseded,
            forgotten: record.forgotten.into_iter().collect(),
        })
    }

    /// Every open plan, once each supersede a controller was killed in the middle of is
    /// finished (an older plan whose modules a newer one holds is never driven again).
    ///
    /// # Errors
    /// The plans cannot be read or written, or the plans lock taken.
    pub fn open_plans(&self) -> Result<Vec<PlanRecord>> {
        let _lock = self.hold_plans("reading the open plans")?;
        let plans =
            crate::plans::merge::finish_supersessions(self.mesh.home(), self.progress.as_ref())?;
        Ok(plans
            .into_iter()
            .filter(|record| record.plan.state.is_open())
            .collect())
    }

    /// Drives every open plan (or the one named) as far as [`DriveOptions::mode`] says, one
    /// after another.
    ///
    /// # Errors
    /// As [`drive`]; naming a plan that is not open is an error.
    pub async fn drive_open(&self, options: &DriveOptions) -> Result<Vec<Plan>> {
        let only = options.plan.as_deref();
        let mode = options.mode;
        let home = self.mesh.home();
        let _lock = self.hold_plans("driving the open plans")?;
        // A supersede a controller was killed in the middle of is finished first: an older plan
        // whose modules a newer one holds is never driven again.
        let plans = crate::plans::merge::finish_supersessions(home, self.progress.as_ref())?;
        let mut out = Vec::new();
        if let Some(id) = only {
            let record = match plans.iter().find(|record| record.plan.id == id) {
                Some(record) => record.clone(),
                None => home.plans().get(id)?,
            };
            if !record.plan.state.is_open() {
                return Err(Error::refused(format!(
                    "plan `{id}` is not open (it is {}); a plan that ended is never resumed",
                    mesh_plan::plans::state_word(&record.plan.state)
                )));
            }
        }
        for record in plans {
            if !record.plan.state.is_open() || only.is_some_and(|id| id != record.plan.id) {
                continue;
            }
            let ctx = self.ctx(&options.moves, &options.drop_settings);
            let record = self.drive(record, mode, ctx).finish().await?;
            out.push(record.plan);
        }
        self.fold_ended()?;
        Ok(out)
    }

    /// `plans retry PLAN`: the stopped plan [`DriveOptions::plan`] opened again where it stopped,
    /// its cause fixed ([`crate::executor::retry::reopen`]), then driven as far as
    /// [`DriveOptions::mode`] says: the node it stopped at begun again, then the rest; the nodes
    /// that applied are not sent again. Says which modules it opened again.
    ///
    /// # Errors
    /// No plan named; the plan is not stopped, or a newer plan of its repository and branch came
    /// after it; as [`Runtime::drive_open`].
    pub async fn retry(&self, options: &DriveOptions) -> Result<Vec<Plan>> {
        let Some(id) = options.plan.as_deref() else {
            return Err(Error::refused(
                "a retry names the stopped plan to retry".to_owned(),
            ));
        };
        {
            let _lock = self.hold_plans(&format!("retrying {id}"))?;
            let (_, modules) =
                crate::executor::retry::reopen(self.mesh.home(), id, mesh_store::clock::now())?;
            self.progress.line(&format!(
                "{id}: retried: {} begun again where {} stopped",
                modules
                    .iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                if modules.len() == 1 { "it" } else { "they" }
            ));
        }
        self.drive_open(options).await
    }

    /// Folds the plans that ended once this runtime's drives are over ([`crate::plans::fold`]):
    /// a plan's end leaves no record per node. Removing older plans is the collection's
    /// (`records collect`, the daemon's).
    ///
    /// # Errors
    /// A record cannot be read, written or removed.
    fn fold_ended(&self) -> Result<()> {
        let _lock = self.hold_plans("folding the plans that ended")?;
        let folded = crate::plans::fold::fold_ended(self.mesh.home(), usize::MAX, &self.driving())?;
        if !folded.plans.is_empty() {
            tracing::debug!(plans = ?folded.plans, node_records = folded.node_records, "folded");
        }
        Ok(())
    }

    /// Composes, sends and applies the declarations of `nodes` through the mesh's fleet,
    /// grants first, holding a node whose running container's data would move unless its
    /// module is in [`PushOptions::moves`], and waits up to [`PushOptions::timeout`] for each
    /// node's report.
    ///
    /// # Errors
    /// When the fleet cannot be started, a grant fails (nothing else is sent), or a record
    /// cannot be read or written.
    pub async fn push(
        &self,
        checked: &Checked,
        nodes: &[String],
        options: &PushOptions,
    ) -> Result<Vec<PushResult>> {
        let PushOptions {
            moves,
            downgrades,
            timeout,
        } = options;
        let mut started = self.mesh.start_fleet().await?;
        crate::executor::push_allowing(
            self.mesh.home(),
            started.fleet(),
            checked,
            nodes,
            (moves, downgrades),
            *timeout,
            self.progress.as_ref(),
        )
        .await
    }
}
