//! [`Pages`]: the [`Snapshot`] they read at one moment, and [`Pages::respond`], the answer for
//! one [`Page`].

use super::counts::SendTally;
use super::html::page as page_of;
use super::metrics::metrics;
use super::snapshot::{PageQuery, Snapshot};
use crate::error::Result;
use crate::home::Home;
use crate::plans::PlanRecord;
use crate::status;
use mesh_plan::rollout::NodeProgress;
use std::collections::HashMap;
use std::sync::Mutex;

/// The status pages of one mesh home: what [`super::serve`] answers, or an embedding tool
/// mounts through [`super::router`] or [`Pages::respond`].
#[derive(Debug)]
pub struct Pages {
    home: Home,
    silent_after_secs: u64,
    /// Where the merges waiting on the daemon's consumer are read at each snapshot, as
    /// `status` reads them (the bus); `None` from it, or no source, leaves the heartbeat's.
    merges_waiting: Option<MergesWaitingSource>,
    /// The latencies of rollouts that finished (plan, module): they no longer change.
    finished: Mutex<HashMap<(String, String), SendTally>>,
}

/// Reads the merges waiting on the daemon's consumer now (`None`: they cannot be read).
#[derive(Clone)]
pub struct MergesWaitingSource(
    pub std::sync::Arc<dyn Fn() -> Option<mesh_bus::jetstream::MergesWaiting> + Send + Sync>,
);

impl std::fmt::Debug for MergesWaitingSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MergesWaitingSource")
    }
}

/// An answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status code.
    pub status: u16,
    /// The `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

impl Answer {
    pub(super) fn text(status: u16, body: impl Into<String>) -> Answer {
        Answer {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }
}

/// A page [`Pages::respond`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Page {
    /// `/`, for people.
    Html(PageQuery),
    /// `/metrics`, the Prometheus text exposition.
    Metrics,
    /// `/status.json`, the document `status --output json` prints.
    StatusJson,
}

impl Pages {
    /// The pages of `home`; on a fleet a node unheard for more than `silent_after_secs` is
    /// silent (as `status --silent-after`).
    pub fn new(home: Home, silent_after_secs: u64) -> Pages {
        Pages {
            home,
            silent_after_secs,
            merges_waiting: None,
            finished: Mutex::new(HashMap::new()),
        }
    }

    /// The pages reading the merges waiting from `source` at each snapshot, as `status` reads
    /// them from the bus, so the two agree; the heartbeat's when the source has none.
    pub fn with_merges_waiting(mut self, source: MergesWaitingSource) -> Pages {
        self.merges_waiting = Some(source);
        self
    }

    /// What the pages show at `now`: the overview `status` shows, the plan records (read
    /// once, for both) and the rollouts' sends.
    ///
    /// # Errors
    /// When the home cannot be read.
    pub fn snapshot(&self, now: u64) -> Result<Snapshot> {
        let plans = self.home.plans().all()?;
        let mut overview =
            status::overview_of_plans(&self.home, &plans, now, self.silent_after_secs)?;
        if overview.daemon.is_some() {
            if let Some(waiting) = self.merges_waiting.as_ref().and_then(|read| (read.0)()) {
                overview.set_merges_waiting(waiting, now);
            }
        }
        let sends = self.sends(&plans)?;
        let verdict = status::judge(&overview, now, status::DEFAULT_MID_CHANGE_AFTER_SECS);
        Ok(Snapshot {
            now,
            overview,
            plans,
            sends,
            verdict,
        })
    }

    /// The rollouts' sends: counted from the plan records; each applied node's latency read
    /// from its record of the rollout (once for a rollout that finished), or from the summary
    /// of a plan that ended and was folded.
    pub(super) fn sends(&self, plans: &[PlanRecord]) -> Result<SendTally> {
        let mut total = SendTally::default();
        for record in plans {
            for (module, rollout) in &record.plan.rollouts {
                let key = (record.plan.id.clone(), module.clone());
                let finished = rollout.outcome.is_some() || !record.plan.state.is_open();
                if finished {
                    let kept = self
                        .finished
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .get(&key)
                        .cloned();
                    if let Some(kept) = kept {
                        total.add(&kept);
                        continue;
                    }
                }
                let work = record.work.get(module);
                let mut tally = self.tally(record, module, rollout.sent, work)?;
                let expected = rollout.applied as u64;
                if tally.applied < expected && work.is_some_and(|work| work.summary.is_none()) {
                    // The plan was folded between reading its record and its nodes' (their
                    // records removed once the summary was written): the summary counts them.
                    let again = self.home.plans().get(&record.plan.id)?;
                    tally = self.tally(&again, module, rollout.sent, again.work.get(module))?;
                }
                total.add(&tally);
                // Kept only once it counts every node that applied: one read part way through
                // a fold is read again next time.
                if finished && tally.applied >= expected {
                    self.finished
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(key, tally);
                }
            }
        }
        Ok(total)
    }

    /// A rollout's sends (`sent`, from its plan's record) and the latency of each node that
    /// applied: from the summary of a plan that ended and was folded, else from each node's
    /// record of the rollout.
    fn tally(
        &self,
        record: &PlanRecord,
        module: &str,
        sent: usize,
        work: Option<&crate::plans::ModuleWork>,
    ) -> Result<SendTally> {
        let mut tally = SendTally {
            sends: sent as u64,
            ..SendTally::default()
        };
        if let Some(summary) = work.and_then(|work| work.summary.as_ref()) {
            for (secs, nodes) in &summary.latencies {
                for _ in 0..*nodes {
                    tally.add_latency(*secs);
                }
            }
        } else if work.is_some_and(|work| work.rollout.is_some()) {
            for node in self.home.plans().rollout_nodes(&record.plan.id, module)? {
                match node.progress {
                    NodeProgress::Applied { sent_at, at } => {
                        tally.add_latency(at.saturating_sub(sent_at));
                    }
                    NodeProgress::Waiting
                    | NodeProgress::Granting { .. }
                    | NodeProgress::GrantRetry { .. }
                    | NodeProgress::Sent { .. }
                    | NodeProgress::Held { .. } => {}
                }
            }
        }
        Ok(tally)
    }

    /// The answer for `page`: the home read at this moment and rendered; 500 when it cannot be
    /// read. The one place the pages are answered: the routes ([`super::router`]) call it for
    /// their paths. It reads the home, so it blocks: call it off an async runtime's workers.
    pub fn respond(&self, page: Page) -> Answer {
        let snapshot = match self.snapshot(mesh_store::clock::now()) {
            Ok(snapshot) => snapshot,
            Err(error) => {
                return Answer::text(
                    500,
                    format!("the status could not be read: {}\n", error.chain_line()),
                )
            }
        };
        match page {
            Page::Metrics => Answer {
                status: 200,
                content_type: super::metrics::CONTENT_TYPE,
                body: metrics(&snapshot),
            },
            Page::StatusJson => match snapshot.overview.json_document(&snapshot.verdict) {
                Ok(body) => Answer {
                    status: 200,
                    content_type: "application/json",
                    body,
                },
                Err(error) => Answer::text(500, format!("{}\n", error.chain_line())),
            },
            Page::Html(query) => Answer {
                status: 200,
                content_type: "text/html; charset=utf-8",
                body: page_of(&snapshot, query),
            },
        }
    }
}
