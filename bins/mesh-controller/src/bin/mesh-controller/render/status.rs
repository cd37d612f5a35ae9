//! `status`: every node a paragraph, then the plans and what needs attention.

use super::*;

/// Status: every node a paragraph, then the plans, what is behind, stopped rollouts and the
/// nodes that need attention.
pub fn status(overview: &Overview) -> String {
    let mut out = nodes(&overview.nodes);
    out.push_str(&plans_status(overview));
    out
}

/// Every node's status, a node a paragraph.
pub fn nodes(nodes: &[NodeStatus]) -> String {
    let mut out = String::new();
    for node in nodes {
        let role = if node.bus_node { " (bus)" } else { "" };
        let modules = node.modules.iter().cloned().collect::<Vec<_>>().join(", ");
        match (&node.sent, &node.report) {
            (None, _) => {
                let what = match node.unconfirmed {
                    Some(_) => "no send confirmed",
                    None => "never sent",
                };
                let _ = writeln!(out, "{}{role}: {what} [{modules}]", node.node);
            }
            (Some(sent), None) => match &node.unreadable {
                Some(unreadable) => {
                    let _ = writeln!(
                        out,
                        "{}{role}: sent {}, {unreadable} [{modules}]",
                        node.node,
                        short(sent)
                    );
                }
                None => {
                    let _ = writeln!(
                        out,
                        "{}{role}: sent {}, no report yet [{modules}]",
                        node.node,
                        short(sent)
                    );
                }
            },
            (Some(sent), Some(report)) => {
                let freshness = if node.current {
                    String::new()
                } else {
                    format!(
                        " — report is of {}, not of the last send {}",
                        short(&report.declaration),
                        short(sent)
                    )
                };
                let _ = writeln!(
                    out,
                    "{}{role}: {}, {}{freshness} [{modules}]",
                    node.node,
                    machine_word(report.machine),
                    tally(report)
                );
                for (id, outcome) in &report.resources {
                    if !outcome.took() {
                        out.push_str(&outcome_line(id, outcome));
                    }
                }
                // What the host said a person should know (a new login, a cache it could
                // not prune): status is where it is seen, not only the push that heard it.
                for finding in &report.findings {
                    out.push_str(&finding_line(finding));
                }
            }
        }
        if let Some(unconfirmed) = &node.unconfirmed {
            let _ = writeln!(
                out,
                "  sent {}, unconfirmed: the controller stopped, or the bus did not take it, \
                 before it was recorded sent; not reported yet",
                short(unconfirmed)
            );
        }
    }
    out
}

