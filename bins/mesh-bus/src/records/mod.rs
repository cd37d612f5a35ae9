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

mod layout;
mod listing;

use crate::jetstream::{bucket_stream, open_or_make_bucket, replicas_for};
use crate::nats::{NatsBus, NatsError, NatsOptions};
use crate::subjects::{bucket_key_subject, bucket_stream_name, RECORDS_BUCKET};
use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::kv::{self, Operation, UpdateErrorKind};
use async_nats::jetstream::message::PublishMessage;
use layout::migrate_layout;
pub use layout::{bucket_key, bucket_subjects, record_key};
use listing::{list_subjects, Listed};
use mesh_records::record_store::{
    bad_key, children, is_key, Change, RecordStat, RecordStore, RecordStoreError, Swap, Version,
};
use sha2::{Digest, Sha256};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

/// The controller's records in [`RECORDS_BUCKET`].
pub struct KvRecords {
    runtime: Option<tokio::runtime::Runtime>,
    bus: NatsBus,
    js: async_nats::jetstream::Context,
    store: kv::Store,
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
            let store = open_bucket(&js, replicas).await?;
            let migrated = migrate_layout(&store)
                .await
                .map_err(|source| NatsError::Bucket {
                    bucket: RECORDS_BUCKET.to_owned(),
                    source,
                })?;
            Ok::<_, NatsError>((bus, js, store, migrated))
        });
        let (bus, js, store, migrated) = match opened {
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
            url: options.url.clone(),
            retry_limit: RETRY_LIMIT,
            step: None,
            migrated,
        })
    }

    /// How many records opening the bucket moved from the key layout before
    /// [`bucket_key`]'s (0: none, the bucket was in it already or new) — for the caller to
    /// say so.
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

    /// A read sent again, as it was, until it is answered or the retry limit passes; the last
    /// error then.
    fn read<T, E, F>(&self, with: impl Fn(kv::Store) -> F) -> Result<T, E>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: Future<Output = Result<T, E>> + Send + 'static,
    {
        let deadline = Instant::now() + self.retry_limit;
        loop {
            match self.run(&with) {
                Err(_) if Instant::now() < deadline => std::thread::sleep(RETRY_PAUSE),
                answer => return answer,
            }
        }
    }

    /// Stores `value` at `key` once — `expected`: only if the key's last revision is that one
    /// (0: the key has none) — sending it again, with the same message id, until the bucket
    /// answers or the retry limit passes.
    fn write(&self, key: &str, value: &[u8], expected: Option<u64>) -> Result<u64, Written> {
        let subject = bucket_key_subject(RECORDS_BUCKET, &bucket_key(key));
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
                        (_, Some(revision)) => match self.stored_after(&subject, revision, &id) {
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
    /// (read from the stream's leader, not a copy that may lag).
    fn stored_after(
        &self,
        subject: &str,
        revision: u64,
        id: &str,
    ) -> Result<Option<u64>, Box<dyn std::error::Error + Send + Sync>> {
        let js = self.js.clone();
        let (subject, id) = (subject.to_owned(), id.to_owned());
        call(self.runtime(), async move {
            let stream = js.get_stream(bucket_stream_name(RECORDS_BUCKET)).await?;
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

    /// Runs what `with` makes of the bucket on the records' runtime, and waits for it.
    fn run<T, F>(&self, with: impl FnOnce(kv::Store) -> F) -> T
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        call(self.runtime(), with(self.store.clone()))
    }

    /// The last message `stream` holds on `subject`, with when the server stored it (seconds
    /// since the epoch); `None` when it holds none. A blocking call, like the records'.
    ///
    /// # Errors
    /// [`NatsError::Stream`] when the stream cannot be opened or read.
    pub fn last_message(
        &self,
        stream: &str,
        subject: &str,
    ) -> Result<Option<(Vec<u8>, u64)>, NatsError> {
        let js = self.js.clone();
        let (name, subject) = (stream.to_owned(), subject.to_owned());
        call(
            self.runtime.as_ref().expect("the runtime lives until drop"),
            async move {
                use async_nats::jetstream::stream::LastRawMessageErrorKind;
                let stream = js
                    .get_stream_no_info(&name)
                    .await
                    .map_err(|e| NatsError::Stream {
                        stream: name.clone(),
                        source: e.into(),
                    })?;
                match stream.get_last_raw_message_by_subject(&subject).await {
                    Ok(message) => Ok(Some((
                        message.payload.to_vec(),
                        u64::try_from(message.time.unix_timestamp()).unwrap_or(0),
                    ))),
                    Err(error) => match error.kind() {
                        // Nothing published yet, or no stream yet (a bus no push has used).
                        LastRawMessageErrorKind::NoMessageFound => Ok(None),
                        LastRawMessageErrorKind::JetStream(jetstream)
                            if jetstream.error_code()
                                == async_nats::jetstream::ErrorCode::STREAM_NOT_FOUND =>
                        {
                            Ok(None)
                        }
                        LastRawMessageErrorKind::InvalidSubject
                        | LastRawMessageErrorKind::JetStream(_)
                        | LastRawMessageErrorKind::Other => Err(NatsError::Stream {
                            stream: name,
                            source: error.into(),
                        }),
                    },
                }
            },
        )
    }

    /// The messages `stream` holds on `subject` from its sequence `from` on, oldest first, at
    /// most `limit`, each with when the server stored it (seconds since the epoch) and its
    /// sequence: one request per message (a stream that keeps a few per subject, as the reports
    /// stream does). A blocking call, like the records'.
    ///
    /// # Errors
    /// [`NatsError::Stream`] when the stream cannot be opened or read.
    pub fn messages(
        &self,
        stream: &str,
        subject: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, u64, u64)>, NatsError> {
        let js = self.js.clone();
        let (name, subject) = (stream.to_owned(), subject.to_owned());
        call(
            self.runtime.as_ref().expect("the runtime lives until drop"),
            async move {
                use async_nats::jetstream::stream::LastRawMessageErrorKind;
                let failed = |name: &str, source: async_nats::Error| NatsError::Stream {
                    stream: name.to_owned(),
                    source,
                };
                let stream = match js.get_stream_no_info(&name).await {
                    Ok(stream) => stream,
                    Err(error) => return Err(failed(&name, error.into())),
                };
                let mut messages = Vec::new();
                let mut from = from.max(1);
                while messages.len() < limit {
                    let next = stream
                        .raw_message_builder()
                        .sequence(from)
                        .next_by_subject(subject.clone())
                        .send()
                        .await;
                    match next {
                        Ok(message) => {
                            from = message.sequence + 1;
                            messages.push((
                                message.payload.to_vec(),
                                u64::try_from(message.time.unix_timestamp()).unwrap_or(0),
                                message.sequence,
                            ));
                        }
                        Err(error) => match error.kind() {
                            LastRawMessageErrorKind::NoMessageFound => break,
                            LastRawMessageErrorKind::JetStream(jetstream)
                                if jetstream.error_code()
                                    == async_nats::jetstream::ErrorCode::STREAM_NOT_FOUND =>
                            {
                                break
                            }
                            _ => return Err(failed(&name, error.into())),
                        },
                    }
                }
                Ok(messages)
            },
        )
    }

    fn checked(&self, key: &str) -> Result<(), RecordStoreError> {
        if is_key(key) {
            Ok(())
        } else {
            Err(bad_key(self, key))
        }
    }

    /// The records under `dir` (`""`: all), each once with when it was last written, and its
    /// bytes when `values`: one ordered consumer on the subjects under `dir` only
    /// ([`bucket_subjects`]), delivering the last message of each, so a listing costs what is
    /// under `dir`, not the whole bucket. A removed record is left out.
    fn listed(&self, dir: &str, values: bool) -> Result<Vec<Listed>, RecordStoreError> {
        if !dir.is_empty() {
            self.checked(dir)?;
        }
        let filter = bucket_subjects(dir);
        let js = self.js.clone();
        self.read(|store| {
            let (filter, js) = (filter.clone(), js.clone());
            async move { list_subjects(&js, &store, filter, values).await }
        })
        .map_err(|e| self.error("list", dir, e))
    }

    fn error(
        &self,
        action: &'static str,
        key: &str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> RecordStoreError {
        let source = source.into();
        // 10008 after the retry limit: the bucket's stream has had no leader all that time.
        if source.to_string().contains("temporarily unavailable") {
            let said = format!(
                "the bucket's stream had no leader for {:?} — a cluster that lost its quorum \
                 (fewer than a majority of its servers up): {source}",
                self.retry_limit
            );
            return RecordStoreError::new(action, self.locate(key), said);
        }
        RecordStoreError::new(action, self.locate(key), source)
    }
}

/// How many writes of a [`RecordStore::put_many`] are on the wire at once.
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
        PublishErrorKind::Other => error.to_string().contains("temporarily unavailable"),
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

async fn open_bucket(
    js: &async_nats::jetstream::Context,
    replicas: usize,
) -> Result<kv::Store, NatsError> {
    let mut config = bucket_stream(RECORDS_BUCKET, RECORDS_HISTORY);
    config.description = Some("the mesh controller's records".to_owned());
    config.num_replicas = replicas;
    open_or_make_bucket(js, RECORDS_BUCKET, config).await
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
        let owned = bucket_key(key);
        self.read(|store| {
            let owned = owned.clone();
            async move { store.get(owned).await }
        })
        .map(|value| value.map(|bytes| bytes.to_vec()))
        .map_err(|e| self.error("read", key, e))
    }

    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), RecordStoreError> {
        self.checked(key)?;
        match self.write(key, bytes, None) {
            Ok(_) => Ok(()),
            Err(Written::Failed(why)) => Err(self.error("write", key, why)),
            Err(Written::Lost) => unreachable!("a put expects no revision"),
        }
    }

    /// Sent in windows of [`PUT_WINDOW`], each window's acknowledgements awaited together; a
    /// write not acknowledged is written again on its own, as [`RecordStore::put`] writes.
    fn put_many(&self, records: &[(String, Vec<u8>)]) -> Result<(), RecordStoreError> {
        for (key, _) in records {
            self.checked(key)?;
        }
        let batch: Vec<(String, bytes::Bytes, String)> = records
            .iter()
            .map(|(key, bytes)| {
                (
                    bucket_key_subject(RECORDS_BUCKET, &bucket_key(key)),
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
        let owned = bucket_key(key);
        // A removal sent again removes nothing more: it is sent as a read is.
        self.read(|store| {
            let owned = owned.clone();
            async move {
                match store.entry(owned.clone()).await? {
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
            let entry = self
                .read(|store| {
                    let owned = bucket_key(key);
                    async move { store.entry(owned).await }
                })
                .map_err(|e| self.error("read", key, e))?;
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
        let entry = self
            .read(|store| {
                let owned = bucket_key(key);
                async move { store.entry(owned).await }
            })
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
        let swapped = |written: Result<u64, Written>| match written {
            Ok(_) => Ok(Swap::Done),
            Err(Written::Lost) => Ok(Swap::Stale),
            Err(Written::Failed(why)) => Err(self.error("write", key, why)),
        };
        match (expected, new) {
            // Made only while absent (a deleted key counts as absent): expecting the key's
            // last revision, its removal's, or 0 for a key never written.
            (None, Some(value)) => {
                let entry = self
                    .read(|store| {
                        let owned = bucket_key(key);
                        async move { store.entry(owned).await }
                    })
                    .map_err(|e| self.error("read", key, e))?;
                match entry {
                    Some(entry) if entry.operation == Operation::Put => Ok(Swap::Stale),
                    Some(entry) => swapped(self.write(key, value, Some(entry.revision))),
                    None => swapped(self.write(key, value, Some(0))),
                }
            }
            (None, None) => {
                let entry = self
                    .read(|store| {
                        let owned = bucket_key(key);
                        async move { store.entry(owned).await }
                    })
                    .map_err(|e| self.error("read", key, e))?;
                Ok(match entry {
                    Some(entry) if entry.operation == Operation::Put => Swap::Stale,
                    _ => Swap::Done,
                })
            }
            (Some(revision), Some(value)) => swapped(self.write(key, value, Some(revision))),
            (Some(revision), None) => {
                let owned = bucket_key(key);
                self.run(|store| async move {
                    match store.delete_expect_revision(owned, Some(revision)).await {
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
