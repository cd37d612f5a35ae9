//! A module's rollout in waves as a state machine: events in, actions out, `now` an argument
//! (the rules “A change reaches the fleet in waves” and “The gate judges each node from its own
//! send”).
//!
//! Start at [`step`]: the controller feeds it [`WaveEvent`]s — a start, a node sent (with the
//! digest and send id of what *this plan* sent it), a node's report, a clock tick, a person's
//! approve, pause, resume or abort — and carries out the [`WaveAction`]s it returns, in order.
//! It stands beside [`crate::rollout::step`], which keeps grants, the bus node first and held
//! moves for one send: here is only which nodes go when, and when a rollout stops.
//!
//! # The rules it keeps
//! - **Waves in order.** No node of a wave is sent before every node of the wave before it has
//!   answered; at most `max-parallel` nodes are under way at once.
//! - **Only this plan's answers count.** A node answers when its report names the digest this
//!   plan sent it and, when the send had an id, that id: a report from before the send — of the
//!   previous revision (argo-cd#29410), of an earlier send of the same declaration, or heard
//!   before the send was made — never counts.
//! - **Silence is a failure.** A node that has not answered `deadline` seconds after it was
//!   begun (by the controller's clock, the `now` given; never the host's) counts as failed. It
//!   neither hangs the wave nor is left out of the budget.
//! - **The budget.** When the failed share of a wave's answered nodes exceeds the budget, once
//!   `min` have answered, the rollout stops ([`WaveAction::BudgetExceeded`], naming the wave,
//!   the budget and each failed node with its reason): no further node is sent; the sends under
//!   way finish and their answers are still recorded.
//! - **Pauses.** After a wave, `pause = "approve"` waits for [`WaveEvent::Approve`]; a duration
//!   waits until `now` reaches its end. A person's [`WaveEvent::Pause`] holds the rollout at the
//!   next wave boundary until [`WaveEvent::Resume`]; [`WaveEvent::Abort`] stops it where it
//!   stands.
//! - **Windows.** A wave starts only when its windows let it ([`super::windows`]); else the
//!   rollout waits until the next allowed start. A wave under way when a window closes finishes.
//!
//! A wave with no node is passed over, its pause with it.

use super::windows::{StartVerdict, ZonedWindows};
use super::WavePlan;
use crate::rollout::Verdict;
use mesh_model::waves::{Budget, Pause};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// What a wave rollout is: fixed for its life.
#[derive(Debug, Clone)]
pub struct WaveSpec {
    /// The module's waves, budget and `max-parallel`.
    pub plan: WavePlan,
    /// Seconds a node has, from its begin, to answer.
    pub deadline_secs: u64,
    /// The plan's windows with their zones found.
    pub windows: ZonedWindows,
}

/// Something that happened, fed to [`step`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum WaveEvent {
    /// Begin the rollout.
    Start,
    /// A node begun by [`WaveAction::Send`] was sent: the digest of the declaration this plan
    /// sent it, and the send's id (the message id), which its answer must name.
    Sent {
        /// The node.
        node: String,
        /// The digest sent.
        declaration: String,
        /// The send's id, when the controller names its sends.
        send: Option<String>,
    },
    /// A node begun could not be sent (its grants or its send failed): it counts as failed.
    SendFailed {
        /// The node.
        node: String,
        /// Why.
        reason: String,
    },
    /// A node's report, as the controller heard it.
    Report {
        /// The node.
        node: String,
        /// The digest the report is about.
        declaration: String,
        /// The send it answers, when the host names it.
        send: Option<String>,
        /// What it says.
        verdict: Verdict,
    },
    /// Time passed (deadlines, pauses, windows).
    Tick,
    /// A person approved the next wave (`plans approve`).
    Approve {
        /// Who.
        actor: String,
    },
    /// A person holds the rollout at the next wave boundary (`plans pause`).
    Pause {
        /// Who.
        actor: String,
        /// Why.
        reason: String,
    },
    /// A person lets a paused rollout go on (`plans resume`).
    Resume {
        /// Who.
        actor: String,
    },
    /// A person stops the rollout where it stands (`plans abort`).
    Abort {
        /// Who.
        actor: String,
        /// Why.
        reason: String,
    },
}

