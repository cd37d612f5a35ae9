//! Composing declarations, what a push did for each node, and each node's status. The push
//! itself is [`crate::executor::push()`], through a [`crate::executor::fleet::Fleet`]: in the
//! embedded default every node's host agent runs in this process on an in-process bus, and the
//! controller publishes each declaration and waits for each report exactly as across a fleet.

use crate::error::{Context, Error, Result};
use crate::home::heard::Heard;
use crate::home::Home;
use mesh_model::declaration::Declaration;
use mesh_model::module::Catalogue;
use mesh_model::report::Report;
use mesh_model::Diagnostic;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The catalogue and its problems, as sends compose from it.
pub type Checked = (Catalogue, Vec<Diagnostic>);

/// Every problem of the catalogue and the inventory. A key a layer sets ahead of the version
/// the nodes run, which an open plan's version accepts, is no problem: it waits
/// ([`crate::catalogue::newest::validate`]).
///
/// When the catalogue and the inventory are sound, every node's declaration is composed too, and
/// what refuses one is a problem of that node (`nodes.<node>`): a setting that renders to
/// something a resource cannot be, or two modules' containers publishing one host port.
pub(crate) fn problems(home: &Home, checked: &Checked) -> Result<Vec<Diagnostic>> {
    let (catalogue, problems) = checked;
    let mut problems = problems.clone();
    let inventory = home.inventory()?;
    problems.extend(crate::catalogue::newest::validate(home, catalogue, &inventory)?.0);
    if problems.is_empty() {
        for node in inventory.file.nodes.keys() {
            if let Err(mesh_plan::ComposeError::Problems {
                problems: found, ..
            }) = mesh_plan::compose(catalogue, &inventory, node)
            {
                problems.extend(found.iter().map(|problem| {
                    Diagnostic::new(
                        mesh_model::inventory::INVENTORY_FILE,
                        None,
                        Some(&format!("nodes.{node}")),
                        problem.to_string(),
                    )
                }));
            }
        }
    }
    problems.sort();
    Ok(problems)
}

/// Composes every named node's declaration, refusing (with every problem) an unsound mesh.
pub(crate) fn compose_nodes(
    home: &Home,
    checked: &Checked,
    nodes: &[String],
) -> Result<Vec<Declaration>> {
    let (catalogue, problems) = checked;
    let mut problems = problems.clone();
    let inventory = home.inventory()?;
    problems.extend(crate::catalogue::newest::validate(home, catalogue, &inventory)?.0);
    crate::refuse_problems(&problems)?;
    nodes
        .iter()
        .map(|node| {
            require_node(&inventory, node)?;
            mesh_plan::compose(catalogue, &inventory, node)
                .for_node(node, || format!("composing the declaration of `{node}`"))
        })
        .collect()
}

/// Composes one node's declaration.
pub fn compose_node(home: &Home, checked: &Checked, node: &str) -> Result<Declaration> {
    Ok(compose_nodes(home, checked, &[node.to_owned()])?.remove(0))
}

/// What a push did for one node.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum NodeResult {
    /// The declaration was sent and the node reported.
    Reported {
        /// The digest sent.
        declaration: String,
        /// How many resources it declares.
        resources: usize,
        /// The node's report (boxed: a report is far larger than the other results).
        report: Box<Report>,
    },
    /// Not sent: the push would move a running container's data (the rule “A moved mount is held”;
    /// allowing the module's move sends it), or take a module back to an older build than the
    /// node runs (allowing the module's downgrade sends it).
    Held {
        /// The moves nobody acknowledged.
        moves: Vec<mesh_plan::Move>,
        /// The downgrades nobody allowed.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        downgrades: Vec<Downgrade>,
    },
    /// The declaration was sent and no report came in time.
    NoReport {
        /// The digest sent.
        declaration: String,
        /// Why no report.
        reason: String,
    },
}

/// One node's line of a push.
#[derive(Debug, Clone, Serialize)]
pub struct PushResult {
    /// The node.
    pub node: String,
    /// What happened.
    #[serde(flatten)]
    pub result: NodeResult,
}

/// A module a push would take back to an older build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Downgrade {
    /// The module.
    pub module: String,
    /// The build the node runs (the newer), and the plan that built it.
    pub runs: String,
    /// The plan whose build it runs.
    pub runs_plan: String,
    /// The build the push would send (the older; `None`: the home's catalogue, no build).
    pub would_send: Option<String>,
}

