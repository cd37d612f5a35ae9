//! `status`'s exit codes, one test per row of the book's table (the user guide's "Drift and
//! health"): the overview read from a real home's records (inventory, what each node was sent,
//! its last report, problems, acknowledgements) and judged at an injected `now`.

use mesh_controller::status;
use mesh_controller::Home;

use mesh_controller::status::Health;
use mesh_controller::status::HeldNode;
use mesh_controller::status::OpenPlan;
use mesh_controller::status::StatusOptions;
use mesh_controller::status::StoppedRollout;
use mesh_model::declaration::Declaration;
use mesh_model::inventory::{InventoryFile, Node};
use mesh_model::report::Report;
use serde_json::json;

/// The time every test judges at.
const NOW: u64 = 2_000_000_000;

/// A home with nodes `a` and `b`, both sent an empty declaration; `b` reports it converged.
struct Bed {
    _dir: tempfile::TempDir,
    home: Home,
}

impl Bed {
    fn new() -> Bed {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        home.write_inventory(&InventoryFile {
            bus_node: "a".into(),
            nodes: [("a".into(), Node::default()), ("b".into(), Node::default())].into(),
            assignments: Default::default(),
            ..InventoryFile::default()
        })
        .unwrap();
        for node in ["a", "b"] {
            home.sent()
                .record(&Declaration::new(node, Vec::new()))
                .unwrap();
        }
        let bed = Bed { _dir: dir, home };
        bed.report("b", json!({"machine": "converged"}));
        bed
    }

    /// Records `node`'s report: `fields` over a converged report of what it was sent, started
    /// and finished a minute before [`NOW`].
    fn report(&self, node: &str, fields: serde_json::Value) {
        let mut report = json!({
            "format": 2, "node": node, "machine": "converged",
            "declaration": Declaration::new(node, Vec::new()).digest(),
            "resources": {}, "started-at": NOW - 60, "finished-at": NOW - 60
        });
        for (key, value) in fields.as_object().unwrap() {
            report[key] = value.clone();
        }
        let report: Report = serde_json::from_value(report).unwrap();
        self.home.reports().record(&report).unwrap();
    }

    fn overview(&self, options: &StatusOptions) -> status::Overview {
        status::overview_with(&self.home, NOW, options).unwrap()
    }

    /// The verdict at [`NOW`], default options.
    fn judged(&self) -> status::Verdict {
        status::judge(
            &self.overview(&StatusOptions::default()),
            NOW,
            status::DEFAULT_MID_CHANGE_AFTER_SECS,
        )
    }
}

fn failed(reason: &str) -> serde_json::Value {
    json!({"outcome": "failed", "reason": reason, "attempts": 1, "since": NOW - 60})
}

/// A drift of `web/file/conf` seen `ago` seconds before [`NOW`], put back or left.
fn drift(ago: u64, action: &str) -> serde_json::Value {
    json!([{
        "resource": "web/file/conf", "field": "content", "was": "sha256:aa",
        "found": "sha256:bb", "seen-at": NOW - ago, "action": action
    }])
}

#[track_caller]
/// The words of each reason, as `status` prints them.
fn messages(reasons: &[status::Reason]) -> Vec<&str> {
    reasons.iter().map(|r| r.message.as_str()).collect()
}

fn assert_health(verdict: &status::Verdict, health: Health, code: u8) {
    assert_eq!(verdict.health, health, "{verdict:#?}");
    assert_eq!(verdict.health.exit_code(), code);
}

#[test]
fn every_node_converged_and_current_with_nothing_pending_exits_0() {
    let bed = Bed::new();
    bed.report(
        "a",
        json!({"resources": {"web/file/conf": {"outcome": "unchanged"}}}),
    );
    let verdict = bed.judged();
    assert_health(&verdict, Health::Settled, 0);
    assert!(verdict.attention.is_empty() && verdict.in_progress.is_empty());
}

#[test]
fn a_node_yet_to_report_what_it_was_sent_is_in_progress_2() {
    let bed = Bed::new();
    assert_health(&bed.judged(), Health::InProgress, 4);
    bed.report("a", json!({"declaration": "sha256:an-older-one"}));
    let verdict = bed.judged();
    assert_health(&verdict, Health::InProgress, 4);
    assert_eq!(
        messages(&verdict.in_progress),
        ["a: has not reported the declaration last sent"]
    );
}

#[test]
fn a_node_mid_change_within_its_deadline_is_in_progress_2_and_past_it_exits_3() {
    let bed = Bed::new();
    bed.report(
        "a",
        json!({"machine": "mid-change", "started-at": NOW - 600}),
    );
    assert_health(&bed.judged(), Health::InProgress, 4);
    bed.report(
        "a",
        json!({"machine": "mid-change", "started-at": NOW - 601}),
    );
    let verdict = bed.judged();
    assert_health(&verdict, Health::NeedsAttention, 3);
    assert!(
        verdict.attention[0].message.contains("past its deadline"),
        "{verdict:#?}"
    );
}

