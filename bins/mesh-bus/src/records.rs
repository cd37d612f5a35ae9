//! The mesh's records on a fleet: the controller's inventory, settings and their history,
//! what it sent each node, its plans and builds, kept in the JetStream key-value bucket
//! [`RECORDS_BUCKET`] instead of files under one machine's mesh home — so a controller
//! restarted, or started on another machine, reads the same record and resumes from it.
//!
//! [`KvRecords`] is mesh-store's [`RecordStore`] over that bucket. Its calls are blocking,
//! like the file records they stand in for: each is handed to a small runtime of its own (one
//! worker thread, which also carries the connection) and waited for on the caller's thread, so
//! it may be called from inside or outside any other runtime.
//!
//! # Guarantees
//! - A `put` returns once the server has stored it (the JetStream acknowledgement).
//! - [`RecordStore::update`] is compare-and-set on the key's revision, retried while other
//!   writers win: no writer's change is lost.
//! - [`RecordStore::compare_and_set`] is one write (or delete marker) expecting the key's
//!   revision: the server refuses it when another writer came first.
//! - The bucket is never granted to a node ([`crate::grants::check`] refuses its name): only
//!   the controller reads it, for it holds the nodes' bus passwords.

use crate::jetstream::bucket_stream;
use crate::nats::{NatsBus, NatsError, NatsOptions};
use async_nats::jetstream::kv::{self, CreateErrorKind, Operation, UpdateErrorKind};
use futures_util::StreamExt as _;
use mesh_store::record_store::{
    bad_key, children, is_key, Change, RecordStore, RecordStoreError, Swap, Version,
};
use std::fmt;
use std::future::Future;

/// The bucket holding the controller's records.
pub const RECORDS_BUCKET: &str = "mesh-records";

/// How many values of each record the bucket keeps (the newest is the record; the older ones
/// are there for whoever needs to look back by hand with `nats kv history`).
pub const RECORDS_HISTORY: i64 = 16;

/// How many times an update is retried while other writers win the race.
const UPDATE_TRIES: usize = 100;

/// The controller's records in [`RECORDS_BUCKET`].
pub struct KvRecords {
    runtime: Option<tokio::runtime::Runtime>,
    _bus: NatsBus,
    store: kv::Store,
    url: String,
}

impl fmt::Debug for KvRecords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KvRecords")
            .field("bucket", &RECORDS_BUCKET)
            .field("url", &self.url)
            .finish()
    }
}

impl Drop for KvRecords {
    fn drop(&mut self) {
        // Every call waited for its answer: nothing is in flight. Shutting down in the
        // background is allowed inside another runtime, where a plain drop is not.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Runs `future` on `runtime` and waits for its answer on this thread: the runtime's own
/// worker drives it (and the connection), so the caller may be inside another runtime or none,
/// and no thread is made per call.
fn call<T: Send + 'static>(
    runtime: &tokio::runtime::Runtime,
    future: impl Future<Output = T> + Send + 'static,
) -> T {
    let (answer, answered) = std::sync::mpsc::sync_channel(1);
    runtime.spawn(async move {
        let _ = answer.send(future.await);
    });
    answered
        .recv()
        .unwrap_or_else(|_| panic!("a call on the records' runtime panicked"))
}

impl KvRecords {
    /// Connects to the bus and opens the records bucket, making it (file storage,
    /// [`RECORDS_HISTORY`] values per key) when the bus has none yet.
    ///
    /// # Errors
    /// When the bus cannot be reached or refuses the credentials, or the bucket can be neither
    /// opened nor made.
    pub fn open(options: &NatsOptions) -> Result<KvRecords, NatsError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("mesh-records")
            .enable_all()
            .build()
            .map_err(|source| NatsError::Bucket {
                bucket: RECORDS_BUCKET.to_owned(),
                source: source.into(),
            })?;
        let connecting = options.clone();
        let opened = call(&runtime, async move {
            let bus = NatsBus::connect(&connecting).await?;
            let store = open_bucket(&bus.jetstream()).await?;
            Ok::<_, NatsError>((bus, store))
        });
        let (bus, store) = match opened {
            Ok(opened) => opened,
            Err(error) => {
                // As in drop: allowed inside another runtime, where a plain drop is not.
                runtime.shutdown_background();
                return Err(error);
            }
        };
        Ok(KvRecords {
            runtime: Some(runtime),
            _bus: bus,
            store,
            url: options.url.clone(),
        })
    }

