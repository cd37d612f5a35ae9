//! The audit log on the bus: the stream [`AUDIT_STREAM`], whose sequence is each entry's, kept
//! with the records' copies. The server itself refuses to delete or purge any of it
//! (`deny_delete`, `deny_purge`); an append names the stream sequence it expects last, so two
//! controllers writing at once follow each other rather than fork the chain.

use super::{call, KvRecords, RETRY_PAUSE};
use crate::nats::NatsError;
use crate::subjects::{AUDIT_STREAM, AUDIT_SUBJECT};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{self, LastRawMessageErrorKind};
use futures_util::StreamExt as _;
use mesh_records::audit::{
    refuse_behind_head, seal, AuditError, AuditLog, Head, Sealed, Stored, FIRST_PREV,
};
use mesh_records::record_store::RecordStore as _;
use std::time::{Duration, Instant};

/// The audit stream's configuration with `replicas` copies: every entry kept for ever, none
/// deleted or purged by anyone.
pub fn audit_stream(replicas: usize) -> stream::Config {
    stream::Config {
        name: AUDIT_STREAM.to_owned(),
        description: Some("the mesh's audit log: appended to, never changed".to_owned()),
        subjects: vec![AUDIT_SUBJECT.to_owned()],
        storage: stream::StorageType::File,
        num_replicas: replicas,
        deny_delete: true,
        deny_purge: true,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    }
}

/// The record holding the log's head ([`Head`]), in the records' own bucket.
pub const AUDIT_HEAD: &str = "audit-head.json";

/// How long a read waits for the next entry of an ordered consumer before it is asked again.
const READ_QUIET: Duration = Duration::from_secs(10);

impl KvRecords {
    fn audit_error(&self, what: &str, error: impl std::fmt::Display) -> AuditError {
        AuditError::Io {
            log: self.name_of_audit(),
            why: format!("{what}: {error}"),
        }
    }

    fn name_of_audit(&self) -> String {
        format!("stream {AUDIT_STREAM} on {}", self.url)
    }

    /// The audit stream, made (with the records' copies) when the bus has none yet.
    fn audit(&self) -> Result<stream::Stream, AuditError> {
        let (js, replicas) = (self.js.clone(), self.replicas);
        self.asked_again(|| {
            let js = js.clone();
            async move { crate::jetstream::ensure_stream(&js, audit_stream(replicas)).await }
        })
        .map_err(|e: NatsError| self.audit_error("opening it", e))
    }

    /// The last entry's sequence and digest (0 and [`FIRST_PREV`]: none yet), from the stream's
    /// own state: its last sequence is the last entry's, whatever its subject index says.
    fn audit_last(&self, stream: &stream::Stream) -> Result<(u64, String), AuditError> {
        let name = self.name_of_audit();
        let answer = self.asked_again(|| {
            let mut stream = stream.clone();
            async move {
                let last = stream
                    .info()
                    .await
                    .map_err(|e| e.to_string())?
                    .state
                    .last_sequence;
                if last == 0 {
                    return Ok((0, None));
                }
                match stream.get_raw_message(last).await {
                    Ok(message) => Ok((last, Some(message.payload.to_vec()))),
                    Err(error) if error.kind() == LastRawMessageErrorKind::NoMessageFound => {
                        Ok((last, None))
                    }
                    Err(error) => Err(error.to_string()),
                }
            }
        });
        match answer.map_err(|e| self.audit_error("reading its last entry", e))? {
            (0, _) => Ok((0, FIRST_PREV.to_owned())),
            (seq, Some(bytes)) => Ok((seq, Sealed::from_bytes(&name, seq, &bytes)?.digest)),
            (seq, None) => Err(AuditError::Broken {
                log: name,
                seq,
                why: "is missing from the stream: nothing can be appended after it".to_owned(),
            }),
        }
    }
}

impl AuditLog for KvRecords {
    fn name(&self) -> String {
        self.name_of_audit()
    }

