//! The mesh's secrets: a secret is readable only where it is used.
//!
//! Start at [`MeshKey`], the controller's secrets key (an age X25519 identity kept in a file of
//! the mesh home, `0600`): every secret at rest is encrypted to it and to the operators' keys
//! ([`Recipient`], kept one a line by [`recipients`]) with [`MeshKey::seal`], and carries a
//! keyed digest ([`MeshKey::digest`], HMAC-SHA256 keyed from the mesh key) that is all a person
//! ever sees. When the controller sends a node its declaration, [`MeshKey::reseal`] decrypts a
//! secret in memory only and encrypts it again to that node's key alone; the host opens it with
//! its own [`Identity`]. After a rotation, a [`Keyring`] opens with the mesh key and the keys
//! it retired, as long as the controller keeps them.
//!
//! In dependency order: [`recipients`] (public keys, and the operators' file), [`identity`] (an
//! age identity and the file that keeps it), [`seal`] (encrypt, decrypt, the keyed digest and the
//! mesh key itself), [`keyring`] (the keys a secret at rest is opened with).
//!
//! # Invariants
//! - No cryptography is written here: age (X25519 recipients, ChaCha20-Poly1305) encrypts, and
//!   `hmac` + `sha2` make the digest.
//! - A secret's value is held only in a [`Plaintext`] (zeroized when dropped), never in an
//!   error, a log line or a `Debug`; an identity file is read into zeroized memory too.
//! - An identity file is `0600` from its creation, and refused when anyone but its owner may
//!   read it.
//! - Nothing here knows the home, the bus or a declaration: paths and values in, values out.

pub mod identity;
pub mod keyring;
pub mod recipients;
pub mod seal;

pub use identity::Identity;
pub use keyring::Keyring;
pub use recipients::Recipient;
pub use seal::{MeshKey, Plaintext};

use std::path::PathBuf;

/// Why a secret could not be kept, sealed or opened. No variant carries a secret's value or a
/// key's secret half.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// An identity file could not be read or written.
    #[error("secrets key {path}: cannot {operation}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        operation: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An identity file that anyone but its owner may read or write.
    #[error(
        "secrets key {path} is open to others than its owner (mode {mode:04o}): make it 0600 \
         with `chmod 600 {path}`, and consider what it opens leaked if others could read it"
    )]
    NotPrivate {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// An identity file that holds no age identity (`AGE-SECRET-KEY-1…`).
    #[error("secrets key {path} holds no age identity (a line `AGE-SECRET-KEY-1…`)")]
    NotAnIdentity {
        /// The file.
        path: PathBuf,
    },
    /// Text that is not an age X25519 recipient (a public key, so it may be shown).
    #[error("`{text}` is not an age X25519 public key (`age1…`)")]
    NotARecipient {
        /// The text.
        text: String,
    },
    /// A recipients file that could not be read or written, or a line of it that is not a key.
    #[error("recipients file {path}: {reason}")]
    Recipients {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// age refused to encrypt.
    #[error("cannot encrypt: {reason}")]
    Encrypt {
        /// age's reason.
        reason: String,
    },
    /// A ciphertext that is not base64.
    #[error("the ciphertext is not base64")]
    NotBase64,
    /// A ciphertext this key cannot open: corrupted, or encrypted to another key.
    #[error("the ciphertext cannot be opened with this key ({reason})")]
    Decrypt {
        /// age's reason (it never holds the value).
        reason: String,
    },
}
