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
}

impl Outgoing {
    /// `declaration` serialized and hashed ([`Declaration::canonical_json_and_digest`]).
    pub fn new(declaration: Declaration) -> Outgoing {
        let (json, digest) = declaration.canonical_json_and_digest();
        Outgoing {
            declaration,
            json,
            digest,
        }
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
