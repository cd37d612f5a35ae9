//! The step function: a rollout advanced by one event, returning what to do.

use super::state::{NodeProgress, NodeTable, RolloutState, Stage};
use super::{Action, Event, NodeReport, RolloutSpec, Verdict, GRANT_RETRY_SECS};
use crate::compose::Unset;
use crate::moves::Move;
use crate::orphans::Orphan;
use mesh_model::module::{OnFailure, Upgrade};
use mesh_model::plan::RolloutOutcome;

/// Advances a rollout by one event at time `now`, returning what to do, in order.
///
/// # Guarantees
/// Pure and deterministic. Every [`Action::Send`] and [`Action::SendBusNode`] for a node comes
/// after an [`Action::IssueGrants`] naming it was answered by [`Event::GrantsIssued`]. After
/// [`Action::Stop`] or [`Action::Done`] no further action is returned. Events about nodes the
/// rollout is not waiting on are ignored (idempotent: a report heard twice changes nothing).
pub fn step(spec: &RolloutSpec, state: &mut RolloutState, event: Event, now: u64) -> Vec<Action> {
    let mut actions = Vec::new();
    match (state.stage, &event) {
        (Stage::Stopped, Event::Retry) => {}
        (Stage::Done | Stage::Stopped, _) => return actions,
        (Stage::Held, Event::Release) => {}
        (Stage::Held, _) => return actions,
        (Stage::NotStarted | Stage::BusNode | Stage::FirstNode | Stage::Rest, _) => {}
    }
    match event {
        Event::Start => start(spec, state, now, &mut actions),
        Event::GrantsIssued { nodes } => {
            for node in nodes {
                granted(spec, state, &node, now, &mut actions);
            }
        }
        Event::GrantsFailed { nodes, reason } => {
            for node in nodes {
                grant_failed(spec, state, &node, &reason, now, &mut actions);
            }
        }
        Event::SendFailed { node, reason } => {
            if matches!(progress_of(state, &node), Some(NodeProgress::Sent { .. })) {
                stop(
                    spec,
                    state,
                    &node,
                    format!("the send failed: {reason}"),
                    &mut actions,
                );
            }
        }
        Event::Report(report) => reported(spec, state, report, now, &mut actions),
        Event::Unreadable { node, reason } => {
            if matches!(progress_of(state, &node), Some(NodeProgress::Sent { .. })) {
                stop(spec, state, &node, reason, &mut actions);
            }
        }
        Event::Held {
            node,
            moves,
            orphans,
            unset,
        } => held(
            spec,
            state,
            &node,
            (moves, orphans, unset),
            now,
            &mut actions,
        ),
        Event::Release => release(spec, state, now, &mut actions),
        Event::Retry => retry(spec, state, now, &mut actions),
        Event::Tick => tick(spec, state, now, &mut actions),
    }
    actions
}

/// A node sent (its grants issued) whose declaration the controller held back: for a move, an
/// orphaned setting, or a required setting no layer sets.
fn held(
    spec: &RolloutSpec,
    state: &mut RolloutState,
    node: &str,
    (moves, orphans, unset): (Vec<Move>, Vec<Orphan>, Vec<Unset>),
    now: u64,
    actions: &mut Vec<Action>,
) {
    let stage = state.stage;
    let Some(progress) = progress_mut(state, node) else {
        return;
    };
    if !matches!(progress, NodeProgress::Sent { .. }) {
        return;
    }
    if stage == Stage::BusNode {
        let reason = format!(
            "holding the bus, it goes first, and its declaration is held: {}",
            moves
                .iter()
                .map(ToString::to_string)
                .chain(orphans.iter().map(ToString::to_string))
                .chain(
                    unset
                        .iter()
                        .map(|unset| format!("{unset} is required and unset"))
                )
                .collect::<Vec<_>>()
                .join("; ")
        );
        stop(spec, state, node, reason, actions);
        return;
    }
    *progress = NodeProgress::Held {
        moves,
        orphans,
        unset,
    };
    state.held += 1;
    state.sent = state.sent.saturating_sub(1);
    match stage {
        Stage::FirstNode => match state.queue.pop_front() {
            // Another node goes first.
            Some(next) => {
                state.first = Some(next.clone());
                begin(state, vec![next], now, actions);
            }
            None => launch(spec, state, now, actions),
        },
        Stage::Rest => {
            state.in_flight = state.in_flight.saturating_sub(1);
            launch(spec, state, now, actions);
        }
        Stage::NotStarted | Stage::BusNode | Stage::Held | Stage::Done | Stage::Stopped => {}
    }
}

