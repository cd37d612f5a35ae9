//! What a person reads: declarations, push results, status, plans, merges and builds, as text.
//! `status`, `runtimes` and a plan's preview have files of their own.

mod preview;
mod runtimes;
mod status;

pub use preview::preview;
pub use runtimes::runtimes;
pub use status::{nodes, status};

use mesh_controller::bus::Runtimes;
use mesh_controller::plans::MergeOutcome;
use mesh_controller::plans::NamedBuild;
use mesh_controller::plans::PlanRecord;
use mesh_controller::settings::describe;
use mesh_controller::settings::Answer;
use mesh_controller::settings::Shown;
use mesh_controller::status::Overview;
use mesh_controller::NodeResult;
use mesh_controller::NodeStatus;
use mesh_controller::PushResult;
use mesh_host::{finding_line, machine_word, outcome_line, short};
use mesh_model::declaration::{Declaration, Spec};
use mesh_model::plan::{Plan, PlanState, RolloutOutcome};
use mesh_plan::plans::{state_word, Waiting};
use mesh_store::clock::rfc3339;
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
    for waiting in &shown.waiting {
        let _ = writeln!(out, "{waiting}");
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
                rfc3339(record.replaced_at),
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
    if let Some(from) = &answer.checked_against {
        let _ = writeln!(
            out,
            "checked against {from}, the newest version the mesh knows"
        );
    }
    for waiting in &answer.waiting {
        let _ = writeln!(out, "{waiting}");
    }
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

/// What `status ack` did: the drift it clears.
pub fn acked(acked: &mesh_controller::status::Acked) -> String {
    let mut out = format!(
        "{}: drift {} put back and seen by {} acknowledged\n",
        acked.node,
        acked
            .resource
            .as_deref()
            .map_or("of every resource".to_owned(), |r| format!("of {r}")),
        rfc3339(acked.at)
    );
    for drift in &acked.cleared {
        let _ = writeln!(
            out,
            "  cleared: {} {}: was {}, found {} (seen {})",
            drift.resource,
            drift.field,
            drift.was,
            drift.found,
            rfc3339(drift.seen_at)
        );
    }
    out
}

/// What `settings rename` did, one layer a line.
pub fn settings_renamed(renamed: &mesh_controller::settings::Renamed) -> String {
    let mut out = format!(
        "`{}`: renamed `{}` to `{}` (checked against {})\n",
        renamed.module, renamed.old, renamed.new, renamed.checked_against
    );
    for answer in &renamed.layers {
        let scope = match &answer.node {
            Some(node) => mesh_model::inventory::LayerScope::Node(node.clone()),
            None => mesh_model::inventory::LayerScope::Mesh,
        };
        let value = answer
            .change
            .added
            .first()
            .map(|added| added.value.to_string())
            .unwrap_or_default();
        let _ = write!(
            out,
            "  {}: {} = {value}",
            describe(&answer.module, &scope),
            renamed.new
        );
        match answer.kept_as_revision {
            Some(revision) => {
                let _ = writeln!(
                    out,
                    " (the layer it replaced is kept as revision {revision})"
                );
            }
            None => out.push('\n'),
        }
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
                let content = match (&f.content, &f.source, &f.sealed) {
                    (Some(content), _, _) => format!("{} bytes", content.len()),
                    (None, Some(source), _) => {
                        format!("{} of the archive, {}", source.path, short(&source.sha256))
                    }
                    // Rendered on its host: its secrets by key and keyed digest.
                    (None, None, Some(pieces)) => mesh_model::secret::describe_sealed(pieces),
                    (None, None, None) => "no content".to_owned(),
                };
                format!(
                    "{} ({:04o} {}:{}, {content})",
                    f.path, f.mode, f.owner, f.group
                )
            }
            Spec::Directory(d) => format!("{}/ ({:04o} {}:{})", d.path, d.mode, d.owner, d.group),
            Spec::Membership(m) => format!("account {} in group {}", m.account, m.group),
            Spec::Network(n) => format!("podman network {}", n.name),
            Spec::Line(l) => format!("line in {}: {}", l.path, l.line),
            Spec::Account(a) => {
                let id = |id: Option<u32>| id.map_or("any".to_owned(), |id| id.to_string());
                format!("account {} (uid {}, gid {})", a.name, id(a.uid), id(a.gid))
            }
            Spec::Job(j) => {
                let command = if j.run.command.is_empty() {
                    String::new()
                } else {
                    format!(" {}", j.run.command.join(" "))
                };
                format!("job {}: {}{command}, to its end", j.run.name, j.run.image)
            }
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
                let mut shown = format!(
                    "{} [{}] mounts {}",
                    c.image,
                    c.command.join(" "),
                    if mounts.is_empty() {
                        "none".to_owned()
                    } else {
                        mounts.join(", ")
                    }
                );
                if let Some(network) = &c.network {
                    shown.push_str(&format!(" on {network}"));
                }
                if !c.ports.is_empty() {
                    let ports: Vec<String> = c.ports.iter().map(ToString::to_string).collect();
                    shown.push_str(&format!(" publishes {}", ports.join(", ")));
                }
                shown
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
            NodeResult::Held { moves, downgrades } => {
                if !moves.is_empty() {
                    out.push_str(
                        &mesh_plan::PushDecision::Hold {
                            moves: moves.clone(),
                        }
                        .render_text(&result.node),
                    );
                }
                for downgrade in downgrades {
                    let _ = writeln!(
                        out,
                        "{}: held: {downgrade}; `--downgrade {}` sends it",
                        result.node, downgrade.module
                    );
                }
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
    if report.host_failure.is_some() {
        // Nothing was applied: its resources are not known to be declared or not.
        return "the host cannot apply".to_owned();
    }
    if counts.is_empty() {
        return "nothing declared".to_owned();
    }
    counts
        .iter()
        .map(|(word, n)| format!("{n} {word}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `records collect`: what was removed and why the rest was kept.
pub fn declarations_collected(done: &mesh_controller::records::DeclarationsCollected) -> String {
    let plans = if done.open_plans.is_empty() {
        "no open plan".to_owned()
    } else {
        format!("open plans {}", done.open_plans.join(", "))
    };
    let mut out = String::new();
    if !done.plans.plans.is_empty() {
        let _ = writeln!(
            out,
            "folded {} plan(s) that ended ({}): {} record(s) of their nodes removed, a summary \
             kept in each plan",
            done.plans.plans.len(),
            done.plans.plans.join(", "),
            done.plans.node_records
        );
    }
    if !done.plans.removed_plans.is_empty() {
        let _ = writeln!(
            out,
            "removed {} plan(s) older than the newest kept: {}",
            done.plans.removed_plans.len(),
            done.plans.removed_plans.join(", ")
        );
    }
    let _ = write!(
        out,
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
pub fn enrolled(enrolled: &mesh_controller::bus::Enrolled) -> String {
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
            mesh_controller::catalogue::short_commit(&plan.commit),
            rfc3339(plan.made_at),
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
        rfc3339(plan.made_at)
    );
    let _ = writeln!(out, "state: {}", state_text(&plan.state));
    match &record.previous_commit {
        None => out.push_str("changed: the repository's first merge: every module\n"),
        Some(previous) => {
            let _ = writeln!(
                out,
                "changed: {} path(s) since {}{}",
                record.changed_paths,
                mesh_controller::catalogue::short_commit(previous),
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
        MergeOutcome::AlreadyPlanned {
            plan,
            driven: false,
        } => format!(
            "{} was already made for `{}` {} at {} ({}); no new plan\n",
            plan.id,
            plan.repository,
            plan.branch,
            mesh_controller::catalogue::short_commit(&plan.commit),
            state_text(&plan.state)
        ),
        MergeOutcome::AlreadyPlanned { plan, driven: true } => format!(
            "{} was already made for `{}` {} at {}, and was open: driven; {}",
            plan.id,
            plan.repository,
            plan.branch,
            mesh_controller::catalogue::short_commit(&plan.commit),
            plan_summary(plan)
        ),
        MergeOutcome::Planned { plan, .. } => plan_summary(plan),
    }
}

/// A merge announced to the daemon (`merge --announce`), in one line.
pub fn announced(announced: &mesh_controller::bus::Announced) -> String {
    format!(
        "{} the merge of `{}` {} at {} to the daemon (events stream sequence {}){}\n",
        if announced.already_announced {
            "already announced"
        } else {
            "announced"
        },
        announced.repository,
        announced.branch,
        mesh_controller::catalogue::short_commit(&announced.commit),
        announced.sequence,
        if announced.already_announced {
            ": it is planned once"
        } else {
            ": it plans and drives it; `plans` shows the plan"
        }
    )
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
            mesh_controller::catalogue::short_commit(&build.commit),
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
pub fn replicas(answer: &mesh_controller::bus::ReplicasAnswer) -> String {
    use mesh_controller::bus::ReplicasSource;
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
pub fn raised_replicas(raised: &[mesh_controller::bus::RaisedLine]) -> String {
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

/// A time (seconds since the epoch) in this machine's own time zone, with its offset, as a
/// person reads it: `2026-12-07 23:10:04 +01:00`.
pub fn local_time(secs: u64) -> String {
    i64::try_from(secs)
        .ok()
        .and_then(|secs| chrono::DateTime::from_timestamp(secs, 0))
        .map(|at| {
            at.with_timezone(&chrono::Local)
                .format("%Y-%m-%d %H:%M:%S %:z")
                .to_string()
        })
        .unwrap_or_else(|| mesh_store::clock::rfc3339(secs))
}
