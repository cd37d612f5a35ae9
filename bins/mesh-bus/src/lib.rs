//! The bus: how the controller and the hosts talk.
//!
//! One small trait, [`Bus`] — publish, subscribe, request — with every subject, user, stream,
//! consumer and bucket named in
//! [`subjects`]. [`InProcessBus`] serves the embedded mode (one process, nothing to install);
//! [`NatsBus`] serves a fleet over a real NATS server — one, or a cluster of them — Debian's
//! `nats-server` 2.9 or a current release ([`version`]).
//!
//! Where to start: [`Bus`], then [`nats`] for the fleet. Beside the trait, NATS gives the mesh
//! what a plain bus cannot:
//! - [`jetstream`]: the streams (declarations, reports, events), durable consumers made
//!   **from now** and [`jetstream::consumer_reset`] (the rule “A durable consumer starts from
//!   now”), merge announcements heard once;
//! - [`grants`]: the server's `authorization` block composed from the nodes and what their
//!   modules are granted — a pure function (the rule “Grants before code”);
//! - [`discovery`]: each runtime answers `$SRV.PING`/`$SRV.INFO`; [`discovery::discover`] waits
//!   for every instance that said it is there and names the ones not heard (the rule “Discovery
//!   waits for everyone who said they are there”);
//! - [`probe`]: proves a node's permissions in force on the server, one by one, before code
//!   that needs them is sent (the rule “Grants before code”);
//! - [`records`]: the controller's records in a key-value bucket, for a controller that may
//!   restart anywhere;
//! - [`keys`]: NKeys — a node's seed made and kept on its host, its public key in the users
//!   file (the rule “Secrets never leave their owner”); TLS is [`BusTls`] on [`NatsOptions`].
//!
//! # Invariants
//! - Payloads are bytes: the bus knows nothing of declarations or reports, which are
//!   mesh-model's versioned wire formats. The only payloads this crate defines are its own:
//!   the merge announcement ([`jetstream::MergeAnnouncement`]) and the discovery answers (the
//!   NATS service API's JSON).
//! - Subjects follow NATS syntax (`.`-separated tokens, `*` one token, `>` the rest) in every
//!   implementation, so the embedded mode routes exactly as a fleet does.
//! - Nothing here decides anything about the mesh: no plan, no rollout, no grant policy. The
//!   crate carries, stores and permits what the controller decided.
//! - Every server from 2.9 on is served: one `filter_subject` per consumer (the mesh needs no
//!   more), a consumer reset is delete and re-make on every version (2.14's reset API cannot
//!   reset a deliver-*new* consumer to now: see [`jetstream`]), and async-nats is built without
//!   its newer-server features. What differs by server is chosen by its version ([`version`]),
//!   never by build.
//! - Streams and buckets are made with [`jetstream::replicas_for`] copies: 1 on a single
//!   server, 3 on a cluster; a write sent again after its server was lost is stored once.

#[cfg(feature = "cli")]
pub mod cli;
pub mod discovery;
pub mod grants;
pub mod in_process;
pub mod jetstream;
pub mod keys;
pub mod nats;
pub mod probe;
pub mod records;
pub mod subjects;
pub mod version;

pub use in_process::InProcessBus;
pub use nats::{BusTls, ClientCertificate, NatsBus, NatsError, NatsOptions, NodeSecret};

use std::time::Duration;

/// A message heard on the bus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The subject it was published on.
    pub subject: String,
    /// Its payload.
    pub payload: Vec<u8>,
    /// Where an answer goes, for a request.
    pub reply: Option<String>,
    /// The id it was published with ([`Bus::publish_with_id`]; `Nats-Msg-Id` on NATS), if any.
    pub id: Option<String>,
}

/// How many messages a subscription holds that its reader has not taken yet. Past it, a bus
/// holds back (NATS: its client's own buffer fills, and the server drops what a slow consumer
/// cannot take, said as a slow-consumer event; in process: the message is dropped) instead of
/// the reader's memory growing for as long as it is behind — 100,000 hosts' heartbeats read by
/// a controller waiting on the server grew it to 7 GiB in half an hour. Every report is kept in
/// the reports stream besides, and a host repeats its last one every heartbeat.
pub const SUBSCRIPTION_CAPACITY: usize = 4096;

/// Messages arriving on a subscription, at most [`SUBSCRIPTION_CAPACITY`] of them held.
#[derive(Debug)]
pub struct Subscription {
    receiver: tokio::sync::mpsc::Receiver<Message>,
}

impl Subscription {
    /// A subscription fed by `receiver` (a channel of [`SUBSCRIPTION_CAPACITY`]).
    pub fn new(receiver: tokio::sync::mpsc::Receiver<Message>) -> Self {
        Subscription { receiver }
    }

