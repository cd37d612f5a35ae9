//! The records' buckets: [`crate::subjects::RECORDS_BUCKET`] for the records at the top, and one
//! bucket per top-level record directory ([`super::layout::place`]) — made when its first record is
//! written, found again by its stream's name — and the one move of a bucket holding every record
//! (layout 2) to them ([`migrate_to_directories`]).
//!
//! Why a bucket per directory: a filtered consumer on a nats-server 2.9 scans every subject of
//! its stream, so a listing of 10 keys in a bucket of 200,000 records cost 576× the same
//! listing alone. In a bucket of its own, a directory's listing reads only that directory's
//! stream, on every server version.

use super::layout::{directory_bucket, DIRECTORIES_KEY};
use super::layout::{directory_of_bucket, place, record_key, LAYOUT_DIRECTORIES, LAYOUT_KEY};
use super::leader::last_value;
use super::{call, KvRecords, RECORDS_HISTORY};
use crate::jetstream::{bucket_stream, open_or_make_bucket};
use crate::nats::NatsError;
use crate::subjects::bucket_stream_name;
use crate::subjects::RECORDS_BUCKET;
use async_nats::jetstream::kv;
use futures_util::{StreamExt as _, TryStreamExt as _};
use std::collections::BTreeMap;

/// How many records the move copies (and then purges) at once.
const MOVE_WINDOW: usize = 128;

/// Opens the records bucket `bucket` (the top's or a directory's), making it with `replicas`
/// copies and [`RECORDS_HISTORY`] values per key when the bus has none yet.
pub(super) async fn open_or_make(
    js: &async_nats::jetstream::Context,
    bucket: &str,
    replicas: usize,
) -> Result<kv::Store, NatsError> {
    let mut config = bucket_stream(bucket, RECORDS_HISTORY);
    config.description = Some(match directory_of_bucket(bucket) {
        Some(top) => format!("the mesh controller's records under {top}/"),
        None => "the mesh controller's records".to_owned(),
    });
    config.num_replicas = replicas;
    open_or_make_bucket(js, bucket, config).await
}

/// Opens the records bucket `bucket` if the bus has it (`None`: no record was ever written
/// under its directory).
pub(super) async fn open_existing(
    js: &async_nats::jetstream::Context,
    bucket: &str,
) -> Result<Option<kv::Store>, async_nats::Error> {
    use async_nats::jetstream::context::GetStreamErrorKind;
    match js.get_stream(bucket_stream_name(bucket)).await {
        Ok(_) => Ok(Some(js.get_key_value(bucket).await?)),
        Err(error) => match error.kind() {
            GetStreamErrorKind::JetStream(jetstream)
                if jetstream.error_code() == async_nats::jetstream::ErrorCode::STREAM_NOT_FOUND =>
            {
                Ok(None)
            }
            _ => Err(error.into()),
        },
    }
}

/// The directory buckets the bus holds, by bucket name: one listing of the streams' names.
pub(super) async fn directory_buckets(
    js: &async_nats::jetstream::Context,
) -> Result<Vec<String>, async_nats::Error> {
    let names: Vec<String> = js.stream_names().try_collect().await?;
    let mut buckets: Vec<String> = names
        .iter()
        .filter_map(|stream| stream.strip_prefix("KV_"))
        .filter(|bucket| directory_of_bucket(bucket).is_some())
        .map(str::to_owned)
        .collect();
    buckets.sort();
    Ok(buckets)
}

