//! The controller's decisions while it carries a merge's plan out, as pure functions:
//! where the changed paths are read from, how a node's report reads for one module's rollout,
//! which modules a stopped module holds back, and where a plan stands when a drive ends.
//!
//! Start at [`module_report`] (the gate's view of a report for one module), then
//! [`changes_bus_users`], [`held_back`] and [`plan_end`].
//!
//! # Invariants
//! No IO, no clock: plans, reports and dependency graphs arrive as values.

use crate::rollout::{NodeReport, Verdict};
use mesh_model::module::ModuleDefinition;
use mesh_model::plan::{Plan, PlanState, RolloutOutcome};
use mesh_model::report::{MachineState, Report};
use std::collections::{BTreeMap, BTreeSet};

/// The commit a new merge's changed paths are read from: the commit of the newest plan made for
/// the repository and branch, whatever state it is in — a plan made is a change decided.
/// `plans` are in the order they were made (the last is the newest; `made_at` has a resolution
/// of a second, so it cannot order plans made within one). `None`: the repository's first
/// merge, which plans every module.
pub fn previous_commit(plans: &[Plan], repository: &str, branch: &str) -> Option<String> {
    plans
        .iter()
        .rev()
        .find(|p| p.repository == repository && p.branch == branch)
        .map(|p| p.commit.clone())
}

/// Whether rolling out `new` changes the list of bus users — the grants (state buckets, event
/// subjects) its nodes hold — against `old`, the definition the nodes run now (`None`: the
/// module runs nowhere yet, and its grants are new when it has any). When it does, the node
/// holding the bus is sent first (the rule “Grants before code”).
pub fn changes_bus_users(old: Option<&ModuleDefinition>, new: &ModuleDefinition) -> bool {
    match old {
        Some(old) => old.grants != new.grants,
        None => !new.grants.buckets.is_empty() || !new.grants.subjects.is_empty(),
    }
}

/// A node's report as the gate of `module`'s rollout reads it.
///
/// The module's own resources (ids `<module>/…`) decide: a failure of another module on that
/// node, there before this rollout, does not stop this one. The machine counts as converged for
/// the module when every one of its resources took, unless the apply was left mid-change. A
/// report with no resources and findings, its machine `partial`, is a declaration the host
/// refused whole: a failure, in the host's words. Not so when the machine is mid-change (a host
/// restarted during an apply says so before it applies again, and that decides nothing yet),
/// nor when it is converged (a declaration with no resources applied, with a note such as an
/// archive cache that could not be pruned: ). A host that could not apply at all
/// ([`Report::host_failure`]) fails every module, with its reason.
pub fn module_report(report: &Report, module: &str) -> NodeReport {
    if report.host_failure.is_some() {
        // The host could not apply at all: every module it holds failed with it.
        return NodeReport::from_report(report);
    }
    if report.resources.is_empty()
        && !report.findings.is_empty()
        && report.machine == MachineState::Partial
    {
        return NodeReport {
            node: report.node.clone(),
            declaration: report.declaration.clone(),
            made_at: report.finished_at,
            send: report.send.clone(),
            verdict: Verdict::Failed {
                reasons: report.findings.iter().map(|f| f.message.clone()).collect(),
            },
        };
    }
    let prefix = format!("{module}/");
    let mut own = report.clone();
    own.resources.retain(|id, _| id.starts_with(&prefix));
    own.machine = match report.machine {
        MachineState::MidChange => MachineState::MidChange,
        MachineState::Converged | MachineState::Partial => {
            if own.resources.values().all(|o| o.took()) {
                MachineState::Converged
            } else {
                MachineState::Partial
            }
        }
    };
    NodeReport::from_report(&own)
}

/// The modules of `plan` a stopped module holds back: each stopped module (its rollout or build
/// stopped) and every module of the plan built from one, directly or not, by `graph` (module →
/// the modules it depends on). The plan's other modules go on.
pub fn held_back(plan: &Plan, graph: &BTreeMap<String, Vec<String>>) -> BTreeSet<String> {
    let in_plan: BTreeSet<&String> = plan.modules.iter().collect();
    // The plan's modules by the modules they depend on, gathered once rather than searched
    // for again for every module held back.
    let mut built_from: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for candidate in &plan.modules {
        for dependency in graph.get(candidate).into_iter().flatten() {
            built_from
                .entry(dependency.as_str())
                .or_default()
                .push(candidate.as_str());
        }
    }
    let mut out = BTreeSet::new();
    let mut queue: Vec<&str> = plan
        .rollouts
        .iter()
        .filter(|(m, r)| {
            in_plan.contains(m) && matches!(r.outcome, Some(RolloutOutcome::Stopped { .. }))
        })
        .map(|(m, _)| m.as_str())
        .collect();
    while let Some(module) = queue.pop() {
        if out.contains(module) {
            continue;
        }
        out.insert(module.to_owned());
        queue.extend(built_from.get(module).into_iter().flatten());
    }
    out
}

