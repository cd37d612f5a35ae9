//! The notifier's tests, through a trace harness: observations in, the lines of the notices out,
//! as text; the bodies as snapshots; and a property over any sequence of observations.

use super::format::{chat_body, event_type, line, webhook_body, Origin};
use super::*;
use mesh_model::waves::{Budget, Share};
use proptest::prelude::*;
use std::fmt::Write as _;

const T0: u64 = 1_765_155_600;

fn failed(nodes: &[&str], reason: &str) -> Vec<FailedNode> {
    nodes
        .iter()
        .map(|node| FailedNode {
            node: (*node).to_owned(),
            reason: reason.to_owned(),
        })
        .collect()
}

fn started(plan: &str) -> Observation {
    Observation::PlanStarted {
        plan: plan.to_owned(),
        repository: "fleet".to_owned(),
        commit: "0123456789abcdef0123".to_owned(),
        modules: vec!["web".to_owned(), "db".to_owned()],
        rollback: false,
    }
}

fn wave(plan: &str, action: WaveAction) -> Observation {
    Observation::Wave {
        plan: plan.to_owned(),
        module: "web".to_owned(),
        action,
    }
}

fn budget_exceeded(nodes: &[&str]) -> WaveAction {
    WaveAction::BudgetExceeded {
        wave: 1,
        name: "rest".to_owned(),
        budget: Budget {
            failed: Share::parse("10%").unwrap(),
            min: 1,
        },
        answered: 8,
        failed: failed(nodes, "unit web.service failed to start"),
    }
}

fn done(plan: &str, outcome: PlanOutcome) -> Observation {
    Observation::PlanDone {
        plan: plan.to_owned(),
        outcome,
        rollback: false,
    }
}

/// Feeds each observation at a second after the last, and writes what each said: the
/// observation's kind, then each notice's key and line, or `(nothing)`.
fn trace(notifier: &mut Notifier, observations: Vec<Observation>) -> String {
    let mut text = String::new();
    for (at, observation) in observations.into_iter().enumerate() {
        let kind = serde_json::to_value(&observation).unwrap()["observed"]
            .as_str()
            .unwrap()
            .to_owned();
        let notices = notifier.observe(observation, T0 + at as u64);
        let _ = writeln!(text, "{kind}:");
        if notices.is_empty() {
            let _ = writeln!(text, "  (nothing)");
        }
        for notice in notices {
            let _ = writeln!(text, "  {}  {}", notice.key, line(&notice));
        }
    }
    text
}

fn check(observations: Vec<Observation>) -> String {
    trace(&mut Notifier::new(), observations)
}

#[test]
fn a_plan_in_waves_says_it_started_each_wave_done_and_it_done_and_nothing_between() {
    insta::assert_snapshot!(check(vec![
        started("plan-7"),
        wave(
            "plan-7",
            WaveAction::WaveStarted {
                wave: 0,
                name: "canary".to_owned(),
                nodes: 1,
            }
        ),
        wave(
            "plan-7",
            WaveAction::Send {
                wave: 0,
                nodes: vec!["edge-1".to_owned()],
            }
        ),
        wave(
            "plan-7",
            WaveAction::WaveDone {
                wave: 0,
                applied: 1,
                failed: vec![],
            }
        ),
        wave("plan-7", WaveAction::AwaitApproval { next: 1 }),
        wave(
            "plan-7",
            WaveAction::WaveDone {
                wave: 1,
                applied: 7,
                failed: failed(&["edge-5"], "health check failed:\n  exit 1"),
            }
        ),
        wave("plan-7", WaveAction::Done),
        done("plan-7", PlanOutcome::Done),
    ]));
}

/// The issue's case: a rollout stopped by its budget over 5 failing nodes is one notice, not
/// one per node (fluxcd/notification-controller#158).
#[test]
fn a_budget_stop_over_five_failing_nodes_is_one_notice_naming_them_all() {
    let mut notifier = Notifier::new();
    let notices = notifier.observe(
        wave("plan-7", budget_exceeded(&["n1", "n2", "n3", "n4", "n5"])),
        T0,
    );
    assert_eq!(notices.len(), 1, "{notices:#?}");
    assert_eq!(notices[0].severity, Severity::Critical);
    assert_eq!(notices[0].nodes(), Some(vec!["n1", "n2", "n3", "n4", "n5"]));
    insta::assert_snapshot!(line(&notices[0]));
}

