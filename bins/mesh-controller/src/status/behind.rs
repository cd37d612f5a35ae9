//! Nodes behind: a node that was not running when its module's rollout finished was never sent
//! the module, and is behind on it until a declaration is sent to it. A rollout that passed it
//! over never leaves it out of view: `status` lists it and `push --behind` sends it once it
//! runs.
//!
//! Read from the deployed records (each names the nodes its rollout did not send, what each
//! held then and what the rollout composed for it) and what every node was sent, one listing
//! each: no comparison of commits (the rule “Behind means an open plan has not done it yet”).
//!
//! # Guarantees
//! - A node is behind on a module only when the module's last finished rollout passed it over
//!   as not running, it is still assigned the module, nothing was sent to it since, and what
//!   it held differs from what the rollout composed for it.
//! - Any send to the node ends it: every send composes from the deployed builds.

use crate::error::Result;
use crate::home::Home;
use serde::Serialize;

/// A node a finished rollout passed over because it was not running.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct NodeBehind {
    /// The node.
    pub node: String,
    /// The module it has not been sent.
    pub module: String,
    /// The plan whose rollout passed it over.
    pub plan: String,
    /// Whether the inventory says it runs now (`push --behind` sends only those).
    pub running: bool,
}

/// Every node behind on a module, sorted by node and module.
///
/// # Errors
/// The deployed records, the inventory or the sent records cannot be read.
pub fn nodes_behind(home: &Home) -> Result<Vec<NodeBehind>> {
    let deployed = home.deployed().all()?;
    if deployed.iter().all(|record| record.not_running.is_empty()) {
        return Ok(Vec::new());
    }
    let inventory = home.inventory()?;
    let sent = home.sent().digests()?;
    let mut out = Vec::new();
    for record in &deployed {
        for (node, not_sent) in &record.not_running {
            if !inventory.assigns(&record.module, node) {
                continue;
            }
            let sent_since = sent.get(node) != not_sent.before.as_ref();
            let holds_it = not_sent.before.as_ref() == Some(&not_sent.declaration);
            if sent_since || holds_it {
                continue;
            }
            out.push(NodeBehind {
                node: node.clone(),
                module: record.module.clone(),
                plan: record.plan.clone(),
                running: inventory.file.nodes.get(node).is_some_and(|n| n.running),
            });
        }
    }
    out.sort();
    Ok(out)
}

/// What `push --behind` sends once the open plans' rollouts are driven: of the nodes behind,
/// those that run now, and those left as they are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Sends {
    /// The nodes behind that the inventory says run now, each once, sorted: each is sent what
    /// the mesh runs.
    pub running: Vec<String>,
    /// The nodes behind that do not run now, one entry each module they are behind on: not
    /// sent, listed (`push --behind` says each is still not running).
    pub not_running: Vec<NodeBehind>,
}

impl Sends {
    /// Whether no node is behind at all, running or not.
    pub fn is_empty(&self) -> bool {
        self.running.is_empty() && self.not_running.is_empty()
    }
}

/// What a push of the nodes behind did (`push --behind --output json` prints it): the open
/// plans' rollouts driven, then the nodes behind that run sent what the mesh runs.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct BehindPushed {
    /// The catalogues the push read.
    pub read: crate::catalogue::heads::Running,
    /// The open plans, as their rollouts left them.
    pub plans: Vec<mesh_model::plan::Plan>,
    /// What the push did for each node behind that runs.
    pub nodes: Vec<crate::push::PushResult>,
    /// The nodes behind that do not run, left as they are.
    pub not_running: Vec<NodeBehind>,
}

/// The nodes `push --behind` sends: every node behind ([`nodes_behind`]) that runs now, each
/// once however many modules it is behind on; those that do not run are kept apart, to be
/// listed, since a send to them would go unheard.
///
/// # Errors
/// As [`nodes_behind`].
pub fn to_send(home: &Home) -> Result<Sends> {
    let (running, not_running): (Vec<NodeBehind>, Vec<NodeBehind>) =
        nodes_behind(home)?.into_iter().partition(|b| b.running);
    let mut running: Vec<String> = running.into_iter().map(|b| b.node).collect();
    // Sorted by node already; a node behind on two modules is sent once.
    running.dedup();
    Ok(Sends {
        running,
        not_running,
    })
}
