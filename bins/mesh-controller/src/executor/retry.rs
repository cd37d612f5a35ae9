//! `plans retry`: a stopped plan opened again where it stopped, once its cause is fixed (a port
//! freed, a group made). Each module that stopped goes on from where it stood: its nodes that
//! applied are not sent again, the node it stopped at is begun again (grants first, judged by
//! its new send), then the rest; a module whose build failed is built again. The modules the
//! stop held back go on after it. Nothing is sent here: the drive that follows sends.

use super::saved::{read_back, save_rollout, NodesKept};
use crate::error::{Error, Result};
use crate::home::Home;
use crate::plans::PlanRecord;
use mesh_model::plan::{PlanState, RolloutOutcome};
use mesh_plan::rollout::{step, Event};
use std::collections::BTreeMap;

/// Opens the stopped plan `id` again at the modules that stopped (the caller holds the plans
/// lock, then drives it): each rollout stepped with [`Event::Retry`] and saved — its nodes to
/// begin again left asking for their grants, which the drive's resume asks (so the actions of
/// the step are not carried out here) — a module whose build failed left to build again, and
/// the plan rolling out. Returns the record and the modules opened again.
///
/// # Errors
/// No such plan; a plan that is not stopped, or that a newer plan of its repository and branch
/// came after (retrying it would roll an older commit over the newer one); a record that cannot
/// be read or written.
pub(crate) fn reopen(home: &Home, id: &str, now: u64) -> Result<(PlanRecord, Vec<String>)> {
    let mut record = home.plans().get(id)?;
    if !matches!(record.plan.state, PlanState::Stopped { .. }) {
        return Err(Error::refused(format!(
            "plan `{id}` is not stopped (it is {}); only a stopped plan is retried",
            mesh_plan::plans::state_word(&record.plan.state)
        )));
    }
    let newer = home
        .plans()
        .all()?
        .into_iter()
        .filter(|other| {
            other.plan.repository == record.plan.repository
                && other.plan.branch == record.plan.branch
                && (
                    other.plan.made_at,
                    crate::plans::plan_number(&other.plan.id),
                ) > (record.plan.made_at, crate::plans::plan_number(id))
        })
        .map(|other| other.plan.id)
        .next_back();
    if let Some(newer) = newer {
        return Err(Error::refused(format!(
            "plan `{id}` is not retried: `{newer}`, made after it for `{}` {}, holds a newer \
             commit, and retrying `{id}` would roll its older one over it; retry or merge that \
             one instead",
            record.plan.repository, record.plan.branch
        )));
    }
    let stopped: Vec<String> = record
        .plan
        .rollouts
        .iter()
        .filter(|(_, rollout)| matches!(rollout.outcome, Some(RolloutOutcome::Stopped { .. })))
        .map(|(module, _)| module.clone())
        .collect();
    // Its nodes' records folded (a plan folded before stopped plans were kept whole): each
    // stopped rollout begins again from its start; a node that applied is sent the same
    // declaration again, which changes nothing there.
    let folded = record.nodes_folded;
    record.nodes_folded = false;
    for module in &stopped {
        let work = record.work.entry(module.clone()).or_default();
        if folded {
            work.rollout = None;
            work.summary = None;
        }
        let kept = work.rollout.clone();
        let Some(kept) = kept else {
            // Stopped at its build: built again by the drive.
            if let Some(rollout) = record.plan.rollouts.get_mut(module) {
                rollout.outcome = None;
            }
            continue;
        };
        let mut befores = BTreeMap::new();
        let mut nodes_kept = NodesKept::default();
        let (spec, mut state) = read_back(home, id, module, kept, &mut befores, &mut nodes_kept)?;
        // The grants it asks for are asked again by the drive's resume (nodes granting).
        let _ = step(&spec, &mut state, Event::Retry, now);
        save_rollout(
            home,
            &mut record,
            module,
            &spec,
            &mut state,
            &befores,
            &mut nodes_kept,
        )?;
    }
    record.held.clear();
    record.plan.state = PlanState::RollingOut;
    home.plans().write(&record)?;
    Ok((record, stopped))
}
