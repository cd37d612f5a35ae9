//! `runtimes`: who is there on the bus (the rule “Discovery waits for everyone who said they are
//! there”), set against the inventory.
//!
//! Start at [`runtimes`]; the comparison itself is pure ([`compare_with_inventory`]).
//!
//! What it must never do: say that a module of a node whose runtime was not heard is missing
//! or running elsewhere.

use crate::bus::credentials::{connect, BusConfig};
use crate::error::{bus_error, Result};
use crate::home::Home;
use mesh_bus::discovery::{self, Discovery};
use mesh_model::inventory::Inventory;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// One runtime as `runtimes` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct RuntimeLine {
    /// `mesh-host` or `mesh-controller` (or another service's name).
    pub service: String,
    /// The node it said it runs on.
    pub node: Option<String>,
    /// Its instance id.
    pub id: String,
    /// Its version.
    pub version: String,
    /// Milliseconds from the question to its answer of what it serves.
    pub answer_ms: u64,
    /// Its answer's size in bytes.
    pub answer_bytes: usize,
    /// The modules it runs.
    pub modules: Vec<String>,
}

/// What `runtimes` found.
#[derive(Debug, Clone, Serialize)]
pub struct Runtimes {
    /// Every runtime that said what it serves.
    pub runtimes: Vec<RuntimeLine>,
    /// Runtimes that said they were there and not what they serve: nothing may say their
    /// modules are missing or run elsewhere (the rule “Discovery waits for everyone who said they
    /// are there”).
    pub not_heard: Vec<NotHeard>,
    /// Nodes of the inventory no host's runtime answered for.
    pub nodes_not_heard: Vec<String>,
    /// Modules the inventory assigns a heard node that no runtime of that node serves, by
    /// node (see [`compare_with_inventory`]).
    pub missing: Vec<Missing>,
    /// Modules a heard host's runtime serves that the inventory assigns to other nodes only.
    pub running_elsewhere: Vec<RunningElsewhere>,
    /// Milliseconds discovery took.
    pub waited_ms: u64,
    /// Answers that could not be read, named (the rule “Discovery waits for everyone who said they
    /// are there”): what they answer, who when known, why, and how they begin.
    pub unreadable: Vec<discovery::UnreadableAnswer>,
}

/// A runtime that said it is there and not what it serves.
#[derive(Debug, Clone, Serialize)]
pub struct NotHeard {
    /// Its service name.
    pub service: String,
    /// The node its first answer named.
    pub node: Option<String>,
    /// Its instance id.
    pub id: String,
    /// Milliseconds to its "I am here".
    pub ping_ms: u64,
}

/// Modules missing on one node: the inventory assigns them to it, and its host's runtime,
/// heard, does not serve them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Missing {
    /// The node.
    pub node: String,
    /// The modules, sorted.
    pub modules: Vec<String>,
}

/// A module served on a node the inventory does not assign it to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunningElsewhere {
    /// The module.
    pub module: String,
    /// The node whose host's runtime serves it.
    pub node: String,
    /// The nodes the inventory assigns it to (every one of them heard).
    pub assigned_to: Vec<String>,
}

impl Runtimes {
    /// What `runtimes` says when it exits (the command's exit code).
    ///
    /// 3 (needs attention) when a module is missing or running elsewhere, or some runtime or
    /// node was not heard; 0 when every node was heard serving what the inventory assigns it.
    pub fn exit_code(&self) -> u8 {
        if self.missing.is_empty()
            && self.running_elsewhere.is_empty()
            && self.not_heard.is_empty()
            && self.nodes_not_heard.is_empty()
        {
            0
        } else {
            3
        }
    }
}

/// Asks who is there (the rule “Discovery waits for everyone who said they are there”): discovery
/// over the bus, waiting at least the old window and up to five seconds for every runtime that said
/// it is there, then set against the inventory ([`compare_with_inventory`]).
///
/// # Errors
/// The home's inventory cannot be read; the bus cannot be reached or asked.
pub async fn runtimes(home: &Home, bus_config: &BusConfig) -> Result<Runtimes> {
    let inventory = home.inventory()?;
    let bus = connect(home, bus_config).await?;
    // `discovery::discover_naming_unreadable` names unreadable answers, but its per-instance
    // INFO misses a host answering after a second (fleet_discovery): not wired yet.
    let found = discovery::discover(bus.client(), discovery::OLD_WINDOW)
        .await
        .map_err(bus_error(|| "asking who is there".to_owned()))?;
    Ok(compare_with_inventory(&inventory, found))
}

