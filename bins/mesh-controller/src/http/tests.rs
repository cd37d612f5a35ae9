//! The pages' tests: the page, `/metrics` and `/status.json` from snapshots, and the server.

use super::counts::SendTally;
use super::html::{age, page, utc, STYLE};
use super::server::check_listen;
use super::snapshot::{PageQuery, Snapshot};
use super::*;
use crate::error::{Error, Given};
use crate::plans::PlanRecord;
use crate::status::{self, Overview};
use mesh_model::plan::{PlanState, RolloutOutcome};
use mesh_model::report::MachineState;
use std::collections::BTreeMap;

/// `snapshot()` with node `b` named with a double quote, a backslash and a newline: what a
/// label value must escape.
fn snapshot_with_a_node_named_to_break_a_label() -> (Snapshot, &'static str) {
    let mut snapshot = snapshot();
    let name = "b \"q\" \\ x\ny";
    for node in &mut snapshot.overview.nodes {
        if node.node == "b" {
            node.node = name.to_owned();
        }
    }
    (snapshot, name)
}

#[test]
fn a_label_value_is_escaped_and_parses_back_whole() {
    let (snapshot, name) = snapshot_with_a_node_named_to_break_a_label();
    let text = metrics(&snapshot);
    assert!(
        text.contains("mesh_node_report_timestamp_seconds{node=\"b \\\"q\\\" \\\\ x\\ny\"} 999997"),
        "{text}"
    );
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let sample = scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == "mesh_node_report_age_seconds"
                && s.labels.get("node").is_some_and(|n| n != "a" && n != "c")
        })
        .unwrap_or_else(|| panic!("{text}"));
    // prometheus-parse leaves the escapes in the value (it does not unescape).
    assert_eq!(
        sample.labels.get("node"),
        Some("b \\\"q\\\" \\\\ x\\ny"),
        "{name:?}"
    );
}

/// The metrics parsed by another parser: the Python client's (`prometheus_client.parser`, the
/// Prometheus project's own), from the test venv scripts/test makes (`target/nats-venv`). Every
/// family is read, a node's name comes back whole after its label was escaped, and the counter
/// and the histogram read as Prometheus reads them.
#[test]
fn the_metrics_parse_with_the_python_clients_parser() {
    use std::io::Write as _;
    let (snapshot, name) = snapshot_with_a_node_named_to_break_a_label();
    let text = metrics(&snapshot);
    let python =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/nats-venv/bin/python");
    let script = "import json, sys\n\
        from prometheus_client.parser import text_string_to_metric_families\n\
        out = []\n\
        for family in text_string_to_metric_families(sys.stdin.read()):\n\
        \x20   for s in family.samples:\n\
        \x20       out.append([family.name, family.type, s.name, s.labels, s.value])\n\
        print(json.dumps(out))\n";
    let mut child = std::process::Command::new(&python)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (scripts/test makes it; or `python3 -m venv target/nats-venv` and \
                 `target/nats-venv/bin/pip install prometheus-client==0.26.0`)",
                python.display()
            )
        });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the Python parser refused the metrics: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    /// A sample: its family's name and type, its name, labels and value.
    type Sample = (String, String, String, BTreeMap<String, String>, f64);
    let parsed: Vec<Sample> = serde_json::from_slice(&out.stdout).unwrap();
    let value = |sample: &str, labels: &[(&str, &str)]| -> f64 {
        let labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        parsed
            .iter()
            .find(|p| p.2 == sample && p.3 == labels)
            .unwrap_or_else(|| panic!("no {sample}{labels:?} in {parsed:?}"))
            .4
    };
    let families: std::collections::BTreeSet<(&str, &str)> = parsed
        .iter()
        .map(|p| (p.0.as_str(), p.1.as_str()))
        .collect();
    assert_eq!(families.len(), 20, "{families:?}");
    assert_eq!(
        value("mesh_fleet_verdict", &[("verdict", "needs-attention")]),
        1.0
    );
    assert_eq!(value("mesh_fleet_verdict", &[("verdict", "settled")]), 0.0);
    assert!(
        families.contains(&("mesh_sends", "counter")),
        "{families:?}"
    );
    assert!(
        families.contains(&("mesh_send_latency_seconds", "histogram")),
        "{families:?}"
    );
    assert_eq!(
        value("mesh_node_report_timestamp_seconds", &[("node", name)]),
        999_997.0
    );
    assert_eq!(
        value("mesh_node_report_age_seconds", &[("node", name)]),
        3.0
    );
    assert_eq!(value("mesh_nodes", &[("state", "partial")]), 1.0);
    // The node's state in a word, with its name whole after its label was escaped.
    assert_eq!(
        value("mesh_node_state", &[("node", name), ("state", "current")]),
        1.0
    );
    assert_eq!(value("mesh_nodes_pending", &[]), 0.0);
    assert_eq!(value("mesh_sends_total", &[]), 4.0);
    assert_eq!(
        value("mesh_send_latency_seconds_bucket", &[("le", "2")]),
        2.0
    );
    assert_eq!(
        value("mesh_send_latency_seconds_bucket", &[("le", "+Inf")]),
        3.0
    );
    assert_eq!(value("mesh_send_latency_seconds_sum", &[]), 7.0);
    assert_eq!(value("mesh_send_latency_seconds_count", &[]), 3.0);
}