/// argoproj-labs/argocd-notifications#179: after a restart, every application was notified
/// again. The notifier is kept in the records: read back, it says nothing of what it said.
#[test]
fn a_restarted_daemon_that_observes_the_same_states_again_says_nothing() {
    let observations = || {
        vec![
            started("plan-7"),
            wave(
                "plan-7",
                WaveAction::WaveDone {
                    wave: 0,
                    applied: 1,
                    failed: vec![],
                },
            ),
            wave("plan-7", budget_exceeded(&["n1", "n2"])),
            Observation::Nodes {
                failing: failed(&["n1", "n2"], "unit failed"),
            },
            Observation::Daemon {
                silent_since: Some(T0 - 300),
            },
        ]
    };
    let mut before = Notifier::new();
    let first = trace(&mut before, observations());
    assert!(!first.contains("(nothing)"), "{first}");
    let kept = serde_json::to_string(&before).unwrap();
    let mut after: Notifier = serde_json::from_str(&kept).unwrap();
    assert_eq!(after, before);
    let again = trace(&mut after, observations());
    assert_eq!(again.matches("(nothing)").count(), 5, "{again}");
}

#[test]
fn nodes_failing_and_recovering_are_one_notice_each_per_observation() {
    insta::assert_snapshot!(check(vec![
        Observation::Nodes {
            failing: failed(&["a", "b", "c"], "report unreadable"),
        },
        // A reason that changes is not a change of state.
        Observation::Nodes {
            failing: failed(&["a", "b", "c"], "silent for 300 s"),
        },
        Observation::Nodes {
            failing: [failed(&["a"], "silent"), failed(&["d"], "drift")].concat(),
        },
        Observation::Nodes { failing: vec![] },
        Observation::Nodes { failing: vec![] },
    ]));
}

#[test]
fn the_daemon_going_silent_and_coming_back_is_said_once_each() {
    insta::assert_snapshot!(check(vec![
        Observation::Daemon { silent_since: None },
        Observation::Daemon {
            silent_since: Some(T0 - 120),
        },
        Observation::Daemon {
            silent_since: Some(T0 - 120),
        },
        Observation::Daemon { silent_since: None },
        Observation::Daemon { silent_since: None },
    ]));
}

#[test]
fn a_rollout_stopped_says_by_what_once() {
    insta::assert_snapshot!(check(vec![
        Observation::RolloutStopped {
            plan: "plan-7".to_owned(),
            module: "web".to_owned(),
            by: StopCause::FirstNode {
                node: "edge-1".to_owned(),
                reason: "health check failed".to_owned(),
                reverted: Some(format!("sha256:{}", "ab".repeat(32))),
            },
        },
        Observation::RolloutStopped {
            plan: "plan-7".to_owned(),
            module: "web".to_owned(),
            by: StopCause::FirstNode {
                node: "edge-1".to_owned(),
                reason: "health check failed".to_owned(),
                reverted: Some(format!("sha256:{}", "ab".repeat(32))),
            },
        },
        wave(
            "plan-8",
            WaveAction::Aborted {
                actor: "alice".to_owned(),
                reason: "wrong build".to_owned(),
                under_way: vec!["n1".to_owned()],
            }
        ),
        Observation::RolloutStopped {
            plan: "plan-8".to_owned(),
            module: "db".to_owned(),
            by: StopCause::Superseded {
                by: "plan-9".to_owned(),
            },
        },
        done("plan-8", PlanOutcome::Superseded),
    ]));
}

#[test]
fn a_forgotten_plan_opened_again_is_said_again() {
    let mut notifier = Notifier::new();
    assert_eq!(notifier.observe(started("plan-7"), T0).len(), 1);
    assert_eq!(notifier.observe(started("plan-7"), T0 + 1).len(), 0);
    notifier.forget_plan("plan-70");
    assert_eq!(notifier.observe(started("plan-7"), T0 + 2).len(), 0);
    notifier.forget_plan("plan-7");
    assert_eq!(notifier.observe(started("plan-7"), T0 + 3).len(), 1);
}

fn labels(pairs: &[(&str, &[(&str, &str)])]) -> BTreeMap<String, Labels> {
    pairs
        .iter()
        .map(|(node, labels)| {
            let labels = labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            ((*node).to_owned(), labels)
        })
        .collect()
}