/// The stopped rollout begun again from where it stopped: the bus node when it stopped there;
/// else the nodes begun and not answered at the stop — the node it stopped at first — as the
/// first node when none applied yet, else among the rest (at most `max-parallel` at a time).
/// Nodes that applied are not sent again, and nodes held stay held.
fn retry(spec: &RolloutSpec, state: &mut RolloutState, now: u64, actions: &mut Vec<Action>) {
    let Some(RolloutOutcome::Stopped { node: stopped, .. }) = state.outcome.take() else {
        return;
    };
    if let Some((bus, progress)) = &mut state.bus_node {
        if !matches!(progress, NodeProgress::Applied { .. }) {
            *progress = NodeProgress::Waiting;
            let bus = bus.clone();
            state.stage = Stage::BusNode;
            begin(state, vec![bus], now, actions);
            return;
        }
    }
    let mut again: Vec<String> = state
        .nodes
        .iter()
        .filter(|(_, progress)| {
            matches!(
                progress,
                NodeProgress::Sent { .. }
                    | NodeProgress::Granting { .. }
                    | NodeProgress::GrantRetry { .. }
            )
        })
        .map(|(node, _)| node.clone())
        .collect();
    // The node it stopped at first.
    again.sort_by_key(|node| *node != stopped);
    for node in &again {
        if let Some(progress) = state.nodes.get_mut(node) {
            if matches!(progress, NodeProgress::Sent { .. }) {
                state.sent = state.sent.saturating_sub(1);
            }
            *progress = NodeProgress::Waiting;
        }
    }
    state.in_flight = 0;
    for node in again.into_iter().rev() {
        state.queue.push_front(node);
    }
    go_on(spec, state, now, actions);
}

/// The queued nodes begun again: the first of them as the first node when none applied yet
/// (one-first), else among the rest, at most `max-parallel` at a time.
fn go_on(spec: &RolloutSpec, state: &mut RolloutState, now: u64, actions: &mut Vec<Action>) {
    if state.applied == 0 && spec.upgrade == Upgrade::OneFirst {
        let Some(first) = state.queue.pop_front() else {
            return;
        };
        state.stage = Stage::FirstNode;
        state.first = Some(first.clone());
        begin(state, vec![first], now, actions);
    } else {
        state.stage = Stage::Rest;
        launch(spec, state, now, actions);
    }
}

/// The held nodes are sent: the first of them first when no node applied yet, else all (at
/// most `max-parallel` at a time).
fn release(spec: &RolloutSpec, state: &mut RolloutState, now: u64, actions: &mut Vec<Action>) {
    let released: Vec<String> = state
        .nodes
        .iter()
        .filter(|(_, p)| matches!(p, NodeProgress::Held { .. }))
        .map(|(n, _)| n.clone())
        .collect();
    for node in &released {
        if let Some(progress) = state.nodes.get_mut(node) {
            *progress = NodeProgress::Waiting;
        }
    }
    state.held = 0;
    state.queue.extend(released);
    go_on(spec, state, now, actions);
}

fn progress_of<'s>(state: &'s RolloutState, node: &str) -> Option<&'s NodeProgress> {
    match &state.bus_node {
        Some((bus, progress)) if bus == node && state.stage == Stage::BusNode => Some(progress),
        Some(_) | None => state.nodes.get(node),
    }
}

impl RolloutState {
    /// Whether a report of `node` can change this rollout: its declaration was sent and it has
    /// not yet answered for it (any other node's report is passed over by [`step`]).
    pub fn awaits_report(&self, node: &str) -> bool {
        matches!(progress_of(self, node), Some(NodeProgress::Sent { .. }))
    }
}

