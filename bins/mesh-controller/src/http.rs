//! The controller's status over HTTP (`mesh-controller serve --http ADDR`): a read-only page
//! for people (`/`), the Prometheus text exposition (`/metrics`) and the document
//! `status --output json` prints (`/status.json`, byte for byte).
//!
//! Start at [`Pages`]: it reads a [`Snapshot`] — [`crate::status::overview_of_plans`] and the
//! plan records, at one moment — and renders it ([`page`], [`metrics`],
//! [`Overview::json_document`]). [`Pages::respond`] answers a request line's method and target
//! with any HTTP stack; [`bind`] and [`serve`] are the one the controller uses (hyper, on a
//! loopback address unless told otherwise, behind TLS when given a certificate). [`Routes`]
//! mounts the webhooks ([`crate::hooks`]) beside the pages, or alone on a listener of their own.
//!
//! # Invariants
//! - The pages decide nothing: every number and word is read from the status and plan values the
//!   library returns; it never writes a record and never sends.
//! - Everything rendered from a record is escaped (HTML text and attributes; Prometheus label
//!   values).
//! - Cheap at 10,000 nodes: the page lists the nodes needing attention and counts the rest by
//!   state; the whole list is behind `?nodes=all`, a page of [`NODES_PER_PAGE`] at a time. The
//!   send latencies of a finished rollout are read once and kept.
//! - A non-loopback address is refused unless TLS is given or `public` says so.

use crate::error::{Error, Result};
use crate::home::Home;
use crate::plans::PlanRecord;
use crate::status::{self, Overview};
use mesh_model::plan::{PlanState, RolloutOutcome};
use mesh_model::report::MachineState;
use mesh_plan::plans::state_word;
use mesh_plan::rollout::NodeProgress;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// How many nodes one page of `?nodes=all` lists.
pub const NODES_PER_PAGE: usize = 500;

/// Up to how many nodes the page lists every node without being asked (`?nodes=all`).
pub const NODES_LISTED_UNASKED: usize = 100;

/// How many plans that are no longer open the page shows, newest first, after the open ones.
pub const FINISHED_PLANS_SHOWN: usize = 5;

/// How often the page reloads itself (a meta refresh), in seconds.
pub const REFRESH_SECS: u64 = 10;

/// The upper bounds, in seconds, of the send latency histogram's buckets (`+Inf` besides).
pub const LATENCY_BUCKETS: [u64; 10] = [1, 2, 5, 10, 30, 60, 120, 300, 600, 1800];

/// The state words nodes are counted by, in the order shown: a node silent for three
/// heartbeats is `silent`, one whose last report cannot be read `unreadable`, one never heard
/// `no-report`, else its last report's machine state.
pub const NODE_STATES: [&str; 6] = [
    "converged",
    "mid-change",
    "partial",
    "silent",
    "unreadable",
    "no-report",
];

/// The state words rollouts are counted by: where a module's rollout in a plan stands
/// (`left`: its plan was superseded or closed before it finished).
pub const ROLLOUT_STATES: [&str; 7] = [
    "not-started",
    "first",
    "rest",
    "held",
    "done",
    "stopped",
    "left",
];

/// The resource outcomes counted over every node's last report.
pub const RESOURCE_OUTCOMES: [&str; 8] = [
    "applied",
    "unchanged",
    "failed",
    "stuck",
    "held-still",
    "skipped",
    "waiting",
    "removed",
];

/// The sends of rollouts and how long each node took from its send to the report that
/// applied it (seconds).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendTally {
    /// Nodes sent a rollout's declaration, over every plan (the plan records' counters).
    pub sends: u64,
    /// Sends answered by a report that applied them.
    pub applied: u64,
    /// The sum of their latencies, in seconds.
    pub latency_sum: u64,
    /// How many latencies were at most each of [`LATENCY_BUCKETS`] (not cumulative).
    pub buckets: [u64; LATENCY_BUCKETS.len()],
}

impl SendTally {
    fn add_latency(&mut self, secs: u64) {
        self.applied += 1;
        self.latency_sum += secs;
        if let Some(at) = LATENCY_BUCKETS.iter().position(|bound| secs <= *bound) {
            self.buckets[at] += 1;
        }
    }

    fn add(&mut self, other: &SendTally) {
        self.sends += other.sends;
        self.applied += other.applied;
        self.latency_sum += other.latency_sum;
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets) {
            *mine += theirs;
        }
    }
}

/// What the pages show, read at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// When (seconds since the epoch).
    pub now: u64,
    /// What `status` shows.
    pub overview: Overview,
    /// Every plan record, oldest first.
    pub plans: Vec<PlanRecord>,
    /// The rollouts' sends.
    pub sends: SendTally,
}

/// The status pages of one mesh home: what [`serve`] answers, or an embedding tool mounts
/// through [`Pages::respond`].
#[derive(Debug)]
pub struct Pages {
    home: Home,
    silent_after_secs: u64,
    /// The latencies of rollouts that finished (plan, module): they no longer change.
    finished: Mutex<HashMap<(String, String), SendTally>>,
}

/// An answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status code.
    pub status: u16,
    /// The `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

