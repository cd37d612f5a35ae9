//! How a record key is laid out on the bus: every top-level record directory in a bucket of
//! its own ([`place`]: `sent/n1.json` is `n1=json` in `mesh-records-sent`), the records at the
//! top in [`RECORDS_BUCKET`] itself, and the rest of a key as subject tokens ([`bucket_key`]),
//! so a directory below the top is one subject filter of its bucket ([`Listing`]); and the one
//! move of a bucket written before that layout ([`migrate_layout`]; then
//! `super::directories`).

use super::leader::last_value;
use crate::subjects::{bucket_all, bucket_key_subject, RECORDS_BUCKET};
use async_nats::jetstream::kv;
use futures_util::StreamExt as _;

/// The bucket's key for the record key `key`: each name's `.` made `=`, each `/` made `.`, so
/// that a record directory is a subject token and every record under it is matched by one
/// subject filter. `=` is in no record key, so the mapping is one to one ([`record_key`] is
/// its inverse).
pub fn bucket_key(key: &str) -> String {
    key.replace('.', "=").replace('/', ".")
}

/// The record key of the bucket's key `bucket_key` (the inverse of [`bucket_key`]).
pub fn record_key(bucket_key: &str) -> String {
    bucket_key.replace('.', "/").replace('=', ".")
}

/// What every directory bucket's name starts with (never granted to a node).
pub const DIRECTORY_BUCKET_PREFIX: &str = "mesh-records-";

/// The bucket holding the records under the top-level directory `top`: `mesh-records-` and
/// its name, each `_` written `__` and each `.` written `_0` (a bucket's name has no `.`), so
/// the name says the directory back ([`directory_of_bucket`]).
pub fn directory_bucket(top: &str) -> String {
    let mut name = String::from(DIRECTORY_BUCKET_PREFIX);
    for c in top.chars() {
        match c {
            '_' => name.push_str("__"),
            '.' => name.push_str("_0"),
            c => name.push(c),
        }
    }
    name
}

/// The top-level directory whose records bucket `bucket` holds, `None` when it is no
/// directory's bucket.
pub fn directory_of_bucket(bucket: &str) -> Option<String> {
    let encoded = bucket.strip_prefix(DIRECTORY_BUCKET_PREFIX)?;
    let mut top = String::new();
    let mut chars = encoded.chars();
    while let Some(c) = chars.next() {
        match c {
            '_' => match chars.next()? {
                '_' => top.push('_'),
                '0' => top.push('.'),
                _ => return None,
            },
            c => top.push(c),
        }
    }
    (!top.is_empty()).then_some(top)
}

/// Whether `bucket` holds records of the controller: [`RECORDS_BUCKET`] or a directory's.
pub fn is_records_bucket(bucket: &str) -> bool {
    bucket == RECORDS_BUCKET || bucket.starts_with(DIRECTORY_BUCKET_PREFIX)
}

/// Where the record `key` is kept: its bucket, and its key in that bucket.
pub fn place(key: &str) -> (String, String) {
    match key.split_once('/') {
        Some((top, rest)) => (directory_bucket(top), bucket_key(rest)),
        None => (RECORDS_BUCKET.to_owned(), bucket_key(key)),
    }
}

/// Where a listing of one directory (not the top) reads: its top-level directory's bucket,
/// the subjects under the directory there, and what the record keys start with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// The bucket of the directory's top-level directory.
    pub bucket: String,
    /// The subject filter of the records under the directory.
    pub filter: String,
    /// The top-level directory and `/`: each record key listed is it and the rest.
    pub key_prefix: String,
}

/// Where the listing of `dir` (not `""`) reads.
pub fn listing(dir: &str) -> Listing {
    let (top, rest) = dir.split_once('/').unwrap_or((dir, ""));
    let bucket = directory_bucket(top);
    let filter = if rest.is_empty() {
        bucket_all(&bucket)
    } else {
        format!("{}.>", bucket_key_subject(&bucket, &bucket_key(rest)))
    };
    Listing {
        bucket,
        filter,
        key_prefix: format!("{top}/"),
    }
}

/// The bucket's key saying its keys are in [`bucket_key`]'s layout: no record key maps to it
/// (no name starts with `.`, so no token of a record's bucket key starts with `=`).
pub(super) const LAYOUT_KEY: &str = "=layout";

/// The key of [`RECORDS_BUCKET`] noting the directories whose buckets
/// `KvRecords::make_directories` made: no record key maps to it (`=` is in none).
pub(super) const DIRECTORIES_KEY: &str = "=directories";

/// The layout [`LAYOUT_KEY`] names once [`migrate_layout`] has run.
const LAYOUT: &[u8] = b"2";

/// The layout [`LAYOUT_KEY`] names once every top-level directory is in a bucket of its own.
pub(super) const LAYOUT_DIRECTORIES: &[u8] = b"3";

/// Moves the records of a bucket written before [`bucket_key`]'s layout (their keys the record
/// keys themselves, `plans/plan-1.json`) to it, once: every record copied to its new key, the
/// layout marked, then the old keys purged. A move stopped part way is done again whole on the
/// next open (the old keys stay until the mark is written). Returns how many were moved.
pub(super) async fn migrate_layout(store: &kv::Store) -> Result<usize, async_nats::Error> {
    match last_value(store, LAYOUT_KEY).await? {
        Some(layout) if layout.as_ref() == LAYOUT || layout.as_ref() == LAYOUT_DIRECTORIES => {
            return Ok(0)
        }
        Some(layout) => {
            return Err(format!(
                "the bucket's keys are in layout {:?}; this mesh reads layouts 2 and 3",
                String::from_utf8_lossy(&layout)
            )
            .into())
        }
        None => {}
    }
    let mut raw = Vec::new();
    let mut keys = store.keys().await?;
    while let Some(key) = keys.next().await {
        raw.push(key?);
    }
    // The old keys: every key with a `/`, and a top-level one with a `.` that is not the copy
    // of one with a `/` (a move stopped part way). A key with neither is the same in both.
    let copies: std::collections::BTreeSet<String> = raw
        .iter()
        .filter(|key| key.contains('/'))
        .map(|key| bucket_key(key))
        .collect();
    let old: Vec<&String> = raw
        .iter()
        .filter(|key| {
            key.contains('/') || (key.contains('.') && !key.contains('=') && !copies.contains(*key))
        })
        .collect();
    for key in &old {
        if let Some(value) = last_value(store, key).await? {
            store.put(bucket_key(key), value).await?;
        }
    }
    store.put(LAYOUT_KEY, LAYOUT.to_vec().into()).await?;
    for key in &old {
        store.purge(key.as_str()).await?;
    }
    if !old.is_empty() {
        tracing::info!(
            records = old.len(),
            "the records bucket's keys were moved to layout 2"
        );
    }
    Ok(old.len())
}