impl From<crate::rollout::NodeReport> for WaveEvent {
    /// A host's report as the gate reads it ([`crate::rollout::NodeReport::from_report`]).
    fn from(report: crate::rollout::NodeReport) -> Self {
        WaveEvent::Report {
            node: report.node,
            declaration: report.declaration,
            send: report.send,
            verdict: report.verdict,
        }
    }
}

/// A node that failed, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct FailedNode {
    /// The node.
    pub node: String,
    /// Why: its report's reasons, its send's failure, or its deadline.
    pub reason: String,
}

/// What the controller is to do or record, in the order given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum WaveAction {
    /// A wave begins.
    WaveStarted {
        /// Its index (0 first).
        wave: usize,
        /// Its name.
        name: String,
        /// How many nodes it has.
        nodes: usize,
    },
    /// Send these nodes the module (grants first, as every send); answer each with
    /// [`WaveEvent::Sent`] or [`WaveEvent::SendFailed`].
    Send {
        /// The wave they are in.
        wave: usize,
        /// The nodes.
        nodes: Vec<String>,
    },
    /// Every node of a wave answered within the budget.
    WaveDone {
        /// Its index.
        wave: usize,
        /// How many applied.
        applied: usize,
        /// The nodes that failed (within the budget), with their reasons.
        failed: Vec<FailedNode>,
    },
    /// The rollout waits for a person's approval before `next`.
    AwaitApproval {
        /// The wave that waits.
        next: usize,
    },
    /// A person approved; `next` goes on (to its window and any hold).
    Approved {
        /// The wave approved.
        next: usize,
        /// Who.
        actor: String,
    },
    /// The rollout pauses until `until` (the controller's clock) before `next`.
    PauseUntil {
        /// The wave that waits.
        next: usize,
        /// When it may start.
        until: u64,
    },
    /// `next` waits for its window: until `until`, or for ever when no start is allowed.
    WaitForWindow {
        /// The wave that waits.
        next: usize,
        /// When it may start.
        until: Option<u64>,
        /// What holds it.
        held_by: String,
    },
    /// A person paused the rollout: it holds at the next wave boundary.
    Paused {
        /// Who.
        actor: String,
        /// Why.
        reason: String,
    },
    /// The rollout is held before `next` by a person's pause.
    HeldByOperator {
        /// The wave held.
        next: usize,
        /// Who paused it.
        actor: String,
    },
    /// A person let the paused rollout go on.
    Resumed {
        /// Who.
        actor: String,
    },
    /// The failed share of a wave's answers exceeds the budget: the rollout stops, and no
    /// further node is sent.
    BudgetExceeded {
        /// The wave's index.
        wave: usize,
        /// Its name.
        name: String,
        /// The budget.
        budget: Budget,
        /// How many of its nodes had answered.
        answered: usize,
        /// Its failed nodes, with their reasons.
        failed: Vec<FailedNode>,
    },
    /// A person stopped the rollout where it stands.
    Aborted {
        /// Who.
        actor: String,
        /// Why.
        reason: String,
        /// The nodes sent and not yet answered: their sends finish.
        under_way: Vec<String>,
    },
    /// Every wave is done.
    Done,
}

/// Where one node stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "node", rename_all = "kebab-case")]
pub enum WaveNode {
    /// Its wave has not reached it.
    Waiting,
    /// [`WaveAction::Send`] named it at `at`; not yet sent.
    Begun {
        /// When (the controller's clock): its deadline counts from it.
        at: u64,
    },
    /// Sent this digest by this plan.
    Sent {
        /// When it was begun.
        at: u64,
        /// The digest this plan sent it.
        declaration: String,
        /// The send's id, when named.
        send: Option<String>,
    },
    /// It reported this plan's digest applied.
    Applied {
        /// When the controller heard it.
        at: u64,
    },
    /// It failed: its report, its send, or its deadline.
    Failed {
        /// When.
        at: u64,
        /// Why.
        reason: String,
    },
}