impl RolloutState {
    /// Names the send `node`'s declaration went out in (the message id the controller made for
    /// it, carried out of [`Action::Send`] or [`Action::SendBusNode`], or a resumed send made
    /// again): the report answering it must name it. A node not sent is left as it is.
    pub fn name_send(&mut self, node: &str, send: &str) {
        if let Some(NodeProgress::Sent { send: named, .. }) = progress_mut(self, node) {
            *named = Some(send.to_owned());
        }
    }
}

fn progress_mut<'s>(state: &'s mut RolloutState, node: &str) -> Option<&'s mut NodeProgress> {
    let stage = state.stage;
    match &mut state.bus_node {
        Some((bus, progress)) if bus == node && stage == Stage::BusNode => Some(progress),
        Some(_) | None => state.nodes.get_mut(node),
    }
}

fn start(spec: &RolloutSpec, state: &mut RolloutState, now: u64, actions: &mut Vec<Action>) {
    if state.stage != Stage::NotStarted {
        return;
    }
    let running: Vec<&String> = spec
        .nodes
        .iter()
        .filter(|(_, n)| n.running)
        .map(|(name, _)| name)
        .collect();
    state.nodes = NodeTable::from_sorted(
        running
            .iter()
            .map(|n| ((*n).clone(), NodeProgress::Waiting))
            .collect(),
    );
    state.nodes.all_new = true;
    if running.is_empty() {
        match spec.nodes.keys().next() {
            None => {
                finish(spec, state, actions);
            }
            Some(node) => {
                let node = node.clone();
                stop(
                    spec,
                    state,
                    &node,
                    "no node of the module is running".into(),
                    actions,
                );
            }
        }
        return;
    }
    if let Some(bus) = &spec.bus_first {
        if !state.nodes.contains_key(&bus.node) {
            state.stage = Stage::BusNode;
            state.bus_node = Some((bus.node.clone(), NodeProgress::Waiting));
            begin(state, vec![bus.node.clone()], now, actions);
            return;
        }
    }
    after_bus_node(spec, state, now, actions);
}

/// The bus node is done (or was not needed): the first node, or everyone for `together`.
fn after_bus_node(
    spec: &RolloutSpec,
    state: &mut RolloutState,
    now: u64,
    actions: &mut Vec<Action>,
) {
    match spec.upgrade {
        Upgrade::Together => {
            state.stage = Stage::Rest;
            let all: Vec<String> = state.nodes.keys().cloned().collect();
            state.in_flight = all.len();
            begin(state, all, now, actions);
        }
        Upgrade::OneFirst => {
            let first = match &spec.bus_first {
                Some(bus) if state.nodes.contains_key(&bus.node) => bus.node.clone(),
                Some(_) | None => state.nodes.keys().next().cloned().unwrap_or_default(),
            };
            state.stage = Stage::FirstNode;
            state.first = Some(first.clone());
            state.queue = state
                .nodes
                .keys()
                .filter(|n| **n != first)
                .cloned()
                .collect();
            begin(state, vec![first], now, actions);
        }
    }
}

/// Asks for the grants of `nodes`, marking them granting.
fn begin(state: &mut RolloutState, nodes: Vec<String>, now: u64, actions: &mut Vec<Action>) {
    for node in &nodes {
        if let Some(progress) = progress_mut(state, node) {
            *progress = NodeProgress::Granting { since: now };
        }
    }
    if !nodes.is_empty() {
        actions.push(Action::IssueGrants { nodes });
    }
}

