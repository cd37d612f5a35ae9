//! The mesh's records on a fleet: the controller's inventory, settings and their history,
//! what it sent each node, its plans and builds, kept in JetStream key-value buckets instead of
//! files under one machine's mesh home — so a controller restarted, or started on another
//! machine, reads the same record and resumes from it. The records at the top are in
//! [`RECORDS_BUCKET`]; each top-level directory's in a bucket of its own
//! (`mesh-records-sent` holds `sent/…`; see [`place`]), so a listing reads only the stream of
//! the directory listed (`directories` says why).
//!
//! [`KvRecords`] is mesh-store's [`RecordStore`] over those buckets. Its calls are blocking,
//! like the file records they stand in for: each is handed to a small runtime of its own (one
//! worker thread, which also carries the connection) and waited for on the caller's thread, so
//! it may be called from inside or outside any other runtime.
//!
//! On a cluster the bucket is made with [`crate::jetstream::replicas_for`] copies (3 by default,
//! [`NatsOptions::replicas`] to choose), and a call rides out the loss of the server it was
//! connected to: the client reconnects to another of [`NatsOptions::url`]'s servers, and a call
//! that got no answer is sent again until [`KvRecords::retry_limit`] — a read as it was, a write
//! with the same JetStream message id (`Nats-Msg-Id`), so a write that was stored before its
//! answer was lost is recognised by the stream and not stored twice.
//!
//! # Guarantees
//! - A `put` returns once the server has stored it (the JetStream acknowledgement; on a
//!   cluster, once a majority of the bucket's copies hold it).
//! - A write is stored once or not at all, however often it was sent again (within
//!   [`crate::jetstream::BUCKET_DEDUPLICATION_WINDOW`]).
//! - [`RecordStore::update`] is compare-and-set on the key's revision, retried while other
//!   writers win: no writer's change is lost, and none is applied twice.
//! - [`RecordStore::compare_and_set`] is one write (or delete marker) expecting the key's
//!   revision: the server refuses it when another writer came first.
//! - With no majority of the bucket's servers up (quorum lost), a write fails within the retry
//!   limit with an error saying so, and is not stored then. It is in doubt, as any write without
//!   an answer is in Raft: a stream leader that had not yet seen its quorum lost may hold it,
//!   and stores it — whole, once — when quorum returns; never part of it.
//! - The bucket is never granted to a node ([`crate::grants::check`] refuses its name): only
//!   the controller reads it, for it holds the nodes' bus passwords.

mod audit;
mod directories;
mod layout;
mod leader;
mod listing;
mod streams;

use crate::jetstream::replicas_for;
use crate::nats::{NatsBus, NatsError, NatsOptions};
use crate::subjects::{bucket_key_subject, bucket_stream_name, RECORDS_BUCKET};
use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::kv::{self, Operation, UpdateErrorKind};
use async_nats::jetstream::message::PublishMessage;
pub use audit::audit_stream;
use directories::{directory_buckets, migrate_to_directories, open_or_make};
use layout::migrate_layout;
pub use layout::{
    bucket_key, directory_bucket, directory_of_bucket, is_records_bucket, listing, place,
    record_key, Listing, DIRECTORY_BUCKET_PREFIX,
};
use leader::last_entry;
use listing::{list_subjects, Listed, Reading};
use mesh_records::record_store::{
    bad_key, children, is_key, Change, RecordStat, RecordStore, RecordStoreError, Swap, Version,
};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
pub use streams::LastMessage;

/// How many values of each record the bucket keeps (the newest is the record; the older ones
/// are there for whoever needs to look back by hand with `nats kv history`).
pub const RECORDS_HISTORY: i64 = 16;

/// How many times an update is retried while other writers win the race.
const UPDATE_TRIES: usize = 100;

/// How long a call is sent again while the bus gives no answer (a server lost, a stream's
/// leader being elected again) before it fails, unless [`KvRecords::with_retry_limit`] says.
pub const RETRY_LIMIT: Duration = Duration::from_secs(30);

/// How long a listing waits for the next key before it is asked again. A listing reads the
/// bucket through an ephemeral consumer of one copy, which a cluster may place on a server
/// just lost until it counts that server offline (tens of seconds after a SIGKILL): such a
/// listing hears nothing, and is asked again (placed anew) within the retry limit instead of
/// waiting out the client's heartbeat check (10 s) each time.
pub const LIST_QUIET: Duration = Duration::from_secs(3);