/// Which part of the rollout is under way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "stage", rename_all = "kebab-case")]
pub enum WaveStage {
    /// Not started.
    NotStarted,
    /// A wave's nodes are being sent and heard.
    Sending {
        /// The wave.
        wave: usize,
    },
    /// Waiting for a person's approval before `next`.
    AwaitingApproval {
        /// The wave that waits.
        next: usize,
    },
    /// Pausing before `next` until `until`.
    Pausing {
        /// The wave that waits.
        next: usize,
        /// When it may start.
        until: u64,
    },
    /// `next` waits for its window.
    WaitingForWindow {
        /// The wave that waits.
        next: usize,
        /// When it may start, if ever.
        until: Option<u64>,
        /// What holds it.
        held_by: String,
    },
    /// Held before `next` by a person's pause.
    HeldByOperator {
        /// The wave held.
        next: usize,
    },
    /// Every wave done.
    Done,
    /// Stopped by the budget in `wave`.
    Stopped {
        /// The wave.
        wave: usize,
    },
    /// Stopped by a person.
    Aborted {
        /// Who.
        actor: String,
        /// Why.
        reason: String,
    },
}

/// A person's pause, in force until a resume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct OperatorHold {
    /// Who paused.
    pub actor: String,
    /// Why.
    pub reason: String,
    /// When (the controller's clock).
    pub at: u64,
}

/// A wave rollout's state; serializable, so a controller restarted between two waves goes on
/// from where it stood without sending a wave twice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct WaveState {
    /// Where it stands.
    pub stage: WaveStage,
    /// Every node of every wave.
    pub nodes: BTreeMap<String, WaveNode>,
    /// The current wave's nodes not yet begun, in order.
    pub queue: VecDeque<String>,
    /// A person's pause, while in force.
    pub hold: Option<OperatorHold>,
    /// The current wave's nodes under way and answered, counted as they change, so that each
    /// event costs the same whatever the wave's size.
    #[serde(default)]
    pub counts: WaveCounts,
}

/// The current wave's nodes, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct WaveCounts {
    /// Begun or sent, not yet answered.
    pub under_way: usize,
    /// Applied.
    pub applied: usize,
    /// Failed.
    pub failed: usize,
}

impl WaveState {
    /// A rollout not started, of the plan's nodes.
    pub fn new(plan: &WavePlan) -> WaveState {
        WaveState {
            stage: WaveStage::NotStarted,
            nodes: plan
                .waves
                .iter()
                .flat_map(|wave| wave.nodes.iter())
                .map(|node| (node.clone(), WaveNode::Waiting))
                .collect(),
            queue: VecDeque::new(),
            hold: None,
            counts: WaveCounts::default(),
        }
    }

    /// The nodes begun or sent and not yet answered: after a restart the controller hears
    /// their latest reports, or sends them again (an apply is idempotent).
    pub fn under_way(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|(_, node)| matches!(node, WaveNode::Begun { .. } | WaveNode::Sent { .. }))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Whether the rollout waits for an approval.
    pub fn awaits_approval(&self) -> bool {
        matches!(self.stage, WaveStage::AwaitingApproval { .. })
    }
}

