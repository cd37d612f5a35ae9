//! The page at `/`, for people, written in maud's `html!`: every value spliced into it is
//! escaped by construction (text and attribute values alike); only the style sheet, a constant,
//! is spliced unescaped.

use super::counts::{
    node_state, nodes_by_state, rollouts, RolloutView, FINISHED_PLANS_SHOWN, NODES_LISTED_UNASKED,
    NODES_PER_PAGE, NODE_STATES, REFRESH_SECS, RESOURCE_OUTCOMES,
};
use super::snapshot::{PageQuery, Snapshot};
use crate::plans::PlanRecord;
use crate::push::NodeStatus;
use crate::status::{self, Overview};
use maud::{html, Markup, PreEscaped, DOCTYPE};
use mesh_model::plan::PlanState;
use mesh_plan::plans::state_word;
use std::collections::BTreeMap;

/// A span of seconds as a person reads it: `42 s`, `7 min`, `3 h`, `2 d`.
pub(crate) fn age(secs: u64) -> String {
    match secs {
        0..120 => format!("{secs} s"),
        120..7_200 => format!("{} min", secs / 60),
        7_200..172_800 => format!("{} h", secs / 3_600),
        _ => format!("{} d", secs / 86_400),
    }
}

/// Seconds since the epoch as `YYYY-MM-DD HH:MM:SS UTC` (the host's [`mesh_store::clock::rfc3339`],
/// written for a person).
pub(crate) fn utc(secs: u64) -> String {
    let iso = mesh_store::clock::rfc3339(secs);
    format!("{} UTC", iso.trim_end_matches('Z').replacen('T', " ", 1))
}

