//! What a person reads: declarations, push results, status, plans, merges and builds, as text.

use crate::plans::{MergeOutcome, NamedBuild, PlanRecord};
use crate::push::{NodeResult, NodeStatus, PushResult};
use crate::status::Overview;
use mesh_host::format_time;
use mesh_host::{finding_line, machine_word, outcome_line, short};
use mesh_model::declaration::{Declaration, Spec};
use mesh_model::plan::{Plan, PlanState, RolloutOutcome};
use mesh_plan::plans::{state_word, Waiting};
use std::fmt::Write as _;

/// A declaration, one resource a line.
pub fn declaration(declaration: &Declaration) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {} resources, declaration {}",
        declaration.node,
        declaration.resources.len(),
        short(&declaration.digest())
    );
    let width = declaration
        .resources
        .iter()
        .map(|r| r.id.len())
        .max()
        .unwrap_or(0);
    for resource in &declaration.resources {
        let what = match &resource.spec {
            Spec::File(f) => {
                let content = match (&f.content, &f.source) {
                    (Some(content), _) => format!("{} bytes", content.len()),
                    (None, Some(source)) => {
                        format!("{} of the archive, {}", source.path, short(&source.sha256))
                    }
                    (None, None) => "no content".to_owned(),
                };
                format!(
                    "{} ({:04o} {}:{}, {content})",
                    f.path, f.mode, f.owner, f.group
                )
            }
            Spec::Directory(d) => format!("{}/ ({:04o} {}:{})", d.path, d.mode, d.owner, d.group),
            Spec::Membership(m) => format!("account {} in group {}", m.account, m.group),
            Spec::Container(c) => {
                let mounts: Vec<String> = c
                    .mounts
                    .iter()
                    .map(|m| {
                        format!(
                            "{}:{}{}",
                            m.source,
                            m.at,
                            if m.read_only { ":ro" } else { "" }
                        )
                    })
                    .collect();
                format!(
                    "{} [{}] mounts {}",
                    c.image,
                    c.command.join(" "),
                    if mounts.is_empty() {
                        "none".to_owned()
                    } else {
                        mounts.join(", ")
                    }
                )
            }
        };
        let together = resource
            .together
            .as_ref()
            .map(|g| format!("  (together: {g})"))
            .unwrap_or_default();
        let _ = writeln!(out, "  {:<width$}  {what}{together}", resource.id);
    }
    for (module, archive) in &declaration.archives {
        let _ = writeln!(
            out,
            "  files of `{module}` are read from its archive {} ({} bytes)",
            archive.digest, archive.size
        );
    }
    out
}

/// A push's results, a node a paragraph.
pub fn push(results: &[PushResult]) -> String {
    let mut out = String::new();
    for result in results {
        match &result.result {
            NodeResult::Reported {
                declaration,
                resources,
                report,
            } => {
                let _ = writeln!(
                    out,
                    "{}: sent {} ({resources} resources), {}: {}",
                    result.node,
                    short(declaration),
                    machine_word(report.machine),
                    tally(report)
                );
                for (id, outcome) in report.resources.iter().chain(&report.undeclared) {
                    // What changed and what did not take; `unchanged` is the count above.
                    if *outcome != mesh_model::report::Outcome::Unchanged {
                        out.push_str(&outcome_line(id, outcome));
                    }
                }
                for finding in &report.findings {
                    out.push_str(&finding_line(finding));
                }
            }
            NodeResult::Held { moves } => {
                out.push_str(
                    &mesh_plan::PushDecision::Hold {
                        moves: moves.clone(),
                    }
                    .render_text(&result.node),
                );
            }
            NodeResult::NoReport {
                declaration,
                reason,
            } => {
                let _ = writeln!(
                    out,
                    "{}: sent {}, {reason}",
                    result.node,
                    short(declaration)
                );
            }
        }
    }
    out
}

fn tally(report: &mesh_model::report::Report) -> String {
    let counts = report.tally();
    if counts.is_empty() {
        return "nothing declared".to_owned();
    }
    counts
        .iter()
        .map(|(word, n)| format!("{n} {word}"))
        .collect::<Vec<_>>()
        .join(", ")
}

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
                let _ = writeln!(out, "{}{role}: never sent [{modules}]", node.node);
            }
            (Some(sent), None) => {
                let _ = writeln!(
                    out,
                    "{}{role}: sent {}, no report yet [{modules}]",
                    node.node,
                    short(sent)
                );
            }
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
    }
    out
}

