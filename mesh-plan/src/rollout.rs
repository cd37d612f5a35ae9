//! One module's rollout as a state machine: events in, actions out, time an argument (the rules “Grants before code”, “One machine first” and “The gate judges
//! each node from its own send”).
//!
//! Start at [`step`]: the controller feeds it [`Event`]s (a start, grants issued or failed, a
//! node's report, a clock tick) with `now`, and carries out the [`Action`]s it returns, in order.
//!
//! # The rules it keeps
//! - **Grants before code.** No node is sent a declaration before [`Action::IssueGrants`] for it
//!   was answered by [`Event::GrantsIssued`]. A grant that fails fails that send
//!   ([`Action::SendFailed`]) and is tried again after [`GRANT_RETRY_SECS`] — until the node's
//!   deadline, when the rollout stops.
//! - **The bus node first when the list of bus users changes** ([`RolloutSpec::bus_first`]): it
//!   is the first node if it runs the module; otherwise it is sent its own declaration
//!   ([`Action::SendBusNode`]) and must report it applied before any other send.
//! - **One node first** unless the module's upgrade is `together`: the first running node by
//!   name; the rest (at most `max-parallel` at a time) only once it has reported the new
//!   declaration applied and current. A failure, or no report within the deadline, stops the
//!   module's rollout naming node and reason ([`Action::Stop`]); with `on-failure = "revert"`
//!   the first node is sent back what it ran ([`Action::Revert`]). The other nodes keep what they
//!   ran. A failing node after the first also stops the rollout (no further sends).
//! - **Each node is judged from its own send** (the incident behind “The gate judges each node from its own send”): a report counts when it is about the
//!   declaration that node was sent and was made at or after that node's send — a first node's
//!   report made between the two sends opens the gate; a report from before its send does not.
//!
//! - **A move is held, not made** (the rule “A moved mount is held”): a node whose new declaration would
//!   give a running container another host directory at a mount is reported
//!   [`Event::Held`] by the controller instead of being sent; it is passed over (the next node
//!   goes first when it was the first), the others go on, and once every other node applied the
//!   rollout waits in [`Stage::Held`] until [`Event::Release`] (a person's `--move MODULE`).
//!
//! Nodes that are not running are not sent to; they take the module at their next push.

use crate::moves::Move;
use crate::orphans::Orphan;
use mesh_model::module::{ModuleDefinition, OnFailure, Upgrade};
use mesh_model::plan::{ModuleRollout, RolloutOutcome};
use mesh_model::report::{MachineState, Outcome, Report};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Seconds before a failed grant is tried again.
pub const GRANT_RETRY_SECS: u64 = 10;

/// What a rollout is: fixed for its life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RolloutSpec {
    /// The module rolled out.
    pub module: String,
    /// One node first, or every node together.
    pub upgrade: Upgrade,
    /// What a failed first node does.
    pub on_failure: OnFailure,
    /// Seconds a node has, from its send, to report the declaration applied.
    pub deadline_secs: u64,
    /// How many nodes after the first are in flight at once (`None`: all).
    pub max_parallel: Option<u32>,
    /// The nodes the module is assigned to, by name.
    pub nodes: BTreeMap<String, RolloutNode>,
    /// Set when this rollout changes the list of bus users: the bus node goes first.
    pub bus_first: Option<BusFirst>,
}

/// A node of a rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RolloutNode {
    /// Whether it runs (only running nodes are sent to).
    pub running: bool,
    /// The digest of the declaration it is sent; its report must name it.
    pub declaration: String,
}

/// The node holding the bus, sent first because the list of bus users changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct BusFirst {
    /// The node.
    pub node: String,
    /// The digest of the declaration it is sent.
    pub declaration: String,
}

impl RolloutSpec {
    /// A spec from a module's definition (upgrade, on-failure, deadline, max-parallel).
    pub fn new(
        definition: &ModuleDefinition,
        nodes: BTreeMap<String, RolloutNode>,
        bus_first: Option<BusFirst>,
    ) -> Self {
        RolloutSpec {
            module: definition.name.clone(),
            upgrade: definition.upgrade,
            on_failure: definition.on_failure,
            deadline_secs: definition.deadline_secs,
            max_parallel: definition.max_parallel,
            nodes,
            bus_first,
        }
    }
}

