//! NKeys (the rule “Secrets never leave their owner”): how a node proves itself to the bus with a
//! key whose secret never leaves it. The host makes a user key pair ([`make_seed_file`]: the seed
//! `0600` under its state directory), the operator enrolls its public key (`U…`) with the
//! controller, and the server's users file ([`crate::grants::users_config`]) carries public keys
//! only. A client signs the server's nonce with its seed ([`crate::NatsOptions::for_node_nkey`]).
//!
//! The controller keeps its own credential under its home: its seed
//! ([`CONTROLLER_SEED_FILE`], made by `mesh-controller broker keygen`) or, until it has one,
//! its password ([`CONTROLLER_PASSWORD_FILE`]); a process that reads the controller's records
//! as the controller (`mesh-collector --bus`) finds them there.
//!
//! What it must never do: put a seed in a message, a log line or a `Debug` — errors name the
//! file, never what it holds.

use std::path::{Path, PathBuf};

/// Where, under the controller's home, its own NKey seed is kept (`mesh-controller broker
/// keygen` makes it, mode 0600; it never leaves the controller's machine):
/// `<home>/bus/nkey.seed`.
pub const CONTROLLER_SEED_FILE: &str = "bus/nkey.seed";

/// Where, under the controller's home, its own bus password is kept while it has no seed
/// (mode 0600): `<home>/bus/passwords/controller`.
pub const CONTROLLER_PASSWORD_FILE: &str = "bus/passwords/controller";

/// Why a seed or public key cannot be used. No variant carries a seed.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The seed file cannot be made, read, or is readable by others.
    #[error(transparent)]
    File(#[from] mesh_records::secret::SecretFileError),
    /// The file does not hold a user seed (`SU…`).
    #[error("{path} does not hold an NKey user seed (SU…)")]
    NotASeed {
        /// The file.
        path: PathBuf,
    },
    /// A seed was given where a public key is wanted: it is a secret and stays on the host.
    #[error(
        "that is an NKey seed (a secret: keep it on its host and consider it leaked if it was \
         shared), not a public key; `mesh-host keygen` prints the public key (U…)"
    )]
    SeedGiven,
    /// A public key is not an NKey user public key (`U…`, 56 characters).
    #[error("`{key}` is not an NKey user public key (U…, 56 characters)")]
    NotAUserKey {
        /// The key given (public: it is no secret).
        key: String,
    },
}

/// What [`make_seed_file`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MadeSeed {
    /// The seed file.
    pub path: PathBuf,
    /// Its public key (`U…`): what the operator enrolls.
    pub public_key: String,
    /// Whether it was made now (`false`: it was there, and is kept).
    pub made: bool,
}

/// Whether `key` is an NKey user public key.
pub fn is_user_public_key(key: &str) -> bool {
    key.starts_with('U')
        && nkeys::KeyPair::from_public_key(key)
            .is_ok_and(|pair| matches!(pair.key_pair_type(), nkeys::KeyPairType::User))
}

/// Checks an operator-given public key.
///
/// # Errors
/// [`KeyError::SeedGiven`] for a seed (never echoed), [`KeyError::NotAUserKey`] otherwise.
pub fn check_user_public_key(key: &str) -> Result<(), KeyError> {
    if is_user_public_key(key) {
        Ok(())
    } else if key.trim_start().starts_with('S') {
        Err(KeyError::SeedGiven)
    } else {
        Err(KeyError::NotAUserKey {
            key: key.to_owned(),
        })
    }
}

/// Makes a user key pair and writes its seed to `path`, mode `0600`, unless a seed is there
/// already (then it is kept: a key is never replaced behind the operator's back; remove the
/// file to make a new one, and enroll the new public key).
///
/// # Guarantees
/// The seed file is never readable by others, not even for a moment (see
/// [`mesh_records::secret::write_secret`]); idempotent.
///
/// # Errors
/// [`KeyError`] when the file cannot be written, or the one there is not a seed or is
/// readable by others.
pub fn make_seed_file(path: &Path) -> Result<MadeSeed, KeyError> {
    if path.exists() {
        let seed = read_seed_file(path)?;
        return Ok(MadeSeed {
            path: path.to_owned(),
            public_key: public_key_of(&seed, path)?,
            made: false,
        });
    }
    let pair = nkeys::KeyPair::new_user();
    let seed = pair.seed().map_err(|_| KeyError::NotASeed {
        path: path.to_owned(),
    })?;
    mesh_records::secret::write_secret(path, format!("{seed}\n").as_bytes())?;
    Ok(MadeSeed {
        path: path.to_owned(),
        public_key: pair.public_key(),
        made: true,
    })
}

