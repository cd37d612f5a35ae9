//! The audit log's keeping: an append-only log of JSON entries, each sealed with its sequence,
//! the digest of the entry before it and a digest of its own, so that an entry changed or
//! removed is found ([`verify`]) and named by its sequence.
//!
//! What an entry says (who did what, to what, with what outcome) is the controller's; this
//! module keeps bytes of JSON objects and their chain. Two kinds keep it: a file in the mesh
//! home ([`FileAuditLog`], the embedded default) and the bus's audit stream (mesh-bus), each an
//! [`AuditLog`].
//!
//! # Invariants
//! - An entry is only ever appended: no call of this module changes or removes one.
//! - Sequences start at 1 and have no gap; entry `n + 1` holds the digest of entry `n`.
//! - Two writers at once never make two entries with one sequence: the file kind appends under
//!   a lock, the stream kind with the sequence it expects last.

use sha2::{Digest as _, Sha256};
use std::path::{Path, PathBuf};

/// The `prev` of the first entry: there is none before it.
pub const FIRST_PREV: &str = "none";

/// An entry as the log keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// Its place in the log, from 1.
    pub seq: u64,
    /// The digest of the entry before it ([`FIRST_PREV`] for the first).
    pub prev: String,
    /// Its own digest (`sha256:<hex>`), over its sequence, `prev` and entry.
    pub digest: String,
    /// The entry, a JSON object.
    pub entry: serde_json::Value,
}

/// What is wrong with an audit log.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuditError {
    /// An entry to append is not a JSON object.
    #[error("an audit entry must be a JSON object: {0}")]
    NotAnObject(String),
    /// An entry as kept cannot be read.
    #[error("audit entry {seq} of {log} cannot be read: {why}")]
    Unreadable {
        /// The log.
        log: String,
        /// The sequence it has, or the one it should have.
        seq: u64,
        /// What is wrong.
        why: String,
    },
    /// The log's chain is broken at an entry: it was changed, or one before it removed.
    #[error("audit entry {seq} of {log} {why}")]
    Broken {
        /// The log.
        log: String,
        /// The first entry found wrong.
        seq: u64,
        /// What was found.
        why: String,
    },
    /// The log could not be read or written.
    #[error("the audit log {log}: {why}")]
    Io {
        /// The log.
        log: String,
        /// What failed.
        why: String,
    },
}

/// The digest an entry is sealed with: over its sequence, the digest before it, and the entry
/// as JSON with its keys in one order.
pub fn digest_of(seq: u64, prev: &str, entry: &serde_json::Value) -> String {
    let mut digest = Sha256::new();
    digest.update(format!("{seq}\n{prev}\n").as_bytes());
    digest.update(serde_json::to_vec(entry).unwrap_or_default());
    format!("sha256:{}", hex::encode(digest.finalize()))
}

/// Seals `entry` as entry `seq`, after the entry whose digest is `prev`: the line the log keeps.
///
/// # Errors
/// [`AuditError::NotAnObject`] when `entry` is not a JSON object.
pub fn seal(seq: u64, prev: &str, entry: &[u8]) -> Result<Sealed, AuditError> {
    let entry: serde_json::Value =
        serde_json::from_slice(entry).map_err(|e| AuditError::NotAnObject(e.to_string()))?;
    if !entry.is_object() {
        return Err(AuditError::NotAnObject(format!("it is `{entry}`")));
    }
    Ok(Sealed {
        seq,
        prev: prev.to_owned(),
        digest: digest_of(seq, prev, &entry),
        entry,
    })
}

impl Sealed {
    /// The bytes the log keeps: one line of JSON, no line break.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "seq": self.seq,
            "prev": self.prev,
            "digest": self.digest,
            "entry": self.entry,
        }))
        .unwrap_or_default()
    }

    /// An entry as the log kept it, read back; `expected` is the sequence its place says it
    /// has (named when the entry cannot say its own). Its digest is not checked here
    /// ([`verify`] does).
    ///
    /// # Errors
    /// [`AuditError::Unreadable`] naming `log` and the sequence.
    pub fn from_bytes(log: &str, expected: u64, bytes: &[u8]) -> Result<Sealed, AuditError> {
        let unreadable = |why: String| AuditError::Unreadable {
            log: log.to_owned(),
            seq: expected,
            why,
        };
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| unreadable(e.to_string()))?;
        let field = |name: &str| {
            value
                .get(name)
                .ok_or_else(|| unreadable(format!("it has no `{name}`")))
        };
        let seq = field("seq")?
            .as_u64()
            .ok_or_else(|| unreadable("its `seq` is not a number".to_owned()))?;
        let text = |name: &str| -> Result<String, AuditError> {
            field(name)?
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| unreadable(format!("its `{name}` is not text")))
        };
        let (prev, digest) = (text("prev")?, text("digest")?);
        let entry = field("entry")?.clone();
        if !entry.is_object() {
            return Err(unreadable("its `entry` is not an object".to_owned()));
        }
        Ok(Sealed {
            seq,
            prev,
            digest,
            entry,
        })
    }
}