/// Something that happened, fed to [`step`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    /// Begin the rollout.
    Start,
    /// The grants asked for these nodes were issued.
    GrantsIssued {
        /// The nodes.
        nodes: Vec<String>,
    },
    /// The grants asked for these nodes could not be issued.
    GrantsFailed {
        /// The nodes.
        nodes: Vec<String>,
        /// Why.
        reason: String,
    },
    /// A declaration could not be sent to a node.
    SendFailed {
        /// The node.
        node: String,
        /// Why.
        reason: String,
    },
    /// A node reported.
    Report(NodeReport),
    /// A node's declaration was not sent: it would move a running container's data (the rule “A moved mount is held”),
    /// or drop a setting its layers hold (the rule "an orphaned setting is a removal").
    Held {
        /// The node.
        node: String,
        /// The moves nobody acknowledged.
        moves: Vec<Move>,
        /// The orphaned settings nobody renamed, dropped or let go.
        orphans: Vec<Orphan>,
    },
    /// A person acknowledged the moves (`--move MODULE`): the held nodes are sent.
    Release,
    /// Time passed (deadlines, grant retries).
    Tick,
}

/// A node's report as the gate reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct NodeReport {
    /// The node.
    pub node: String,
    /// The digest of the declaration the report is about.
    pub declaration: String,
    /// When the report was made (the apply's end), seconds since the epoch.
    pub made_at: u64,
    /// What it says.
    pub verdict: Verdict,
}

/// What a report says about its declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum Verdict {
    /// Applied and current: the machine converged on it.
    Applied,
    /// Not there yet (mid-change, held still, waiting): no decision.
    Pending,
    /// Resources failed.
    Failed {
        /// Why, one line per failed resource.
        reasons: Vec<String>,
    },
}

impl NodeReport {
    /// Reads a host's report: failed or stuck resources make [`Verdict::Failed`]; a converged
    /// machine [`Verdict::Applied`]; anything else [`Verdict::Pending`].
    pub fn from_report(report: &Report) -> Self {
        let mut reasons = Vec::new();
        for (id, outcome) in &report.resources {
            match outcome {
                Outcome::Failed { reason, .. } => reasons.push(format!("{id}: {reason}")),
                Outcome::Stuck { last_reason, .. } => {
                    reasons.push(format!("{id}: stuck: {last_reason}"))
                }
                Outcome::Applied { .. }
                | Outcome::Unchanged
                | Outcome::HeldStill { .. }
                | Outcome::Skipped { .. }
                | Outcome::Waiting { .. }
                | Outcome::Removed { .. } => {}
            }
        }
        let verdict = if !reasons.is_empty() {
            Verdict::Failed { reasons }
        } else {
            match report.machine {
                MachineState::Converged => Verdict::Applied,
                MachineState::MidChange | MachineState::Partial => Verdict::Pending,
            }
        };
        NodeReport {
            node: report.node.clone(),
            declaration: report.declaration.clone(),
            made_at: report.finished_at,
            verdict,
        }
    }
}

/// What the controller is to do, in the order given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Action {
    /// Issue the bus grants (permissions, state buckets) of these nodes; answer with
    /// [`Event::GrantsIssued`] or [`Event::GrantsFailed`].
    IssueGrants {
        /// The nodes.
        nodes: Vec<String>,
    },
    /// Send the bus node its declaration (it carries the new list of bus users).
    SendBusNode {
        /// The node holding the bus.
        node: String,
    },
    /// Send a node its declaration with the module's new build.
    Send {
        /// The node.
        node: String,
        /// The module.
        module: String,
    },
    /// A send did not happen because its grants failed; it is tried again at `retry_at`.
    SendFailed {
        /// The module.
        module: String,
        /// The node.
        node: String,
        /// Why.
        reason: String,
        /// When the grants are asked again.
        retry_at: u64,
    },
    /// The module's rollout stops here; other nodes keep what they ran.
    Stop {
        /// The module.
        module: String,
        /// The node it stopped at.
        node: String,
        /// Why.
        reason: String,
    },
    /// Send the node back what it was sent before this rollout (`on-failure = "revert"`).
    Revert {
        /// The module.
        module: String,
        /// The node.
        node: String,
    },
    /// Every running node applied the module but `nodes` held for a move: the rollout waits
    /// for `--move MODULE` ([`Event::Release`]).
    Held {
        /// The module.
        module: String,
        /// How many nodes are held.
        nodes: usize,
    },
    /// Every running node applied the module.
    Done {
        /// The module.
        module: String,
    },
}

/// Where one node of a rollout stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "progress", rename_all = "kebab-case")]
pub enum NodeProgress {
    /// Not yet begun.
    Waiting,
    /// Its grants were asked for at `since` (the first attempt).
    Granting {
        /// The first grant attempt.
        since: u64,
    },
    /// Its grants failed; asked again at `retry_at`.
    GrantRetry {
        /// The first grant attempt.
        since: u64,
        /// When they are asked again.
        retry_at: u64,
        /// The latest reason.
        reason: String,
    },
    /// Its declaration was sent.
    Sent {
        /// When.
        at: u64,
    },
    /// Its declaration was held back: it would move a running container's data (the rule “A moved mount is held”), or
    /// drop a setting its layers hold (the rule "an orphaned setting is a removal").
    Held {
        /// The moves nobody acknowledged.
        moves: Vec<Move>,
        /// The orphaned settings nobody renamed, dropped or let go.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        orphans: Vec<Orphan>,
    },
    /// It reported the declaration applied and current.
    Applied {
        /// When its declaration was sent.
        sent_at: u64,
        /// When the report was made.
        at: u64,
    },
}

