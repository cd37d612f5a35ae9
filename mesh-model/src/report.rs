//! The report: what a host last did with a declaration, resource by resource.

use crate::WireError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The report wire format this build writes.
///
/// - 1: the apply's outcomes, findings and windows.
/// - 2: adds [`Report::drift`] (absent when empty) and the health of containers in a failed
///   container's reason. A format-1 report reads as a format-2 one without drift. Later, within
///   format 2: [`Report::host_failure`] (absent when the apply ran), which an older reader
///   ignores.
pub const REPORT_FORMAT: u32 = 2;

/// Every report wire format this build reads.
pub const REPORT_FORMATS_READ: [u32; 2] = [1, 2];

/// A host's report of one apply (wire format, version [`REPORT_FORMAT`]; older formats in
/// [`REPORT_FORMATS_READ`] are read too). A field this build does not know — a newer minor
/// version's, from a host upgraded first — is ignored, never refused; a newer major version is
/// refused as [`WireError::Format`], which the controller names per node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Report {
    /// The wire format version.
    pub format: u32,
    /// The node that applied.
    pub node: String,
    /// The digest of the declaration applied.
    pub declaration: String,
    /// The machine's state after the apply.
    pub machine: MachineState,
    /// Per declared resource, what happened.
    pub resources: BTreeMap<String, Outcome>,
    /// Resources no longer declared and what was done with them.
    #[serde(default)]
    pub undeclared: BTreeMap<String, Outcome>,
    /// Things a person should know (e.g. a new login is needed for a membership).
    #[serde(default)]
    pub findings: Vec<Finding>,
    /// Maintenance windows open during the apply.
    #[serde(default)]
    pub windows: Vec<WindowSummary>,
    /// Set when the previous apply was interrupted (the machine was left mid-change).
    #[serde(default)]
    pub resumed_from_mid_change: bool,
    /// When the apply started (seconds since the epoch).
    pub started_at: u64,
    /// When it finished.
    pub finished_at: u64,
    /// Managed resources found changed by hand since the last apply of the same declaration
    /// The rule “Drift is seen, and reported even when corrected”: what differs, when it was seen,
    /// and whether it was put back (format 2).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<Drift>,
    /// Why the host could not apply at all, when it could not: its state directory cannot be
    /// written (full, read-only, an I/O error) or read, with the system's reason (`… no space
    /// left on device`). The node is failed whatever its resources say, until an apply goes
    /// through; the host tries again with its backoff. Absent when the apply ran (a host
    /// before this field says nothing, and an older controller reads the report without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_failure: Option<String>,
    /// The send this report answers: the message id its declaration came in (`Nats-Msg-Id`,
    /// made by the controller for each send). The rollout gate judges a node by it (the rule “The
    /// gate judges each node from its own send”), never by the host's clock against the
    /// controller's. Absent from a host before it, and for a declaration that came without one;
    /// an older reader ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send: Option<String>,
    /// The host's clock when it published this report (seconds since the epoch; a heartbeat
    /// repeating it is stamped anew): set against the time the bus stored it, it tells how far
    /// the host's clock is off. Absent from a host before it; an older reader ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_at: Option<u64>,
}

/// A managed resource found not as the host left it (the rule “Drift is seen, and reported even
/// when corrected”).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Drift {
    /// The resource id.
    pub resource: String,
    /// What differs: `content`, `mode`, `owner`, `group`, `exists` (a file or directory),
    /// `membership`, `running` (a container).
    pub field: String,
    /// What the host left there (the declared value: a content digest, an octal mode, an
    /// account, `present`, `running`).
    pub was: String,
    /// What it found (for a container that stopped: `exited with code N`, and its log's last
    /// lines).
    pub found: String,
    /// When it was seen (seconds since the epoch).
    pub seen_at: u64,
    /// What the host did about it.
    pub action: DriftAction,
}

/// What a host did with drift, by its module's `drift` policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DriftAction {
    /// Put back as declared (`drift = "correct"`, the default); the resource's outcome says
    /// whether that took.
    Corrected,
    /// Left as found: by its module's `drift = "report"`, or because the apply that was to put
    /// it back could not (the resource's outcome, or the report's `host-failure`, says why). The
    /// machine is `partial` until it is put back or declared so.
    Left,
}

/// The machine's state as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MachineState {
    /// Every resource holds what was declared.
    Converged,
    /// An apply is under way (or was interrupted).
    MidChange,
    /// The apply finished and some resources did not take.
    Partial,
}

