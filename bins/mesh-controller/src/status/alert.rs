//! What `status`'s exit code says, so an alert can key on it.
//!
//! Start at [`judge`]: an [`Overview`] at `now` is *settled* (exit 0) only when every node sent
//! a declaration reports it converged and current and nothing is pending; *in progress* (exit
//! 4) while something is under way and nothing is wrong — a node mid-change within its
//! deadline, a node yet to report what it was sent, an open plan, a maintenance window open
//! within its lapse; *needs attention* (exit 3) when a host could not apply at all (its state
//! directory cannot be written), a resource failed, is stuck or held, a window is open past its
//! lapse, a drift was left as found or corrected within the retention and not acknowledged
//! (what the overview shows, [`crate::status::acks::shows`]), a node is silent or mid-change
//! past its deadline, a rollout stopped, or a failure is recorded. Each is a [`Reason`]: its
//! node, its kind (a word an alert keys on), since when, and its words.
//!
//! # Guarantees
//! - [`judge`] reads no clock and no record: `now` is an argument.

use crate::status::Overview;
use mesh_model::report::{DriftAction, MachineState};
use serde::Serialize;

/// How long a node may report `mid-change` before `status` calls it past its deadline, by
/// default: a rollout's default deadline.
pub const DEFAULT_MID_CHANGE_AFTER_SECS: u64 = 600;

/// What the overview comes to, as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Health {
    /// Every node converged and current, nothing pending (exit 0).
    Settled,
    /// Something is under way and nothing is wrong (exit 4).
    InProgress,
    /// Something needs a person (exit 3).
    NeedsAttention,
}

impl Health {
    /// The exit code `status` gives: the mesh's table (`0` settled, `4` in progress, `3` needs
    /// attention).
    pub fn exit_code(self) -> u8 {
        match self {
            Health::Settled => 0,
            Health::InProgress => 4,
            Health::NeedsAttention => 3,
        }
    }

    /// The verdict as a word (`settled`, `in-progress`, `needs-attention`).
    pub fn word(self) -> &'static str {
        match self {
            Health::Settled => "settled",
            Health::InProgress => "in-progress",
            Health::NeedsAttention => "needs-attention",
        }
    }

    /// Every verdict, in order.
    pub const ALL: [Health; 3] = [Health::Settled, Health::InProgress, Health::NeedsAttention];
}

/// What kind of thing a [`Reason`] is: a word an alert keys on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReasonKind {
    /// A host could not apply at all.
    HostFailure,
    /// A resource failed.
    Failed,
    /// A resource is stuck.
    Stuck,
    /// A maintenance window is open, within its lapse: working.
    Window,
    /// A maintenance window is open past its lapse.
    WindowLapsed,
    /// Drift left as found, or put back and not acknowledged.
    Drift,
    /// A node not heard for three heartbeats.
    Silent,
    /// A node's last report cannot be read.
    Unreadable,
    /// A host's clock is off the bus's.
    ClockSkew,
    /// A send written as about to be sent, never recorded sent.
    Unconfirmed,
    /// A node sent a declaration that has not reported yet.
    NoReport,
    /// A node mid-change within its deadline.
    MidChange,
    /// A node mid-change past its deadline.
    MidChangePastDeadline,
    /// A node that has not reported the declaration last sent.
    NotCurrent,
    /// A node whose intent differs from what it was sent.
    Pending,
    /// A node held by a rollout for a move or orphaned settings.
    Held,
    /// A rollout stopped.
    Stopped,
    /// A failure recorded.
    Problem,
    /// The daemon: stopped with plans waiting, silent, or merges waiting long.
    Daemon,
    /// A node behind on a module a plan passed it over for.
    Behind,
    /// An open plan.
    OpenPlan,
}

impl ReasonKind {
    /// Every kind, in order.
    pub const ALL: [ReasonKind; 21] = [
        ReasonKind::HostFailure,
        ReasonKind::Failed,
        ReasonKind::Stuck,
        ReasonKind::Window,
        ReasonKind::WindowLapsed,
        ReasonKind::Drift,
        ReasonKind::Silent,
        ReasonKind::Unreadable,
        ReasonKind::ClockSkew,
        ReasonKind::Unconfirmed,
        ReasonKind::NoReport,
        ReasonKind::MidChange,
        ReasonKind::MidChangePastDeadline,
        ReasonKind::NotCurrent,
        ReasonKind::Pending,
        ReasonKind::Held,
        ReasonKind::Stopped,
        ReasonKind::Problem,
        ReasonKind::Daemon,
        ReasonKind::Behind,
        ReasonKind::OpenPlan,
    ];