/// Which part of the rollout is under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    /// Not started.
    NotStarted,
    /// The bus node (not running the module) goes first.
    BusNode,
    /// The first node.
    FirstNode,
    /// The rest (or, for `together`, everyone).
    Rest,
    /// Every running node applied but those held for a move: waiting for a person's
    /// `--move MODULE` ([`Event::Release`]).
    Held,
    /// Every running node applied.
    Done,
    /// Stopped at a node.
    Stopped,
}

/// A rollout's state; serializable, so a controller restarted mid-rollout resumes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RolloutState {
    /// Where it stands.
    pub stage: Stage,
    /// The node sent first (one-first), once chosen.
    pub first: Option<String>,
    /// The bus node's progress when it goes first without running the module.
    pub bus_node: Option<(String, NodeProgress)>,
    /// Each running node's progress, by name.
    pub nodes: NodeTable,
    /// Running nodes not yet begun, in the order they will be.
    pub queue: VecDeque<String>,
    /// Nodes begun and not yet applied (rest stage).
    pub in_flight: usize,
    /// Nodes applied.
    pub applied: usize,
    /// Nodes held for a move (the rule “A moved mount is held”).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub held: usize,
    /// Nodes sent the declaration (and not since held), counted as they are.
    #[serde(default)]
    pub sent: usize,
    /// How it ended.
    pub outcome: Option<RolloutOutcome>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Nodes by name with their progress: sorted for reading and serializing, indexed by a hash
/// for the lookups every event makes (constant time, so a rollout grows linearly with nodes).
///
/// It remembers which nodes' progress changed since [`NodeTable::take_changed`] was last called,
/// so a caller keeping each node's progress in a record of its own writes only those.
#[derive(Debug, Clone, Default)]
pub struct NodeTable {
    entries: Vec<(String, NodeProgress)>,
    index: HashMap<String, usize>,
    /// Entries handed out for change since the last `take_changed`, with their value then.
    touched: HashMap<usize, NodeProgress>,
    /// Every entry is new (a rollout begun): all count as changed.
    all_new: bool,
}

impl NodeTable {
    fn from_sorted(entries: Vec<(String, NodeProgress)>) -> Self {
        let mut table = NodeTable {
            entries,
            index: HashMap::new(),
            touched: HashMap::new(),
            all_new: false,
        };
        table.reindex();
        table
    }

    /// The nodes whose progress changed since the last call (every node, after the rollout
    /// began), in order of name.
    pub fn take_changed(&mut self) -> Vec<String> {
        let touched = std::mem::take(&mut self.touched);
        if std::mem::take(&mut self.all_new) {
            return self.keys().cloned().collect();
        }
        let mut changed: Vec<usize> = touched
            .into_iter()
            .filter(|(i, before)| self.entries[*i].1 != *before)
            .map(|(i, _)| i)
            .collect();
        changed.sort_unstable();
        changed
            .into_iter()
            .map(|i| self.entries[i].0.clone())
            .collect()
    }

    fn reindex(&mut self) {
        self.entries.sort_by(|a, b| a.0.cmp(&b.0));
        self.index = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, (name, _))| (name.clone(), i))
            .collect();
    }

    /// A node's progress.
    pub fn get(&self, node: &str) -> Option<&NodeProgress> {
        self.index.get(node).map(|&i| &self.entries[i].1)
    }

    fn get_mut(&mut self, node: &str) -> Option<&mut NodeProgress> {
        let i = *self.index.get(node)?;
        if !self.touched.contains_key(&i) {
            self.touched.insert(i, self.entries[i].1.clone());
        }
        Some(&mut self.entries[i].1)
    }

    /// Whether the table holds the node.
    pub fn contains_key(&self, node: &str) -> bool {
        self.index.contains_key(node)
    }

    /// Node names in order.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.entries.iter().map(|(name, _)| name)
    }

    /// Nodes and their progress in order of name.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &NodeProgress)> {
        self.entries.iter().map(|(name, progress)| (name, progress))
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl PartialEq for NodeTable {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries
    }
}

impl Eq for NodeTable {}