fn plans_status(overview: &Overview) -> String {
    let mut out = String::new();
    if overview.open_plans.is_empty() && overview.nodes_behind.is_empty() {
        out.push_str("plans: none open, nothing behind\n");
    } else if overview.open_plans.is_empty() {
        out.push_str("plans: none open\n");
    } else {
        out.push_str("open plans:\n");
        for plan in &overview.open_plans {
            let _ = writeln!(
                out,
                "  {} `{}` {} at {} ({}): waits on {}, for {} s (since {})",
                plan.id,
                plan.repository,
                plan.branch,
                mesh_controller::catalogue::short_commit(&plan.commit),
                plan.state,
                plan.waits_on,
                plan.waiting_secs,
                rfc3339(plan.since)
            );
        }
        out.push_str("behind (what the open plans have yet to do):\n");
        for behind in &overview.behind {
            let what = match behind.waiting {
                Waiting::Build => "to build",
                Waiting::RollOut => "to roll out",
            };
            let _ = writeln!(out, "  {:<16} {what:<12} {}", behind.module, behind.plan);
        }
        out.push_str("  (`build --behind` builds them; `push --behind` rolls out what is built)\n");
    }
    if !overview.nodes_behind.is_empty() {
        out.push_str("nodes behind (not running when their module rolled out, never sent it):\n");
        for behind in &overview.nodes_behind {
            let _ = writeln!(
                out,
                "  {:<16} {:<16} {}{}",
                behind.node,
                behind.module,
                behind.plan,
                if behind.running {
                    ""
                } else {
                    " (still not running)"
                }
            );
        }
        out.push_str("  (`push --behind` sends the ones running)\n");
    }
    if !overview.stopped.is_empty() {
        out.push_str("stopped rollouts:\n");
        for stopped in &overview.stopped {
            let _ = writeln!(
                out,
                "  {} `{}` {}: {}",
                stopped.plan,
                stopped.module,
                where_stopped(&stopped.node),
                stopped.reason
            );
            if let Some(digest) = &stopped.reverted {
                let _ = writeln!(
                    out,
                    "    `{}` was sent back what it ran before ({})",
                    stopped.node,
                    short(digest)
                );
            }
        }
    }
    out.push_str(&pending(&overview.pending));
    if overview.held.iter().any(|held| !held.orphans.is_empty()) {
        out.push_str(
            "held for orphaned settings (`settings rename MODULE OLD NEW`, or `settings set … \
             --replace`, ends the hold; the next drive sends them; `plans resume \
             --drop-settings MODULE` sends them without):\n",
        );
        for held in &overview.held {
            for orphan in &held.orphans {
                let _ = writeln!(out, "  {} on `{}`: {orphan}", held.plan, held.node);
            }
        }
    }
    if overview.held.iter().any(|held| !held.unset.is_empty()) {
        out.push_str(
            "held for a required setting no layer sets (`settings set` or `settings set-secret` \
             on the node or the mesh ends the hold; the next drive sends them):\n",
        );
        for held in &overview.held {
            for unset in &held.unset {
                let _ = writeln!(
                    out,
                    "  {} `{}` on `{}`: {unset} is unset",
                    held.plan, held.module, held.node
                );
            }
        }
    }
    if overview.held.iter().any(|held| !held.moves.is_empty()) {
        out.push_str("held for a move (`plans resume --move MODULE` sends them):\n");
        for held in &overview.held {
            for one in &held.moves {
                let _ = writeln!(
                    out,
                    "  {} `{}` on `{}`: container `{}`, mount `{}`: from `{}` to `{}`",
                    held.plan, held.module, held.node, one.container, one.at, one.from, one.to
                );
            }
        }
    }
    if let Some(daemon) = &overview.daemon {
        let beat = &daemon.heartbeat;
        if let Some(at) = daemon.stopped_at {
            let _ = writeln!(
                out,
                "daemon: mesh-controller serve on {} (pid {}) stopped at {}; it was driving {}; \
                 {} merge(s) waiting{}",
                beat.machine,
                beat.pid,
                super::local_time(at),
                if beat.driving.is_empty() {
                    "nothing".to_owned()
                } else {
                    beat.driving.join(", ")
                },
                daemon.merges_waiting.count,
                daemon
                    .oldest_merge_waiting_secs
                    .map(|secs| format!(", the oldest for {secs} s"))
                    .unwrap_or_default()
            );
        } else {
            let _ = writeln!(
                out,
                "daemon: mesh-controller serve on {} (pid {}), its loop last turned {} s ago \
             (heartbeat every {} s){}; driving {}; {} merge(s) waiting{}",
                beat.machine,
                beat.pid,
                daemon.unheard_secs,
                beat.interval_secs,
                if daemon.silent { ": SILENT" } else { "" },
                if beat.driving.is_empty() {
                    "nothing".to_owned()
                } else {
                    beat.driving.join(", ")
                },
                daemon.merges_waiting.count,
                daemon
                    .oldest_merge_waiting_secs
                    .map(|secs| format!(", the oldest for {secs} s"))
                    .unwrap_or_default()
            );
        }
        for line in daemon.attention() {
            let _ = writeln!(out, "  {line}");
        }
    }
    if !overview.problems.is_empty() {
        out.push_str("problems (shown until resolved):\n");
        for problem in &overview.problems {
            let _ = writeln!(
                out,
                "  {} `{}`: {} (since {}, last {}, by {}{})",
                problem.kind.word(),
                problem.subject,
                problem.what,
                rfc3339(problem.since),
                rfc3339(problem.at),
                problem.by,
                problem_attempts(problem)
            );
            for line in &problem.details {
                let _ = writeln!(out, "    {line}");
            }
        }
    }
    if !overview.on_passwords.is_empty() {
        let _ = writeln!(
            out,
            "on bus passwords, not yet enrolled with an NKey (`mesh-host keygen` on the node, \
             then `node enroll NODE PUBLIC-KEY`): {}",
            overview.on_passwords.join(", ")
        );
    }
    if !overview.attention.is_empty() {
        out.push_str("nodes needing attention:\n");
        for node in &overview.attention {
            if let Some(reason) = &node.host_failure {
                let _ = writeln!(
                    out,
                    "  {}: the host cannot apply (it tries again by itself): {reason}",
                    node.node
                );
            }
            if node.mid_change {
                let _ = writeln!(
                    out,
                    "  {}: mid-change (an apply was interrupted)",
                    node.node
                );
            }
            for (id, reason) in &node.stuck {
                let _ = writeln!(out, "  {}: stuck {id}: {reason}", node.node);
            }
            for (id, reason) in &node.failed {
                let _ = writeln!(out, "  {}: failed {id}: {reason}", node.node);
            }
            for window in &node.windows {
                let held_by = window
                    .holder
                    .map(|pid| format!(" (held open by pid {pid})"))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "  {}: window `{}` open since {}, holding {}{held_by}",
                    node.node,
                    window.step,
                    rfc3339(window.opened_at),
                    window.containers.join(", ")
                );
            }
            if let Some(since) = node.silent_since {
                let _ = writeln!(
                    out,
                    "  {}: silent since {} (nothing heard for three heartbeats)",
                    node.node,
                    rfc3339(since)
                );
            }
            if let Some(unreadable) = &node.unreadable {
                let _ = writeln!(out, "  {}: {unreadable}", node.node);
            }
            if let Some(skew) = node.clock_skew_secs {
                let _ = writeln!(
                    out,
                    "  {}: {}",
                    node.node,
                    mesh_controller::status::clock_skew_words(skew)
                );
            }
            for drift in &node.drift {
                let what = match drift.action {
                    mesh_model::report::DriftAction::Corrected => "put back",
                    mesh_model::report::DriftAction::Left => "left as found",
                };
                let _ = writeln!(
                    out,
                    "  {}: drift {} {}: was {}, found {} (seen {}; {what})",
                    node.node,
                    drift.resource,
                    drift.field,
                    drift.was,
                    drift.found,
                    rfc3339(drift.seen_at)
                );
            }
        }
    }
    out
}

