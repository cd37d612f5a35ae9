//! The **stat cache**: what each managed file was when its content was last read and found
//! (or written) as declared — its size, mtime, ctime and inode, with the digest of its bytes then.
//!
//! A no-op apply ([`crate::apply`]) and a drift examination ([`crate::drift::Examiner`]) read a
//! file's content only when its stamp differs from the one kept here, as git's index does:
//! ctime cannot be set back from user space, so a file changed by hand — even with its mtime put
//! back — has another stamp. A stamp taken within [`RACY_NS`] of its file's ctime is never kept
//! (git's "racily clean" entries): a file changed again within one tick of the filesystem's clock
//! would keep its ctime. A full check on a longer interval (`mesh-host serve --full-check`) reads
//! every file whatever its stamp.
//!
//! Kept under the state directory as `drift/stat-cache.json`, its own versioned format
//! ([`STAT_CACHE_FORMAT`]). Every entry is a fact ("a file with this stamp held these bytes"), so
//! a cache written by another run, or a lost update, only costs work, never a wrong answer; an
//! unreadable cache is started afresh.
//!
//! What it must never do: say a file is as declared without its stamp matching one taken when it
//! was read or written.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// The version of the stat cache's format this build writes and reads.
pub const STAT_CACHE_FORMAT: u32 = 1;

/// The stat cache's file, under the state directory.
pub const STAT_CACHE_FILE: &str = "drift/stat-cache.json";

/// A stamp is kept only when its file's ctime is at least this long before the stamp was
/// taken (2 s: far above any filesystem clock's tick).
pub const RACY_NS: i64 = 2_000_000_000;

/// What a file was when it was last read or written as declared: its stamp and the digest of
/// its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Stamp {
    /// Size in bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// Status change time, nanoseconds since the epoch.
    pub ctime_ns: i64,
    /// Inode number.
    pub ino: u64,
    /// `sha256:<hex>` of its bytes then.
    pub digest: String,
}

impl Stamp {
    /// Whether `meta` is the file this stamp was taken of, unchanged.
    pub fn same_file(&self, meta: &std::fs::Metadata) -> bool {
        self.size == meta.size()
            && self.ino == meta.ino()
            && self.mtime_ns == nanos(meta.mtime(), meta.mtime_nsec())
            && self.ctime_ns == nanos(meta.ctime(), meta.ctime_nsec())
    }
}

fn nanos(secs: i64, nsecs: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsecs)
}

/// The cache file's format (`drift/stat-cache.json`, version [`STAT_CACHE_FORMAT`]), as read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct StatCacheFile {
    format: u32,
    /// Machine path → its stamp.
    files: HashMap<String, Stamp>,
    /// Machine path → the digest of what the mesh last left there (written, or read as
    /// declared), stamp or not: what is there now is a hand edit when it differs
    /// ([`StatCache::left_by_the_mesh`]). An older build reads no cache with it, which only
    /// costs work.
    #[serde(default)]
    left: HashMap<String, String>,
    /// Machine path → what the mesh rendered what it left there from, for a file rendered
    /// from secrets ([`crate::sealed::Deferred::from`]): while it is the same, what the file
    /// should hold is the digest in `left`, known without opening a secret
    /// ([`StatCache::rendered_digest`]). An older build reads a cache with it and ignores it.
    #[serde(default)]
    left_from: HashMap<String, String>,
}

/// What the cache keeps of one machine path: the three maps of its file, by path once (one
/// look-up answers all three for a file, which a no-op apply asks of each).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Entry {
    stamp: Option<Stamp>,
    left: Option<String>,
    left_from: Option<String>,
}

impl Entry {
    fn is_empty(&self) -> bool {
        self.stamp.is_none() && self.left.is_none() && self.left_from.is_none()
    }
}

/// The cache's entries written as its file's format, [`StatCacheFile`] (serialized from
/// them as they are, without maps made to hold them).
struct AsWritten<'c>(&'c HashMap<String, Entry>);

impl Serialize for AsWritten<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        struct Field<'c, T: Serialize + 'c>(
            &'c HashMap<String, Entry>,
            fn(&'c Entry) -> Option<&'c T>,
        );
        impl<'c, T: Serialize + 'c> Serialize for Field<'c, T> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let Field(entries, of) = self;
                serializer.collect_map(
                    entries
                        .iter()
                        .filter_map(|(path, entry)| of(entry).map(|value| (path, value))),
                )
            }
        }
        let entries = self.0;
        let left: Field<'_, String> = Field(entries, |entry| entry.left.as_ref());
        let left_from: Field<'_, String> = Field(entries, |entry| entry.left_from.as_ref());
        let any_left = entries.values().any(|entry| entry.left.is_some());
        let any_left_from = entries.values().any(|entry| entry.left_from.is_some());
        let mut file = serializer.serialize_struct("StatCacheFile", 4)?;
        file.serialize_field("format", &STAT_CACHE_FORMAT)?;
        file.serialize_field("files", &Field(entries, |entry| entry.stamp.as_ref()))?;
        // Absent when empty, as they were before there were any.
        if any_left {
            file.serialize_field("left", &left)?;
        }
        if any_left_from {
            file.serialize_field("left-from", &left_from)?;
        }
        file.end()
    }
}

