//! What a person reads: declarations, push results and status, as text.

use crate::push::{NodeResult, NodeStatus, PushResult};
use mesh_host::{machine_word, outcome_detail, short};
use mesh_model::declaration::{Declaration, Spec};
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
            Spec::File(f) => format!(
                "{} ({:04o} {}:{}, {} bytes)",
                f.path,
                f.mode,
                f.owner,
                f.group,
                f.content.len()
            ),
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
                    if !outcome.took()
                        || matches!(outcome, mesh_model::report::Outcome::Removed { .. })
                    {
                        let _ = writeln!(
                            out,
                            "  {:<10} {id}{}",
                            outcome.word(),
                            outcome_detail(outcome)
                        );
                    }
                }
                for finding in &report.findings {
                    let _ = writeln!(out, "  note: {}: {}", finding.resource, finding.message);
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

/// Every node's status, a node a paragraph.
pub fn status(nodes: &[NodeStatus]) -> String {
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
                        let _ = writeln!(
                            out,
                            "  {:<10} {id}{}",
                            outcome.word(),
                            outcome_detail(outcome)
                        );
                    }
                }
            }
        }
    }
    out
}
