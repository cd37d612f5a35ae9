//! `status`: every node's last report, and beside it what the plans are doing — open plans and
//! what each waits on (to the second), the modules behind, stopped rollouts with node and
//! reason, and nodes stuck, mid-change or with a window open (rules 19 and 26).
//!
//! "Behind" is read from the open plans only ([`mesh_plan::behind`]): no second comparison of
//! commits (seed issue 245).

use crate::home::Home;
use crate::plans::PlanRecord;
use crate::push::{self, NodeStatus};
use anyhow::Result;
use mesh_model::plan::{PlanState, RolloutOutcome};
use mesh_model::report::{MachineState, Outcome, WindowSummary};
use mesh_plan::plans::{state_word, Behind};
use mesh_plan::rollout::NodeProgress;
use serde::Serialize;

/// Everything `status` shows.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Overview {
    /// Every node, as before.
    pub nodes: Vec<NodeStatus>,
    /// The open plans, oldest first.
    pub open_plans: Vec<OpenPlan>,
    /// The modules behind: those the open plans have yet to build or roll out.
    pub behind: Vec<Behind>,
    /// Rollouts (and builds) that stopped, in plans not closed by hand, until a later plan
    /// finishes the module or a person closes a later plan that took it in.
    pub stopped: Vec<StoppedRollout>,
    /// Nodes whose last report needs a person's eye.
    pub attention: Vec<NodeAttention>,
}

/// An open plan and what it waits on.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct OpenPlan {
    /// The plan.
    pub id: String,
    /// Its repository.
    pub repository: String,
    /// Its branch.
    pub branch: String,
    /// Its commit.
    pub commit: String,
    /// Its state in a word.
    pub state: &'static str,
    /// What it waits on, in words.
    pub waits_on: String,
    /// Since when (seconds since the epoch).
    pub since: u64,
    /// For how long, in seconds, when status was made.
    pub waiting_secs: u64,
}

/// A rollout that stopped.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct StoppedRollout {
    /// The plan.
    pub plan: String,
    /// The module.
    pub module: String,
    /// The node it stopped at (empty: its build failed, before any node).
    pub node: String,
    /// Why.
    pub reason: String,
    /// The declaration the node was sent back, when the module says `on-failure = "revert"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reverted: Option<String>,
}

/// A node whose last report says it is stuck, mid-change, or has a window open.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct NodeAttention {
    /// The node.
    pub node: String,
    /// The machine was left mid-change.
    pub mid_change: bool,
    /// Resources stuck: id and last reason.
    pub stuck: Vec<(String, String)>,
    /// Windows open.
    pub windows: Vec<WindowSummary>,
}

/// What `status` shows, at `now`.
///
/// # Errors
/// When the home cannot be read.
pub fn overview(home: &Home, now: u64) -> Result<Overview> {
    let nodes = push::status(home)?;
    let records = home.plans()?;
    let plans: Vec<_> = records.iter().map(|r| r.plan.clone()).collect();
    let open_plans = records
        .iter()
        .filter(|r| r.plan.state.is_open())
        .map(|r| {
            let (waits_on, since) = waits_on(r);
            OpenPlan {
                id: r.plan.id.clone(),
                repository: r.plan.repository.clone(),
                branch: r.plan.branch.clone(),
                commit: r.plan.commit.clone(),
                state: state_word(&r.plan.state),
                waits_on,
                since,
                waiting_secs: now.saturating_sub(since),
            }
        })
        .collect();
    let mut stopped = Vec::new();
    for (index, record) in records.iter().enumerate() {
        if matches!(record.plan.state, PlanState::Closed { .. }) {
            // A person closed it: they decided about what it left.
            continue;
        }
        for (module, rollout) in &record.plan.rollouts {
            let Some(RolloutOutcome::Stopped { node, reason }) = &rollout.outcome else {
                continue;
            };
            // Until a later plan of the repository finished the module, or a person closed a
            // later plan that had taken it in.
            let settled_since = records[index + 1..].iter().any(|later| {
                later.plan.repository == record.plan.repository
                    && later.plan.branch == record.plan.branch
                    && later.plan.modules.contains(module)
                    && (matches!(later.plan.state, PlanState::Closed { .. })
                        || later
                            .plan
                            .rollouts
                            .get(module)
                            .is_some_and(|r| matches!(r.outcome, Some(RolloutOutcome::Done))))
            });
            if !settled_since {
                stopped.push(StoppedRollout {
                    plan: record.plan.id.clone(),
                    module: module.clone(),
                    node: node.clone(),
                    reason: reason.clone(),
                    reverted: record
                        .work
                        .get(module)
                        .and_then(|work| work.reverted.get(node))
                        .cloned(),
                });
            }
        }
    }
    let attention = attention(&nodes);
    Ok(Overview {
        nodes,
        open_plans,
        behind: mesh_plan::behind(&plans),
        stopped,
        attention,
    })
}

