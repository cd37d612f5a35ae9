//! The wave rollout's tests, through a trace harness: events in, actions out, as text.

use super::*;
use crate::waves::{default_budget, ChosenBy, Wave};
use mesh_model::waves::{Share, Window};
use std::fmt::Write as _;

/// A plan of waves, each `name: node node …` with an optional `then approve|15m`.
fn spec(waves: &[&str], budget: Option<(u32, u32)>, max_parallel: Option<u32>) -> WaveSpec {
    spec_with(waves, budget, max_parallel, &[])
}

fn spec_with(
    waves: &[&str],
    budget: Option<(u32, u32)>,
    max_parallel: Option<u32>,
    windows: &[Window],
) -> WaveSpec {
    let waves = waves
        .iter()
        .map(|text| {
            let (text, pause) = match text.split_once(" then ") {
                Some((text, "approve")) => (text, Some(Pause::Approve)),
                Some((text, secs)) => (
                    text,
                    Some(Pause::For {
                        secs: secs.parse().unwrap(),
                    }),
                ),
                None => (*text, None),
            };
            let (name, nodes) = text.split_once(':').unwrap();
            Wave {
                name: name.to_owned(),
                chosen_by: ChosenBy::Rest,
                nodes: nodes.split_whitespace().map(str::to_owned).collect(),
                pause,
            }
        })
        .collect();
    let db = jiff::tz::TimeZoneDatabase::bundled();
    WaveSpec {
        plan: WavePlan {
            module: "web".into(),
            waves,
            budget: budget.map_or_else(default_budget, |(basis_points, min)| Budget {
                failed: Share { basis_points },
                min,
            }),
            max_parallel,
            windows: windows.to_vec(),
            declared: true,
        },
        deadline_secs: 600,
        windows: super::super::windows::zone_windows(windows, |name| {
            db.get(name).map_err(|e| e.to_string())
        })
        .unwrap(),
    }
}

/// Events, one a line: `T start`, `T sent a [SEND]` (this plan's digest `new`),
/// `T send-failed a: reason`, `T report a applied|pending|failed:reason|old-applied [SEND]`,
/// `T tick`, `T approve WHO`, `T pause WHO: why`, `T resume WHO`, `T abort WHO: why`. Shows each
/// event with the actions it produced, then where the rollout stands and each node.
fn check(spec: &WaveSpec, events: &str) -> String {
    let mut state = WaveState::new(&spec.plan);
    let mut out = String::new();
    for line in events.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (now, rest) = line.split_once(' ').unwrap();
        let now: u64 = now.parse().unwrap();
        let words: Vec<&str> = rest.split_whitespace().collect();
        let after_colon = || rest.split_once(": ").unwrap().1.to_owned();
        let who = || words[1].trim_end_matches(':').to_owned();
        let event = match words[0] {
            "start" => WaveEvent::Start,
            "tick" => WaveEvent::Tick,
            "sent" => WaveEvent::Sent {
                node: words[1].to_owned(),
                declaration: "sha256:new".into(),
                send: words.get(2).map(|s| (*s).to_owned()),
            },
            "send-failed" => WaveEvent::SendFailed {
                node: who(),
                reason: after_colon(),
            },
            "report" => {
                let (declaration, verdict) = match words[2] {
                    "applied" => ("sha256:new", Verdict::Applied),
                    "old-applied" => ("sha256:old", Verdict::Applied),
                    "pending" => ("sha256:new", Verdict::Pending),
                    failed => (
                        "sha256:new",
                        Verdict::Failed {
                            reasons: vec![failed.trim_start_matches("failed:").replace('_', " ")],
                        },
                    ),
                };
                WaveEvent::Report {
                    node: words[1].to_owned(),
                    declaration: declaration.into(),
                    send: words.get(3).map(|s| (*s).to_owned()),
                    verdict,
                }
            }
            "approve" => WaveEvent::Approve { actor: who() },
            "pause" => WaveEvent::Pause {
                actor: who(),
                reason: after_colon(),
            },
            "resume" => WaveEvent::Resume { actor: who() },
            "abort" => WaveEvent::Abort {
                actor: who(),
                reason: after_colon(),
            },
            other => panic!("unknown event {other}"),
        };
        writeln!(out, "{line}").unwrap();
        for action in step(spec, &mut state, event, now) {
            writeln!(out, "    {}", serde_json::to_string(&action).unwrap()).unwrap();
        }
    }
    writeln!(
        out,
        "stage: {}",
        serde_json::to_string(&state.stage).unwrap()
    )
    .unwrap();
    for (node, progress) in &state.nodes {
        writeln!(out, "{node}: {}", serde_json::to_string(progress).unwrap()).unwrap();
    }
    out
}