impl Answer {
    fn text(status: u16, body: impl Into<String>) -> Answer {
        Answer {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }
}

/// What `/` was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PageQuery {
    /// `?nodes=all`: list every node, a page at a time.
    pub all_nodes: bool,
    /// `?page=N` (from 1) of the node list.
    pub page: usize,
}

impl PageQuery {
    /// The query of a request target's `?…` part; what it does not know is ignored.
    pub fn parse(query: &str) -> PageQuery {
        let mut parsed = PageQuery {
            all_nodes: false,
            page: 1,
        };
        for pair in query.split('&') {
            match pair.split_once('=') {
                Some(("nodes", "all")) => parsed.all_nodes = true,
                Some(("page", n)) => parsed.page = n.parse().unwrap_or(1).max(1),
                _ => {}
            }
        }
        parsed
    }
}

impl Pages {
    /// The pages of `home`; on a fleet a node unheard for more than `silent_after_secs` is
    /// silent (as `status --silent-after`).
    pub fn new(home: Home, silent_after_secs: u64) -> Pages {
        Pages {
            home,
            silent_after_secs,
            finished: Mutex::new(HashMap::new()),
        }
    }

    /// What the pages show at `now`: the overview `status` shows, the plan records (read
    /// once, for both) and the rollouts' sends.
    ///
    /// # Errors
    /// When the home cannot be read.
    pub fn snapshot(&self, now: u64) -> Result<Snapshot> {
        let plans = self.home.plans()?;
        let overview = status::overview_of_plans(&self.home, &plans, now, self.silent_after_secs)?;
        let sends = self.sends(&plans)?;
        Ok(Snapshot {
            now,
            overview,
            plans,
            sends,
        })
    }

    /// The rollouts' sends: counted from the plan records; each applied node's latency read
    /// from its record of the rollout, once for a rollout that finished.
    fn sends(&self, plans: &[PlanRecord]) -> Result<SendTally> {
        let mut total = SendTally::default();
        for record in plans {
            for (module, rollout) in &record.plan.rollouts {
                let key = (record.plan.id.clone(), module.clone());
                let finished = rollout.outcome.is_some() || !record.plan.state.is_open();
                if finished {
                    let kept = self
                        .finished
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .get(&key)
                        .cloned();
                    if let Some(kept) = kept {
                        total.add(&kept);
                        continue;
                    }
                }
                let mut tally = SendTally {
                    sends: rollout.sent as u64,
                    ..SendTally::default()
                };
                if record
                    .work
                    .get(module)
                    .is_some_and(|work| work.rollout.is_some())
                {
                    for node in self.home.rollout_nodes(&record.plan.id, module)? {
                        match node.progress {
                            NodeProgress::Applied { sent_at, at } => {
                                tally.add_latency(at.saturating_sub(sent_at));
                            }
                            NodeProgress::Waiting
                            | NodeProgress::Granting { .. }
                            | NodeProgress::GrantRetry { .. }
                            | NodeProgress::Sent { .. }
                            | NodeProgress::Held { .. } => {}
                        }
                    }
                }
                total.add(&tally);
                if finished {
                    self.finished
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(key, tally);
                }
            }
        }
        Ok(total)
    }

    /// The answer to `method` `target` (a request line's path and query): `/`, `/metrics`,
    /// `/status.json`; 404 for another path, 405 for a method other than `GET` or `HEAD`.
    /// It reads the home, so it blocks: call it off an async runtime's workers.
    pub fn respond(&self, method: &str, target: &str) -> Answer {
        if method != "GET" && method != "HEAD" {
            return Answer::text(405, "the status pages are read-only: GET or HEAD\n");
        }
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        if !matches!(path, "/" | "/metrics" | "/status.json") {
            return Answer::text(
                404,
                format!(
                    "no page {}: there are /, /metrics and /status.json\n",
                    path.chars().take(200).collect::<String>()
                ),
            );
        }
        let snapshot = match self.snapshot(mesh_host::now()) {
            Ok(snapshot) => snapshot,
            Err(error) => {
                return Answer::text(
                    500,
                    format!("the status could not be read: {}\n", error.chain_line()),
                )
            }
        };
        match path {
            "/metrics" => Answer {
                status: 200,
                content_type: "text/plain; version=0.0.4; charset=utf-8",
                body: metrics(&snapshot),
            },
            "/status.json" => match snapshot.overview.json_document() {
                Ok(body) => Answer {
                    status: 200,
                    content_type: "application/json",
                    body,
                },
                Err(error) => Answer::text(500, format!("{}\n", error.chain_line())),
            },
            _ => Answer {
                status: 200,
                content_type: "text/html; charset=utf-8",
                body: page(&snapshot, PageQuery::parse(query)),
            },
        }
    }
}

// ----------------------------------------------------------------------------------------
// What is counted (shared by the page and /metrics).

/// A node's state word (one of [`NODE_STATES`]).
pub fn node_state(node: &crate::push::NodeStatus) -> &'static str {
    if node.silent_since.is_some() {
        return "silent";
    }
    if node.unreadable.is_some() {
        return "unreadable";
    }
    match node.report.as_ref().map(|r| r.machine) {
        None => "no-report",
        Some(MachineState::Converged) => "converged",
        Some(MachineState::MidChange) => "mid-change",
        Some(MachineState::Partial) => "partial",
    }
}