#[test]
fn an_open_plan_is_in_progress_2() {
    let bed = Bed::new();
    bed.report("a", json!({}));
    let mut overview = bed.overview(&StatusOptions::default());
    overview.open_plans.push(OpenPlan {
        id: "plan-2".into(),
        repository: "cat".into(),
        branch: "main".into(),
        commit: "0123".into(),
        state: "rolling-out",
        waits_on: "`a` to report `web` applied".into(),
        since: NOW - 5,
        waiting_secs: 5,
    });
    assert_health(
        &status::judge(&overview, NOW, status::DEFAULT_MID_CHANGE_AFTER_SECS),
        Health::InProgress,
        4,
    );
}

#[test]
fn a_failed_resource_exits_3_though_the_rest_converged() {
    // Found on main: `status` exited 0 while a node was partial with a failed container.
    let bed = Bed::new();
    bed.report(
        "a",
        json!({"machine": "partial", "resources": {
            "web/container/web": failed("port 8096 is taken"),
            "web/file/conf": {"outcome": "unchanged"}
        }}),
    );
    let verdict = bed.judged();
    assert_health(&verdict, Health::NeedsAttention, 3);
    assert_eq!(
        messages(&verdict.attention),
        ["a: web/container/web failed: port 8096 is taken"]
    );
}

/// Issue 41: a host whose state directory was full refused the apply and reported `partial,
/// nothing declared`; `status` exited 0, nothing under "needs attention".
#[test]
fn a_host_that_cannot_write_its_state_exits_3_naming_the_node_and_the_reason() {
    let bed = Bed::new();
    bed.report(
        "a",
        json!({"machine": "partial", "host-failure":
            "cannot store the declaration received at /s/serve/declaration.json: \
             no space left on device (os error 28)",
            "findings": [{"resource": "", "message": "the host cannot apply: …"}]}),
    );
    let verdict = bed.judged();
    assert_health(&verdict, Health::NeedsAttention, 3);
    assert_eq!(
        messages(&verdict.attention),
        [
            "a: the host cannot apply: cannot store the declaration received at \
          /s/serve/declaration.json: no space left on device (os error 28)"
        ]
    );
}

#[test]
fn a_resource_waiting_to_retry_or_skipped_behind_a_failure_exits_3() {
    let bed = Bed::new();
    bed.report(
        "a",
        json!({"machine": "partial", "resources": {
            "web/file/conf": {"outcome": "waiting", "last-reason": "disk full", "attempts": 2,
                              "retry-at": NOW + 30},
            "web/container/web": {"outcome": "skipped", "gated-by": "web/file/conf"}
        }}),
    );
    let verdict = bed.judged();
    assert_health(&verdict, Health::NeedsAttention, 3);
    assert_eq!(verdict.attention.len(), 2, "{verdict:#?}");
}

#[test]
fn a_stuck_resource_exits_3() {
    let bed = Bed::new();
    bed.report(
        "a",
        json!({"machine": "partial", "resources": {"web/file/conf": {
            "outcome": "stuck", "attempts": 9, "since": NOW - 900, "last-reason": "disk full"
        }}}),
    );
    assert_health(&bed.judged(), Health::NeedsAttention, 3);
}

/// The nightly backup's window is routine work, never a page: open within its lapse it is in
/// progress (exit 4), named with its step and the process holding it; past its lapse it needs
/// a person (exit 3).
#[test]
fn a_window_open_within_its_lapse_is_in_progress_and_past_it_needs_attention() {
    let bed = Bed::new();
    let window = |opened: u64| {
        json!({"machine": "partial",
               "resources": {"db/container/db": {"outcome": "held-still", "step": "backup"}},
               "windows": [{"step": "backup", "containers": ["db/container/db"],
                            "opened-at": opened, "holder": 4242}]})
    };
    bed.report("a", window(NOW - 10));
    let verdict = bed.judged();
    assert_health(&verdict, Health::InProgress, 4);
    let reason = &verdict.in_progress[0];
    assert_eq!(
        (reason.node.as_deref(), reason.kind),
        (Some("a"), status::ReasonKind::Window)
    );
    assert!(
        reason.message.contains("window `backup` open since")
            && reason.message.contains("held by pid 4242"),
        "{reason:?}"
    );

    bed.report("a", window(NOW - 7 * 60 * 60));
    let verdict = bed.judged();
    assert_health(&verdict, Health::NeedsAttention, 3);
    assert_eq!(verdict.attention[0].kind, status::ReasonKind::WindowLapsed);
    assert!(
        verdict.attention[0].message.contains("past its lapse"),
        "{verdict:#?}"
    );
}

#[test]
fn a_node_held_for_a_move_exits_3() {
    let bed = Bed::new();
    bed.report("a", json!({}));
    let mut overview = bed.overview(&StatusOptions::default());
    overview.held.push(HeldNode {
        plan: "plan-2".into(),
        module: "media".into(),
        node: "a".into(),
        moves: Vec::new(),
        orphans: Vec::new(),
        unset: Vec::new(),
    });
    assert_health(
        &status::judge(&overview, NOW, status::DEFAULT_MID_CHANGE_AFTER_SECS),
        Health::NeedsAttention,
        3,
    );
}