/// The nodes named by `send` actions, in order, from a trace.
fn sends(trace: &str) -> Vec<String> {
    trace
        .lines()
        .filter(|l| l.contains("\"action\":\"send\""))
        .flat_map(|l| {
            let value: serde_json::Value = serde_json::from_str(l.trim()).unwrap();
            value["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn three_waves_go_in_order_each_after_every_node_of_the_last_answered() {
    let spec = spec(
        &["canaries: a", "half: b c d", "the rest: e f"],
        None,
        Some(2),
    );
    let trace = check(
        &spec,
        "100 start
         101 sent a s1
         110 report a applied s1
         111 sent b s2
         111 sent c s3
         120 report b applied s2
         121 sent d s4
         125 report c applied s3
         130 report d applied s4
         131 sent e s5
         131 sent f s6
         140 report e applied s5
         141 report f applied s6",
    );
    assert_eq!(sends(&trace), ["a", "b", "c", "d", "e", "f"]);
    insta::assert_snapshot!(trace);
}

#[test]
fn a_report_from_before_the_send_never_counts() {
    // argo-cd#29410: a step was judged done on the previous revision's health, so production
    // rolled first. Here `a` still shows the previous digest applied, then a report of this
    // digest from an earlier send, then one heard before this plan's send was made: none of
    // them opens the next wave; only the answer naming this plan's send does.
    let spec = spec(&["canaries: a", "production: b"], None, None);
    let trace = check(
        &spec,
        "100 start
         100 report a applied s1
         101 sent a s1
         102 report a old-applied s0
         103 report a old-applied
         104 report a applied s0
         105 report a applied
         106 tick
         110 report a applied s1",
    );
    insta::assert_snapshot!(trace);
    let before: String = trace
        .lines()
        .take_while(|l| !l.starts_with("110"))
        .collect();
    assert!(!before.contains("\"production\""), "{trace}");
    assert_eq!(sends(&trace), ["a", "b"]);
}

#[test]
fn the_budget_stops_the_rollout_in_its_wave_and_nothing_of_the_next_is_sent() {
    // 2 of 5 nodes fail against a budget of 20 % once all 5 answered.
    let spec = spec(&["first: a b c d e", "second: f g"], Some((2000, 5)), None);
    let trace = check(
        &spec,
        "100 start
         101 sent a
         101 sent b
         101 sent c
         101 sent d
         101 sent e
         110 report a failed:web/container/web:_exited_1
         111 report b applied
         112 report c applied
         113 report d applied
         114 report e failed:web/file/config:_disk_full
         120 tick",
    );
    insta::assert_snapshot!(trace);
    assert_eq!(sends(&trace), ["a", "b", "c", "d", "e"]);
}

#[test]
fn failures_within_the_budget_go_on_naming_the_failed_nodes() {
    let spec = spec(&["first: a b c d", "second: e"], Some((5000, 2)), None);
    let trace = check(
        &spec,
        "100 start
         101 sent a
         101 sent b
         101 sent c
         101 sent d
         110 report a applied
         111 report b failed:boom
         112 report c applied
         113 report d applied",
    );
    insta::assert_snapshot!(trace);
    assert_eq!(sends(&trace), ["a", "b", "c", "d", "e"]);
}

#[test]
fn a_silent_node_counts_as_failed_at_its_deadline_and_does_not_hang_the_wave() {
    let spec = spec(&["first: a b c", "second: d"], Some((5000, 1)), None);
    let trace = check(
        &spec,
        "100 start
         101 sent a
         101 sent b
         101 sent c
         110 report a applied
         111 report b applied
         699 tick
         700 tick
         701 report c applied",
    );
    insta::assert_snapshot!(trace);
    assert_eq!(sends(&trace), ["a", "b", "c", "d"]);
}

#[test]
fn with_no_rollout_the_first_failure_stops_as_one_machine_first_does() {
    let spec = spec(&["first node: a", "the rest: b c"], None, None);
    let trace = check(
        &spec,
        "100 start
         101 sent a
         110 report a failed:image_not_found",
    );
    insta::assert_snapshot!(trace);
    assert_eq!(sends(&trace), ["a"]);
}

#[test]
fn an_approval_and_a_timed_pause_hold_the_next_wave() {
    let spec = spec(
        &["canaries: a then approve", "tenth: b then 900", "rest: c"],
        None,
        None,
    );
    let trace = check(
        &spec,
        "100 start
         101 sent a
         110 report a applied
         200 tick
         300 approve alice
         301 sent b
         310 report b applied
         1209 tick
         1210 tick",
    );
    insta::assert_snapshot!(trace);
    assert_eq!(sends(&trace), ["a", "b", "c"]);
}

#[test]
fn a_persons_pause_holds_at_the_next_boundary_and_abort_stops_where_it_stands() {
    let spec = spec(&["one: a b", "two: c", "three: d e"], None, Some(1));
    let trace = check(
        &spec,
        "100 start
         101 sent a
         105 pause bob: looking at the graphs
         110 report a applied
         111 sent b
         120 report b applied
         130 tick
         200 resume bob
         201 sent c
         210 report c applied
         211 sent d
         220 abort carol: the pager went off
         230 report d applied
         231 approve carol",
    );
    insta::assert_snapshot!(trace);
    assert_eq!(sends(&trace), ["a", "b", "c", "d"]);
}

#[test]
fn a_wave_outside_its_window_waits_and_starts_when_it_opens() {
    // Tuesday 2026-06-09; the window opens at 09:00 in Berlin, 07:00 UTC.
    let window: Window = serde_json::from_value(
        serde_json::json!({ "allow": "Mon-Fri 09:00-16:00", "zone": "Europe/Berlin" }),
    )
    .unwrap();
    let mut spec = spec_with(&["one: a", "two: b"], None, None, &[window]);
    spec.deadline_secs = 86_400;
    let six = 1_780_984_800; // 2026-06-09T06:00:00Z
    let seven = six + 3_600;
    let closes = seven + 7 * 3_600; // 16:00 in Berlin
    let trace = check(
        &spec,
        &format!(
            "{six} start
             {} tick
             {seven} tick
             {} sent a
             {} report a applied
             {} sent b
             {closes} report b applied",
            seven - 1,
            seven + 1,
            closes - 1,
            closes - 1,
        ),
    );
    insta::assert_snapshot!(trace);
    // A wave under way when its window closes finishes; a wave after it waits.
    let spec = spec_with(&["one: a", "two: b"], None, None, &spec.plan.windows);
    let trace = check(
        &spec,
        &format!(
            "{seven} start
             {} sent a
             {} report a applied",
            seven + 1,
            closes + 60,
        ),
    );
    assert!(trace.contains("\"action\":\"wait-for-window\",\"next\":1,\"until\":1781074800"));
    assert_eq!(sends(&trace), ["a"]);
}

#[test]
fn a_state_read_back_between_two_waves_sends_no_node_twice() {
    let spec = spec(&["one: a b then approve", "two: c"], None, None);
    let mut state = WaveState::new(&spec.plan);
    let mut sent = Vec::new();
    let mut run = |state: &mut WaveState, event: WaveEvent, now: u64| {
        for action in step(&spec, state, event, now) {
            if let WaveAction::Send { nodes, .. } = action {
                sent.extend(nodes);
            }
        }
    };
    run(&mut state, WaveEvent::Start, 100);
    for node in ["a", "b"] {
        let sent = |send: &str| WaveEvent::Sent {
            node: node.into(),
            declaration: "sha256:new".into(),
            send: Some(send.into()),
        };
        run(&mut state, sent(node), 101);
    }
    run(&mut state, report("a"), 110);
    // The controller stops here; its record is read back.
    let json = serde_json::to_string(&state).unwrap();
    let mut state: WaveState = serde_json::from_str(&json).unwrap();
    assert_eq!(state.under_way(), ["b"]);
    run(&mut state, WaveEvent::Start, 120);
    run(&mut state, report("b"), 121);
    let json = serde_json::to_string(&state).unwrap();
    let mut state: WaveState = serde_json::from_str(&json).unwrap();
    assert!(state.awaits_approval());
    run(&mut state, WaveEvent::Tick, 130);
    run(&mut state, WaveEvent::Approve { actor: "x".into() }, 140);
    run(&mut state, WaveEvent::Approve { actor: "x".into() }, 141);
    assert_eq!(sent, ["a", "b", "c"]);
}

fn report(node: &str) -> WaveEvent {
    WaveEvent::Report {
        node: node.into(),
        declaration: "sha256:new".into(),
        send: Some(node.into()),
        verdict: Verdict::Applied,
    }
}

#[test]
fn an_empty_wave_is_passed_over_with_its_pause() {
    let spec = spec(&["canaries: then approve", "all: a"], None, None);
    let trace = check(&spec, "100 start\n101 sent a\n102 report a applied");
    assert!(!trace.contains("await-approval"), "{trace}");
    assert!(trace.contains("\"action\":\"done\""), "{trace}");
}

#[test]
fn the_budget_is_judged_once_min_have_answered() {
    let two_percent = Budget {
        failed: Share { basis_points: 200 },
        min: 20,
    };
    assert!(!over_budget(&two_percent, 19, 5));
    assert!(!over_budget(&two_percent, 50, 1));
    assert!(over_budget(&two_percent, 49, 1));
    assert!(over_budget(&default_budget(), 1, 1));
    assert!(!over_budget(&default_budget(), 3, 0));
}

mod properties {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[derive(Debug, Clone)]
    enum Happening {
        Sent(usize),
        Report(usize, u8),
        SendFailed(usize),
        Tick(u64),
        Approve,
        Pause,
        Resume,
        Abort,
    }

    fn happening() -> impl Strategy<Value = Happening> {
        prop_oneof![
            12 => (0usize..10).prop_map(Happening::Sent),
            18 => (0usize..10, 0u8..8).prop_map(|(n, kind)| Happening::Report(n, kind)),
            2 => (0usize..10).prop_map(Happening::SendFailed),
            4 => (1u64..200).prop_map(Happening::Tick),
            4 => Just(Happening::Approve),
            2 => Just(Happening::Pause),
            3 => Just(Happening::Resume),
            1 => Just(Happening::Abort),
        ]
    }

    proptest! {
        #[test]
        fn no_wave_starts_before_the_last_answered_and_no_node_is_sent_twice(
            cuts in proptest::collection::btree_set(1usize..10, 0..4),
            pauses in proptest::collection::vec(0u8..3, 5),
            budget in prop_oneof![
                1 => Just(None),
                3 => (0u32..=10_000, 1u32..4).prop_map(Some),
            ],
            max_parallel in prop_oneof![Just(None), (1u32..4).prop_map(Some)],
            happenings in proptest::collection::vec(happening(), 0..80),
        ) {
            let node = |i: usize| format!("n{i}");
            let mut bounds: Vec<usize> = cuts.into_iter().collect();
            bounds.push(10);
            let mut start = 0;
            let mut texts = Vec::new();
            for (i, end) in bounds.iter().enumerate() {
                let nodes: Vec<String> = (start..*end).map(node).collect();
                let pause = match pauses[i] {
                    0 => "",
                    1 => " then approve",
                    _ => " then 100",
                };
                texts.push(format!("w{i}: {}{pause}", nodes.join(" ")));
                start = *end;
            }
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            let spec = spec(&texts, budget, max_parallel);
            let wave_of: BTreeMap<String, usize> = spec
                .plan
                .waves
                .iter()
                .enumerate()
                .flat_map(|(i, w)| w.nodes.iter().map(move |n| (n.clone(), i)))
                .collect();
            let mut state = WaveState::new(&spec.plan);
            let mut now = 1_000;
            let mut sent: BTreeSet<String> = BTreeSet::new();
            let mut ended = false;
            // Each happening names a node by its place among those it can be about (begun for a
            // send, sent for a report), so the rollout moves on through its waves.
            let pick = |state: &WaveState, i: usize, sent: bool| -> String {
                let candidates: Vec<&String> = state
                    .nodes
                    .iter()
                    .filter(|(_, n)| {
                        if sent {
                            matches!(n, WaveNode::Sent { .. })
                        } else {
                            matches!(n, WaveNode::Begun { .. })
                        }
                    })
                    .map(|(name, _)| name)
                    .collect();
                if candidates.is_empty() {
                    node(i)
                } else {
                    candidates[i % candidates.len()].clone()
                }
            };
            let mut happenings = happenings.into_iter();
            let mut first = Some(WaveEvent::Start);
            loop {
                let event = match first.take() {
                    Some(start) => start,
                    None => match happenings.next() {
                        None => break,
                        Some(Happening::Sent(i)) => {
                            let n = pick(&state, i, false);
                            WaveEvent::Sent {
                                node: n.clone(),
                                declaration: "sha256:new".into(),
                                send: Some(n),
                            }
                        }
                        Some(Happening::Report(i, kind)) => {
                            let n = pick(&state, i, true);
                            WaveEvent::Report {
                                node: n.clone(),
                                declaration: if kind == 3 { "sha256:old" } else { "sha256:new" }
                                    .into(),
                                send: Some(if kind == 4 { "earlier".into() } else { n }),
                                verdict: match kind {
                                    1 => Verdict::Failed {
                                        reasons: vec!["boom".into()],
                                    },
                                    2 => Verdict::Pending,
                                    _ => Verdict::Applied,
                                },
                            }
                        }
                        Some(Happening::SendFailed(i)) => WaveEvent::SendFailed {
                            node: pick(&state, i, false),
                            reason: "down".into(),
                        },
                        Some(Happening::Tick(secs)) => {
                            now += secs;
                            WaveEvent::Tick
                        }
                        Some(Happening::Approve) => WaveEvent::Approve { actor: "a".into() },
                        Some(Happening::Pause) => WaveEvent::Pause {
                            actor: "a".into(),
                            reason: "r".into(),
                        },
                        Some(Happening::Resume) => WaveEvent::Resume { actor: "a".into() },
                        Some(Happening::Abort) => WaveEvent::Abort {
                            actor: "a".into(),
                            reason: "r".into(),
                        },
                    },
                };
                for action in step(&spec, &mut state, event, now) {
                    match action {
                        WaveAction::Send { wave, nodes } => {
                            prop_assert!(!ended, "a send after the end");
                            for n in nodes {
                                prop_assert_eq!(wave_of[&n], wave);
                                // Every node of every earlier wave has answered.
                                for (other, w) in &wave_of {
                                    if *w < wave {
                                        prop_assert!(matches!(
                                            state.nodes[other],
                                            WaveNode::Applied { .. } | WaveNode::Failed { .. }
                                        ), "{} sent before {} answered", n, other);
                                    }
                                }
                                prop_assert!(sent.insert(n.clone()), "{} sent twice", n);
                            }
                        }
                        WaveAction::BudgetExceeded { .. }
                        | WaveAction::Aborted { .. }
                        | WaveAction::Done => ended = true,
                        WaveAction::WaveStarted { .. }
                        | WaveAction::WaveDone { .. }
                        | WaveAction::AwaitApproval { .. }
                        | WaveAction::Approved { .. }
                        | WaveAction::PauseUntil { .. }
                        | WaveAction::WaitForWindow { .. }
                        | WaveAction::Paused { .. }
                        | WaveAction::HeldByOperator { .. }
                        | WaveAction::Resumed { .. } => {}
                    }
                }
                let under_way = state
                    .nodes
                    .values()
                    .filter(|n| matches!(n, WaveNode::Begun { .. } | WaveNode::Sent { .. }))
                    .count();
                if !ended {
                    prop_assert_eq!(under_way, state.counts.under_way);
                }
                if let Some(limit) = max_parallel {
                    prop_assert!(under_way <= limit as usize);
                }
            }
        }
    }
}