/// The controller's records in [`RECORDS_BUCKET`] and the directory buckets.
pub struct KvRecords {
    runtime: Option<tokio::runtime::Runtime>,
    bus: NatsBus,
    js: async_nats::jetstream::Context,
    /// [`RECORDS_BUCKET`]: the records at the top, and the layout's mark.
    store: kv::Store,
    /// The directory buckets opened so far, by name.
    buckets: std::sync::Mutex<BTreeMap<String, kv::Store>>,
    /// How many copies a directory bucket is made with.
    replicas: usize,
    url: String,
    retry_limit: Duration,
    step: Option<StepHook>,
    migrated: usize,
}

/// What a test runs at a named step of a write (see [`KvRecords::at_step`]).
pub type StepHook = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

/// The step of a write's first sending just before it is sent.
pub const STEP_WRITE_SENDING: &str = "records.write.sending";

/// The step of a write's first sending once it is on the wire, before its answer is awaited: a
/// test loses the answer of a write the stream stored there.
pub const STEP_WRITE_SENT: &str = "records.write.sent";

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
    /// [`RECORDS_HISTORY`] values per key, [`NatsOptions::replicas`] copies: by default 1 on a
    /// single server, 3 on a cluster) when the bus has none yet. A bucket made earlier with
    /// fewer copies is opened as it is and said in the log
    /// ([`crate::jetstream::raise_replicas`] raises it).
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
            let replicas = replicas_for(bus.client(), connecting.replicas);
            // Made on the records' runtime: a context spawns its acknowledgements' task.
            let js = bus.jetstream();
            let store = open_or_make(&js, RECORDS_BUCKET, replicas).await?;
            let failed = |source: async_nats::Error| NatsError::Bucket {
                bucket: RECORDS_BUCKET.to_owned(),
                source: leaderless(source, None),
            };
            let renamed = migrate_layout(&store).await.map_err(failed)?;
            let moved = migrate_to_directories(&js, &store, replicas)
                .await
                .map_err(failed)?;
            Ok::<_, NatsError>((bus, js, store, replicas, renamed.max(moved)))
        });
        let (bus, js, store, replicas, migrated) = match opened {
            Ok(opened) => opened,
            Err(error) => {
                // As in drop: allowed inside another runtime, where a plain drop is not.
                runtime.shutdown_background();
                return Err(error);
            }
        };
        Ok(KvRecords {
            runtime: Some(runtime),
            bus,
            js,
            store,
            buckets: std::sync::Mutex::new(BTreeMap::new()),
            replicas,
            url: options.url.clone(),
            retry_limit: RETRY_LIMIT,
            step: None,
            migrated,
        })
    }

    /// How many records opening the buckets moved from an older layout — the record keys as
    /// the keys (layout 1), or every record in [`RECORDS_BUCKET`] (layout 2) — to a bucket per
    /// top-level directory (layout 3; 0: none, the buckets were in it already or new) — for
    /// the caller to say so. The layout is marked in [`RECORDS_BUCKET`], so a move runs once.
    pub fn migrated(&self) -> usize {
        self.migrated
    }

    /// The same records, a call that gets no answer sent again for at most `limit` (instead of
    /// [`RETRY_LIMIT`]).
    #[must_use]
    pub fn with_retry_limit(mut self, limit: Duration) -> KvRecords {
        self.retry_limit = limit;
        self
    }

    /// The same records, `hook` run with the step's name at the named steps of a write's first
    /// sending ([`STEP_WRITE_SENDING`], [`STEP_WRITE_SENT`]) — a fail point for tests, run on
    /// the records' runtime while the write waits.
    #[must_use]
    pub fn at_step(mut self, hook: StepHook) -> KvRecords {
        self.step = Some(hook);
        self
    }

    /// How long a call that gets no answer is sent again before it fails.
    pub fn retry_limit(&self) -> Duration {
        self.retry_limit
    }

    /// The connection the records are read and written on (its server, for a test that must
    /// kill the one in use).
    pub fn bus(&self) -> &NatsBus {
        &self.bus
    }

    /// A read of `store` sent again, as it was, until it is answered or the retry limit
    /// passes; the last error then.
    fn read<T, E, F>(&self, store: &kv::Store, with: impl Fn(kv::Store) -> F) -> Result<T, E>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: Future<Output = Result<T, E>> + Send + 'static,
    {
        self.asked_again(|| with(store.clone()))
    }

    /// A call that changes nothing (a read, or the opening of a bucket), made again as it was
    /// while it fails — the bus gives no answer, a stream's leader is being elected again —
    /// until it succeeds or the retry limit passes; the last error then.
    fn asked_again<T, E, F>(&self, ask: impl Fn() -> F) -> Result<T, E>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: Future<Output = Result<T, E>> + Send + 'static,
    {
        let deadline = Instant::now() + self.retry_limit;
        loop {
            match call(self.runtime(), ask()) {
                Err(_) if Instant::now() < deadline => std::thread::sleep(RETRY_PAUSE),
                answer => return answer,
            }
        }
    }

    /// Stores `value` at `key` once — `expected`: only if the key's last revision is that one
    /// (0: the key has none) — sending it again, with the same message id, until the bucket
    /// answers or the retry limit passes.
    fn write(&self, key: &str, value: &[u8], expected: Option<u64>) -> Result<u64, Written> {
        let (bucket, in_bucket) = place(key);
        self.bucket(&bucket, true).map_err(Written::Failed)?;
        let subject = bucket_key_subject(&bucket, &in_bucket);
        let id = fresh_message_id(key);
        let deadline = Instant::now() + self.retry_limit;
        let mut tries = 0;
        loop {
            tries += 1;
            let js = self.js.clone();
            let mut message = PublishMessage::build()
                .payload(value.to_vec().into())
                .message_id(&id);
            if let Some(revision) = expected {
                message = message.expected_last_subject_sequence(revision);
            }
            let sending = subject.clone();
            let step = self.step.clone().filter(|_| tries == 1);
            let answer = call(self.runtime(), async move {
                if let Some(step) = &step {
                    step(STEP_WRITE_SENDING);
                }
                let acknowledged = js.send_publish(sending, message).await?;
                if let Some(step) = &step {
                    // On the wire before the step, so the server may store it.
                    let _ = js.client().flush().await;
                    step(STEP_WRITE_SENT);
                }
                acknowledged.await
            });
            match answer {
                Ok(ack) => return Ok(ack.sequence),
                Err(error) if error.kind() == PublishErrorKind::WrongLastSequence => {
                    // Sent again after an answer was lost, the write may be the one that moved
                    // the revision: a clustered 2.9 server checks the revision before the
                    // message id. Then it is the key's first message after `expected`.
                    return match (tries, expected) {
                        (1, _) | (_, None) => Err(Written::Lost),
                        (_, Some(revision)) => match self.stored_after(
                            &bucket_stream_name(&bucket),
                            &subject,
                            revision,
                            &id,
                        ) {
                            Ok(Some(sequence)) => Ok(sequence),
                            Ok(None) => Err(Written::Lost),
                            Err(why) => Err(Written::Failed(why)),
                        },
                    };
                }
                Err(error) if !unanswered(&error) => return Err(Written::Failed(error.into())),
                Err(_) if Instant::now() < deadline => std::thread::sleep(RETRY_PAUSE),
                Err(error) => {
                    return Err(Written::Failed(
                        format!(
                            "no server of the bus stored it within {:?} ({tries} tries, the last: \
                             {error}): the bucket's stream has no leader — a cluster that lost \
                             its quorum (fewer than a majority of its servers up), or no server \
                             reachable; it is not stored (a server that had not yet seen its \
                             quorum lost may hold it, and store it once when quorum returns)",
                            self.retry_limit
                        )
                        .into(),
                    ))
                }
            }
        }
    }

    /// The sequence of the message with id `id` if it is `subject`'s first after `revision`
    /// in `stream` (read from the stream's leader, not a copy that may lag).
    fn stored_after(
        &self,
        stream: &str,
        subject: &str,
        revision: u64,
        id: &str,
    ) -> Result<Option<u64>, Box<dyn std::error::Error + Send + Sync>> {
        let js = self.js.clone();
        let (stream, subject, id) = (stream.to_owned(), subject.to_owned(), id.to_owned());
        call(self.runtime(), async move {
            let stream = js.get_stream(stream).await?;
            let next = stream
                .get_first_raw_message_by_subject(&subject, revision + 1)
                .await?;
            let ours = next
                .headers
                .get(async_nats::header::NATS_MESSAGE_ID)
                .is_some_and(|value| value.as_str() == id);
            Ok(ours.then_some(next.sequence))
        })
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime.as_ref().expect("the runtime lives until drop")
    }

    /// The last entry of `key` (a removal's too), `None` when its bucket or it has none.
    fn entry(&self, key: &str) -> Result<Option<kv::Entry>, RecordStoreError> {
        let (bucket, in_bucket) = place(key);
        let Some(store) = self
            .bucket(&bucket, false)
            .map_err(|e| self.error("read", key, e))?
        else {
            return Ok(None);
        };
        self.read(&store, |store| {
            let owned = in_bucket.clone();
            async move { last_entry(&store, &owned).await }
        })
        .map_err(|e| self.error("read", key, unanswered_read(e, self.retry_limit)))
    }

    fn checked(&self, key: &str) -> Result<(), RecordStoreError> {
        if is_key(key) {
            Ok(())
        } else {
            Err(bad_key(self, key))
        }
    }

    /// The records under `dir` (`""`: all), each once with when it was last written, and its
    /// bytes when `values`: one ordered consumer on the subjects under `dir` only, in its
    /// top-level directory's bucket ([`listing`]), delivering the last message of each, so a
    /// listing costs what is under `dir`, not every record. `""` lists [`RECORDS_BUCKET`]'s
    /// records and every directory bucket whole. A removed record is left out.
    fn listed(&self, dir: &str, values: bool) -> Result<Vec<Listed>, RecordStoreError> {
        let failed = |e| self.error("list", dir, e);
        if dir.is_empty() {
            let mut listed = self.listed_in(
                &self.store,
                Reading {
                    filter: crate::subjects::bucket_all(RECORDS_BUCKET),
                    key_prefix: String::new(),
                    top: true,
                },
                values,
            )?;
            let js = self.js.clone();
            let buckets = self
                .read(&self.store, |_| {
                    let js = js.clone();
                    async move { directory_buckets(&js).await }
                })
                .map_err(failed)?;
            for bucket in buckets {
                let Some(top) = directory_of_bucket(&bucket) else {
                    continue;
                };
                listed.extend(self.listed(&top, values)?);
            }
            listed.sort_by(|a, b| a.key.cmp(&b.key));
            return Ok(listed);
        }
        self.checked(dir)?;
        let Listing {
            bucket,
            filter,
            key_prefix,
        } = listing(dir);
        match self.bucket(&bucket, false).map_err(failed)? {
            Some(store) => self.listed_in(
                &store,
                Reading {
                    filter,
                    key_prefix,
                    top: false,
                },
                values,
            ),
            None => Ok(Vec::new()),
        }
    }

    /// The records `reading` reads in `store` (see [`RecordStore::keys_under`]).
    fn listed_in(
        &self,
        store: &kv::Store,
        reading: Reading,
        values: bool,
    ) -> Result<Vec<Listed>, RecordStoreError> {
        let js = self.js.clone();
        let dir = reading.key_prefix.trim_end_matches('/').to_owned();
        self.read(store, |store| {
            let js = js.clone();
            let reading = Reading {
                filter: reading.filter.clone(),
                key_prefix: reading.key_prefix.clone(),
                top: reading.top,
            };
            async move { list_subjects(&js, &store, reading, values).await }
        })
        .map_err(|e| self.error("list", &dir, e))
    }

    fn error(
        &self,
        action: &'static str,
        key: &str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> RecordStoreError {
        RecordStoreError::new(
            action,
            self.locate(key),
            leaderless(source.into(), Some(self.retry_limit)),
        )
    }
}