impl Serialize for NodeTable {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.entries.len()))?;
        for (name, progress) in &self.entries {
            map.serialize_entry(name, progress)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for NodeTable {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, NodeProgress>::deserialize(deserializer)?;
        Ok(NodeTable::from_sorted(map.into_iter().collect()))
    }
}

impl RolloutState {
    /// A rollout not yet started.
    pub fn new() -> Self {
        RolloutState {
            stage: Stage::NotStarted,
            first: None,
            bus_node: None,
            nodes: NodeTable::default(),
            queue: VecDeque::new(),
            in_flight: 0,
            applied: 0,
            held: 0,
            sent: 0,
            outcome: None,
        }
    }

    /// The plan's record of this rollout: first node, how many nodes were sent, applied and
    /// held, outcome.
    pub fn record(&self, build: Option<mesh_model::build::ArchiveRef>) -> ModuleRollout {
        ModuleRollout {
            first: self.first.clone(),
            sent: self.sent,
            applied: self.applied,
            held: self.held,
            sends: BTreeMap::new(),
            outcome: self.outcome.clone(),
            build,
        }
    }
}

impl RolloutState {
    /// What a rollout read back from its record must do again, because the controller may
    /// have stopped between a step and carrying out its actions: the grants asked and not
    /// answered are asked again ([`Resume::grants`]); each node sent and not yet heard is heard
    /// from its latest report, or sent again ([`Resume::sent`]; an apply is idempotent). The
    /// one resume path: the caller feeds the answers to [`step`] as usual.
    pub fn to_resume(&self) -> Resume {
        let mut resume = Resume::default();
        let bus_node = match (&self.bus_node, self.stage) {
            (Some((node, progress)), Stage::BusNode) => Some((node, progress)),
            (Some(_) | None, _) => None,
        };
        for (node, progress) in bus_node.into_iter().chain(self.nodes.iter()) {
            match progress {
                NodeProgress::Granting { .. } => resume.grants.push(node.clone()),
                NodeProgress::Sent { .. } => resume.sent.push(node.clone()),
                NodeProgress::Waiting
                | NodeProgress::GrantRetry { .. }
                | NodeProgress::Held { .. }
                | NodeProgress::Applied { .. } => {}
            }
        }
        resume
    }
}

/// A rollout's state without its nodes: what a record of the rollout keeps beside one record per
/// node, so that no record grows with the fleet ([`RolloutState::parts`],
/// [`RolloutState::assemble`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RolloutParts {
    /// Where it stands.
    pub stage: Stage,
    /// The node sent first (one-first), once chosen.
    pub first: Option<String>,
    /// The bus node's progress when it goes first without running the module.
    pub bus_node: Option<(String, NodeProgress)>,
    /// Nodes begun and not yet applied (rest stage).
    pub in_flight: usize,
    /// Nodes applied.
    pub applied: usize,
    /// Nodes held for a move.
    #[serde(default)]
    pub held: usize,
    /// Nodes sent.
    #[serde(default)]
    pub sent: usize,
    /// How many running nodes the rollout has.
    pub nodes: usize,
    /// How it ended.
    pub outcome: Option<RolloutOutcome>,
}

impl RolloutState {
    /// Everything but the nodes' progress.
    pub fn parts(&self) -> RolloutParts {
        RolloutParts {
            stage: self.stage,
            first: self.first.clone(),
            bus_node: self.bus_node.clone(),
            in_flight: self.in_flight,
            applied: self.applied,
            held: self.held,
            sent: self.sent,
            nodes: self.nodes.len(),
            outcome: self.outcome.clone(),
        }
    }

    /// The state again from its parts and each running node's progress (any order): the queue
    /// is the nodes not yet begun, by name, as [`step`] made it.
    pub fn assemble(parts: RolloutParts, nodes: Vec<(String, NodeProgress)>) -> RolloutState {
        let nodes = NodeTable::from_sorted(nodes);
        let queue = match parts.stage {
            Stage::NotStarted => VecDeque::new(),
            Stage::BusNode
            | Stage::FirstNode
            | Stage::Rest
            | Stage::Held
            | Stage::Done
            | Stage::Stopped => nodes
                .iter()
                .filter(|(node, progress)| {
                    matches!(progress, NodeProgress::Waiting)
                        && !(parts.stage == Stage::FirstNode
                            && parts.first.as_deref() == Some(node.as_str()))
                })
                .map(|(node, _)| node.clone())
                .collect(),
        };
        RolloutState {
            stage: parts.stage,
            first: parts.first,
            bus_node: parts.bus_node,
            nodes,
            queue,
            in_flight: parts.in_flight,
            applied: parts.applied,
            held: parts.held,
            sent: parts.sent,
            outcome: parts.outcome,
        }
    }
}