    /// The next message, or `None` once the bus is gone.
    pub async fn next(&mut self) -> Option<Message> {
        self.receiver.recv().await
    }
}

/// A failure on the bus.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// A subject that is not valid NATS syntax.
    #[error("`{subject}` is not a valid subject")]
    Subject {
        /// The subject.
        subject: String,
    },
    /// Nobody answered a request in time.
    #[error("no answer on `{subject}` within {timeout:?}")]
    Timeout {
        /// The subject asked.
        subject: String,
        /// How long we waited.
        timeout: Duration,
    },
    /// The bus refused or lost the operation.
    #[error("bus failure on `{subject}`: {reason}")]
    Failed {
        /// The subject concerned.
        subject: String,
        /// What went wrong.
        reason: String,
    },
}

/// The bus, as the controller and hosts use it.
#[async_trait::async_trait]
pub trait Bus: Send + Sync {
    /// Publishes a payload on a subject.
    ///
    /// # Errors
    /// [`BusError`] when the subject is invalid or the bus refuses it.
    async fn publish(&self, subject: &str, payload: Vec<u8>) -> Result<(), BusError>;

    /// Publishes a payload on a subject with the message id `id`, which its subscribers read
    /// in [`Message::id`] (a declaration's send). A bus that keeps no ids publishes it without.
    ///
    /// # Errors
    /// As [`Bus::publish`].
    async fn publish_with_id(
        &self,
        subject: &str,
        payload: Vec<u8>,
        _id: &str,
    ) -> Result<(), BusError> {
        self.publish(subject, payload).await
    }

    /// Subscribes to a subject (wildcards allowed).
    ///
    /// # Errors
    /// [`BusError`] when the subject is invalid or the bus refuses it.
    async fn subscribe(&self, subject: &str) -> Result<Subscription, BusError>;

    /// Publishes and waits for the first answer.
    ///
    /// # Errors
    /// [`BusError::Timeout`] when nobody answers within `timeout`.
    async fn request(
        &self,
        subject: &str,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Message, BusError>;

    /// Answers a request's message.
    ///
    /// # Errors
    /// [`BusError`] when the message has no reply subject or the bus refuses it.
    async fn respond(&self, request: &Message, payload: Vec<u8>) -> Result<(), BusError> {
        let reply = request.reply.as_deref().ok_or_else(|| BusError::Failed {
            subject: request.subject.clone(),
            reason: "the message is not a request (it has no reply subject)".into(),
        })?;
        self.publish(reply, payload).await
    }
}

/// Whether a subject (no wildcards) matches a pattern (wildcards allowed).
pub fn subject_matches(pattern: &str, subject: &str) -> bool {
    let mut pattern_tokens = pattern.split('.');
    let mut subject_tokens = subject.split('.');
    loop {
        match (pattern_tokens.next(), subject_tokens.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(p), Some(s)) if p == s => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Checks a subject before it is used: `Ok` when it is valid NATS syntax (`wildcards` allows `*`
/// and a final `>`, as a subscription may use).
///
/// # Errors
/// [`BusError::Subject`] naming the subject.
pub fn check_subject(subject: &str, wildcards: bool) -> Result<(), BusError> {
    if is_valid_subject(subject, wildcards) {
        Ok(())
    } else {
        Err(BusError::Subject {
            subject: subject.to_owned(),
        })
    }
}

/// Whether a subject is valid NATS syntax; `wildcards` allows `*` and a final `>`.
pub fn is_valid_subject(subject: &str, wildcards: bool) -> bool {
    let tokens: Vec<&str> = subject.split('.').collect();
    tokens.iter().enumerate().all(|(i, token)| {
        !token.is_empty()
            && !token.contains(char::is_whitespace)
            && match *token {
                "*" => wildcards,
                ">" => wildcards && i == tokens.len() - 1,
                t => !t.contains('*') && !t.contains('>'),
            }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_as_nats_does() {
        assert!(subject_matches("mesh.report.*", "mesh.report.home"));
        assert!(!subject_matches("mesh.report.*", "mesh.report.home.x"));
        assert!(subject_matches("mesh.>", "mesh.report.home.x"));
        assert!(!subject_matches("mesh.>", "mesh"));
        assert!(!subject_matches("mesh.report.home", "mesh.report.laptop"));
        assert!(is_valid_subject("mesh.report.*", true));
        assert!(!is_valid_subject("mesh.report.*", false));
        assert!(!is_valid_subject("mesh..x", true));
        assert!(!is_valid_subject("mesh.>.x", true));
    }
}
