//! A declaration as the controller sends and records it ([`Outgoing`]): its canonical JSON and
//! digest made once, not again by every step that needs them.

use super::Declaration;

/// A declaration with its canonical JSON and its digest, each made **once**: a send needs the
/// digest (the report must name it, the message id carries it), the bytes (published), and the
/// record of what was sent needs both. Made again by each of them, a rollout serialized every
/// node's declaration five times and hashed it three times a module.
///
/// It cannot be changed once made (reached through [`Outgoing::declaration`]), so the bytes and
/// digest stay its own.
#[derive(Debug, Clone)]
pub struct Outgoing {
    declaration: Declaration,
    json: Vec<u8>,
    digest: String,
    /// The send it goes out in ([`Outgoing::with_send`]).
    send: Option<String>,
}

impl Outgoing {
    /// `declaration` serialized and hashed ([`Declaration::canonical_json_and_digest`]).
    pub fn new(declaration: Declaration) -> Outgoing {
        let (json, digest) = declaration.canonical_json_and_digest();
        Outgoing {
            declaration,
            json,
            digest,
            send: None,
        }
    }

    /// It, going out in the send `send`: the id its message carries (`Nats-Msg-Id` on a
    /// fleet's bus), which the host's report answering it names. Its bytes and digest are the
    /// same whatever the send.
    #[must_use]
    pub fn with_send(self, send: String) -> Outgoing {
        Outgoing {
            send: Some(send),
            ..self
        }
    }

    /// The send it goes out in, once named ([`Outgoing::with_send`]).
    pub fn send(&self) -> Option<&str> {
        self.send.as_deref()
    }

    /// `resealed` — this declaration with its secrets sealed again to its node's own key — as
    /// its node is sent it: serialized, and of this one's digest (a secret counts by its keyed
    /// digest, whichever key its ciphertext is sealed to), not hashed again.
    ///
    /// # Panics
    /// In debug builds, when `resealed` is of another digest (not this declaration sealed
    /// again).
    pub fn resealed(&self, resealed: Declaration) -> Outgoing {
        debug_assert_eq!(resealed.digest(), self.digest, "the same declaration");
        Outgoing {
            json: resealed.canonical_json(),
            declaration: resealed,
            digest: self.digest.clone(),
            send: self.send.clone(),
        }
    }

    /// The declaration.
    pub fn declaration(&self) -> &Declaration {
        &self.declaration
    }

    /// Its node.
    pub fn node(&self) -> &str {
        &self.declaration.node
    }

    /// Its canonical JSON ([`Declaration::canonical_json`]).
    pub fn json(&self) -> &[u8] {
        &self.json
    }

    /// Its digest ([`Declaration::digest`]).
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The declaration, let go of its bytes.
    pub fn into_declaration(self) -> Declaration {
        self.declaration
    }
}