/// The pending nodes: each with what differs from what it was sent and what sends it.
fn pending(pending: &[mesh_controller::status::PendingNode]) -> String {
    let mut out = String::new();
    if pending.is_empty() {
        return out;
    }
    out.push_str("pending (what each should run differs from what it was sent):\n");
    for node in pending {
        let _ = writeln!(
            out,
            "  {}: intent {}, sent {}",
            node.node,
            short(&node.intent),
            node.sent.as_deref().map_or("nothing", short),
        );
        for difference in &node.differences {
            let _ = writeln!(out, "    {difference}");
        }
        let _ = writeln!(
            out,
            "    {}",
            match &node.plan {
                Some(_) => node.command.clone(),
                None => format!(
                    "nothing will send it; `{}{}` does",
                    node.command,
                    node.downgrades
                        .iter()
                        .map(|module| format!(" --downgrade {module}"))
                        .collect::<String>()
                ),
            }
        );
    }
    out
}

/// A problem's module and attempts, when it counts them ("; at `site`, attempt 3").
fn problem_attempts(problem: &mesh_store::problems::Problem) -> String {
    let mut out = String::new();
    if let Some(module) = &problem.module {
        let _ = write!(out, "; at `{module}`");
    }
    if problem.attempts > 0 {
        let _ = write!(out, "; attempt {}, tried again by itself", problem.attempts);
    }
    out
}

