//! The filebucket (the rule “A hand edit is never lost”): before the engine puts a managed file
//! back as declared over content someone changed by hand, it keeps that content here, under the
//! host's state directory, as Puppet's filebucket does. `mesh-host drift list` lists what is
//! kept and `mesh-host drift show ID` prints how it differs from the file now.
//!
//! Start at [`keep`], then [`list`] and [`read`].
//!
//! Layout: `<state-dir>/filebucket/index.json` ([`BucketIndex`], version [`BUCKET_FORMAT`]) and
//! one file per kept content, named by its sha256 (`<hex>`), mode 0600. The same content kept
//! twice is stored once.
//!
//! # Invariants
//! - Bounded: a content over [`Limits::max_file`] is not kept (the caller says so), and the
//!   oldest entries are given up once the kept bytes pass [`Limits::max_total`]; the newest
//!   entry is never the one given up.
//! - Every write is atomic (temp file, fsync, rename); the index is written after the content
//!   it names, so a crash leaves at worst a content file no entry names, which the next keep
//!   removes.
//! - A file the caller marks secret is never kept (the caller does not ask).

use crate::fsops;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The filebucket's directory under the state directory.
pub const BUCKET_DIR: &str = "filebucket";
/// The index file's name in [`BUCKET_DIR`].
pub const INDEX_FILE: &str = "index.json";
/// The index's format version.
pub const BUCKET_FORMAT: u32 = 1;

/// How much the filebucket keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest content kept, in bytes (1 MiB by default).
    pub max_file: u64,
    /// The bytes kept in all, past which the oldest entries are given up (32 MiB by default).
    pub max_total: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file: 1 << 20,
            max_total: 32 << 20,
        }
    }
}

/// One hand edit kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Kept {
    /// Its id: the first 12 hex digits of its content's sha256 and the second it was kept,
    /// `<hex>-<kept-at>` (what `mesh-host drift show` takes).
    pub id: String,
    /// The resource whose file it was (`<module>/file/<name>`).
    pub resource: String,
    /// The machine path.
    pub path: String,
    /// `sha256:<hex>` of the content kept.
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was kept (seconds since the epoch).
    pub kept_at: u64,
    /// `sha256:<hex>` of the declared content written over it.
    pub replaced_by: String,
}

/// The index (`index.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct BucketIndex {
    /// The format version ([`BUCKET_FORMAT`]).
    pub format: u32,
    /// What is kept, oldest first.
    pub entries: Vec<Kept>,
}

/// What became of a content the engine asked to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keeping {
    /// Kept, under this entry.
    Kept(Kept),
    /// Over [`Limits::max_file`]: not kept.
    TooLarge {
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
}

/// Why the filebucket could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    /// A file of it could not be read or written.
    #[error("the filebucket at {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Its index holds something this build does not read.
    #[error("the filebucket index {} is unreadable: {reason}", path.display())]
    Format {
        /// The index file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// No entry has this id.
    #[error(
        "the filebucket keeps nothing with id `{0}` (`mesh-host drift list` lists what it keeps)"
    )]
    NotFound(String),
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> BucketError + '_ {
    move |source| BucketError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The index of the filebucket under `state_dir` (empty when there is none).
