//! The daemon's drives: each open plan driven as a task the runtime owns, at most so many at
//! once, while the daemon's loop goes on hearing merges (kube-runtime's `Controller` is the
//! model: the loop schedules, the runtime's tasks do the work).
//!
//! Start at [`Drives`]. The loop calls [`Drives::start_due`] each turn, [`Drives::ended`] for
//! the drives that ended since, and [`Drives::stop_repository`] before it plans a merge: a
//! newer merge takes over at once ("A newer merge takes over an older plan").
//!
//! # Guarantees
//! - One drive per plan, and at most [`Drives::new`]'s bound at once; the plans of a repository
//!   and branch are driven oldest first.
//! - A drive's task holds the runtime's plans lock while it runs ([`Runtime::hold_plans`]).
//! - A plan whose drive ended and is still open (held for a move, waiting on a module not
//!   built) rests until the next merge: it is not driven again in a loop. One held for
//!   orphaned settings is driven again once the layers no longer set them (looked at every
//!   [`HOLDS_LOOKED_AT`]), with no merge and no command.
//! - A plan whose drive failed is driven again once its backoff has passed
//!   ([`Drives::retry_at`]), not before, merge or not.

use crate::plans::PlanRecord;
use crate::runtime::{DriveMode, Runtime};
use std::collections::{BTreeMap, BTreeSet};
use tokio::sync::mpsc;

/// How often the plans resting open are looked at for a hold the layers have ended (orphaned
/// settings renamed or dropped, a required setting set: [`crate::plans::holds::hold_ended`]).
pub(crate) const HOLDS_LOOKED_AT: std::time::Duration = std::time::Duration::from_secs(2);

/// A plan driven now.
struct Driving {
    repository: String,
    branch: String,
    task: tokio::task::JoinHandle<crate::error::Result<PlanRecord>>,
}

/// How a drive ended.
pub(crate) enum Ended {
    /// It ran to its end or was cancelled: the plan as it stands.
    Driven(Box<PlanRecord>),
    /// It failed.
    Failed(crate::error::Error),
}

/// The drives of the daemon's open plans.
pub(super) struct Drives {
    max: usize,
    running: BTreeMap<String, Driving>,
    rested: BTreeSet<String>,
    /// Plans whose drive failed, and when they are driven again.
    retries: BTreeMap<String, tokio::time::Instant>,
    ended_tx: mpsc::UnboundedSender<String>,
    ended_rx: mpsc::UnboundedReceiver<String>,
    /// Set when the open plans may have changed: the next [`Drives::start_due`] reads them.
    dirty: bool,
    /// When the resting plans' holds are next looked at.
    holds_at: tokio::time::Instant,
}

impl Drives {
    /// No drive yet; at most `max` at once (at least one).
    pub(super) fn new(max: usize) -> Drives {
        let (ended_tx, ended_rx) = mpsc::unbounded_channel();
        Drives {
            max: max.max(1),
            running: BTreeMap::new(),
            rested: BTreeSet::new(),
            retries: BTreeMap::new(),
            ended_tx,
            ended_rx,
            dirty: true,
            holds_at: tokio::time::Instant::now(),
        }
    }

    /// The plans driven now.
    pub(super) fn driving(&self) -> Vec<String> {
        self.running.keys().cloned().collect()
    }

    /// The plans whose drive failed and waits to be tried again.
    pub(super) fn failing(&self) -> Vec<String> {
        self.retries.keys().cloned().collect()
    }

    /// A merge was heard: every open plan may be driven again.
    pub(super) fn merge_heard(&mut self) {
        self.rested.clear();
        self.dirty = true;
    }

    /// Starts a drive for each open plan not driven and not resting, up to the bound, when the
    /// open plans may have changed since the last look.
    ///
    /// # Errors
    /// The plans cannot be read, or the plans lock taken.
    pub(super) fn start_due(&mut self, runtime: &Runtime) -> crate::error::Result<()> {
        let now = tokio::time::Instant::now();
        let due_before = self.retries.len();
        self.retries.retain(|_, at| *at > now);
        if self.retries.len() < due_before {
            self.dirty = true;
        }
        if !self.rested.is_empty() && now >= self.holds_at {
            self.holds_at = now + HOLDS_LOOKED_AT;
            let home = runtime.mesh().home();
            for record in runtime.open_plans()? {
                if self.rested.contains(&record.plan.id)
                    && crate::plans::holds::hold_ended(home, &record)?
                {
                    tracing::info!(plan = %record.plan.id, "a hold on settings ended");
                    self.rested.remove(&record.plan.id);
                    self.dirty = true;
                }
            }
        }
        if !self.dirty || self.running.len() >= self.max {
            return Ok(());
        }
        self.dirty = false;
        for record in runtime.open_plans()? {
            if self.running.len() >= self.max {
                // Looked at again when a drive ends.
                break;
            }
            let id = record.plan.id.clone();
            if self.running.contains_key(&id)
                || self.rested.contains(&id)
                || self.retries.contains_key(&id)
            {
                continue;
            }
            self.start(runtime, record)?;
        }
        Ok(())
    }

