//! What a person reads: declarations, push results, status, plans, merges and builds, as text.

use mesh_controller::plans::{MergeOutcome, NamedBuild, PlanRecord};
use mesh_controller::push::{NodeResult, NodeStatus, PushResult};
use mesh_controller::runtimes::Runtimes;
use mesh_controller::settings::{describe, Answer, Shown};
use mesh_controller::status::Overview;
use mesh_host::format_time;
use mesh_host::{finding_line, machine_word, outcome_line, short};
use mesh_model::declaration::{Declaration, Spec};
use mesh_model::plan::{Plan, PlanState, RolloutOutcome};
use mesh_plan::plans::{state_word, Waiting};
use std::fmt::Write as _;

/// A settings layer as `settings show` prints it, newest history first.
///
/// # Errors
/// A layer that cannot be printed as JSON.
pub fn settings_shown(shown: &Shown) -> serde_json::Result<String> {
    let mut out = String::new();
    match &shown.layer {
        Some(layer) => {
            let _ = writeln!(out, "{}", serde_json::to_string_pretty(layer)?);
        }
        None => {
            let _ = writeln!(
                out,
                "{}: no layer set",
                describe(&shown.module, &shown.scope())
            );
        }
    }
    if let Some(records) = &shown.history {
        if records.is_empty() {
            let _ = writeln!(out, "\nno earlier layers");
        }
        for record in records.iter().rev() {
            let _ = writeln!(
                out,
                "\nrevision {}: replaced {} by `{}`",
                record.revision,
                format_time(record.replaced_at),
                record.command
            );
            match &record.layer {
                Some(layer) => {
                    let _ = writeln!(out, "{}", serde_json::to_string_pretty(layer)?);
                }
                None => {
                    let _ = writeln!(out, "(no layer)");
                }
            }
        }
    }
    Ok(out)
}

/// What a `settings set`, `clear` or `restore` did, as a person reads it.
pub fn settings_answer(answer: &Answer) -> String {
    let scope = match &answer.node {
        Some(node) => mesh_model::inventory::LayerScope::Node(node.clone()),
        None => mesh_model::inventory::LayerScope::Mesh,
    };
    let mut out = String::new();
    if answer.raced > 0 {
        let _ = writeln!(
            out,
            "the layer was changed by another writer while this was set: what follows is \
             against the layer as they left it"
        );
    }
    out.push_str(&answer.change.render_text(&describe(&answer.module, &scope)));
    if let Some(revision) = answer.kept_as_revision {
        let _ = writeln!(
            out,
            "the layer it replaced is kept as revision {revision}: `settings show {}{} --history`",
            answer.module,
            answer
                .node
                .as_deref()
                .map(|n| format!(" --node {n}"))
                .unwrap_or_default()
        );
    }
    out
}

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

/// `records collect`: what was removed and why the rest was kept.
pub fn declarations_collected(done: &mesh_controller::records::DeclarationsCollected) -> String {
    let plans = if done.open_plans.is_empty() {
        "no open plan".to_owned()
    } else {
        format!("open plans {}", done.open_plans.join(", "))
    };
    let mut out = format!(
        "collected {} declaration(s), {} bytes, that no record names; kept {} named (by what \
         {} node(s) were last sent and {plans})",
        done.collected.count, done.collected.bytes, done.named, done.sent_nodes
    );
    if done.collected.young > 0 {
        let _ = write!(
            out,
            " and {} written less than {} minute(s) ago",
            done.collected.young,
            done.grace_secs / 60
        );
    }
    out.push('\n');
    if done.chunks.count > 0 || done.chunks.young > 0 {
        let _ = writeln!(
            out,
            "collected {} chunk(s) of replaced records, {} bytes ({} kept, written less than {} \
             minute(s) ago)",
            done.chunks.count,
            done.chunks.bytes,
            done.chunks.young,
            done.grace_secs / 60
        );
    }
    out
}