/// Nodes by state word, every word of [`NODE_STATES`] present.
pub fn nodes_by_state(overview: &Overview) -> BTreeMap<&'static str, usize> {
    let mut counts: BTreeMap<&'static str, usize> = NODE_STATES.iter().map(|s| (*s, 0)).collect();
    for node in &overview.nodes {
        *counts.entry(node_state(node)).or_default() += 1;
    }
    counts
}

/// Resources by outcome over every node's last report, every word of [`RESOURCE_OUTCOMES`]
/// present.
pub fn resources_by_outcome(overview: &Overview) -> BTreeMap<&'static str, usize> {
    let mut counts: BTreeMap<&'static str, usize> =
        RESOURCE_OUTCOMES.iter().map(|s| (*s, 0)).collect();
    for report in overview.nodes.iter().filter_map(|n| n.report.as_ref()) {
        for outcome in report.resources.values() {
            *counts.entry(outcome.word()).or_default() += 1;
        }
    }
    counts
}

/// Drifted resources over every node's last report (the rule “Drift is seen, and reported even when corrected”).
pub fn drifted(overview: &Overview) -> usize {
    overview
        .nodes
        .iter()
        .filter_map(|n| n.report.as_ref())
        .map(|r| r.drift.len())
        .sum()
}

/// Where one module's rollout in one plan stands, as the page draws it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutView {
    /// The module.
    pub module: String,
    /// One of [`ROLLOUT_STATES`].
    pub state: &'static str,
    /// The machine sent first, once chosen.
    pub first: Option<String>,
    /// Its counters, once the rollout began.
    pub progress: Option<crate::RolloutProgress>,
    /// Why it stopped, and where.
    pub stopped: Option<(String, String)>,
    /// Whether its build was made.
    pub built: bool,
}

/// Every module's rollout in `record`, in tier order.
pub fn rollouts(record: &PlanRecord) -> Vec<RolloutView> {
    let plan = &record.plan;
    plan.tiers
        .iter()
        .flatten()
        .map(|module| {
            let rollout = plan.rollouts.get(module);
            let work = record.work.get(module);
            let progress = work
                .and_then(|w| w.rollout.as_ref())
                .map(|kept| crate::RolloutProgress::of_parts(&plan.id, module, &kept.state));
            let stopped = match rollout.and_then(|r| r.outcome.as_ref()) {
                Some(RolloutOutcome::Stopped { node, reason }) => {
                    Some((node.clone(), reason.clone()))
                }
                Some(RolloutOutcome::Done) | None => None,
            };
            let state = match rollout.and_then(|r| r.outcome.as_ref()) {
                Some(RolloutOutcome::Done) => "done",
                Some(RolloutOutcome::Stopped { .. }) => "stopped",
                None if !plan.state.is_open() => "left",
                None => match &progress {
                    Some(progress) if progress.applied > 0 || progress.in_flight > 0 => {
                        progress.stage
                    }
                    Some(progress) => match progress.stage {
                        "first" if progress.waiting_on.is_none() => "not-started",
                        stage => stage,
                    },
                    None => "not-started",
                },
            };
            RolloutView {
                module: module.clone(),
                state,
                first: rollout.and_then(|r| r.first.clone()),
                progress,
                stopped,
                built: work.is_some_and(|w| w.build.is_some()),
            }
        })
        .collect()
}

/// Rollouts by state over every plan, every word of [`ROLLOUT_STATES`] present.
pub fn rollouts_by_state(plans: &[PlanRecord]) -> BTreeMap<&'static str, usize> {
    let mut counts: BTreeMap<&'static str, usize> =
        ROLLOUT_STATES.iter().map(|s| (*s, 0)).collect();
    for record in plans {
        for view in rollouts(record) {
            *counts.entry(view.state).or_default() += 1;
        }
    }
    counts
}

/// Plans by state word, every state present.
pub fn plans_by_state(plans: &[PlanRecord]) -> BTreeMap<&'static str, usize> {
    let mut counts: BTreeMap<&'static str, usize> = [
        "building",
        "rolling-out",
        "done",
        "stopped",
        "superseded",
        "closed",
    ]
    .iter()
    .map(|s| (*s, 0))
    .collect();
    for record in plans {
        *counts.entry(state_word(&record.plan.state)).or_default() += 1;
    }
    counts
}

// ----------------------------------------------------------------------------------------
// /metrics