/// The stat cache of one host, read from its state directory.
#[derive(Debug)]
pub struct StatCache {
    /// Machine path → what is kept of it.
    entries: HashMap<String, Entry>,
    path: PathBuf,
    dirty: bool,
    /// The cache file as last read or written (inode, size, mtime): [`StatCache::refresh`]
    /// reads it again only when another writer replaced it.
    seen: Option<(u64, u64, i64)>,
}

/// The caches this process kept ([`StatCache::keep`]), by state directory.
static KEPT: std::sync::Mutex<std::collections::BTreeMap<PathBuf, StatCache>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

fn file_identity(path: &Path) -> Option<(u64, u64, i64)> {
    std::fs::metadata(path).ok().map(|meta| {
        (
            meta.ino(),
            meta.size(),
            nanos(meta.mtime(), meta.mtime_nsec()),
        )
    })
}

impl StatCache {
    /// The cache of the host whose state directory is `state_dir` (empty when there is none,
    /// or it cannot be read, or it is of another format: it only saves work).
    pub fn open(state_dir: &Path) -> StatCache {
        let path = state_dir.join(STAT_CACHE_FILE);
        let file = std::fs::read(&path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<StatCacheFile>(&bytes).ok())
            .filter(|cache| cache.format == STAT_CACHE_FORMAT)
            .unwrap_or_default();
        let mut entries: HashMap<String, Entry> = HashMap::with_capacity(file.files.len());
        for (at, stamp) in file.files {
            entries.entry(at).or_default().stamp = Some(stamp);
        }
        for (at, left) in file.left {
            entries.entry(at).or_default().left = Some(left);
        }
        for (at, from) in file.left_from {
            entries.entry(at).or_default().left_from = Some(from);
        }
        let seen = file_identity(&path);
        StatCache {
            entries,
            path,
            dirty: false,
            seen,
        }
    }

    /// An empty cache of no state directory, that keeps nothing (what an apply leaves in place
    /// of the cache it kept).
    pub(crate) fn none() -> StatCache {
        StatCache {
            entries: HashMap::new(),
            path: PathBuf::new(),
            dirty: false,
            seen: None,
        }
    }

    /// The cache of `state_dir` as this process last left it ([`StatCache::keep`]) when its
    /// file was not replaced since (read again otherwise, [`StatCache::refresh`]); read from
    /// the file when this process kept none. An apply takes it, so a no-op apply of many files
    /// does not parse it again.
    pub fn take(state_dir: &Path) -> StatCache {
        let kept = KEPT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(state_dir);
        match kept {
            Some(mut cache) => {
                cache.refresh();
                cache
            }
            None => StatCache::open(state_dir),
        }
    }

    /// Saves the cache ([`StatCache::save`]) and keeps it in this process for the next
    /// [`StatCache::take`] of its state directory.
    pub fn keep(mut self) {
        self.save();
        if self.dirty {
            // Not written: the next take reads the file.
            return;
        }
        let Some(state_dir) = self.path.parent().and_then(Path::parent) else {
            return;
        };
        KEPT.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(state_dir.to_path_buf(), self);
    }

    /// Reads the cache again when another writer (an apply) replaced its file since it was
    /// last read or written here; what is kept here and not yet saved is written first.
    pub fn refresh(&mut self) {
        self.save();
        if file_identity(&self.path) != self.seen {
            let state_dir = self
                .path
                .parent()
                .and_then(Path::parent)
                .map(Path::to_path_buf)
                .unwrap_or_default();
            *self = StatCache::open(&state_dir);
        }
    }

    /// The digest of the bytes of the file at machine path `path`, when `meta` matches the
    /// stamp kept for it.
    pub fn known_digest(&self, path: &str, meta: &std::fs::Metadata) -> Option<&str> {
        self.stamp(path)
            .filter(|stamp| stamp.same_file(meta))
            .map(|stamp| stamp.digest.as_str())
    }

    /// Whether a stamp is kept for `path` (whatever the file is now).
    pub fn has(&self, path: &str) -> bool {
        self.stamp(path).is_some()
    }

    /// The stamp kept for the file at machine path `path` (whatever the file is now): its
    /// digest says what the file held only when [`Stamp::same_file`] says it is that file.
    pub fn stamp(&self, path: &str) -> Option<&Stamp> {
        self.entries.get(path)?.stamp.as_ref()
    }

    /// Keeps that the file at `path`, as `meta` says it is, holds bytes of `digest`; `now` is
    /// when `meta` was read (seconds since the epoch). A stamp within [`RACY_NS`] of its ctime
    /// is not kept (and any older one is forgotten).
    /// What the mesh left there is now these bytes: what it was rendered from, if it was, is
    /// forgotten when they are other bytes ([`StatCache::record_rendered`] keeps it).
    pub fn record(&mut self, path: &str, meta: &std::fs::Metadata, digest: &str, now: u64) {
        self.record_entry(path, meta, digest, None, now);
    }