/// Advances a wave rollout by one event at time `now`, returning what to do, in order.
///
/// # Guarantees
/// Pure and deterministic. No [`WaveAction::Send`] names a node of a wave before every node of
/// the waves before it answered, nor a node already begun; none follows
/// [`WaveAction::BudgetExceeded`], [`WaveAction::Aborted`] or [`WaveAction::Done`]. Events
/// about nodes the rollout does not wait on change nothing (a report heard twice is heard once).
pub fn step(spec: &WaveSpec, state: &mut WaveState, event: WaveEvent, now: u64) -> Vec<WaveAction> {
    let mut actions = Vec::new();
    let finished = matches!(
        state.stage,
        WaveStage::Done | WaveStage::Stopped { .. } | WaveStage::Aborted { .. }
    );
    match event {
        WaveEvent::Start => {
            if state.stage == WaveStage::NotStarted {
                enter(spec, state, 0, now, &mut actions);
            }
        }
        WaveEvent::Sent {
            node,
            declaration,
            send,
        } => {
            if let Some(progress) = state.nodes.get_mut(&node) {
                if let WaveNode::Begun { at } | WaveNode::Sent { at, .. } = *progress {
                    *progress = WaveNode::Sent {
                        at,
                        declaration,
                        send,
                    };
                }
            }
        }
        WaveEvent::SendFailed { node, reason } => {
            let reason = format!("the send failed: {reason}");
            if fail(state, &node, reason, now) && !finished {
                answered(spec, state, now, &mut actions);
            }
        }
        WaveEvent::Report {
            node,
            declaration,
            send,
            verdict,
        } => {
            if heard(state, &node, &declaration, send.as_deref(), verdict, now) && !finished {
                answered(spec, state, now, &mut actions);
            }
        }
        WaveEvent::Tick => tick(spec, state, now, finished, &mut actions),
        WaveEvent::Approve { actor } => {
            if let WaveStage::AwaitingApproval { next } = state.stage {
                actions.push(WaveAction::Approved { next, actor });
                enter(spec, state, next, now, &mut actions);
            }
        }
        WaveEvent::Pause { actor, reason } => {
            if !finished {
                state.hold = Some(OperatorHold {
                    actor: actor.clone(),
                    reason: reason.clone(),
                    at: now,
                });
                actions.push(WaveAction::Paused { actor, reason });
            }
        }
        WaveEvent::Resume { actor } => {
            if !finished && state.hold.take().is_some() {
                actions.push(WaveAction::Resumed { actor });
                if let WaveStage::HeldByOperator { next } = state.stage {
                    enter(spec, state, next, now, &mut actions);
                }
            }
        }
        WaveEvent::Abort { actor, reason } => {
            if !finished {
                state.queue.clear();
                state.stage = WaveStage::Aborted {
                    actor: actor.clone(),
                    reason: reason.clone(),
                };
                actions.push(WaveAction::Aborted {
                    actor,
                    reason,
                    under_way: state.under_way(),
                });
            }
        }
    }
    actions
}

/// Whether a report of `node` is this plan's answer, and if so records it; `true` when the
/// node answered (applied or failed).
fn heard(
    state: &mut WaveState,
    node: &str,
    declaration: &str,
    send: Option<&str>,
    verdict: Verdict,
    now: u64,
) -> bool {
    let Some(progress) = state.nodes.get_mut(node) else {
        return false;
    };
    let WaveNode::Sent {
        declaration: sent,
        send: sent_id,
        ..
    } = &*progress
    else {
        // Not sent yet (or already answered): a report heard before the send is not its answer.
        return false;
    };
    // argo-cd#29410: a step was judged on the previous revision's health. Only the digest this
    // plan sent counts, and only from the send it made when it named one.
    let this_send = match (sent_id.as_deref(), send) {
        (Some(ours), Some(theirs)) => ours == theirs,
        (Some(_), None) => false,
        (None, Some(_) | None) => true,
    };
    if sent != declaration || !this_send {
        return false;
    }
    match verdict {
        Verdict::Pending => false,
        Verdict::Applied => {
            *progress = WaveNode::Applied { at: now };
            state.counts.under_way = state.counts.under_way.saturating_sub(1);
            state.counts.applied += 1;
            true
        }
        Verdict::Failed { reasons } => {
            *progress = WaveNode::Failed {
                at: now,
                reason: reasons.join("; "),
            };
            state.counts.under_way = state.counts.under_way.saturating_sub(1);
            state.counts.failed += 1;
            true
        }
    }
}

