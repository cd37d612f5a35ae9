//! What the status page and `/metrics` count, shared by both: the states' words, nodes by
//! state, resources by outcome, drift, each rollout as the page draws it, and the sends' tally.

use crate::plans::PlanRecord;
use crate::status::Overview;
use mesh_model::plan::RolloutOutcome;
use mesh_model::report::MachineState;
use mesh_plan::plans::state_word;
use std::collections::BTreeMap;

/// How many nodes one page of `?nodes=all` lists.
pub(crate) const NODES_PER_PAGE: usize = 500;

/// Up to how many nodes the page lists every node without being asked (`?nodes=all`).
pub(crate) const NODES_LISTED_UNASKED: usize = 100;

/// How many plans that are no longer open the page shows, newest first, after the open ones.
pub(crate) const FINISHED_PLANS_SHOWN: usize = 5;

/// How often the page reloads itself (a meta refresh), in seconds.
pub(crate) const REFRESH_SECS: u64 = 10;

/// The upper bounds, in seconds, of the send latency histogram's buckets (`+Inf` besides).
pub(crate) const LATENCY_BUCKETS: [u64; 10] = [1, 2, 5, 10, 30, 60, 120, 300, 600, 1800];

/// The state words nodes are counted by, in the order shown: a node silent for three
/// heartbeats is `silent`, one whose last report cannot be read `unreadable`, one never heard
/// `no-report`, else its last report's machine state.
pub(crate) const NODE_STATES: [&str; 6] = [
    "converged",
    "mid-change",
    "partial",
    "silent",
    "unreadable",
    "no-report",
];

/// The state words rollouts are counted by: where a module's rollout in a plan stands
/// (`left`: its plan was superseded or closed before it finished).
pub(crate) const ROLLOUT_STATES: [&str; 7] = [
    "not-started",
    "first",
    "rest",
    "held",
    "done",
    "stopped",
    "left",
];

/// The resource outcomes counted over every node's last report.
pub(crate) const RESOURCE_OUTCOMES: [&str; 8] = [
    "applied",
    "unchanged",
    "failed",
    "stuck",
    "held-still",
    "skipped",
    "waiting",
    "removed",
];

/// The sends of rollouts and how long each node took from its send to the report that
/// applied it (seconds).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendTally {
    /// Nodes sent a rollout's declaration, over every plan (the plan records' counters).
    pub sends: u64,
    /// Sends answered by a report that applied them.
    pub applied: u64,
    /// The sum of their latencies, in seconds.
    pub latency_sum: u64,
    /// How many latencies were at most each of [`LATENCY_BUCKETS`] (not cumulative).
    pub buckets: [u64; LATENCY_BUCKETS.len()],
}

impl SendTally {
    pub(super) fn add_latency(&mut self, secs: u64) {
        self.applied += 1;
        self.latency_sum += secs;
        if let Some(at) = LATENCY_BUCKETS.iter().position(|bound| secs <= *bound) {
            self.buckets[at] += 1;
        }
    }

    pub(super) fn add(&mut self, other: &SendTally) {
        self.sends += other.sends;
        self.applied += other.applied;
        self.latency_sum += other.latency_sum;
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets) {
            *mine += theirs;
        }
    }
}

/// A node's state word (one of [`NODE_STATES`]).
pub(crate) fn node_state(node: &crate::push::NodeStatus) -> &'static str {
    if node.silent_since.is_some() {
        return "silent";
    }
    if node.unreadable.is_some() {
        return "unreadable";
    }
    match node.report.as_ref().map(|r| r.machine) {
        None => "no-report",
        Some(MachineState::Converged) => "converged",
        Some(MachineState::MidChange) => "mid-change",
        Some(MachineState::Partial) => "partial",
    }
}

/// Nodes by state word, every word of [`NODE_STATES`] present.
pub(crate) fn nodes_by_state(overview: &Overview) -> BTreeMap<&'static str, usize> {
    let mut counts: BTreeMap<&'static str, usize> = NODE_STATES.iter().map(|s| (*s, 0)).collect();
    for node in &overview.nodes {
        *counts.entry(node_state(node)).or_default() += 1;
    }
    counts
}