/// `source`, said as a lost quorum when it is one: JetStream's 10008 ("temporarily
/// unavailable"), after being `tried` again for a while when it was, means the bucket's
/// stream (or the cluster's metadata) has had no leader all that time. On a cluster the records are
/// read from the stream's leader ([`leader`]), so a cluster without one can be neither read nor
/// written.
fn leaderless(
    source: Box<dyn std::error::Error + Send + Sync>,
    tried: Option<Duration>,
) -> Box<dyn std::error::Error + Send + Sync> {
    if crate::jetstream::temporarily_unavailable(&source) {
        let tried = tried
            .map(|tried| format!(" for {tried:?}"))
            .unwrap_or_default();
        format!(
            "the bucket's stream had no leader{tried} — a cluster that lost its quorum (fewer \
             than a majority of its servers up): {source}"
        )
        .into()
    } else {
        source
    }
}

/// `source`, the last error of a read sent again for `tried`: a time-out then means no server
/// answered all that time — said as the write says it (a lost quorum, or no server reachable),
/// not as a bare "timed out".
fn unanswered_read(source: async_nats::Error, tried: Duration) -> async_nats::Error {
    if source.to_string().contains("timed out") {
        format!(
            "no server of the bus answered within {tried:?}: the bucket's stream has no leader — \
             a cluster that lost its quorum (fewer than a majority of its servers up), or no \
             server reachable ({source})"
        )
        .into()
    } else {
        source
    }
}

