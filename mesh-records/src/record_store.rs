//! Where the mesh's records are kept: a small key → bytes store that the controller writes
//! (inventory, settings and their history, what was sent, plans, builds) and the collector
//! reads.
//!
//! Two kinds, one trait ([`RecordStore`]):
//! - [`DirRecords`], the embedded default: each key a file under the mesh home
//!   (`plans/<id>.json` is `<home>/plans/<id>.json`), written atomically;
//! - on a fleet, a JetStream key-value bucket (mesh-bus's `KvRecords`), so that a controller
//!   restarted — or started on another machine — reads the same record.
//!
//! Keys are `/`-separated paths of plain names (letters, digits, `-`, `_`, `.`; no name
//! starts with `.`), the same on both kinds, so moving a mesh home onto a bus copies keys as
//! they are.
//!
//! # Guarantees
//! - A `put` is whole or absent: a reader never sees half a record.
//! - [`RecordStore::update`] is a read-modify-write that never loses a concurrent writer's
//!   change: under a lock on [`DirRecords`], by compare-and-set on a bucket.
//! - [`RecordStore::compare_and_set`] writes (or removes) a record only if it is still the
//!   [`Version`] read with [`RecordStore::get_versioned`], or still absent: a caller that must
//!   do more between reading and writing than `update` allows (write a history record first)
//!   never overwrites a change it did not see.
//! - A key written by `update` or `compare_and_set` must be written only that way: a plain
//!   [`RecordStore::put`] does not wait for the lock they take on a directory.

use crate::files::{exclusive_file_lock, write_atomically};
use serde::Serialize;
use std::fmt;
use std::path::{Path, PathBuf};

/// What a collection removed: how many records and their bytes, and how many it left only
/// because they were younger than its grace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Collected {
    /// Records removed.
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Records named by nothing and kept, younger than the grace.
    pub young: u64,
}

/// An error reading or writing a record: what was being done, where, and why.
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} {location}")]
pub struct RecordStoreError {
    /// What was being done (`read`, `write`, `list`, …).
    pub action: &'static str,
    /// The record or directory: a path, or `bucket <name>, key <key>`.
    pub location: String,
    /// Why.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

impl RecordStoreError {
    /// An error of `action` at `location` for `source`.
    pub fn new(
        action: &'static str,
        location: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        RecordStoreError {
            action,
            location: location.into(),
            source: source.into(),
        }
    }
}

/// What an [`RecordStore::update`] does with the record it read: the bytes to write, or why
/// not (nothing is written).
pub type Change<'a> = dyn FnMut(Option<&[u8]>) -> Result<Vec<u8>, String> + 'a;

/// A record as a listing gives it ([`RecordStore::stat_under`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordStat {
    /// Its key.
    pub key: String,
    /// When it was last written, in seconds since the epoch by the store's clock: a file's
    /// modification time, the time the bus stored the value.
    pub written: u64,
    /// How many bytes the store holds at the key.
    pub size: u64,
}

/// Which value of a record was read, for [`RecordStore::compare_and_set`]. Compare it only with
/// versions given by the same store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Version {
    /// The bucket's revision of the key (its stream sequence).
    Revision(u64),
    /// The SHA-256 of the record's bytes: a directory keeps no revisions, so a record written
    /// back to the same bytes is the same version.
    Digest([u8; 32]),
}

impl Version {
    /// The version of `bytes` in a store without revisions.
    pub fn of_bytes(bytes: &[u8]) -> Version {
        use sha2::Digest as _;
        Version::Digest(sha2::Sha256::digest(bytes).into())
    }
}

/// What a [`RecordStore::compare_and_set`] did.
#[must_use = "a stale compare-and-set wrote nothing"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swap {
    /// The record was the version expected, and is now the new one.
    Done,
    /// Another writer changed the record first (or made it, or removed it): nothing was
    /// written. Read it again and decide again.
    Stale,
}

/// A key → bytes store for the mesh's records.
pub trait RecordStore: Send + Sync + fmt::Debug {
    /// Where the records are, for people: a directory, or `bucket mesh-records on nats://…`.
    fn name(&self) -> String;

    /// Where one record is, for error messages: a path, or the bucket and key.
    fn locate(&self, key: &str) -> String;

