//! A rollout as its plan keeps it: saved after every step (the plan record with the rollout's
//! parts, and one record of the nodes whose progress changed), and read back when a controller
//! resumes.

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

/// What a rollout keeps of its nodes' records: the nodes some record names, and the number
/// its next step is saved under ([`crate::plans::nodes`]).
#[derive(Debug, Default)]
pub(super) struct NodesKept {
    /// The nodes a record of this rollout names: a running node none names is waiting for its
    /// send (the rollout's record of the nodes running at its start names it).
    recorded: BTreeSet<String>,
    /// The number the next step is saved under.
    next_step: u64,
}

impl NodesKept {
    /// Writes `nodes` as the rollout's next step, and counts them recorded.
    ///
    /// # Errors
    /// The plans lease was taken over; the record cannot be written.
    pub(super) fn write_step(
        &mut self,
        home: &Home,
        plan: &str,
        module: &str,
        nodes: Vec<RolloutNodeRecord>,
    ) -> Result<()> {
        if nodes.is_empty() {
            return Ok(());
        }
        self.recorded
            .extend(nodes.iter().map(|record| record.node.clone()));
        home.plans()
            .write_rollout_step(plan, module, self.next_step, nodes)?;
        self.next_step += 1;
        Ok(())
    }
}

/// Saves a rollout after a step: one record of the nodes whose progress changed, then the plan
/// record with the rollout's parts (constant in size). A running node waiting for its send that
/// no record names yet is not written: the rollout's record of the nodes running at its start
/// names it.
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
    kept: &mut NodesKept,
) -> Result<()> {
    let mut changed = Vec::new();
    for node in state.nodes.take_changed() {
        let (Some(entry), Some(progress)) = (spec.nodes.get(&node), state.nodes.get(&node)) else {
            continue;
        };
        if entry.running
            && matches!(progress, NodeProgress::Waiting)
            && !kept.recorded.contains(&node)
        {
            continue;
        }
        changed.push(RolloutNodeRecord {
            format: ROLLOUT_NODE_FORMAT,
            node: node.clone(),
            running: entry.running,
            declaration: entry.declaration.clone(),
            before: befores.get(&node).cloned().flatten(),
            progress: progress.clone(),
        });
    }
    kept.write_step(home, &record.plan.id, module, changed)?;
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
    home.plans().write(record)
}

/// A rollout read back from its plan record and its nodes' records (a controller resumed):
/// a running node no record names is waiting for its send, and what it ran before is what the
/// rollout's record of the nodes running at its start says.
pub(super) fn read_back(
    home: &Home,
    plan: &str,
    module: &str,
    kept: RolloutKept,
    befores: &mut BTreeMap<String, Option<String>>,
    nodes_kept: &mut NodesKept,
) -> Result<(RolloutSpec, RolloutState)> {
    let recorded = home.plans().rollout_nodes_recorded(plan, module)?;
    nodes_kept.next_step = recorded.next_step;
    nodes_kept
        .recorded
        .extend(recorded.records.iter().map(|r| r.node.clone()));
    let mut nodes = BTreeMap::new();
    let mut progress = Vec::new();
    for record in recorded.all() {
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