/// How many writes of a [`RecordStore::put_many`] (removals of a [`RecordStore::delete_many`])
/// are on the wire at once.
const PUT_WINDOW: usize = 256;

/// How long a call that got no answer waits before it is sent again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// What a write that was not stored met.
enum Written {
    /// The key's revision was not the one expected: another writer came first.
    Lost,
    /// The bus refused it, or did not answer within the retry limit.
    Failed(Box<dyn std::error::Error + Send + Sync>),
}

/// Whether a publish got no answer (its server lost, the stream between leaders, the
/// connection down) rather than a refusal: then it may be sent again, its message id making
/// sure it is stored once.
fn unanswered(error: &PublishError) -> bool {
    match error.kind() {
        PublishErrorKind::TimedOut
        | PublishErrorKind::BrokenPipe
        | PublishErrorKind::StreamNotFound => true,
        PublishErrorKind::WrongLastMessageId
        | PublishErrorKind::WrongLastSequence
        | PublishErrorKind::MaxAckPending
        | PublishErrorKind::MaxPayloadExceeded => false,
        // A JetStream error: 10008 is "JetStream system temporarily unavailable", what a
        // cluster answers while it has no leader for the stream.
        PublishErrorKind::Other => crate::jetstream::temporarily_unavailable(error),
    }
}