    /// Runs what `with` makes of the bucket on the records' runtime, and waits for it.
    fn run<T, F>(&self, with: impl FnOnce(kv::Store) -> F) -> T
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        call(
            self.runtime.as_ref().expect("the runtime lives until drop"),
            with(self.store.clone()),
        )
    }

    fn checked(&self, key: &str) -> Result<(), RecordStoreError> {
        if is_key(key) {
            Ok(())
        } else {
            Err(bad_key(self, key))
        }
    }

    /// Every key in the bucket (one scan); `dir` names what was asked, for errors.
    fn all_keys(&self, dir: &str) -> Result<Vec<String>, RecordStoreError> {
        if !dir.is_empty() {
            self.checked(dir)?;
        }
        self.run(|store| async move {
            let mut keys = Vec::new();
            let mut stream = store.keys().await?;
            while let Some(key) = stream.next().await {
                keys.push(key?);
            }
            Ok::<_, async_nats::Error>(keys)
        })
        .map_err(|e| self.error("list", dir, e))
    }

    fn error(
        &self,
        action: &'static str,
        key: &str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> RecordStoreError {
        RecordStoreError::new(action, self.locate(key), source)
    }
}

async fn open_bucket(js: &async_nats::jetstream::Context) -> Result<kv::Store, NatsError> {
    let bucket_error = |source: async_nats::Error| NatsError::Bucket {
        bucket: RECORDS_BUCKET.to_owned(),
        source,
    };
    if let Ok(store) = js.get_key_value(RECORDS_BUCKET).await {
        return Ok(store);
    }
    let mut config = bucket_stream(RECORDS_BUCKET, RECORDS_HISTORY);
    config.description = Some("the mesh controller's records".to_owned());
    js.get_or_create_stream(config)
        .await
        .map_err(|source| bucket_error(source.into()))?;
    js.get_key_value(RECORDS_BUCKET)
        .await
        .map_err(|source| bucket_error(source.into()))
}

impl RecordStore for KvRecords {
    fn name(&self) -> String {
        format!("bucket {RECORDS_BUCKET} on {}", self.url)
    }

    fn locate(&self, key: &str) -> String {
        format!("{key} (bucket {RECORDS_BUCKET} on {})", self.url)
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, RecordStoreError> {
        self.checked(key)?;
        let owned = key.to_owned();
        self.run(|store| async move { store.get(owned).await })
            .map(|value| value.map(|bytes| bytes.to_vec()))
            .map_err(|e| self.error("read", key, e))
    }

    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), RecordStoreError> {
        self.checked(key)?;
        let (owned, value) = (key.to_owned(), bytes.to_vec());
        self.run(|store| async move { store.put(owned, value.into()).await })
            .map(drop)
            .map_err(|e| self.error("write", key, e))
    }