/// A Prometheus label value, escaped (backslash, double quote, newline).
fn label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The Prometheus text exposition (format 0.0.4) of `snapshot`.
pub fn metrics(snapshot: &Snapshot) -> String {
    let overview = &snapshot.overview;
    let mut out = String::with_capacity(256 + overview.nodes.len() * 120);
    family(
        &mut out,
        "mesh_status_timestamp_seconds",
        "gauge",
        "When this status was read (seconds since the epoch).",
    );
    let _ = writeln!(out, "mesh_status_timestamp_seconds {}", snapshot.now);
    family(
        &mut out,
        "mesh_nodes",
        "gauge",
        "Nodes by state: their last report's machine state, silent (unheard for three heartbeats), unreadable (their last report could not be read) or no-report.",
    );
    for (state, count) in nodes_by_state(overview) {
        let _ = writeln!(out, "mesh_nodes{{state=\"{state}\"}} {count}");
    }
    family(
        &mut out,
        "mesh_nodes_current",
        "gauge",
        "Nodes whose last report is of the declaration last sent them.",
    );
    let current = overview.nodes.iter().filter(|n| n.current).count();
    let _ = writeln!(out, "mesh_nodes_current {current}");
    family(
        &mut out,
        "mesh_nodes_attention",
        "gauge",
        "Nodes whose last report needs a person: stuck, mid-change, a window open, drift, silent, unreadable.",
    );
    let _ = writeln!(out, "mesh_nodes_attention {}", overview.attention.len());
    family(
        &mut out,
        "mesh_resources",
        "gauge",
        "Resources by outcome over every node's last report.",
    );
    for (outcome, count) in resources_by_outcome(overview) {
        let _ = writeln!(out, "mesh_resources{{outcome=\"{outcome}\"}} {count}");
    }
    family(
        &mut out,
        "mesh_resources_drifted",
        "gauge",
        "Managed resources found changed by hand in the nodes' last reports.",
    );
    let _ = writeln!(out, "mesh_resources_drifted {}", drifted(overview));
    family(&mut out, "mesh_plans", "gauge", "Plans by state.");
    for (state, count) in plans_by_state(&snapshot.plans) {
        let _ = writeln!(out, "mesh_plans{{state=\"{state}\"}} {count}");
    }
    family(
        &mut out,
        "mesh_rollouts",
        "gauge",
        "Module rollouts of every plan by state (left: its plan superseded or closed first).",
    );
    for (state, count) in rollouts_by_state(&snapshot.plans) {
        let _ = writeln!(out, "mesh_rollouts{{state=\"{state}\"}} {count}");
    }
    family(
        &mut out,
        "mesh_rollouts_stopped",
        "gauge",
        "Stopped rollouts status lists (until a later plan finishes the module or a person closes it).",
    );
    let _ = writeln!(out, "mesh_rollouts_stopped {}", overview.stopped.len());
    family(
        &mut out,
        "mesh_nodes_held",
        "gauge",
        "Nodes an open plan's rollout held because their running container's data would move.",
    );
    let _ = writeln!(out, "mesh_nodes_held {}", overview.held.len());
    family(
        &mut out,
        "mesh_problems",
        "gauge",
        "Failures recorded where they were seen, until resolved.",
    );
    let _ = writeln!(out, "mesh_problems {}", overview.problems.len());
    if let Some(daemon) = &overview.daemon {
        daemon_metrics(&mut out, daemon);
    }
    family(
        &mut out,
        "mesh_drives_failing",
        "gauge",
        "Plans whose drive by the daemon failed and is tried again with backoff (a problem each).",
    );
    let _ = writeln!(
        out,
        "mesh_drives_failing {}",
        overview
            .problems
            .iter()
            .filter(|p| p.kind == mesh_store::problems::ProblemKind::Drive)
            .count()
    );
    family(
        &mut out,
        "mesh_sends_total",
        "counter",
        "Nodes sent a rollout's declaration, over every plan.",
    );
    let _ = writeln!(out, "mesh_sends_total {}", snapshot.sends.sends);
    family(
        &mut out,
        "mesh_send_latency_seconds",
        "histogram",
        "From a rollout's send to a node to the report that applied it.",
    );
    let mut cumulative = 0;
    for (bound, count) in LATENCY_BUCKETS.iter().zip(snapshot.sends.buckets) {
        cumulative += count;
        let _ = writeln!(
            out,
            "mesh_send_latency_seconds_bucket{{le=\"{bound}\"}} {cumulative}"
        );
    }
    let _ = writeln!(
        out,
        "mesh_send_latency_seconds_bucket{{le=\"+Inf\"}} {}",
        snapshot.sends.applied
    );
    let _ = writeln!(
        out,
        "mesh_send_latency_seconds_sum {}",
        snapshot.sends.latency_sum
    );
    let _ = writeln!(
        out,
        "mesh_send_latency_seconds_count {}",
        snapshot.sends.applied
    );
    family(
        &mut out,
        "mesh_node_report_timestamp_seconds",
        "gauge",
        "When each node's last report was heard (seconds since the epoch; heartbeats count).",
    );
    for node in &overview.nodes {
        if let Some(at) = node.heard_at {
            let _ = writeln!(
                out,
                "mesh_node_report_timestamp_seconds{{node=\"{}\"}} {at}",
                label(&node.node)
            );
        }
    }
    family(
        &mut out,
        "mesh_node_report_age_seconds",
        "gauge",
        "Seconds since each node's last report was heard, when this status was read.",
    );
    for node in &overview.nodes {
        if let Some(at) = node.heard_at {
            let _ = writeln!(
                out,
                "mesh_node_report_age_seconds{{node=\"{}\"}} {}",
                label(&node.node),
                snapshot.now.saturating_sub(at)
            );
        }
    }
    out
}

