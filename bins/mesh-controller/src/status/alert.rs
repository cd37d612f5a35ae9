//! What `status`'s exit code says, so an alert can key on it.
//!
//! Start at [`judge`]: an [`Overview`] at `now` is *settled* (exit 0) only when every node sent
//! a declaration reports it converged and current and nothing is pending; *in progress* (exit
//! 2) while something is under way and nothing is wrong — a node mid-change within its
//! deadline, a node yet to report what it was sent, an open plan; *needs attention* (exit 3)
//! when a host could not apply at all (its state directory cannot be written), a resource failed,
//! is stuck or held, a drift was left as found or corrected within the
//! retention and not acknowledged (what the overview shows, [`crate::status::acks::shows`]), a node
//! is silent or mid-change past its deadline, a rollout stopped, or a failure is recorded.
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
    /// Something is under way and nothing is wrong (exit 2).
    InProgress,
    /// Something needs a person (exit 3).
    NeedsAttention,
}

impl Health {
    /// The exit code `status` gives.
    pub fn exit_code(self) -> u8 {
        match self {
            Health::Settled => 0,
            Health::InProgress => 2,
            Health::NeedsAttention => 3,
        }
    }
}

/// The verdict, and every reason it is not settled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Verdict {
    /// What it comes to.
    pub health: Health,
    /// Why it needs attention, one reason a line.
    pub attention: Vec<String>,
    /// What is under way.
    pub in_progress: Vec<String>,
}

/// Judges `overview` at `now`; a node reporting `mid-change` for more than
/// `mid_change_after_secs` since its apply started is past its deadline.
pub fn judge(overview: &Overview, now: u64, mid_change_after_secs: u64) -> Verdict {
    let mut attention = Vec::new();
    let mut in_progress = Vec::new();
    let time = mesh_store::clock::rfc3339;
    for node in &overview.attention {
        let name = &node.node;
        if let Some(reason) = &node.host_failure {
            attention.push(format!("{name}: the host cannot apply: {reason}"));
        }
        for (id, reason) in &node.failed {
            attention.push(format!("{name}: {id} failed: {reason}"));
        }
        for (id, reason) in &node.stuck {
            attention.push(format!("{name}: {id} stuck: {reason}"));
        }
        for window in &node.windows {
            attention.push(format!(
                "{name}: held still by window `{}` ({})",
                window.step,
                window.containers.join(", ")
            ));
        }
        for drift in &node.drift {
            let what = match drift.action {
                DriftAction::Left => "left as found",
                DriftAction::Corrected => "put back",
            };
            attention.push(format!(
                "{name}: drift of {} {} seen {} ({what})",
                drift.resource,
                drift.field,
                time(drift.seen_at)
            ));
        }
        if let Some(since) = node.silent_since {
            attention.push(format!("{name}: silent since {}", time(since)));
        }
        if let Some(unreadable) = &node.unreadable {
            attention.push(format!("{name}: {unreadable}"));
        }
        if let Some(skew) = node.clock_skew_secs {
            attention.push(format!("{name}: {}", clock_skew_words(skew)));
        }
    }
    for node in &overview.nodes {
        if let Some(digest) = &node.unconfirmed {
            // Written as about to be sent, never recorded sent: its next report tells.
            in_progress.push(format!(
                "{}: sent {}, unconfirmed (the controller stopped, or the bus did not take it,                  before it was recorded sent): not reported yet",
                node.node,
                mesh_host::short(digest)
            ));
        }
        let Some(report) = &node.report else {
            if node.sent.is_some() && node.unreadable.is_none() && node.unconfirmed.is_none() {
                in_progress.push(format!("{}: no report yet", node.node));
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
                attention.push(format!(
                    "{}: mid-change since {}, past its deadline of {mid_change_after_secs} s",
                    node.node,
                    time(since)
                ));
            } else {
                in_progress.push(format!("{}: mid-change since {}", node.node, time(since)));
            }
        } else if node.sent.is_some() && !node.current && node.unconfirmed.is_none() {
            in_progress.push(format!(
                "{}: has not reported the declaration last sent",
                node.node
            ));
        }
    }
    for pending in &overview.pending {
        let line = format!(
            "{}: pending ({}): {}",
            pending.node,
            pending.differences_words(),
            pending.command
        );
        match pending.plan {
            Some(_) => in_progress.push(line),
            None => attention.push(line),
        }
    }
    for held in &overview.held {
        let why = if held.orphans.is_empty() {
            "would move a running container's data"
        } else {
            "orphans settings its layers hold"
        };
        attention.push(format!(
            "{}: held by {} (`{}` {why})",
            held.node, held.plan, held.module
        ));
    }
    for stopped in &overview.stopped {
        attention.push(format!(
            "{}: the rollout of `{}` stopped at `{}`: {}",
            stopped.plan, stopped.module, stopped.node, stopped.reason
        ));
    }
    for problem in &overview.problems {
        attention.push(format!("problem: {}: {}", problem.subject, problem.what));
    }
    if let Some(daemon) = &overview.daemon {
        attention.extend(daemon.attention());
    }
    for behind in &overview.nodes_behind {
        in_progress.push(format!(
            "{}: behind on `{}` (not running when {} rolled it out; a push of the nodes behind \
             sends it)",
            behind.node, behind.module, behind.plan
        ));
    }
    for plan in &overview.open_plans {
        in_progress.push(format!("{} open: waits on {}", plan.id, plan.waits_on));
    }
    let health = if !attention.is_empty() {
        Health::NeedsAttention
    } else if !in_progress.is_empty() {
        Health::InProgress
    } else {
        Health::Settled
    };
    Verdict {
        health,
        attention,
        in_progress,
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
