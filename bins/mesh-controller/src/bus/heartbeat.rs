//! The daemon's heartbeat (the rule “Nothing fails silently”): `mesh-controller serve`
//! publishes, every `--heartbeat SECS`, its loop's last turn, the merges waiting on its
//! consumer and the plans it drives — on the bus ([`mesh_bus::subjects::CONTROLLER_HEARTBEAT`])
//! and as the record [`HEARTBEAT_KEY`], the last one, which `status` and the status page read.
//!
//! Start at [`Heartbeat`]; [`seen`] is what a reader makes of it at a time (no clock of its
//! own: `now` is an argument), so that a daemon gone silent — no heartbeat within
//! [`SILENT_AFTER_BEATS`] of its intervals — and a merge waiting more than
//! [`MERGE_WAIT_LIMIT_SECS`] are named. A daemon stopped by a signal publishes a last heartbeat
//! saying when it stopped ([`Heartbeat::stopped_at`]): it is then stopped, never silent, and
//! needs a person only while open plans wait on it.

use crate::error::{bad_record, Error, Result};
use crate::home::Home;
use mesh_bus::jetstream::MergesWaiting;
use serde::{Deserialize, Serialize};

/// Where the last heartbeat is kept in the records.
pub(crate) const HEARTBEAT_KEY: &str = "daemon/heartbeat.json";

/// The format of [`Heartbeat`].
pub(crate) const HEARTBEAT_FORMAT: u32 = 1;

/// How many of its intervals a daemon may go unheard before it is called silent.
pub(crate) const SILENT_AFTER_BEATS: u64 = 3;

/// How long a merge may wait on the daemon's consumer before it needs a person's eye.
pub(crate) const MERGE_WAIT_LIMIT_SECS: u64 = 60;

/// The default interval of the heartbeat (`serve --heartbeat`).
pub(crate) const HEARTBEAT_SECS: u64 = 10;

/// One heartbeat of `mesh-controller serve` (disk and wire format, version
/// [`HEARTBEAT_FORMAT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Heartbeat {
    /// Always [`HEARTBEAT_FORMAT`].
    pub format: u32,
    /// The machine the daemon runs on.
    pub machine: String,
    /// Its process id.
    pub pid: u32,
    /// When its loop last turned (seconds since the epoch).
    pub turn_at: u64,
    /// Seconds between two heartbeats.
    pub interval_secs: u64,
    /// The merges waiting on its consumer as it last read them.
    pub merges_waiting: MergesWaiting,
    /// The plans it drives now.
    pub driving: Vec<String>,
    /// The plans whose drive failed and waits to be tried again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failing: Vec<String>,
    /// When the daemon stopped (seconds since the epoch): its last heartbeat, published as a
    /// signal stopped it. `None`: it was running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<u64>,
}

/// What a reader makes of the daemon at a time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct DaemonSeen {
    /// Its last heartbeat.
    pub heartbeat: Heartbeat,
    /// Seconds since its loop last turned.
    pub unheard_secs: u64,
    /// No heartbeat within [`SILENT_AFTER_BEATS`] of its intervals, and its last did not say it
    /// stopped.
    pub silent: bool,
    /// When it stopped (RFC 3339, in UTC), when its last heartbeat said it stopped.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "as_rfc3339")]
    pub stopped_at: Option<u64>,
    /// The open plans, which wait on the daemon to drive them: a stopped daemon needs a
    /// person's eye only while there are some ([`DaemonSeen::waited_on_by`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub open_plans: Vec<String>,
    /// The merges waiting on its consumer: read from the bus when the reader could, else as
    /// the heartbeat said.
    pub merges_waiting: MergesWaiting,
    /// Seconds the oldest of them has waited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oldest_merge_waiting_secs: Option<u64>,
}

impl DaemonSeen {
    /// Whether a merge has waited more than [`MERGE_WAIT_LIMIT_SECS`].
    pub fn merge_waits_too_long(&self) -> bool {
        self.oldest_merge_waiting_secs
            .is_some_and(|secs| secs > MERGE_WAIT_LIMIT_SECS)
    }