/// A message id no other write has: this process, a count, the time and the key, digested.
fn fresh_message_id(key: &str) -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let mut digest = Sha256::new();
    digest.update(std::process::id().to_be_bytes());
    digest.update(COUNT.fetch_add(1, Ordering::Relaxed).to_be_bytes());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    digest.update(now.as_nanos().to_be_bytes());
    digest.update(key.as_bytes());
    format!("record-{}", hex::encode(&digest.finalize()[..16]))
}

impl RecordStore for KvRecords {
    fn name(&self) -> String {
        format!(
            "buckets {RECORDS_BUCKET} and {DIRECTORY_BUCKET_PREFIX}* on {}",
            self.url
        )
    }

    fn locate(&self, key: &str) -> String {
        format!("{key} (bucket {} on {})", place(key).0, self.url)
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, RecordStoreError> {
        self.checked(key)?;
        Ok(self
            .entry(key)?
            .filter(|entry| entry.operation == Operation::Put)
            .map(|entry| entry.value.to_vec()))
    }

    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), RecordStoreError> {
        self.checked(key)?;
        match self.write(key, bytes, None) {
            Ok(_) => Ok(()),
            Err(Written::Failed(why)) => Err(self.error("write", key, why)),
            Err(Written::Lost) => unreachable!("a put expects no revision"),
        }
    }