fn granted(
    spec: &RolloutSpec,
    state: &mut RolloutState,
    node: &str,
    now: u64,
    actions: &mut Vec<Action>,
) {
    let stage = state.stage;
    let Some(progress) = progress_mut(state, node) else {
        return;
    };
    match progress {
        NodeProgress::Granting { .. } => {}
        NodeProgress::Waiting
        | NodeProgress::GrantRetry { .. }
        | NodeProgress::Sent { .. }
        | NodeProgress::Held { .. }
        | NodeProgress::Applied { .. } => return,
    }
    *progress = NodeProgress::Sent {
        at: now,
        send: None,
    };
    if stage != Stage::BusNode {
        state.sent += 1;
    }
    if stage == Stage::BusNode {
        actions.push(Action::SendBusNode {
            node: node.to_owned(),
        });
    } else {
        actions.push(Action::Send {
            node: node.to_owned(),
            module: spec.module.clone(),
        });
    }
}

fn grant_failed(
    spec: &RolloutSpec,
    state: &mut RolloutState,
    node: &str,
    reason: &str,
    now: u64,
    actions: &mut Vec<Action>,
) {
    let Some(progress) = progress_mut(state, node) else {
        return;
    };
    let since = match progress {
        NodeProgress::Granting { since } => *since,
        NodeProgress::Waiting
        | NodeProgress::GrantRetry { .. }
        | NodeProgress::Sent { .. }
        | NodeProgress::Held { .. }
        | NodeProgress::Applied { .. } => return,
    };
    let retry_at = now + GRANT_RETRY_SECS;
    *progress = NodeProgress::GrantRetry {
        since,
        retry_at,
        reason: reason.to_owned(),
    };
    actions.push(Action::SendFailed {
        module: spec.module.clone(),
        node: node.to_owned(),
        reason: format!("grants could not be issued: {reason}"),
        retry_at,
    });
}

fn reported(
    spec: &RolloutSpec,
    state: &mut RolloutState,
    report: NodeReport,
    now: u64,
    actions: &mut Vec<Action>,
) {
    let expected = if state.stage == Stage::BusNode {
        spec.bus_first.as_ref().map(|b| b.declaration.as_str())
    } else {
        spec.nodes.get(&report.node).map(|n| n.declaration.as_str())
    };
    let Some(progress) = progress_mut(state, &report.node) else {
        return;
    };
    let NodeProgress::Sent {
        at: sent_at,
        send: sent,
    } = &*progress
    else {
        return;
    };
    let sent_at = *sent_at;
    // The incident behind “The gate judges each node from its own send”: judged from this node's
    // own send, not the module's latest.
    if expected != Some(report.declaration.as_str())
        || !answers_its_send(sent.as_deref(), sent_at, &report)
    {
        return;
    }
    match report.verdict {
        Verdict::Pending => {}
        Verdict::Failed { reasons } => {
            stop(spec, state, &report.node, reasons.join("; "), actions);
        }
        Verdict::Applied => {
            *progress = NodeProgress::Applied { sent_at, at: now };
            match state.stage {
                Stage::BusNode => after_bus_node(spec, state, now, actions),
                Stage::FirstNode => {
                    state.applied += 1;
                    state.stage = Stage::Rest;
                    launch(spec, state, now, actions);
                }
                Stage::Rest => {
                    state.applied += 1;
                    state.in_flight = state.in_flight.saturating_sub(1);
                    launch(spec, state, now, actions);
                }
                Stage::NotStarted | Stage::Held | Stage::Done | Stage::Stopped => {}
            }
        }
    }
}

/// Whether `report`, of the declaration its node was sent, answers the node's send `sent`
/// (its id, when named) made at `sent_at`.
///
/// When both the send and the report name an id, the ids decide, and nothing else: the report
/// answers this very send, whenever either clock says it was made. A report of an earlier send
/// of the same declaration names that send, and does not open the gate.
///
/// A report naming no send — from a host older than send ids — or a send recorded without one (a
/// rollout resumed from a record made before them) is judged as the gate judged before send
/// ids, the conservative way: it counts only when made at or after the send, by the host's
/// clock against the controller's. A report from before the send never opens the gate; a host
/// whose clock is behind is held until its deadline, which stops the rollout naming it (the
/// safe failure), until it runs a mesh-host that names its sends.
fn answers_its_send(sent: Option<&str>, sent_at: u64, report: &NodeReport) -> bool {
    match (sent, report.send.as_deref()) {
        (Some(sent), Some(answered)) => sent == answered,
        (None, _) | (Some(_), None) => report.made_at >= sent_at,
    }
}

