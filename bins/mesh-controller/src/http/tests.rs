//! The pages' tests: the page, `/metrics` and `/status.json` from snapshots, and the server.

use super::html::STYLE;
use super::metrics::label;
use super::*;
use crate::plans::PlanRecord;
use crate::status::{self, Overview};
use mesh_model::plan::{PlanState, RolloutOutcome};
use mesh_model::report::MachineState;
use std::collections::BTreeMap;

#[test]
fn escaping_leaves_no_markup_and_no_label_break() {
    assert_eq!(
        escape("<script>alert('x')</script> & \"q\""),
        "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
    );
    assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

#[test]
fn utc_and_ages_read_as_a_person_reads_them() {
    assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
    assert_eq!(utc(1_796_181_243), "2026-12-02 03:14:03 UTC");
    assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
    assert_eq!(age(5), "5 s");
    assert_eq!(age(600), "10 min");
    assert_eq!(age(10_800), "3 h");
    assert_eq!(age(3 * 86_400), "3 d");
}

#[test]
fn the_query_asks_for_every_node_a_page_at_a_time() {
    assert_eq!(
        PageQuery::parse("nodes=all&page=3"),
        PageQuery {
            all_nodes: true,
            page: 3
        }
    );
    assert_eq!(
        PageQuery::parse("page=0&x=<"),
        PageQuery {
            all_nodes: false,
            page: 1
        }
    );
}

#[test]
fn a_non_loopback_address_is_refused_without_tls_or_a_word_saying_so() {
    let listen = |addr: &str, public| Listen {
        addr: addr.parse().unwrap(),
        tls: None,
        public,
    };
    assert!(check_listen(&listen("127.0.0.1:9480", false)).is_ok());
    assert!(check_listen(&listen("[::1]:9480", false)).is_ok());
    let refused = check_listen(&listen("0.0.0.0:9480", false)).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("--http 0.0.0.0:9480: not a loopback address"),
        "{refused}"
    );
    assert!(check_listen(&listen("0.0.0.0:9480", true)).is_ok());
}

