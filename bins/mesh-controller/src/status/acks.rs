//! The drift a person acknowledged (`status ack NODE [RESOURCE]`), and which drift `status`
//! still shows.
//!
//! Start at [`shows`]: drift left as found always; drift put back for
//! [`DEFAULT_DRIFT_RETENTION_SECS`] (or as told), until acknowledged ([`ack`]).
//!
//! # Guarantees
//! - [`shows`] reads no clock and no record: `now` and the acknowledgements are arguments.
//! - An acknowledgement clears only drift seen at or before it: drift seen later shows again.
//! - Acknowledgements of every node are read in one listing ([`acks_of_all`]).

use crate::error::{bad_record, Error, Result};
use crate::home::Home;
use mesh_model::report::{Drift, DriftAction};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How long `status` shows a drift that was put back, by default: an hour.
pub const DEFAULT_DRIFT_RETENTION_SECS: u64 = 3600;

/// The format version of an acknowledgement record.
pub(crate) const ACKS_FORMAT: u32 = 1;

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
pub(crate) fn shows(drift: &Drift, acks: Option<&Acks>, now: u64, retention_secs: u64) -> bool {
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
/// The records cannot be listed, or one is not an acknowledgement record of
/// [`ACKS_FORMAT`].
pub(crate) fn acks_of_all(home: &Home) -> Result<BTreeMap<String, Acks>> {
    const WHAT: &str = "an acknowledgement record";
    let mut out = BTreeMap::new();
    for (key, bytes) in home.records().values_under("acks")? {
        let value = serde_json::from_slice(&bytes)
            .map_err(bad_record(home.records().locate(&key), WHAT))?;
        let acks: Acks = home.versioned(&key, value, WHAT, ACKS_FORMAT)?;
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
    // Each drift's time by the bus's clock, as `status` shows it: acknowledged against the
    // controller's clock, never the host's.
    let drift = match home.reports().heard(node)? {
        Some((report, heard_at)) => {
            let offset = home
                .reports_from_bus()
                .then(|| crate::push::clock_offset_secs(&report, heard_at))
                .flatten();
            report
                .drift
                .into_iter()
                .map(|d| Drift {
                    seen_at: crate::push::on_bus_clock(d.seen_at, offset),
                    ..d
                })
                .collect()
        }
        None => Vec::new(),
    };
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
