//! The step function's tests, through its trace harness.

use super::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;

fn spec(nodes: &[(&str, bool)], upgrade: Upgrade) -> RolloutSpec {
    RolloutSpec {
        module: "agent".into(),
        upgrade,
        on_failure: OnFailure::Stop,
        deadline_secs: 600,
        max_parallel: None,
        nodes: nodes
            .iter()
            .map(|(name, running)| {
                (
                    (*name).to_owned(),
                    RolloutNode {
                        running: *running,
                        declaration: format!("sha256:{name}-new"),
                    },
                )
            })
            .collect(),
        bus_first: None,
    }
}

/// Events, one a line: `T start`, `T granted a b`, `T grant-failed a: reason`,
/// `T report a applied|pending|failed:reason|old-applied MADE_AT [SEND]`, `T tick`,
/// `T send-failed a: reason`, `T retry`. Shows each event with the actions it produced, then the
/// record.
///
/// Each send is named as the controller names it ([`RolloutState::name_send`]): the node and
/// how many times it was sent, `a1`, `a2`; a report names one with its `SEND` word, or none.
fn check(spec: &RolloutSpec, events: &str) -> String {
    let mut state = RolloutState::new();
    let mut sends: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = String::new();
    for line in events.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (now, rest) = line.split_once(' ').unwrap();
        let now: u64 = now.parse().unwrap();
        let words: Vec<&str> = rest.split_whitespace().collect();
        let event = match words[0] {
            "start" => Event::Start,
            "tick" => Event::Tick,
            "retry" => Event::Retry,
            "granted" => Event::GrantsIssued {
                nodes: words[1..].iter().map(|w| (*w).to_owned()).collect(),
            },
            "grant-failed" | "send-failed" => {
                let (nodes, reason) = rest.split_once(' ').unwrap().1.split_once(": ").unwrap();
                let nodes: Vec<String> = nodes.split_whitespace().map(str::to_owned).collect();
                if words[0] == "grant-failed" {
                    Event::GrantsFailed {
                        nodes,
                        reason: reason.to_owned(),
                    }
                } else {
                    Event::SendFailed {
                        node: nodes[0].clone(),
                        reason: reason.to_owned(),
                    }
                }
            }
            "report" => {
                let node = words[1].to_owned();
                let made_at = words[3].parse().unwrap();
                let (declaration, verdict) = match words[2] {
                    "applied" => (format!("sha256:{node}-new"), Verdict::Applied),
                    "old-applied" => (format!("sha256:{node}-old"), Verdict::Applied),
                    "pending" => (format!("sha256:{node}-new"), Verdict::Pending),
                    failed => (
                        format!("sha256:{node}-new"),
                        Verdict::Failed {
                            reasons: vec![failed.trim_start_matches("failed:").replace('_', " ")],
                        },
                    ),
                };
                Event::Report(NodeReport {
                    node,
                    declaration,
                    made_at,
                    send: words.get(4).map(|send| (*send).to_owned()),
                    verdict,
                })
            }
            "unreadable" => Event::Unreadable {
                node: words[1].to_owned(),
                reason: words[2..].join(" "),
            },
            other => panic!("unknown event {other}"),
        };
        let actions = step(spec, &mut state, event, now);
        for action in &actions {
            if let Action::Send { node, .. } | Action::SendBusNode { node } = action {
                let count = sends.entry(node.clone()).or_default();
                *count += 1;
                state.name_send(node, &format!("{node}{count}"));
            }
        }
        let _ = writeln!(out, "{line}");
        for action in actions {
            let _ = writeln!(out, "    {}", serde_json::to_string(&action).unwrap());
        }
    }
    let _ = writeln!(
        out,
        "record: {}",
        serde_json::to_string(&state.record(None)).unwrap()
    );
    out
}

#[test]
fn one_node_first_then_the_rest_after_its_applied_and_current_report() {
    let spec = spec(
        &[("c", true), ("a", true), ("b", true), ("d", false)],
        Upgrade::OneFirst,
    );
    insta::assert_snapshot!(check(
        &spec,
        "100 start
         101 granted a
         150 report a pending 150
         160 report a applied 160
         161 granted b c
         170 report b applied 170
         171 report c applied 171"
    ));
}

#[test]
fn a_failed_first_node_stops_the_module_naming_node_and_reason() {
    let spec = spec(&[("a", true), ("b", true)], Upgrade::OneFirst);
    insta::assert_snapshot!(check(
        &spec,
        "100 start
         101 granted a
         130 report a failed:agent/container/agent:_image_not_found 130
         140 report b applied 140"
    ));
}