/// What `node enroll` did, for a person.
pub fn enrolled(enrolled: &mesh_controller::enroll::Enrolled) -> String {
    let mut out = format!(
        "enrolled `{}` with NKey {}",
        enrolled.node, enrolled.public_key
    );
    match &enrolled.replaced {
        Some(old) if *old == enrolled.public_key => {
            out.push_str(" (again: it was enrolled with this key already)")
        }
        Some(old) => {
            let _ = write!(
                out,
                "; it replaces {old}, refused by the bus once the next push sends it its users"
            );
        }
        None => {}
    }
    out.push('\n');
    if enrolled.password_dropped {
        let _ = writeln!(
            out,
            "its bus password is dropped from the records: once the next push sends the bus its \
             users, `{}`'s host signs with its seed (`mesh-host serve` without --password-file)",
            enrolled.node
        );
    }
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
                mesh_controller::builds::short_commit(&plan.commit),
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
    if !overview.held.is_empty() {
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
    if !overview.problems.is_empty() {
        out.push_str("problems (shown until resolved):\n");
        for problem in &overview.problems {
            let _ = writeln!(
                out,
                "  {} `{}`: {} (since {}, last {}, by {})",
                problem.kind.word(),
                problem.subject,
                problem.what,
                format_time(problem.since),
                format_time(problem.at),
                problem.by
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
            if let Some(since) = node.silent_since {
                let _ = writeln!(
                    out,
                    "  {}: silent since {} (nothing heard for three heartbeats)",
                    node.node,
                    format_time(since)
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
                    format_time(drift.seen_at)
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
            mesh_controller::builds::short_commit(&plan.commit),
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
                mesh_controller::builds::short_commit(previous),
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
        if rollout.sent > 0 || rollout.held > 0 {
            parts.push(format!(
                "sent {} node(s), {} applied",
                rollout.sent, rollout.applied
            ));
        }
        if rollout.held > 0 {
            parts.push(format!(
                "{} held: their data would move (`status` names them)",
                rollout.held
            ));
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
            mesh_controller::builds::short_commit(&plan.commit),
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
            mesh_controller::builds::short_commit(&build.commit),
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

/// `runtimes` as a person reads it.
/// `broker replicas`.
pub fn replicas(answer: &mesh_controller::broker::ReplicasAnswer) -> String {
    use mesh_controller::broker::ReplicasSource;
    let why = match answer.source {
        ReplicasSource::Given => "--bus-replicas, now recorded",
        ReplicasSource::Recorded => "recorded by an earlier --bus-replicas",
        ReplicasSource::Cluster => "the server reports a cluster",
        ReplicasSource::SingleServer => "the server reports no cluster",
    };
    let mut out = match &answer.cluster {
        Some(cluster) => format!(
            "the mesh keeps {} copies of each stream and bucket ({why}; cluster `{cluster}`)\n",
            answer.wanted
        ),
        None => format!(
            "the mesh keeps {} copies of each stream and bucket ({why}; a single server)\n",
            answer.wanted
        ),
    };
    if answer.short.is_empty() {
        out.push_str("every stream and bucket of the mesh has them\n");
        return out;
    }
    out.push_str("with fewer copies (`mesh-controller broker raise-replicas` raises them):\n");
    for short in &answer.short {
        out.push_str(&format!(
            "  {}: {} of {}\n",
            short.stream, short.replicas, short.wanted
        ));
    }
    out
}

/// `broker raise-replicas`.
pub fn raised_replicas(raised: &[mesh_controller::broker::RaisedLine]) -> String {
    if raised.is_empty() {
        return "nothing to raise: every stream and bucket of the mesh has its copies\n".to_owned();
    }
    raised
        .iter()
        .map(|line| {
            if line.before == line.after {
                format!("{}: {} copies already, left as it is\n", line.stream, line.after)
            } else {
                format!(
                    "{}: raised from {} to {} copies (the new ones catch up while it takes writes)\n",
                    line.stream, line.before, line.after
                )
            }
        })
        .collect()
}

pub fn runtimes(found: &Runtimes) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for r in &found.runtimes {
        let _ = writeln!(
            out,
            "{} on {}: answered in {} ms, {} bytes, modules: {}",
            r.service,
            r.node.as_deref().unwrap_or("(no node)"),
            r.answer_ms,
            r.answer_bytes,
            if r.modules.is_empty() {
                "none".to_owned()
            } else {
                r.modules.join(", ")
            }
        );
    }
    for m in &found.missing {
        let _ = writeln!(
            out,
            "missing on {}: {} (assigned to it, not served there)",
            m.node,
            m.modules.join(", ")
        );
    }
    for e in &found.running_elsewhere {
        let _ = writeln!(
            out,
            "running elsewhere: {} on {} (assigned to {})",
            e.module,
            e.node,
            e.assigned_to.join(", ")
        );
    }
    for u in &found.not_heard {
        let _ = writeln!(
            out,
            "not heard: {} on {} (instance {}) said it is there after {} ms and not what it \
             serves; its modules are not known: none is said to be missing or running elsewhere",
            u.service,
            u.node.as_deref().unwrap_or("(no node)"),
            u.id,
            u.ping_ms
        );
    }
    for u in &found.unreadable {
        let _ = writeln!(
            out,
            "unreadable answer to {} from {}{}: {} (it begins `{}`)",
            u.asked,
            u.service.as_deref().unwrap_or("an unknown service"),
            match (&u.node, &u.id) {
                (Some(node), Some(id)) => format!(" on {node} (instance {id})"),
                (Some(node), None) => format!(" on {node}"),
                (None, Some(id)) => format!(" (instance {id})"),
                (None, None) => String::new(),
            },
            u.error,
            u.answer
        );
    }
    if !found.nodes_not_heard.is_empty() {
        let _ = writeln!(
            out,
            "nodes not heard: {}; their modules are not known",
            found.nodes_not_heard.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "{} runtime(s) heard in {} ms",
        found.runtimes.len(),
        found.waited_ms
    );
    out
}

#[cfg(test)]
mod runtimes_tests {
    //! `runtimes` set against the inventory (rule 25, issue 246): what is said of a heard
    //! node's modules, and that nothing is said of an unheard one's.

    use discovery::{RuntimeHeard, RuntimeUnheard};
    use mesh_bus::discovery::{self, Discovery};
    use mesh_controller::runtimes::{
        compare_with_inventory, runtimes_exit_code, Missing, Runtimes,
    };
    use mesh_model::inventory::Inventory;
    use mesh_model::inventory::InventoryFile;
    use std::time::Duration;

    /// Nodes `bus`, `a`, `b`, `c`: `base` everywhere, `agent` on `a`, `media` on `b`.
    fn inventory() -> Inventory {
        let file: InventoryFile = toml::from_str(
            r#"
            bus-node = "bus"
            [nodes.bus]
            [nodes.a]
            [nodes.b]
            [nodes.c]
            [assignments]
            base = ["bus", "a", "b", "c"]
            agent = ["a"]
            media = ["b"]
            "#,
        )
        .unwrap();
        Inventory {
            file,
            layers: Default::default(),
        }
    }

    fn heard(service: &str, node: &str, modules: &[&str], answer_ms: u64) -> RuntimeHeard {
        RuntimeHeard {
            service: service.into(),
            id: format!("id-{node}"),
            version: "0.1.0".into(),
            node: Some(node.into()),
            modules: modules.iter().map(|m| (*m).to_owned()).collect(),
            ping_time: Duration::from_millis(2),
            answer_time: Duration::from_millis(answer_ms),
            answer_size: 250,
        }
    }

    fn host(node: &str, modules: &[&str]) -> RuntimeHeard {
        heard(discovery::HOST_SERVICE, node, modules, 12)
    }

    fn unheard(node: Option<&str>) -> RuntimeUnheard {
        RuntimeUnheard {
            service: discovery::HOST_SERVICE.into(),
            id: "id-quiet".into(),
            node: node.map(str::to_owned),
            ping_time: Duration::from_millis(3),
        }
    }

    fn compare(runtimes: Vec<RuntimeHeard>, unheard: Vec<RuntimeUnheard>) -> Runtimes {
        compare_with_inventory(
            &inventory(),
            Discovery {
                runtimes,
                unheard,
                waited: Duration::from_millis(760),
            },
        )
    }

    #[test]
    fn every_node_serving_what_it_is_assigned_says_nothing_missing() {
        let found = compare(
            vec![
                host("bus", &["base", "mesh-bus"]),
                host("a", &["agent", "base"]),
                host("b", &["base", "media"]),
                host("c", &["base"]),
            ],
            vec![],
        );
        assert_eq!(found.missing, []);
        assert_eq!(found.running_elsewhere, []);
        assert!(found.nodes_not_heard.is_empty());
        assert_eq!(runtimes_exit_code(&found), 0);
    }

    #[test]
    fn a_heard_node_lacking_a_module_has_it_missing_and_one_serving_anothers_runs_it_elsewhere() {
        let found = compare(
            vec![
                // The controller's machine is not a node, even when named like one.
                heard(discovery::CONTROLLER_SERVICE, "c", &[], 4),
                host("a", &["base"]),
                host("b", &["agent", "base", "media"]),
                host("bus", &["base", "mesh-bus"]),
                host("c", &["base"]),
            ],
            vec![],
        );
        assert_eq!(runtimes_exit_code(&found), 2);
        insta::assert_snapshot!(super::runtimes(&found));
    }

    // Issue 246: a runtime that said it is there and not what it serves is never taken for
    // one serving nothing.
    #[test]
    fn nothing_is_said_of_an_unheard_runtimes_modules() {
        let found = compare(
            vec![
                // `agent` is `a`'s: while `a` is unheard it is not called running elsewhere.
                host("b", &["agent", "base"]),
                host("bus", &["base", "mesh-bus"]),
            ],
            vec![unheard(Some("a"))],
        );
        // `b` is heard: its own missing module is still named; `c`, not heard, is not.
        assert_eq!(
            found.missing,
            [Missing {
                node: "b".into(),
                modules: vec!["media".into()]
            }]
        );
        assert_eq!(found.running_elsewhere, []);
        assert_eq!(found.nodes_not_heard, ["c"]);
        assert_eq!(runtimes_exit_code(&found), 2);
        insta::assert_snapshot!(super::runtimes(&found));
    }

    #[test]
    fn an_unheard_runtime_naming_no_node_leaves_every_node_unknown() {
        let found = compare(
            vec![host("a", &[]), host("b", &["agent"])],
            vec![unheard(None)],
        );
        assert_eq!(found.missing, []);
        assert_eq!(found.running_elsewhere, []);
        assert_eq!(runtimes_exit_code(&found), 3);
    }
}

#[cfg(test)]
mod status_tests {
    use mesh_controller::plans::PlanRecord;
    use mesh_controller::push::NodeStatus;
    use mesh_controller::status::*;
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
            sent: Some(report.declaration.clone()),
            report: Some(report),
            current: true,
            heard_at: None,
            silent_since: None,
        }
    }

    /// A plan whose `site` was sent to `control` at 1000 and waits for its report; its node's
    /// record is written in `home`.
    fn waiting_plan(home: &mesh_controller::home::Home) -> PlanRecord {
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
        home.write_rollout_node(
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
        }
    }

    /// Rule 26: nothing fails silently — a plan's wait to the second, what is behind, and nodes
    /// stuck, mid-change or with a window open all reach `status`.
    #[test]
    fn status_names_the_wait_to_the_second_and_the_nodes_needing_attention() {
        let dir = tempfile::tempdir().unwrap();
        let home = mesh_controller::home::Home::new(dir.path());
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
            held: Vec::new(),
            on_passwords: vec!["laptop".into()],
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
                },
            ],
        };
        let mut overview = overview;
        overview.attention = attention(&overview.nodes);
        insta::assert_snapshot!(super::status(&overview));
    }
}

/// What a plan's rollouts would do across the fleet (`merge --plan-only`, `plans show
/// --preview`): per tier and module, the first machine, then every node by what would happen
/// to it.
pub fn preview(preview: &mesh_controller::preview::Preview) -> String {
    use std::fmt::Write as _;
    let mut out = format!("preview of {}: nothing is built or sent\n", preview.plan);
    for tier in &preview.tiers {
        for module in &tier.modules {
            let _ = writeln!(out, "tier {}: `{}`", tier.tier, module.module);
            if let Some(refused) = &module.refused {
                let _ = writeln!(out, "  not built: it does not validate:");
                for line in refused.lines() {
                    let _ = writeln!(out, "    {line}");
                }
                continue;
            }
            match &module.first {
                Some(first) => {
                    let _ = writeln!(out, "  first machine: {first}");
                }
                None => {
                    let _ = writeln!(out, "  first machine: none (no node would be sent)");
                }
            }
            for change in &module.changes {
                let counts = if change.first_send {
                    format!("first send, {} resource(s)", change.added)
                } else {
                    format!(
                        "{} added, {} changed, {} removed",
                        change.added, change.changed, change.removed
                    )
                };
                let _ = writeln!(out, "  changes {}: {counts}", change.node);
                for recreated in &change.recreated {
                    let _ = writeln!(
                        out,
                        "    recreates {} ({})",
                        recreated.resource,
                        recreated.fields.join(", ")
                    );
                }
            }
            for held in &module.held {
                let _ = writeln!(
                    out,
                    "  held {}: {} (send it with --move {})",
                    held.node,
                    held.moves.join("; "),
                    module.module
                );
            }
            for window in &module.in_window {
                let _ = writeln!(
                    out,
                    "  in a window {}: {} (left alone until it closes)",
                    window.node,
                    window.windows.join("; ")
                );
            }
            if !module.unchanged.is_empty() {
                let _ = writeln!(out, "  unchanged: {}", module.unchanged.join(", "));
            }
            if !module.not_running.is_empty() {
                let _ = writeln!(
                    out,
                    "  not running (not sent): {}",
                    module.not_running.join(", ")
                );
            }
        }
    }
    out
}
