//! One module's rollout as a state machine: events in, actions out, time an argument (the rules
//! “Grants before code”, “One machine first” and “The gate judges each node from its own send”).
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
//! - **Each node is judged from its own send** (the incident behind “The gate judges each node from
//!   its own send”): a report counts when it is about the declaration that node was sent and
//!   answers that node's own send — it names the send's id ([`NodeProgress::Sent`]'s `send`, the
//!   message id the controller made for it) — so a first node's report made between the two
//!   sends opens the gate, and a report from before its send, of an earlier send of the same
//!   declaration, does not. No judgement compares the host's clock with the controller's: a
//!   host whose clock is an hour behind is judged as any other. Only a report naming no send
//!   (a host older than send ids) is judged by when it was made, as before them (see
//!   [`step`]'s `answers_its_send`).
//!
//! - **A move is held, not made** (the rule “A moved mount is held”): a node whose new declaration
//!   would give a running container another host directory at a mount is reported [`Event::Held`]
//!   by the controller instead of being sent; it is passed over (the next node goes first when it
//!   was the first), the others go on, and once every other node applied the rollout waits in
//!   [`Stage::Held`] until [`Event::Release`] (a person's `--move MODULE`).
//!
//! Nodes that are not running are not sent to; they take the module at their next push.

use crate::moves::Move;
use crate::orphans::Orphan;
use mesh_model::module::{ModuleDefinition, OnFailure, Upgrade};
use mesh_model::report::{MachineState, Outcome, Report};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod state;
mod step;

pub use state::{NodeProgress, NodeTable, Resume, RolloutParts, RolloutState, Stage};
pub use step::step;

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
    /// The digest of the declaration it is sent; its report must name it. The controller may
    /// leave it empty until it composes the node's declaration for its send: no report is
    /// judged of a node not sent.
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
    /// What a node published as its report does not read (garbage, a newer major format,
    /// over the size limit, naming another node): a node sent and not yet answered is judged
    /// failed at once, its rollout stopped naming it and why (the gate cannot read its answer).
    Unreadable {
        /// The node.
        node: String,
        /// Why it does not read, with its size and first bytes.
        reason: String,
    },
    /// A node's declaration was not sent: it would move a running container's data (the rule “A
    /// moved mount is held”), or drop a setting its layers hold (the rule "an orphaned setting is a
    /// removal").
    Held {
        /// The node.
        node: String,
        /// The moves nobody acknowledged.
        moves: Vec<Move>,
        /// The orphaned settings nobody renamed, dropped or let go.
        orphans: Vec<Orphan>,
        /// The settings its modules require that no layer sets for it.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        unset: Vec<crate::compose::Unset>,
    },
    /// A person acknowledged the moves (`--move MODULE`): the held nodes are sent.
    Release,
    /// A person retried the stopped rollout, its cause fixed (`plans retry`): the nodes left
    /// unanswered at the stop are begun again from where it stopped.
    Retry,
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
    /// When the report was made (the apply's end, by the host's clock), seconds since the epoch:
    /// read only for a report that names no send ([`NodeReport::send`]).
    pub made_at: u64,
    /// The send the report answers (its declaration's message id), when the host names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send: Option<String>,
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
    /// Reads a host's report: failed or stuck resources make [`Verdict::Failed`], and so does
    /// one `waiting` out its backoff (it failed as declared before, and the host does not try
    /// it again before its time: a gate waiting for it would wait out its deadline for a report
    /// that says nothing new); a converged machine [`Verdict::Applied`]; anything else
    /// [`Verdict::Pending`]. A host that could not apply at all ([`Report::host_failure`]: its
    /// state directory cannot be written) is [`Verdict::Failed`] with its reason, whatever its
    /// resources say.
    pub fn from_report(report: &Report) -> Self {
        let mut reasons = Vec::new();
        if let Some(reason) = &report.host_failure {
            reasons.push(format!("the host cannot apply: {reason}"));
        }
        for (id, outcome) in &report.resources {
            match outcome {
                Outcome::Failed { reason, .. } => reasons.push(format!("{id}: {reason}")),
                Outcome::Stuck { last_reason, .. } => {
                    reasons.push(format!("{id}: stuck: {last_reason}"))
                }
                Outcome::Waiting {
                    last_reason,
                    attempts,
                    ..
                } => reasons.push(format!(
                    "{id}: {last_reason} (failed {attempts} time(s) as declared before; \
                     the host tries it again after its backoff)"
                )),
                Outcome::Applied { .. }
                | Outcome::Unchanged
                | Outcome::HeldStill { .. }
                | Outcome::Skipped { .. }
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
            send: report.send.clone(),
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

#[cfg(test)]
mod tests;
