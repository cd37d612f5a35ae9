//! The page at `/`, for people: everything rendered from a record escaped for HTML.

use super::counts::{
    node_state, nodes_by_state, rollouts, FINISHED_PLANS_SHOWN, NODES_LISTED_UNASKED,
    NODES_PER_PAGE, NODE_STATES, REFRESH_SECS, RESOURCE_OUTCOMES,
};
use super::pages::{PageQuery, Snapshot};
use crate::plans::PlanRecord;
use crate::status::{self, Overview};
use mesh_model::plan::PlanState;
use mesh_plan::plans::state_word;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// `text` escaped for HTML text and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A span of seconds as a person reads it: `42 s`, `7 min`, `3 h`, `2 d`.
pub fn age(secs: u64) -> String {
    match secs {
        0..120 => format!("{secs} s"),
        120..7_200 => format!("{} min", secs / 60),
        7_200..172_800 => format!("{} h", secs / 3_600),
        _ => format!("{} d", secs / 86_400),
    }
}

/// Seconds since the epoch as `YYYY-MM-DD HH:MM:SS UTC` (the host's [`mesh_host::format_time`],
/// written for a person).
pub fn utc(secs: u64) -> String {
    let iso = mesh_host::format_time(secs);
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
.converged,.done{background:#dcf3e3;color:#14532d}.partial,.stopped{background:#fde2e1;color:#8a1c1c}
.mid-change,.first,.rest,.held{background:#fff1c9;color:#6b4d00}
.silent,.unreadable,.no-report,.not-started,.left{background:#e7e9ee;color:#3d4452}
.plan{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:.8rem 1rem;margin:0 0 .8rem}
.bar{display:flex;width:16rem;height:.8rem;background:#e7e9ee;border-radius:3px;overflow:hidden}
.bar i{display:block;height:100%}.bar .a{background:#2f9e58}.bar .f{background:#e0a800}.bar .h{background:#c2410c}
.reason{color:#8a1c1c}.quiet{color:#5a6270}ul.problems{background:#fff;border:1px solid #dde1e7;padding:.6rem 1.6rem;margin:0}
";

fn state_badge(out: &mut String, state: &str) {
    let _ = write!(out, "<span class=\"state {0}\">{0}</span>", escape(state));
}

/// The page at `/`: counts by state, what needs attention, the plans with their rollouts
/// drawn, and the nodes (those needing attention, or every node behind `?nodes=all`).
pub fn page(snapshot: &Snapshot, query: PageQuery) -> String {
    let overview = &snapshot.overview;
    let now = snapshot.now;
    let mut out = String::with_capacity(8_192);
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECS}\">\
         <title>mesh status</title><style>{STYLE}</style></head><body>\n\
         <h1>mesh status</h1><p class=\"meta\">read at {} · reloads every {REFRESH_SECS} s · \
         <a href=\"/status.json\">status.json</a> · <a href=\"/metrics\">metrics</a></p>\n",
        utc(now)
    );

    // Counts.
    let by_state = nodes_by_state(overview);
    out.push_str("<section id=\"summary\"><div class=\"cards\">");
    let _ = write!(
        out,
        "<div class=\"card\"><b>{}</b><span>nodes</span></div>",
        overview.nodes.len()
    );
    for state in NODE_STATES {
        let count = by_state.get(state).copied().unwrap_or(0);
        let _ = write!(
            out,
            "<div class=\"card\" data-state=\"{state}\"><b>{count}</b><span>{state}</span></div>"
        );
    }
    let _ = writeln!(
        out,
        "<div class=\"card\"><b>{}</b><span>open plans</span></div>\
         <div class=\"card\"><b>{}</b><span>need attention</span></div></div></section>",
        overview.open_plans.len(),
        overview.attention.len()
            + overview.stopped.len()
            + overview.held.len()
            + overview.problems.len()
    );

    attention_section(&mut out, overview, now);
    plans_section(&mut out, snapshot);
    nodes_section(&mut out, overview, now, query);
    out.push_str("</body></html>\n");
    out
}

fn attention_section(out: &mut String, overview: &Overview, now: u64) {
    out.push_str("<section id=\"attention\"><h2>Needs attention</h2>\n");
    if !overview.needs_attention() {
        out.push_str("<p class=\"quiet\">Nothing needs attention.</p></section>\n");
        return;
    }
    if let Some(daemon) = &overview.daemon {
        let lines = daemon.attention();
        if !lines.is_empty() {
            out.push_str("<h3>The daemon</h3><ul class=\"problems\">");
            for line in lines {
                let _ = write!(out, "<li>{}</li>", escape(&line));
            }
            out.push_str("</ul>\n");
        }
    }
    if !overview.problems.is_empty() {
        out.push_str("<h3>Problems</h3><ul class=\"problems\">");
        for problem in &overview.problems {
            let _ = write!(
                out,
                "<li><b>{}</b> ({}, since {} ago{}): {}</li>",
                escape(&problem.subject),
                escape(problem.kind.word()),
                age(now.saturating_sub(problem.since)),
                match problem.attempts {
                    0 => String::new(),
                    n => format!(", attempt {n}"),
                },
                escape(&problem.what)
            );
        }
        out.push_str("</ul>\n");
    }
    if !overview.stopped.is_empty() {
        out.push_str(
            "<h3>Stopped rollouts</h3><table><tr><th>plan</th><th>module</th><th>at</th>\
             <th>why</th></tr>",
        );
        for stopped in &overview.stopped {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"reason\">{}</td></tr>",
                escape(&stopped.plan),
                escape(&stopped.module),
                if stopped.node.is_empty() {
                    "its build".to_owned()
                } else {
                    escape(&stopped.node)
                },
                escape(&stopped.reason)
            );
        }
        out.push_str("</table>\n");
    }
    if !overview.held.is_empty() {
        out.push_str(
            "<h3>Held for a move</h3><table><tr><th>plan</th><th>module</th><th>node</th>\
             <th>moves</th></tr>",
        );
        for held in &overview.held {
            let moves: Vec<String> = held.moves.iter().map(ToString::to_string).collect();
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&held.plan),
                escape(&held.module),
                escape(&held.node),
                escape(&moves.join("; "))
            );
        }
        out.push_str("</table>\n");
    }
    if !overview.attention.is_empty() {
        out.push_str("<h3>Nodes</h3><table><tr><th>node</th><th>what</th></tr>");
        for attention in &overview.attention {
            let _ = write!(
                out,
                "<tr data-node=\"{0}\"><td>{0}</td><td>{1}</td></tr>",
                escape(&attention.node),
                escape(&status::attention_words(attention))
            );
        }
        out.push_str("</table>\n");
    }
    out.push_str("</section>\n");
}

fn plans_section(out: &mut String, snapshot: &Snapshot) {
    out.push_str("<section id=\"plans\"><h2>Plans</h2>\n");
    let open: Vec<&PlanRecord> = snapshot
        .plans
        .iter()
        .filter(|r| r.plan.state.is_open())
        .collect();
    let finished: Vec<&PlanRecord> = snapshot
        .plans
        .iter()
        .rev()
        .filter(|r| !r.plan.state.is_open())
        .take(FINISHED_PLANS_SHOWN)
        .collect();
    if open.is_empty() && finished.is_empty() {
        out.push_str("<p class=\"quiet\">No plan yet: a merge makes one.</p>");
    }
    for record in open.into_iter().chain(finished) {
        let plan = &record.plan;
        let state = state_word(&plan.state);
        let _ = write!(
            out,
            "<div class=\"plan\" data-plan=\"{}\"><h3>{} · {} {} at <code>{}</code> ",
            escape(&plan.id),
            escape(&plan.id),
            escape(&plan.repository),
            escape(&plan.branch),
            escape(crate::builds::short_commit(&plan.commit))
        );
        state_badge(out, state);
        out.push_str("</h3>");
        match &plan.state {
            // Its rollout's row says where and why.
            PlanState::Stopped { .. } => {}
            PlanState::Superseded { by } => {
                let _ = write!(out, "<p class=\"quiet\">superseded by {}</p>", escape(by));
            }
            PlanState::Closed { note } => {
                let _ = write!(out, "<p class=\"quiet\">closed: {}</p>", escape(note));
            }
            PlanState::Building | PlanState::RollingOut | PlanState::Done => {}
        }
        if let Some(waiting) = snapshot
            .overview
            .open_plans
            .iter()
            .find(|p| p.id == plan.id)
        {
            let _ = write!(
                out,
                "<p>waits on {} (for {})</p>",
                escape(&waiting.waits_on),
                age(waiting.waiting_secs)
            );
        }
        out.push_str(
            "<table><tr><th>module</th><th>state</th><th>first machine</th><th>progress</th>\
             <th>applied</th><th>in flight</th><th>held</th><th>waiting on</th></tr>",
        );
        for view in rollouts(record) {
            let _ = write!(
                out,
                "<tr class=\"rollout\" data-module=\"{0}\" data-state=\"{1}\"><td>{0}</td><td>",
                escape(&view.module),
                view.state
            );
            state_badge(out, view.state);
            let _ = write!(
                out,
                "</td><td>{}</td><td>",
                view.first.as_deref().map(escape).unwrap_or_default()
            );
            match &view.progress {
                Some(progress) => {
                    let total = progress.total.max(1) as f64;
                    let width = |n: usize| n as f64 * 100.0 / total;
                    let _ = write!(
                        out,
                        "<div class=\"bar\" title=\"{} of {} applied\"><i class=\"a\" \
                         style=\"width:{:.1}%\"></i><i class=\"f\" style=\"width:{:.1}%\"></i>\
                         <i class=\"h\" style=\"width:{:.1}%\"></i></div></td>\
                         <td>{} of {}</td><td>{}</td><td>{}</td><td>{}</td>",
                        progress.applied,
                        progress.total,
                        width(progress.applied),
                        width(progress.in_flight),
                        width(progress.held),
                        progress.applied,
                        progress.total,
                        progress.in_flight,
                        progress.held,
                        progress
                            .waiting_on
                            .as_deref()
                            .map(escape)
                            .unwrap_or_default()
                    );
                }
                None => {
                    let _ =
                        write!(
                        out,
                        "<span class=\"quiet\">{}</span></td><td></td><td></td><td></td><td></td>",
                        if view.built { "built, not begun" } else { "not built" }
                    );
                }
            }
            out.push_str("</tr>");
            if let Some((node, reason)) = &view.stopped {
                let _ = write!(
                    out,
                    "<tr><td></td><td colspan=\"7\" class=\"reason\">stopped at {}: {}</td></tr>",
                    if node.is_empty() {
                        "its build".to_owned()
                    } else {
                        escape(node)
                    },
                    escape(reason)
                );
            }
        }
        out.push_str("</table></div>\n");
    }
    out.push_str("</section>\n");
}

fn nodes_section(out: &mut String, overview: &Overview, now: u64, query: PageQuery) {
    let total = overview.nodes.len();
    let listed_all = query.all_nodes || total <= NODES_LISTED_UNASKED;
    out.push_str("<section id=\"nodes\"><h2>Nodes</h2>\n");
    let attention: std::collections::HashMap<&str, &status::NodeAttention> = overview
        .attention
        .iter()
        .map(|a| (a.node.as_str(), a))
        .collect();
    let (shown, pages): (Vec<&crate::push::NodeStatus>, usize) = if listed_all {
        let pages = total.div_ceil(NODES_PER_PAGE).max(1);
        let page = query.page.min(pages);
        (
            overview
                .nodes
                .iter()
                .skip((page - 1) * NODES_PER_PAGE)
                .take(NODES_PER_PAGE)
                .collect(),
            pages,
        )
    } else {
        (
            overview
                .nodes
                .iter()
                .filter(|n| attention.contains_key(n.node.as_str()) || node_state(n) != "converged")
                .collect(),
            1,
        )
    };
    if !listed_all {
        let _ = write!(
            out,
            "<p>{total} nodes: those not converged or needing attention are listed \
             ({}); <a href=\"/?nodes=all\">every node</a>, {NODES_PER_PAGE} a page.</p>",
            shown.len()
        );
    } else if pages > 1 {
        let page = query.page.min(pages);
        let _ = write!(out, "<p>page {page} of {pages}: ");
        if page > 1 {
            let _ = write!(
                out,
                "<a href=\"/?nodes=all&amp;page={}\">previous</a> ",
                page - 1
            );
        }
        if page < pages {
            let _ = write!(
                out,
                "<a href=\"/?nodes=all&amp;page={}\">next</a>",
                page + 1
            );
        }
        out.push_str("</p>");
    }
    out.push_str(
        "<table><tr><th>node</th><th>state</th><th>declaration</th><th>last report</th>\
         <th>resources</th><th>modules</th><th>attention</th></tr>",
    );
    for node in shown {
        let state = node_state(node);
        let _ = write!(
            out,
            "<tr class=\"node\" data-node=\"{0}\" data-state=\"{1}\"><td>{0}{2}</td><td>",
            escape(&node.node),
            state,
            if node.bus_node {
                " <span class=\"quiet\">(holds the bus)</span>"
            } else {
                ""
            }
        );
        state_badge(out, state);
        let declaration = match (&node.sent, node.current) {
            (None, _) => "never sent",
            (Some(_), true) => "current",
            (Some(_), false) => "not the one sent",
        };
        let heard = node
            .heard_at
            .map(|at| {
                format!(
                    "<span title=\"{}\">{} ago</span>",
                    utc(at),
                    age(now.saturating_sub(at))
                )
            })
            .unwrap_or_else(|| "never".to_owned());
        let modules: Vec<&str> = node.modules.iter().map(String::as_str).collect();
        let mut outcomes: BTreeMap<&'static str, usize> = BTreeMap::new();
        for outcome in node.report.iter().flat_map(|r| r.resources.values()) {
            *outcomes.entry(outcome.word()).or_default() += 1;
        }
        let resources: Vec<String> = RESOURCE_OUTCOMES
            .iter()
            .filter_map(|word| {
                let count = outcomes.get(word)?;
                Some(if matches!(*word, "failed" | "stuck") {
                    format!("<span class=\"reason\">{count} {word}</span>")
                } else {
                    format!("{count} {word}")
                })
            })
            .collect();
        let _ = write!(
            out,
            "</td><td>{declaration}</td><td>{heard}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            resources.join(", "),
            escape(&modules.join(", ")),
            attention
                .get(node.node.as_str())
                .map(|a| escape(&status::attention_words(a)))
                .unwrap_or_default()
        );
    }
    out.push_str("</table></section>\n");
}