/// Marks a node begun or sent as failed; `true` when it was.
fn fail(state: &mut WaveState, node: &str, reason: String, now: u64) -> bool {
    match state.nodes.get_mut(node) {
        Some(progress @ (WaveNode::Begun { .. } | WaveNode::Sent { .. })) => {
            *progress = WaveNode::Failed { at: now, reason };
            state.counts.under_way = state.counts.under_way.saturating_sub(1);
            state.counts.failed += 1;
            true
        }
        Some(WaveNode::Waiting | WaveNode::Applied { .. } | WaveNode::Failed { .. }) | None => {
            false
        }
    }
}

fn tick(
    spec: &WaveSpec,
    state: &mut WaveState,
    now: u64,
    finished: bool,
    actions: &mut Vec<WaveAction>,
) {
    let late: Vec<String> = state
        .nodes
        .iter()
        .filter(|(_, node)| match node {
            WaveNode::Begun { at } | WaveNode::Sent { at, .. } => {
                now >= at.saturating_add(spec.deadline_secs)
            }
            WaveNode::Waiting | WaveNode::Applied { .. } | WaveNode::Failed { .. } => false,
        })
        .map(|(name, _)| name.clone())
        .collect();
    for node in &late {
        let reason = format!(
            "no report of this plan's declaration within {} s of its send",
            spec.deadline_secs
        );
        fail(state, node, reason, now);
    }
    if finished {
        return;
    }
    if !late.is_empty() {
        answered(spec, state, now, actions);
    }
    match state.stage.clone() {
        WaveStage::Pausing { next, until } if now >= until => {
            enter(spec, state, next, now, actions)
        }
        WaveStage::WaitingForWindow { next, .. } => enter(spec, state, next, now, actions),
        WaveStage::NotStarted
        | WaveStage::Sending { .. }
        | WaveStage::AwaitingApproval { .. }
        | WaveStage::Pausing { .. }
        | WaveStage::HeldByOperator { .. }
        | WaveStage::Done
        | WaveStage::Stopped { .. }
        | WaveStage::Aborted { .. } => {}
    }
}

/// A wave's failed nodes with their reasons (read once, as the wave ends or stops).
fn failed_of(spec: &WaveSpec, state: &WaveState, wave: usize) -> Vec<FailedNode> {
    spec.plan.waves[wave]
        .nodes
        .iter()
        .filter_map(|node| match state.nodes.get(node) {
            Some(WaveNode::Failed { reason, .. }) => Some(FailedNode {
                node: node.clone(),
                reason: reason.clone(),
            }),
            Some(
                WaveNode::Waiting
                | WaveNode::Begun { .. }
                | WaveNode::Sent { .. }
                | WaveNode::Applied { .. },
            )
            | None => None,
        })
        .collect()
}

/// Whether `failed` of `answered` exceeds the budget.
pub fn over_budget(budget: &Budget, answered: usize, failed: usize) -> bool {
    answered >= budget.min as usize
        && answered > 0
        && failed as u128 * 10_000 > u128::from(budget.failed.basis_points) * answered as u128
}

/// A node of the current wave answered: judge the budget, send more, or end the wave.
fn answered(spec: &WaveSpec, state: &mut WaveState, now: u64, actions: &mut Vec<WaveAction>) {
    let WaveStage::Sending { wave } = state.stage else {
        return;
    };
    let WaveCounts {
        applied, failed, ..
    } = state.counts;
    let answered = applied + failed;
    if over_budget(&spec.plan.budget, answered, failed) {
        state.queue.clear();
        state.stage = WaveStage::Stopped { wave };
        actions.push(WaveAction::BudgetExceeded {
            wave,
            name: spec.plan.waves[wave].name.clone(),
            budget: spec.plan.budget.clone(),
            answered,
            failed: failed_of(spec, state, wave),
        });
        return;
    }
    launch(spec, state, wave, now, actions);
    if answered == spec.plan.waves[wave].nodes.len() {
        actions.push(WaveAction::WaveDone {
            wave,
            applied,
            failed: failed_of(spec, state, wave),
        });
        boundary(spec, state, wave, now, actions);
    }
}