/// Moves the records under a directory from [`crate::subjects::RECORDS_BUCKET`] (layout 2: every
/// record in it) to their directory's bucket, once: every such record copied, then purged from the
/// top bucket, then the layout marked 3. A move stopped part way is done again on the next open
/// from what the top bucket still holds (a record is purged only once every record is copied).
/// Returns how many records were moved; says so in the log when any were.
pub(super) async fn migrate_to_directories(
    js: &async_nats::jetstream::Context,
    top: &kv::Store,
    replicas: usize,
) -> Result<usize, async_nats::Error> {
    if top
        .get(LAYOUT_KEY)
        .await?
        .is_some_and(|layout| layout.as_ref() == LAYOUT_DIRECTORIES)
    {
        return Ok(0);
    }
    // Layout 2's keys: a record under a directory has a `.` in its bucket key.
    let mut old = Vec::new();
    let mut keys = top.keys().await?;
    while let Some(key) = keys.next().await {
        let key = key?;
        if key.contains('.') && !key.contains('/') && !key.starts_with('=') {
            old.push(key);
        }
    }
    let mut buckets: BTreeMap<String, kv::Store> = BTreeMap::new();
    for key in &old {
        let (bucket, _) = place(&record_key(key));
        if let std::collections::btree_map::Entry::Vacant(entry) = buckets.entry(bucket) {
            let store = open_or_make(js, entry.key(), replicas).await?;
            entry.insert(store);
        }
    }
    let copies: Vec<_> = old
        .clone()
        .into_iter()
        .map(|key| {
            let top = top.clone();
            let (bucket, moved) = place(&record_key(&key));
            let store = buckets[&bucket].clone();
            async move {
                if let Some(value) = last_value(&top, &key).await? {
                    store.put(moved, value).await?;
                }
                Ok::<_, async_nats::Error>(())
            }
        })
        .collect();
    futures_util::stream::iter(copies)
        .buffer_unordered(MOVE_WINDOW)
        .try_collect::<Vec<()>>()
        .await?;
    let purges: Vec<_> = old
        .clone()
        .into_iter()
        .map(|key| {
            let top = top.clone();
            async move { top.purge(key).await.map_err(async_nats::Error::from) }
        })
        .collect();
    futures_util::stream::iter(purges)
        .buffer_unordered(MOVE_WINDOW)
        .try_collect::<Vec<()>>()
        .await?;
    top.put(LAYOUT_KEY, LAYOUT_DIRECTORIES.to_vec().into())
        .await?;
    if !old.is_empty() {
        tracing::info!(
            records = old.len(),
            buckets = buckets.len(),
            "the records bucket's records under a directory were moved to a bucket per \
             top-level directory (layout 3)"
        );
    }
    Ok(old.len())
}

impl KvRecords {
    /// Makes the bucket of each top-level directory of `tops` that the bus does not hold yet,
    /// so that a write to them never has to make one: on a cluster a bucket of three copies can
    /// be made only while three servers are up, and a directory's first write may come while
    /// one is down. The directories made are noted in [`RECORDS_BUCKET`]
    /// (`=directories`), so once they are, this is one read (which any copy answers). A
    /// directory not named here gets its bucket at its first write.
    ///
    /// # Errors
    /// When the note cannot be read, the streams cannot be listed, or a bucket cannot be made.
    pub fn make_directories(&self, tops: &[&str]) -> Result<(), NatsError> {
        let failed = |source| NatsError::Bucket {
            bucket: RECORDS_BUCKET.to_owned(),
            source,
        };
        let noted = self
            .get_raw(DIRECTORIES_KEY)
            .map_err(failed)?
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default();
        let noted: std::collections::BTreeSet<&str> = noted.lines().collect();
        if tops.iter().all(|top| noted.contains(top)) {
            return Ok(());
        }
        let js = self.js.clone();
        let held =
            call(self.runtime(), async move { directory_buckets(&js).await }).map_err(failed)?;
        for top in tops {
            let bucket = directory_bucket(top);
            if !held.contains(&bucket) {
                self.bucket(&bucket, true)
                    .map_err(|source| NatsError::Bucket { bucket, source })?;
            }
        }
        let mut all: std::collections::BTreeSet<&str> = noted;
        all.extend(tops.iter().copied());
        let note = all.into_iter().collect::<Vec<&str>>().join("\n");
        let store = self.store.clone();
        call(self.runtime(), async move {
            store.put(DIRECTORIES_KEY, note.into_bytes().into()).await
        })
        .map_err(|source| failed(source.into()))?;
        Ok(())
    }

    /// The value of `key` in [`RECORDS_BUCKET`], a key of its own (not a record's).
    fn get_raw(&self, key: &'static str) -> Result<Option<Vec<u8>>, async_nats::Error> {
        self.read(
            &self.store,
            |store| async move { last_value(&store, key).await },
        )
        .map(|value| value.map(|bytes| bytes.to_vec()))
    }

    /// The records bucket `bucket` ([`RECORDS_BUCKET`] or a directory's), opened once and
    /// kept; made first when `make` (a write), `None` when the bus has none and not `make` (no
    /// record was ever written under its directory). Asked again while the bus does not
    /// answer, within the retry limit.
    pub(super) fn bucket(
        &self,
        bucket: &str,
        make: bool,
    ) -> Result<Option<kv::Store>, Box<dyn std::error::Error + Send + Sync>> {
        if bucket == RECORDS_BUCKET {
            return Ok(Some(self.store.clone()));
        }
        if let Some(store) = self.opened().get(bucket) {
            return Ok(Some(store.clone()));
        }
        let opened = self.asked_again(|| {
            let (js, name, replicas) = (self.js.clone(), bucket.to_owned(), self.replicas);
            async move {
                if make {
                    Ok(Some(open_or_make(&js, &name, replicas).await?))
                } else {
                    open_existing(&js, &name).await
                }
            }
        })?;
        if let Some(store) = &opened {
            self.opened().insert(bucket.to_owned(), store.clone());
        }
        Ok(opened)
    }

    pub(super) fn opened(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, kv::Store>> {
        self.buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
