//! [`Pages`]: the [`Snapshot`] they read at one moment, and [`Pages::respond`], the answer to a
//! request's method and target with any HTTP stack.

use super::counts::SendTally;
use super::html::page;
use super::metrics::metrics;
use crate::error::Result;
use crate::home::Home;
use crate::plans::PlanRecord;
use crate::status::{self, Overview};
use mesh_plan::rollout::NodeProgress;
use std::collections::HashMap;
use std::sync::Mutex;

/// What the pages show, read at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// When (seconds since the epoch).
    pub now: u64,
    /// What `status` shows.
    pub overview: Overview,
    /// Every plan record, oldest first.
    pub plans: Vec<PlanRecord>,
    /// The rollouts' sends.
    pub sends: SendTally,
}

/// The status pages of one mesh home: what [`serve`] answers, or an embedding tool mounts
/// through [`Pages::respond`].
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

/// What `/` was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PageQuery {
    /// `?nodes=all`: list every node, a page at a time.
    pub all_nodes: bool,
    /// `?page=N` (from 1) of the node list.
    pub page: usize,
}

impl PageQuery {
    /// The query of a request target's `?…` part; what it does not know is ignored.
    pub fn parse(query: &str) -> PageQuery {
        let mut parsed = PageQuery {
            all_nodes: false,
            page: 1,
        };
        for pair in query.split('&') {
            match pair.split_once('=') {
                Some(("nodes", "all")) => parsed.all_nodes = true,
                Some(("page", n)) => parsed.page = n.parse().unwrap_or(1).max(1),
                _ => {}
            }
        }
        parsed
    }
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
        let plans = self.home.plans()?;
        let mut overview =
            status::overview_of_plans(&self.home, &plans, now, self.silent_after_secs)?;
        if overview.daemon.is_some() {
            if let Some(waiting) = self.merges_waiting.as_ref().and_then(|read| (read.0)()) {
                crate::heartbeat::with_waiting(&mut overview, waiting, now);
            }
        }
        let sends = self.sends(&plans)?;
        Ok(Snapshot {
            now,
            overview,
            plans,
            sends,
        })
    }

    /// The rollouts' sends: counted from the plan records; each applied node's latency read
    /// from its record of the rollout, once for a rollout that finished.
    fn sends(&self, plans: &[PlanRecord]) -> Result<SendTally> {
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
                let mut tally = SendTally {
                    sends: rollout.sent as u64,
                    ..SendTally::default()
                };
                if record
                    .work
                    .get(module)
                    .is_some_and(|work| work.rollout.is_some())
                {
                    for node in self.home.rollout_nodes(&record.plan.id, module)? {
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
                total.add(&tally);
                if finished {
                    self.finished
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(key, tally);
                }
            }
        }
        Ok(total)
    }

    /// The answer to `method` `target` (a request line's path and query): `/`, `/metrics`,
    /// `/status.json`; 404 for another path, 405 for a method other than `GET` or `HEAD`.
    /// It reads the home, so it blocks: call it off an async runtime's workers.
    pub fn respond(&self, method: &str, target: &str) -> Answer {
        if method != "GET" && method != "HEAD" {
            return Answer::text(405, "the status pages are read-only: GET or HEAD\n");
        }
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        if !matches!(path, "/" | "/metrics" | "/status.json") {
            return Answer::text(
                404,
                format!(
                    "no page {}: there are /, /metrics and /status.json\n",
                    path.chars().take(200).collect::<String>()
                ),
            );
        }
        let snapshot = match self.snapshot(mesh_host::now()) {
            Ok(snapshot) => snapshot,
            Err(error) => {
                return Answer::text(
                    500,
                    format!("the status could not be read: {}\n", error.chain_line()),
                )
            }
        };
        match path {
            "/metrics" => Answer {
                status: 200,
                content_type: "text/plain; version=0.0.4; charset=utf-8",
                body: metrics(&snapshot),
            },
            "/status.json" => match snapshot.overview.json_document() {
                Ok(body) => Answer {
                    status: 200,
                    content_type: "application/json",
                    body,
                },
                Err(error) => Answer::text(500, format!("{}\n", error.chain_line())),
            },
            _ => Answer {
                status: 200,
                content_type: "text/html; charset=utf-8",
                body: page(&snapshot, PageQuery::parse(query)),
            },
        }
    }
}
