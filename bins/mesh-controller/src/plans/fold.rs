//! A plan that ended keeps no record per node: each module's rollout is folded into a summary
//! in the plan record — how many nodes ended where, the applied nodes' latencies, and each node
//! that did not end applied or waiting, with where it stood — and its nodes' records
//! (`rollouts/<plan>/…`) are removed together
//! ([`mesh_store::record_store::RecordStore::delete_under`]).
//!
//! Nothing that reads a plan that ended needs them: `status` reads the nodes of open plans only
//! (held nodes, what a plan waits on), a stopped rollout and a revert are in the plan record
//! (`outcome`, `work.reverted`), `push --behind` reads the deployed records and `sent/`, and the
//! status page's tally of sends reads the summary.
//!
//! # Guarantees
//! - Only a plan that is not open is folded; one folded is never driven again. A stopped plan
//!   that is the newest of its repository and branch is not folded yet: `plans retry` may
//!   drive it on from where it stopped.
//! - The summaries are written before any node's record is removed, and the plan is marked
//!   folded only once they are removed: a fold stopped anywhere is done again whole, and loses
//!   nothing.
//! - A plan record stays constant in size whatever the fleet: at most [`UNFINISHED_KEPT`] nodes
//!   are named per module, the rest counted.

use super::{PlanRecord, RolloutNodeRecord};
use crate::error::Result;
use crate::home::Home;
use mesh_plan::rollout::NodeProgress;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How many plans are kept whole unless told otherwise: older plans that ended are removed,
/// except what a merge or `status` still reads (see [`prunable`]).
pub const KEEP_PLANS: usize = 50;

/// How many nodes that did not end applied a summary names; the rest are counted.
pub(crate) const UNFINISHED_KEPT: usize = 100;

/// One module's rollout in a plan that ended, its nodes' records folded into it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RolloutSummary {
    /// How many nodes ended where: `applied`, `sent` (no report of it applied), `waiting`
    /// (never sent), `held`, `granting`, `grants-failed`, `not-running`.
    pub nodes: BTreeMap<String, u64>,
    /// The applied nodes' times from send to report: seconds → how many nodes.
    pub latencies: BTreeMap<u64, u64>,
    /// Each node that ended neither applied nor waiting, with where it stood (at most
    /// [`UNFINISHED_KEPT`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unfinished: BTreeMap<String, String>,
    /// How many more such nodes there were.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unfinished_more: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl RolloutSummary {
    /// The summary of a rollout's nodes.
    pub fn of(nodes: &[RolloutNodeRecord]) -> RolloutSummary {
        let mut summary = RolloutSummary::default();
        for node in nodes {
            let (word, unfinished) = if node.running {
                where_it_stood(&node.progress)
            } else {
                ("not-running", None)
            };
            *summary.nodes.entry(word.to_owned()).or_default() += 1;
            if let NodeProgress::Applied { sent_at, at } = node.progress {
                *summary
                    .latencies
                    .entry(at.saturating_sub(sent_at))
                    .or_default() += 1;
            }
            if let Some(said) = unfinished {
                if summary.unfinished.len() < UNFINISHED_KEPT {
                    summary.unfinished.insert(node.node.clone(), said);
                } else {
                    summary.unfinished_more += 1;
                }
            }
        }
        summary
    }
}

