//! The mesh's types, and nothing else.
//!
//! Start with [`module`] (what a catalogue's `module.toml` says), [`inventory`] (nodes,
//! assignments, settings layers), then [`declaration`] (what one node is sent) and [`report`]
//! (what its host answers). [`build`] and [`plan`] describe module builds and merge plans.
//!
//! # Invariants
//! - mesh-model performs no IO, reads no clock and spawns nothing: time is always an argument,
//!   catalogue trees arrive as values ([`module::CatalogueSource`]).
//! - Wire and disk formats ([`declaration::Declaration`], [`report::Report`]) carry a `format`
//!   version and are checked when read.
//! - Validation says every problem at once ([`Diagnostic`]), each naming file, module and key.

pub mod build;
pub mod declaration;
pub mod diagnostic;
pub mod inventory;
pub mod module;
pub mod plan;
pub mod report;
pub mod secret;
pub mod template;

pub use diagnostic::Diagnostic;

use sha2::{Digest as _, Sha256};

/// The sha256 digest of some bytes, written as `sha256:<hex>` (the OCI way).
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
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