    /// The kind as its word (`host-failure`, `window-lapsed`, …).
    pub fn word(self) -> &'static str {
        match self {
            ReasonKind::HostFailure => "host-failure",
            ReasonKind::Failed => "failed",
            ReasonKind::Stuck => "stuck",
            ReasonKind::Window => "window",
            ReasonKind::WindowLapsed => "window-lapsed",
            ReasonKind::Drift => "drift",
            ReasonKind::Silent => "silent",
            ReasonKind::Unreadable => "unreadable",
            ReasonKind::ClockSkew => "clock-skew",
            ReasonKind::Unconfirmed => "unconfirmed",
            ReasonKind::NoReport => "no-report",
            ReasonKind::MidChange => "mid-change",
            ReasonKind::MidChangePastDeadline => "mid-change-past-deadline",
            ReasonKind::NotCurrent => "not-current",
            ReasonKind::Pending => "pending",
            ReasonKind::Held => "held",
            ReasonKind::Stopped => "stopped",
            ReasonKind::Problem => "problem",
            ReasonKind::Daemon => "daemon",
            ReasonKind::Behind => "behind",
            ReasonKind::OpenPlan => "open-plan",
        }
    }
}

/// One thing under way, or needing a person: what the verdict is made of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Reason {
    /// The node it concerns, when it is one node's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// What kind of thing it is.
    pub kind: ReasonKind,
    /// Since when (seconds since the epoch; RFC 3339 in JSON), when known.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::status::alert::rfc3339_or_none"
    )]
    pub since: Option<u64>,
    /// In words, as `status` says it.
    pub message: String,
}

/// `since` as RFC 3339 in UTC, as every time in JSON is written.
fn rfc3339_or_none<S: serde::Serializer>(since: &Option<u64>, out: S) -> Result<S::Ok, S::Error> {
    match since {
        Some(at) => out.serialize_str(&mesh_store::clock::rfc3339(*at)),
        None => out.serialize_none(),
    }
}

/// The verdict, and every reason it is not settled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Verdict {
    /// What it comes to.
    pub health: Health,
    /// Why it needs attention.
    pub attention: Vec<Reason>,
    /// What is under way.
    pub in_progress: Vec<Reason>,
}

impl Verdict {
    /// How many reasons of each kind, attention and in progress together.
    pub fn reasons_by_kind(&self) -> std::collections::BTreeMap<ReasonKind, usize> {
        let mut counts = std::collections::BTreeMap::new();
        for reason in self.attention.iter().chain(&self.in_progress) {
            *counts.entry(reason.kind).or_insert(0) += 1;
        }
        counts
    }
}

/// Where a verdict's reasons are gathered.
#[derive(Default)]
struct Reasons {
    attention: Vec<Reason>,
    in_progress: Vec<Reason>,
}

impl Reasons {
    fn attention(
        &mut self,
        node: Option<&str>,
        kind: ReasonKind,
        since: Option<u64>,
        message: String,
    ) {
        self.attention.push(Reason {
            node: node.map(str::to_owned),
            kind,
            since,
            message,
        });
    }

    fn working(
        &mut self,
        node: Option<&str>,
        kind: ReasonKind,
        since: Option<u64>,
        message: String,
    ) {
        self.in_progress.push(Reason {
            node: node.map(str::to_owned),
            kind,
            since,
            message,
        });
    }
}