pub(super) const STYLE: &str = "
body{font-family:system-ui,sans-serif;margin:1.5rem 2rem;color:#1d2330;background:#f6f7f9}
h1{font-size:1.5rem;margin:0 0 .2rem}h2{font-size:1.15rem;margin:1.6rem 0 .6rem}
h3{font-size:1rem;margin:0 0 .5rem}p.meta{color:#5a6270;margin:0 0 1rem}
a{color:#2457c5}code{font-size:.9em}
.cards{display:flex;flex-wrap:wrap;gap:.6rem}
.card{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:.5rem .9rem;min-width:6.5rem}
.card b{display:block;font-size:1.4rem}.card span{color:#5a6270;font-size:.85rem}
table{border-collapse:collapse;background:#fff;border:1px solid #dde1e7;width:100%}
th,td{text-align:left;padding:.3rem .6rem;border-bottom:1px solid #eceff3;vertical-align:top;font-size:.92rem}
th{background:#eef1f5;font-weight:600}
.state{display:inline-block;padding:0 .45rem;border-radius:4px;font-size:.85rem}
.converged,.done,.settled{background:#dcf3e3;color:#14532d}.partial,.stopped,.needs-attention{background:#fde2e1;color:#8a1c1c}
.in-progress{background:#fff1c9;color:#6b4d00}#verdict p{padding:.4rem .7rem;border-radius:6px}
.mid-change,.first,.rest,.held{background:#fff1c9;color:#6b4d00}
.silent,.unreadable,.no-report,.not-started,.left{background:#e7e9ee;color:#3d4452}
.plan{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:.8rem 1rem;margin:0 0 .8rem}
.bar{display:flex;width:16rem;height:.8rem;background:#e7e9ee;border-radius:3px;overflow:hidden}
.bar i{display:block;height:100%}.bar .a{background:#2f9e58}.bar .f{background:#e0a800}.bar .h{background:#c2410c}
.reason{color:#8a1c1c}.quiet{color:#5a6270}ul.problems{background:#fff;border:1px solid #dde1e7;padding:.6rem 1.6rem;margin:0}
";

fn state_badge(state: &str) -> Markup {
    html! { span class={ "state " (state) } { (state) } }
}

/// The page at `/`: counts by state, what needs attention, the plans with their rollouts
/// drawn, and the nodes (those needing attention, or every node behind `?nodes=all`).
pub(crate) fn page(snapshot: &Snapshot, query: PageQuery) -> String {
    let overview = &snapshot.overview;
    let now = snapshot.now;
    let by_state = nodes_by_state(overview);
    let needing = overview.attention.len()
        + overview.stopped.len()
        + overview.held.len()
        + overview.problems.len()
        + overview.pending.iter().filter(|p| p.plan.is_none()).count();
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content=(REFRESH_SECS);
                title { "mesh status" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { "mesh status" }
                p class="meta" {
                    "read at " (utc(now)) " · reloads every " (REFRESH_SECS) " s · "
                    a href="/status.json" { "status.json" } " · "
                    a href="/metrics" { "metrics" }
                }
                section id="summary" {
                    div class="cards" {
                        div class="card" { b { (overview.nodes.len()) } span { "nodes" } }
                        @for state in NODE_STATES {
                            div class="card" data-state=(state) {
                                b { (by_state.get(state).copied().unwrap_or(0)) }
                                span { (state) }
                            }
                        }
                        div class="card" { b { (overview.open_plans.len()) } span { "open plans" } }
                        div class="card" { b { (needing) } span { "need attention" } }
                    }
                }
                (verdict_section(snapshot))
                (attention_section(overview, now))
                (plans_section(snapshot))
                (nodes_section(overview, now, query))
            }
        }
    }
    .into_string()
        + "\n"
}

/// What `status` comes to, as it exits, and what is under way (what needs attention is the
/// section after it).
fn verdict_section(snapshot: &Snapshot) -> Markup {
    let verdict = &snapshot.verdict;
    html! {
        section id="verdict" {
            p class=(verdict.health.word()) {
                "Verdict: " b { (verdict.health.word()) }
                " · " (verdict.attention.len()) " needing attention, "
                (verdict.in_progress.len()) " under way · `status` exits "
                (verdict.health.exit_code())
            }
            @if !verdict.in_progress.is_empty() {
                h2 { "Under way" }
                ul class="progress" {
                    @for reason in &verdict.in_progress { li { (reason.message) } }
                }
            }
        }
    }
}

fn attention_section(overview: &Overview, now: u64) -> Markup {
    let daemon_lines = overview
        .daemon
        .as_ref()
        .map(|daemon| daemon.attention())
        .unwrap_or_default();
    html! {
        section id="attention" {
            h2 { "Needs attention" }
            @if !overview.needs_attention() {
                p class="quiet" { "Nothing needs attention." }
            } @else {
                @if !daemon_lines.is_empty() {
                    h3 { "The daemon" }
                    ul class="problems" { @for line in &daemon_lines { li { (line) } } }
                }
                @if !overview.problems.is_empty() {
                    h3 { "Problems" }
                    ul class="problems" {
                        @for problem in &overview.problems {
                            li {
                                b { (problem.subject) }
                                " (" (problem.kind.word()) ", since "
                                (age(now.saturating_sub(problem.since))) " ago"
                                @if problem.attempts > 0 { ", attempt " (problem.attempts) }
                                "): " (problem.what)
                            }
                        }
                    }
                }
                @if !overview.stopped.is_empty() {
                    h3 { "Stopped rollouts" }
                    table {
                        tr { th { "plan" } th { "module" } th { "at" } th { "why" } }
                        @for stopped in &overview.stopped {
                            tr {
                                td { (stopped.plan) }
                                td { (stopped.module) }
                                td {
                                    @if stopped.node.is_empty() { "its build" }
                                    @else { (stopped.node) }
                                }
                                td class="reason" { (stopped.reason) }
                            }
                        }
                    }
                }
                @if !overview.held.is_empty() {
                    h3 { "Held" }
                    table {
                        tr { th { "plan" } th { "module" } th { "node" } th { "why" } }
                        @for held in &overview.held {
                            tr {
                                td { (held.plan) }
                                td { (held.module) }
                                td { (held.node) }
                                td {
                                    (held.moves.iter().map(ToString::to_string)
                                        .chain(held.orphans.iter().map(ToString::to_string))
                                        .chain(held.unset.iter()
                                            .map(|u| format!("{u} is required and unset")))
                                        .collect::<Vec<_>>().join("; "))
                                }
                            }
                        }
                    }
                }
                @if overview.pending.iter().any(|p| p.plan.is_none()) {
                    h3 { "Pending, and nothing will send them" }
                    table {
                        tr { th { "node" } th { "what differs from what it was sent" } th { "what sends it" } }
                        @for pending in overview.pending.iter().filter(|p| p.plan.is_none()) {
                            tr data-node=(pending.node) {
                                td { (pending.node) }
                                td { (pending.differences_words()) }
                                td { code { (pending.command) } }
                            }
                        }
                    }
                }
                @if !overview.attention.is_empty() {
                    h3 { "Nodes" }
                    table {
                        tr { th { "node" } th { "what" } }
                        @for attention in &overview.attention {
                            tr data-node=(attention.node) {
                                td { (attention.node) }
                                td { (status::attention_words(attention)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn plans_section(snapshot: &Snapshot) -> Markup {
    let open = snapshot.plans.iter().filter(|r| r.plan.state.is_open());
    let finished = snapshot
        .plans
        .iter()
        .rev()
        .filter(|r| !r.plan.state.is_open())
        .take(FINISHED_PLANS_SHOWN);
    let shown: Vec<&PlanRecord> = open.chain(finished).collect();
    html! {
        section id="plans" {
            h2 { "Plans" }
            @if shown.is_empty() {
                p class="quiet" { "No plan yet: a merge makes one." }
            }
            @for record in shown { (plan_card(snapshot, record)) }
        }
    }
}

fn plan_card(snapshot: &Snapshot, record: &PlanRecord) -> Markup {
    let plan = &record.plan;
    let waiting = snapshot
        .overview
        .open_plans
        .iter()
        .find(|p| p.id == plan.id);
    html! {
        div class="plan" data-plan=(plan.id) {
            h3 {
                (plan.id) " · " (plan.repository) " " (plan.branch) " at "
                code { (crate::catalogue::builds::short_commit(&plan.commit)) } " "
                (state_badge(state_word(&plan.state)))
            }
            @match &plan.state {
                PlanState::Superseded { by } => { p class="quiet" { "superseded by " (by) } }
                PlanState::Closed { note } => { p class="quiet" { "closed: " (note) } }
                // A stopped plan's rollout row says where and why.
                PlanState::Stopped { .. }
                | PlanState::Building
                | PlanState::RollingOut
                | PlanState::Done => {}
            }
            @if let Some(waiting) = waiting {
                p { "waits on " (waiting.waits_on) " (for " (age(waiting.waiting_secs)) ")" }
            }
            table {
                tr {
                    th { "module" } th { "state" } th { "first machine" } th { "progress" }
                    th { "applied" } th { "in flight" } th { "held" } th { "waiting on" }
                }
                @for view in rollouts(record) { (rollout_rows(&view)) }
            }
        }
    }
}

fn rollout_rows(view: &RolloutView) -> Markup {
    html! {
        tr class="rollout" data-module=(view.module) data-state=(view.state) {
            td { (view.module) }
            td { (state_badge(view.state)) }
            td { @if let Some(first) = &view.first { (first) } }
            @match &view.progress {
                Some(progress) => {
                    @let total = progress.total.max(1) as f64;
                    @let width = |n: usize| format!("width:{:.1}%", n as f64 * 100.0 / total);
                    td {
                        div class="bar" title={ (progress.applied) " of " (progress.total) " applied" } {
                            i class="a" style=(width(progress.applied)) {}
                            i class="f" style=(width(progress.in_flight)) {}
                            i class="h" style=(width(progress.held)) {}
                        }
                    }
                    td { (progress.applied) " of " (progress.total) }
                    td { (progress.in_flight) }
                    td { (progress.held) }
                    td { @if let Some(on) = &progress.waiting_on { (on) } }
                }
                None => {
                    td {
                        span class="quiet" {
                            @if view.built { "built, not begun" } @else { "not built" }
                        }
                    }
                    td {} td {} td {} td {}
                }
            }
        }
        @if let Some((node, reason)) = &view.stopped {
            tr {
                td {}
                td colspan="7" class="reason" {
                    "stopped at "
                    @if node.is_empty() { "its build" } @else { (node) }
                    ": " (reason)
                }
            }
        }
    }
}

fn nodes_section(overview: &Overview, now: u64, query: PageQuery) -> Markup {
    let total = overview.nodes.len();
    let listed_all = query.all_nodes || total <= NODES_LISTED_UNASKED;
    let attention: std::collections::HashMap<&str, &status::NodeAttention> = overview
        .attention
        .iter()
        .map(|a| (a.node.as_str(), a))
        .collect();
    let pages = if listed_all {
        total.div_ceil(NODES_PER_PAGE).max(1)
    } else {
        1
    };
    let page = query.page.min(pages);
    let shown: Vec<&NodeStatus> = if listed_all {
        overview
            .nodes
            .iter()
            .skip((page - 1) * NODES_PER_PAGE)
            .take(NODES_PER_PAGE)
            .collect()
    } else {
        overview
            .nodes
            .iter()
            .filter(|n| attention.contains_key(n.node.as_str()) || node_state(n) != "converged")
            .collect()
    };
    html! {
        section id="nodes" {
            h2 { "Nodes" }
            @if !listed_all {
                p {
                    (total) " nodes: those not converged or needing attention are listed ("
                    (shown.len()) "); " a href="/?nodes=all" { "every node" } ", "
                    (NODES_PER_PAGE) " a page."
                }
            } @else if pages > 1 {
                p {
                    "page " (page) " of " (pages) ": "
                    @if page > 1 {
                        a href={ "/?nodes=all&page=" (page - 1) } { "previous" } " "
                    }
                    @if page < pages {
                        a href={ "/?nodes=all&page=" (page + 1) } { "next" }
                    }
                }
            }
            table {
                tr {
                    th { "node" } th { "state" } th { "declaration" } th { "last report" }
                    th { "resources" } th { "modules" } th { "attention" }
                }
                @for node in shown {
                    (node_row(node, attention.get(node.node.as_str()).copied(), now))
                }
            }
        }
    }
}

fn node_row(node: &NodeStatus, attention: Option<&status::NodeAttention>, now: u64) -> Markup {
    let state = node_state(node);
    let declaration = match (&node.sent, node.current) {
        (None, _) => "never sent",
        (Some(_), true) => "current",
        (Some(_), false) => "not the one sent",
    };
    let mut outcomes: BTreeMap<&'static str, usize> = BTreeMap::new();
    for outcome in node.report.iter().flat_map(|r| r.resources.values()) {
        *outcomes.entry(outcome.word()).or_default() += 1;
    }
    let counted: Vec<(&str, usize)> = RESOURCE_OUTCOMES
        .iter()
        .filter_map(|word| Some((*word, *outcomes.get(word)?)))
        .collect();
    let modules: Vec<&str> = node.modules.iter().map(String::as_str).collect();
    html! {
        tr class="node" data-node=(node.node) data-state=(state) {
            td {
                (node.node)
                @if node.bus_node { " " span class="quiet" { "(holds the bus)" } }
            }
            td { (state_badge(state)) }
            td { (declaration) }
            td {
                @match node.heard_at {
                    Some(at) => { span title=(utc(at)) { (age(now.saturating_sub(at))) " ago" } }
                    None => { "never" }
                }
            }
            td {
                @for (at, (word, count)) in counted.iter().enumerate() {
                    @if at > 0 { ", " }
                    @if matches!(*word, "failed" | "stuck") {
                        span class="reason" { (count) " " (word) }
                    } @else {
                        (count) " " (word)
                    }
                }
            }
            td { (modules.join(", ")) }
            td { @if let Some(attention) = attention { (status::attention_words(attention)) } }
        }
    }
}
