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
