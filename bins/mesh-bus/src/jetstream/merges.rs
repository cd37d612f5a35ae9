//! Merge announcements: published once per repository, branch and commit on the events
//! stream, and heard once per listener.

use super::ensure_consumer_from_now;
use crate::nats::NatsError;
use crate::subjects::{self, EVENTS_STREAM};
use async_nats::jetstream::consumer::{self, pull, PullConsumer};
use async_nats::jetstream::Context;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use std::collections::{HashSet, VecDeque};
use std::time::Duration;

/// A merge to a module repository, as announced on [`subjects::MERGES`] (wire format v1:
/// `{"version":1,"repository":…,"branch":…,"commit":…}`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MergeAnnouncement {
    /// The repository merged to.
    pub repository: String,
    /// The branch merged to.
    pub branch: String,
    /// The commit the branch now points at.
    pub commit: String,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct MergeWire {
    version: u32,
    repository: String,
    branch: String,
    commit: String,
}

impl MergeAnnouncement {
    /// The key a merge is heard once by: a digest of repository, branch and commit, used as
    /// the JetStream message id (`Nats-Msg-Id`).
    pub fn message_id(&self) -> String {
        let mut digest = Sha256::new();
        for part in [&self.repository, &self.branch, &self.commit] {
            digest.update((part.len() as u64).to_be_bytes());
            digest.update(part.as_bytes());
        }
        format!("merge-{}", hex::encode(digest.finalize()))
    }

    /// The announcement's wire bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&MergeWire {
            version: 1,
            repository: self.repository.clone(),
            branch: self.branch.clone(),
            commit: self.commit.clone(),
        })
        .expect("a merge announcement serializes")
    }

    /// Reads an announcement's wire bytes.
    ///
    /// # Errors
    /// [`NatsError::Decode`] when they are not a version 1 merge announcement.
    pub fn from_bytes(bytes: &[u8]) -> Result<MergeAnnouncement, NatsError> {
        let wire: MergeWire = serde_json::from_slice(bytes).map_err(|error| NatsError::Decode {
            subject: subjects::MERGES.to_owned(),
            reason: error.to_string(),
        })?;
        if wire.version != 1 {
            return Err(NatsError::Decode {
                subject: subjects::MERGES.to_owned(),
                reason: format!("merge announcement version {} is not 1", wire.version),
            });
        }
        Ok(MergeAnnouncement {
            repository: wire.repository,
            branch: wire.branch,
            commit: wire.commit,
        })
    }
}

/// What the events stream did with a merge announcement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergePublished {
    /// Its sequence in [`EVENTS_STREAM`] (the first one's, for a duplicate).
    pub sequence: u64,
    /// The same merge was already stored within the deduplication window: not stored again.
    pub duplicate: bool,
}

/// Announces a merge on [`subjects::MERGES`], stored once per repository, branch and commit
/// The rules “A durable consumer starts from now” and “A merge heard twice makes one plan”.
///
/// # Guarantees
/// Returns once the events stream stored it (or said it already had it). Published again
/// within [`super::MERGE_DEDUPLICATION_WINDOW`], it is not stored again; after that,
/// [`MergeListener`] still hands it out once per listener.
///
/// # Errors
/// [`NatsError::Publish`] when the stream did not acknowledge it.
pub async fn publish_merge(
    js: &Context,
    repository: &str,
    branch: &str,
    commit: &str,
) -> Result<MergePublished, NatsError> {
    let merge = MergeAnnouncement {
        repository: repository.to_owned(),
        branch: branch.to_owned(),
        commit: commit.to_owned(),
    };
    let publish_error = |source: async_nats::Error| NatsError::Publish {
        subject: subjects::MERGES.to_owned(),
        source,
    };
    let ack = js
        .send_publish(
            subjects::MERGES,
            async_nats::jetstream::message::PublishMessage::build()
                .payload(merge.to_bytes().into())
                .message_id(merge.message_id()),
        )
        .await
        .map_err(|source| publish_error(source.into()))?
        .await
        .map_err(|source| publish_error(source.into()))?;
    Ok(MergePublished {
        sequence: ack.sequence,
        duplicate: ack.duplicate,
    })
}

/// How many merges a [`MergeListener`] remembers to hand each out once.
pub const MERGES_REMEMBERED: usize = 4096;