/// Judges `overview` at `now`; a node reporting `mid-change` for more than
/// `mid_change_after_secs` since its apply started is past its deadline. A maintenance window
/// open within its lapse ([`mesh_apply::window::LAPSE_SECS`] after it opened) is work under
/// way, never a page: the nightly backup is routine; one open past its lapse needs attention.
pub fn judge(overview: &Overview, now: u64, mid_change_after_secs: u64) -> Verdict {
    use ReasonKind as K;
    let mut out = Reasons::default();
    let time = mesh_store::clock::rfc3339;
    for node in &overview.attention {
        let name = &node.node;
        let at = Some(name.as_str());
        if let Some(reason) = &node.host_failure {
            out.attention(
                at,
                K::HostFailure,
                None,
                format!("{name}: the host cannot apply: {reason}"),
            );
        }
        for (id, reason) in &node.failed {
            out.attention(
                at,
                K::Failed,
                None,
                format!("{name}: {id} failed: {reason}"),
            );
        }
        for (id, reason) in &node.stuck {
            out.attention(at, K::Stuck, None, format!("{name}: {id} stuck: {reason}"));
        }
        for window in &node.windows {
            let holder = window
                .holder
                .map(|pid| format!(", held by pid {pid}"))
                .unwrap_or_default();
            let opened = window.opened_at;
            let lapses = opened.saturating_add(mesh_apply::window::LAPSE_SECS);
            if now < lapses {
                out.working(
                    at,
                    K::Window,
                    Some(opened),
                    format!(
                        "{name}: window `{}` open since {}{holder}, holding {} still (it lapses \
                         at {})",
                        window.step,
                        time(opened),
                        window.containers.join(", "),
                        time(lapses)
                    ),
                );
            } else {
                out.attention(
                    at,
                    K::WindowLapsed,
                    Some(opened),
                    format!(
                        "{name}: window `{}` open since {}{holder}, past its lapse at {}, \
                         holding {} still",
                        window.step,
                        time(opened),
                        time(lapses),
                        window.containers.join(", ")
                    ),
                );
            }
        }
        for drift in &node.drift {
            let what = match drift.action {
                DriftAction::Left => "left as found",
                DriftAction::Corrected => "put back",
            };
            out.attention(
                at,
                K::Drift,
                Some(drift.seen_at),
                format!(
                    "{name}: drift of {} {} seen {} ({what})",
                    drift.resource,
                    drift.field,
                    time(drift.seen_at)
                ),
            );
        }
        if let Some(since) = node.silent_since {
            out.attention(
                at,
                K::Silent,
                Some(since),
                format!("{name}: silent since {}", time(since)),
            );
        }
        if let Some(unreadable) = &node.unreadable {
            out.attention(at, K::Unreadable, None, format!("{name}: {unreadable}"));
        }
        if let Some(skew) = node.clock_skew_secs {
            out.attention(
                at,
                K::ClockSkew,
                None,
                format!("{name}: {}", clock_skew_words(skew)),
            );
        }
    }
    for node in &overview.nodes {
        let at = Some(node.node.as_str());
        if let Some(digest) = &node.unconfirmed {
            // Written as about to be sent, never recorded sent: its next report tells.
            out.working(
                at,
                K::Unconfirmed,
                None,
                format!(
                    "{}: sent {}, unconfirmed (the controller stopped, or the bus did not take \
                     it, before it was recorded sent): not reported yet",
                    node.node,
                    mesh_host::short(digest)
                ),
            );
        }
        let Some(report) = &node.report else {
            if node.sent.is_some() && node.unreadable.is_none() && node.unconfirmed.is_none() {
                out.working(
                    at,
                    K::NoReport,
                    None,
                    format!("{}: no report yet", node.node),
                );
            }
            continue;
        };
        if node.silent_since.is_some() {
            continue;
        }
        if report.machine == MachineState::MidChange {
            // Since when by the bus's clock, not the host's: a host whose clock is off is
            // never past its deadline, nor short of it, for that.
            let since = node.on_bus_clock(report.started_at);
            if now.saturating_sub(since) > mid_change_after_secs {
                out.attention(
                    at,
                    K::MidChangePastDeadline,
                    Some(since),
                    format!(
                        "{}: mid-change since {}, past its deadline of {mid_change_after_secs} s",
                        node.node,
                        time(since)
                    ),
                );
            } else {
                out.working(
                    at,
                    K::MidChange,
                    Some(since),
                    format!("{}: mid-change since {}", node.node, time(since)),
                );
            }
        } else if node.sent.is_some() && !node.current && node.unconfirmed.is_none() {
            out.working(
                at,
                K::NotCurrent,
                None,
                format!("{}: has not reported the declaration last sent", node.node),
            );
        }
    }
    for pending in &overview.pending {
        let line = format!(
            "{}: pending ({}): {}",
            pending.node,
            pending.differences_words(),
            pending.command
        );
        let at = Some(pending.node.as_str());
        match pending.plan {
            Some(_) => out.working(at, K::Pending, None, line),
            None => out.attention(at, K::Pending, None, line),
        }
    }
    for held in &overview.held {
        let why = if held.orphans.is_empty() {
            "would move a running container's data"
        } else {
            "orphans settings its layers hold"
        };
        out.attention(
            Some(&held.node),
            K::Held,
            None,
            format!(
                "{}: held by {} (`{}` {why})",
                held.node, held.plan, held.module
            ),
        );
    }
    for stopped in &overview.stopped {
        let node = (!stopped.node.is_empty()).then_some(stopped.node.as_str());
        out.attention(
            node,
            K::Stopped,
            None,
            format!(
                "{}: the rollout of `{}` stopped at `{}`: {}",
                stopped.plan, stopped.module, stopped.node, stopped.reason
            ),
        );
    }
    for problem in &overview.problems {
        out.attention(
            None,
            K::Problem,
            None,
            format!("problem: {}: {}", problem.subject, problem.what),
        );
    }
    if let Some(daemon) = &overview.daemon {
        for line in daemon.attention() {
            out.attention(None, K::Daemon, None, line);
        }
    }
    for behind in &overview.nodes_behind {
        out.working(
            Some(&behind.node),
            K::Behind,
            None,
            format!(
                "{}: behind on `{}` (not running when {} rolled it out; a push of the nodes \
                 behind sends it)",
                behind.node, behind.module, behind.plan
            ),
        );
    }
    for plan in &overview.open_plans {
        out.working(
            None,
            K::OpenPlan,
            Some(plan.since),
            format!("{} open: waits on {}", plan.id, plan.waits_on),
        );
    }
    let health = if !out.attention.is_empty() {
        Health::NeedsAttention
    } else if !out.in_progress.is_empty() {
        Health::InProgress
    } else {
        Health::Settled
    };
    Verdict {
        health,
        attention: out.attention,
        in_progress: out.in_progress,
    }
}

/// A host's clock `skew` seconds off the bus's (ahead when positive), as `status` names it.
pub fn clock_skew_words(skew: i64) -> String {
    format!(
        "its clock is {} s {} the bus's (past the minute a clock may be off; nothing the \
         controller judges reads it, but its reports' times do: keep it in time, e.g. with NTP)",
        skew.unsigned_abs(),
        if skew > 0 { "ahead of" } else { "behind" }
    )
}
