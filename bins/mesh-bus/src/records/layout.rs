//! How a record key is laid out in the bucket: as subject tokens ([`bucket_key`]), so a record
//! directory is one subject filter ([`bucket_subjects`]); and the one move of a bucket written
//! before that layout ([`migrate_layout`]).

use crate::subjects::{bucket_all, bucket_key_subject, RECORDS_BUCKET};
use async_nats::jetstream::kv;
use futures_util::StreamExt as _;

/// The bucket's key for the record key `key`: each name's `.` made `=`, each `/` made `.`, so
/// that a record directory is a subject token and every record under it is matched by one
/// subject filter ([`bucket_subjects`]). `=` is in no record key, so the mapping is one to one
/// ([`record_key`] is its inverse).
pub fn bucket_key(key: &str) -> String {
    key.replace('.', "=").replace('/', ".")
}

/// The record key of the bucket's key `bucket_key` (the inverse of [`bucket_key`]).
pub fn record_key(bucket_key: &str) -> String {
    bucket_key.replace('.', "/").replace('=', ".")
}

/// The subject filter of every record under `dir` (`""`: every record).
pub fn bucket_subjects(dir: &str) -> String {
    if dir.is_empty() {
        bucket_all(RECORDS_BUCKET)
    } else {
        format!("{}.>", bucket_key_subject(RECORDS_BUCKET, &bucket_key(dir)))
    }
}

/// The bucket's key saying its keys are in [`bucket_key`]'s layout: no record key maps to it
/// (no name starts with `.`, so no token of a record's bucket key starts with `=`).
const LAYOUT_KEY: &str = "=layout";

/// The layout [`LAYOUT_KEY`] names.
const LAYOUT: &[u8] = b"2";

/// Moves the records of a bucket written before [`bucket_key`]'s layout (their keys the record
/// keys themselves, `plans/plan-1.json`) to it, once: every record copied to its new key, the
/// layout marked, then the old keys purged. A move stopped part way is done again whole on the
/// next open (the old keys stay until the mark is written). Returns how many were moved.
pub(super) async fn migrate_layout(store: &kv::Store) -> Result<usize, async_nats::Error> {
    match store.get(LAYOUT_KEY).await? {
        Some(layout) if layout.as_ref() == LAYOUT => return Ok(0),
        Some(layout) => {
            return Err(format!(
                "the bucket's keys are in layout {:?}; this mesh reads layout 2",
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
        if let Some(value) = store.get(key.as_str()).await? {
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