/// A node's last progress as a word, and what it says when the node did not finish.
fn where_it_stood(progress: &NodeProgress) -> (&'static str, Option<String>) {
    match progress {
        NodeProgress::Applied { .. } => ("applied", None),
        NodeProgress::Waiting => ("waiting", None),
        NodeProgress::Sent { at, .. } => (
            "sent",
            Some(format!(
                "sent {}, no report of it applied",
                mesh_store::clock::rfc3339(*at)
            )),
        ),
        NodeProgress::Granting { since } => (
            "granting",
            Some(format!(
                "its grants asked for {}, not answered",
                mesh_store::clock::rfc3339(*since)
            )),
        ),
        NodeProgress::GrantRetry { reason, .. } => (
            "grants-failed",
            Some(format!("its grants failed: {reason}")),
        ),
        NodeProgress::Held {
            moves,
            orphans,
            unset,
        } => (
            "held",
            Some(format!(
                "held: {}",
                moves
                    .iter()
                    .map(ToString::to_string)
                    .chain(orphans.iter().map(ToString::to_string))
                    .chain(unset.iter().map(|u| format!("{u} is required and unset")))
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
        ),
    }
}

/// Folds `record`'s rollouts if the plan ended and they are not folded yet: each module's
/// summary written into the plan record, then every node's record of the plan removed
/// together, then the plan marked folded. Returns how many node records were removed.
///
/// The caller holds the plans lock.
///
/// # Errors
/// A record cannot be read, written or removed (nothing is lost: the fold is done again).
pub(crate) fn fold_plan(home: &Home, record: &mut PlanRecord) -> Result<usize> {
    if record.plan.state.is_open() || record.nodes_folded {
        return Ok(0);
    }
    let id = record.plan.id.clone();
    let mut summed = false;
    for (module, work) in &mut record.work {
        if work.rollout.is_some() && work.summary.is_none() {
            work.summary = Some(RolloutSummary::of(
                &home.plans().rollout_nodes(&id, module)?,
            ));
            summed = true;
        }
    }
    if summed {
        home.plans().write(record)?;
    }
    let removed = home.records().delete_under(&format!("rollouts/{id}"))?;
    record.nodes_folded = true;
    home.plans().write(record)?;
    Ok(removed)
}

/// What [`fold_ended`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Folded {
    /// The plans folded now.
    pub plans: Vec<String>,
    /// The records of the folded plans' rollouts removed (their steps, and the nodes each
    /// found running; an earlier mesh's record a node).
    pub node_records: u64,
    /// The plans removed: older than the last kept, ended, and read by nothing.
    pub removed_plans: Vec<String>,
}

/// Folds every plan that ended and is not folded yet (but those in `driving`, whose drives
/// are writing them), then removes the plans older than the newest `keep` that [`prunable`]
/// lets go. The caller holds the plans lock.
///
/// # Errors
/// A record cannot be read, written or removed.
pub(crate) fn fold_ended(home: &Home, keep: usize, driving: &[String]) -> Result<Folded> {
    let mut folded = Folded::default();
    let mut plans = home.plans().all()?;
    let retriable = retriable(&plans);
    for record in &mut plans {
        if record.plan.state.is_open()
            || record.nodes_folded
            || driving.contains(&record.plan.id)
            || retriable.contains(&record.plan.id)
        {
            continue;
        }
        folded.node_records += fold_plan(home, record)? as u64;
        folded.plans.push(record.plan.id.clone());
    }
    let gone = prunable(&plans, keep);
    let keys: Vec<String> = gone.iter().map(|id| super::plan_key(id)).collect();
    home.check_lease()?;
    home.records().delete_many(&keys)?;
    folded.removed_plans = gone;
    Ok(folded)
}

/// The stopped plans that may still be retried (`plans retry`): each the newest plan of its
/// repository and branch. Their nodes' records are kept, so a retry goes on from where the
/// rollout stopped; a newer plan, or closing it, ends that, and it is folded then.
fn retriable(plans: &[PlanRecord]) -> Vec<String> {
    plans
        .iter()
        .enumerate()
        .filter(|(index, record)| {
            matches!(
                record.plan.state,
                mesh_model::plan::PlanState::Stopped { .. }
            ) && !plans[index + 1..].iter().any(|later| {
                later.plan.repository == record.plan.repository
                    && later.plan.branch == record.plan.branch
            })
        })
        .map(|(_, record)| record.plan.id.clone())
        .collect()
}

/// The plans (oldest first, as [`Home::plans`] gives them) that may be removed when the newest
/// `keep` are kept: ended and folded, and none of these, which are read still —
/// - the newest plan of its repository and branch (a merge reads the changes since its commit,
///   and a merge heard again is known by it);
/// - a plan with a stopped rollout that `status` still shows (no later plan of its repository
///   and branch finished the module, nor was closed holding it).
pub(crate) fn prunable(plans: &[PlanRecord], keep: usize) -> Vec<String> {
    let older = plans.len().saturating_sub(keep);
    let mut out = Vec::new();
    for (index, record) in plans.iter().enumerate().take(older) {
        let later = &plans[index + 1..];
        let same_branch = |other: &&PlanRecord| {
            other.plan.repository == record.plan.repository
                && other.plan.branch == record.plan.branch
        };
        if record.plan.state.is_open()
            || !record.nodes_folded
            || !later.iter().any(|o| same_branch(&o))
        {
            continue;
        }
        let shows_stopped = record.plan.rollouts.iter().any(|(module, rollout)| {
            matches!(
                rollout.outcome,
                Some(mesh_model::plan::RolloutOutcome::Stopped { .. })
            ) && !later.iter().filter(same_branch).any(|other| {
                other.plan.modules.contains(module)
                    && (matches!(other.plan.state, mesh_model::plan::PlanState::Closed { .. })
                        || other.plan.rollouts.get(module).is_some_and(|r| {
                            matches!(r.outcome, Some(mesh_model::plan::RolloutOutcome::Done))
                        }))
            })
        });
        if !shows_stopped {
            out.push(record.plan.id.clone());
        }
    }
    out
}