/// Begins queued nodes of `wave` while fewer than `max-parallel` are under way.
fn launch(
    spec: &WaveSpec,
    state: &mut WaveState,
    wave: usize,
    now: u64,
    actions: &mut Vec<WaveAction>,
) {
    let limit = spec
        .plan
        .max_parallel
        .map_or(usize::MAX, |n| (n as usize).max(1));
    let mut batch = Vec::new();
    while state.counts.under_way < limit {
        let Some(node) = state.queue.pop_front() else {
            break;
        };
        if let Some(progress @ WaveNode::Waiting) = state.nodes.get_mut(&node) {
            *progress = WaveNode::Begun { at: now };
            state.counts.under_way += 1;
            batch.push(node);
        }
    }
    if !batch.is_empty() {
        actions.push(WaveAction::Send { wave, nodes: batch });
    }
}

/// `wave` is done: its pause, or the next wave.
fn boundary(
    spec: &WaveSpec,
    state: &mut WaveState,
    wave: usize,
    now: u64,
    actions: &mut Vec<WaveAction>,
) {
    let next = wave + 1;
    if next >= spec.plan.waves.len() {
        state.stage = WaveStage::Done;
        actions.push(WaveAction::Done);
        return;
    }
    match spec.plan.waves[wave].pause {
        None => enter(spec, state, next, now, actions),
        Some(Pause::Approve) => {
            state.stage = WaveStage::AwaitingApproval { next };
            actions.push(WaveAction::AwaitApproval { next });
        }
        Some(Pause::For { secs }) => {
            let until = now.saturating_add(secs);
            state.stage = WaveStage::Pausing { next, until };
            actions.push(WaveAction::PauseUntil { next, until });
        }
    }
}

/// Starts wave `next` unless a person's pause or its windows hold it; a wave with no node is
/// passed over.
fn enter(
    spec: &WaveSpec,
    state: &mut WaveState,
    next: usize,
    now: u64,
    actions: &mut Vec<WaveAction>,
) {
    let mut next = next;
    while next < spec.plan.waves.len() && spec.plan.waves[next].nodes.is_empty() {
        next += 1;
    }
    if next >= spec.plan.waves.len() {
        state.stage = WaveStage::Done;
        actions.push(WaveAction::Done);
        return;
    }
    if let Some(hold) = &state.hold {
        if state.stage != (WaveStage::HeldByOperator { next }) {
            actions.push(WaveAction::HeldByOperator {
                next,
                actor: hold.actor.clone(),
            });
        }
        state.stage = WaveStage::HeldByOperator { next };
        return;
    }
    match spec.windows.may_start(now) {
        StartVerdict::Now => {}
        StartVerdict::At { at, held_by } => {
            wait_for_window(state, next, Some(at), held_by, actions);
            return;
        }
        StartVerdict::Never { held_by } => {
            wait_for_window(state, next, None, held_by, actions);
            return;
        }
    }
    let wave = &spec.plan.waves[next];
    state.stage = WaveStage::Sending { wave: next };
    state.queue = wave.nodes.iter().cloned().collect();
    state.counts = WaveCounts::default();
    actions.push(WaveAction::WaveStarted {
        wave: next,
        name: wave.name.clone(),
        nodes: wave.nodes.len(),
    });
    launch(spec, state, next, now, actions);
}

fn wait_for_window(
    state: &mut WaveState,
    next: usize,
    until: Option<u64>,
    held_by: String,
    actions: &mut Vec<WaveAction>,
) {
    let stage = WaveStage::WaitingForWindow {
        next,
        until,
        held_by: held_by.clone(),
    };
    if state.stage != stage {
        actions.push(WaveAction::WaitForWindow {
            next,
            until,
            held_by,
        });
        state.stage = stage;
    }
}

#[cfg(test)]
mod tests;