/// What discovery found, set against what the inventory assigns each node (no IO).
///
/// Only hosts' runtimes ([`discovery::HOST_SERVICE`]) stand for nodes: the controller's
/// answer names its machine, not a node.
/// - A node is **known** when a host's runtime on it said what it serves and none on it said
///   it is there without saying what it serves.
/// - **Missing**: a module the inventory assigns a known node that none of its runtimes
///   serves.
/// - **Running elsewhere**: a module a heard host's runtime serves, which the inventory
///   assigns only to other nodes, every one of them known.
///
/// # Guarantees
/// While a runtime is unheard (it answered PING and not INFO), and for a node no runtime
/// answered for, nothing is said of its modules: none is called missing, and none assigned to
/// it is called running elsewhere (the rule “Discovery waits for everyone who said they are
/// there”). An unheard host's runtime that did not name its node leaves every node unknown. A
/// module served and assigned to no node at all (such as the bus node's `mesh-bus` users file) is
/// neither.
pub fn compare_with_inventory(inventory: &Inventory, found: Discovery) -> Runtimes {
    let Discovery {
        runtimes,
        unheard,
        waited,
    } = found;
    let hosts = || {
        runtimes
            .iter()
            .filter(|r| r.service == discovery::HOST_SERVICE)
    };
    let unheard_hosts = || {
        unheard
            .iter()
            .filter(|u| u.service == discovery::HOST_SERVICE)
    };
    let answered: BTreeSet<&str> = hosts()
        .filter_map(|r| r.node.as_deref())
        .chain(unheard_hosts().filter_map(|u| u.node.as_deref()))
        .collect();
    let nodes_not_heard: Vec<String> = inventory
        .file
        .nodes
        .keys()
        .filter(|node| !answered.contains(node.as_str()))
        .cloned()
        .collect();
    let mut served: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for runtime in hosts() {
        if let Some(node) = runtime.node.as_deref() {
            served
                .entry(node)
                .or_default()
                .extend(runtime.modules.iter().map(String::as_str));
        }
    }
    let known: BTreeSet<&str> = if unheard_hosts().any(|u| u.node.is_none()) {
        BTreeSet::new()
    } else {
        let unheard_nodes: BTreeSet<&str> =
            unheard_hosts().filter_map(|u| u.node.as_deref()).collect();
        served
            .keys()
            .copied()
            .filter(|node| !unheard_nodes.contains(node))
            .collect()
    };
    let missing: Vec<Missing> = inventory
        .file
        .nodes
        .keys()
        .filter(|node| known.contains(node.as_str()))
        .filter_map(|node| {
            let serves = &served[node.as_str()];
            let modules: Vec<String> = inventory
                .modules_of(node)
                .into_iter()
                .filter(|module| !serves.contains(module))
                .map(str::to_owned)
                .collect();
            (!modules.is_empty()).then(|| Missing {
                node: node.clone(),
                modules,
            })
        })
        .collect();
    let mut running_elsewhere = Vec::new();
    for (node, modules) in &served {
        for module in modules {
            let assigned = inventory.nodes_of(module);
            if assigned.is_empty()
                || assigned.contains(*node)
                || !assigned.iter().all(|n| known.contains(n))
            {
                continue;
            }
            running_elsewhere.push(RunningElsewhere {
                module: (*module).to_owned(),
                node: (*node).to_owned(),
                assigned_to: assigned.iter().map(|n| (*n).to_owned()).collect(),
            });
        }
    }
    running_elsewhere.sort_by(|a, b| (&a.module, &a.node).cmp(&(&b.module, &b.node)));
    Runtimes {
        runtimes: runtimes
            .into_iter()
            .map(|r| RuntimeLine {
                service: r.service,
                node: r.node,
                id: r.id,
                version: r.version,
                answer_ms: r.answer_time.as_millis() as u64,
                answer_bytes: r.answer_size,
                modules: r.modules,
            })
            .collect(),
        not_heard: unheard
            .into_iter()
            .map(|u| NotHeard {
                service: u.service,
                node: u.node,
                id: u.id,
                ping_ms: u.ping_time.as_millis() as u64,
            })
            .collect(),
        nodes_not_heard,
        missing,
        running_elsewhere,
        waited_ms: waited.as_millis() as u64,
        unreadable: Vec::new(),
    }
}