fn plans_status(overview: &Overview) -> String {
    let mut out = String::new();
    if overview.open_plans.is_empty() {
        out.push_str("plans: none open, nothing behind\n");
    } else {
        out.push_str("open plans:\n");
        for plan in &overview.open_plans {
            let _ = writeln!(
                out,
                "  {} `{}` {} at {} ({}): waits on {}, for {} s (since {})",
                plan.id,
                plan.repository,
                plan.branch,
                crate::builds::short_commit(&plan.commit),
                plan.state,
                plan.waits_on,
                plan.waiting_secs,
                format_time(plan.since)
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
    if !overview.attention.is_empty() {
        out.push_str("nodes needing attention:\n");
        for node in &overview.attention {
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
            for window in &node.windows {
                let _ = writeln!(
                    out,
                    "  {}: window `{}` open since {}, holding {}",
                    node.node,
                    window.step,
                    format_time(window.opened_at),
                    window.containers.join(", ")
                );
            }
        }
    }
    out
}

fn where_stopped(node: &str) -> String {
    if node.is_empty() {
        "stopped at its build".to_owned()
    } else {
        format!("stopped at `{node}`")
    }
}

fn state_text(state: &PlanState) -> String {
    match state {
        PlanState::Building | PlanState::RollingOut | PlanState::Done => {
            state_word(state).to_owned()
        }
        PlanState::Stopped { node, reason } => format!("{}: {reason}", where_stopped(node)),
        PlanState::Superseded { by } => format!("superseded by {by}"),
        PlanState::Closed { note } if note.is_empty() => "closed".to_owned(),
        PlanState::Closed { note } => format!("closed: {note}"),
    }
}

/// The plans, one a line, in the order they were made.
pub fn plans_list(plans: &[PlanRecord]) -> String {
    if plans.is_empty() {
        return "no plans yet; `merge REPO` makes one\n".to_owned();
    }
    let mut out = String::new();
    for record in plans {
        let plan = &record.plan;
        let _ = writeln!(
            out,
            "{:<8} `{}` {} at {}  made {}  {} module(s)  {}",
            plan.id,
            plan.repository,
            plan.branch,
            crate::builds::short_commit(&plan.commit),
            format_time(plan.made_at),
            plan.modules.len(),
            state_text(&plan.state)
        );
    }
    out
}

/// One plan in full: what changed, its tiers, and every module's build and rollout.
pub fn plan_show(record: &PlanRecord) -> String {
    let plan = &record.plan;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: `{}` {} at {}, made {}",
        plan.id,
        plan.repository,
        plan.branch,
        plan.commit,
        format_time(plan.made_at)
    );
    let _ = writeln!(out, "state: {}", state_text(&plan.state));
    match &record.previous_commit {
        None => out.push_str("changed: the repository's first merge: every module\n"),
        Some(previous) => {
            let _ = writeln!(
                out,
                "changed: {} path(s) since {}{}",
                record.changed_paths,
                crate::builds::short_commit(previous),
                if record.shared_paths.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; shared paths (every module): {}",
                        record.shared_paths.join(", ")
                    )
                }
            );
        }
    }
    if !record.folded.is_empty() {
        let folded: Vec<String> = record
            .folded
            .iter()
            .map(|(module, from)| format!("{module} (from {from})"))
            .collect();
        let _ = writeln!(out, "taken over: {}", folded.join(", "));
    }
    for (index, tier) in plan.tiers.iter().enumerate() {
        let _ = writeln!(out, "tier {index}:");
        for module in tier {
            let _ = writeln!(out, "  {module}: {}", module_line(record, module));
        }
    }
    out
}

fn module_line(record: &PlanRecord, module: &str) -> String {
    let work = record.work.get(module);
    let rollout = record.plan.rollouts.get(module);
    let mut parts = Vec::new();
    match work.and_then(|w| w.build.as_ref()) {
        Some(build) => parts.push(format!(
            "built {} ({} bytes)",
            short(&build.archive.digest),
            build.archive.size
        )),
        None => parts.push("not built".to_owned()),
    }
    let stopped_itself = rollout.is_some_and(|r| r.outcome.is_some());
    if record.held.contains(module) && !stopped_itself {
        parts.push("held back: it is built from a module that stopped".to_owned());
    }
    if work.is_some_and(|w| w.not_redeployed) {
        parts.push("byte-identical to its deployed build: not redeployed".to_owned());
    }
    if let Some(rollout) = rollout {
        if let Some(first) = &rollout.first {
            parts.push(format!("first `{first}`"));
        }
        if !rollout.sends.is_empty() {
            let sends: Vec<String> = rollout
                .sends
                .iter()
                .map(|(node, at)| format!("{node} at {}", format_time(*at)))
                .collect();
            parts.push(format!("sent {}", sends.join(", ")));
        }
        match &rollout.outcome {
            Some(RolloutOutcome::Done) => parts.push("done".to_owned()),
            Some(RolloutOutcome::Stopped { node, reason }) => {
                parts.push(format!("{}: {reason}", where_stopped(node)));
                if let Some(digest) = work.and_then(|w| w.reverted.get(node)) {
                    parts.push(format!(
                        "`{node}` sent back what it ran before ({})",
                        short(digest)
                    ));
                }
            }
            None => {}
        }
    }
    parts.join("; ")
}

/// What hearing a merge did, in one line (the progress lines came before it).
pub fn merge(outcome: &MergeOutcome) -> String {
    match outcome {
        MergeOutcome::AlreadyPlanned { plan } => format!(
            "{} was already made for `{}` {} at {} ({}); no new plan\n",
            plan.id,
            plan.repository,
            plan.branch,
            crate::builds::short_commit(&plan.commit),
            state_text(&plan.state)
        ),
        MergeOutcome::Planned { plan, .. } => plan_summary(plan),
    }
}

/// A plan in one line.
pub fn plan_summary(plan: &Plan) -> String {
    format!(
        "{}: {} ({} module(s): {})\n",
        plan.id,
        state_text(&plan.state),
        plan.modules.len(),
        if plan.modules.is_empty() {
            "none".to_owned()
        } else {
            plan.modules.join(", ")
        }
    )
}

/// What `build` made.
pub fn builds(builds: &[NamedBuild], dry_run: bool) -> String {
    let mut out = String::new();
    for named in builds {
        let build = &named.build;
        let _ = writeln!(
            out,
            "{}: {} ({} bytes) from `{}` at {}{}",
            build.module,
            build.archive.digest,
            build.archive.size,
            build.repository,
            crate::builds::short_commit(&build.commit),
            if dry_run {
                " — dry run: not published, not recorded, nothing can send it".to_owned()
            } else {
                match &named.plan {
                    Some(plan) => format!(", published and recorded for {plan}"),
                    None => ", published and recorded (no open plan names it: not rolled out)"
                        .to_owned(),
                }
            }
        );
    }
    out
}
