//! `status`: every node's last report, and beside it what the plans are doing — open plans and
//! what each waits on (to the second), the modules behind, stopped rollouts with node and
//! reason, nodes stuck, mid-change or with a window open, and every failure recorded as a
//! problem until it is resolved (`mesh_store::problems`; the rules “Behind means an open plan has
//! not done it yet” and “Nothing fails silently”).
//!
//! "Behind" is read from the open plans only ([`mesh_plan::behind`]): no second comparison of
//! commits (the incident behind “Behind means an open plan has not done it yet”). A node a
//! finished rollout passed over because it was not running is behind on that module until it
//! is sent ([`crate::status::behind`]).

pub(crate) mod acks;
pub(crate) mod alert;
pub(crate) mod behind;
pub(crate) mod pending;

pub use crate::intent::{current_for_status, fingerprint, keep_current, Kept};
pub use acks::{ack, Acked, Acks, DEFAULT_DRIFT_RETENTION_SECS};
pub use alert::{
    clock_skew_words, judge, Health, Reason, ReasonKind, Verdict, DEFAULT_MID_CHANGE_AFTER_SECS,
};
pub use behind::{nodes_behind, to_send, BehindPushed};
pub use pending::{Difference, PendingNode};

use crate::error::Result;
use crate::home::Home;
use crate::plans::PlanRecord;
use crate::push::{self, NodeStatus};
use mesh_model::plan::{PlanState, RolloutOutcome};
use mesh_model::report::{MachineState, Outcome, WindowSummary};
use mesh_plan::plans::{state_word, Behind};
use mesh_plan::rollout::NodeProgress;
use serde::Serialize;
use std::collections::BTreeSet;

/// Everything `status` shows.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Overview {
    /// Every node, as before.
    pub nodes: Vec<NodeStatus>,
    /// The open plans, oldest first.
    pub open_plans: Vec<OpenPlan>,
    /// The modules behind: those the open plans have yet to build or roll out.
    pub behind: Vec<Behind>,
    /// The nodes a finished rollout passed over because they were not running, until each is
    /// sent ([`crate::status::behind`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes_behind: Vec<crate::status::behind::NodeBehind>,
    /// Rollouts (and builds) that stopped, in plans not closed by hand, until a later plan
    /// finishes the module or a person closes a later plan that took it in.
    pub stopped: Vec<StoppedRollout>,
    /// Nodes whose last report needs a person's eye.
    pub attention: Vec<NodeAttention>,
    /// Nodes whose intent differs from what they were sent ([`crate::status::pending`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<crate::status::pending::PendingNode>,
    /// Nodes an open plan's rollout held because their running container's data would move
    /// The rule “A moved mount is held”: `--move MODULE` sends them.
    #[serde(default)]
    pub held: Vec<HeldNode>,
    /// Failures recorded where they were seen (a merge the daemon could not plan, the
    /// collector's answer, a held push, failed grants), until resolved (the rule “Nothing fails
    /// silently”).
    pub problems: Vec<mesh_store::problems::Problem>,
    /// On a fleet, the nodes still proving themselves to the bus with a password, not yet
    /// enrolled with an NKey (`node enroll`; the rule “Secrets never leave their owner”); empty in
    /// the embedded default.
    #[serde(default)]
    pub on_passwords: Vec<String>,
    /// The daemon as its last heartbeat shows it (`mesh-controller serve`; `None`: no daemon
    /// ever beat): silent, and the merges waiting on its consumer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon: Option<crate::bus::heartbeat::DaemonSeen>,
}

/// A node a rollout held for a move, or for orphaned settings.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct HeldNode {
    /// The plan.
    pub plan: String,
    /// The module.
    pub module: String,
    /// The node.
    pub node: String,
    /// The moves: module, container, mount and both host directories.
    pub moves: Vec<mesh_plan::Move>,
    /// The settings its layers hold that the module's new version orphans (the rule "an
    /// orphaned setting is a removal").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub orphans: Vec<mesh_plan::Orphan>,
    /// The settings its modules require that no layer sets for it: it is sent once a layer
    /// sets them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unset: Vec<mesh_plan::Unset>,
}

/// An open plan and what it waits on.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct OpenPlan {
    /// The plan.
    pub id: String,
    /// Its repository.
    pub repository: String,
    /// Its branch.
    pub branch: String,
    /// Its commit.
    pub commit: String,
    /// Its state in a word.
    pub state: &'static str,
    /// What it waits on, in words.
    pub waits_on: String,
    /// Since when (seconds since the epoch).
    pub since: u64,
    /// For how long, in seconds, when status was made.
    pub waiting_secs: u64,
}

