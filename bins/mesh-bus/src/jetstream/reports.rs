//! Every report, read from the reports stream through a pull consumer of the reader's own: the
//! server keeps what the reader has not read yet, so none is dropped however far behind it
//! falls (the controller's rollout, while it sends).
//!
//! A plain subscription dropped them: at 100,000 hosts their reports and heartbeats (9,000–10,000
//! a second) overflowed it while the loop sent, some 350,000 in four modules, and each host
//! whose report was dropped was heard only from its next heartbeat, 30 s later (the book's
//! performance page, "No consumer a node").

use crate::nats::NatsError;
use crate::subjects::{self, REPORTS_STREAM};
use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy};
use futures_util::StreamExt as _;
use std::time::Duration;

/// How long a consumer the fleet made lingers on the server once the fleet stopped reading it.
const INACTIVE: Duration = Duration::from_secs(120);

/// How often the server says the consumer is alive while it has nothing to deliver: two of
/// these missed and the consumer is made again (a server restarted, a cluster's leader lost).
const HEARTBEAT: Duration = Duration::from_secs(5);

/// How many reports one pull asks for: the client keeps at most this many (and asks for the
/// next before they are all read).
const BATCH: usize = 1_000;

/// How long one pull waits on the server for reports.
const EXPIRES: Duration = Duration::from_secs(30);

/// How long the fleet waits before making its consumer again after a failure.
const RETRY: Duration = Duration::from_millis(500);

/// A report as stored: its subject and its bytes.
pub struct Stored {
    /// Its subject (`mesh.report.<node>`).
    pub subject: String,
    /// Its bytes, as published.
    pub payload: bytes::Bytes,
}

/// The reports stream from the moment the reader was opened, read in order, each report once.
///
/// # Guarantees
/// - Nothing published on `mesh.report.>` after [`ReportReader::open`] is passed over, as long
///   as the stream keeps it: a consumer lost (a server restarted, a cluster's leader lost) is
///   made again from the stream sequence after the last report read.
/// - A bus that does not answer at the opening (a cluster whose quorum just came back, its
///   reports stream without a leader yet) does not fail it: the consumer is made when the bus
///   answers, from the time of the opening (the server's clock, which must not lag the
///   controller's: a report it stamped earlier is heard only from the host's next heartbeat).
/// - Memory does not grow with how far behind the reader is: the server holds the rest.
pub struct ReportReader {
    js: async_nats::jetstream::Context,
    messages: Option<pull::Stream>,
    /// When the reader was opened: where a consumer made after the opening starts while no
    /// report has been read yet.
    opened: async_nats::datetime::DateTime,
    /// The stream sequence of the last report read (0: none yet).
    last: u64,
    retry_at: Option<tokio::time::Instant>,
}

impl ReportReader {
    /// A reader of every report published from now on. When the bus does not answer (no
    /// server, or a reports stream without a leader), the reader is made all the same and
    /// makes its consumer when the bus answers ([`ReportReader::next`]), said in the log.
    ///
    /// # Errors
    /// [`NatsError::Consumer`] when the bus refuses the consumer (a permission, a stream that
    /// does not exist): no waiting would change its answer.
    pub async fn open(js: async_nats::jetstream::Context) -> Result<ReportReader, NatsError> {
        let mut reader = ReportReader {
            js,
            messages: None,
            opened: async_nats::datetime::now(),
            last: 0,
            retry_at: None,
        };
        match reader.consumer(DeliverPolicy::New).await {
            Ok(messages) => reader.messages = Some(messages),
            Err(error) if unanswered(&error) => {
                tracing::warn!(%error,
                    "the reports stream does not answer yet; reading it from now once it does");
                reader.retry_at = Some(tokio::time::Instant::now() + RETRY);
            }
            Err(source) => {
                return Err(NatsError::Consumer {
                    stream: REPORTS_STREAM.to_owned(),
                    consumer: "(the reports reader's own)".to_owned(),
                    source,
                })
            }
        }
        Ok(reader)
    }

