//! Plan records of format 1, read to be migrated.

use super::{ModuleWork as Work, PlanRecord as Record, RolloutKept, RolloutNodeRecord};
use crate::error::Result;
use crate::home::Home;
use mesh_model::build::Build;
use mesh_model::declaration::Declaration;
use mesh_model::plan::Plan;
use mesh_plan::rollout::{NodeProgress, RolloutSpec, RolloutState};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) struct PlanRecord {
    plan: Plan,
    previous_commit: Option<String>,
    changed_paths: usize,
    shared_paths: Vec<String>,
    folded: BTreeMap<String, String>,
    work: BTreeMap<String, ModuleWork>,
    #[serde(default)]
    held: BTreeSet<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct ModuleWork {
    build: Option<Build>,
    #[serde(default)]
    not_redeployed: bool,
    spec: Option<RolloutSpec>,
    state: Option<RolloutState>,
    #[serde(default)]
    before: BTreeMap<String, Declaration>,
    #[serde(default)]
    reverted: BTreeMap<String, String>,
}

impl PlanRecord {
    /// Its plan's id, and every module and node it names: the names its migration writes
    /// records under.
    pub(super) fn names(&self) -> (&str, impl Iterator<Item = &str>) {
        let plan = &self.plan;
        let names = plan
            .modules
            .iter()
            .chain(plan.tiers.iter().flatten())
            .chain(plan.rollouts.keys())
            .chain(self.work.keys())
            .chain(
                self.work
                    .values()
                    .filter_map(|work| work.spec.as_ref())
                    .flat_map(|spec| spec.nodes.keys()),
            )
            .map(String::as_str);
        (&plan.id, names)
    }
}

/// The record in format 2, each node's part of each rollout written as its own record and
/// what each node ran before kept by digest.
pub(super) fn migrate(home: &Home, old: PlanRecord) -> Result<Record> {
    let mut work = BTreeMap::new();
    for (module, old_work) in old.work {
        let rollout = match (old_work.spec, old_work.state) {
            (Some(spec), Some(state)) => {
                for (node, entry) in &spec.nodes {
                    let before = match old_work.before.get(node) {
                        Some(declaration) => Some(home.sent().keep_declaration(declaration)?),
                        None => None,
                    };
                    let progress = state
                        .nodes
                        .get(node)
                        .cloned()
                        .unwrap_or(NodeProgress::Waiting);
                    home.plans().write_rollout_node(
                        &old.plan.id,
                        &module,
                        &RolloutNodeRecord {
                            format: super::ROLLOUT_NODE_FORMAT,
                            node: node.clone(),
                            running: entry.running,
                            declaration: entry.declaration.clone(),
                            before,
                            progress,
                        },
                    )?;
                }
                Some(RolloutKept {
                    upgrade: spec.upgrade,
                    on_failure: spec.on_failure,
                    deadline_secs: spec.deadline_secs,
                    max_parallel: spec.max_parallel,
                    bus_first: spec.bus_first.clone(),
                    state: mesh_plan::rollout::RolloutParts {
                        sent: state
                            .nodes
                            .iter()
                            .filter(|(_, p)| {
                                matches!(
                                    p,
                                    NodeProgress::Sent { .. } | NodeProgress::Applied { .. }
                                )
                            })
                            .count(),
                        ..state.parts()
                    },
                })
            }
            (Some(_), None) | (None, Some(_)) | (None, None) => None,
        };
        work.insert(
            module,
            Work {
                build: old_work.build,
                not_redeployed: old_work.not_redeployed,
                rollout,
                reverted: old_work.reverted,
                summary: None,
            },
        );
    }
    let mut plan = old.plan;
    for rollout in plan.rollouts.values_mut() {
        rollout.sent = rollout.sends.len();
        rollout.sends.clear();
    }
    Ok(Record {
        format: super::PLAN_FORMAT,
        plan,
        previous_commit: old.previous_commit,
        changed_paths: old.changed_paths,
        shared_paths: old.shared_paths,
        folded: old.folded,
        work,
        held: old.held,
        forgotten: BTreeSet::new(),
        nodes_folded: false,
    })
}