#[test]
fn an_unreadable_report_of_a_node_sent_stops_the_module_at_once_naming_it() {
    let spec = spec(&[("a", true), ("b", true)], Upgrade::OneFirst);
    insta::assert_snapshot!(check(
        &spec,
        "100 start
         101 unreadable a before_its_send:_nothing_to_judge
         101 granted a
         102 unreadable a unreadable_report:_not_a_report
         140 report b applied 140"
    ));
}

#[test]
fn a_first_node_that_does_not_report_in_time_stops_and_reverts_when_asked() {
    let mut spec = spec(&[("a", true), ("b", true)], Upgrade::OneFirst);
    spec.on_failure = OnFailure::Revert;
    spec.deadline_secs = 60;
    insta::assert_snapshot!(check(
        &spec,
        "100 start
         101 granted a
         150 tick
         161 tick"
    ));
}

/// `on-failure = "revert"` sends back the node that failed whichever it was: a node after the
/// first one (`max-parallel = 1`) too, never left on the build that failed it.
#[test]
fn a_node_after_the_first_that_fails_is_sent_back_when_asked() {
    let mut spec = spec(&[("a", true), ("b", true), ("c", true)], Upgrade::OneFirst);
    spec.on_failure = OnFailure::Revert;
    spec.max_parallel = Some(1);
    insta::assert_snapshot!(check(
        &spec,
        "100 start
         101 granted a
         110 report a applied 110
         111 granted b
         120 report b failed:web/container/web:_port_8080_in_use 120"
    ));
}

/// `plans retry`: a rollout stopped at a node after the first (`max-parallel = 1`), its cause
/// fixed, begins that node again — its grants first, judged by its new send — and goes on to
/// the rest; the first node, applied, is not sent again. A retry of a rollout not stopped
/// does nothing.
#[test]
fn a_stopped_rollout_retried_begins_the_node_it_stopped_at_again_and_goes_on() {
    let mut spec = spec(&[("a", true), ("b", true), ("c", true)], Upgrade::OneFirst);
    spec.max_parallel = Some(1);
    insta::assert_snapshot!(check(
        &spec,
        "100 start
         101 granted a
         110 report a applied 110
         111 granted b
         120 report b failed:web/container/web:_port_8080_in_use 120 b1
         200 retry
         201 report b failed:web/container/web:_port_8080_in_use 120 b1
         202 granted b
         210 report b applied 210 b2
         211 granted c
         220 report c applied 220
         221 retry"
    ));
}

/// A first node that failed, retried, goes first again: no other node is sent before it
/// applies.
#[test]
fn a_first_node_that_failed_retried_goes_first_again() {
    let spec = spec(&[("a", true), ("b", true)], Upgrade::OneFirst);
    insta::assert_snapshot!(check(
        &spec,
        "100 start
         101 granted a
         110 report a failed:web/container/web:_port_8080_in_use 110 a1
         200 retry
         201 granted a
         210 report a applied 210 a2
         211 granted b
         220 report b applied 220"
    ));
}

#[test]
fn together_sends_every_running_node_at_once() {
    let spec = spec(&[("a", true), ("b", true), ("c", true)], Upgrade::Together);
    insta::assert_snapshot!(check(
        &spec,
        "100 start
         101 granted a b c
         110 report b applied 110
         111 report a applied 111
         112 report c applied 112"
    ));
}

/// The incident behind “The gate judges each node from its own send”: the gate asked every node for
/// a report made after the module's *last* send; the first node's report, made between the two
/// sends, read as stale and the plan waited seven minutes. Each node is judged from its own send —
/// and a report of an earlier send of the same declaration (`a0`), or about an older
/// declaration, does not open the gate.
#[test]
fn a_first_nodes_report_between_the_two_sends_opens_the_gate() {
    let spec = spec(&[("a", true), ("b", true)], Upgrade::OneFirst);
    insta::assert_snapshot!(check(
        &spec,
        "100 start
         101 granted a
         102 report a applied 95 a0
         103 report a old-applied 103 a1
         127 report a applied 127 a1
         128 granted b
         140 report b applied 140 b1
         141 report a applied 127 a1"
    ));
}

/// A host whose clock is an hour behind the controller's applied each declaration, and every
/// rollout stopped at it: the gate compared the host's finish time with the controller's send
/// time. The send a report names decides, whatever either clock says — and a report of an
/// earlier send made, by the host's clock, after this one still does not open the gate.
#[test]
fn a_host_whose_clock_is_an_hour_behind_opens_the_gate_by_its_send() {
    let spec = spec(&[("a", true), ("b", true)], Upgrade::OneFirst);
    insta::assert_snapshot!(check(
        &spec,
        "10000 start
         10001 granted a
         10002 report a applied 10500 a0
         10003 report a applied 6403 a1
         10004 granted b
         10005 report b applied 6405 b1"
    ));
}