    /// Sent in windows of `PUT_WINDOW`, each window's acknowledgements awaited together; a
    /// write not acknowledged is written again on its own, as [`RecordStore::put`] writes.
    fn put_many(&self, records: &[(String, Vec<u8>)]) -> Result<(), RecordStoreError> {
        let mut made = std::collections::BTreeSet::new();
        for (key, _) in records {
            self.checked(key)?;
            let (bucket, _) = place(key);
            if !made.contains(&bucket) {
                self.bucket(&bucket, true)
                    .map_err(|e| self.error("write", key, e))?;
                made.insert(bucket);
            }
        }
        let batch: Vec<(String, bytes::Bytes, String)> = records
            .iter()
            .map(|(key, bytes)| {
                let (bucket, in_bucket) = place(key);
                (
                    bucket_key_subject(&bucket, &in_bucket),
                    bytes::Bytes::copy_from_slice(bytes),
                    fresh_message_id(key),
                )
            })
            .collect();
        let js = self.js.clone();
        let unacknowledged: Vec<usize> = call(self.runtime(), async move {
            let mut unacknowledged = Vec::new();
            for (window, writes) in batch.chunks(PUT_WINDOW).enumerate() {
                let mut acks = Vec::with_capacity(writes.len());
                for (i, (subject, value, id)) in writes.iter().enumerate() {
                    let message = PublishMessage::build()
                        .payload(value.clone())
                        .message_id(id);
                    acks.push((
                        window * PUT_WINDOW + i,
                        js.send_publish(subject.clone(), message).await,
                    ));
                }
                for (index, sent) in acks {
                    let stored = match sent {
                        Ok(ack) => ack.await.is_ok(),
                        Err(_) => false,
                    };
                    if !stored {
                        unacknowledged.push(index);
                    }
                }
            }
            unacknowledged
        });
        for index in unacknowledged {
            let (key, bytes) = &records[index];
            self.put(key, bytes)?;
        }
        Ok(())
    }

    fn delete(&self, key: &str) -> Result<(), RecordStoreError> {
        self.checked(key)?;
        let (bucket, in_bucket) = place(key);
        let Some(store) = self
            .bucket(&bucket, false)
            .map_err(|e| self.error("remove", key, e))?
        else {
            return Ok(());
        };
        // A removal sent again removes nothing more: it is sent as a read is.
        self.read(&store, |store| {
            let owned = in_bucket.clone();
            async move {
                match last_entry(&store, &owned).await? {
                    Some(entry) if entry.operation == Operation::Put => {
                        store.delete(owned).await?;
                    }
                    _ => {}
                }
                Ok::<_, async_nats::Error>(())
            }
        })
        .map_err(|e| self.error("remove", key, e))
    }

    /// Each record's subject purged from the bucket's stream — its value, its older values
    /// and any removal marker, so nothing of it is left in the bucket — in windows of
    /// `PUT_WINDOW`, each window's answers awaited together. A purge done twice removes
    /// nothing more, so a window that got no answer is sent again, whole, until the retry
    /// limit.
    fn delete_many(&self, keys: &[String]) -> Result<(), RecordStoreError> {
        // By bucket: each top-level directory's records are purged from its own stream.
        let mut by_bucket: BTreeMap<String, Vec<(&String, String)>> = BTreeMap::new();
        for key in keys {
            self.checked(key)?;
            let (bucket, in_bucket) = place(key);
            let subject = bucket_key_subject(&bucket, &in_bucket);
            by_bucket.entry(bucket).or_default().push((key, subject));
        }
        for (bucket, removals) in by_bucket {
            // No bucket: none of its records is there to remove.
            if self
                .bucket(&bucket, false)
                .map_err(|e| self.error("remove", removals[0].0, e))?
                .is_none()
            {
                continue;
            }
            self.purge_subjects(&bucket, &removals)?;
        }
        Ok(())
    }

