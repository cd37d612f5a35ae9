//! A rollout as its plan keeps it: saved after every step (the plan record with the rollout's
//! parts, and each node whose progress changed), and read back when a controller resumes.

use crate::error::Result;
use crate::home::Home;
use crate::plans::{PlanRecord, RolloutKept, RolloutNodeRecord, ROLLOUT_NODE_FORMAT};
use mesh_model::plan::ModuleRollout;
use mesh_plan::rollout::{NodeProgress, RolloutNode, RolloutSpec, RolloutState};
use std::collections::{BTreeMap, BTreeSet};

/// The digest a node's report must name: its own declaration, or the bus node's when it goes
/// first without running the module (empty: the rollout does not wait on the node).
pub(super) fn expected_declaration(spec: &RolloutSpec, node: &str) -> String {
    match (spec.nodes.get(node), &spec.bus_first) {
        (Some(entry), _) => entry.declaration.clone(),
        (None, Some(bus)) if bus.node == node => bus.declaration.clone(),
        (None, Some(_) | None) => String::new(),
    }
}

/// Records the declaration a node is sent as the one its report must name.
pub(super) fn set_expected_declaration(spec: &mut RolloutSpec, node: &str, digest: &str) {
    if let Some(entry) = spec.nodes.get_mut(node) {
        digest.clone_into(&mut entry.declaration);
    }
    if let Some(bus) = spec.bus_first.as_mut() {
        if bus.node == node {
            digest.clone_into(&mut bus.declaration);
        }
    }
}

/// Saves a rollout after a step: the record of each node whose progress changed (a constant
/// number per step), then the plan record with the rollout's parts (constant in size). A
/// running node waiting for its send that has no record (`recorded` names those that have one)
/// is not given one: the rollout's record of the nodes running at its start names it.
///
/// # Errors
/// The plans lease was taken over; the records cannot be written.
pub(super) fn save_rollout(
    home: &Home,
    record: &mut PlanRecord,
    module: &str,
    spec: &RolloutSpec,
    state: &mut RolloutState,
    befores: &BTreeMap<String, Option<String>>,
    recorded: &mut BTreeSet<String>,
) -> Result<()> {
    let mut changed = Vec::new();
    for node in state.nodes.take_changed() {
        let (Some(entry), Some(progress)) = (spec.nodes.get(&node), state.nodes.get(&node)) else {
            continue;
        };
        if entry.running && matches!(progress, NodeProgress::Waiting) && !recorded.contains(&node) {
            continue;
        }
        recorded.insert(node.clone());
        changed.push(RolloutNodeRecord {
            format: ROLLOUT_NODE_FORMAT,
            node: node.clone(),
            running: entry.running,
            declaration: entry.declaration.clone(),
            before: befores.get(&node).cloned().flatten(),
            progress: progress.clone(),
        });
    }
    home.write_rollout_nodes(&record.plan.id, module, &changed)?;
    let work = record.work.entry(module.to_owned()).or_default();
    work.rollout = Some(RolloutKept {
        upgrade: spec.upgrade,
        on_failure: spec.on_failure,
        deadline_secs: spec.deadline_secs,
        max_parallel: spec.max_parallel,
        bus_first: spec.bus_first.clone(),
        state: state.parts(),
    });
    let build = work.build.as_ref().map(|b| b.archive.clone());
    let rollout: ModuleRollout = state.record(build);
    record.plan.rollouts.insert(module.to_owned(), rollout);
    home.write_plan(record)
}

/// A rollout read back from its plan record and its nodes' records (a controller resumed):
/// a running node without a record of its own is waiting for its send, and what it ran before
/// is what it was last sent (this rollout has sent it nothing).
pub(super) fn read_back(
    home: &Home,
    plan: &str,
    module: &str,
    kept: RolloutKept,
    befores: &mut BTreeMap<String, Option<String>>,
    recorded: &mut BTreeSet<String>,
) -> Result<(RolloutSpec, RolloutState)> {
    let nodes_recorded = home.rollout_nodes_recorded(plan, module)?;
    recorded.extend(nodes_recorded.records.iter().map(|r| r.node.clone()));
    let waiting = nodes_recorded
        .running
        .iter()
        .any(|node| !recorded.contains(node));
    let mut sent = if waiting {
        home.sent_digests()?
    } else {
        BTreeMap::new()
    };
    let mut nodes = BTreeMap::new();
    let mut progress = Vec::new();
    for mut record in nodes_recorded.all() {
        if !recorded.contains(&record.node) {
            record.before = sent.remove(&record.node);
        }
        befores.insert(record.node.clone(), record.before);
        if record.running {
            progress.push((record.node.clone(), record.progress));
        }
        nodes.insert(
            record.node,
            RolloutNode {
                running: record.running,
                declaration: record.declaration,
            },
        );
    }
    let spec = RolloutSpec {
        module: module.to_owned(),
        upgrade: kept.upgrade,
        on_failure: kept.on_failure,
        deadline_secs: kept.deadline_secs,
        max_parallel: kept.max_parallel,
        nodes,
        bus_first: kept.bus_first,
    };
    Ok((spec, RolloutState::assemble(kept.state, progress)))
}

/// A definition for a module that does not validate in the rollout's catalogue: the defaults
/// (its sends fail when composed, which stops the rollout naming why).
pub(super) fn placeholder_definition(module: &str) -> mesh_model::module::ModuleDefinition {
    let text = format!("name = \"{module}\"\n");
    toml::from_str(&text).unwrap_or_else(|_| panic!("a minimal definition parses"))
}