#[test]
fn a_receivers_filter_takes_its_severity_and_up_and_only_the_nodes_it_selects() {
    let fleet = labels(&[
        ("n1", &[("role", "edge")]),
        ("n2", &[("role", "db")]),
        ("n3", &[("role", "edge")]),
    ]);
    let mut notifier = Notifier::new();
    let plan = notifier.observe(started("plan-7"), T0).remove(0);
    let budget = notifier
        .observe(wave("plan-7", budget_exceeded(&["n1", "n2", "n3"])), T0)
        .remove(0);
    let db_failing = notifier
        .observe(
            Observation::Nodes {
                failing: failed(&["n2"], "disk full"),
            },
            T0,
        )
        .remove(0);

    let critical = Filter {
        severity: Some(Severity::Critical),
        select: None,
    };
    assert_eq!(critical.admit(&plan, &fleet), None);
    assert_eq!(critical.admit(&budget, &fleet), Some(budget.clone()));
    assert_eq!(critical.admit(&db_failing, &fleet), None);

    let edge = Filter {
        severity: None,
        select: Some(Selector::parse("role=edge").unwrap()),
    };
    // A plan names no node: every receiver takes it.
    assert_eq!(edge.admit(&plan, &fleet), Some(plan.clone()));
    let narrowed = edge.admit(&budget, &fleet).unwrap();
    assert_eq!(narrowed.nodes(), Some(vec!["n1", "n3"]));
    assert_eq!(edge.admit(&db_failing, &fleet), None);

    let by_name = Filter {
        severity: Some(Severity::Warning),
        select: Some(Selector::parse("n2").unwrap()),
    };
    assert_eq!(by_name.admit(&db_failing, &fleet), Some(db_failing.clone()));
    // A node not in the labels given has none, but its name still matches.
    assert!(by_name.admit(&db_failing, &BTreeMap::new()).is_some());
}

#[test]
fn a_severity_is_read_from_its_word_and_a_wrong_one_is_named() {
    assert_eq!(Severity::parse("warning"), Ok(Severity::Warning));
    assert_eq!(
        Severity::parse("loud").unwrap_err().to_string(),
        "unknown severity `loud`: expected info, warning or critical"
    );
    assert!(Severity::Info < Severity::Warning && Severity::Warning < Severity::Critical);
}

// ---- the bodies ----

const ORIGIN: Origin<'static> = Origin {
    source: "mesh/prod",
    status_url: Some("https://mesh.example.net/"),
};

fn budget_notice() -> Notice {
    Notifier::new()
        .observe(
            wave("plan-7", budget_exceeded(&["n1", "n2", "n3", "n4", "n5"])),
            T0,
        )
        .remove(0)
}

#[test]
fn the_webhook_body_of_a_budget_stop() {
    insta::assert_snapshot!(webhook_body(&budget_notice(), &ORIGIN));
}

#[test]
fn the_chat_body_of_a_budget_stop_is_one_line_with_the_status_page() {
    let body = chat_body(&budget_notice(), &ORIGIN);
    let value: serde_json::Value = serde_json::from_str(&body).unwrap();
    let text = value["text"].as_str().unwrap();
    assert!(!text.contains('\n'), "{text}");
    assert!(text.ends_with(" https://mesh.example.net/"), "{text}");
    insta::assert_snapshot!(body);
}

#[test]
fn the_webhook_bodies_of_a_plan_its_rollback_and_the_daemon() {
    let mut notifier = Notifier::new();
    let mut notices = notifier.observe(started("plan-7"), T0);
    notices.extend(notifier.observe(
        Observation::PlanDone {
            plan: "plan-9".to_owned(),
            outcome: PlanOutcome::Done,
            rollback: true,
        },
        T0 + 60,
    ));
    notices.extend(notifier.observe(
        Observation::Daemon {
            silent_since: Some(T0),
        },
        T0 + 300,
    ));
    let origin = Origin {
        source: "mesh/prod",
        status_url: None,
    };
    let bodies: Vec<String> = notices.iter().map(|n| webhook_body(n, &origin)).collect();
    insta::assert_snapshot!(bodies.join("\n"));
}