/// What a resumed rollout does again ([`RolloutState::to_resume`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resume {
    /// Nodes whose grants were asked and not answered: ask again.
    pub grants: Vec<String>,
    /// Nodes sent and not yet heard: hear their latest report, else send again.
    pub sent: Vec<String>,
}

impl Default for RolloutState {
    fn default() -> Self {
        RolloutState::new()
    }
}

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
        Event::Held {
            node,
            moves,
            orphans,
        } => held(spec, state, &node, (moves, orphans), now, &mut actions),
        Event::Release => release(spec, state, now, &mut actions),
        Event::Tick => tick(spec, state, now, &mut actions),
    }
    actions
}

/// A node sent (its grants issued) whose declaration the controller held back for a move.
fn held(
    spec: &RolloutSpec,
    state: &mut RolloutState,
    node: &str,
    (moves, orphans): (Vec<Move>, Vec<Orphan>),
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
                .collect::<Vec<_>>()
                .join("; ")
        );
        stop(spec, state, node, reason, actions);
        return;
    }
    *progress = NodeProgress::Held { moves, orphans };
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

fn progress_of<'s>(state: &'s RolloutState, node: &str) -> Option<&'s NodeProgress> {
    match &state.bus_node {
        Some((bus, progress)) if bus == node && state.stage == Stage::BusNode => Some(progress),
        Some(_) | None => state.nodes.get(node),
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
    *progress = NodeProgress::Sent { at: now };
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
    let NodeProgress::Sent { at: sent_at } = *progress else {
        return;
    };
    // The incident behind “The gate judges each node from its own send”: judged from this node's own send, not the module's latest.
    if report.made_at < sent_at || expected != Some(report.declaration.as_str()) {
        return;
    }
    match report.verdict {
        Verdict::Pending => {}
        Verdict::Failed { reasons } => {
            stop(spec, state, &report.node, reasons.join("; "), actions);
        }
        Verdict::Applied => {
            *progress = NodeProgress::Applied {
                sent_at,
                at: report.made_at,
            };
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
        NodeProgress::Sent { at } if now >= at + spec.deadline_secs => {
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
    let was_first = state.stage == Stage::FirstNode;
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
    let sent = matches!(state.nodes.get(node), Some(NodeProgress::Sent { .. }));
    match spec.on_failure {
        OnFailure::Revert if was_first && sent => actions.push(Action::Revert {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write as _;

    fn spec(nodes: &[(&str, bool)], upgrade: Upgrade) -> RolloutSpec {
        RolloutSpec {
            module: "agent".into(),
            upgrade,
            on_failure: OnFailure::Stop,
            deadline_secs: 600,
            max_parallel: None,
            nodes: nodes
                .iter()
                .map(|(name, running)| {
                    (
                        (*name).to_owned(),
                        RolloutNode {
                            running: *running,
                            declaration: format!("sha256:{name}-new"),
                        },
                    )
                })
                .collect(),
            bus_first: None,
        }
    }

    /// Events, one a line: `T start`, `T granted a b`, `T grant-failed a: reason`,
    /// `T report a applied|pending|failed:reason|old-applied MADE_AT`, `T tick`,
    /// `T send-failed a: reason`. Shows each event with the actions it produced, then the record.
    fn check(spec: &RolloutSpec, events: &str) -> String {
        let mut state = RolloutState::new();
        let mut out = String::new();
        for line in events.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (now, rest) = line.split_once(' ').unwrap();
            let now: u64 = now.parse().unwrap();
            let words: Vec<&str> = rest.split_whitespace().collect();
            let event = match words[0] {
                "start" => Event::Start,
                "tick" => Event::Tick,
                "granted" => Event::GrantsIssued {
                    nodes: words[1..].iter().map(|w| (*w).to_owned()).collect(),
                },
                "grant-failed" | "send-failed" => {
                    let (nodes, reason) = rest.split_once(' ').unwrap().1.split_once(": ").unwrap();
                    let nodes: Vec<String> = nodes.split_whitespace().map(str::to_owned).collect();
                    if words[0] == "grant-failed" {
                        Event::GrantsFailed {
                            nodes,
                            reason: reason.to_owned(),
                        }
                    } else {
                        Event::SendFailed {
                            node: nodes[0].clone(),
                            reason: reason.to_owned(),
                        }
                    }
                }
                "report" => {
                    let node = words[1].to_owned();
                    let made_at = words[3].parse().unwrap();
                    let (declaration, verdict) = match words[2] {
                        "applied" => (format!("sha256:{node}-new"), Verdict::Applied),
                        "old-applied" => (format!("sha256:{node}-old"), Verdict::Applied),
                        "pending" => (format!("sha256:{node}-new"), Verdict::Pending),
                        failed => (
                            format!("sha256:{node}-new"),
                            Verdict::Failed {
                                reasons: vec![failed
                                    .trim_start_matches("failed:")
                                    .replace('_', " ")],
                            },
                        ),
                    };
                    Event::Report(NodeReport {
                        node,
                        declaration,
                        made_at,
                        verdict,
                    })
                }
                other => panic!("unknown event {other}"),
            };
            let actions = step(spec, &mut state, event, now);
            let _ = writeln!(out, "{line}");
            for action in actions {
                let _ = writeln!(out, "    {}", serde_json::to_string(&action).unwrap());
            }
        }
        let _ = writeln!(
            out,
            "record: {}",
            serde_json::to_string(&state.record(None)).unwrap()
        );
        out
    }

    #[test]
    fn one_node_first_then_the_rest_after_its_applied_and_current_report() {
        let spec = spec(
            &[("c", true), ("a", true), ("b", true), ("d", false)],
            Upgrade::OneFirst,
        );
        insta::assert_snapshot!(check(
            &spec,
            "100 start
             101 granted a
             150 report a pending 150
             160 report a applied 160
             161 granted b c
             170 report b applied 170
             171 report c applied 171"
        ));
    }

    #[test]
    fn a_failed_first_node_stops_the_module_naming_node_and_reason() {
        let spec = spec(&[("a", true), ("b", true)], Upgrade::OneFirst);
        insta::assert_snapshot!(check(
            &spec,
            "100 start
             101 granted a
             130 report a failed:agent/container/agent:_image_not_found 130
             140 report b applied 140"
        ));
    }

    #[test]
    fn a_first_node_that_does_not_report_in_time_stops_and_reverts_when_asked() {
        let mut spec = spec(&[("a", true), ("b", true)], Upgrade::OneFirst);
        spec.on_failure = OnFailure::Revert;
        spec.deadline_secs = 60;
        insta::assert_snapshot!(check(
            &spec,
            "100 start
             101 granted a
             150 tick
             161 tick"
        ));
    }

    #[test]
    fn together_sends_every_running_node_at_once() {
        let spec = spec(&[("a", true), ("b", true), ("c", true)], Upgrade::Together);
        insta::assert_snapshot!(check(
            &spec,
            "100 start
             101 granted a b c
             110 report b applied 110
             111 report a applied 111
             112 report c applied 112"
        ));
    }

    /// The incident behind “The gate judges each node from its own send”: the gate asked every node for a report made after the module's *last*
    /// send; the first node's report, made between the two sends, read as stale and the plan
    /// waited seven minutes. Each node is judged from its own send — and a report from before
    /// its send (or about an older declaration) does not open the gate.
    #[test]
    fn a_first_nodes_report_between_the_two_sends_opens_the_gate() {
        let spec = spec(&[("a", true), ("b", true)], Upgrade::OneFirst);
        insta::assert_snapshot!(check(
            &spec,
            "100 start
             101 granted a
             102 report a applied 95
             103 report a old-applied 103
             127 report a applied 127
             128 granted b
             140 report b applied 140
             141 report a applied 127"
        ));
    }

    #[test]
    fn grants_come_before_declarations_and_a_failed_grant_fails_the_send() {
        let spec = spec(&[("a", true), ("b", true)], Upgrade::OneFirst);
        insta::assert_snapshot!(check(
            &spec,
            "100 start
             101 grant-failed a: bucket agent-state refused
             105 tick
             111 tick
             112 granted a
             120 report a applied 120
             121 granted b
             130 report b applied 130"
        ));
    }

    #[test]
    fn grants_that_keep_failing_stop_the_rollout_at_the_deadline() {
        let mut spec = spec(&[("a", true)], Upgrade::OneFirst);
        spec.deadline_secs = 30;
        insta::assert_snapshot!(check(
            &spec,
            "100 start
             101 grant-failed a: no such account
             111 tick
             112 grant-failed a: no such account
             131 tick"
        ));
    }

    /// The rule “Grants before code”: when the list of bus users changes, the node holding the
    /// bus is sent first — before the module's first node when it does not run the module.
    #[test]
    fn the_bus_node_goes_first_when_the_bus_users_change() {
        let mut not_running_it = spec(&[("a", true), ("b", true)], Upgrade::OneFirst);
        not_running_it.bus_first = Some(BusFirst {
            node: "control".into(),
            declaration: "sha256:control-new".into(),
        });
        insta::assert_snapshot!(
            "bus_node_without_the_module",
            check(
                &not_running_it,
                "100 start
                 101 granted control
                 110 report control applied 110
                 111 granted a
                 120 report a applied 120
                 121 granted b
                 130 report b applied 130"
            )
        );
        let mut running_it = spec(&[("a", true), ("control", true)], Upgrade::OneFirst);
        running_it.bus_first = Some(BusFirst {
            node: "control".into(),
            declaration: "sha256:control-new".into(),
        });
        insta::assert_snapshot!(
            "bus_node_running_the_module",
            check(
                &running_it,
                "100 start
                 101 granted control
                 110 report control applied 110
                 111 granted a
                 120 report a applied 120"
            )
        );
    }

    #[test]
    fn max_parallel_limits_the_rest_in_flight() {
        let mut spec = spec(
            &[
                ("a", true),
                ("b", true),
                ("c", true),
                ("d", true),
                ("e", true),
            ],
            Upgrade::OneFirst,
        );
        spec.max_parallel = Some(2);
        insta::assert_snapshot!(check(
            &spec,
            "100 start
             101 granted a
             110 report a applied 110
             111 granted b c
             120 report c applied 120
             121 granted d
             122 report b applied 122
             123 granted e
             130 report d applied 130
             131 report e applied 131"
        ));
    }

    #[test]
    fn no_running_node_stops_and_no_node_is_done() {
        insta::assert_snapshot!(check(
            &spec(&[("a", false)], Upgrade::OneFirst),
            "100 start"
        ));
        insta::assert_snapshot!(
            "no_nodes",
            check(&spec(&[], Upgrade::OneFirst), "100 start")
        );
    }

    fn applied(node: &str, made_at: u64) -> Event {
        Event::Report(NodeReport {
            node: node.into(),
            declaration: format!("sha256:{node}-new"),
            made_at,
            verdict: Verdict::Applied,
        })
    }

    fn granted(nodes: &[&str]) -> Event {
        Event::GrantsIssued {
            nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
        }
    }

    /// A controller stopped mid-rollout reads the state back from its record and carries on
    /// through the one resume path: grants asked again, sent nodes heard from their reports.
    #[test]
    fn a_restarted_controller_resumes_where_the_record_says() {
        let spec = spec(&[("a", true), ("b", true), ("c", true)], Upgrade::OneFirst);
        let mut state = RolloutState::new();
        step(&spec, &mut state, Event::Start, 100);
        // Stopped with a's grants asked and not answered: they are asked again.
        let read_back = |state: &RolloutState| -> RolloutState {
            serde_json::from_str(&serde_json::to_string(state).unwrap()).unwrap()
        };
        let resumed = read_back(&state);
        assert_eq!(
            resumed.to_resume(),
            Resume {
                grants: vec!["a".into()],
                sent: vec![]
            }
        );
        step(&spec, &mut state, granted(&["a"]), 101);
        let mut resumed = read_back(&state);
        assert_eq!(
            resumed.to_resume(),
            Resume {
                grants: vec![],
                sent: vec!["a".into()]
            }
        );
        // A report made before the restart, after a's own send, opens the gate.
        let actions = step(&spec, &mut resumed, applied("a", 150), 201);
        assert_eq!(
            actions,
            [Action::IssueGrants {
                nodes: vec!["b".into(), "c".into()]
            }]
        );
        step(&spec, &mut resumed, granted(&["b"]), 202);
        let mut again = read_back(&resumed);
        assert_eq!(
            again.to_resume(),
            Resume {
                grants: vec!["c".into()],
                sent: vec!["b".into()]
            }
        );
        step(&spec, &mut again, granted(&["c"]), 301);
        step(&spec, &mut again, applied("b", 310), 310);
        assert_eq!(
            step(&spec, &mut again, applied("c", 311), 311),
            [Action::Done {
                module: "agent".into()
            }]
        );
    }

    /// A rollout is kept as its parts and one record per node; read back, it is the
    /// same state, and only the nodes an event changed are to be written again.
    #[test]
    fn a_rollout_kept_as_parts_and_nodes_reads_back_whole_and_says_what_changed() {
        let spec = spec(
            &[("a", true), ("b", true), ("c", true), ("d", true)],
            Upgrade::OneFirst,
        );
        let mut state = RolloutState::new();
        step(&spec, &mut state, Event::Start, 100);
        assert_eq!(state.nodes.take_changed(), ["a", "b", "c", "d"], "all new");
        step(&spec, &mut state, granted(&["a"]), 101);
        assert_eq!(state.nodes.take_changed(), ["a"]);
        // A report about another declaration changes nothing: nothing to write.
        let stale = Event::Report(NodeReport {
            node: "a".into(),
            declaration: "sha256:old".into(),
            made_at: 102,
            verdict: Verdict::Applied,
        });
        step(&spec, &mut state, stale, 102);
        assert!(state.nodes.take_changed().is_empty());
        step(&spec, &mut state, applied("a", 103), 103);
        assert_eq!(state.nodes.take_changed(), ["a", "b", "c", "d"]);
        let mut nodes: Vec<(String, NodeProgress)> = state
            .nodes
            .iter()
            .map(|(n, p)| (n.clone(), p.clone()))
            .collect();
        nodes.reverse();
        let again = RolloutState::assemble(state.parts(), nodes);
        assert_eq!(again, state);
        assert_eq!(again.queue, state.queue);
    }

    fn a_move(node: &str) -> Vec<Move> {
        vec![Move {
            module: "agent".into(),
            container: "agent/container/db".into(),
            at: "/data".into(),
            from: format!("/srv/{node}/old"),
            to: format!("/srv/{node}/new"),
        }]
    }

    /// The rule “A moved mount is held” on the rollout path: a first node whose data would move is held, the
    /// next node goes first, the others go on; the rollout then waits, open, until a person's
    /// `--move` releases the held node, which is then sent and judged like any other.
    #[test]
    fn a_held_first_node_passes_the_gate_to_the_next_and_waits_for_release() {
        let spec = spec(&[("a", true), ("b", true), ("c", true)], Upgrade::OneFirst);
        let mut state = RolloutState::new();
        step(&spec, &mut state, Event::Start, 100);
        assert_eq!(
            step(&spec, &mut state, granted(&["a"]), 101),
            [Action::Send {
                node: "a".into(),
                module: "agent".into()
            }]
        );
        let held = Event::Held {
            node: "a".into(),
            moves: a_move("a"),
            orphans: Vec::new(),
        };
        assert_eq!(
            step(&spec, &mut state, held, 102),
            [Action::IssueGrants {
                nodes: vec!["b".into()]
            }]
        );
        assert_eq!(state.first.as_deref(), Some("b"));
        step(&spec, &mut state, granted(&["b"]), 103);
        assert_eq!(
            step(&spec, &mut state, applied("b", 104), 104),
            [Action::IssueGrants {
                nodes: vec!["c".into()]
            }]
        );
        step(&spec, &mut state, granted(&["c"]), 105);
        assert_eq!(
            step(&spec, &mut state, applied("c", 106), 106),
            [Action::Held {
                module: "agent".into(),
                nodes: 1
            }]
        );
        assert_eq!(state.stage, Stage::Held);
        assert_eq!(state.outcome, None, "a held rollout is not over");
        assert!(step(&spec, &mut state, Event::Tick, 5000).is_empty());
        assert_eq!(
            step(&spec, &mut state, Event::Release, 200),
            [Action::IssueGrants {
                nodes: vec!["a".into()]
            }]
        );
        step(&spec, &mut state, granted(&["a"]), 201);
        assert_eq!(
            step(&spec, &mut state, applied("a", 202), 202),
            [Action::Done {
                module: "agent".into()
            }]
        );
    }

    /// With every node held, nothing is sent and the rollout waits; released, the first of them
    /// goes first.
    #[test]
    fn every_node_held_sends_nothing_until_released_then_one_goes_first() {
        let spec = spec(&[("a", true), ("b", true)], Upgrade::OneFirst);
        let mut state = RolloutState::new();
        step(&spec, &mut state, Event::Start, 100);
        step(&spec, &mut state, granted(&["a"]), 101);
        let hold = |node: &str| Event::Held {
            node: node.into(),
            moves: a_move(node),
            orphans: Vec::new(),
        };
        step(&spec, &mut state, hold("a"), 102);
        step(&spec, &mut state, granted(&["b"]), 103);
        assert_eq!(
            step(&spec, &mut state, hold("b"), 104),
            [Action::Held {
                module: "agent".into(),
                nodes: 2
            }]
        );
        assert_eq!(
            step(&spec, &mut state, Event::Release, 200),
            [Action::IssueGrants {
                nodes: vec!["a".into()]
            }]
        );
        assert_eq!(state.stage, Stage::FirstNode);
    }

    #[test]
    fn a_report_is_read_from_a_hosts_report() {
        let report: Report = serde_json::from_value(serde_json::json!({
            "format": 1, "node": "a", "declaration": "sha256:x", "machine": "partial",
            "resources": {
                "agent/file/config": {"outcome": "applied", "changed": ["content"]},
                "agent/container/agent": {"outcome": "failed", "reason": "image not found", "attempts": 1, "since": 5}
            },
            "started-at": 5, "finished-at": 9
        }))
        .unwrap();
        assert_eq!(
            NodeReport::from_report(&report),
            NodeReport {
                node: "a".into(),
                declaration: "sha256:x".into(),
                made_at: 9,
                verdict: Verdict::Failed {
                    reasons: vec!["agent/container/agent: image not found".into()]
                },
            }
        );
    }
}
