//! Where a rollout stands: each node's progress, the stage, and the state the step function
//! advances (saved in the plan and read back to resume).

use crate::moves::Move;
use crate::orphans::Orphan;
use mesh_model::plan::{ModuleRollout, RolloutOutcome};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};

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
        /// When (the controller's clock): its deadline counts from it.
        at: u64,
        /// The send's id (the message id its declaration went out with), named by the
        /// controller as it sends ([`RolloutState::name_send`]): the report answering this send
        /// names it. Absent from a record made before send ids, and until it is named.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        send: Option<String>,
    },
    /// Its declaration was held back: it would move a running container's data (the rule “A moved
    /// mount is held”), or drop a setting its layers hold (the rule "an orphaned setting is a
    /// removal").
    Held {
        /// The moves nobody acknowledged.
        moves: Vec<Move>,
        /// The orphaned settings nobody renamed, dropped or let go.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        orphans: Vec<Orphan>,
        /// The settings its modules require that no layer sets for it: it is not sent until a
        /// layer sets them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        unset: Vec<crate::compose::Unset>,
    },
    /// It reported the declaration applied and current.
    Applied {
        /// When its declaration was sent.
        sent_at: u64,
        /// When the controller judged its report (the controller's clock, as `sent_at`, so the
        /// difference is how long the node took; a record made before this build holds the
        /// host's time of the report).
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
    /// `--move MODULE` ([`Event::Release`](super::Event::Release)).
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
    pub(super) all_new: bool,
}

impl NodeTable {
    pub(super) fn from_sorted(entries: Vec<(String, NodeProgress)>) -> Self {
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

    pub(super) fn get_mut(&mut self, node: &str) -> Option<&mut NodeProgress> {
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
    /// one resume path: the caller feeds the answers to [`step`](super::step) as usual.
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
    /// is the nodes not yet begun, by name, as [`step`](super::step) made it.
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