    /// The record at `key`, `None` when there is none.
    ///
    /// # Errors
    /// When it cannot be read.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, RecordStoreError>;

    /// Replaces the record at `key`, whole.
    ///
    /// # Errors
    /// When it cannot be written; then nothing changed.
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), RecordStoreError>;

    /// Replaces each record of `records`, whole, in order: where the store can, the writes are
    /// sent together and their acknowledgements awaited together (a bucket), not one round
    /// trip each. By default one [`RecordStore::put`] after another.
    ///
    /// # Guarantees
    /// When it returns `Ok`, every record is written; a reader that sees a later record of the
    /// batch may not yet see an earlier one only while the call is under way.
    ///
    /// # Errors
    /// When one cannot be written; those before it may have been.
    fn put_many(&self, records: &[(String, Vec<u8>)]) -> Result<(), RecordStoreError> {
        for (key, bytes) in records {
            self.put(key, bytes)?;
        }
        Ok(())
    }

    /// Removes the record at `key` (none there is not an error).
    ///
    /// # Errors
    /// When it cannot be removed.
    fn delete(&self, key: &str) -> Result<(), RecordStoreError>;

    /// Removes the record at each of `keys` (none there is not an error): where the store
    /// can, the removals are sent together and their answers awaited together (a bucket), not
    /// one round trip each, and what the store kept of each key (a bucket's older values and
    /// its removal's marker) goes with it. By default one [`RecordStore::delete`] after
    /// another.
    ///
    /// # Errors
    /// When one cannot be removed; others may have been.
    fn delete_many(&self, keys: &[String]) -> Result<(), RecordStoreError> {
        for key in keys {
            self.delete(key)?;
        }
        Ok(())
    }

    /// Removes every record under `dir`, however deep: one listing
    /// ([`RecordStore::keys_under`]) and [`RecordStore::delete_many`]. Returns how many
    /// records there were.
    ///
    /// # Errors
    /// When the listing cannot be read or a record cannot be removed (others may have been).
    fn delete_under(&self, dir: &str) -> Result<usize, RecordStoreError> {
        let keys = self.keys_under(dir)?;
        self.delete_many(&keys)?;
        Ok(keys.len())
    }

    /// The names one level under `dir` (`""` for the top), as a directory listing would give
    /// them: records and the directories holding more, sorted, each once.
    ///
    /// # Errors
    /// When the listing cannot be read.
    fn list(&self, dir: &str) -> Result<Vec<String>, RecordStoreError>;

    /// Every record key under `dir`, however deep, sorted (one listing where the store can;
    /// no record is read).
    ///
    /// # Errors
    /// When a listing cannot be read.
    fn keys_under(&self, dir: &str) -> Result<Vec<String>, RecordStoreError>;

    /// Every record under `dir`, however deep, with its bytes, sorted by key: one listing
    /// where the store can (a bucket's records under a prefix come in one stream), so reading
    /// a record per node of a fleet is not a round trip per node. By default
    /// [`RecordStore::keys_under`] and a [`RecordStore::get`] of each (a record removed
    /// meanwhile is left out).
    ///
    /// # Errors
    /// When the listing or a record cannot be read.
    fn values_under(&self, dir: &str) -> Result<Vec<(String, Vec<u8>)>, RecordStoreError> {
        let mut values = Vec::new();
        for key in self.keys_under(dir)? {
            if let Some(bytes) = self.get(&key)? {
                values.push((key, bytes));
            }
        }
        Ok(values)
    }

    /// Every record under `dir`, however deep, with when it was last written and its size,
    /// sorted by key; no record is read (one listing where the store can).
    ///
    /// # Errors
    /// When a listing cannot be read.
    fn stat_under(&self, dir: &str) -> Result<Vec<RecordStat>, RecordStoreError>;

    /// Removes what the store keeps for itself that no record names any more, written at least
    /// `grace_secs` before `now` (the chunks of records replaced, in
    /// [`crate::chunked::ChunkedRecords`]); by default there is none.
    ///
    /// # Errors
    /// When what it keeps cannot be listed, read or removed.
    fn collect_leftovers(&self, now: u64, grace_secs: u64) -> Result<Collected, RecordStoreError> {
        let _ = (now, grace_secs);
        Ok(Collected::default())
    }

    /// Reads the record at `key`, gives it to `change`, and writes what `change` returns,
    /// never losing a concurrent writer's change (`change` may be called again with the newer
    /// record). Returns what was written.
    ///
    /// # Errors
    /// When the record cannot be read or written, or `change` refuses (nothing is written).
    fn update(&self, key: &str, change: &mut Change<'_>) -> Result<Vec<u8>, RecordStoreError>;

    /// The record at `key` and which version of it that is, `None` when there is none.
    ///
    /// # Errors
    /// When it cannot be read.
    fn get_versioned(&self, key: &str) -> Result<Option<(Vec<u8>, Version)>, RecordStoreError>;

    /// Writes `new` at `key` (`None`: removes the record) only if the record is still
    /// `expected` (`None`: only if there is none), as one step no other compare-and-set or
    /// update of the key comes between.
    ///
    /// # Guarantees
    /// [`Swap::Done`]: the record was `expected` and is now `new`. [`Swap::Stale`]: nothing was
    /// written.
    ///
    /// # Errors
    /// When the record cannot be read, written or removed; then nothing changed.
    fn compare_and_set(
        &self,
        key: &str,
        expected: Option<&Version>,
        new: Option<&[u8]>,
    ) -> Result<Swap, RecordStoreError>;
}