    fn delete(&self, key: &str) -> Result<(), RecordStoreError> {
        self.checked(key)?;
        let owned = key.to_owned();
        self.run(|store| async move {
            match store.entry(owned.clone()).await? {
                Some(entry) if entry.operation == Operation::Put => {
                    store.delete(owned).await?;
                }
                _ => {}
            }
            Ok::<_, async_nats::Error>(())
        })
        .map_err(|e| self.error("remove", key, e))
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, RecordStoreError> {
        let keys = self.all_keys(dir)?;
        Ok(children(dir, keys.iter().map(String::as_str)))
    }

    fn keys_under(&self, dir: &str) -> Result<Vec<String>, RecordStoreError> {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let mut keys: Vec<String> = self
            .all_keys(dir)?
            .into_iter()
            .filter(|key| key.starts_with(&prefix))
            .collect();
        keys.sort();
        Ok(keys)
    }

    fn update(&self, key: &str, change: &mut Change<'_>) -> Result<Vec<u8>, RecordStoreError> {
        self.checked(key)?;
        for _ in 0..UPDATE_TRIES {
            let owned = key.to_owned();
            let entry = self
                .run(|store| async move { store.entry(owned).await })
                .map_err(|e| self.error("read", key, e))?;
            let (current, revision) = match &entry {
                Some(entry) if entry.operation == Operation::Put => {
                    (Some(entry.value.to_vec()), Some(entry.revision))
                }
                _ => (None, None),
            };
            let new = change(current.as_deref()).map_err(|why| self.error("update", key, why))?;
            let written = match revision {
                Some(revision) => self
                    .run(|store| {
                        let (owned, value) = (key.to_owned(), new.clone());
                        async move { store.update(owned, value.into(), revision).await }
                    })
                    .map_err(|e| match e.kind() {
                        UpdateErrorKind::WrongLastRevision => None,
                        _ => Some(self.error("write", key, e)),
                    }),
                None => self
                    .run(|store| {
                        let (owned, value) = (key.to_owned(), new.clone());
                        async move { store.create(owned, value.into()).await }
                    })
                    .map_err(|e| match e.kind() {
                        CreateErrorKind::AlreadyExists => None,
                        _ => Some(self.error("write", key, e)),
                    }),
            };
            match written {
                Ok(_) => return Ok(new),
                Err(Some(error)) => return Err(error),
                // Another writer came first: read its record and change that.
                Err(None) => continue,
            }
        }
        Err(self.error(
            "update",
            key,
            format!("other writers changed it {UPDATE_TRIES} times in a row"),
        ))
    }

    fn get_versioned(&self, key: &str) -> Result<Option<(Vec<u8>, Version)>, RecordStoreError> {
        self.checked(key)?;
        let owned = key.to_owned();
        let entry = self
            .run(|store| async move { store.entry(owned).await })
            .map_err(|e| self.error("read", key, e))?;
        Ok(match entry {
            Some(entry) if entry.operation == Operation::Put => {
                Some((entry.value.to_vec(), Version::Revision(entry.revision)))
            }
            _ => None,
        })
    }

    fn compare_and_set(
        &self,
        key: &str,
        expected: Option<&Version>,
        new: Option<&[u8]>,
    ) -> Result<Swap, RecordStoreError> {
        self.checked(key)?;
        let expected = match expected {
            None => None,
            Some(Version::Revision(revision)) => Some(*revision),
            // Not a version this store gave: the record is not that version.
            Some(Version::Digest(_)) => return Ok(Swap::Stale),
        };
        let (owned, value) = (key.to_owned(), new.map(<[u8]>::to_vec));
        let written = self.run(|store| async move {
            match (expected, value) {
                // Made only while absent (a deleted key counts as absent).
                (None, Some(value)) => match store.create(owned, value.into()).await {
                    Ok(_) => Ok(Swap::Done),
                    Err(e) if e.kind() == CreateErrorKind::AlreadyExists => Ok(Swap::Stale),
                    Err(e) => Err(async_nats::Error::from(e)),
                },
                (None, None) => match store.entry(owned).await {
                    Ok(Some(entry)) if entry.operation == Operation::Put => Ok(Swap::Stale),
                    Ok(_) => Ok(Swap::Done),
                    Err(e) => Err(e.into()),
                },
                (Some(revision), Some(value)) => {
                    match store.update(owned, value.into(), revision).await {
                        Ok(_) => Ok(Swap::Done),
                        Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => Ok(Swap::Stale),
                        Err(e) => Err(e.into()),
                    }
                }
                (Some(revision), None) => {
                    match store.delete_expect_revision(owned, Some(revision)).await {
                        Ok(()) => Ok(Swap::Done),
                        Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => Ok(Swap::Stale),
                        Err(e) => Err(e.into()),
                    }
                }
            }
        });
        written.map_err(|e| self.error("write", key, e))
    }
}
