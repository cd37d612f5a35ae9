//! Failures that must reach `status` (the rule “Nothing fails silently”): one small record per
//! problem in the mesh's [`RecordStore`], written where the failure is seen — by the
//! controller, or by the collector, which shares the records — and cleared when what failed
//! next succeeds.
//!
//! # Where they are
//! Key `problems/<kind>/<subject>.json` ([`PROBLEMS_DIR`]): `<kind>` a [`ProblemKind`],
//! `<subject>` what it is about (a repository, a node, the store), made a plain key name. Each
//! is a [`Problem`] in JSON with `"format": 1`.
//!
//! # Guarantees
//! - Recording the same problem again keeps when it was first seen (`since`) and updates the
//!   rest; it is one read-modify-write ([`RecordStore::update`]), so two writers lose nothing.
//! - Clearing a problem that is not there is not an error.

use mesh_records::record_store::{RecordStore, RecordStoreError};
use serde::{Deserialize, Serialize};

/// Where problems are kept.
pub const PROBLEMS_DIR: &str = "problems";

/// The version of [`Problem`] this crate writes and reads.
pub const PROBLEM_FORMAT: u32 = 1;

/// What kind of failure a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProblemKind {
    /// A merge heard that could not be planned; its subject is the repository. Cleared by a
    /// later plan of that repository.
    Merge,
    /// The collector's sweep or collection left kept archives unheld, missing or lost, or
    /// failed; its subject is the store. Cleared by a run with every kept archive held.
    Collection,
    /// A push held for a node (a moved mount waits for `--move`); its subject is the node.
    /// Cleared by a send to that node.
    HeldPush,
    /// A node's grants failed on a push over the bus; its subject is the node. Cleared by a
    /// send to that node.
    Grants,
    /// The daemon's drive of a plan failed (the store, the bus or the records failed under
    /// it); its subject is the plan. Tried again with backoff, each attempt counted; cleared
    /// by a drive of that plan that does not fail.
    Drive,
}

impl ProblemKind {
    /// The kind as written in keys and shown to people.
    pub fn word(self) -> &'static str {
        match self {
            ProblemKind::Merge => "merge",
            ProblemKind::Collection => "collection",
            ProblemKind::HeldPush => "held-push",
            ProblemKind::Grants => "grants",
            ProblemKind::Drive => "drive",
        }
    }
}

/// One failure waiting to be resolved (disk format, version [`PROBLEM_FORMAT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Problem {
    /// Always [`PROBLEM_FORMAT`].
    pub format: u32,
    /// What kind of failure.
    pub kind: ProblemKind,
    /// What it is about: a repository, a node, the store.
    pub subject: String,
    /// What failed, in one line for a person.
    pub what: String,
    /// More lines: digests missing, a full error chain.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// When it was first seen (seconds since the epoch).
    pub since: u64,
    /// When it was last seen.
    pub at: u64,
    /// Who saw it (`mesh-controller serve`, `mesh-collector collect`).
    pub by: String,
    /// The plan it holds up, when it is a plan's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// The module it was at, when one is named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// How many times it was seen since `since`, when what failed is tried again by itself
    /// (0: not counted).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempts: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A failure of a plan's, seen once more ([`record_attempt`]).
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    /// What kind of failure.
    pub kind: ProblemKind,
    /// What it is about.
    pub subject: &'a str,
    /// The plan it holds up.
    pub plan: &'a str,
    /// The module it was at, if one is named.
    pub module: Option<&'a str>,
    /// What failed, in one line.
    pub what: &'a str,
    /// More lines.
    pub details: &'a [String],
    /// When (seconds since the epoch).
    pub now: u64,
    /// Who saw it.
    pub by: &'a str,
}

/// An error reading or writing problems.
#[derive(Debug, thiserror::Error)]
pub enum ProblemError {
    /// The record store could not be read or written.
    #[error(transparent)]
    Store(#[from] RecordStoreError),
    /// A record that is not a problem of this format.
    #[error("problem record {location} is not a valid problem: {reason}")]
    Invalid {
        /// Where it is.
        location: String,
        /// Why.
        reason: String,
    },
}

/// The key of a problem: its subject made a plain key name (anything but letters, digits, `-`
/// and `_` becomes `_`; the subject itself is kept in the record).
pub fn problem_key(kind: ProblemKind, subject: &str) -> String {
    let mut name: String = subject
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        name.push('_');
    }
    format!("{PROBLEMS_DIR}/{}/{name}.json", kind.word())
}

fn parse(location: &str, bytes: &[u8]) -> Result<Problem, ProblemError> {
    let invalid = |reason: String| ProblemError::Invalid {
        location: location.to_owned(),
        reason,
    };
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| invalid(e.to_string()))?;
    match value.get("format").and_then(serde_json::Value::as_u64) {
        Some(found) if found == u64::from(PROBLEM_FORMAT) => {}
        found => {
            return Err(invalid(format!(
                "format {}, this build reads format {PROBLEM_FORMAT}",
                found.map_or("none".to_owned(), |f| f.to_string())
            )))
        }
    }
    serde_json::from_value(value).map_err(|e| invalid(e.to_string()))
}

/// Records a problem (or records it again: `since` is kept from the first time).
///
/// # Errors
/// When the record cannot be read or written.
pub fn record_problem(
    records: &dyn RecordStore,
    kind: ProblemKind,
    subject: &str,
    what: &str,
    details: Vec<String>,
    now: u64,
    by: &str,
) -> Result<Problem, ProblemError> {
    write(records, kind, subject, &mut |since, _| Problem {
        format: PROBLEM_FORMAT,
        kind,
        subject: subject.to_owned(),
        what: what.to_owned(),
        details: details.clone(),
        since: since.unwrap_or(now),
        at: now,
        by: by.to_owned(),
        plan: None,
        module: None,
        attempts: 0,
    })
}