    /// Reads the last entry, seals the new one after it, and publishes it expecting that entry
    /// last: another writer first makes the server refuse it, and it is sealed again after
    /// theirs. An append that got no answer is sent again with the same message id (its
    /// digest), so it is stored once.
    fn append(&self, entry: &[u8]) -> Result<Sealed, AuditError> {
        let stream = self.audit()?;
        let deadline = Instant::now() + self.retry_limit;
        loop {
            let head = self.head()?;
            let (last, prev) = self.audit_last(&stream)?;
            refuse_behind_head(&self.name_of_audit(), head.as_ref(), last)?;
            let sealed = seal(last + 1, &prev, entry)?;
            let message = PublishMessage::build()
                .payload(sealed.to_bytes().into())
                .message_id(&sealed.digest)
                .expected_last_sequence(last);
            let js = self.js.clone();
            let answer = call(self.runtime(), async move {
                js.send_publish(AUDIT_SUBJECT, message).await?.await
            });
            match answer {
                Ok(ack) if ack.sequence == sealed.seq => {
                    let head = serde_json::to_vec(&Head {
                        seq: sealed.seq,
                        digest: sealed.digest.clone(),
                    })
                    .unwrap_or_default();
                    // A newer head is never put back by an older one: each writer's head is
                    // its own entry's, and the later entry's head is written after it.
                    self.update(AUDIT_HEAD, &mut |old: Option<&[u8]>| {
                        let newer = old
                            .and_then(|old| serde_json::from_slice::<Head>(old).ok())
                            .filter(|old| old.seq > sealed.seq);
                        Ok(match newer {
                            Some(_) => old.unwrap_or_default().to_vec(),
                            None => head.clone(),
                        })
                    })
                    .map_err(|e| self.audit_error("writing its head", e))?;
                    return Ok(sealed);
                }
                Ok(ack) => {
                    return Err(self.audit_error(
                        "appending to it",
                        format!(
                            "entry {} was stored as {}: the stream holds something else than \
                             the audit log",
                            sealed.seq, ack.sequence
                        ),
                    ))
                }
                // Another writer came first: seal after theirs.
                Err(error) if error.kind() == PublishErrorKind::WrongLastSequence => {}
                Err(error) if Instant::now() < deadline => {
                    tracing::debug!(%error, "an audit entry got no answer; sending it again");
                    std::thread::sleep(RETRY_PAUSE);
                }
                Err(error) => return Err(self.audit_error("appending to it", error)),
            }
        }
    }

    fn head(&self) -> Result<Option<Head>, AuditError> {
        match self.get(AUDIT_HEAD) {
            Ok(Some(bytes)) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                self.audit_error(&format!("reading its head (record {AUDIT_HEAD})"), e)
            }),
            Ok(None) => Ok(None),
            Err(error) => Err(self.audit_error("reading its head", error)),
        }
    }

    /// One ordered consumer from `from` on, read until the entries there then are read or
    /// `limit` is reached.
    fn read(&self, from: u64, limit: usize) -> Result<Vec<Stored>, AuditError> {
        let stream = self.audit()?;
        let (last, _) = self.audit_last(&stream)?;
        let from = from.max(1);
        if last < from || limit == 0 {
            return Ok(Vec::new());
        }
        let wanted = usize::try_from(last - from + 1)
            .unwrap_or(usize::MAX)
            .min(limit);
        let client = self.js.client();
        self.asked_again(|| {
            let (stream, client) = (stream.clone(), client.clone());
            async move {
                use async_nats::jetstream::consumer::{push, DeliverPolicy, ReplayPolicy};
                let consumer = stream
                    .create_consumer(push::OrderedConfig {
                        deliver_subject: client.new_inbox(),
                        description: Some("mesh audit reading".to_owned()),
                        filter_subject: AUDIT_SUBJECT.to_owned(),
                        replay_policy: ReplayPolicy::Instant,
                        deliver_policy: DeliverPolicy::ByStartSequence {
                            start_sequence: from,
                        },
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                let mut messages = consumer.messages().await.map_err(|e| e.to_string())?;
                let mut read = Vec::with_capacity(wanted.min(4_096));
                while read.len() < wanted {
                    let message = match tokio::time::timeout(READ_QUIET, messages.next()).await {
                        Ok(Some(Ok(message))) => message,
                        Ok(Some(Err(error))) => return Err(error.to_string()),
                        Ok(None) => return Err("its consumer ended".to_owned()),
                        Err(_) => return Err(format!("no entry came for {READ_QUIET:?}")),
                    };
                    let info = message.info().map_err(|e| e.to_string())?;
                    read.push(Stored {
                        seq: info.stream_sequence,
                        bytes: message.payload.to_vec(),
                    });
                    // Entries the stream lost are never delivered: stop at the last there is.
                    if info.pending == 0 {
                        break;
                    }
                }
                Ok(read)
            }
        })
        .map_err(|e| self.audit_error("reading it", e))
    }
}