/// A report naming no send (a host older than send ids) is judged as before them: by when it
/// was made against the node's send — one from before the send does not open the gate.
#[test]
fn a_report_naming_no_send_is_judged_by_when_it_was_made() {
    let spec = spec(&[("a", true), ("b", true)], Upgrade::OneFirst);
    insta::assert_snapshot!(check(
        &spec,
        "100 start
         101 granted a
         102 report a applied 95
         103 report a applied 103
         104 granted b"
    ));
}

#[test]
fn grants_come_before_declarations_and_a_failed_grant_fails_the_send() {
    let spec = spec(&[("a", true), ("b", true)], Upgrade::OneFirst);
    insta::assert_snapshot!(check(
        &spec,
        "100 start
         101 grant-failed a: bucket agent-state refused
         105 tick
         111 tick
         112 granted a
         120 report a applied 120
         121 granted b
         130 report b applied 130"
    ));
}

#[test]
fn grants_that_keep_failing_stop_the_rollout_at_the_deadline() {
    let mut spec = spec(&[("a", true)], Upgrade::OneFirst);
    spec.deadline_secs = 30;
    insta::assert_snapshot!(check(
        &spec,
        "100 start
         101 grant-failed a: no such account
         111 tick
         112 grant-failed a: no such account
         131 tick"
    ));
}

/// The rule “Grants before code”: when the list of bus users changes, the node holding the
/// bus is sent first — before the module's first node when it does not run the module.
#[test]
fn the_bus_node_goes_first_when_the_bus_users_change() {
    let mut not_running_it = spec(&[("a", true), ("b", true)], Upgrade::OneFirst);
    not_running_it.bus_first = Some(BusFirst {
        node: "control".into(),
        declaration: "sha256:control-new".into(),
    });
    insta::assert_snapshot!(
        "bus_node_without_the_module",
        check(
            &not_running_it,
            "100 start
             101 granted control
             110 report control applied 110
             111 granted a
             120 report a applied 120
             121 granted b
             130 report b applied 130"
        )
    );
    let mut running_it = spec(&[("a", true), ("control", true)], Upgrade::OneFirst);
    running_it.bus_first = Some(BusFirst {
        node: "control".into(),
        declaration: "sha256:control-new".into(),
    });
    insta::assert_snapshot!(
        "bus_node_running_the_module",
        check(
            &running_it,
            "100 start
             101 granted control
             110 report control applied 110
             111 granted a
             120 report a applied 120"
        )
    );
}

#[test]
fn max_parallel_limits_the_rest_in_flight() {
    let mut spec = spec(
        &[
            ("a", true),
            ("b", true),
            ("c", true),
            ("d", true),
            ("e", true),
        ],
        Upgrade::OneFirst,
    );
    spec.max_parallel = Some(2);
    insta::assert_snapshot!(check(
        &spec,
        "100 start
         101 granted a
         110 report a applied 110
         111 granted b c
         120 report c applied 120
         121 granted d
         122 report b applied 122
         123 granted e
         130 report d applied 130
         131 report e applied 131"
    ));
}

#[test]
fn no_running_node_stops_and_no_node_is_done() {
    insta::assert_snapshot!(check(
        &spec(&[("a", false)], Upgrade::OneFirst),
        "100 start"
    ));
    insta::assert_snapshot!(
        "no_nodes",
        check(&spec(&[], Upgrade::OneFirst), "100 start")
    );
}

fn applied(node: &str, made_at: u64) -> Event {
    Event::Report(NodeReport {
        node: node.into(),
        declaration: format!("sha256:{node}-new"),
        made_at,
        send: None,
        verdict: Verdict::Applied,
    })
}

fn granted(nodes: &[&str]) -> Event {
    Event::GrantsIssued {
        nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
    }
}