// ----------------------------------------------------------------------------------------
// The page

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

const STYLE: &str = "
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

/// The daemon's heartbeat as metrics: its last turn, whether it is silent, the merges waiting
/// on its consumer and the oldest one's wait, the plans it drives.
fn daemon_metrics(out: &mut String, daemon: &crate::heartbeat::DaemonSeen) {
    family(
        out,
        "mesh_daemon_last_turn_timestamp_seconds",
        "gauge",
        "When the daemon's loop last turned, as its last heartbeat says.",
    );
    let _ = writeln!(
        out,
        "mesh_daemon_last_turn_timestamp_seconds {}",
        daemon.heartbeat.turn_at
    );
    family(
        out,
        "mesh_daemon_silent",
        "gauge",
        "1 when no heartbeat of the daemon came within three of its intervals.",
    );
    let _ = writeln!(out, "mesh_daemon_silent {}", u8::from(daemon.silent));
    family(
        out,
        "mesh_daemon_driving",
        "gauge",
        "Plans the daemon drives, as its last heartbeat says.",
    );
    let _ = writeln!(
        out,
        "mesh_daemon_driving {}",
        daemon.heartbeat.driving.len()
    );
    family(
        out,
        "mesh_merges_waiting",
        "gauge",
        "Merges announced and not yet acknowledged by the daemon's consumer.",
    );
    let _ = writeln!(out, "mesh_merges_waiting {}", daemon.merges_waiting.count);
    family(
        out,
        "mesh_merge_oldest_waiting_seconds",
        "gauge",
        "Seconds the oldest merge waiting on the daemon's consumer has waited (0: none waits).",
    );
    let _ = writeln!(
        out,
        "mesh_merge_oldest_waiting_seconds {}",
        daemon.oldest_merge_waiting_secs.unwrap_or(0)
    );
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

// ----------------------------------------------------------------------------------------
// Serving

/// Where and how the pages are served.
#[derive(Debug, Clone)]
pub struct Listen {
    /// The address to listen on (e.g. `127.0.0.1:9480`; port 0 picks a free one).
    pub addr: SocketAddr,
    /// Serve HTTPS with this certificate, when given.
    pub tls: Option<Tls>,
    /// Listen on an address that is not loopback without TLS (a person said so).
    pub public: bool,
}

/// The certificate the pages are served behind, and who may ask.
#[derive(Debug, Clone)]
pub struct Tls {
    /// The certificate chain (PEM).
    pub cert_file: PathBuf,
    /// Its key (PEM, mode 0600: refused when others may read it).
    pub key_file: PathBuf,
    /// When given, only clients presenting a certificate signed by one of these CAs (PEM) are
    /// answered (mutual TLS, as a bus that verifies clients).
    pub client_ca_file: Option<PathBuf>,
}

/// A bound listener, ready for [`serve`].
pub struct Bound {
    listener: tokio::net::TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    addr: SocketAddr,
}

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bound")
            .field("addr", &self.addr)
            .field("tls", &self.acceptor.is_some())
            .finish()
    }
}

impl Bound {
    /// The address bound (the port chosen, when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The page's URL: `http://ADDR/` or `https://ADDR/`.
    pub fn url(&self) -> String {
        format!(
            "{}://{}/",
            if self.acceptor.is_some() {
                "https"
            } else {
                "http"
            },
            self.addr
        )
    }
}

/// Whether `listen` may be served: a loopback address, or TLS given, or `public`.
///
/// # Errors
/// [`Error::Refused`] naming the address and how to allow it.
pub fn check_listen(listen: &Listen) -> Result<()> {
    if listen.addr.ip().is_loopback() || listen.tls.is_some() || listen.public {
        return Ok(());
    }
    Err(Error::refused(format!(
        "--http {}: not a loopback address, and no TLS given: the status page would be \
         readable in the clear by anyone who reaches it; give --http-cert and --http-key \
         (and --http-client-ca to admit only clients it signed), or say --http-public",
        listen.addr
    )))
}

/// Binds `listen`'s address, its TLS loaded, after [`check_listen`].
///
/// # Errors
/// The address is refused ([`check_listen`]) or cannot be bound; a certificate, key or CA
/// file cannot be read or is not valid PEM; the key file is readable by others.
pub async fn bind(listen: &Listen) -> Result<Bound> {
    check_listen(listen)?;
    let acceptor = listen.tls.as_ref().map(acceptor).transpose()?;
    let listener = tokio::net::TcpListener::bind(listen.addr)
        .await
        .map_err(|source| Error::Internal {
            doing: format!("listening on {} for the status page", listen.addr),
            source: Some(Box::new(source)),
        })?;
    let addr = listener.local_addr().map_err(|source| Error::Internal {
        doing: format!("reading the address bound for {}", listen.addr),
        source: Some(Box::new(source)),
    })?;
    Ok(Bound {
        listener,
        acceptor,
        addr,
    })
}