    /// The same, the open plans `open_plans` waiting on the daemon.
    #[must_use]
    pub fn waited_on_by(self, open_plans: Vec<String>) -> DaemonSeen {
        DaemonSeen { open_plans, ..self }
    }

    /// What needs a person's eye, a line each: the daemon silent, or stopped while open plans
    /// wait on it; a merge waiting too long.
    pub fn attention(&self) -> Vec<String> {
        let mut out = Vec::new();
        let beat = &self.heartbeat;
        if self.stopped_at.is_some() {
            if !self.open_plans.is_empty() {
                out.push(format!(
                    "the daemon (mesh-controller serve on {}, pid {}) is stopped, and open plans \
                     wait on it: {}",
                    beat.machine,
                    beat.pid,
                    self.open_plans.join(", ")
                ));
            }
        } else if self.silent {
            out.push(format!(
                "the daemon (mesh-controller serve on {}, pid {}) is silent: its loop last \
                 turned {} s ago, its heartbeat is every {} s",
                beat.machine, beat.pid, self.unheard_secs, beat.interval_secs
            ));
        }
        if self.merge_waits_too_long() {
            out.push(format!(
                "{} merge(s) wait on the daemon's consumer, the oldest for {} s",
                self.merges_waiting.count,
                self.oldest_merge_waiting_secs.unwrap_or_default()
            ));
        }
        out
    }
}

/// What `heartbeat` says at `now`, the merges waiting as read from the bus when `waiting` is
/// given.
pub(crate) fn seen(heartbeat: Heartbeat, waiting: Option<MergesWaiting>, now: u64) -> DaemonSeen {
    let unheard_secs = now.saturating_sub(heartbeat.turn_at);
    let stopped_at = heartbeat.stopped_at;
    let silent =
        stopped_at.is_none() && unheard_secs > SILENT_AFTER_BEATS * heartbeat.interval_secs.max(1);
    let merges_waiting = waiting.unwrap_or(heartbeat.merges_waiting);
    DaemonSeen {
        unheard_secs,
        silent,
        stopped_at,
        open_plans: Vec::new(),
        merges_waiting,
        oldest_merge_waiting_secs: merges_waiting
            .oldest_at
            .filter(|_| merges_waiting.count > 0)
            .map(|at| now.saturating_sub(at)),
        heartbeat,
    }
}

/// A time as RFC 3339 in UTC, for JSON.
fn as_rfc3339<S: serde::Serializer>(at: &Option<u64>, serializer: S) -> Result<S::Ok, S::Error> {
    match at {
        Some(secs) => serializer.serialize_str(&mesh_store::clock::rfc3339(*secs)),
        None => serializer.serialize_none(),
    }
}

/// The last heartbeat kept in the records, if a daemon ever beat.
///
/// # Errors
/// The record cannot be read, or is not a heartbeat of this format.
pub fn last(home: &Home) -> Result<Option<Heartbeat>> {
    let Some(bytes) = home.records().get(HEARTBEAT_KEY)? else {
        return Ok(None);
    };
    let location = home.records().locate(HEARTBEAT_KEY);
    let beat: Heartbeat =
        serde_json::from_slice(&bytes).map_err(bad_record(location.clone(), "a heartbeat"))?;
    if beat.format != HEARTBEAT_FORMAT {
        return Err(Error::Format {
            location,
            found: beat.format.to_string(),
            expected: HEARTBEAT_FORMAT,
        });
    }
    Ok(Some(beat))
}

/// Publishes `beat` on the bus and keeps it as the last heartbeat in the records.
///
/// # Errors
/// The record cannot be written, or the bus did not take it.
pub(crate) async fn publish(bus: &mesh_bus::NatsBus, home: &Home, beat: &Heartbeat) -> Result<()> {
    let bytes = serde_json::to_vec(beat).expect("a heartbeat always serializes");
    home.records().put(HEARTBEAT_KEY, &bytes)?;
    bus.client()
        .publish(mesh_bus::subjects::CONTROLLER_HEARTBEAT, bytes.into())
        .await
        .map_err(|error| Error::internal(format!("publishing the daemon's heartbeat: {error}")))?;
    Ok(())
}