/// A controller stopped mid-rollout reads the state back from its record and carries on
/// through the one resume path: grants asked again, sent nodes heard from their reports.
#[test]
fn a_restarted_controller_resumes_where_the_record_says() {
    let spec = spec(&[("a", true), ("b", true), ("c", true)], Upgrade::OneFirst);
    let mut state = RolloutState::new();
    step(&spec, &mut state, Event::Start, 100);
    // Stopped with a's grants asked and not answered: they are asked again.
    let read_back = |state: &RolloutState| -> RolloutState {
        serde_json::from_str(&serde_json::to_string(state).unwrap()).unwrap()
    };
    let resumed = read_back(&state);
    assert_eq!(
        resumed.to_resume(),
        Resume {
            grants: vec!["a".into()],
            sent: vec![]
        }
    );
    step(&spec, &mut state, granted(&["a"]), 101);
    let mut resumed = read_back(&state);
    assert_eq!(
        resumed.to_resume(),
        Resume {
            grants: vec![],
            sent: vec!["a".into()]
        }
    );
    // A report made before the restart, after a's own send, opens the gate.
    let actions = step(&spec, &mut resumed, applied("a", 150), 201);
    assert_eq!(
        actions,
        [Action::IssueGrants {
            nodes: vec!["b".into(), "c".into()]
        }]
    );
    step(&spec, &mut resumed, granted(&["b"]), 202);
    let mut again = read_back(&resumed);
    assert_eq!(
        again.to_resume(),
        Resume {
            grants: vec!["c".into()],
            sent: vec!["b".into()]
        }
    );
    step(&spec, &mut again, granted(&["c"]), 301);
    step(&spec, &mut again, applied("b", 310), 310);
    assert_eq!(
        step(&spec, &mut again, applied("c", 311), 311),
        [Action::Done {
            module: "agent".into()
        }]
    );
}

/// A rollout is kept as its parts and one record per node; read back, it is the
/// same state, and only the nodes an event changed are to be written again.
#[test]
fn a_rollout_kept_as_parts_and_nodes_reads_back_whole_and_says_what_changed() {
    let spec = spec(
        &[("a", true), ("b", true), ("c", true), ("d", true)],
        Upgrade::OneFirst,
    );
    let mut state = RolloutState::new();
    step(&spec, &mut state, Event::Start, 100);
    assert_eq!(state.nodes.take_changed(), ["a", "b", "c", "d"], "all new");
    step(&spec, &mut state, granted(&["a"]), 101);
    assert_eq!(state.nodes.take_changed(), ["a"]);
    // A report about another declaration changes nothing: nothing to write.
    let stale = Event::Report(NodeReport {
        node: "a".into(),
        declaration: "sha256:old".into(),
        made_at: 102,
        send: None,
        verdict: Verdict::Applied,
    });
    step(&spec, &mut state, stale, 102);
    assert!(state.nodes.take_changed().is_empty());
    step(&spec, &mut state, applied("a", 103), 103);
    assert_eq!(state.nodes.take_changed(), ["a", "b", "c", "d"]);
    let mut nodes: Vec<(String, NodeProgress)> = state
        .nodes
        .iter()
        .map(|(n, p)| (n.clone(), p.clone()))
        .collect();
    nodes.reverse();
    let again = RolloutState::assemble(state.parts(), nodes);
    assert_eq!(again, state);
    assert_eq!(again.queue, state.queue);
}

fn a_move(node: &str) -> Vec<Move> {
    vec![Move {
        module: "agent".into(),
        container: "agent/container/db".into(),
        at: "/data".into(),
        from: format!("/srv/{node}/old"),
        to: format!("/srv/{node}/new"),
    }]
}

/// The rule “A moved mount is held” on the rollout path: a first node whose data would move is
/// held, the next node goes first, the others go on; the rollout then waits, open, until a person's
/// `--move` releases the held node, which is then sent and judged like any other.
#[test]
fn a_held_first_node_passes_the_gate_to_the_next_and_waits_for_release() {
    let spec = spec(&[("a", true), ("b", true), ("c", true)], Upgrade::OneFirst);
    let mut state = RolloutState::new();
    step(&spec, &mut state, Event::Start, 100);
    assert_eq!(
        step(&spec, &mut state, granted(&["a"]), 101),
        [Action::Send {
            node: "a".into(),
            module: "agent".into()
        }]
    );
    let held = Event::Held {
        node: "a".into(),
        moves: a_move("a"),
        orphans: Vec::new(),
        unset: Vec::new(),
    };
    assert_eq!(
        step(&spec, &mut state, held, 102),
        [Action::IssueGrants {
            nodes: vec!["b".into()]
        }]
    );
    assert_eq!(state.first.as_deref(), Some("b"));
    step(&spec, &mut state, granted(&["b"]), 103);
    assert_eq!(
        step(&spec, &mut state, applied("b", 104), 104),
        [Action::IssueGrants {
            nodes: vec!["c".into()]
        }]
    );
    step(&spec, &mut state, granted(&["c"]), 105);
    assert_eq!(
        step(&spec, &mut state, applied("c", 106), 106),
        [Action::Held {
            module: "agent".into(),
            nodes: 1
        }]
    );
    assert_eq!(state.stage, Stage::Held);
    assert_eq!(state.outcome, None, "a held rollout is not over");
    assert!(step(&spec, &mut state, Event::Tick, 5000).is_empty());
    assert_eq!(
        step(&spec, &mut state, Event::Release, 200),
        [Action::IssueGrants {
            nodes: vec!["a".into()]
        }]
    );
    step(&spec, &mut state, granted(&["a"]), 201);
    assert_eq!(
        step(&spec, &mut state, applied("a", 202), 202),
        [Action::Done {
            module: "agent".into()
        }]
    );
}