fn acceptor(tls: &Tls) -> Result<tokio_rustls::TlsAcceptor> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject as _;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |path: &std::path::Path, what: &str| {
        let path = path.to_owned();
        let what = what.to_owned();
        move |e: rustls::pki_types::pem::Error| Error::Invalid {
            what: format!("{} is not {what}", path.display()),
            source: Some(Box::new(e)),
        }
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&tls.cert_file)
        .map_err(bad(&tls.cert_file, "a PEM certificate chain"))?
        .collect::<std::result::Result<_, _>>()
        .map_err(bad(&tls.cert_file, "a PEM certificate chain"))?;
    if certs.is_empty() {
        return Err(Error::invalid(format!(
            "{} holds no certificate",
            tls.cert_file.display()
        )));
    }
    mesh_store::secret::check_secret_mode(&tls.key_file).map_err(|e| Error::Invalid {
        what: format!("the status page's key {}", tls.key_file.display()),
        source: Some(Box::new(e)),
    })?;
    let key = PrivateKeyDer::from_pem_file(&tls.key_file)
        .map_err(bad(&tls.key_file, "a PEM private key"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Internal {
            doing: "choosing the TLS versions".to_owned(),
            source: Some(Box::new(e)),
        })?;
    let builder = match &tls.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(ca_file) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca_file)
                .map_err(bad(ca_file, "a PEM CA certificate"))?
            {
                let cert = cert.map_err(bad(ca_file, "a PEM CA certificate"))?;
                roots.add(cert).map_err(|e| Error::Invalid {
                    what: format!("{} is not a CA certificate", ca_file.display()),
                    source: Some(Box::new(e)),
                })?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| Error::Invalid {
                what: format!("{} admits no client", ca_file.display()),
                source: Some(Box::new(e)),
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| Error::Invalid {
            what: format!(
                "{} and {} are not a certificate and its key",
                tls.cert_file.display(),
                tls.key_file.display()
            ),
            source: Some(Box::new(e)),
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// The hyper answer to `request`: [`Pages::respond`] run off the runtime's workers.
pub async fn answer<B>(
    pages: Arc<Pages>,
    request: hyper::Request<B>,
) -> hyper::Response<http_body_util::Full<bytes::Bytes>> {
    let method = request.method().as_str().to_owned();
    let target = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".to_owned());
    let answered = tokio::task::spawn_blocking(move || pages.respond(&method, &target))
        .await
        .unwrap_or_else(|e| Answer::text(500, format!("the status page failed: {e}\n")));
    response(answered)
}

/// Something else a listener answers under a path of its own (the webhooks,
/// [`crate::hooks`]), mounted beside the pages or alone.
#[async_trait::async_trait]
pub trait Mounted: Send + Sync {
    /// Whether `path` is its.
    fn owns(&self, path: &str) -> bool;

    /// Its answer to `request`.
    async fn respond(&self, request: hyper::Request<hyper::body::Incoming>) -> Answer;
}

/// What a listener answers: the status pages, something mounted beside them, or both.
#[derive(Clone, Default)]
pub struct Routes {
    /// The status pages (`/`, `/metrics`, `/status.json`).
    pub pages: Option<Arc<Pages>>,
    /// What is mounted beside them (the webhooks).
    pub mounted: Option<Arc<dyn Mounted>>,
}

impl From<Arc<Pages>> for Routes {
    fn from(pages: Arc<Pages>) -> Routes {
        Routes {
            pages: Some(pages),
            mounted: None,
        }
    }
}

/// The hyper answer to `request` by `routes`: what is mounted answers its own paths, the pages
/// the rest; a listener without pages answers 404 for them.
pub async fn route(
    routes: Routes,
    request: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<http_body_util::Full<bytes::Bytes>> {
    if let Some(mounted) = routes.mounted.filter(|m| m.owns(request.uri().path())) {
        return response(mounted.respond(request).await);
    }
    match routes.pages {
        Some(pages) => answer(pages, request).await,
        None => response(Answer::text(404, "this listener serves only /hooks/NAME\n")),
    }
}

/// An answer as hyper sends it, never cached.
fn response(answered: Answer) -> hyper::Response<http_body_util::Full<bytes::Bytes>> {
    let mut response =
        hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from(answered.body)));
    *response.status_mut() =
        hyper::StatusCode::from_u16(answered.status).unwrap_or(hyper::StatusCode::OK);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(answered.content_type),
    );
    response.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-store"),
    );
    response
}