/// Begins queued nodes while fewer than `max-parallel` are in flight; done when all applied.
fn launch(spec: &RolloutSpec, state: &mut RolloutState, now: u64, actions: &mut Vec<Action>) {
    let limit = spec
        .max_parallel
        .map_or(usize::MAX, |n| (n as usize).max(1));
    let mut batch = Vec::new();
    while state.in_flight < limit {
        let Some(node) = state.queue.pop_front() else {
            break;
        };
        state.in_flight += 1;
        batch.push(node);
    }
    begin(state, batch, now, actions);
    if state.applied + state.held == state.nodes.len() {
        if state.held == 0 {
            finish(spec, state, actions);
        } else {
            state.stage = Stage::Held;
            actions.push(Action::Held {
                module: spec.module.clone(),
                nodes: state.held,
            });
        }
    }
}

fn tick(spec: &RolloutSpec, state: &mut RolloutState, now: u64, actions: &mut Vec<Action>) {
    let mut retry = Vec::new();
    let mut late: Option<(String, String)> = None;
    let mut check = |node: &String, progress: &NodeProgress| match progress {
        NodeProgress::Sent { at, .. } if now >= at + spec.deadline_secs => {
            if late.is_none() {
                late = Some((
                    node.clone(),
                    format!(
                        "no report of the new declaration applied within {} s of its send",
                        spec.deadline_secs
                    ),
                ));
            }
        }
        NodeProgress::GrantRetry {
            since,
            reason,
            retry_at,
        } => {
            if now >= since + spec.deadline_secs {
                if late.is_none() {
                    late = Some((
                        node.clone(),
                        format!(
                            "grants could not be issued in {} s: {reason}",
                            spec.deadline_secs
                        ),
                    ));
                }
            } else if now >= *retry_at {
                retry.push(node.clone());
            }
        }
        NodeProgress::Sent { .. }
        | NodeProgress::Waiting
        | NodeProgress::Granting { .. }
        | NodeProgress::Held { .. }
        | NodeProgress::Applied { .. } => {}
    };
    if state.stage == Stage::BusNode {
        if let Some((node, progress)) = &state.bus_node {
            check(node, progress);
        }
    } else {
        for (node, progress) in state.nodes.iter() {
            check(node, progress);
        }
    }
    if let Some((node, reason)) = late {
        stop(spec, state, &node, reason, actions);
        return;
    }
    for node in &retry {
        if let Some(progress) = progress_mut(state, node) {
            if let NodeProgress::GrantRetry { since, .. } = progress {
                *progress = NodeProgress::Granting { since: *since };
            }
        }
    }
    if !retry.is_empty() {
        actions.push(Action::IssueGrants { nodes: retry });
    }
}

fn stop(
    spec: &RolloutSpec,
    state: &mut RolloutState,
    node: &str,
    reason: String,
    actions: &mut Vec<Action>,
) {
    state.stage = Stage::Stopped;
    state.outcome = Some(RolloutOutcome::Stopped {
        node: node.to_owned(),
        reason: reason.clone(),
    });
    actions.push(Action::Stop {
        module: spec.module.clone(),
        node: node.to_owned(),
        reason,
    });
    // The node that stopped the rollout is sent back whichever it was — the first, or one sent
    // after it (`max-parallel`): a failed node is never left on the build that failed it.
    let sent = matches!(state.nodes.get(node), Some(NodeProgress::Sent { .. }));
    match spec.on_failure {
        OnFailure::Revert if sent => actions.push(Action::Revert {
            module: spec.module.clone(),
            node: node.to_owned(),
        }),
        OnFailure::Revert | OnFailure::Stop => {}
    }
}

fn finish(spec: &RolloutSpec, state: &mut RolloutState, actions: &mut Vec<Action>) {
    state.stage = Stage::Done;
    state.outcome = Some(RolloutOutcome::Done);
    actions.push(Action::Done {
        module: spec.module.clone(),
    });
}