/// With every node held, nothing is sent and the rollout waits; released, the first of them
/// goes first.
#[test]
fn every_node_held_sends_nothing_until_released_then_one_goes_first() {
    let spec = spec(&[("a", true), ("b", true)], Upgrade::OneFirst);
    let mut state = RolloutState::new();
    step(&spec, &mut state, Event::Start, 100);
    step(&spec, &mut state, granted(&["a"]), 101);
    let hold = |node: &str| Event::Held {
        node: node.into(),
        moves: a_move(node),
        orphans: Vec::new(),
        unset: Vec::new(),
    };
    step(&spec, &mut state, hold("a"), 102);
    step(&spec, &mut state, granted(&["b"]), 103);
    assert_eq!(
        step(&spec, &mut state, hold("b"), 104),
        [Action::Held {
            module: "agent".into(),
            nodes: 2
        }]
    );
    assert_eq!(
        step(&spec, &mut state, Event::Release, 200),
        [Action::IssueGrants {
            nodes: vec!["a".into()]
        }]
    );
    assert_eq!(state.stage, Stage::FirstNode);
}

#[test]
fn a_report_is_read_from_a_hosts_report() {
    let report: Report = serde_json::from_value(serde_json::json!({
        "format": 1, "node": "a", "declaration": "sha256:x", "machine": "partial",
        "resources": {
            "agent/file/config": {"outcome": "applied", "changed": ["content"]},
            "agent/container/agent": {"outcome": "failed", "reason": "image not found", "attempts": 1, "since": 5}
        },
        "started-at": 5, "finished-at": 9
    }))
    .unwrap();
    assert_eq!(
        NodeReport::from_report(&report),
        NodeReport {
            node: "a".into(),
            declaration: "sha256:x".into(),
            made_at: 9,
            send: None,
            verdict: Verdict::Failed {
                reasons: vec!["agent/container/agent: image not found".into()]
            },
        }
    );
}

/// A report can change the rollout only while its node is sent and has not answered: before
/// its send, and once it applied, its reports (a heartbeat) are passed over.
#[test]
fn only_a_node_sent_and_not_yet_answered_awaits_a_report() {
    let spec = spec(&[("a", true), ("b", true), ("d", false)], Upgrade::OneFirst);
    let mut state = RolloutState::new();
    step(&spec, &mut state, Event::Start, 100);
    let awaited = |state: &RolloutState| -> Vec<&str> {
        ["a", "b", "d", "elsewhere"]
            .into_iter()
            .filter(|node| state.awaits_report(node))
            .collect()
    };
    assert_eq!(awaited(&state), Vec::<&str>::new(), "nothing sent yet");
    step(&spec, &mut state, granted(&["a"]), 101);
    assert_eq!(awaited(&state), ["a"], "the first node, sent");
    step(&spec, &mut state, applied("a", 110), 110);
    step(&spec, &mut state, granted(&["b"]), 111);
    assert_eq!(awaited(&state), ["b"], "a answered; b sent");
    step(&spec, &mut state, applied("b", 120), 120);
    assert_eq!(awaited(&state), Vec::<&str>::new(), "every node answered");
}

/// A node's progress recorded before send ids (no `send`) reads back, judged by when its report
/// was made; one naming its send keeps it, and a record of either format reads as written.
#[test]
fn a_sent_nodes_record_from_before_send_ids_reads_back_without_one() {
    let old: NodeProgress = serde_json::from_str(r#"{"progress":"sent","at":5}"#).unwrap();
    assert_eq!(old, NodeProgress::Sent { at: 5, send: None });
    assert_eq!(
        serde_json::to_string(&old).unwrap(),
        r#"{"progress":"sent","at":5}"#
    );
    let named = NodeProgress::Sent {
        at: 5,
        send: Some("a:sha256:x:0123".into()),
    };
    let text = serde_json::to_string(&named).unwrap();
    assert_eq!(
        text,
        r#"{"progress":"sent","at":5,"send":"a:sha256:x:0123"}"#
    );
    assert_eq!(serde_json::from_str::<NodeProgress>(&text).unwrap(), named);
}
