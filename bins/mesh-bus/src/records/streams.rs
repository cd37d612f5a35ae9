//! The records' calls on streams themselves: reading the bus's other streams on the records'
//! connection (the reports stream: the last message on a subject, the messages from a sequence
//! on), and purging records' subjects from their bucket's stream.

use super::{call, KvRecords, PUT_WINDOW, RETRY_PAUSE};
use crate::nats::NatsError;
use crate::subjects::bucket_stream_name;
use mesh_records::record_store::RecordStoreError;
use std::time::Instant;

impl KvRecords {
    /// The last message `stream` holds on `subject`, with when the server stored it (seconds
    /// since the epoch); `None` when it holds none. A blocking call, like the records', asked
    /// again while the bus does not answer, within the retry limit (a read of the leader).
    ///
    /// # Errors
    /// [`NatsError::Stream`] when the stream cannot be opened or read.
    pub fn last_message(
        &self,
        stream: &str,
        subject: &str,
    ) -> Result<Option<(Vec<u8>, u64)>, NatsError> {
        self.asked_again(|| {
            let js = self.js.clone();
            let (name, subject) = (stream.to_owned(), subject.to_owned());
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
            }
        })
    }

    /// The messages `stream` holds on `subject` from its sequence `from` on, oldest first, at
    /// most `limit`, each with when the server stored it (seconds since the epoch) and its
    /// sequence: one request per message (a stream that keeps a few per subject, as the reports
    /// stream does). A blocking call, like the records', asked again whole while the bus does
    /// not answer, within the retry limit.
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
        self.asked_again(|| {
            let js = self.js.clone();
            let (name, subject) = (stream.to_owned(), subject.to_owned());
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
            }
        })
    }

    /// Purges each subject of `removals` (a record key and its subject) from `bucket`'s
    /// stream in windows of [`PUT_WINDOW`], each window's answers awaited together; a window
    /// that got no answer is sent again, whole, until the retry limit (a purge done twice
    /// removes nothing more).
    pub(super) fn purge_subjects(
        &self,
        bucket: &str,
        removals: &[(&String, String)],
    ) -> Result<(), RecordStoreError> {
        for window in removals.chunks(PUT_WINDOW) {
            let subjects: Vec<String> = window.iter().map(|(_, subject)| subject.clone()).collect();
            let deadline = Instant::now() + self.retry_limit;
            loop {
                let (js, subjects) = (self.js.clone(), subjects.clone());
                let stream_name = bucket_stream_name(bucket);
                let answer = call(self.runtime(), async move {
                    let stream = js.get_stream(stream_name).await?;
                    let purges = subjects.into_iter().map(|subject| {
                        std::future::IntoFuture::into_future(stream.purge().filter(subject))
                    });
                    for purged in futures_util::future::join_all(purges).await {
                        purged?;
                    }
                    Ok::<_, async_nats::Error>(())
                });
                match answer {
                    Ok(()) => break,
                    Err(_) if Instant::now() < deadline => std::thread::sleep(RETRY_PAUSE),
                    Err(error) => {
                        return Err(self.error(
                            "remove",
                            window[0].0,
                            format!(
                                "removing it and the {} records after it: {error}",
                                window.len() - 1
                            ),
                        ))
                    }
                }
            }
        }
        Ok(())
    }
}

/// The last message of one subject, as [`KvRecords::last_per_subject`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastMessage {
    /// Its subject.
    pub subject: String,
    /// Its bytes, as published.
    pub payload: Vec<u8>,
    /// When the server stored it (seconds since the epoch).
    pub stored: u64,
    /// Its stream sequence.
    pub sequence: u64,
}

/// How long a pass waits for its next message before it is asked again from the start.
const PASS_QUIET: std::time::Duration = std::time::Duration::from_secs(10);

impl KvRecords {
    /// The last message of every subject under `filter` in `stream`, in one pass: one ordered
    /// consumer delivering the last message of each subject, not a request a subject (every
    /// node's latest report for `status`: the cost of one read of what is there). A stream
    /// not there yet holds nothing. Asked again whole while the bus does not answer, within
    /// the retry limit.
    ///
    /// # Errors
    /// [`NatsError::Stream`] when the stream cannot be read.
    pub fn last_per_subject(
        &self,
        stream: &str,
        filter: &str,
    ) -> Result<Vec<LastMessage>, NatsError> {
        let client = self.js.client();
        self.asked_again(|| {
            let js = self.js.clone();
            let client = client.clone();
            let (name, filter) = (stream.to_owned(), filter.to_owned());
            async move {
                use async_nats::jetstream::consumer::{push, DeliverPolicy, ReplayPolicy};
                use futures_util::StreamExt as _;
                let failed = |source: async_nats::Error| NatsError::Stream {
                    stream: name.clone(),
                    source,
                };
                let mut stream = match js.get_stream(&name).await {
                    Ok(stream) => stream,
                    Err(error)
                        if matches!(
                            error.kind(),
                            async_nats::jetstream::context::GetStreamErrorKind::JetStream(e)
                                if e.error_code()
                                    == async_nats::jetstream::ErrorCode::STREAM_NOT_FOUND
                        ) =>
                    {
                        return Ok(Vec::new())
                    }
                    Err(error) => return Err(failed(error.into())),
                };
                if stream
                    .info()
                    .await
                    .map_err(|e| failed(e.into()))?
                    .state
                    .messages
                    == 0
                {
                    return Ok(Vec::new());
                }
                let consumer = stream
                    .create_consumer(push::OrderedConfig {
                        deliver_subject: client.new_inbox(),
                        description: Some("mesh last of each subject".to_owned()),
                        filter_subject: filter,
                        replay_policy: ReplayPolicy::Instant,
                        deliver_policy: DeliverPolicy::LastPerSubject,
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| failed(e.into()))?;
                if consumer.cached_info().num_pending == 0 {
                    return Ok(Vec::new());
                }
                let mut messages = consumer.messages().await.map_err(|e| failed(e.into()))?;
                let mut last: std::collections::BTreeMap<String, LastMessage> =
                    std::collections::BTreeMap::new();
                loop {
                    let message = match tokio::time::timeout(PASS_QUIET, messages.next()).await {
                        Ok(Some(Ok(message))) => message,
                        Ok(Some(Err(error))) => return Err(failed(error.into())),
                        Ok(None) => return Err(failed("its consumer ended".into())),
                        Err(_) => {
                            return Err(failed(
                                format!("no message came for {PASS_QUIET:?}").into(),
                            ))
                        }
                    };
                    let info = message.info().map_err(failed)?;
                    let (sequence, pending) = (info.stream_sequence, info.pending);
                    let stored = u64::try_from(info.published.unix_timestamp()).unwrap_or(0);
                    let subject = message.subject.to_string();
                    // A message published while the pass reads comes after the subject's
                    // earlier one: the newest is kept.
                    last.insert(
                        subject.clone(),
                        LastMessage {
                            subject,
                            payload: message.payload.to_vec(),
                            stored,
                            sequence,
                        },
                    );
                    if pending == 0 {
                        break;
                    }
                }
                Ok(last.into_values().collect())
            }
        })
    }
}