/// A rollout that stopped.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct StoppedRollout {
    /// The plan.
    pub plan: String,
    /// The module.
    pub module: String,
    /// The node it stopped at (empty: its build failed, before any node).
    pub node: String,
    /// Why.
    pub reason: String,
    /// The declaration the node was sent back, when the module says `on-failure = "revert"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reverted: Option<String>,
}

/// A node whose last report says it is stuck, mid-change, or has a window open.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct NodeAttention {
    /// The node.
    pub node: String,
    /// The machine was left mid-change.
    pub mid_change: bool,
    /// Resources stuck: id and last reason.
    pub stuck: Vec<(String, String)>,
    /// Resources that failed, wait to be tried again after failing, or were skipped behind
    /// one that did not apply: id and reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<(String, String)>,
    /// Windows open.
    pub windows: Vec<WindowSummary>,
    /// On a fleet: nothing heard from it for three heartbeats, since then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silent_since: Option<u64>,
    /// Managed resources found changed by hand, a container found dead (the rules “Drift is seen,
    /// and reported even when corrected” and “A container is applied only when it runs”): left as
    /// found, or put back within the retention and not acknowledged
    /// ([`crate::status::acks::shows`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<mesh_model::report::Drift>,
    /// Its last report could not be read (*no single party can blind the fleet*).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<crate::home::heard::UnreadableReport>,
    /// Its host could not apply at all (its state directory cannot be written: full,
    /// read-only, an I/O error), with the system's reason
    /// ([`mesh_model::report::Report::host_failure`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_failure: Option<String>,
    /// Its clock is off the bus's by more than [`crate::push::CLOCK_SKEW_LIMIT_SECS`]: by how
    /// many seconds (ahead when positive), as NTP monitoring would say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_skew_secs: Option<i64>,
}

impl NodeAttention {
    /// Whether nothing is left to say of the node.
    fn is_empty(&self) -> bool {
        !self.mid_change
            && self.stuck.is_empty()
            && self.failed.is_empty()
            && self.windows.is_empty()
            && self.silent_since.is_none()
            && self.drift.is_empty()
            && self.unreadable.is_none()
            && self.host_failure.is_none()
            && self.clock_skew_secs.is_none()
    }
}

/// What `status` is judged with beside `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusOptions {
    /// On a fleet, seconds without a report after which a node is silent.
    pub silent_after_secs: u64,
    /// Seconds a drift that was put back is shown after it was seen.
    pub drift_retention_secs: u64,
}

impl Default for StatusOptions {
    fn default() -> StatusOptions {
        StatusOptions {
            silent_after_secs: push::SILENT_AFTER_SECS,
            drift_retention_secs: crate::status::acks::DEFAULT_DRIFT_RETENTION_SECS,
        }
    }
}

impl Overview {
    /// The document `status --output json` prints, newline and all; `/status.json` answers the
    /// same bytes ([`crate::http`]).
    ///
    /// # Errors
    /// [`crate::Error::Internal`] if it could not be encoded (it holds strings, numbers and
    /// maps keyed by strings, so it always is).
    pub fn json_document(&self, verdict: &Verdict) -> Result<String> {
        /// The overview with its verdict first: what it comes to and every reason why.
        #[derive(Serialize)]
        struct Document<'a> {
            verdict: &'a Verdict,
            #[serde(flatten)]
            overview: &'a Overview,
        }
        let document = Document {
            verdict,
            overview: self,
        };
        let mut text =
            serde_json::to_string_pretty(&document).map_err(|e| crate::Error::Internal {
                doing: "encoding the status as JSON".to_owned(),
                source: Some(Box::new(e)),
            })?;
        text.push('\n');
        Ok(text)
    }

    /// Whether anything needs a person: a node's attention, a node held for a move, a stopped
    /// rollout, a failure recorded. `status` exits by [`crate::status::alert::judge`], which also
    /// tells a node mid-change within its deadline (in progress) from one past it.
    pub fn needs_attention(&self) -> bool {
        !self.attention.is_empty()
            || !self.held.is_empty()
            || !self.stopped.is_empty()
            || !self.problems.is_empty()
            || self.pending.iter().any(|node| node.plan.is_none())
            || self
                .daemon
                .as_ref()
                .is_some_and(|daemon| !daemon.attention().is_empty())
    }

    /// Takes the merges waiting on the daemon's consumer as read from the bus (`waiting`, known
    /// while the daemon is stopped too) in place of its last heartbeat's, judged again at
    /// `now`; nothing changes when no daemon ever beat.
    pub fn set_merges_waiting(&mut self, waiting: mesh_bus::jetstream::MergesWaiting, now: u64) {
        if let Some(daemon) = self.daemon.take() {
            self.daemon = Some(
                crate::bus::heartbeat::seen(daemon.heartbeat, Some(waiting), now)
                    .waited_on_by(daemon.open_plans),
            );
        }
    }
}