/// Where a [`verify`] of the whole log ended: how many entries, and the last one's digest
/// (the log's head, which a reader may keep to find the last entry changed later).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// How many entries were read.
    pub entries: u64,
    /// The last entry's digest ([`FIRST_PREV`] for an empty log).
    pub head: String,
}

/// Checks a log's entries in order from its first: each reads, has the next sequence, holds
/// the digest of the one before it and is sealed with its own. The first entry found wrong is
/// named: a changed entry by its own sequence; a removed one by the sequence missing.
///
/// # Errors
/// [`AuditError::Unreadable`] or [`AuditError::Broken`] naming the first entry found wrong.
pub fn verify<'a>(
    log: &str,
    entries: impl IntoIterator<Item = (u64, &'a [u8])>,
) -> Result<Verified, AuditError> {
    let mut expected = 1_u64;
    let mut prev = FIRST_PREV.to_owned();
    for (place, bytes) in entries {
        let broken = |seq: u64, why: String| AuditError::Broken {
            log: log.to_owned(),
            seq,
            why,
        };
        if place != expected {
            return Err(broken(
                expected,
                format!("is missing: the log goes on at {place}"),
            ));
        }
        let sealed = Sealed::from_bytes(log, expected, bytes)?;
        if sealed.seq != expected {
            return Err(broken(
                expected,
                format!("says it is entry {}: it was changed", sealed.seq),
            ));
        }
        if sealed.digest != digest_of(sealed.seq, &sealed.prev, &sealed.entry) {
            return Err(broken(
                expected,
                "was changed: it does not match the digest it was sealed with".to_owned(),
            ));
        }
        if sealed.prev != prev {
            return Err(broken(
                expected,
                format!(
                    "does not follow entry {}: it names {} before it, not {prev} — an entry \
                     before it was changed or removed",
                    expected - 1,
                    sealed.prev
                ),
            ));
        }
        prev = sealed.digest;
        expected += 1;
    }
    Ok(Verified {
        entries: expected - 1,
        head: prev,
    })
}

/// An entry read back: its sequence and the bytes kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Its place in the log.
    pub seq: u64,
    /// The bytes kept ([`Sealed::to_bytes`]).
    pub bytes: Vec<u8>,
}

/// An append-only audit log.
pub trait AuditLog: Send + Sync + std::fmt::Debug {
    /// Where it is, for messages.
    fn name(&self) -> String;

    /// Appends `entry` (a JSON object) after the last entry, sealed; a writer that came first
    /// is followed, never overwritten. Returns the entry as sealed.
    ///
    /// # Errors
    /// Not an object, or the log cannot be read or written.
    fn append(&self, entry: &[u8]) -> Result<Sealed, AuditError>;

    /// The entries from sequence `from` (1: the first) on, at most `limit`, in order.
    ///
    /// # Errors
    /// The log cannot be read.
    fn read(&self, from: u64, limit: usize) -> Result<Vec<Stored>, AuditError>;

    /// The head the log keeps apart from its entries, written after each append: the last
    /// entry's sequence and digest. A log shorter than its head lost entries at its end, which
    /// the chain alone cannot show.
    ///
    /// # Errors
    /// The head cannot be read.
    fn head(&self) -> Result<Option<Head>, AuditError>;
}

/// Refuses to append after entry `last` when the log's head names a later one: entries were
/// lost at the log's end, and an entry sealed after `last` would hide it. `head` must have been
/// read before `last` was (a head is written after its entry, so one read first is never
/// ahead of entries a writer at once made since).
///
/// # Errors
/// [`AuditError::Broken`] naming the first entry lost.
pub fn refuse_behind_head(log: &str, head: Option<&Head>, last: u64) -> Result<(), AuditError> {
    match head {
        Some(head) if head.seq > last => Err(AuditError::Broken {
            log: log.to_owned(),
            seq: last + 1,
            why: format!(
                "is missing: the log ends at entry {last} and its head names entry {}; nothing \
                 is appended after entries lost",
                head.seq
            ),
        }),
        _ => Ok(()),
    }
}

/// The last entry's sequence and digest, kept apart from the log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Head {
    /// The last entry's sequence.
    pub seq: u64,
    /// Its digest.
    pub digest: String,
}