    /// [`StatCache::record`] of a file the mesh rendered from secrets, and what it rendered it
    /// from ([`crate::sealed::Deferred::from`]).
    pub fn record_rendered(
        &mut self,
        path: &str,
        meta: &std::fs::Metadata,
        digest: &str,
        from: &str,
        now: u64,
    ) {
        self.record_entry(path, meta, digest, Some(from), now);
    }

    /// [`StatCache::record`], and [`StatCache::record_rendered`] with `from`: one look-up of
    /// the path's entry.
    fn record_entry(
        &mut self,
        path: &str,
        meta: &std::fs::Metadata,
        digest: &str,
        from: Option<&str>,
        now: u64,
    ) {
        let entry = match self.entries.get_mut(path) {
            Some(entry) => entry,
            None => self.entries.entry(path.to_owned()).or_default(),
        };
        let mut changed = false;
        if entry.left.as_deref() != Some(digest) {
            entry.left = Some(digest.to_owned());
            entry.left_from = None;
            changed = true;
        }
        if let Some(from) = from {
            if entry.left_from.as_deref() != Some(from) {
                entry.left_from = Some(from.to_owned());
                changed = true;
            }
        }
        let ctime_ns = nanos(meta.ctime(), meta.ctime_nsec());
        let taken_ns = i64::try_from(now)
            .unwrap_or(i64::MAX)
            .saturating_mul(1_000_000_000);
        if ctime_ns.saturating_add(RACY_NS) > taken_ns {
            changed |= entry.stamp.take().is_some();
        } else {
            let stamp = Stamp {
                size: meta.size(),
                mtime_ns: nanos(meta.mtime(), meta.mtime_nsec()),
                ctime_ns,
                ino: meta.ino(),
                digest: digest.to_owned(),
            };
            if entry.stamp.as_ref() != Some(&stamp) {
                entry.stamp = Some(stamp);
                changed = true;
            }
        }
        self.dirty |= changed;
    }

    /// The digest of what the mesh last left at `path` when it rendered it from `from`: what
    /// a file rendered from the same holds, known without rendering it.
    pub fn rendered_digest(&self, path: &str, from: &str) -> Option<&str> {
        self.rendered(path, from).map(|(digest, _)| digest)
    }

    /// [`StatCache::rendered_digest`], with the stamp kept for `path` (one look-up).
    pub fn rendered(&self, path: &str, from: &str) -> Option<(&str, Option<&Stamp>)> {
        let entry = self.entries.get(path)?;
        if entry.left_from.as_deref() != Some(from) {
            return None;
        }
        Some((entry.left.as_deref()?, entry.stamp.as_ref()))
    }

    /// Forgets the stamp of `path`, and what the mesh left there.
    pub fn forget(&mut self, path: &str) {
        if self
            .entries
            .remove(path)
            .is_some_and(|entry| !entry.is_empty())
        {
            self.dirty = true;
        }
    }

    /// The digest of what the mesh last left at `path` (written there, or read there as
    /// declared), whatever the file's stamp.
    pub fn left_by_the_mesh(&self, path: &str) -> Option<&str> {
        self.entries.get(path)?.left.as_deref()
    }

    /// Writes the cache when it changed (temp + rename; a failure only costs work later).
    pub fn save(&mut self) {
        if !self.dirty {
            return;
        }
        let Some(dir) = self.path.parent() else {
            return;
        };
        let temporary = dir.join(".stat-cache.json.new");
        let written = std::fs::create_dir_all(dir)
            .and_then(|()| {
                std::fs::write(
                    &temporary,
                    serde_json::to_vec(&AsWritten(&self.entries))
                        .expect("a stat cache always serializes"),
                )
            })
            .and_then(|()| std::fs::rename(&temporary, &self.path));
        if written.is_ok() {
            self.dirty = false;
            self.seen = file_identity(&self.path);
        }
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn digest_of_bytes(bytes: &[u8]) -> String {
    mesh_model::sha256_digest(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_taken_within_the_racy_margin_of_its_ctime_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        let meta = std::fs::symlink_metadata(&file).unwrap();
        let ctime = u64::try_from(meta.ctime()).unwrap();
        let mut cache = StatCache::open(dir.path());
        cache.record("/f", &meta, "sha256:x", ctime);
        assert_eq!(cache.known_digest("/f", &meta), None, "racy: not kept");
        cache.record("/f", &meta, "sha256:x", ctime + 3);
        assert_eq!(cache.known_digest("/f", &meta), Some("sha256:x"));
        cache.save();
        let again = StatCache::open(dir.path());
        assert_eq!(again.known_digest("/f", &meta), Some("sha256:x"));
    }
}