/// What `status` shows, at `now`; on a fleet a node unheard for more than `silent_after_secs`
/// is silent.
///
/// # Errors
/// When the home cannot be read.
pub fn overview(home: &Home, now: u64, silent_after_secs: u64) -> Result<Overview> {
    overview_with(
        home,
        now,
        &StatusOptions {
            silent_after_secs,
            ..StatusOptions::default()
        },
    )
}

/// [`overview`] with every option given.
///
/// # Errors
/// When the home cannot be read.
pub fn overview_with(home: &Home, now: u64, options: &StatusOptions) -> Result<Overview> {
    overview_of_plans_with(home, &home.plans().all()?, now, options)
}

/// [`overview`] with the plan records already read (`home.plans().all()`), for a caller that shows
/// them too (the status page) and reads them once.
///
/// # Errors
/// When the home cannot be read.
pub(crate) fn overview_of_plans(
    home: &Home,
    records: &[PlanRecord],
    now: u64,
    silent_after_secs: u64,
) -> Result<Overview> {
    let options = StatusOptions {
        silent_after_secs,
        ..StatusOptions::default()
    };
    overview_of_plans_with(home, records, now, &options)
}

/// [`overview_of_plans`] with every option given: a drift put back is shown for
/// `options.drift_retention_secs`, until a person acknowledges it (`status ack`).
///
/// # Errors
/// When the home cannot be read.
pub(crate) fn overview_of_plans_with(
    home: &Home,
    records: &[PlanRecord],
    now: u64,
    options: &StatusOptions,
) -> Result<Overview> {
    let mut nodes = push::status(home, now, options.silent_after_secs)?;
    let inventory = home.inventory()?;
    let pending = crate::status::pending::pending(
        home,
        &mut nodes,
        &home.intents().all()?,
        &|node| inventory.file.nodes.get(node).is_some_and(|n| n.running),
        records,
    )?;
    let plans: Vec<_> = records.iter().map(|r| r.plan.clone()).collect();
    let open_plans = records
        .iter()
        .filter(|r| r.plan.state.is_open())
        .map(|r| {
            let (waits_on, since) = waits_on(home, r)?;
            Ok(OpenPlan {
                id: r.plan.id.clone(),
                repository: r.plan.repository.clone(),
                branch: r.plan.branch.clone(),
                commit: r.plan.commit.clone(),
                state: state_word(&r.plan.state),
                waits_on,
                since,
                waiting_secs: now.saturating_sub(since),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut stopped = Vec::new();
    for (index, record) in records.iter().enumerate() {
        if matches!(record.plan.state, PlanState::Closed { .. }) {
            // A person closed it: they decided about what it left.
            continue;
        }
        for (module, rollout) in &record.plan.rollouts {
            let Some(RolloutOutcome::Stopped { node, reason }) = &rollout.outcome else {
                continue;
            };
            // Until a later plan of the repository finished the module, or a person closed a
            // later plan that had taken it in.
            let settled_since = records[index + 1..].iter().any(|later| {
                later.plan.repository == record.plan.repository
                    && later.plan.branch == record.plan.branch
                    && later.plan.modules.contains(module)
                    && (matches!(later.plan.state, PlanState::Closed { .. })
                        || later
                            .plan
                            .rollouts
                            .get(module)
                            .is_some_and(|r| matches!(r.outcome, Some(RolloutOutcome::Done))))
            });
            if !settled_since {
                stopped.push(StoppedRollout {
                    plan: record.plan.id.clone(),
                    module: module.clone(),
                    node: node.clone(),
                    reason: reason.clone(),
                    reverted: record
                        .work
                        .get(module)
                        .and_then(|work| work.reverted.get(node))
                        .cloned(),
                });
            }
        }
    }
    let acks = crate::status::acks::acks_of_all(home)?;
    let mut attention = attention(&nodes);
    for node in &mut attention {
        let acked = acks.get(&node.node);
        node.drift
            .retain(|d| crate::status::acks::shows(d, acked, now, options.drift_retention_secs));
    }
    attention.retain(|node| !node.is_empty());
    let mut held = Vec::new();
    for record in records.iter().filter(|r| r.plan.state.is_open()) {
        for (module, rollout) in &record.plan.rollouts {
            if rollout.held == 0 {
                continue;
            }
            for node in home.plans().rollout_nodes(&record.plan.id, module)? {
                if let NodeProgress::Held {
                    moves,
                    orphans,
                    unset,
                } = node.progress
                {
                    held.push(HeldNode {
                        plan: record.plan.id.clone(),
                        module: module.clone(),
                        node: node.node,
                        moves,
                        orphans,
                        unset,
                    });
                }
            }
        }
    }
    let daemon = crate::bus::heartbeat::last(home)?.map(|beat| {
        crate::bus::heartbeat::seen(beat, None, now)
            .waited_on_by(open_plans.iter().map(|plan| plan.id.clone()).collect())
    });
    Ok(Overview {
        nodes,
        open_plans,
        behind: mesh_plan::behind(&plans),
        nodes_behind: crate::status::behind::nodes_behind(home)?,
        stopped,
        attention,
        pending,
        held,
        problems: home.problems().all()?,
        on_passwords: if home.records_on_bus() {
            crate::bus::enroll::nodes_on_passwords(home, &home.inventory()?)?
        } else {
            Vec::new()
        },
        daemon,
    })
}

/// The nodes whose last report says failed, stuck, mid-change, drift, a window open or a host
/// that could not apply at all, or could not be read (every
/// drift the report holds: [`overview_of_plans_with`] keeps only what is still shown).
pub fn attention(nodes: &[NodeStatus]) -> Vec<NodeAttention> {
    nodes
        .iter()
        .filter_map(|n| {
            let clock_skew_secs = n
                .clock_offset_secs
                .filter(|off| off.unsigned_abs() > crate::push::CLOCK_SKEW_LIMIT_SECS);
            if let Some(unreadable) = &n.unreadable {
                return Some(NodeAttention {
                    node: n.node.clone(),
                    mid_change: false,
                    stuck: Vec::new(),
                    failed: Vec::new(),
                    windows: Vec::new(),
                    silent_since: n.silent_since,
                    drift: Vec::new(),
                    unreadable: Some(unreadable.clone()),
                    host_failure: None,
                    clock_skew_secs,
                });
            }
            let report = n.report.as_ref()?;
            // When each drift was seen, by the bus's clock: its age is judged against the
            // controller's, never the host's clock against it.
            let drift: Vec<mesh_model::report::Drift> = report
                .drift
                .iter()
                .map(|d| mesh_model::report::Drift {
                    seen_at: n.on_bus_clock(d.seen_at),
                    ..d.clone()
                })
                .collect();
            let stuck: Vec<(String, String)> = report
                .resources
                .iter()
                .filter_map(|(id, outcome)| match outcome {
                    Outcome::Stuck { last_reason, .. } => Some((id.clone(), last_reason.clone())),
                    Outcome::Applied { .. }
                    | Outcome::Unchanged
                    | Outcome::Failed { .. }
                    | Outcome::HeldStill { .. }
                    | Outcome::Skipped { .. }
                    | Outcome::Waiting { .. }
                    | Outcome::Removed { .. } => None,
                })
                .collect();
            let failed: Vec<(String, String)> = report
                .resources
                .iter()
                .filter_map(|(id, outcome)| match outcome {
                    Outcome::Failed { reason, .. } => Some((id.clone(), reason.clone())),
                    Outcome::Waiting { last_reason, .. } => Some((id.clone(), last_reason.clone())),
                    Outcome::Skipped { gated_by } => Some((
                        id.clone(),
                        format!("skipped: it comes after `{gated_by}`, which did not apply"),
                    )),
                    Outcome::Applied { .. }
                    | Outcome::Unchanged
                    | Outcome::Stuck { .. }
                    | Outcome::HeldStill { .. }
                    | Outcome::Removed { .. } => None,
                })
                .collect();
            let mid_change = report.machine == MachineState::MidChange;
            let host_failure = report.host_failure.clone();
            (mid_change
                || host_failure.is_some()
                || !stuck.is_empty()
                || !failed.is_empty()
                || !report.windows.is_empty()
                || n.silent_since.is_some()
                || !drift.is_empty()
                || clock_skew_secs.is_some())
            .then(|| NodeAttention {
                node: n.node.clone(),
                mid_change,
                stuck,
                failed,
                windows: report.windows.clone(),
                silent_since: n.silent_since,
                drift,
                unreadable: None,
                host_failure,
                clock_skew_secs,
            })
        })
        .collect()
}

/// What an open plan waits on, and since when: the first module, in tier order, that is not
/// finished, and in it the bus node or the first node by name still to answer (its nodes'
/// records are read for that one module only).
///
/// # Errors
/// A node's record of the rollout cannot be read.
pub fn waits_on(home: &Home, record: &PlanRecord) -> Result<(String, u64)> {
    let plan = &record.plan;
    for (index, tier) in plan.tiers.iter().enumerate() {
        for module in tier {
            let rollout = plan.rollouts.get(module);
            if rollout.is_some_and(|r| r.outcome.is_some()) || record.held.contains(module) {
                continue;
            }
            let work = record.work.get(module);
            let Some(build) = work.and_then(|w| w.build.as_ref()) else {
                return Ok((
                    format!("the build of `{module}` (tier {index})"),
                    plan.made_at,
                ));
            };
            let Some(kept) = work.and_then(|w| w.rollout.as_ref()) else {
                return Ok((
                    format!("the rollout of `{module}` to begin (tier {index}, built)"),
                    build.at,
                ));
            };
            let state = &kept.state;
            if state.stage == mesh_plan::rollout::Stage::Held {
                // Held for a move, for orphaned settings or for a required setting unset: each
                // node's record says which.
                let nodes = home.plans().rollout_nodes(&plan.id, module)?;
                let orphaned = nodes
                    .iter()
                    .filter(|node| {
                        matches!(&node.progress, NodeProgress::Held { orphans, .. }
                            if !orphans.is_empty())
                    })
                    .count();
                let unset: BTreeSet<String> = nodes
                    .iter()
                    .filter_map(|node| match &node.progress {
                        NodeProgress::Held { unset, .. } if !unset.is_empty() => Some(
                            unset
                                .iter()
                                .map(ToString::to_string)
                                .collect::<Vec<_>>()
                                .join(", "),
                        ),
                        NodeProgress::Held { .. }
                        | NodeProgress::Waiting
                        | NodeProgress::Granting { .. }
                        | NodeProgress::GrantRetry { .. }
                        | NodeProgress::Sent { .. }
                        | NodeProgress::Applied { .. } => None,
                    })
                    .collect();
                let unset_nodes = nodes
                    .iter()
                    .filter(|node| {
                        matches!(&node.progress, NodeProgress::Held { unset, .. }
                            if !unset.is_empty())
                    })
                    .count();
                let moved = state.held.saturating_sub(orphaned + unset_nodes);
                let mut why = Vec::new();
                if moved > 0 {
                    why.push(format!(
                        "{moved} node(s) held, their data would move (tier {index}; resuming \
                         the plan with `{module}`'s move allowed sends them)"
                    ));
                }
                if orphaned > 0 {
                    why.push(format!(
                        "{orphaned} node(s) held, `{module}`'s version orphans settings their \
                         layers hold (tier {index}; `settings rename {module} OLD NEW`, or a \
                         `settings set` that replaces the layer, ends it; resuming the plan with \
                         `{module}`'s settings allowed to drop sends them without)"
                    ));
                }
                if unset_nodes > 0 {
                    why.push(format!(
                        "{unset_nodes} node(s) held, a setting required is set by no layer \
                         ({}; tier {index}; a layer setting it sends them)",
                        unset.into_iter().collect::<Vec<_>>().join("; ")
                    ));
                }
                return Ok((why.join("; "), build.at));
            }
            let nodes: Vec<(String, NodeProgress)> = match state.stage {
                mesh_plan::rollout::Stage::BusNode => state.bus_node.iter().cloned().collect(),
                mesh_plan::rollout::Stage::NotStarted
                | mesh_plan::rollout::Stage::FirstNode
                | mesh_plan::rollout::Stage::Rest
                | mesh_plan::rollout::Stage::Held
                | mesh_plan::rollout::Stage::Done
                | mesh_plan::rollout::Stage::Stopped => home
                    .plans()
                    .rollout_nodes(&plan.id, module)?
                    .into_iter()
                    .map(|n| (n.node, n.progress))
                    .collect(),
            };
            let waiting = nodes
                .iter()
                .find_map(|(node, progress)| match progress {
                    NodeProgress::Sent { at, .. } => Some((
                        format!("`{node}` to report `{module}` applied (tier {index})"),
                        *at,
                    )),
                    NodeProgress::Granting { since } => Some((
                        format!("the grants of `{node}` for `{module}` (tier {index})"),
                        *since,
                    )),
                    NodeProgress::GrantRetry { since, reason, .. } => Some((
                        format!(
                            "the grants of `{node}` for `{module}`, which failed: {reason} (tier {index})"
                        ),
                        *since,
                    )),
                    NodeProgress::Waiting
                    | NodeProgress::Held { .. }
                    | NodeProgress::Applied { .. } => None,
                });
            return Ok(waiting.unwrap_or_else(|| {
                (
                    format!("the rollout of `{module}` (tier {index})"),
                    build.at,
                )
            }));
        }
    }
    Ok(("nothing: every module is finished".to_owned(), plan.made_at))
}

/// The lines a watcher without a terminal is told (`status --watch`), between the overview it
/// last showed (`None`: the first) and `after`: one per node whose latest report changed (its
/// machine state, its declaration, whether it is current), that fell silent or was heard
/// again, or whose attention changed; one per stopped rollout and problem newly listed.
pub fn changes(before: Option<&Overview>, after: &Overview) -> Vec<String> {
    fn seen(node: &NodeStatus) -> (Option<MachineState>, Option<&str>, bool, Option<u64>) {
        (
            node.report.as_ref().map(|r| r.machine),
            node.report.as_ref().map(|r| r.declaration.as_str()),
            node.current,
            node.silent_since,
        )
    }
    let mut out = Vec::new();
    for node in &after.nodes {
        let was = before.and_then(|b| b.nodes.iter().find(|n| n.node == node.node));
        let attention_now = after.attention.iter().find(|a| a.node == node.node);
        let attention_was = before.and_then(|b| b.attention.iter().find(|a| a.node == node.node));
        let attention_changed =
            attention_now.map(attention_words) != attention_was.map(attention_words);
        if was.map(seen) == Some(seen(node)) && !attention_changed {
            continue;
        }
        let mut line = format!("{}: ", node.node);
        match (&node.report, node.silent_since) {
            (_, Some(since)) => {
                line.push_str(&format!(
                    "silent since {}",
                    mesh_store::clock::rfc3339(since)
                ));
            }
            (None, None) => match &node.unreadable {
                Some(unreadable) => line.push_str(&unreadable.to_string()),
                None => line.push_str("no report"),
            },
            (Some(report), None) => {
                line.push_str(node.machine_word().unwrap_or_default());
                let short: String = report.declaration.chars().take(19).collect();
                line.push_str(&format!(
                    ", declaration {short}… {}",
                    if node.current {
                        "(current)"
                    } else {
                        "(not the one sent)"
                    }
                ));
            }
        }
        if let Some(attention) = attention_now {
            line.push_str(&format!(
                "; needs attention: {}",
                attention_words(attention)
            ));
        }
        out.push(line);
    }
    for stopped in &after.stopped {
        let already = before.is_some_and(|b| {
            b.stopped
                .iter()
                .any(|s| s.plan == stopped.plan && s.module == stopped.module)
        });
        if !already {
            out.push(format!(
                "rollout of `{}` ({}) stopped at `{}`: {}",
                stopped.module, stopped.plan, stopped.node, stopped.reason
            ));
        }
    }
    for problem in &after.problems {
        let already = before.is_some_and(|b| b.problems.contains(problem));
        if !already {
            out.push(format!("problem: {}: {}", problem.subject, problem.what));
        }
    }
    out
}

/// What a node's attention says, in words.
pub(crate) fn attention_words(attention: &NodeAttention) -> String {
    let mut words = Vec::new();
    if let Some(reason) = &attention.host_failure {
        words.push(format!("the host cannot apply: {reason}"));
    }
    if attention.mid_change {
        words.push("mid-change".to_owned());
    }
    for (id, reason) in &attention.stuck {
        words.push(format!("`{id}` stuck: {reason}"));
    }
    for (id, reason) in &attention.failed {
        words.push(format!("`{id}` failed: {reason}"));
    }
    for window in &attention.windows {
        words.push(format!("window `{}` open", window.step));
    }
    for drift in &attention.drift {
        words.push(format!(
            "drift of `{}` {}: {} → {}",
            drift.resource, drift.field, drift.was, drift.found
        ));
    }
    if let Some(since) = attention.silent_since {
        words.push(format!(
            "silent since {}",
            mesh_store::clock::rfc3339(since)
        ));
    }
    if let Some(unreadable) = &attention.unreadable {
        words.push(unreadable.to_string());
    }
    if let Some(skew) = attention.clock_skew_secs {
        words.push(alert::clock_skew_words(skew));
    }
    words.join("; ")
}

/// Every report the hosts publish, as heard on the bus (`status --watch`, the rule “Every report is
/// heard, from one source”): the node of each, in the order heard. A subscription of its own on
/// `mesh.report.*`, kept by a thread of its own; what status shows is still read from the reports
/// stream ([`overview`]).
#[derive(Debug)]
pub struct ReportWatch {
    heard: std::sync::mpsc::Receiver<String>,
}

impl ReportWatch {
    /// Subscribes to every node's reports as the controller; returns once the subscription is
    /// in force (a report published after this returns is heard).
    ///
    /// # Errors
    /// When the bus cannot be reached or refuses the subscription.
    pub fn open(home: &Home, bus: &crate::bus::credentials::BusConfig) -> Result<ReportWatch> {
        use mesh_bus::Bus as _;
        let mut options = crate::bus::credentials::controller_options(home, bus)?;
        options.name = Some("mesh-controller status, watching".to_owned());
        let (sender, heard) = std::sync::mpsc::channel();
        let (ready, in_force) = std::sync::mpsc::channel::<std::result::Result<(), String>>();
        std::thread::Builder::new()
            .name("status-watch".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = ready.send(Err(format!("cannot start a runtime: {error}")));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let subscribed = async {
                        let bus = mesh_bus::NatsBus::connect(&options)
                            .await
                            .map_err(|e| e.to_string())?;
                        let reports = bus
                            .subscribe(mesh_bus::subjects::ALL_REPORTS)
                            .await
                            .map_err(|e| e.to_string())?;
                        bus.round_trip().await.map_err(|e| e.to_string())?;
                        Ok::<_, String>((bus, reports))
                    };
                    let (_bus, mut reports) = match subscribed.await {
                        Ok(subscribed) => subscribed,
                        Err(error) => {
                            let _ = ready.send(Err(error));
                            return;
                        }
                    };
                    let _ = ready.send(Ok(()));
                    let prefix = mesh_bus::subjects::report("");
                    while let Some(message) = reports.next().await {
                        let node = message
                            .subject
                            .strip_prefix(&prefix)
                            .unwrap_or(&message.subject)
                            .to_owned();
                        if sender.send(node).is_err() {
                            return;
                        }
                    }
                });
            })
            .map_err(|e| crate::Error::Bus {
                doing: format!("starting the thread that hears the reports on {}", bus.url),
                source: Some(Box::new(e)),
            })?;
        match in_force.recv() {
            Ok(Ok(())) => Ok(ReportWatch { heard }),
            Ok(Err(error)) => Err(crate::Error::Bus {
                doing: format!("hearing the reports on {}: {error}", bus.url),
                source: None,
            }),
            Err(_) => Err(crate::Error::Bus {
                doing: format!(
                    "hearing the reports on {}: the watch's thread stopped",
                    bus.url
                ),
                source: None,
            }),
        }
    }

    /// The node of the next report heard within `timeout` (`None`: none was). Reports heard
    /// meanwhile are taken too: one redraw answers all of them.
    ///
    /// # Errors
    /// When the subscription ended (the bus went away for good).
    pub fn next(&self, timeout: std::time::Duration) -> Result<Option<Vec<String>>> {
        use std::sync::mpsc::RecvTimeoutError;
        let first = match self.heard.recv_timeout(timeout) {
            Ok(node) => node,
            Err(RecvTimeoutError::Timeout) => return Ok(None),
            Err(RecvTimeoutError::Disconnected) => {
                return Err(crate::Error::Bus {
                    doing: "hearing the reports: the subscription ended".to_owned(),
                    source: None,
                })
            }
        };
        let mut nodes = vec![first];
        nodes.extend(self.heard.try_iter());
        Ok(Some(nodes))
    }
}