/// A fleet of three at 1,000,000 s: `a` partial with a failed file and a drift, `b`
/// converged, `c` silent; plan-1 done over three nodes; plan-2 rolling out `base`, its
/// first machine `a` awaited, and `app` not built; a problem whose words would be markup.
fn snapshot() -> Snapshot {
    use crate::plans::{ModuleWork, RolloutKept};
    use crate::push::NodeStatus;
    use mesh_model::plan::{ModuleRollout, Plan};
    use mesh_model::report::{Drift, Outcome, Report};
    use mesh_plan::rollout::{RolloutParts, Stage};
    let now = 1_000_000;
    let report = |node: &str, machine, failed: bool, drift: bool| Report {
        format: mesh_model::report::REPORT_FORMAT,
        node: node.to_owned(),
        declaration: format!("sha256:{node}"),
        machine,
        resources: [
            ("base/file/hello".to_owned(), Outcome::Unchanged),
            (
                "base/file/motd".to_owned(),
                if failed {
                    Outcome::Failed {
                        reason: "owner `<alice>` is not an account".to_owned(),
                        attempts: 1,
                        since: now - 30,
                    }
                } else {
                    Outcome::Applied {
                        changed: vec!["content".to_owned()],
                    }
                },
            ),
        ]
        .into_iter()
        .collect(),
        undeclared: BTreeMap::new(),
        findings: Vec::new(),
        windows: Vec::new(),
        resumed_from_mid_change: false,
        started_at: now - 40,
        finished_at: now - 40,
        drift: if drift {
            vec![Drift {
                resource: "base/file/hello".to_owned(),
                field: "mode".to_owned(),
                was: "0644".to_owned(),
                found: "0666".to_owned(),
                seen_at: now - 20,
                action: mesh_model::report::DriftAction::Left,
            }]
        } else {
            Vec::new()
        },
    };
    let node = |name: &str, report: Option<Report>, heard: u64, silent: bool| NodeStatus {
        node: name.to_owned(),
        bus_node: name == "a",
        modules: ["base".to_owned()].into_iter().collect(),
        sent: Some(format!("sha256:{name}")),
        current: report.is_some(),
        report,
        heard_at: Some(heard),
        silent_since: silent.then_some(heard),
        unreadable: None,
    };
    let nodes = vec![
        node(
            "a",
            Some(report("a", MachineState::Partial, true, true)),
            now - 2,
            false,
        ),
        node(
            "b",
            Some(report("b", MachineState::Converged, false, false)),
            now - 3,
            false,
        ),
        node(
            "c",
            Some(report("c", MachineState::Converged, false, false)),
            now - 400,
            true,
        ),
    ];
    let parts = |stage, first: &str, applied, in_flight, sent, nodes, outcome| RolloutParts {
        stage,
        first: Some(first.to_owned()),
        bus_node: None,
        in_flight,
        applied,
        held: 0,
        sent,
        nodes,
        outcome,
    };
    let kept = |state| RolloutKept {
        upgrade: Default::default(),
        on_failure: Default::default(),
        deadline_secs: 300,
        max_parallel: None,
        bus_first: None,
        state,
    };
    let record = |id: &str,
                  state,
                  tiers: Vec<Vec<&str>>,
                  rollouts: Vec<(&str, ModuleRollout)>,
                  work: Vec<(&str, ModuleWork)>| PlanRecord {
        format: crate::plans::PLAN_FORMAT,
        plan: Plan {
            id: id.to_owned(),
            repository: "cat".to_owned(),
            branch: "main".to_owned(),
            commit: "0123456789abcdef0123".to_owned(),
            made_at: now - 600,
            modules: tiers.iter().flatten().map(|m| (*m).to_owned()).collect(),
            tiers: tiers
                .into_iter()
                .map(|t| t.into_iter().map(str::to_owned).collect())
                .collect(),
            rollouts: rollouts
                .into_iter()
                .map(|(m, r)| (m.to_owned(), r))
                .collect(),
            state,
        },
        previous_commit: None,
        changed_paths: 2,
        shared_paths: Vec::new(),
        folded: BTreeMap::new(),
        work: work.into_iter().map(|(m, w)| (m.to_owned(), w)).collect(),
        held: Default::default(),
        forgotten: Default::default(),
    };
    let plans = vec![
        record(
            "plan-1",
            PlanState::Done,
            vec![vec!["base"]],
            vec![(
                "base",
                ModuleRollout {
                    first: Some("a".to_owned()),
                    sent: 3,
                    applied: 3,
                    outcome: Some(RolloutOutcome::Done),
                    ..ModuleRollout::default()
                },
            )],
            vec![(
                "base",
                ModuleWork {
                    rollout: Some(kept(parts(
                        Stage::Done,
                        "a",
                        3,
                        0,
                        3,
                        3,
                        Some(RolloutOutcome::Done),
                    ))),
                    ..ModuleWork::default()
                },
            )],
        ),
        record(
            "plan-2",
            PlanState::RollingOut,
            vec![vec!["base"], vec!["app"]],
            vec![(
                "base",
                ModuleRollout {
                    first: Some("a".to_owned()),
                    sent: 1,
                    ..ModuleRollout::default()
                },
            )],
            vec![(
                "base",
                ModuleWork {
                    rollout: Some(kept(parts(Stage::FirstNode, "a", 0, 1, 1, 3, None))),
                    ..ModuleWork::default()
                },
            )],
        ),
    ];
    let overview = Overview {
        attention: status::attention(&nodes),
        nodes,
        open_plans: vec![status::OpenPlan {
            id: "plan-2".to_owned(),
            repository: "cat".to_owned(),
            branch: "main".to_owned(),
            commit: "0123456789abcdef0123".to_owned(),
            state: "rolling-out",
            waits_on: "`a` to report `base` applied (tier 0)".to_owned(),
            since: now - 45,
            waiting_secs: 45,
        }],
        behind: Vec::new(),
        nodes_behind: Vec::new(),
        stopped: Vec::new(),
        held: Vec::new(),
        problems: vec![mesh_store::problems::Problem {
            format: mesh_store::problems::PROBLEM_FORMAT,
            kind: mesh_store::problems::ProblemKind::Merge,
            subject: "cat".to_owned(),
            what: "the merge of <b>cat</b> could not be planned: \"x\" & 'y'".to_owned(),
            details: Vec::new(),
            since: now - 120,
            at: now - 60,
            by: "mesh-controller serve".to_owned(),
            plan: None,
            module: None,
            attempts: 0,
        }],
        on_passwords: Vec::new(),
        daemon: None,
    };
    let mut sends = SendTally {
        sends: 4,
        ..SendTally::default()
    };
    for secs in [1, 2, 4] {
        sends.add_latency(secs);
    }
    Snapshot {
        now,
        overview,
        plans,
        sends,
    }
}

#[test]
fn the_metrics_of_a_fleet_read_as_prometheus_reads_them() {
    insta::assert_snapshot!(metrics(&snapshot()));
}

#[test]
fn the_page_of_a_fleet_draws_its_rollouts_and_escapes_what_it_shows() {
    let page = page(&snapshot(), PageQuery::parse(""));
    assert!(
        !page.contains("<b>cat</b> could not") && page.contains("&lt;b&gt;cat&lt;/b&gt; could not"),
        "{page}"
    );
    insta::assert_snapshot!(page.replace(STYLE, "…").replace("><", ">\n<"));
}

#[test]
fn the_latency_histogram_counts_each_send_in_its_bucket() {
    let mut tally = SendTally::default();
    for secs in [0, 1, 3, 3, 4000] {
        tally.add_latency(secs);
    }
    assert_eq!(tally.applied, 5);
    assert_eq!(tally.latency_sum, 4007);
    assert_eq!(tally.buckets[0], 2);
    assert_eq!(tally.buckets[2], 2);
    assert_eq!(
        tally.buckets.iter().sum::<u64>(),
        4,
        "4000 s is only under +Inf"
    );
}