impl std::fmt::Display for Downgrade {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` would go back from build {} ({}) to {}",
            self.module,
            mesh_host::short(&self.runs),
            self.runs_plan,
            match &self.would_send {
                Some(build) => format!("build {}, older", mesh_host::short(build)),
                None => "the home's catalogue".to_owned(),
            }
        )
    }
}

/// Why a push held a node: the moves and the downgrades nobody allowed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Held {
    /// The moves of running containers' data.
    pub moves: Vec<mesh_plan::Move>,
    /// The modules taken back to an older build.
    pub downgrades: Vec<Downgrade>,
}

/// A push's results, node by node (sorted): the held ones, then each sent declaration with
/// the report heard for it, or "no report" after `timeout`.
pub(crate) fn results(
    held: BTreeMap<String, Held>,
    declarations: &[Declaration],
    mut heard: BTreeMap<String, Report>,
    timeout: Duration,
) -> Vec<PushResult> {
    let mut results: Vec<PushResult> = held
        .into_iter()
        .map(|(node, held)| PushResult {
            node,
            result: NodeResult::Held {
                moves: held.moves,
                downgrades: held.downgrades,
            },
        })
        .collect();
    results.extend(declarations.iter().map(|declaration| {
        let node = declaration.node.clone();
        let result = match heard.remove(&node) {
            Some(report) => NodeResult::Reported {
                declaration: declaration.digest(),
                resources: declaration.resources.len(),
                report: Box::new(report),
            },
            None => NodeResult::NoReport {
                declaration: declaration.digest(),
                reason: format!("no report within {}s", timeout.as_secs()),
            },
        };
        PushResult { node, result }
    }));
    results.sort_by(|a, b| a.node.cmp(&b.node));
    results
}

/// One node as `status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct NodeStatus {
    /// The node.
    pub node: String,
    /// Whether it holds the bus.
    pub bus_node: bool,
    /// The modules assigned to it.
    pub modules: BTreeSet<String>,
    /// The digest of what it should run now, its intent ([`crate::intent`]), if known.
    #[serde(default)]
    pub intent: Option<String>,
    /// The digest last sent, if any.
    pub sent: Option<String>,
    /// Its last report, if any.
    pub report: Option<Report>,
    /// Whether the last report is of the declaration last sent.
    pub current: bool,
    /// When its last report was heard (on a fleet, a heartbeat counts; in the embedded default,
    /// when the apply reported finished).
    #[serde(default)]
    pub heard_at: Option<u64>,
    /// On a fleet: set, to when it was last heard, once nothing was heard from it for more than
    /// three heartbeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silent_since: Option<u64>,
    /// Its last report, when it could not be read (then `report` is `None`): that node's
    /// problem, shown on it; every other node reads as usual.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<crate::home::heard::UnreadableReport>,
    /// The digest of a declaration written as about to be sent and never recorded sent (the
    /// controller stopped between the two, or the bus did not take it): sent, unconfirmed,
    /// until the node's report names it (then it is `sent`, and the node current) or a later
    /// send is recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unconfirmed: Option<String>,
    /// On a fleet, how far the host's clock is off the bus's, in seconds (ahead when positive):
    /// its clock when it published its last report against the time the bus stored it. `None`
    /// in the embedded default (one machine, one clock) and from a host before it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_secs: Option<i64>,
}

impl NodeStatus {
    /// `at`, a time by the host's clock (a report's, a drift's), as the bus's clock reads it:
    /// moved by how far the host's clock is off ([`NodeStatus::clock_offset_secs`]), so that a
    /// deadline or an age is never the host's clock against the controller's.
    pub fn on_bus_clock(&self, at: u64) -> u64 {
        on_bus_clock(at, self.clock_offset_secs)
    }

    /// The machine's state in its last report, as a word (`converged`, `mid-change`,
    /// `partial`); `None` with no report.
    pub fn machine_word(&self) -> Option<&'static str> {
        self.report.as_ref().map(|report| match report.machine {
            mesh_model::report::MachineState::Converged => "converged",
            mesh_model::report::MachineState::MidChange => "mid-change",
            mesh_model::report::MachineState::Partial => "partial",
        })
    }
}

/// `at`, by a host's clock `offset` seconds off the bus's, as the bus's clock reads it.
pub(crate) fn on_bus_clock(at: u64, offset: Option<i64>) -> u64 {
    at.saturating_add_signed(-offset.unwrap_or(0))
}

/// How far a host's clock is off the bus's, in seconds, by `report` (which it stamped as it
/// published it) and `stored_at`, when the bus stored it; `None` from a host that does not
/// stamp its reports.
pub(crate) fn clock_offset_secs(report: &Report, stored_at: u64) -> Option<i64> {
    let published = i64::try_from(report.published_at?).ok()?;
    Some(published - i64::try_from(stored_at).ok()?)
}

/// How far a host's clock may be off the bus's before `status` names it (as NTP monitoring
/// would): a minute.
pub(crate) const CLOCK_SKEW_LIMIT_SECS: u64 = 60;

