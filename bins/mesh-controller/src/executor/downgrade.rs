//! A push that would take a node back to an older build of a module than it runs: a downgrade,
//! held like a move of a container's data until a person allows it (`push --downgrade
//! MODULE`). After a rollout stopped, the nodes it reached run its build, which is not
//! deployed; a later `push --all` composes the deployed build, older, and would take them back
//! to it without a word.
//!
//! A node runs a build newer than the one a push would send when what it was last sent names
//! (or, for a module whose part names no archive, a stopped rollout sent it) a build of a plan
//! made after the plan whose build the push sends.

use crate::error::Result;
use crate::home::Home;
use crate::plans::PlanRecord;
use crate::push::Downgrade;
use mesh_model::declaration::Declaration;
use std::collections::BTreeMap;

/// The builds the plans made, and which plan came after which: read once per push.
pub(crate) struct Builds {
    /// Each build's digest → (the plan that made it, its place in the order plans were made).
    made_by: BTreeMap<String, (String, (u64, Option<u64>))>,
    /// (node, module) → the build a stopped rollout sent the node (the newest such plan's).
    stopped: BTreeMap<(String, String), String>,
}

impl Builds {
    /// Read from the plans (oldest first).
    ///
    /// # Errors
    /// The plans cannot be read.
    pub(crate) fn read(home: &Home) -> Result<Builds> {
        let plans = home.plans().all()?;
        let mut builds = Builds::of(&plans);
        // A stopped rollout's nodes whose last send is still its declaration run its build,
        // whatever its declaration names (a module with no files names no archive). Its nodes'
        // records are kept while it may be retried.
        let sent = home.sent().digests()?;
        for record in &plans {
            if record.nodes_folded
                || !matches!(
                    record.plan.state,
                    mesh_model::plan::PlanState::Stopped { .. }
                )
            {
                continue;
            }
            for (module, rollout) in &record.plan.rollouts {
                if !matches!(
                    rollout.outcome,
                    Some(mesh_model::plan::RolloutOutcome::Stopped { .. })
                ) {
                    continue;
                }
                let Some(build) = record.work.get(module).and_then(|w| w.build.as_ref()) else {
                    continue;
                };
                for node in home.plans().rollout_nodes(&record.plan.id, module)? {
                    if !node.declaration.is_empty()
                        && sent.get(&node.node) == Some(&node.declaration)
                    {
                        builds.stopped.insert(
                            (node.node.clone(), module.clone()),
                            build.archive.digest.clone(),
                        );
                    }
                }
            }
        }
        Ok(builds)
    }

    fn of(plans: &[PlanRecord]) -> Builds {
        let mut made_by = BTreeMap::new();
        let mut stopped = BTreeMap::new();
        for record in plans {
            let order = (
                record.plan.made_at,
                crate::plans::plan_number(&record.plan.id),
            );
            for (module, work) in &record.work {
                let Some(build) = &work.build else {
                    continue;
                };
                made_by
                    .entry(build.archive.digest.clone())
                    .or_insert_with(|| (record.plan.id.clone(), order));
                let stopped_at = record
                    .plan
                    .rollouts
                    .get(module)
                    .and_then(|r| match &r.outcome {
                        Some(mesh_model::plan::RolloutOutcome::Stopped { node, .. }) => Some(node),
                        _ => None,
                    });
                if let Some(node) = stopped_at {
                    if !node.is_empty() && !work.reverted.contains_key(node) {
                        stopped
                            .insert((node.clone(), module.clone()), build.archive.digest.clone());
                    }
                }
            }
        }
        Builds { made_by, stopped }
    }

    /// What sending `declaration` would downgrade on its node, against what it was last sent.
    pub(crate) fn downgrades(
        &self,
        sent: &Declaration,
        declaration: &Declaration,
    ) -> Vec<Downgrade> {
        let mut out = Vec::new();
        let modules: std::collections::BTreeSet<&str> = declaration
            .resources
            .iter()
            .map(|r| r.module.as_str())
            .collect();
        for module in modules {
            let would_send = declaration.archives.get(module).map(|a| a.digest.clone());
            let runs = sent
                .archives
                .get(module)
                .map(|a| a.digest.clone())
                .or_else(|| {
                    self.stopped
                        .get(&(declaration.node.clone(), module.to_owned()))
                        .cloned()
                });
            let Some(runs) = runs else {
                continue;
            };
            let part = |d: &'_ Declaration| -> Vec<mesh_model::declaration::Resource> {
                d.resources
                    .iter()
                    .filter(|r| r.module == module)
                    .cloned()
                    .collect()
            };
            if Some(&runs) == would_send.as_ref() || part(sent) == part(declaration) {
                continue;
            }
            let Some((runs_plan, runs_order)) = self.made_by.get(&runs) else {
                continue;
            };
            let newer = match would_send.as_ref().and_then(|b| self.made_by.get(b)) {
                Some((_, order)) => runs_order > order,
                // The home's catalogue, or a build no plan kept: a plan's build runs there.
                None => true,
            };
            if newer {
                out.push(Downgrade {
                    module: module.to_owned(),
                    runs,
                    runs_plan: runs_plan.clone(),
                    would_send,
                });
            }
        }
        out
    }
}