    fn start(&mut self, runtime: &Runtime, record: PlanRecord) -> crate::error::Result<()> {
        let id = record.plan.id.clone();
        let repository = record.plan.repository.clone();
        let branch = record.plan.branch.clone();
        let hold = runtime.hold_plans(&format!("serve: driving {id}"))?;
        let drive = runtime.drive(
            record,
            DriveMode::All,
            runtime.ctx(&BTreeSet::new(), &BTreeSet::new()),
        );
        let ended = self.ended_tx.clone();
        let plan = id.clone();
        let task = tokio::spawn(async move {
            let driven = drive.finish().await;
            drop(hold);
            // The loop may have stopped listening (it is shutting down): nothing to tell.
            let _ = ended.send(plan);
            driven
        });
        tracing::info!(plan = %id, "driving");
        self.running.insert(
            id,
            Driving {
                repository,
                branch,
                task,
            },
        );
        Ok(())
    }

    /// The drives that ended since the last call, each with how it ended. A plan that is still
    /// open rests until the next merge.
    pub(super) async fn ended(&mut self) -> Vec<(String, Ended)> {
        let mut out = Vec::new();
        while let Ok(plan) = self.ended_rx.try_recv() {
            let Some(driving) = self.running.remove(&plan) else {
                // Stopped and awaited already (a takeover).
                continue;
            };
            self.dirty = true;
            let ended = joined(&plan, driving.task.await);
            if matches!(&ended, Ended::Driven(record) if record.plan.state.is_open()) {
                self.rested.insert(plan.clone());
            }
            out.push((plan, ended));
        }
        out
    }

    /// Drives `plan`, whose drive failed, again at `at` and not before.
    pub(super) fn retry_at(&mut self, plan: &str, at: tokio::time::Instant) {
        self.retries.insert(plan.to_owned(), at);
    }

    /// A plan driven without failing: no retry is owed.
    pub(super) fn succeeded(&mut self, plan: &str) {
        self.retries.remove(plan);
    }

    /// Cancels the drives of `repository`'s plans on `branch` and waits for them to stop, at
    /// their next step boundary (everything done saved, nothing written after), so that a
    /// newer merge of it takes their plans over at once: planned on plans no drive writes
    /// meanwhile. Returns how each ended.
    pub(super) async fn stop_repository(
        &mut self,
        runtime: &Runtime,
        repository: &str,
        branch: &str,
    ) -> Vec<(String, Ended)> {
        let plans: Vec<String> = self
            .running
            .iter()
            .filter(|(_, d)| d.repository == repository && d.branch == branch)
            .map(|(plan, _)| plan.clone())
            .collect();
        for plan in &plans {
            runtime.cancel(plan);
        }
        let mut out = Vec::new();
        for plan in plans {
            let Some(driving) = self.running.remove(&plan) else {
                continue;
            };
            self.dirty = true;
            out.push((plan.clone(), joined(&plan, driving.task.await)));
        }
        out
    }

    /// Stops every drive where it awaits (the daemon is stopping): each plan stays saved as of
    /// its last step, and is resumed from there.
    pub(super) fn abort_all(&mut self) {
        for driving in std::mem::take(&mut self.running).into_values() {
            driving.task.abort();
        }
    }
}

impl Drop for Drives {
    fn drop(&mut self) {
        self.abort_all();
    }
}

/// How a drive's task ended.
fn joined(
    plan: &str,
    joined: std::result::Result<crate::error::Result<PlanRecord>, tokio::task::JoinError>,
) -> Ended {
    match joined {
        Ok(Ok(record)) => Ended::Driven(Box::new(record)),
        Ok(Err(error)) => Ended::Failed(error),
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => Ended::Failed(crate::error::Error::internal(format!(
            "the drive of {plan} ended: {error}"
        ))),
    }
}