#[test]
fn each_notice_has_its_cdevents_type() {
    let mut notifier = Notifier::new();
    let types: Vec<&str> = [
        started("p"),
        wave(
            "p",
            WaveAction::WaveDone {
                wave: 0,
                applied: 1,
                failed: vec![],
            },
        ),
        done("p", PlanOutcome::Done),
        done("q", PlanOutcome::Stopped),
        wave("r", budget_exceeded(&["n1"])),
        Observation::Nodes {
            failing: failed(&["n1"], "x"),
        },
        Observation::Nodes { failing: vec![] },
    ]
    .into_iter()
    .flat_map(|o| notifier.observe(o, T0))
    .map(|n| event_type(&n.what))
    .collect();
    assert_eq!(
        types,
        [
            "dev.cdevents.pipelinerun.started",
            "dev.cdevents.taskrun.finished",
            "dev.cdevents.service.deployed",
            "dev.cdevents.pipelinerun.finished",
            "dev.cdevents.incident.detected",
            "dev.cdevents.incident.detected",
            "dev.cdevents.incident.resolved",
        ]
    );
}

#[test]
fn a_long_list_of_nodes_is_named_to_ten_and_counted() {
    let nodes: Vec<String> = (1..=25).map(|n| format!("n{n:02}")).collect();
    let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let notice = Notifier::new()
        .observe(
            Observation::Nodes {
                failing: failed(&names, "silent"),
            },
            T0,
        )
        .remove(0);
    insta::assert_snapshot!(line(&notice));
}

// ---- the property ----

fn observation() -> impl Strategy<Value = Observation> {
    let node = prop::sample::select(vec!["n0", "n1", "n2", "n3", "n4"]);
    let plan = prop::sample::select(vec!["p0", "p1", "p2"]);
    prop_oneof![
        prop::collection::btree_set(node, 0..5).prop_map(|nodes| Observation::Nodes {
            failing: nodes
                .into_iter()
                .map(|node| FailedNode {
                    node: node.to_owned(),
                    reason: "failed".to_owned(),
                })
                .collect(),
        }),
        prop::option::of(prop::sample::select(vec![100_u64, 200]))
            .prop_map(|silent_since| { Observation::Daemon { silent_since } }),
        plan.clone().prop_map(started),
        (plan.clone(), 0_usize..3).prop_map(|(plan, wave_index)| wave(
            plan,
            WaveAction::WaveDone {
                wave: wave_index,
                applied: 1,
                failed: vec![],
            }
        )),
        plan.clone()
            .prop_map(|plan| wave(plan, budget_exceeded(&["n0", "n1"]))),
        plan.prop_map(|plan| done(plan, PlanOutcome::Done)),
    ]
}

/// The changes an observation makes, counted apart from the notifier: a plan's change not
/// seen before, each node that begins or stops failing, the daemon going silent or back.
#[derive(Default)]
struct Changes {
    said: BTreeSet<String>,
    failing: BTreeSet<String>,
    silent: bool,
}

impl Changes {
    fn count(&mut self, observation: &Observation) -> usize {
        match observation {
            Observation::Nodes { failing } => {
                let now: BTreeSet<String> = failing.iter().map(|f| f.node.clone()).collect();
                let flips = now.symmetric_difference(&self.failing).count();
                self.failing = now;
                flips
            }
            Observation::Daemon { silent_since } => {
                let before = std::mem::replace(&mut self.silent, silent_since.is_some());
                usize::from(before != self.silent)
            }
            Observation::PlanStarted { .. }
            | Observation::Wave { .. }
            | Observation::RolloutStopped { .. }
            | Observation::PlanDone { .. } => usize::from(
                self.said
                    .insert(serde_json::to_string(observation).unwrap()),
            ),
        }
    }
}

proptest! {
    /// No notice for an unchanged state (the same observation twice: the second says nothing,
    /// also across a restart), and never more notices than changes.
    #[test]
    fn never_a_notice_for_an_unchanged_state_nor_more_notices_than_changes(
        observations in prop::collection::vec(observation(), 0..40),
        restart_at in 0_usize..40,
    ) {
        let mut notifier = Notifier::new();
        let mut changes = Changes::default();
        let (mut noticed, mut changed) = (0, 0);
        for (at, observation) in observations.into_iter().enumerate() {
            if at == restart_at {
                let kept = serde_json::to_string(&notifier).unwrap();
                notifier = serde_json::from_str(&kept).unwrap();
            }
            let now = T0 + at as u64;
            changed += changes.count(&observation);
            noticed += notifier.observe(observation.clone(), now).len();
            prop_assert!(noticed <= changed, "{noticed} notices for {changed} changes");
            let again = notifier.observe(observation.clone(), now);
            prop_assert!(again.is_empty(), "the same {observation:?} again said {again:?}");
            prop_assert_eq!(changes.count(&observation), 0);
        }
    }
}