/// What happened to one resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "outcome",
    rename_all = "kebab-case",
    rename_all_fields = "kebab-case"
)]
pub enum Outcome {
    /// It was changed to what was declared; `changed` names what differed.
    Applied {
        /// The fields that changed (`content`, `mode`, `created`, …).
        #[serde(default)]
        changed: Vec<String>,
    },
    /// It already held what was declared.
    Unchanged,
    /// It could not be applied.
    Failed {
        /// Why, in words.
        reason: String,
        /// How many consecutive applies it has failed in.
        attempts: u32,
        /// When it first failed (seconds since the epoch).
        since: u64,
    },
    /// It keeps failing: past the retry threshold.
    Stuck {
        /// How many consecutive applies it has failed in.
        attempts: u32,
        /// When it first failed.
        since: u64,
        /// The latest reason.
        last_reason: String,
    },
    /// Left alone because a maintenance step holds it still.
    HeldStill {
        /// The step's name.
        step: String,
    },
    /// Not attempted because a resource it comes after did not apply.
    Skipped {
        /// The resource that did not apply.
        gated_by: String,
    },
    /// Not attempted now: it failed before and its backoff has not elapsed.
    Waiting {
        /// The latest reason.
        last_reason: String,
        /// Failures so far.
        attempts: u32,
        /// When it is tried again.
        retry_at: u64,
    },
    /// No longer declared: the mesh's own making removed, or what it found given back.
    Removed {
        /// What was done.
        detail: String,
    },
}

impl Outcome {
    /// Whether the resource holds what was declared after this apply.
    pub fn took(&self) -> bool {
        match self {
            Outcome::Applied { .. } | Outcome::Unchanged | Outcome::Removed { .. } => true,
            Outcome::Failed { .. }
            | Outcome::Stuck { .. }
            | Outcome::HeldStill { .. }
            | Outcome::Skipped { .. }
            | Outcome::Waiting { .. } => false,
        }
    }

    /// A short word for the outcome, as status prints it.
    pub fn word(&self) -> &'static str {
        match self {
            Outcome::Applied { .. } => "applied",
            Outcome::Unchanged => "unchanged",
            Outcome::Failed { .. } => "failed",
            Outcome::Stuck { .. } => "stuck",
            Outcome::HeldStill { .. } => "held-still",
            Outcome::Skipped { .. } => "skipped",
            Outcome::Waiting { .. } => "waiting",
            Outcome::Removed { .. } => "removed",
        }
    }
}

/// Something a person should know after an apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Finding {
    /// The resource it is about.
    pub resource: String,
    /// What to know.
    pub message: String,
}

/// An open maintenance window, as a report lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct WindowSummary {
    /// The step's name.
    pub step: String,
    /// The containers it holds still.
    pub containers: Vec<String>,
    /// When it opened.
    pub opened_at: u64,
    /// The process holding it open (its pid on the machine), when the host says so (a host
    /// before this field says nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<u32>,
}

impl Report {
    /// Reads a report from JSON, checking its format version.
    ///
    /// # Errors
    /// [`WireError::Json`] or [`WireError::Format`].
    pub fn from_json(bytes: &[u8]) -> Result<Self, WireError> {
        #[derive(Deserialize)]
        struct Version {
            format: u32,
        }
        let version: Version = serde_json::from_slice(bytes).map_err(|source| WireError::Json {
            what: "report",
            source,
        })?;
        if !REPORT_FORMATS_READ.contains(&version.format) {
            return Err(WireError::Format {
                what: "report",
                found: version.format,
                expected: REPORT_FORMAT,
            });
        }
        serde_json::from_slice(bytes).map_err(|source| WireError::Json {
            what: "report",
            source,
        })
    }

    /// Counts of each outcome word, for a one-line summary.
    pub fn tally(&self) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for outcome in self.resources.values() {
            *counts.entry(outcome.word()).or_insert(0) += 1;
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host that could not apply says why in `host-failure`; a report without it (a host
    /// before the field, or an apply that ran) reads as none, and a report with it is written
    /// so that a reader without the field reads the rest.
    #[test]
    fn a_host_failure_round_trips_and_its_absence_reads_as_none() {
        let without = br#"{"format": 2, "node": "a", "declaration": "sha256:x",
            "machine": "partial", "resources": {}, "started-at": 1, "finished-at": 1}"#;
        let report = Report::from_json(without).unwrap();
        assert_eq!(report.host_failure, None);
        assert!(!serde_json::to_string(&report)
            .unwrap()
            .contains("host-failure"));
        let failed = Report {
            host_failure: Some("no space left on device (os error 28)".into()),
            ..report
        };
        let json = serde_json::to_vec(&failed).unwrap();
        assert_eq!(Report::from_json(&json).unwrap(), failed);
        let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(
            value["host-failure"],
            "no space left on device (os error 28)"
        );
    }
}