/// Hears merge announcements, each once: a durable consumer on [`subjects::MERGES`] made from
/// now, and a memory of the last [`MERGES_REMEMBERED`] merges handed out.
pub struct MergeListener {
    consumer: PullConsumer,
    messages: Option<pull::Stream>,
    seen: HashSet<String>,
    order: VecDeque<String>,
}

/// A merge heard, to acknowledge once acted on.
pub struct HeardMerge {
    /// The merge.
    pub merge: MergeAnnouncement,
    /// Its sequence in [`EVENTS_STREAM`].
    pub sequence: u64,
    message: async_nats::jetstream::Message,
}

impl std::fmt::Debug for HeardMerge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeardMerge")
            .field("merge", &self.merge)
            .field("sequence", &self.sequence)
            .finish_non_exhaustive()
    }
}

impl HeardMerge {
    /// Acknowledges it: the listener's consumer will not hand it out again.
    ///
    /// # Errors
    /// [`NatsError::Consumer`] when the acknowledgement could not be sent.
    pub async fn ack(&self) -> Result<(), NatsError> {
        self.message
            .ack()
            .await
            .map_err(|source| NatsError::Consumer {
                stream: EVENTS_STREAM.to_owned(),
                consumer: "(merge listener)".to_owned(),
                source,
            })
    }
}

/// The merges waiting on a listener's consumer: stored and not yet acknowledged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct MergesWaiting {
    /// How many: not yet delivered (`num_pending`) and delivered, not acknowledged.
    pub count: u64,
    /// When the oldest of them was announced (seconds since the epoch), if any waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_at: Option<u64>,
}

/// The merges waiting on the durable consumer `durable` — read from the server, so they are
/// known while the listener is stopped too.
///
/// # Errors
/// [`NatsError::Consumer`] when the stream or consumer cannot be read.
pub async fn merges_waiting(js: &Context, durable: &str) -> Result<MergesWaiting, NatsError> {
    let consumer_error = |source: async_nats::Error| NatsError::Consumer {
        stream: EVENTS_STREAM.to_owned(),
        consumer: durable.to_owned(),
        source,
    };
    let stream = js
        .get_stream(EVENTS_STREAM)
        .await
        .map_err(|e| consumer_error(e.into()))?;
    let mut consumer: PullConsumer = stream
        .get_consumer(durable)
        .await
        .map_err(&consumer_error)?;
    let info = consumer
        .info()
        .await
        .map_err(|e| consumer_error(e.into()))?;
    let count = info.num_pending + info.num_ack_pending as u64;
    if count == 0 {
        return Ok(MergesWaiting::default());
    }
    let oldest_at = stream
        .get_first_raw_message_by_subject(subjects::MERGES, info.ack_floor.stream_sequence + 1)
        .await
        .ok()
        .and_then(|message| u64::try_from(message.time.unix_timestamp()).ok());
    Ok(MergesWaiting { count, oldest_at })
}

/// The configuration of a merge listener's consumer named `durable`.
pub fn merge_consumer(durable: &str) -> pull::Config {
    pull::Config {
        durable_name: Some(durable.to_owned()),
        description: Some("hears merges".to_owned()),
        filter_subject: subjects::MERGES.to_owned(),
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait: Duration::from_secs(5 * 60),
        ..Default::default()
    }
}

impl MergeListener {
    /// Opens the listener's durable consumer `durable` on [`EVENTS_STREAM`], made from now if
    /// it is not there (see [`ensure_consumer_from_now`]).
    ///
    /// # Errors
    /// As [`ensure_consumer_from_now`].
    pub async fn open(js: &Context, durable: &str) -> Result<MergeListener, NatsError> {
        let (consumer, _) =
            ensure_consumer_from_now(js, EVENTS_STREAM, merge_consumer(durable)).await?;
        Ok(MergeListener {
            consumer,
            messages: None,
            seen: HashSet::new(),
            order: VecDeque::new(),
        })
    }