#[cfg(test)]
mod status_tests {
    use mesh_controller::plans::PlanRecord;
    use mesh_controller::status::*;
    use mesh_controller::NodeStatus;
    use mesh_model::build::{ArchiveRef, Build};
    use mesh_model::plan::PlanState;
    use mesh_model::plan::{ModuleRollout, Plan};
    use mesh_model::report::Report;
    use mesh_model::report::{Outcome, WindowSummary};
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
            intent: Some(report.declaration.clone()),
            sent: Some(report.declaration.clone()),
            report: Some(report),
            current: true,
            heard_at: None,
            silent_since: None,
            unreadable: None,
            unconfirmed: None,
            clock_offset_secs: None,
        }
    }

    /// A plan whose `site` was sent to `control` at 1000 and waits for its report; its node's
    /// record is written in `home`.
    fn waiting_plan(home: &mesh_controller::Home) -> PlanRecord {
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
        home.plans()
            .write_rollout_node(
                "plan-7",
                "site",
                &mesh_controller::plans::RolloutNodeRecord {
                    format: mesh_controller::plans::ROLLOUT_NODE_FORMAT,
                    node: "control".into(),
                    running: true,
                    declaration: "sha256:c1".into(),
                    before: None,
                    progress: state.nodes.get("control").unwrap().clone(),
                },
            )
            .unwrap();
        let mut work = BTreeMap::new();
        work.insert(
            "site".to_owned(),
            mesh_controller::plans::ModuleWork {
                build: Some(build.clone()),
                rollout: Some(mesh_controller::plans::RolloutKept {
                    upgrade: spec.upgrade,
                    on_failure: spec.on_failure,
                    deadline_secs: spec.deadline_secs,
                    max_parallel: spec.max_parallel,
                    bus_first: None,
                    state: state.parts(),
                }),
                ..Default::default()
            },
        );
        work.insert(
            "tools".to_owned(),
            mesh_controller::plans::ModuleWork::default(),
        );
        PlanRecord {
            format: mesh_controller::plans::PLAN_FORMAT,
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
                        sent: 1,
                        applied: 0,
                        held: 0,
                        sends: BTreeMap::new(),
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
            forgotten: Default::default(),
            nodes_folded: false,
        }
    }

    /// The rule “Nothing fails silently” — a plan's wait to the second, what is behind, and nodes
    /// stuck, mid-change or with a window open all reach `status`.
    #[test]
    fn status_names_the_wait_to_the_second_and_the_nodes_needing_attention() {
        let dir = tempfile::tempdir().unwrap();
        let home = mesh_controller::Home::new(dir.path());
        let record = waiting_plan(&home);
        let (waits_on, since) = waits_on(&home, &record).unwrap();
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
                        holder: Some(4242),
                    });
                    home
                }),
                node(
                    "edge",
                    report(serde_json::json!({
                        "format": 2, "node": "edge", "declaration": "sha256:e0",
                        "machine": "partial", "resources": {},
                        "host-failure": "cannot store the declaration received at \
                            /var/lib/mesh-host/serve/declaration.json: no space left on device \
                            (os error 28)",
                        "started-at": 1004, "finished-at": 1004
                    })),
                ),
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
            nodes_behind: Vec::new(),
            stopped: vec![StoppedRollout {
                plan: "plan-6".into(),
                module: "notes".into(),
                node: String::new(),
                reason: "`notes` at cat 0123456789ab does not validate".into(),
                reverted: None,
            }],
            attention: Vec::new(),
            pending: Vec::new(),
            held: Vec::new(),
            on_passwords: vec!["laptop".into()],
            daemon: None,
            problems: vec![
                mesh_store::problems::Problem {
                    format: mesh_store::problems::PROBLEM_FORMAT,
                    kind: mesh_store::problems::ProblemKind::Merge,
                    subject: "cat".into(),
                    what: "a merge heard could not be planned: `cat` at 0123456789ab: \
                           `a` and `b` depend on each other; no plan was made"
                        .into(),
                    details: Vec::new(),
                    since: 1010,
                    at: 1020,
                    by: "mesh-controller serve".into(),
                    plan: None,
                    module: None,
                    attempts: 0,
                },
                mesh_store::problems::Problem {
                    format: mesh_store::problems::PROBLEM_FORMAT,
                    kind: mesh_store::problems::ProblemKind::Collection,
                    subject: "oci:/var/lib/mesh/store/oci".into(),
                    what: "held 1 of 2 kept archives, missing 1: collection ran dry".into(),
                    details: vec!["missing sha256:bbbb (current build of notes)".into()],
                    since: 1000,
                    at: 1000,
                    by: "mesh-collector collect".into(),
                    plan: None,
                    module: None,
                    attempts: 0,
                },
            ],
        };
        let mut overview = overview;
        overview.attention = attention(&overview.nodes);
        insta::assert_snapshot!(super::status(&overview));
    }

    /// A host whose clock is an hour behind the bus's is named under "needs attention", and a
    /// send written and never confirmed made is said on its node, sent, unconfirmed.
    #[test]
    fn status_names_a_host_whose_clock_is_off_and_a_send_unconfirmed() {
        let converged = |name: &str| {
            report(serde_json::json!({
                "format": 2, "node": name, "declaration": format!("sha256:{name}0"),
                "machine": "converged", "resources": {},
                "started-at": 1000, "finished-at": 1000
            }))
        };
        let mut behind = node("control", converged("control"));
        behind.clock_offset_secs = Some(-3600);
        let mut unconfirmed = node("home", converged("home"));
        unconfirmed.unconfirmed = Some("sha256:home1".into());
        let mut first = node("laptop", converged("laptop"));
        first.sent = None;
        first.report = None;
        first.current = false;
        first.unconfirmed = Some("sha256:laptop1".into());
        let mut overview = Overview {
            nodes: vec![behind, unconfirmed, first],
            open_plans: Vec::new(),
            behind: Vec::new(),
            nodes_behind: Vec::new(),
            stopped: Vec::new(),
            attention: Vec::new(),
            pending: Vec::new(),
            held: Vec::new(),
            on_passwords: Vec::new(),
            daemon: None,
            problems: Vec::new(),
        };
        overview.attention = attention(&overview.nodes);
        insta::assert_snapshot!(super::status(&overview));
    }

    /// A pending node is named with what differs from what it was sent and what sends it: an
    /// open plan's rollout, or `push NODE` when nothing will.
    #[test]
    fn status_names_each_pending_node_with_what_differs_and_what_sends_it() {
        use mesh_controller::status::Difference;
        use mesh_controller::status::PendingNode;
        let digest = |c: char| format!("sha256:{}", c.to_string().repeat(64));
        let mut alpha = node(
            "alpha",
            report(serde_json::json!({
                "format": 1, "node": "alpha", "declaration": digest('a'),
                "machine": "converged", "resources": {},
                "started-at": 1001, "finished-at": 1001
            })),
        );
        alpha.intent = Some(digest('b'));
        let overview = Overview {
            nodes: vec![alpha],
            open_plans: Vec::new(),
            behind: Vec::new(),
            nodes_behind: Vec::new(),
            stopped: Vec::new(),
            attention: Vec::new(),
            pending: vec![
                PendingNode {
                    node: "alpha".into(),
                    intent: digest('b'),
                    sent: Some(digest('a')),
                    differences: vec![
                        Difference::Build {
                            module: "web".into(),
                            sent: Some(digest('c')),
                            deployed: Some(digest('d')),
                        },
                        Difference::Settings {
                            module: "base".into(),
                        },
                        Difference::Secrets {
                            module: "db".into(),
                        },
                        Difference::ModuleRemoved {
                            module: "old".into(),
                        },
                    ],
                    plan: None,
                    command: "push alpha".into(),
                    downgrades: vec!["web".into()],
                },
                PendingNode {
                    node: "gamma".into(),
                    intent: digest('e'),
                    sent: None,
                    differences: vec![Difference::NeverSent],
                    plan: Some("plan-7".into()),
                    command: "plan-7's rollout sends it".into(),
                    downgrades: Vec::new(),
                },
                PendingNode {
                    node: "delta".into(),
                    intent: digest('f'),
                    sent: Some(digest('0')),
                    differences: vec![Difference::ModuleNotSent {
                        module: "web".into(),
                    }],
                    plan: None,
                    command: "push delta".into(),
                    downgrades: Vec::new(),
                },
            ],
            held: Vec::new(),
            on_passwords: Vec::new(),
            daemon: None,
            problems: Vec::new(),
        };
        insta::assert_snapshot!(super::status(&overview));
    }
}