/// How long a fleet's node may go unheard before `status` calls it silent: three of a host's
/// default heartbeats (the rule “Every report is heard, from one source”).
pub const SILENT_AFTER_SECS: u64 = 3 * mesh_host::serve::DEFAULT_HEARTBEAT.as_secs();

/// Every node's status at `now`. On a fleet (reports from the bus), a node not heard for more
/// than `silent_after_secs` — three heartbeats — is silent since it was last heard.
///
/// # Errors
/// The records or the reports cannot be read.
pub fn status(home: &Home, now: u64, silent_after_secs: u64) -> Result<Vec<NodeStatus>> {
    let inventory = home.inventory()?;
    // One listing of what every node was sent, not a read per node.
    let mut sent_all = home.sent().digests()?;
    let mut unconfirmed_all = home.sent().unconfirmed(&sent_all)?;
    inventory
        .file
        .nodes
        .keys()
        .map(|node| {
            let sent = sent_all.remove(node);
            let (report, heard_at, unreadable) = match home.reports().as_heard(node)? {
                Some(Heard::Read { report, heard_at }) => (Some(report), Some(heard_at), None),
                Some(Heard::Unreadable(unreadable)) => {
                    (None, Some(unreadable.heard_at), Some(unreadable))
                }
                None => (None, None, None),
            };
            // A send written as about to be made and never recorded made is reconciled with the
            // node's report: a node reporting its digest runs it, and was sent it.
            let (sent, unconfirmed) =
                match (&report, unconfirmed_all.remove(node).map(|r| r.declaration)) {
                    (Some(report), Some(digest)) if report.declaration == digest => {
                        (Some(digest), None)
                    }
                    (_, unconfirmed) => (sent, unconfirmed),
                };
            let current = matches!((&sent, &report), (Some(s), Some(r)) if *s == r.declaration);
            // One machine, one clock in the embedded default.
            let clock_offset_secs = match (&report, heard_at) {
                (Some(report), Some(at)) if home.reports_from_bus() => {
                    clock_offset_secs(report, at)
                }
                (Some(_) | None, _) => None,
            };
            let silent_since = match heard_at {
                Some(at)
                    if home.reports_from_bus() && now.saturating_sub(at) > silent_after_secs =>
                {
                    Some(at)
                }
                Some(_) | None => None,
            };
            Ok(NodeStatus {
                heard_at,
                silent_since,
                node: node.clone(),
                bus_node: *node == inventory.file.bus_node,
                modules: inventory
                    .modules_of(node)
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
                intent: None,
                sent,
                report,
                current,
                unreadable,
                unconfirmed,
                clock_offset_secs,
            })
        })
        .collect()
}

/// Fails unless `node` is a node of the inventory, naming the nodes there are.
///
/// # Errors
/// When it is not.
pub fn require_node(inventory: &mesh_model::inventory::Inventory, node: &str) -> Result<()> {
    if !inventory.file.nodes.contains_key(node) {
        return Err(Error::UnknownNode {
            node: node.to_owned(),
            known: inventory.file.nodes.keys().cloned().collect(),
        });
    }
    Ok(())
}

/// A push that names no node and does not say every node: refused, nothing sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("push names no node; name the nodes, or push to every node")]
pub struct NoNodeNamed;

/// The nodes a push goes to: every node of the inventory with `all`, else those named. A push
/// naming none is refused rather than read as "every node".
///
/// # Errors
/// [`NoNodeNamed`] when `nodes` is empty and `all` is not set.
pub fn targets(
    inventory: &mesh_model::inventory::Inventory,
    nodes: Vec<String>,
    all: bool,
) -> std::result::Result<Vec<String>, NoNodeNamed> {
    if all {
        Ok(inventory.file.nodes.keys().cloned().collect())
    } else if nodes.is_empty() {
        Err(NoNodeNamed)
    } else {
        Ok(nodes)
    }
}

/// What a push's results come to, as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Every node sent to reported converged.
    Converged,
    /// Some node was held (its container's data would move): nothing was sent to it.
    Held,
    /// Some node sent to did not converge, or did not report in time.
    NotConverged,
}

/// What `results` come to: held when any node was held, else converged when every node
/// reported converged, else not converged.
pub fn verdict(results: &[PushResult]) -> Verdict {
    if results
        .iter()
        .any(|r| matches!(r.result, NodeResult::Held { .. }))
    {
        return Verdict::Held;
    }
    let converged = results.iter().all(|r| {
        matches!(&r.result, NodeResult::Reported { report, .. }
            if report.machine == mesh_model::report::MachineState::Converged)
    });
    if converged {
        Verdict::Converged
    } else {
        Verdict::NotConverged
    }
}