/// Reads a user seed from its file, refusing one others may read.
///
/// # Errors
/// [`KeyError`] when it cannot be read, is readable by others, or holds no user seed.
pub fn read_seed_file(path: &Path) -> Result<String, KeyError> {
    let seed = mesh_records::secret::read_secret(path)?;
    public_key_of(&seed, path)?;
    Ok(seed)
}

/// The public key of the seed in `path`.
///
/// # Errors
/// As [`read_seed_file`].
pub fn public_key_of_file(path: &Path) -> Result<String, KeyError> {
    let seed = read_seed_file(path)?;
    public_key_of(&seed, path)
}

/// A user seed derived from `secret` for `purpose`: the same for the same two, and telling
/// nothing of `secret`. The controller derives the probe user's key
/// ([`crate::subjects::PROBE_USER`]) from its own secret, so any machine holding that secret
/// proves the bus's users in force and nothing more is kept.
pub fn derived_user_seed(secret: &str, purpose: &str) -> String {
    use sha2::{Digest as _, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(b"mesh derived nkey\0");
    hasher.update(purpose.as_bytes());
    hasher.update(b"\0");
    hasher.update(secret.trim().as_bytes());
    let raw: [u8; 32] = hasher.finalize().into();
    nkeys::KeyPair::new_from_raw(nkeys::KeyPairType::User, raw)
        .and_then(|pair| pair.seed())
        .expect("32 random-looking bytes make a user key pair")
}

/// The public key of a user seed (`None` when it is not one).
pub fn public_key_of_seed(seed: &str) -> Option<String> {
    match nkeys::KeyPair::from_seed(seed.trim()) {
        Ok(pair) if matches!(pair.key_pair_type(), nkeys::KeyPairType::User) => {
            Some(pair.public_key())
        }
        _ => None,
    }
}

fn public_key_of(seed: &str, path: &Path) -> Result<String, KeyError> {
    match nkeys::KeyPair::from_seed(seed.trim()) {
        Ok(pair) if matches!(pair.key_pair_type(), nkeys::KeyPairType::User) => {
            Ok(pair.public_key())
        }
        _ => Err(KeyError::NotASeed {
            path: path.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn a_seed_is_made_once_0600_and_its_public_key_is_a_user_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nkey.seed");
        let made = make_seed_file(&path).unwrap();
        assert!(made.made);
        assert!(is_user_public_key(&made.public_key), "{}", made.public_key);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = make_seed_file(&path).unwrap();
        assert_eq!(again.public_key, made.public_key);
        assert!(!again.made, "a seed is never replaced");
        assert_eq!(public_key_of_file(&path).unwrap(), made.public_key);
    }

    #[test]
    fn a_seed_readable_by_others_or_not_a_seed_is_refused_without_its_contents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nkey.seed");
        make_seed_file(&path).unwrap();
        let seed = std::fs::read_to_string(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let message = read_seed_file(&path).unwrap_err().to_string();
        assert!(message.contains("readable by others"), "{message}");
        assert!(!message.contains(seed.trim()), "{message}");

        std::fs::write(&path, "not-a-seed\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let message = read_seed_file(&path).unwrap_err().to_string();
        assert!(
            message.contains("does not hold an NKey user seed"),
            "{message}"
        );
        assert!(!message.contains("not-a-seed"), "{message}");

        assert!(check_user_public_key("UNOTAKEY").is_err());
        let message = check_user_public_key(seed.trim()).unwrap_err().to_string();
        assert!(message.contains("that is an NKey seed"), "{message}");
        assert!(!message.contains(seed.trim()), "{message}");
    }
}