/// Whether `key` is a record key: `/`-separated plain names, none starting with `.`.
pub fn is_key(key: &str) -> bool {
    !key.is_empty() && key.split('/').all(is_key_name)
}

fn is_key_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && !name.ends_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The error for a key that is not a record key.
pub fn bad_key(store: &dyn RecordStore, key: &str) -> RecordStoreError {
    RecordStoreError::new(
        "use",
        format!("{key:?} in {}", store.name()),
        "not a record key: `/`-separated names of letters, digits, `-`, `_` and `.`, \
         none starting or ending with `.`",
    )
}

/// The names one level under `dir` among `keys` (all the store's keys), sorted, each once.
pub fn children<'a>(dir: &str, keys: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    let mut names: Vec<String> = keys
        .into_iter()
        .filter_map(|key| key.strip_prefix(&prefix))
        .filter_map(|rest| rest.split('/').next())
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The embedded default: each record a file under a directory (the mesh home).
#[derive(Debug, Clone)]
pub struct DirRecords {
    root: PathBuf,
}

impl DirRecords {
    /// Records under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        DirRecords { root: root.into() }
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, key: &str) -> Result<PathBuf, RecordStoreError> {
        if !is_key(key) {
            return Err(bad_key(self, key));
        }
        Ok(self.root.join(key))
    }
}

impl RecordStore for DirRecords {
    fn name(&self) -> String {
        self.root.display().to_string()
    }