/// The merges waiting on the daemon's consumer, read from the bus at `bus` (so while the daemon
/// is stopped too); `None` when the bus or the consumer cannot be read (said in the log).
pub(crate) async fn merges_waiting(
    home: &Home,
    bus: &crate::bus::credentials::BusConfig,
) -> Option<MergesWaiting> {
    let connected = match crate::bus::credentials::connect(home, bus).await {
        Ok(connected) => connected,
        Err(error) => {
            tracing::warn!(
                error = error.chain_line(),
                "the merges waiting could not be read"
            );
            return None;
        }
    };
    mesh_bus::jetstream::merges_waiting(
        &connected.jetstream(),
        crate::bus::announce::MERGE_CONSUMER,
    )
    .await
    .inspect_err(|error| tracing::warn!(%error, "the merges waiting could not be read"))
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(turn_at: u64, waiting: MergesWaiting) -> Heartbeat {
        Heartbeat {
            format: HEARTBEAT_FORMAT,
            machine: "control".into(),
            pid: 42,
            turn_at,
            interval_secs: 10,
            merges_waiting: waiting,
            driving: vec!["plan-3".into()],
            failing: Vec::new(),
            stopped_at: None,
        }
    }

    #[test]
    fn a_daemon_that_said_it_stopped_is_stopped_and_needs_a_person_only_for_open_plans() {
        let stopped = Heartbeat {
            stopped_at: Some(1000),
            ..beat(1000, MergesWaiting::default())
        };
        // A day later: stopped, never silent.
        let seen_later = seen(stopped, None, 1000 + 86_400);
        assert!(!seen_later.silent);
        assert_eq!(seen_later.stopped_at, Some(1000));
        assert!(
            seen_later.attention().is_empty(),
            "no open plan waits on it"
        );
        let json = serde_json::to_value(&seen_later).unwrap();
        assert_eq!(json["stopped-at"], "1970-01-01T00:16:40Z");
        let waited_on = seen_later.waited_on_by(vec!["plan-3".into()]);
        assert_eq!(
            waited_on.attention(),
            [
                "the daemon (mesh-controller serve on control, pid 42) is stopped, and open plans \
              wait on it: plan-3"
            ]
        );
    }

    #[test]
    fn a_daemon_unheard_for_three_of_its_intervals_is_silent() {
        let quiet = MergesWaiting::default();
        assert!(!seen(beat(1000, quiet), None, 1030).silent);
        let silent = seen(beat(1000, quiet), None, 1031);
        assert!(silent.silent);
        assert_eq!(silent.unheard_secs, 31);
        assert_eq!(
            silent.attention(),
            [
                "the daemon (mesh-controller serve on control, pid 42) is silent: its loop last \
              turned 31 s ago, its heartbeat is every 10 s"
            ]
        );
    }

    #[test]
    fn a_merge_waiting_more_than_a_minute_is_named_read_from_the_bus_over_the_heartbeat() {
        let said = MergesWaiting {
            count: 1,
            oldest_at: Some(1000),
        };
        assert!(seen(beat(1055, said), None, 1060).attention().is_empty());
        let long = seen(beat(1055, said), None, 1061);
        assert_eq!(long.oldest_merge_waiting_secs, Some(61));
        assert_eq!(
            long.attention(),
            ["1 merge(s) wait on the daemon's consumer, the oldest for 61 s"]
        );
        // The bus says none waits now: the heartbeat's word is stale.
        let read = seen(beat(1055, said), Some(MergesWaiting::default()), 1070);
        assert_eq!(read.merges_waiting.count, 0);
        assert!(read.attention().is_empty());
    }
}
