//! A node's last report as heard: readable, or what made it unreadable. Whatever one node
//! publishes is that node's problem (*no single party can blind the fleet*): garbage, a cut-off
//! report, one of a newer major format, one over the size limit, or one naming another node is
//! shown on that node — `unreadable report: REASON`, with its size and first bytes — and every
//! other node reads as usual.
//!
//! A newer minor version's unknown fields are read and ignored ([`mesh_model::report`] does
//! not refuse them), so a host upgraded first in a rolling upgrade reads as usual.
//!
//! The node's last readable report is kept and shown as such beside the unreadable one
//! ([`UnreadableReport::last_readable`]): what the node ran when it was last heard clearly.

use mesh_model::report::Report;
use mesh_model::WireError;
use serde::{Deserialize, Serialize};

/// The most bytes a node's report may hold unless the controller is given another limit
/// (`--report-limit`); a larger one is refused unread, naming the node. Reports of 10,000
/// resources are about 1 MiB; a node's are a few KiB.
pub const MAX_REPORT_BYTES: usize = 256 * 1024;

/// The format of a [`LastReadable`] record this build writes and reads.
pub(crate) const LAST_READABLE_FORMAT: u32 = 1;

/// The record of `node`'s last readable report, kept while its latest is unreadable.
pub(crate) fn last_readable_key(node: &str) -> String {
    format!("heard/{node}.json")
}

/// How many of an unreadable report's first bytes are shown (escaped).
const HEAD_BYTES: usize = 48;

/// A node's last report, as heard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// It reads.
    Read {
        /// The report.
        report: Report,
        /// When it was heard (seconds since the epoch).
        heard_at: u64,
    },
    /// It does not.
    Unreadable(UnreadableReport),
}

/// A report that could not be read, shown as that node's problem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct UnreadableReport {
    /// Why it cannot be read.
    pub reason: String,
    /// Its size in bytes.
    pub size: usize,
    /// Its first bytes, escaped (`\x00`, `\n`, `\"`).
    pub head: String,
    /// When it was heard (seconds since the epoch).
    pub heard_at: u64,
    /// The node's last report that did read, when one is kept: shown as such, never as its
    /// current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_readable: Option<LastReadable>,
}

/// A node's last readable report, kept while its latest is unreadable (record
/// [`last_readable_key`], format [`LAST_READABLE_FORMAT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct LastReadable {
    /// The format version.
    pub format: u32,
    /// When it was heard (seconds since the epoch).
    pub heard_at: u64,
    /// The report.
    pub report: Report,
    /// The last of the source's reports of the node looked at when it was kept (its sequence
    /// in the reports stream): the next look starts after it.
    #[serde(default)]
    pub through_sequence: u64,
}

impl std::fmt::Display for UnreadableReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unreadable report: {} ({} bytes: \"{}\"{})",
            self.reason,
            self.size,
            self.head,
            if self.size > HEAD_BYTES { "…" } else { "" }
        )?;
        match &self.last_readable {
            Some(last) => write!(
                f,
                "; its last readable report, heard {}: {} on {}",
                mesh_store::clock::rfc3339(last.heard_at),
                mesh_host::machine_word(last.report.machine),
                mesh_host::short(&last.report.declaration)
            ),
            None => Ok(()),
        }
    }
}