    fn locate(&self, key: &str) -> String {
        self.root.join(key).display().to_string()
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, RecordStoreError> {
        let path = self.path(key)?;
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::IsADirectory => Ok(None),
            Err(e) => Err(RecordStoreError::new("read", path.display().to_string(), e)),
        }
    }

    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), RecordStoreError> {
        let path = self.path(key)?;
        write_atomically(&path, bytes)
            .map_err(|e| RecordStoreError::new("write", path.display().to_string(), e))
    }

    fn delete(&self, key: &str) -> Result<(), RecordStoreError> {
        let path = self.path(key)?;
        match std::fs::remove_file(&path) {
            Ok(()) => {
                // A directory left with nothing in it is no longer listed, as on a bucket.
                let mut dir = path.parent();
                while let Some(parent) = dir.filter(|d| *d != self.root) {
                    if std::fs::remove_dir(parent).is_err() {
                        break;
                    }
                    dir = parent.parent();
                }
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(RecordStoreError::new(
                "remove",
                path.display().to_string(),
                e,
            )),
        }
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, RecordStoreError> {
        let path = if dir.is_empty() {
            self.root.clone()
        } else {
            self.path(dir)?
        };
        let entries = match std::fs::read_dir(&path) {
            Ok(entries) => entries,
            // Nothing under a record, or under a directory never made.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                return Ok(Vec::new())
            }
            Err(e) => return Err(RecordStoreError::new("list", path.display().to_string(), e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry =
                entry.map_err(|e| RecordStoreError::new("list", path.display().to_string(), e))?;
            // Temporary files and locks start with `.`; a name that is not UTF-8 is no key.
            if let Some(name) = entry.file_name().to_str() {
                if is_key_name(name) {
                    names.push(name.to_owned());
                }
            }
        }
        names.sort();
        Ok(names)
    }

    fn keys_under(&self, dir: &str) -> Result<Vec<String>, RecordStoreError> {
        let mut keys = Vec::new();
        for name in self.list(dir)? {
            let key = if dir.is_empty() {
                name
            } else {
                format!("{dir}/{name}")
            };
            let path = self.root.join(&key);
            // The entry itself, never what a link points to: a link is no record.
            let kind = std::fs::symlink_metadata(&path)
                .map_err(|e| RecordStoreError::new("list", path.display().to_string(), e))?
                .file_type();
            if kind.is_file() {
                keys.push(key);
            } else if kind.is_dir() {
                keys.extend(self.keys_under(&key)?);
            }
        }
        keys.sort();
        Ok(keys)
    }

    fn stat_under(&self, dir: &str) -> Result<Vec<RecordStat>, RecordStoreError> {
        let mut stats = Vec::new();
        for key in self.keys_under(dir)? {
            let path = self.root.join(&key);
            match std::fs::symlink_metadata(&path) {
                Ok(metadata) => {
                    let written = metadata
                        .modified()
                        .ok()
                        .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
                        .map_or(0, |d| d.as_secs());
                    stats.push(RecordStat {
                        key,
                        written,
                        size: metadata.len(),
                    });
                }
                // Removed since it was listed: no longer a record.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(RecordStoreError::new("list", path.display().to_string(), e)),
            }
        }
        Ok(stats)
    }

    fn update(&self, key: &str, change: &mut Change<'_>) -> Result<Vec<u8>, RecordStoreError> {
        let path = self.path(key)?;
        let dir = path.parent().unwrap_or(&self.root);
        let lock = dir.join(".lock");
        let _guard = exclusive_file_lock(&lock)
            .map_err(|e| RecordStoreError::new("lock", lock.display().to_string(), e))?;
        let current = self.get(key)?;
        let new = change(current.as_deref())
            .map_err(|why| RecordStoreError::new("update", path.display().to_string(), why))?;
        self.put(key, &new)?;
        Ok(new)
    }

    fn get_versioned(&self, key: &str) -> Result<Option<(Vec<u8>, Version)>, RecordStoreError> {
        Ok(self.get(key)?.map(|bytes| {
            let version = Version::of_bytes(&bytes);
            (bytes, version)
        }))
    }

    fn compare_and_set(
        &self,
        key: &str,
        expected: Option<&Version>,
        new: Option<&[u8]>,
    ) -> Result<Swap, RecordStoreError> {
        let path = self.path(key)?;
        let dir = path.parent().unwrap_or(&self.root);
        // The lock `update` takes: the two exclude each other.
        let lock = dir.join(".lock");
        let _guard = exclusive_file_lock(&lock)
            .map_err(|e| RecordStoreError::new("lock", lock.display().to_string(), e))?;
        let current = self.get(key)?.map(|bytes| Version::of_bytes(&bytes));
        if current.as_ref() != expected {
            return Ok(Swap::Stale);
        }
        match new {
            Some(bytes) => self.put(key, bytes)?,
            None => self.delete(key)?,
        }
        Ok(Swap::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_plain_paths() {
        assert!(is_key("plans/20261129-1.json"));
        assert!(is_key("inventory.toml"));
        assert!(!is_key(""));
        assert!(!is_key("plans//a"));
        assert!(!is_key("../etc/passwd"));
        assert!(!is_key("plans/.lock"));
        assert!(!is_key("a b"));
        assert!(!is_key("/abs"));
    }

    #[test]
    fn children_are_one_level_sorted_once() {
        let keys = [
            "settings/web/mesh.json",
            "settings/web/nodes/a.json",
            "settings/db/mesh.json",
            "settingsx/y",
            "inventory.toml",
        ];
        assert_eq!(children("settings", keys), vec!["db", "web"]);
        assert_eq!(children("settings/web", keys), vec!["mesh.json", "nodes"]);
        assert_eq!(
            children("", keys),
            vec!["inventory.toml", "settings", "settingsx"]
        );
        assert!(children("plans", keys).is_empty());
    }

    #[test]
    fn a_directory_holds_what_was_put_and_lists_it() {
        let dir = tempfile::tempdir().unwrap();
        let records = DirRecords::new(dir.path());
        assert_eq!(records.get("plans/a.json").unwrap(), None);
        records.put("plans/a.json", b"1").unwrap();
        records.put("plans/b.json", b"2").unwrap();
        assert_eq!(records.get("plans/a.json").unwrap(), Some(b"1".to_vec()));
        assert_eq!(records.list("plans").unwrap(), vec!["a.json", "b.json"]);
        assert_eq!(records.list("").unwrap(), vec!["plans"]);
        assert!(records.list("plans/a.json").unwrap().is_empty());
        let written = records
            .update("plans/a.json", &mut |old| {
                Ok([old.unwrap_or_default(), b"+"].concat())
            })
            .unwrap();
        assert_eq!(written, b"1+");
        // The update's lock file is not a record.
        assert_eq!(records.list("plans").unwrap(), vec!["a.json", "b.json"]);
        let refused = records.update("plans/a.json", &mut |_| Err("no".into()));
        assert!(refused.is_err());
        assert_eq!(records.get("plans/a.json").unwrap(), Some(b"1+".to_vec()));
        records.put("plans/deeper/c.json", b"3").unwrap();
        assert_eq!(
            records.keys_under("plans").unwrap(),
            vec!["plans/a.json", "plans/b.json", "plans/deeper/c.json"]
        );
        assert_eq!(records.keys_under("").unwrap().len(), 3);
        records.delete("plans/deeper/c.json").unwrap();
        records.delete("plans/a.json").unwrap();
        records.delete("plans/a.json").unwrap();
        assert_eq!(records.list("plans").unwrap(), vec!["b.json"]);
        records.put("rollouts/p/m/a.json", b"a").unwrap();
        records.put("rollouts/p/m/b.json", b"b").unwrap();
        records.put("rollouts/q/m/a.json", b"a").unwrap();
        assert_eq!(records.delete_under("rollouts/p").unwrap(), 2);
        assert_eq!(records.list("rollouts").unwrap(), vec!["q"]);
        records
            .delete_many(&["rollouts/q/m/a.json".to_owned(), "gone.json".to_owned()])
            .unwrap();
        assert!(records.keys_under("rollouts").unwrap().is_empty());
        let error = records.get("../x").unwrap_err();
        assert!(error.to_string().contains("\"../x\""), "{error}");
    }

    #[test]
    fn a_compare_and_set_writes_only_over_the_version_it_read() {
        let dir = tempfile::tempdir().unwrap();
        let records = DirRecords::new(dir.path());
        let key = "settings/web/mesh.json";
        assert_eq!(records.get_versioned(key).unwrap(), None);
        // Made only while absent.
        assert_eq!(
            records.compare_and_set(key, None, Some(b"1")).unwrap(),
            Swap::Done
        );
        assert_eq!(
            records.compare_and_set(key, None, Some(b"other")).unwrap(),
            Swap::Stale
        );
        let (bytes, first) = records.get_versioned(key).unwrap().unwrap();
        assert_eq!(bytes, b"1");
        assert_eq!(
            records
                .compare_and_set(key, Some(&first), Some(b"2"))
                .unwrap(),
            Swap::Done
        );
        // The version read before the change is stale now: nothing is written.
        assert_eq!(
            records
                .compare_and_set(key, Some(&first), Some(b"3"))
                .unwrap(),
            Swap::Stale
        );
        assert_eq!(
            records.compare_and_set(key, Some(&first), None).unwrap(),
            Swap::Stale
        );
        assert_eq!(records.get(key).unwrap(), Some(b"2".to_vec()));
        let (_, second) = records.get_versioned(key).unwrap().unwrap();
        assert_eq!(
            records.compare_and_set(key, Some(&second), None).unwrap(),
            Swap::Done
        );
        assert_eq!(records.get(key).unwrap(), None);
        // Its lock is not a record.
        assert!(records.keys_under("settings").unwrap().is_empty());
    }
}