/// Where a plan stands when a drive ends, given the modules held back ([`held_back`]):
/// `Done` when every module is done; `Stopped` naming the first stopped module (in tier order)
/// with its node and reason when nothing else is left to do; `None` when work is left (the plan
/// stays open as it is).
pub fn plan_end(plan: &Plan, held_back: &BTreeSet<String>) -> Option<PlanState> {
    let mut first_stop = None;
    let mut left = false;
    for module in plan.tiers.iter().flatten() {
        match plan.rollouts.get(module).and_then(|r| r.outcome.as_ref()) {
            Some(RolloutOutcome::Done) => {}
            Some(RolloutOutcome::Stopped { node, reason }) => {
                if first_stop.is_none() {
                    first_stop = Some(PlanState::Stopped {
                        node: node.clone(),
                        reason: format!("`{module}`: {reason}"),
                    });
                }
            }
            None => left |= !held_back.contains(module),
        }
    }
    match (left, first_stop) {
        (false, Some(stopped)) => Some(stopped),
        (false, None) => Some(PlanState::Done),
        (true, _) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_model::build::ArchiveRef;
    use mesh_model::plan::ModuleRollout;

    /// A plan from tiers (`a b | c`) and outcomes (`a:done c:stopped@n1`).
    fn plan(id: &str, made_at: u64, tiers: &str, outcomes: &str) -> Plan {
        let tiers: Vec<Vec<String>> = tiers
            .split('|')
            .map(|t| t.split_whitespace().map(str::to_owned).collect())
            .collect();
        let mut rollouts = BTreeMap::new();
        for word in outcomes.split_whitespace() {
            let (module, outcome) = word.split_once(':').unwrap();
            let outcome = match outcome.split_once('@') {
                Some(("stopped", node)) => RolloutOutcome::Stopped {
                    node: node.into(),
                    reason: "no report".into(),
                },
                _ => RolloutOutcome::Done,
            };
            rollouts.insert(
                module.to_owned(),
                ModuleRollout {
                    outcome: Some(outcome),
                    build: Some(ArchiveRef {
                        digest: format!("sha256:{module}"),
                        size: 1,
                    }),
                    ..ModuleRollout::default()
                },
            );
        }
        Plan {
            id: id.into(),
            repository: "cat".into(),
            branch: "main".into(),
            commit: format!("commit-of-{id}"),
            made_at,
            modules: tiers.iter().flatten().cloned().collect(),
            tiers,
            rollouts,
            state: PlanState::RollingOut,
        }
    }

    fn graph(edges: &str) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for edge in edges.split_whitespace() {
            let (module, dependency) = edge.split_once("->").unwrap();
            out.entry(module.into())
                .or_default()
                .push(dependency.into());
            out.entry(dependency.into()).or_default();
        }
        out
    }

    fn with_one_finding(machine: MachineState, finding: &str) -> Report {
        Report {
            format: mesh_model::report::REPORT_FORMAT,
            node: "n1".into(),
            declaration: "sha256:d".into(),
            machine,
            resources: BTreeMap::new(),
            undeclared: BTreeMap::new(),
            findings: vec![mesh_model::report::Finding {
                resource: String::new(),
                message: finding.into(),
            }],
            windows: Vec::new(),
            resumed_from_mid_change: false,
            host_failure: None,
            drift: Vec::new(),
            started_at: 5,
            finished_at: 5,
            send: None,
            published_at: None,
        }
    }

    /// 's fleet bed: a host killed mid-apply says "mid-change" before applying again;
    /// the gate waits for what it says next instead of stopping the rollout.
    #[test]
    fn a_host_restarted_mid_apply_is_pending_not_failed() {
        let restarted =
            with_one_finding(MachineState::MidChange, "the host stopped during an apply");
        assert_eq!(module_report(&restarted, "m").verdict, Verdict::Pending);
        let refused = with_one_finding(MachineState::Partial, "a declaration for another node");
        assert_eq!(
            module_report(&refused, "m").verdict,
            Verdict::Failed {
                reasons: vec!["a declaration for another node".into()]
            }
        );
    }

    /// A host whose state directory is full could not apply at all, even when it had begun
    /// (mid-change): failed, with the system's reason, for every module — never pending, never
    /// applied.
    #[test]
    fn a_host_that_cannot_write_its_state_fails_every_module_with_its_reason() {
        for machine in [MachineState::Partial, MachineState::MidChange] {
            let mut full = with_one_finding(machine, "the host cannot apply");
            full.host_failure = Some("cannot write: no space left on device".into());
            assert_eq!(
                module_report(&full, "m").verdict,
                Verdict::Failed {
                    reasons: vec![
                        "the host cannot apply: cannot write: no space left on device".into()
                    ]
                }
            );
        }
    }

    /// A host that applied a declaration with no resources and could not
    /// prune its archive cache says so in a converged report; that is a note, not a refusal.
    #[test]
    fn a_converged_report_with_no_resources_and_a_note_is_not_a_refusal() {
        let noted = with_one_finding(
            MachineState::Converged,
            "the archive cache could not be pruned as it should",
        );
        assert_eq!(module_report(&noted, "m").verdict, Verdict::Applied);
    }

    #[test]
    fn the_previous_commit_is_the_newest_plans_of_the_repository_and_branch() {
        let mut other = plan("plan-3", 300, "x", "");
        other.repository = "other".into();
        let mut closed = plan("plan-2", 200, "a", "");
        closed.state = PlanState::Closed {
            note: "later".into(),
        };
        let plans = [plan("plan-1", 100, "a", ""), closed, other];
        // Made within the same second: the order given decides.
        let same_second = [plan("plan-9", 100, "a", ""), plan("plan-10", 100, "a", "")];
        assert_eq!(
            previous_commit(&same_second, "cat", "main").as_deref(),
            Some("commit-of-plan-10")
        );
        assert_eq!(
            previous_commit(&plans, "cat", "main").as_deref(),
            Some("commit-of-plan-2")
        );
        assert_eq!(previous_commit(&plans, "cat", "dev"), None);
    }

    #[test]
    fn a_stopped_module_holds_back_what_is_built_from_it_and_nothing_else() {
        // base stopped; web is built from base, app from web; tools stands alone.
        let plan = plan(
            "plan-1",
            1,
            "base tools | web | app",
            "base:stopped@n1 tools:done",
        );
        let graph = graph("web->base app->web tools->lib");
        let held = held_back(&plan, &graph);
        assert_eq!(
            held.iter().map(String::as_str).collect::<Vec<_>>(),
            ["app", "base", "web"]
        );
        assert_eq!(
            plan_end(&plan, &held),
            Some(PlanState::Stopped {
                node: "n1".into(),
                reason: "`base`: no report".into()
            })
        );
    }

    #[test]
    fn a_plan_with_work_left_stays_open_and_one_with_all_done_is_done() {
        let open = plan("plan-1", 1, "a b | c", "a:stopped@n1 b:done");
        let held = held_back(&open, &graph("x->y"));
        assert_eq!(plan_end(&open, &held), None, "c is left to do");
        let done = plan("plan-2", 1, "a | b", "a:done b:done");
        assert_eq!(plan_end(&done, &BTreeSet::new()), Some(PlanState::Done));
    }

    #[test]
    fn the_bus_users_change_when_a_modules_grants_do() {
        let definition = |grants: &str| -> ModuleDefinition {
            toml::from_str(&format!("name = \"agent\"\n{grants}")).unwrap()
        };
        let none = definition("");
        let bucket = definition("[grants]\nbuckets = [\"agent-state\"]\n");
        assert!(!changes_bus_users(Some(&none), &none));
        assert!(!changes_bus_users(None, &none));
        assert!(changes_bus_users(None, &bucket));
        assert!(changes_bus_users(Some(&none), &bucket));
        assert!(changes_bus_users(Some(&bucket), &none));
        assert!(!changes_bus_users(Some(&bucket), &bucket));
    }

    fn report(value: serde_json::Value) -> Report {
        serde_json::from_value(value).unwrap()
    }

    /// The gate reads the module's own resources: another module's failure, there before, does
    /// not stop it; its own failure does; a refusal of the whole declaration does.
    #[test]
    fn a_report_is_read_for_one_module() {
        let partial = report(serde_json::json!({
            "format": 1, "node": "home", "declaration": "sha256:d", "machine": "partial",
            "resources": {
                "site/file/page": {"outcome": "applied", "changed": ["content"]},
                "media/container/media": {"outcome": "failed", "reason": "no image",
                                          "attempts": 3, "since": 1}
            },
            "started-at": 5, "finished-at": 9
        }));
        assert_eq!(module_report(&partial, "site").verdict, Verdict::Applied);
        assert_eq!(
            module_report(&partial, "media").verdict,
            Verdict::Failed {
                reasons: vec!["media/container/media: no image".into()]
            }
        );
        // A resource failed as declared before and waiting out its backoff is that failure,
        // read at once: the report answering a re-send of the same declaration says nothing
        // newer until the backoff ends.
        let waiting = report(serde_json::json!({
            "format": 1, "node": "home", "declaration": "sha256:d", "machine": "partial",
            "resources": {
                "media/container/media": {"outcome": "waiting",
                    "last-reason": "host port 127.0.0.1:8096 is held by another program",
                    "attempts": 1, "retry-at": 40}
            },
            "started-at": 10, "finished-at": 10
        }));
        assert_eq!(
            module_report(&waiting, "media").verdict,
            Verdict::Failed {
                reasons: vec![
                    "media/container/media: host port 127.0.0.1:8096 is held by another \
                     program (failed 1 time(s) as declared before; the host tries it again \
                     after its backoff)"
                        .into()
                ]
            }
        );
        let mut mid = partial.clone();
        mid.machine = MachineState::MidChange;
        assert_eq!(module_report(&mid, "site").verdict, Verdict::Pending);
        let refused = report(serde_json::json!({
            "format": 1, "node": "home", "declaration": "sha256:d", "machine": "partial",
            "resources": {},
            "findings": [{"resource": "", "message": "declaration refused, nothing applied"}],
            "started-at": 5, "finished-at": 9
        }));
        assert_eq!(
            module_report(&refused, "site").verdict,
            Verdict::Failed {
                reasons: vec!["declaration refused, nothing applied".into()]
            }
        );
    }
}