/// A node named `<script>` (the inventory refuses such a name; the view model is given it as a
/// record could say it): the page shows it as text, in the node list, the attention table and
/// its `data-node` attributes, and no markup of it reaches the page.
#[test]
fn the_page_escapes_a_node_named_script() {
    let mut snapshot = snapshot();
    let hostile = "<script>alert(\"x\")</script>";
    for node in &mut snapshot.overview.nodes {
        if node.node == "a" {
            node.node = hostile.to_owned();
        }
    }
    snapshot.overview.attention = status::attention(&snapshot.overview.nodes);
    let page = page(&snapshot, query("nodes=all"));
    assert!(!page.contains("<script"), "{page}");
    let shown = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;";
    assert!(
        page.contains(&format!("<td>{shown}<")),
        "the node list shows the name as text: {page}"
    );
    assert!(
        page.contains(&format!("data-node=\"{shown}\"")),
        "the data-node attribute holds it escaped: {page}"
    );
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

/// The page's query as axum's `Query` reads it from a request's target.
fn query(query: &str) -> PageQuery {
    let uri: axum::http::Uri = format!("/?{query}").parse().unwrap();
    axum::extract::Query::<PageQuery>::try_from_uri(&uri)
        .unwrap_or_else(|e| panic!("{query}: {e}"))
        .0
}

#[test]
fn the_query_asks_for_every_node_a_page_at_a_time() {
    assert_eq!(
        query("nodes=all&page=3"),
        PageQuery {
            all_nodes: true,
            page: 3
        }
    );
    assert_eq!(
        query("page=0&x=%3C"),
        PageQuery {
            all_nodes: false,
            page: 1
        }
    );
    assert_eq!(query("page=two&nodes=some"), PageQuery::default());
    assert_eq!(query(""), PageQuery::default());
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
        matches!(
            &refused,
            Error::Given { option: Given::HttpListen, value: Some(addr), .. } if addr == "0.0.0.0:9480"
        ),
        "{refused:?}"
    );
    assert!(
        refused
            .to_string()
            .starts_with("the status page's address 0.0.0.0:9480: not a loopback address"),
        "{refused}"
    );
    assert!(check_listen(&listen("0.0.0.0:9480", true)).is_ok());
}