/// Resources by outcome over every node's last report, every word of [`RESOURCE_OUTCOMES`]
/// present.
pub(crate) fn resources_by_outcome(overview: &Overview) -> BTreeMap<&'static str, usize> {
    let mut counts: BTreeMap<&'static str, usize> =
        RESOURCE_OUTCOMES.iter().map(|s| (*s, 0)).collect();
    for report in overview.nodes.iter().filter_map(|n| n.report.as_ref()) {
        for outcome in report.resources.values() {
            *counts.entry(outcome.word()).or_default() += 1;
        }
    }
    counts
}

/// Drifted resources over every node's last report (the rule “Drift is seen, and reported even when
/// corrected”).
pub(crate) fn drifted(overview: &Overview) -> usize {
    overview
        .nodes
        .iter()
        .filter_map(|n| n.report.as_ref())
        .map(|r| r.drift.len())
        .sum()
}

/// Where one module's rollout in one plan stands, as the page draws it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RolloutView {
    /// The module.
    pub module: String,
    /// One of [`ROLLOUT_STATES`].
    pub state: &'static str,
    /// The machine sent first, once chosen.
    pub first: Option<String>,
    /// Its counters, once the rollout began.
    pub progress: Option<crate::RolloutProgress>,
    /// Why it stopped, and where.
    pub stopped: Option<(String, String)>,
    /// Whether its build was made.
    pub built: bool,
}

/// Every module's rollout in `record`, in tier order.
pub(crate) fn rollouts(record: &PlanRecord) -> Vec<RolloutView> {
    let plan = &record.plan;
    plan.tiers
        .iter()
        .flatten()
        .map(|module| {
            let rollout = plan.rollouts.get(module);
            let work = record.work.get(module);
            let progress = work
                .and_then(|w| w.rollout.as_ref())
                .map(|kept| crate::RolloutProgress::of_parts(&plan.id, module, &kept.state));
            let stopped = match rollout.and_then(|r| r.outcome.as_ref()) {
                Some(RolloutOutcome::Stopped { node, reason }) => {
                    Some((node.clone(), reason.clone()))
                }
                Some(RolloutOutcome::Done) | None => None,
            };
            let state = match rollout.and_then(|r| r.outcome.as_ref()) {
                Some(RolloutOutcome::Done) => "done",
                Some(RolloutOutcome::Stopped { .. }) => "stopped",
                None if !plan.state.is_open() => "left",
                None => match &progress {
                    Some(progress) if progress.applied > 0 || progress.in_flight > 0 => {
                        progress.stage
                    }
                    Some(progress) => match progress.stage {
                        "first" if progress.waiting_on.is_none() => "not-started",
                        stage => stage,
                    },
                    None => "not-started",
                },
            };
            RolloutView {
                module: module.clone(),
                state,
                first: rollout.and_then(|r| r.first.clone()),
                progress,
                stopped,
                built: work.is_some_and(|w| w.build.is_some()),
            }
        })
        .collect()
}

/// Rollouts by state over every plan, every word of [`ROLLOUT_STATES`] present.
pub(crate) fn rollouts_by_state(plans: &[PlanRecord]) -> BTreeMap<&'static str, usize> {
    let mut counts: BTreeMap<&'static str, usize> =
        ROLLOUT_STATES.iter().map(|s| (*s, 0)).collect();
    for record in plans {
        for view in rollouts(record) {
            *counts.entry(view.state).or_default() += 1;
        }
    }
    counts
}

/// Plans by state word, every state present.
pub(crate) fn plans_by_state(plans: &[PlanRecord]) -> BTreeMap<&'static str, usize> {
    let mut counts: BTreeMap<&'static str, usize> = [
        "building",
        "rolling-out",
        "done",
        "stopped",
        "superseded",
        "closed",
    ]
    .iter()
    .map(|s| (*s, 0))
    .collect();
    for record in plans {
        *counts.entry(state_word(&record.plan.state)).or_default() += 1;
    }
    counts
}