/// Serves `routes` (the pages, or what [`Routes`] says) on `bound` until `shutdown`: each connection in a task of its own, HTTP/1.1,
/// behind TLS when `bound` has it.
///
/// # Guarantees
/// The pages are read-only: nothing a request to them changes a record or sends anything.
///
/// # Errors
/// None once bound: a connection that fails (a TLS handshake refused, a client gone) is logged
/// and the others go on.
pub async fn serve(
    bound: Bound,
    routes: impl Into<Routes>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let routes: Routes = routes.into();
    let Bound {
        listener,
        acceptor,
        addr,
    } = bound;
    let mut shutdown = std::pin::pin!(shutdown);
    tracing::info!(%addr, "serving the status page");
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "accepting a status page connection failed");
                    // Out of file descriptors, most likely: let some close.
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let routes = routes.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let routes = routes.clone();
                async move { Ok::<_, std::convert::Infallible>(route(routes, request).await) }
            });
            let http = hyper::server::conn::http1::Builder::new();
            let served = match acceptor {
                None => {
                    http.serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await
                }
                Some(acceptor) => match acceptor.accept(stream).await {
                    Ok(stream) => {
                        http.serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .await
                    }
                    Err(error) => {
                        tracing::debug!(%peer, %error, "a TLS handshake for the status page failed");
                        return;
                    }
                },
            };
            if let Err(error) = served {
                tracing::debug!(%peer, %error, "a status page connection ended in error");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_leaves_no_markup_and_no_label_break() {
        assert_eq!(
            escape("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn utc_and_ages_read_as_a_person_reads_them() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_796_181_243), "2026-12-02 03:14:03 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(age(5), "5 s");
        assert_eq!(age(600), "10 min");
        assert_eq!(age(10_800), "3 h");
        assert_eq!(age(3 * 86_400), "3 d");
    }

    #[test]
    fn the_query_asks_for_every_node_a_page_at_a_time() {
        assert_eq!(
            PageQuery::parse("nodes=all&page=3"),
            PageQuery {
                all_nodes: true,
                page: 3
            }
        );
        assert_eq!(
            PageQuery::parse("page=0&x=<"),
            PageQuery {
                all_nodes: false,
                page: 1
            }
        );
    }

    #[test]
    fn a_non_loopback_address_is_refused_without_tls_or_a_word_saying_so() {
        let listen = |addr: &str, public| Listen {
            addr: addr.parse().unwrap(),
            tls: None,
            public,
        };
        assert!(check_listen(&listen("127.0.0.1:9480", false)).is_ok());
        assert!(check_listen(&listen("[::1]:9480", false)).is_ok());
        let refused = check_listen(&listen("0.0.0.0:9480", false)).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("--http 0.0.0.0:9480: not a loopback address"),
            "{refused}"
        );
        assert!(check_listen(&listen("0.0.0.0:9480", true)).is_ok());
    }

    /// A fleet of three at 1,000,000 s: `a` partial with a failed file and a drift, `b`
    /// converged, `c` silent; plan-1 done over three nodes; plan-2 rolling out `base`, its
    /// first machine `a` awaited, and `app` not built; a problem whose words would be markup.
    fn snapshot() -> Snapshot {
        use crate::plans::{ModuleWork, RolloutKept};
        use crate::push::NodeStatus;
        use mesh_model::plan::{ModuleRollout, Plan};
        use mesh_model::report::{Drift, Outcome, Report};
        use mesh_plan::rollout::{RolloutParts, Stage};
        let now = 1_000_000;
        let report = |node: &str, machine, failed: bool, drift: bool| Report {
            format: mesh_model::report::REPORT_FORMAT,
            node: node.to_owned(),
            declaration: format!("sha256:{node}"),
            machine,
            resources: [
                ("base/file/hello".to_owned(), Outcome::Unchanged),
                (
                    "base/file/motd".to_owned(),
                    if failed {
                        Outcome::Failed {
                            reason: "owner `<alice>` is not an account".to_owned(),
                            attempts: 1,
                            since: now - 30,
                        }
                    } else {
                        Outcome::Applied {
                            changed: vec!["content".to_owned()],
                        }
                    },
                ),
            ]
            .into_iter()
            .collect(),
            undeclared: BTreeMap::new(),
            findings: Vec::new(),
            windows: Vec::new(),
            resumed_from_mid_change: false,
            started_at: now - 40,
            finished_at: now - 40,
            drift: if drift {
                vec![Drift {
                    resource: "base/file/hello".to_owned(),
                    field: "mode".to_owned(),
                    was: "0644".to_owned(),
                    found: "0666".to_owned(),
                    seen_at: now - 20,
                    action: mesh_model::report::DriftAction::Left,
                }]
            } else {
                Vec::new()
            },
        };
        let node = |name: &str, report: Option<Report>, heard: u64, silent: bool| NodeStatus {
            node: name.to_owned(),
            bus_node: name == "a",
            modules: ["base".to_owned()].into_iter().collect(),
            sent: Some(format!("sha256:{name}")),
            current: report.is_some(),
            report,
            heard_at: Some(heard),
            silent_since: silent.then_some(heard),
            unreadable: None,
        };
        let nodes = vec![
            node(
                "a",
                Some(report("a", MachineState::Partial, true, true)),
                now - 2,
                false,
            ),
            node(
                "b",
                Some(report("b", MachineState::Converged, false, false)),
                now - 3,
                false,
            ),
            node(
                "c",
                Some(report("c", MachineState::Converged, false, false)),
                now - 400,
                true,
            ),
        ];
        let parts = |stage, first: &str, applied, in_flight, sent, nodes, outcome| RolloutParts {
            stage,
            first: Some(first.to_owned()),
            bus_node: None,
            in_flight,
            applied,
            held: 0,
            sent,
            nodes,
            outcome,
        };
        let kept = |state| RolloutKept {
            upgrade: Default::default(),
            on_failure: Default::default(),
            deadline_secs: 300,
            max_parallel: None,
            bus_first: None,
            state,
        };
        let record = |id: &str,
                      state,
                      tiers: Vec<Vec<&str>>,
                      rollouts: Vec<(&str, ModuleRollout)>,
                      work: Vec<(&str, ModuleWork)>| PlanRecord {
            format: crate::plans::PLAN_FORMAT,
            plan: Plan {
                id: id.to_owned(),
                repository: "cat".to_owned(),
                branch: "main".to_owned(),
                commit: "0123456789abcdef0123".to_owned(),
                made_at: now - 600,
                modules: tiers.iter().flatten().map(|m| (*m).to_owned()).collect(),
                tiers: tiers
                    .into_iter()
                    .map(|t| t.into_iter().map(str::to_owned).collect())
                    .collect(),
                rollouts: rollouts
                    .into_iter()
                    .map(|(m, r)| (m.to_owned(), r))
                    .collect(),
                state,
            },
            previous_commit: None,
            changed_paths: 2,
            shared_paths: Vec::new(),
            folded: BTreeMap::new(),
            work: work.into_iter().map(|(m, w)| (m.to_owned(), w)).collect(),
            held: Default::default(),
            forgotten: Default::default(),
        };
        let plans = vec![
            record(
                "plan-1",
                PlanState::Done,
                vec![vec!["base"]],
                vec![(
                    "base",
                    ModuleRollout {
                        first: Some("a".to_owned()),
                        sent: 3,
                        applied: 3,
                        outcome: Some(RolloutOutcome::Done),
                        ..ModuleRollout::default()
                    },
                )],
                vec![(
                    "base",
                    ModuleWork {
                        rollout: Some(kept(parts(
                            Stage::Done,
                            "a",
                            3,
                            0,
                            3,
                            3,
                            Some(RolloutOutcome::Done),
                        ))),
                        ..ModuleWork::default()
                    },
                )],
            ),
            record(
                "plan-2",
                PlanState::RollingOut,
                vec![vec!["base"], vec!["app"]],
                vec![(
                    "base",
                    ModuleRollout {
                        first: Some("a".to_owned()),
                        sent: 1,
                        ..ModuleRollout::default()
                    },
                )],
                vec![(
                    "base",
                    ModuleWork {
                        rollout: Some(kept(parts(Stage::FirstNode, "a", 0, 1, 1, 3, None))),
                        ..ModuleWork::default()
                    },
                )],
            ),
        ];
        let overview = Overview {
            attention: status::attention(&nodes),
            nodes,
            open_plans: vec![status::OpenPlan {
                id: "plan-2".to_owned(),
                repository: "cat".to_owned(),
                branch: "main".to_owned(),
                commit: "0123456789abcdef0123".to_owned(),
                state: "rolling-out",
                waits_on: "`a` to report `base` applied (tier 0)".to_owned(),
                since: now - 45,
                waiting_secs: 45,
            }],
            behind: Vec::new(),
            nodes_behind: Vec::new(),
            stopped: Vec::new(),
            held: Vec::new(),
            problems: vec![mesh_store::problems::Problem {
                format: mesh_store::problems::PROBLEM_FORMAT,
                kind: mesh_store::problems::ProblemKind::Merge,
                subject: "cat".to_owned(),
                what: "the merge of <b>cat</b> could not be planned: \"x\" & 'y'".to_owned(),
                details: Vec::new(),
                since: now - 120,
                at: now - 60,
                by: "mesh-controller serve".to_owned(),
                plan: None,
                module: None,
                attempts: 0,
            }],
            on_passwords: Vec::new(),
            daemon: None,
        };
        let mut sends = SendTally {
            sends: 4,
            ..SendTally::default()
        };
        for secs in [1, 2, 4] {
            sends.add_latency(secs);
        }
        Snapshot {
            now,
            overview,
            plans,
            sends,
        }
    }

    #[test]
    fn the_metrics_of_a_fleet_read_as_prometheus_reads_them() {
        insta::assert_snapshot!(metrics(&snapshot()));
    }

    #[test]
    fn the_page_of_a_fleet_draws_its_rollouts_and_escapes_what_it_shows() {
        let page = page(&snapshot(), PageQuery::parse(""));
        assert!(
            !page.contains("<b>cat</b> could not")
                && page.contains("&lt;b&gt;cat&lt;/b&gt; could not"),
            "{page}"
        );
        insta::assert_snapshot!(page.replace(STYLE, "…").replace("><", ">\n<"));
    }

    #[test]
    fn the_latency_histogram_counts_each_send_in_its_bucket() {
        let mut tally = SendTally::default();
        for secs in [0, 1, 3, 3, 4000] {
            tally.add_latency(secs);
        }
        assert_eq!(tally.applied, 5);
        assert_eq!(tally.latency_sum, 4007);
        assert_eq!(tally.buckets[0], 2);
        assert_eq!(tally.buckets[2], 2);
        assert_eq!(
            tally.buckets.iter().sum::<u64>(),
            4,
            "4000 s is only under +Inf"
        );
    }
}