    /// The next merge not heard before, waiting at most `wait`; `None` when none came.
    ///
    /// A merge heard before (the same repository, branch and commit) is acknowledged and
    /// passed over.
    ///
    /// # Errors
    /// [`NatsError::Consumer`] when the consumer cannot be read; [`NatsError::Decode`] for a
    /// message that is not a merge announcement, naming its sequence, size and first bytes
    /// (it is acknowledged, so it does not come back: the next call hears the next one).
    pub async fn next(&mut self, wait: Duration) -> Result<Option<HeardMerge>, NatsError> {
        let deadline = tokio::time::Instant::now() + wait;
        let durable = self
            .consumer
            .cached_info()
            .config
            .durable_name
            .clone()
            .unwrap_or_default();
        let consumer_error = |source: async_nats::Error| NatsError::Consumer {
            stream: EVENTS_STREAM.to_owned(),
            consumer: durable.clone(),
            source,
        };
        if self.messages.is_none() {
            // A consumer just made on a cluster is read once its leader is elected (see
            // `awaits_leader`): looked at again every second until then, within `wait`.
            while super::awaits_leader(self.consumer.cached_info()) {
                let again = tokio::time::Instant::now() + Duration::from_secs(1);
                if again > deadline {
                    return Ok(None);
                }
                tokio::time::sleep_until(again).await;
                self.consumer
                    .info()
                    .await
                    .map_err(|source| consumer_error(source.into()))?;
            }
            let messages = self
                .consumer
                .messages()
                .await
                .map_err(|source| consumer_error(source.into()))?;
            self.messages = Some(messages);
        }
        loop {
            let messages = self.messages.as_mut().expect("opened above");
            let message = match tokio::time::timeout_at(deadline, messages.next()).await {
                Err(_) => return Ok(None),
                Ok(None) => {
                    self.messages = None; // made again at the next call
                    return Err(consumer_error("its message stream ended".into()));
                }
                Ok(Some(Err(source))) => {
                    self.messages = None;
                    return Err(consumer_error(source.into()));
                }
                Ok(Some(Ok(message))) => message,
            };
            let sequence = message
                .info()
                .map(|info| info.stream_sequence)
                .map_err(consumer_error)?;
            let merge = match MergeAnnouncement::from_bytes(&message.payload) {
                Ok(merge) => merge,
                Err(error) => {
                    message.ack().await.map_err(consumer_error)?;
                    return Err(unreadable(&message.payload, sequence, error));
                }
            };
            let key = merge.message_id();
            if self.seen.contains(&key) {
                message.ack().await.map_err(consumer_error)?;
                continue;
            }
            self.seen.insert(key.clone());
            self.order.push_back(key);
            if self.order.len() > MERGES_REMEMBERED {
                if let Some(oldest) = self.order.pop_front() {
                    self.seen.remove(&oldest);
                }
            }
            return Ok(Some(HeardMerge {
                merge,
                sequence,
                message,
            }));
        }
    }
}

/// How many of an unreadable announcement's first bytes its error shows (escaped).
const HEAD_BYTES: usize = 48;

/// The error of an announcement that does not read: whoever published it is named by where it
/// is (its sequence), its size and its first bytes, escaped.
fn unreadable(payload: &[u8], sequence: u64, error: NatsError) -> NatsError {
    let why = match error {
        NatsError::Decode { reason, .. } => reason,
        other => other.to_string(),
    };
    NatsError::Decode {
        subject: subjects::MERGES.to_owned(),
        reason: format!(
            "an unreadable merge announcement (sequence {sequence} of {EVENTS_STREAM}, {} bytes: \
             \"{}\"{}): {why}",
            payload.len(),
            payload[..payload.len().min(HEAD_BYTES)].escape_ascii(),
            if payload.len() > HEAD_BYTES {
                "…"
            } else {
                ""
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merge_is_keyed_by_repository_branch_and_commit() {
        let merge = |repository: &str, branch: &str, commit: &str| MergeAnnouncement {
            repository: repository.into(),
            branch: branch.into(),
            commit: commit.into(),
        };
        let key = merge("catalogue", "main", "abc").message_id();
        assert_eq!(key, merge("catalogue", "main", "abc").message_id());
        assert_ne!(key, merge("catalogue", "main", "abd").message_id());
        assert_ne!(key, merge("catalogue", "dev", "abc").message_id());
        // Lengths are part of the key: moving a character between fields is another merge.
        assert_ne!(
            merge("ab", "c", "d").message_id(),
            merge("a", "bc", "d").message_id()
        );
        let back = MergeAnnouncement::from_bytes(&merge("r", "b", "c").to_bytes()).unwrap();
        assert_eq!(back, merge("r", "b", "c"));
    }
}