/// Verifies a whole log ([`verify`]) and then its head: an entry the head names must be there,
/// with the head's digest (an append stopped between its entry and its head leaves the head
/// one behind, which is no fault).
///
/// # Errors
/// The first entry found wrong, or missing at the log's end.
pub fn verify_log(log: &dyn AuditLog) -> Result<Verified, AuditError> {
    let stored = log.read(1, usize::MAX)?;
    let verified = verify(
        &log.name(),
        stored.iter().map(|s| (s.seq, s.bytes.as_slice())),
    )?;
    let Some(head) = log.head()? else {
        return Ok(verified);
    };
    let broken = |seq: u64, why: String| AuditError::Broken {
        log: log.name(),
        seq,
        why,
    };
    if head.seq > verified.entries {
        return Err(broken(
            verified.entries + 1,
            format!(
                "is missing: the log ends at entry {}, and its head names entry {}",
                verified.entries, head.seq
            ),
        ));
    }
    let at = usize::try_from(head.seq).unwrap_or(usize::MAX);
    if let Some(entry) = at.checked_sub(1).and_then(|i| stored.get(i)) {
        let sealed = Sealed::from_bytes(&log.name(), head.seq, &entry.bytes)?;
        if sealed.digest != head.digest {
            return Err(broken(
                head.seq,
                "was changed: it is not the entry the log's head names".to_owned(),
            ));
        }
    }
    Ok(verified)
}

/// The audit log as a file: one sealed entry a line, appended under a lock and synced before
/// an append returns. A line is the entry its number says.
#[derive(Debug, Clone)]
pub struct FileAuditLog {
    path: PathBuf,
}

impl FileAuditLog {
    /// The log in `path` (made by its first append).
    pub fn new(path: &Path) -> FileAuditLog {
        FileAuditLog {
            path: path.to_owned(),
        }
    }

    /// Where its head is kept: beside it, `.head`.
    fn head_path(&self) -> PathBuf {
        self.path.with_extension("head")
    }

    fn io(&self, what: &str, error: &std::io::Error) -> AuditError {
        AuditError::Io {
            log: self.name(),
            why: format!("{what}: {error}"),
        }
    }

    fn lines(&self) -> Result<Vec<Vec<u8>>, AuditError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => Ok(bytes
                .split(|b| *b == b'\n')
                .filter(|line| !line.is_empty())
                .map(<[u8]>::to_vec)
                .collect()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(error) => Err(self.io("reading it", &error)),
        }
    }
}

impl AuditLog for FileAuditLog {
    fn name(&self) -> String {
        self.path.display().to_string()
    }