///
/// # Errors
/// It cannot be read, or holds another format or something that is not an index.
pub fn list(state_dir: &Path) -> Result<BucketIndex, BucketError> {
    let path = state_dir.join(BUCKET_DIR).join(INDEX_FILE);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(BucketIndex {
                format: BUCKET_FORMAT,
                entries: Vec::new(),
            })
        }
        Err(e) => return Err(io_at(&path)(e)),
    };
    let index: BucketIndex = serde_json::from_slice(&bytes).map_err(|e| BucketError::Format {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    if index.format != BUCKET_FORMAT {
        return Err(BucketError::Format {
            path,
            reason: format!("format {} (this build reads {BUCKET_FORMAT})", index.format),
        });
    }
    Ok(index)
}

/// The entry `id` and the content it keeps.
///
/// # Errors
/// No entry has that id; the index or the content cannot be read; the content is not what the
/// index says (its digest differs).
pub fn read(state_dir: &Path, id: &str) -> Result<(Kept, Vec<u8>), BucketError> {
    let index = list(state_dir)?;
    let kept = index
        .entries
        .into_iter()
        .find(|entry| entry.id == id)
        .ok_or_else(|| BucketError::NotFound(id.to_owned()))?;
    let path = content_path(state_dir, &kept.digest).ok_or_else(|| BucketError::Format {
        path: state_dir.join(BUCKET_DIR).join(INDEX_FILE),
        reason: format!("entry `{id}` names the digest `{}`", kept.digest),
    })?;
    let bytes = fs::read(&path).map_err(io_at(&path))?;
    if crate::stamps::digest_of_bytes(&bytes) != kept.digest {
        return Err(BucketError::Format {
            path,
            reason: format!("its content is not {} any more", kept.digest),
        });
    }
    Ok((kept, bytes))
}

/// Keeps `bytes`, the content found at machine path `path` of `resource`, before the declared
/// content of digest `replaced_by` is written over it; `now` stamps it.
///
/// # Errors
/// The filebucket cannot be read or written. The caller must then not write over the content:
/// it would be lost.
pub fn keep(
    state_dir: &Path,
    limits: Limits,
    (resource, path): (&str, &str),
    bytes: &[u8],
    replaced_by: &str,
    now: u64,
) -> Result<Keeping, BucketError> {
    let size = bytes.len() as u64;
    if size > limits.max_file {
        return Ok(Keeping::TooLarge {
            size,
            limit: limits.max_file,
        });
    }
    let dir = state_dir.join(BUCKET_DIR);
    fs::create_dir_all(&dir).map_err(io_at(&dir))?;
    let mut index = match list(state_dir) {
        Ok(index) => index,
        // An index this build cannot read is set aside, not lost, and a new one begun.
        Err(BucketError::Format { path, .. }) => {
            let aside = dir.join(format!("{INDEX_FILE}.unreadable-{now}"));
            fs::rename(&path, &aside).map_err(io_at(&path))?;
            BucketIndex {
                format: BUCKET_FORMAT,
                entries: Vec::new(),
            }
        }
        Err(e) => return Err(e),
    };
    let digest = crate::stamps::digest_of_bytes(bytes);
    let hex = digest.trim_start_matches("sha256:").to_owned();
    let content = dir.join(&hex);
    if !content.exists() {
        fsops::write_atomic_private(&content, bytes).map_err(io_at(&content))?;
    }
    let kept = Kept {
        id: format!("{}-{now}", &hex[..12]),
        resource: resource.to_owned(),
        path: path.to_owned(),
        digest,
        size,
        kept_at: now,
        replaced_by: replaced_by.to_owned(),
    };
    index.entries.retain(|entry| entry.id != kept.id);
    index.entries.push(kept.clone());
    give_up_oldest(&mut index, limits.max_total);
    let index_path = dir.join(INDEX_FILE);
    let json = serde_json::to_vec_pretty(&index).expect("an index always serializes");
    fsops::write_atomic_private(&index_path, &json).map_err(io_at(&index_path))?;
    remove_unnamed(&dir, &index);
    Ok(Keeping::Kept(kept))
}

/// Drops the oldest entries until what the distinct contents weigh is within `max_total`,
/// keeping the newest whatever it weighs.
fn give_up_oldest(index: &mut BucketIndex, max_total: u64) {
    loop {
        let mut seen = BTreeSet::new();
        let total: u64 = index
            .entries
            .iter()
            .filter(|entry| seen.insert(entry.digest.as_str()))
            .map(|entry| entry.size)
            .sum();
        if total <= max_total || index.entries.len() <= 1 {
            return;
        }
        index.entries.remove(0);
    }
}

/// Removes the content files no entry names (given up, or left by a crash before the index
/// was written); best effort.
fn remove_unnamed(dir: &Path, index: &BucketIndex) {
    let named: BTreeSet<&str> = index
        .entries
        .iter()
        .map(|entry| entry.digest.trim_start_matches("sha256:"))
        .collect();
    let Ok(read) = fs::read_dir(dir) else {
        return;
    };
    for entry in read.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if is_content_name(name) && !named.contains(name) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Whether `name` is a content file's name (64 lowercase hex digits).
fn is_content_name(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Where the content of `digest` is kept; `None` for a digest that is not a sha256.
fn content_path(state_dir: &Path, digest: &str) -> Option<PathBuf> {
    let hex = digest.strip_prefix("sha256:")?;
    is_content_name(hex).then(|| state_dir.join(BUCKET_DIR).join(hex))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_file: 16,
        max_total: 40,
    };

    #[test]
    fn a_kept_content_is_read_back_by_its_id() {
        let state = tempfile::tempdir().unwrap();
        let Keeping::Kept(kept) = keep(
            state.path(),
            LIMITS,
            ("web/file/conf", "/etc/web.conf"),
            b"edited by hand",
            "sha256:00",
            100,
        )
        .unwrap() else {
            panic!("not kept")
        };
        let (entry, bytes) = read(state.path(), &kept.id).unwrap();
        assert_eq!(entry, kept);
        assert_eq!(bytes, b"edited by hand");
        assert!(matches!(
            read(state.path(), "nothing-1"),
            Err(BucketError::NotFound(_))
        ));
    }

    #[test]
    fn a_content_over_the_file_limit_is_not_kept() {
        let state = tempfile::tempdir().unwrap();
        let keeping = keep(
            state.path(),
            LIMITS,
            ("web/file/conf", "/etc/web.conf"),
            &[b'x'; 17],
            "sha256:00",
            100,
        )
        .unwrap();
        assert_eq!(
            keeping,
            Keeping::TooLarge {
                size: 17,
                limit: 16
            }
        );
        assert!(list(state.path()).unwrap().entries.is_empty());
    }

    #[test]
    fn the_oldest_entries_are_given_up_past_the_total_and_their_content_removed() {
        let state = tempfile::tempdir().unwrap();
        for (n, now) in (0..4u8).zip(100..) {
            keep(
                state.path(),
                LIMITS,
                ("web/file/conf", "/etc/web.conf"),
                &[b'a' + n; 15],
                "sha256:00",
                now,
            )
            .unwrap();
        }
        let index = list(state.path()).unwrap();
        let kept_at: Vec<u64> = index.entries.iter().map(|e| e.kept_at).collect();
        assert_eq!(kept_at, vec![102, 103], "two of 15 bytes fit in 40");
        let contents = fs::read_dir(state.path().join(BUCKET_DIR))
            .unwrap()
            .flatten()
            .filter(|e| is_content_name(e.file_name().to_str().unwrap()))
            .count();
        assert_eq!(contents, 2);
    }

    #[test]
    fn an_unreadable_index_is_set_aside_and_a_new_one_begun() {
        let state = tempfile::tempdir().unwrap();
        let dir = state.path().join(BUCKET_DIR);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(INDEX_FILE), b"{ not json").unwrap();
        assert!(matches!(
            list(state.path()),
            Err(BucketError::Format { .. })
        ));
        keep(
            state.path(),
            LIMITS,
            ("web/file/conf", "/etc/web.conf"),
            b"x",
            "sha256:00",
            7,
        )
        .unwrap();
        assert_eq!(list(state.path()).unwrap().entries.len(), 1);
        assert_eq!(
            fs::read(dir.join("index.json.unreadable-7")).unwrap(),
            b"{ not json"
        );
    }
}