/// Reads `bytes`, heard at `heard_at` as `node`'s last report; a report over `limit` bytes is
/// not parsed.
pub(crate) fn judge(node: &str, bytes: &[u8], heard_at: u64, limit: usize) -> Heard {
    let unreadable = |reason: String| {
        Heard::Unreadable(UnreadableReport {
            reason,
            size: bytes.len(),
            head: bytes[..bytes.len().min(HEAD_BYTES)]
                .escape_ascii()
                .to_string(),
            heard_at,
            last_readable: None,
        })
    };
    if bytes.len() > limit {
        return unreadable(format!(
            "{} bytes, over the limit of {limit} a report may hold",
            bytes.len()
        ));
    }
    match Report::from_json(bytes) {
        Err(WireError::Format {
            found, expected, ..
        }) if found > expected => unreadable(format!(
            "`{node}` runs a newer mesh-host (report format {found}; this controller reads up to \
             {expected})"
        )),
        Err(WireError::Json { source, .. }) => unreadable(format!("not a report: {source}")),
        Err(error) => unreadable(error.to_string()),
        Ok(report) if report.node != node => unreadable(format!(
            "published as `{node}`, it names another node, `{}`",
            report.node
        )),
        Ok(report) => Heard::Read { report, heard_at },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(bytes: &[u8]) -> String {
        match judge("laptop", bytes, 7, MAX_REPORT_BYTES) {
            Heard::Unreadable(u) => {
                assert_eq!(u.size, bytes.len());
                assert_eq!(u.heard_at, 7);
                u.to_string()
            }
            Heard::Read { .. } => panic!("read"),
        }
    }

    const GOOD: &str = r#"{"format":2,"node":"laptop","declaration":"sha256:00","machine":"converged","resources":{},"started-at":1,"finished-at":2}"#;

    #[test]
    fn each_way_a_report_is_unreadable_is_named() {
        assert!(matches!(
            judge("laptop", GOOD.as_bytes(), 7, MAX_REPORT_BYTES),
            Heard::Read { heard_at: 7, .. }
        ));
        let garbage = reason(b"\x00\xffgarbage\n");
        assert!(
            garbage.starts_with("unreadable report: not a report: "),
            "{garbage}"
        );
        assert!(
            garbage.contains(r#"(10 bytes: "\x00\xffgarbage\n")"#),
            "{garbage}"
        );
        let cut = reason(&GOOD.as_bytes()[..40]);
        assert!(cut.contains("not a report: EOF"), "{cut}");
        let newer = reason(&GOOD.replace("\"format\":2", "\"format\":99").into_bytes());
        assert!(
            newer.contains(
                "`laptop` runs a newer mesh-host (report format 99; this controller reads up to 2)"
            ),
            "{newer}"
        );
        let other = reason(
            &GOOD
                .replace("\"node\":\"laptop\"", "\"node\":\"home\"")
                .into_bytes(),
        );
        assert!(
            other.contains("published as `laptop`, it names another node, `home`"),
            "{other}"
        );
        let large = reason(&vec![b' '; MAX_REPORT_BYTES + 1]);
        assert!(
            large.contains("262145 bytes, over the limit of 262144"),
            "{large}"
        );
        assert!(large.ends_with("\"…)"), "{large}");
    }

    #[test]
    fn the_last_readable_report_is_shown_as_such() {
        let Heard::Read { report, .. } = judge("laptop", GOOD.as_bytes(), 7, MAX_REPORT_BYTES)
        else {
            panic!("not read");
        };
        let Heard::Unreadable(mut unreadable) = judge("laptop", b"x", 9, MAX_REPORT_BYTES) else {
            panic!("read");
        };
        unreadable.last_readable = Some(LastReadable {
            format: LAST_READABLE_FORMAT,
            heard_at: 7,
            report,
            through_sequence: 3,
        });
        let shown = unreadable.to_string();
        assert!(
            shown.ends_with(&format!(
                "(1 bytes: \"x\"); its last readable report, heard {}: converged on {}",
                mesh_store::clock::rfc3339(7),
                mesh_host::short("sha256:00")
            )),
            "{shown}"
        );
    }

    #[test]
    fn a_newer_minor_versions_unknown_field_is_read() {
        let newer = GOOD.replace("\"machine\"", "\"uptime\":{\"secs\":3},\"machine\"");
        assert!(matches!(
            judge("laptop", newer.as_bytes(), 7, MAX_REPORT_BYTES),
            Heard::Read { .. }
        ));
    }
}