/// Records one more attempt of a plan's failure that is tried again by itself: `since` kept
/// from the first, `attempts` one more than the record had (1 the first time).
///
/// # Errors
/// When the record cannot be read or written.
pub fn record_attempt(
    records: &dyn RecordStore,
    attempt: &Attempt<'_>,
) -> Result<Problem, ProblemError> {
    write(
        records,
        attempt.kind,
        attempt.subject,
        &mut |since, attempts| Problem {
            format: PROBLEM_FORMAT,
            kind: attempt.kind,
            subject: attempt.subject.to_owned(),
            what: attempt.what.to_owned(),
            details: attempt.details.to_vec(),
            since: since.unwrap_or(attempt.now),
            at: attempt.now,
            by: attempt.by.to_owned(),
            plan: Some(attempt.plan.to_owned()),
            module: attempt.module.map(str::to_owned),
            attempts: attempts + 1,
        },
    )
}

/// Writes a problem in one read-modify-write: `make` is given when the one recorded was first
/// seen and how many attempts it counted (none recorded: `None`, 0).
fn write(
    records: &dyn RecordStore,
    kind: ProblemKind,
    subject: &str,
    make: &mut dyn FnMut(Option<u64>, u32) -> Problem,
) -> Result<Problem, ProblemError> {
    let key = problem_key(kind, subject);
    let location = records.locate(&key);
    let written = records.update(&key, &mut |current| {
        let old = current
            .and_then(|bytes| parse(&location, bytes).ok())
            .filter(|old| old.subject == subject);
        let problem = make(
            old.as_ref().map(|old| old.since),
            old.as_ref().map_or(0, |old| old.attempts),
        );
        Ok(serde_json::to_vec_pretty(&problem).expect("a problem always serializes"))
    })?;
    parse(&location, &written)
}

/// Clears a problem once what failed succeeded; returns whether there was one.
///
/// # Errors
/// When the record cannot be read or removed.
pub fn clear_problem(
    records: &dyn RecordStore,
    kind: ProblemKind,
    subject: &str,
) -> Result<bool, ProblemError> {
    let key = problem_key(kind, subject);
    if records.get(&key)?.is_none() {
        return Ok(false);
    }
    records.delete(&key)?;
    Ok(true)
}

/// Every problem recorded, sorted by kind and subject.
///
/// # Errors
/// When a record cannot be read or is not a problem (naming it).
pub fn read_problems(records: &dyn RecordStore) -> Result<Vec<Problem>, ProblemError> {
    let mut out = Vec::new();
    for key in records.keys_under(PROBLEMS_DIR)? {
        if !key.ends_with(".json") {
            continue;
        }
        if let Some(bytes) = records.get(&key)? {
            out.push(parse(&records.locate(&key), &bytes)?);
        }
    }
    out.sort_by(|a, b| (a.kind, &a.subject).cmp(&(b.kind, &b.subject)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_records::record_store::DirRecords;

    #[test]
    fn a_problem_is_kept_until_cleared_and_remembers_when_it_began() {
        let dir = tempfile::tempdir().unwrap();
        let records = DirRecords::new(dir.path());
        assert!(read_problems(&records).unwrap().is_empty());
        let first = record_problem(
            &records,
            ProblemKind::Merge,
            "cat",
            "no plan",
            vec![],
            100,
            "t",
        )
        .unwrap();
        assert_eq!((first.since, first.at), (100, 100));
        let again = record_problem(
            &records,
            ProblemKind::Merge,
            "cat",
            "still no plan",
            vec!["why".into()],
            200,
            "t",
        )
        .unwrap();
        assert_eq!((again.since, again.at), (100, 200));
        record_problem(
            &records,
            ProblemKind::Collection,
            "oci:/a b",
            "held 1 of 2",
            vec![],
            150,
            "t",
        )
        .unwrap();
        let all = read_problems(&records).unwrap();
        assert_eq!(
            all.iter()
                .map(|p| (p.kind, p.subject.as_str(), p.what.as_str()))
                .collect::<Vec<_>>(),
            [
                (ProblemKind::Merge, "cat", "still no plan"),
                (ProblemKind::Collection, "oci:/a b", "held 1 of 2"),
            ]
        );
        assert!(clear_problem(&records, ProblemKind::Merge, "cat").unwrap());
        assert_eq!(again.attempts, 0, "a merge's problem counts no attempts");
        assert!(!clear_problem(&records, ProblemKind::Merge, "cat").unwrap());
        assert_eq!(read_problems(&records).unwrap().len(), 1);
    }

    #[test]
    fn an_attempt_counts_from_one_and_keeps_when_it_began_until_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let records = DirRecords::new(dir.path());
        let attempt = |now: u64, what: &'static str| Attempt {
            kind: ProblemKind::Drive,
            subject: "plan-3",
            plan: "plan-3",
            module: Some("site"),
            what,
            details: &[],
            now,
            by: "t",
        };
        let first = record_attempt(&records, &attempt(100, "publishing failed")).unwrap();
        assert_eq!((first.attempts, first.since, first.at), (1, 100, 100));
        assert_eq!(first.plan.as_deref(), Some("plan-3"));
        assert_eq!(first.module.as_deref(), Some("site"));
        let second = record_attempt(&records, &attempt(130, "publishing failed again")).unwrap();
        assert_eq!((second.attempts, second.since, second.at), (2, 100, 130));
        assert_eq!(read_problems(&records).unwrap(), [second]);
        assert!(clear_problem(&records, ProblemKind::Drive, "plan-3").unwrap());
        let anew = record_attempt(&records, &attempt(200, "publishing failed")).unwrap();
        assert_eq!((anew.attempts, anew.since), (1, 200));
    }
}
