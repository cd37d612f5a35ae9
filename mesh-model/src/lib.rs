//! The mesh's types, and nothing else.
//!
//! Start with [`module`] (what a catalogue's `module.toml` says), [`inventory`] (nodes,
//! assignments, settings layers), then [`declaration`] (what one node is sent) and [`report`]
//! (what its host answers). [`build`] and [`plan`] describe module builds and merge plans.
//!
//! The modules, in dependency order (each uses only those before it, and the digest helpers
//! here): [`audit`] (what an audit entry says), [`build`], [`diagnostic`], [`drift`] (what a
//! host does with drift, named by a module, a node's inventory and a declaration alike),
//! [`secret`], [`template`], [`declaration`], [`report`], [`selector`] (the one grammar that
//! chooses nodes by name and label), [`waves`] (the `[rollout]` table: waves, budget, windows),
//! [`module`], [`inventory`], [`plan`].
//!
//! # Invariants
//! - mesh-model performs no IO, reads no clock and spawns nothing: time is always an argument,
//!   catalogue trees arrive as values ([`module::CatalogueSource`]).
//! - Wire and disk formats ([`declaration::Declaration`], [`report::Report`]) carry a `format`
//!   version and are checked when read.
//! - Validation says every problem at once ([`Diagnostic`]), each naming file, module and key.

pub mod audit;
pub mod build;
pub mod declaration;
pub mod diagnostic;
pub mod drift;
pub mod inventory;
pub mod module;
pub mod plan;
pub mod report;
pub mod secret;
pub mod selector;
pub mod template;
pub mod waves;

pub use diagnostic::Diagnostic;

use sha2::{Digest as _, Sha256};

/// The sha256 digest of some bytes, written as `sha256:<hex>` (the OCI way).
pub fn sha256_digest(bytes: &[u8]) -> String {
    sha256_text(Sha256::digest(bytes).into())
}

/// A finished sha256 hash written as `sha256:<hex>`: one string made at its length (where
/// `format!` of `hex::encode` makes two, the hex one a character at a time), which a host
/// does for each of thousands of files on every apply.
pub fn sha256_text(hash: [u8; 32]) -> String {
    let mut hex = [0u8; 64];
    hex::encode_to_slice(hash, &mut hex).expect("twice the hash's length");
    let mut text = String::with_capacity(7 + hex.len());
    text.push_str("sha256:");
    text.push_str(std::str::from_utf8(&hex).expect("hex digits are ASCII"));
    text
}

/// Whether `text` is `sha256:` and 64 lower-case hex digits.
pub fn is_sha256_digest(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Errors reading a wire or disk format.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The bytes are not the JSON the format needs.
    #[error("{what} is not valid JSON for its format")]
    Json {
        /// What was being read ("declaration", "report", …).
        what: &'static str,
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
    },
    /// The format version is one this build does not read.
    #[error("{what} has format {found}, this build reads up to format {expected}")]
    Format {
        /// What was being read.
        what: &'static str,
        /// The version found.
        found: u32,
        /// The newest version this build reads.
        expected: u32,
    },
    /// The value parsed but breaks the format's rules; every problem is listed.
    #[error("{what} is invalid: {}", problems.join("; "))]
    Invalid {
        /// What was being read.
        what: &'static str,
        /// Every problem found.
        problems: Vec<String>,
    },
}
