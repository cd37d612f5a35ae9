//! A plan: what a merge decided to rebuild and how it rolls out.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A merge's plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Plan {
    /// Its id.
    pub id: String,
    /// The repository merged to.
    pub repository: String,
    /// The branch.
    pub branch: String,
    /// The commit merged.
    pub commit: String,
    /// When the plan was made (seconds since the epoch); supersede orders by this.
    pub made_at: u64,
    /// The modules it rebuilds and rolls out.
    pub modules: Vec<String>,
    /// The modules in build order, tier by tier.
    pub tiers: Vec<Vec<String>>,
    /// Per module, its rollout.
    pub rollouts: BTreeMap<String, ModuleRollout>,
    /// Where the plan stands.
    pub state: PlanState,
}

/// One module's rollout within a plan.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ModuleRollout {
    /// The node sent first.
    pub first: Option<String>,
    /// How many nodes were sent the new declaration (each node's send is in its own record,
    /// so this does not grow with the fleet).
    #[serde(default)]
    pub sent: usize,
    /// How many nodes applied it.
    #[serde(default)]
    pub applied: usize,
    /// How many nodes are held because their data would move (the rule “A moved mount is held”).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub held: usize,
    /// Format 1 only: when each node was sent (read to migrate an old record; never written).
    #[serde(default, skip_serializing)]
    pub sends: BTreeMap<String, u64>,
    /// The outcome, once there is one.
    pub outcome: Option<RolloutOutcome>,
    /// The archive this plan built for the module, once built (`None`: not built yet). A
    /// superseding plan folds in the modules an older plan has not built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<crate::build::ArchiveRef>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// How a module's rollout ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum RolloutOutcome {
    /// Every node applied it.
    Done,
    /// Stopped at a node.
    Stopped {
        /// The node.
        node: String,
        /// Why.
        reason: String,
    },
}

/// Where a plan stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum PlanState {
    /// Its modules are being built.
    Building,
    /// Its builds are rolling out.
    RollingOut,
    /// Everything rolled out.
    Done,
    /// A rollout stopped.
    Stopped {
        /// The node it stopped at.
        node: String,
        /// Why.
        reason: String,
    },
    /// A newer plan for the same repository and branch took over.
    Superseded {
        /// The newer plan's id.
        by: String,
    },
    /// A person closed it.
    Closed {
        /// Their note.
        note: String,
    },
}

impl PlanState {
    /// Whether the plan is still open (building or rolling out).
    pub fn is_open(&self) -> bool {
        match self {
            PlanState::Building | PlanState::RollingOut => true,
            PlanState::Done
            | PlanState::Stopped { .. }
            | PlanState::Superseded { .. }
            | PlanState::Closed { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record a newer minor version of the controller wrote (another controller on the same
    /// bus, or this one taken back a version) reads, its unknown fields ignored.
    #[test]
    fn a_plan_a_newer_minor_version_wrote_reads() {
        let newer = br#"{"id":"plan-1","repository":"cat","branch":"main","commit":"abc",
            "made-at":1,"modules":["web"],"tiers":[["web"]],"priority":"high",
            "rollouts":{"web":{"first":"a","sent":1,"applied":1,"outcome":null,"waves":[1,2]}},
            "state":{"state":"building"}}"#;
        let plan: Plan = serde_json::from_slice(newer).unwrap();
        assert_eq!(plan.rollouts["web"].first.as_deref(), Some("a"));
        assert_eq!(plan.state, PlanState::Building);
    }
}
