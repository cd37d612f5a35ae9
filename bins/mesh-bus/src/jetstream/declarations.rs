//! The declarations stream: what each node should hold, newest last.
//!
//! The controller publishes a node's declaration on `mesh.declaration.<node>`
//! ([`publish_declaration`]); the node's host hears it on a plain subscription of that subject
//! and, when it starts and again whenever its connection comes back, asks the stream for the
//! last declaration stored there ([`last_declaration`]: a direct get naming the subject, which
//! its grants allow for its own subject and no other). So a declaration sent while the host was
//! down, not yet started, or cut off from a restarting bus is read when it comes back.
//!
//! # Why no consumer a node
//! A durable consumer a node did the same, and cost the server a consumer's state a node: about
//! a millisecond to make each (10 s of a fleet's first send at 10,000 nodes), 75–100 KiB of
//! memory each (9 GiB at 100,000), a raft group each on a cluster, and work on every message
//! the stream stores or removes. A direct get costs the server nothing between two requests,
//! and a host asks only when it (re)connects.

use crate::nats::NatsError;
use crate::subjects::{self, DECLARATIONS_STREAM};
use async_nats::jetstream::stream::{self, DirectGetErrorKind};
use async_nats::jetstream::Context;
use bytes::Bytes;

/// The declarations stream: the last 8 declarations of each node, answering direct gets (a
/// host reads its last declaration by one).
pub fn declarations_stream() -> stream::Config {
    stream::Config {
        name: DECLARATIONS_STREAM.to_owned(),
        description: Some("what each node should hold, newest last".to_owned()),
        subjects: vec![subjects::ALL_DECLARATIONS.to_owned()],
        max_messages_per_subject: 8,
        allow_direct: true,
        storage: stream::StorageType::File,
        ..Default::default()
    }
}

/// What [`publish_declaration`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeclarationPublished {
    /// Its sequence in [`DECLARATIONS_STREAM`] (the first one's, for a duplicate).
    pub sequence: u64,
    /// A message of the same id was already stored within the stream's duplicate window (two
    /// minutes): not stored again.
    pub duplicate: bool,
}

/// Publishes a declaration's bytes on `node`'s declaration subject with the JetStream message
/// id `message_id` (`Nats-Msg-Id`).
///
/// # Guarantees
/// Returns once the declarations stream stored it, or said it already had a message of that id
/// (within its duplicate window): a publish tried again with the same id — its answer lost, the
/// server restarting — is stored once.
///
/// # Errors
/// [`NatsError::Publish`] when the stream did not acknowledge it.
pub async fn publish_declaration(
    js: &Context,
    node: &str,
    declaration: Vec<u8>,
    message_id: &str,
) -> Result<DeclarationPublished, NatsError> {
    let subject = subjects::declaration(node);
    let publish_error = |source: async_nats::Error| NatsError::Publish {
        subject: subject.clone(),
        source,
    };
    let ack = js
        .send_publish(
            subject.clone(),
            async_nats::jetstream::message::PublishMessage::build()
                .payload(declaration.into())
                .message_id(message_id),
        )
        .await
        .map_err(|source| publish_error(source.into()))?
        .await
        .map_err(|source| publish_error(source.into()))?;
    Ok(DeclarationPublished {
        sequence: ack.sequence,
        duplicate: ack.duplicate,
    })
}

/// The last declaration stored on a node's subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastDeclaration {
    /// Its bytes, as published.
    pub payload: Bytes,
    /// The message id it was published with ([`publish_declaration`]'s `message_id`): the same
    /// send heard twice — live and by this get — carries the same id.
    pub message_id: Option<String>,
    /// Its sequence in [`DECLARATIONS_STREAM`].
    pub sequence: u64,
}

/// The last declaration stored on `node`'s subject, by a direct get naming the subject (`None`:
/// nothing was ever sent to it, or what was is gone).
///
/// # Errors
/// [`NatsError::Stream`] when the stream did not answer (not there, or not answering direct
/// gets — one made by an earlier mesh before the controller changed it — or the bus is down).
pub async fn last_declaration(
    js: &Context,
    node: &str,
) -> Result<Option<LastDeclaration>, NatsError> {
    let stream = js
        .get_stream_no_info(DECLARATIONS_STREAM)
        .await
        .map_err(|source| NatsError::Stream {
            stream: DECLARATIONS_STREAM.to_owned(),
            source: source.into(),
        })?;
    match stream
        .direct_get_last_for_subject(subjects::declaration(node))
        .await
    {
        Ok(message) => Ok(Some(LastDeclaration {
            message_id: message
                .headers
                .get(async_nats::header::NATS_MESSAGE_ID)
                .map(|id| id.as_str().to_owned()),
            payload: message.payload,
            sequence: message.sequence,
        })),
        Err(error) if matches!(error.kind(), DirectGetErrorKind::NotFound) => Ok(None),
        Err(source) => Err(NatsError::Stream {
            stream: DECLARATIONS_STREAM.to_owned(),
            source: format!(
                "the last declaration on `{}` could not be read: {source}",
                subjects::declaration(node)
            )
            .into(),
        }),
    }
}