    fn append(&self, entry: &[u8]) -> Result<Sealed, AuditError> {
        use std::io::Write as _;
        let lock_path = self.path.with_extension("lock");
        let _lock = crate::files::exclusive_file_lock(&lock_path)
            .map_err(|e| self.io("taking its lock", &e))?;
        let lines = self.lines()?;
        let (seq, prev) = match lines.last() {
            Some(last) => {
                let seq = lines.len() as u64;
                let last = Sealed::from_bytes(&self.name(), seq, last)?;
                (seq + 1, last.digest)
            }
            None => (1, FIRST_PREV.to_owned()),
        };
        refuse_behind_head(&self.name(), self.head()?.as_ref(), seq - 1)?;
        let sealed = seal(seq, &prev, entry)?;
        let mut line = sealed.to_bytes();
        line.push(b'\n');
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| self.io("opening it to append", &e))?;
        file.write_all(&line)
            .and_then(|()| file.sync_all())
            .map_err(|e| self.io("appending to it", &e))?;
        let head = serde_json::to_vec(&Head {
            seq: sealed.seq,
            digest: sealed.digest.clone(),
        })
        .unwrap_or_default();
        crate::files::write_atomically(&self.head_path(), &head)
            .map_err(|e| self.io("writing its head", &e))?;
        Ok(sealed)
    }

    fn head(&self) -> Result<Option<Head>, AuditError> {
        match std::fs::read(self.head_path()) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| AuditError::Io {
                    log: self.name(),
                    why: format!(
                        "its head {} cannot be read: {e}",
                        self.head_path().display()
                    ),
                }),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(self.io("reading its head", &error)),
        }
    }

    fn read(&self, from: u64, limit: usize) -> Result<Vec<Stored>, AuditError> {
        Ok(self
            .lines()?
            .into_iter()
            .zip(1_u64..)
            .skip(usize::try_from(from.max(1) - 1).unwrap_or(usize::MAX))
            .take(limit)
            .map(|(bytes, seq)| Stored { seq, bytes })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: u32) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({"action": "merge", "n": n, "actor": "ana"})).unwrap()
    }

    fn log_of(n: u32) -> (tempfile::TempDir, FileAuditLog) {
        let dir = tempfile::tempdir().unwrap();
        let log = FileAuditLog::new(&dir.path().join("audit.jsonl"));
        for i in 0..n {
            log.append(&entry(i)).unwrap();
        }
        (dir, log)
    }

    fn verified(log: &FileAuditLog) -> Result<Verified, AuditError> {
        verify_log(log)
    }

    #[test]
    fn entries_are_chained_in_order_and_read_from_any_sequence() {
        let (_dir, log) = log_of(5);
        let all = log.read(1, 100).unwrap();
        assert_eq!(
            all.iter().map(|s| s.seq).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5]
        );
        let from_four = log.read(4, 100).unwrap();
        assert_eq!(from_four, all[3..].to_vec());
        assert_eq!(log.read(2, 2).unwrap(), all[1..3].to_vec());
        let verified = verified(&log).unwrap();
        assert_eq!(verified.entries, 5);
        let last = Sealed::from_bytes("t", 5, &all[4].bytes).unwrap();
        assert_eq!(verified.head, last.digest);
        let first = Sealed::from_bytes("t", 1, &all[0].bytes).unwrap();
        assert_eq!(first.prev, FIRST_PREV);
    }

    #[test]
    fn an_entry_that_is_not_an_object_is_refused_and_nothing_is_written() {
        let (_dir, log) = log_of(1);
        for bad in [&b"[1,2]"[..], b"\"text\"", b"{not json"] {
            assert!(matches!(log.append(bad), Err(AuditError::NotAnObject(_))));
        }
        assert_eq!(log.read(1, 10).unwrap().len(), 1);
    }

    #[test]
    fn any_byte_changed_in_any_entry_is_found_and_named() {
        let (_dir, log) = log_of(4);
        let original = std::fs::read(&log.path).unwrap();
        let lines: Vec<usize> = std::iter::once(0)
            .chain(
                original
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| **b == b'\n')
                    .map(|(i, _)| i + 1),
            )
            .collect();
        for at in 0..original.len() {
            if original[at] == b'\n' {
                continue;
            }
            let mut changed = original.clone();
            changed[at] ^= 0x01;
            std::fs::write(&log.path, &changed).unwrap();
            let seq = lines.iter().filter(|start| **start <= at).count() as u64;
            match verified(&log) {
                Err(AuditError::Broken { seq: found, .. })
                | Err(AuditError::Unreadable { seq: found, .. }) => {
                    assert_eq!(found, seq, "byte {at} changed")
                }
                Ok(v) => panic!("byte {at} changed (entry {seq}) and the log verified: {v:?}"),
                Err(other) => panic!("{other}"),
            }
        }
    }

    #[test]
    fn an_entry_removed_is_named() {
        let (_dir, log) = log_of(4);
        let text = std::fs::read_to_string(&log.path).unwrap();
        let kept: Vec<&str> = text
            .lines()
            .enumerate()
            .filter(|(i, _)| *i != 1)
            .map(|(_, l)| l)
            .collect();
        std::fs::write(&log.path, kept.join("\n") + "\n").unwrap();
        // The file kind numbers by line: the third line now reads as entry 2.
        match verified(&log) {
            Err(AuditError::Broken { seq, why, .. }) => {
                assert_eq!(seq, 2);
                assert!(why.contains("says it is entry 3"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        let stored = log.read(1, 10).unwrap();
        let gapped = [&stored[0], &stored[2]];
        match verify("t", gapped.iter().map(|s| (s.seq, s.bytes.as_slice()))) {
            Err(AuditError::Broken { seq, why, .. }) => {
                assert_eq!(seq, 2);
                assert!(why.contains("missing"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn entries_lost_at_the_end_are_found_by_the_head() {
        let (_dir, log) = log_of(4);
        let text = std::fs::read_to_string(&log.path).unwrap();
        let kept: Vec<&str> = text.lines().take(2).collect();
        std::fs::write(&log.path, kept.join("\n") + "\n").unwrap();
        match verified(&log) {
            Err(AuditError::Broken { seq, why, .. }) => {
                assert_eq!(seq, 3);
                assert!(why.contains("its head names entry 4"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            log.append(&entry(9)),
            Err(AuditError::Broken { seq: 3, .. })
        ));
        std::fs::write(&log.path, "").unwrap();
        assert!(matches!(
            verified(&log),
            Err(AuditError::Broken { seq: 1, .. })
        ));
    }

    #[test]
    fn writers_at_once_each_get_their_own_sequence() {
        let (_dir, log) = log_of(0);
        std::thread::scope(|scope| {
            for t in 0..4 {
                let log = log.clone();
                scope.spawn(move || {
                    for i in 0..10 {
                        log.append(&entry(t * 100 + i)).unwrap();
                    }
                });
            }
        });
        assert_eq!(verified(&log).unwrap().entries, 40);
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let _ = Sealed::from_bytes("t", 1, &bytes);
            let _ = verify("t", [(1, bytes.as_slice())]);
        }
    }
}