#[test]
fn a_stopped_rollout_exits_3() {
    let bed = Bed::new();
    bed.report("a", json!({}));
    let mut overview = bed.overview(&StatusOptions::default());
    overview.stopped.push(StoppedRollout {
        plan: "plan-2".into(),
        module: "web".into(),
        node: "a".into(),
        reason: "web/container/web failed".into(),
        reverted: None,
    });
    assert_health(
        &status::judge(&overview, NOW, status::DEFAULT_MID_CHANGE_AFTER_SECS),
        Health::NeedsAttention,
        3,
    );
}

#[test]
fn a_failure_recorded_exits_3() {
    let bed = Bed::new();
    bed.report("a", json!({}));
    bed.home
        .problems()
        .record(
            mesh_store::problems::ProblemKind::Grants,
            "a",
            "grants failed",
            Vec::new(),
            NOW - 5,
        )
        .unwrap();
    assert_health(&bed.judged(), Health::NeedsAttention, 3);
}

#[test]
fn drift_left_as_found_exits_3_for_as_long_as_it_is_reported() {
    let bed = Bed::new();
    bed.report(
        "a",
        json!({"machine": "partial", "drift": drift(86_400, "left")}),
    );
    let verdict = bed.judged();
    assert_health(&verdict, Health::NeedsAttention, 3);
    assert!(
        verdict.attention[0].message.contains("left as found"),
        "{verdict:#?}"
    );
}

#[test]
fn drift_put_back_is_shown_and_exits_3_for_its_retention_then_ages_out() {
    let bed = Bed::new();
    let hour = status::DEFAULT_DRIFT_RETENTION_SECS;
    bed.report("a", json!({"drift": drift(hour - 1, "corrected")}));
    let verdict = bed.judged();
    assert_health(&verdict, Health::NeedsAttention, 3);
    assert!(
        verdict.attention[0]
            .message
            .starts_with("a: drift of web/file/conf content seen ")
            && verdict.attention[0].message.ends_with("(put back)"),
        "{verdict:#?}"
    );
    let shown = bed.overview(&StatusOptions::default());
    assert_eq!(
        shown.attention[0].drift[0].found, "sha256:bb",
        "what it was, kept"
    );

    bed.report("a", json!({"drift": drift(hour, "corrected")}));
    assert_health(&bed.judged(), Health::Settled, 0);

    // The retention is the caller's to choose.
    let longer = StatusOptions {
        drift_retention_secs: 2 * hour,
        ..StatusOptions::default()
    };
    assert_eq!(bed.overview(&longer).attention.len(), 1);
}

#[test]
fn status_ack_clears_drift_put_back_sooner_and_drift_seen_later_shows_again() {
    let bed = Bed::new();
    bed.report("a", json!({"drift": drift(60, "corrected")}));
    assert_health(&bed.judged(), Health::NeedsAttention, 3);

    // Naming a resource with no drift is refused, and writes nothing.
    let refused = status::ack(&bed.home, "a", Some("web/file/other"), NOW - 30).unwrap_err();
    assert!(refused.to_string().contains("web/file/other"), "{refused}");
    assert_health(&bed.judged(), Health::NeedsAttention, 3);

    let acked = status::ack(&bed.home, "a", Some("web/file/conf"), NOW - 30).unwrap();
    assert_eq!(acked.cleared.len(), 1);
    assert_health(&bed.judged(), Health::Settled, 0);

    // Seen again after the acknowledgement: shown again.
    bed.report("a", json!({"drift": drift(10, "corrected")}));
    assert_health(&bed.judged(), Health::NeedsAttention, 3);
    status::ack(&bed.home, "a", None, NOW - 5).unwrap();
    assert_health(&bed.judged(), Health::Settled, 0);

    // Drift left as found is not the acknowledgement's to clear: the resource is not as
    // declared.
    bed.report(
        "a",
        json!({"machine": "partial", "drift": drift(60, "left")}),
    );
    assert_health(&bed.judged(), Health::NeedsAttention, 3);
}

#[test]
fn a_silent_node_exits_3() {
    // Silence is judged from when a node was last heard, which only a fleet's bus records;
    // the overview says so by `silent_since`.
    let bed = Bed::new();
    bed.report("a", json!({}));
    let mut overview = bed.overview(&StatusOptions::default());
    overview.nodes[0].silent_since = Some(NOW - 300);
    overview.attention = status::attention(&overview.nodes);
    let verdict = status::judge(&overview, NOW, status::DEFAULT_MID_CHANGE_AFTER_SECS);
    assert_health(&verdict, Health::NeedsAttention, 3);
    assert!(
        verdict.attention[0].message.starts_with("a: silent since "),
        "{verdict:#?}"
    );
}