    /// Whether the reader holds a consumer now (`false` while the bus has not answered).
    pub fn is_reading(&self) -> bool {
        self.messages.is_some()
    }

    /// Where a consumer made again starts: after the last report read, or at the opening.
    fn resume_policy(&self) -> DeliverPolicy {
        match self.last {
            0 => DeliverPolicy::ByStartTime {
                start_time: self.opened,
            },
            last => DeliverPolicy::ByStartSequence {
                start_sequence: last + 1,
            },
        }
    }

    async fn consumer(
        &self,
        deliver_policy: DeliverPolicy,
    ) -> Result<pull::Stream, async_nats::Error> {
        let consumer = self
            .js
            .create_consumer_on_stream(
                pull::Config {
                    description: Some("the controller's rollout reads the reports".to_owned()),
                    filter_subject: subjects::ALL_REPORTS.to_owned(),
                    deliver_policy,
                    ack_policy: AckPolicy::None,
                    inactive_threshold: INACTIVE,
                    ..Default::default()
                },
                REPORTS_STREAM,
            )
            .await?;
        Ok(consumer
            .stream()
            .max_messages_per_batch(BATCH)
            .expires(EXPIRES)
            .heartbeat(HEARTBEAT)
            .messages()
            .await?)
    }

    /// The next report stored, `None` when none came before `until`. Dropped while it waits,
    /// a report it was handed meanwhile may be lost: read it to its answer.
    pub async fn next(&mut self, until: tokio::time::Instant) -> Option<Stored> {
        loop {
            if let Some(at) = self.retry_at {
                if at > until {
                    tokio::time::sleep_until(until).await;
                    return None;
                }
                tokio::time::sleep_until(at).await;
                self.retry_at = None;
            }
            let Some(messages) = self.messages.as_mut() else {
                match tokio::time::timeout_at(until, self.consumer(self.resume_policy())).await {
                    Ok(Ok(messages)) => {
                        tracing::info!(after = self.last, "reading the reports stream again");
                        self.messages = Some(messages);
                    }
                    Ok(Err(error)) => {
                        tracing::warn!(%error, "cannot read the reports stream; trying again");
                        self.retry_at = Some(tokio::time::Instant::now() + RETRY);
                    }
                    Err(_) => return None,
                }
                continue;
            };
            match tokio::time::timeout_at(until, messages.next()).await {
                Err(_) => return None,
                Ok(Some(Ok(message))) => {
                    if let Ok(info) = message.info() {
                        self.last = info.stream_sequence;
                    }
                    return Some(Stored {
                        subject: message.subject.to_string(),
                        payload: message.payload.clone(),
                    });
                }
                Ok(Some(Err(error))) => {
                    tracing::warn!(%error, after = self.last,
                        "the reports consumer failed; making it again after the last report read");
                    self.messages = None;
                    self.retry_at = Some(tokio::time::Instant::now() + RETRY);
                }
                Ok(None) => {
                    self.messages = None;
                    self.retry_at = Some(tokio::time::Instant::now() + RETRY);
                }
            }
        }
    }
}

/// Whether the consumer was not made because the bus did not answer (no server answered in
/// time, none listens, or JetStream said it is temporarily unavailable: a stream without a
/// leader), rather than because it refused.
fn unanswered(error: &async_nats::Error) -> bool {
    use async_nats::jetstream::stream::{ConsumerError, ConsumerErrorKind};
    match error.downcast_ref::<ConsumerError>() {
        Some(error) => match error.kind() {
            ConsumerErrorKind::TimedOut | ConsumerErrorKind::Request => true,
            ConsumerErrorKind::JetStream(api) => super::temporarily_unavailable(&api),
            _ => false,
        },
        // The consumer was made; opening its messages failed.
        None => true,
    }
}