/// The nodes whose last report says stuck, mid-change, or a window open.
pub fn attention(nodes: &[NodeStatus]) -> Vec<NodeAttention> {
    nodes
        .iter()
        .filter_map(|n| {
            let report = n.report.as_ref()?;
            let stuck: Vec<(String, String)> = report
                .resources
                .iter()
                .filter_map(|(id, outcome)| match outcome {
                    Outcome::Stuck { last_reason, .. } => Some((id.clone(), last_reason.clone())),
                    Outcome::Applied { .. }
                    | Outcome::Unchanged
                    | Outcome::Failed { .. }
                    | Outcome::HeldStill { .. }
                    | Outcome::Skipped { .. }
                    | Outcome::Waiting { .. }
                    | Outcome::Removed { .. } => None,
                })
                .collect();
            let mid_change = report.machine == MachineState::MidChange;
            (mid_change || !stuck.is_empty() || !report.windows.is_empty()).then(|| NodeAttention {
                node: n.node.clone(),
                mid_change,
                stuck,
                windows: report.windows.clone(),
            })
        })
        .collect()
}

/// What an open plan waits on, and since when: the first module, in tier order, that is not
/// finished.
pub fn waits_on(record: &PlanRecord) -> (String, u64) {
    let plan = &record.plan;
    for (index, tier) in plan.tiers.iter().enumerate() {
        for module in tier {
            let rollout = plan.rollouts.get(module);
            if rollout.is_some_and(|r| r.outcome.is_some()) || record.held.contains(module) {
                continue;
            }
            let work = record.work.get(module);
            let Some(build) = work.and_then(|w| w.build.as_ref()) else {
                return (
                    format!("the build of `{module}` (tier {index})"),
                    plan.made_at,
                );
            };
            let Some(state) = work.and_then(|w| w.state.as_ref()) else {
                return (
                    format!("the rollout of `{module}` to begin (tier {index}, built)"),
                    build.at,
                );
            };
            let waiting = state
                .bus_node
                .iter()
                .map(|(node, progress)| (node, progress))
                .chain(state.nodes.iter())
                .find_map(|(node, progress)| match progress {
                    NodeProgress::Sent { at } => Some((
                        format!("`{node}` to report `{module}` applied (tier {index})"),
                        *at,
                    )),
                    NodeProgress::Granting { since } => Some((
                        format!("the grants of `{node}` for `{module}` (tier {index})"),
                        *since,
                    )),
                    NodeProgress::GrantRetry { since, reason, .. } => Some((
                        format!(
                            "the grants of `{node}` for `{module}`, which failed: {reason} (tier {index})"
                        ),
                        *since,
                    )),
                    NodeProgress::Waiting | NodeProgress::Applied { .. } => None,
                });
            return waiting.unwrap_or_else(|| {
                (
                    format!("the rollout of `{module}` (tier {index})"),
                    build.at,
                )
            });
        }
    }
    ("nothing: every module is finished".to_owned(), plan.made_at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_model::build::{ArchiveRef, Build};
    use mesh_model::plan::{ModuleRollout, Plan};
    use mesh_model::report::Report;
    use mesh_plan::rollout::RolloutState;
    use std::collections::BTreeMap;

    fn report(value: serde_json::Value) -> Report {
        serde_json::from_value(value).unwrap()
    }

    fn node(name: &str, report: Report) -> NodeStatus {
        NodeStatus {
            node: name.into(),
            bus_node: name == "control",
            modules: ["site".to_owned()].into(),
            sent: Some(report.declaration.clone()),
            report: Some(report),
            current: true,
        }
    }

    /// A plan whose `site` was sent to `control` at 1000 and waits for its report.
    fn waiting_plan() -> PlanRecord {
        let build = Build {
            module: "site".into(),
            repository: "cat".into(),
            commit: "0123456789abcdef".into(),
            archive: ArchiveRef {
                digest: "sha256:aaaa".into(),
                size: 10,
            },
            at: 990,
            dry_run: false,
        };
        let spec = mesh_plan::rollout::RolloutSpec {
            module: "site".into(),
            upgrade: mesh_model::module::Upgrade::OneFirst,
            on_failure: mesh_model::module::OnFailure::Stop,
            deadline_secs: 600,
            max_parallel: None,
            nodes: [(
                "control".to_owned(),
                mesh_plan::rollout::RolloutNode {
                    running: true,
                    declaration: "sha256:c1".into(),
                },
            )]
            .into(),
            bus_first: None,
        };
        let mut state = RolloutState::new();
        mesh_plan::step(&spec, &mut state, mesh_plan::Event::Start, 999);
        let granted = mesh_plan::Event::GrantsIssued {
            nodes: vec!["control".into()],
        };
        mesh_plan::step(&spec, &mut state, granted, 1000);
        let mut work = BTreeMap::new();
        work.insert(
            "site".to_owned(),
            crate::plans::ModuleWork {
                build: Some(build.clone()),
                state: Some(state),
                ..Default::default()
            },
        );
        work.insert("tools".to_owned(), crate::plans::ModuleWork::default());
        PlanRecord {
            format: crate::plans::PLAN_FORMAT,
            plan: Plan {
                id: "plan-7".into(),
                repository: "cat".into(),
                branch: "main".into(),
                commit: "0123456789abcdef".into(),
                made_at: 980,
                modules: vec!["site".into(), "tools".into()],
                tiers: vec![vec!["site".into()], vec!["tools".into()]],
                rollouts: [(
                    "site".to_owned(),
                    ModuleRollout {
                        first: Some("control".into()),
                        sends: [("control".to_owned(), 1000)].into(),
                        outcome: None,
                        build: Some(build.archive),
                    },
                )]
                .into(),
                state: PlanState::RollingOut,
            },
            previous_commit: None,
            changed_paths: 0,
            shared_paths: Vec::new(),
            folded: BTreeMap::new(),
            work,
            held: Default::default(),
        }
    }

    /// Rule 26: nothing fails silently — a plan's wait to the second, what is behind, and nodes
    /// stuck, mid-change or with a window open all reach `status`.
    #[test]
    fn status_names_the_wait_to_the_second_and_the_nodes_needing_attention() {
        let record = waiting_plan();
        let (waits_on, since) = waits_on(&record);
        assert_eq!(since, 1000);
        let overview = Overview {
            nodes: vec![
                node(
                    "control",
                    report(serde_json::json!({
                        "format": 1, "node": "control", "declaration": "sha256:c0",
                        "machine": "mid-change", "resources": {},
                        "started-at": 1001, "finished-at": 1001
                    })),
                ),
                node("home", {
                    let mut home = report(serde_json::json!({
                        "format": 1, "node": "home", "declaration": "sha256:h0",
                        "machine": "partial", "resources": {},
                        "started-at": 1002, "finished-at": 1003
                    }));
                    home.resources.insert(
                        "site/file/page".into(),
                        Outcome::Stuck {
                            attempts: 6,
                            since: 100,
                            last_reason: "read-only file system".into(),
                        },
                    );
                    home.resources.insert(
                        "media/container/media".into(),
                        Outcome::HeldStill {
                            step: "backup".into(),
                        },
                    );
                    home.windows.push(WindowSummary {
                        step: "backup".into(),
                        containers: vec!["media".into()],
                        opened_at: 900,
                    });
                    home
                }),
            ],
            open_plans: vec![OpenPlan {
                id: record.plan.id.clone(),
                repository: "cat".into(),
                branch: "main".into(),
                commit: record.plan.commit.clone(),
                state: "rolling-out",
                waits_on,
                since,
                waiting_secs: 1042 - since,
            }],
            behind: mesh_plan::behind(std::slice::from_ref(&record.plan)),
            stopped: vec![StoppedRollout {
                plan: "plan-6".into(),
                module: "notes".into(),
                node: String::new(),
                reason: "`notes` at cat 0123456789ab does not validate".into(),
                reverted: None,
            }],
            attention: Vec::new(),
        };
        let mut overview = overview;
        overview.attention = attention(&overview.nodes);
        insta::assert_snapshot!(crate::render::status(&overview));
    }
}