/// A fleet of three at 1,000,000 s: `a` partial with a failed file and a drift, `b`
/// converged, `c` silent; plan-1 done over three nodes; plan-2 rolling out `base`, its
/// first machine `a` awaited, and `app` not built; a problem whose words would be markup.
/// A rollout's parts as the plan keeps them.
fn parts(
    stage: mesh_plan::rollout::Stage,
    first: &str,
    (applied, in_flight, sent, nodes): (usize, usize, usize, usize),
    outcome: Option<RolloutOutcome>,
) -> mesh_plan::rollout::RolloutParts {
    mesh_plan::rollout::RolloutParts {
        stage,
        first: Some(first.to_owned()),
        bus_node: None,
        in_flight,
        applied,
        held: 0,
        sent,
        nodes,
        outcome,
    }
}

/// A rollout kept in its plan's record, at `state`.
fn kept(state: mesh_plan::rollout::RolloutParts) -> crate::plans::RolloutKept {
    crate::plans::RolloutKept {
        upgrade: Default::default(),
        on_failure: Default::default(),
        deadline_secs: 300,
        max_parallel: None,
        bus_first: None,
        state,
    }
}

/// The record of plan `id` of repository `cat`, made ten minutes before `now`.
fn plan_record(
    now: u64,
    id: &str,
    state: PlanState,
    tiers: Vec<Vec<&str>>,
    rollouts: Vec<(&str, mesh_model::plan::ModuleRollout)>,
    work: Vec<(&str, crate::plans::ModuleWork)>,
) -> PlanRecord {
    PlanRecord {
        format: crate::plans::PLAN_FORMAT,
        plan: mesh_model::plan::Plan {
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
        nodes_folded: false,
    }
}

fn snapshot() -> Snapshot {
    use crate::plans::ModuleWork;
    use crate::push::NodeStatus;
    use mesh_model::plan::ModuleRollout;
    use mesh_model::report::{Drift, Outcome, Report};
    use mesh_plan::rollout::Stage;
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
        host_failure: None,
        started_at: now - 40,
        finished_at: now - 40,
        send: None,
        published_at: None,
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
        intent: Some(format!("sha256:{name}")),
        sent: Some(format!("sha256:{name}")),
        current: report.is_some(),
        report,
        heard_at: Some(heard),
        silent_since: silent.then_some(heard),
        unreadable: None,
        unconfirmed: None,
        clock_offset_secs: None,
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
    let record = |id: &str,
                  state,
                  tiers: Vec<Vec<&str>>,
                  rollouts: Vec<(&str, ModuleRollout)>,
                  work: Vec<(&str, ModuleWork)>| {
        plan_record(now, id, state, tiers, rollouts, work)
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
                        (3, 0, 3, 3),
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
                    rollout: Some(kept(parts(Stage::FirstNode, "a", (0, 1, 1, 3), None))),
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
        pending: Vec::new(),
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
    let verdict =
        crate::status::judge(&overview, now, crate::status::DEFAULT_MID_CHANGE_AFTER_SECS);
    Snapshot {
        now,
        overview,
        plans,
        sends,
        verdict,
    }
}

#[test]
fn the_metrics_of_a_fleet_read_as_prometheus_reads_them() {
    insta::assert_snapshot!(metrics(&snapshot()));
}

#[test]
fn the_page_of_a_fleet_draws_its_rollouts_and_escapes_what_it_shows() {
    let page = page(&snapshot(), query(""));
    assert!(page.ends_with("</html>\n"), "a page ends with a line's end");
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

/// A plan folded between the page's read of the plans and its read of the plan's nodes: the
/// nodes' records are gone, and the tally is the summary's (read again), not none — and one
/// read part way is never kept for the next scrape.
#[test]
fn a_tally_read_while_its_plan_is_folded_counts_the_summary() {
    use crate::plans::fold::RolloutSummary;
    use crate::plans::ModuleWork;
    use mesh_model::plan::ModuleRollout;
    use mesh_plan::rollout::Stage;
    let dir = tempfile::tempdir().unwrap();
    let home = crate::home::Home::new(dir.path());
    let now = 1_700_000_000;
    let rollout = ModuleRollout {
        first: Some("a".to_owned()),
        sent: 2,
        applied: 2,
        outcome: Some(RolloutOutcome::Done),
        ..ModuleRollout::default()
    };
    let work = |summary: Option<RolloutSummary>| ModuleWork {
        rollout: Some(kept(parts(
            Stage::Done,
            "a",
            (2, 0, 2, 2),
            Some(RolloutOutcome::Done),
        ))),
        summary,
        ..ModuleWork::default()
    };
    let record = |work| {
        plan_record(
            now,
            "plan-1",
            PlanState::Done,
            vec![vec!["base"]],
            vec![("base", rollout.clone())],
            vec![("base", work)],
        )
    };
    // What the page read before the fold: no summary yet.
    let before = record(work(None));
    // What the fold left: the summary (two nodes, 3 s and 5 s), no node's record.
    let summary = RolloutSummary {
        latencies: [(3, 1), (5, 1)].into_iter().collect(),
        ..RolloutSummary::default()
    };
    home.plans().write(&record(work(Some(summary)))).unwrap();

    let pages = Pages::new(home, 60);
    let tally = pages.sends(std::slice::from_ref(&before)).unwrap();
    assert_eq!((tally.sends, tally.applied, tally.latency_sum), (2, 2, 8));

    // A read part way through that finds neither (the record not yet rewritten) is not kept.
    let dir = tempfile::tempdir().unwrap();
    let empty = crate::home::Home::new(dir.path());
    empty.plans().write(&before).unwrap();
    let pages = Pages::new(empty.clone(), 60);
    assert_eq!(
        pages.sends(std::slice::from_ref(&before)).unwrap().applied,
        0
    );
    let summary = RolloutSummary {
        latencies: [(4, 2)].into_iter().collect(),
        ..RolloutSummary::default()
    };
    let folded = record(work(Some(summary)));
    empty.plans().write(&folded).unwrap();
    let tally = pages.sends(std::slice::from_ref(&folded)).unwrap();
    assert_eq!(
        (tally.applied, tally.latency_sum),
        (2, 8),
        "the first read was not kept"
    );
}

/// The routes over a real loopback listener, pages and webhooks mounted: `GET` and `HEAD`
/// answer a page (here 500: the home was never made), another method 405 naming the pages
/// read-only, an unknown path 404 naming the pages, a path the mounted owns goes to it, and a
/// body declared over the limit is refused 413 before anything reads it.
#[tokio::test]
async fn the_routes_answer_each_path_and_method_as_said() {
    use std::io::{Read as _, Write as _};
    struct Echo;
    #[async_trait::async_trait]
    impl Mounted for Echo {
        fn owns(&self, path: &str) -> bool {
            path.starts_with("/hooks/")
        }
        async fn respond(&self, request: axum::extract::Request) -> Answer {
            Answer::text(202, format!("mounted {}", request.uri().path()))
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let pages = std::sync::Arc::new(Pages::new(
        crate::home::Home::new(dir.path().join("no-home")),
        90,
    ));
    let bound = bind(&Listen {
        addr: "127.0.0.1:0".parse().unwrap(),
        tls: None,
        public: false,
    })
    .await
    .unwrap();
    let addr = bound.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        bound,
        Routes {
            pages: Some(pages),
            mounted: Some(std::sync::Arc::new(Echo)),
        },
        async {
            let _ = stopped.await;
        },
    ));
    let ask = move |head: String| {
        tokio::task::spawn_blocking(move || {
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            write!(stream, "{head}Host: {addr}\r\nConnection: close\r\n\r\n").unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).unwrap();
            answer
        })
    };
    let status = |answer: &str| -> u16 {
        answer
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("{answer}"))
    };
    let got = ask("GET /status.json HTTP/1.1\r\n".into()).await.unwrap();
    assert_eq!(status(&got), 500, "{got}");
    assert!(got.contains("the status could not be read"), "{got}");
    assert!(
        got.to_ascii_lowercase().contains("cache-control: no-store"),
        "{got}"
    );
    let got = ask("HEAD /metrics HTTP/1.1\r\n".into()).await.unwrap();
    assert_eq!(status(&got), 500, "{got}");
    assert!(
        !got.contains("the status could not be read"),
        "HEAD has no body: {got}"
    );
    let got = ask("POST / HTTP/1.1\r\nContent-Length: 0\r\n".into())
        .await
        .unwrap();
    assert_eq!(status(&got), 405, "{got}");
    assert!(
        got.ends_with("the status pages are read-only: GET or HEAD\n"),
        "{got}"
    );
    let got = ask("GET /nothing?x=1 HTTP/1.1\r\n".into()).await.unwrap();
    assert_eq!(status(&got), 404, "{got}");
    assert!(
        got.ends_with("no page /nothing: there are /, /metrics and /status.json\n"),
        "{got}"
    );
    let got = ask("POST /hooks/cat HTTP/1.1\r\nContent-Length: 0\r\n".into())
        .await
        .unwrap();
    assert_eq!(status(&got), 202, "{got}");
    assert!(got.ends_with("mounted /hooks/cat"), "{got}");
    let got = ask(format!(
        "POST /hooks/cat HTTP/1.1\r\nContent-Length: {}\r\n",
        super::BODY_LIMIT + 1
    ))
    .await
    .unwrap();
    assert_eq!(status(&got), 413, "{got}");
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}

/// A pending node that nothing will send is listed under "needs attention" with what differs
/// and the push that sends it, and counted; one an open plan will send is not (it is in
/// progress), and both are counted by `mesh_nodes_pending` and named by `mesh_node_state`.
#[test]
fn the_page_lists_a_pending_node_nothing_will_send_under_needs_attention() {
    use crate::status::pending::{Difference, PendingNode};
    let mut snapshot = snapshot();
    let pending = |node: &str, plan: Option<&str>| PendingNode {
        node: node.to_owned(),
        intent: format!("sha256:{}", "1".repeat(64)),
        sent: Some(format!("sha256:{node}")),
        differences: vec![Difference::Settings {
            module: "base".to_owned(),
        }],
        plan: plan.map(str::to_owned),
        command: match plan {
            Some(plan) => format!("{plan}'s rollout sends it"),
            None => format!("push {node}"),
        },
        downgrades: Vec::new(),
    };
    snapshot.overview.pending = vec![pending("b", None), pending("a", Some("plan-2"))];
    let page = page(&snapshot, query(""));
    let section = page
        .split("id=\"attention\"")
        .nth(1)
        .and_then(|rest| rest.split("</section>").next())
        .unwrap_or_else(|| panic!("{page}"));
    assert!(
        section.contains("Pending, and nothing will send them")
            && section.contains("<td>b</td>")
            && section.contains("`base`'s settings changed")
            && section.contains("<code>push b</code>"),
        "{section}"
    );
    assert!(!section.contains("plan-2's rollout"), "{section}");
    let text = metrics(&snapshot);
    assert!(text.contains("\nmesh_nodes_pending 2\n"), "{text}");
    assert!(
        text.contains("mesh_node_state{node=\"b\",state=\"pending\"} 1"),
        "{text}"
    );
}

/// Every metric the shipped alert rules (`contrib/prometheus/mesh-alerts.yml`) key on is one
/// `/metrics` exposes: a rule naming a metric that is not there would never fire.
#[test]
fn the_alert_rules_name_only_metrics_the_page_exposes() {
    let rules = include_str!("../../../../contrib/prometheus/mesh-alerts.yml");
    let exposed = metrics(&snapshot());
    let mut named = std::collections::BTreeSet::new();
    for (at, _) in rules.match_indices("mesh_") {
        let name: String = rules[at..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        named.insert(name);
    }
    assert!(named.contains("mesh_fleet_verdict"), "{named:?}");
    for name in &named {
        assert!(
            exposed.contains(&format!("\n{name}{{")) || exposed.contains(&format!("\n{name} ")),
            "the rules name `{name}`, which /metrics does not expose"
        );
    }
    assert!(
        exposed.contains("\nmesh_fleet_verdict{verdict=\"needs-attention\"} 1\n"),
        "{exposed}"
    );
}