    /// Every record under `dir` (not `""`) purged from its top-level directory's stream in
    /// one request — the subjects under it, [`listing`]'s filter — after one listing counts
    /// them: a removal costs one pass over the stream, not one per record (nats-server 2.9
    /// scans the stream for each filtered purge: one purge a record removed 35 records a
    /// second from a stream of 283,080). A purge sent again removes nothing more, so it is
    /// asked again while the bus does not answer; a record written under `dir` meanwhile goes
    /// with the rest.
    fn delete_under(&self, dir: &str) -> Result<usize, RecordStoreError> {
        if dir.is_empty() {
            let keys = self.keys_under(dir)?;
            self.delete_many(&keys)?;
            return Ok(keys.len());
        }
        self.checked(dir)?;
        let count = self.listed(dir, false)?.len();
        if count == 0 {
            return Ok(0);
        }
        let Listing { bucket, filter, .. } = listing(dir);
        let stream = bucket_stream_name(&bucket);
        self.asked_again(|| {
            let (js, stream, filter) = (self.js.clone(), stream.clone(), filter.clone());
            async move {
                js.get_stream(stream).await?.purge().filter(filter).await?;
                Ok::<_, async_nats::Error>(())
            }
        })
        .map_err(|e| self.error("remove", dir, format!("the {count} records under it: {e}")))?;
        Ok(count)
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, RecordStoreError> {
        let keys = self.listed(dir, false)?;
        Ok(children(dir, keys.iter().map(|listed| listed.key.as_str())))
    }

    fn keys_under(&self, dir: &str) -> Result<Vec<String>, RecordStoreError> {
        Ok(self
            .listed(dir, false)?
            .into_iter()
            .map(|listed| listed.key)
            .collect())
    }

    /// One stream of the values under `dir`, not a round trip per record.
    fn values_under(&self, dir: &str) -> Result<Vec<(String, Vec<u8>)>, RecordStoreError> {
        Ok(self
            .listed(dir, true)?
            .into_iter()
            .map(|listed| (listed.key, listed.value))
            .collect())
    }

    fn stat_under(&self, dir: &str) -> Result<Vec<RecordStat>, RecordStoreError> {
        Ok(self
            .listed(dir, false)?
            .into_iter()
            .map(|listed| RecordStat {
                key: listed.key,
                written: listed.written,
                size: listed.size,
            })
            .collect())
    }

    fn update(&self, key: &str, change: &mut Change<'_>) -> Result<Vec<u8>, RecordStoreError> {
        self.checked(key)?;
        for _ in 0..UPDATE_TRIES {
            let entry = self.entry(key)?;
            // The revision expected is the key's last, a removal's too; 0 for a key never
            // written.
            let (current, revision) = match &entry {
                Some(entry) if entry.operation == Operation::Put => {
                    (Some(entry.value.to_vec()), entry.revision)
                }
                Some(entry) => (None, entry.revision),
                None => (None, 0),
            };
            let new = change(current.as_deref()).map_err(|why| self.error("update", key, why))?;
            match self.write(key, &new, Some(revision)) {
                Ok(_) => return Ok(new),
                Err(Written::Failed(why)) => return Err(self.error("write", key, why)),
                // Another writer came first: read its record and change that.
                Err(Written::Lost) => continue,
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
        let entry = self.entry(key)?;
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
        let swapped = |written: Result<u64, Written>| match written {
            Ok(_) => Ok(Swap::Done),
            Err(Written::Lost) => Ok(Swap::Stale),
            Err(Written::Failed(why)) => Err(self.error("write", key, why)),
        };
        match (expected, new) {
            // Made only while absent (a deleted key counts as absent): expecting the key's
            // last revision, its removal's, or 0 for a key never written.
            (None, Some(value)) => {
                let entry = self.entry(key)?;
                match entry {
                    Some(entry) if entry.operation == Operation::Put => Ok(Swap::Stale),
                    Some(entry) => swapped(self.write(key, value, Some(entry.revision))),
                    None => swapped(self.write(key, value, Some(0))),
                }
            }
            (None, None) => {
                let entry = self.entry(key)?;
                Ok(match entry {
                    Some(entry) if entry.operation == Operation::Put => Swap::Stale,
                    _ => Swap::Done,
                })
            }
            (Some(revision), Some(value)) => swapped(self.write(key, value, Some(revision))),
            (Some(revision), None) => {
                let (bucket, in_bucket) = place(key);
                // No bucket: the record is at no revision.
                let Some(store) = self
                    .bucket(&bucket, false)
                    .map_err(|e| self.error("write", key, e))?
                else {
                    return Ok(Swap::Stale);
                };
                call(self.runtime(), async move {
                    match store
                        .delete_expect_revision(in_bucket, Some(revision))
                        .await
                    {
                        Ok(()) => Ok(Swap::Done),
                        Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => Ok(Swap::Stale),
                        Err(e) => Err(async_nats::Error::from(e)),
                    }
                })
                .map_err(|e| self.error("write", key, e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_unanswered_for_the_retry_limit_names_the_lost_quorum() {
        let said = unanswered_read("request timed out".into(), Duration::from_secs(10)).to_string();
        assert!(said.contains("within 10s"), "{said}");
        assert!(said.contains("lost its quorum"), "{said}");
        assert!(said.ends_with("(request timed out)"), "{said}");
        let refused = unanswered_read("permissions violation".into(), Duration::from_secs(10));
        assert_eq!(refused.to_string(), "permissions violation");
    }
}
