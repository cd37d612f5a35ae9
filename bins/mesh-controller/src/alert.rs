//! What `status`'s exit code says, so an alert can key on it, and the drift a person
//! acknowledged (`status ack NODE [RESOURCE]`).
//!
//! Start at [`judge`]: an [`Overview`] at `now` is *settled* (exit 0) only when every node sent
//! a declaration reports it converged and current and nothing is pending; *in progress* (exit
//! 2) while something is under way and nothing is wrong — a node mid-change within its
//! deadline, a node yet to report what it was sent, an open plan; *needs attention* (exit 3)
//! when a resource failed, is stuck or held, a drift was left as found or corrected within the
//! retention and not acknowledged, a node is silent or mid-change past its deadline, a rollout
//! stopped, or a failure is recorded. [`shows`] says which drift `status` still shows: drift
//! left as found always; drift put back for [`DEFAULT_DRIFT_RETENTION_SECS`] (or as told),
//! until acknowledged.
//!
//! # Guarantees
//! - [`judge`] and [`shows`] read no clock and no record: `now` and the acknowledgements are
//!   arguments.
//! - An acknowledgement clears only drift seen at or before it: drift seen later shows again.
//! - Acknowledgements of every node are read in one listing ([`acks_of_all`]).

use crate::error::{Error, Result};
use crate::home::Home;
use crate::status::Overview;
use mesh_model::report::{Drift, DriftAction, MachineState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How long `status` shows a drift that was put back, by default: an hour.
pub const DEFAULT_DRIFT_RETENTION_SECS: u64 = 3600;

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
    let time = mesh_host::format_time;
    for node in &overview.attention {
        let name = &node.node;
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
    }
    for node in &overview.nodes {
        let Some(report) = &node.report else {
            if node.sent.is_some() && node.unreadable.is_none() {
                in_progress.push(format!("{}: no report yet", node.node));
            }
            continue;
        };
        if node.silent_since.is_some() {
            continue;
        }
        if report.machine == MachineState::MidChange {
            let since = report.started_at;
            if now.saturating_sub(since) > mid_change_after_secs {
                attention.push(format!(
                    "{}: mid-change since {}, past its deadline of {mid_change_after_secs} s",
                    node.node,
                    time(since)
                ));
            } else {
                in_progress.push(format!("{}: mid-change since {}", node.node, time(since)));
            }
        } else if node.sent.is_some() && !node.current {
            in_progress.push(format!(
                "{}: has not reported the declaration last sent",
                node.node
            ));
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
            "{}: behind on `{}` (not running when {} rolled it out; `push --behind` sends it)",
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

/// The format version of an acknowledgement record.
pub const ACKS_FORMAT: u32 = 1;

/// What a person acknowledged of one node's drift (disk format, version [`ACKS_FORMAT`]), at
/// `acks/<node>.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Acks {
    /// Format version.
    pub format: u32,
    /// The node.
    pub node: String,
    /// Every drift seen at or before this time is acknowledged (`status ack NODE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all: Option<u64>,
    /// Resource id → the drift of it seen at or before this time is acknowledged (`status ack
    /// NODE RESOURCE`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, u64>,
}

impl Acks {
    /// Whether `drift` is acknowledged.
    pub fn covers(&self, drift: &Drift) -> bool {
        self.all.is_some_and(|at| at >= drift.seen_at)
            || self
                .resources
                .get(&drift.resource)
                .is_some_and(|at| *at >= drift.seen_at)
    }
}

/// Whether `status` shows `drift` at `now`: drift left as found always (the resource is not as
/// declared); drift put back for `retention_secs` after it was seen, unless acknowledged.
pub fn shows(drift: &Drift, acks: Option<&Acks>, now: u64, retention_secs: u64) -> bool {
    match drift.action {
        DriftAction::Left => true,
        DriftAction::Corrected => {
            now.saturating_sub(drift.seen_at) < retention_secs
                && !acks.is_some_and(|acks| acks.covers(drift))
        }
    }
}

fn acks_key(node: &str) -> String {
    format!("acks/{node}.json")
}

/// Every node's acknowledgements, by node, in one listing.
///
/// # Errors
/// The records cannot be listed, or one is not an acknowledgement record.
pub fn acks_of_all(home: &Home) -> Result<BTreeMap<String, Acks>> {
    let mut out = BTreeMap::new();
    for (key, bytes) in home.records().values_under("acks")? {
        let acks: Acks = serde_json::from_slice(&bytes).map_err(|source| Error::BadRecord {
            location: key.clone(),
            what: "an acknowledgement record".to_owned(),
            source: Some(Box::new(source)),
        })?;
        out.insert(acks.node.clone(), acks);
    }
    Ok(out)
}

/// What `status ack` did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Acked {
    /// The node.
    pub node: String,
    /// The resource, when one was named.
    pub resource: Option<String>,
    /// When: drift seen at or before it is acknowledged.
    pub at: u64,
    /// The drift of the node's last report it clears.
    pub cleared: Vec<Drift>,
}

/// `status ack NODE [RESOURCE]`: acknowledges the node's drift (of one resource, or all) seen
/// at or before `now`, so `status` no longer shows it once put back.
///
/// # Errors
/// An unknown node; a resource its last report names no drift of (nothing is written); a
/// record that cannot be read or written.
pub fn ack(home: &Home, node: &str, resource: Option<&str>, now: u64) -> Result<Acked> {
    crate::push::require_node(&home.inventory()?, node)?;
    let drift = home.report(node)?.map(|r| r.drift).unwrap_or_default();
    let cleared: Vec<Drift> = drift
        .into_iter()
        .filter(|d| d.action == DriftAction::Corrected && d.seen_at <= now)
        .filter(|d| resource.is_none_or(|r| r == d.resource))
        .collect();
    if let (Some(resource), true) = (resource, cleared.is_empty()) {
        return Err(Error::invalid(format!(
            "`{node}`'s last report names no drift of `{resource}` put back"
        )));
    }
    let key = acks_key(node);
    let mut acks: Acks = home
        .read_record(&key, "an acknowledgement record", ACKS_FORMAT)?
        .unwrap_or_else(|| Acks {
            format: ACKS_FORMAT,
            node: node.to_owned(),
            ..Acks::default()
        });
    match resource {
        Some(resource) => {
            acks.resources.insert(resource.to_owned(), now);
        }
        None => {
            acks.all = Some(now);
            acks.resources.clear();
        }
    }
    home.put_json(&key, &acks)?;
    Ok(Acked {
        node: node.to_owned(),
        resource: resource.map(str::to_owned),
        at: now,
        cleared,
    })
}
