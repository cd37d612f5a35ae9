//! Every key the mesh opens a secret at rest with: the mesh key, and — while they may still be
//! needed — the next one of a rotation under way and the keys a rotation retired (a deployed
//! build keeps its secret files sealed to the key of its merge, and a send re-seals them).
//!
//! A secret is opened with the first key that opens it; it is sealed only by [`MeshKey`].

use crate::{Identity, MeshKey, Plaintext, Recipient, SecretsError};
use mesh_model::secret::SecretValue;

/// The mesh key and the other keys a secret at rest may be sealed to.
#[derive(Debug)]
pub struct Keyring {
    current: MeshKey,
    others: Vec<Identity>,
}

impl Keyring {
    /// The mesh key, then `others` in the order they are tried.
    pub fn new(current: MeshKey, others: Vec<Identity>) -> Keyring {
        Keyring { current, others }
    }

    /// The mesh key.
    pub fn current(&self) -> &MeshKey {
        &self.current
    }

    /// Which key opens `secret`: `Some(0)` the mesh key, `Some(i)` the `i`-th of the others
    /// (from 1), `None` none of them.
    pub fn opened_by(&self, secret: &SecretValue) -> Option<usize> {
        if self.current.open(secret).is_ok() {
            return Some(0);
        }
        self.others
            .iter()
            .position(|identity| identity.open(secret).is_ok())
            .map(|i| i + 1)
    }

    /// Opens `secret` with the first key that opens it.
    ///
    /// # Errors
    /// What the mesh key's attempt answered, when none opens it.
    pub fn open(&self, secret: &SecretValue) -> Result<Plaintext, SecretsError> {
        let refused = match self.current.open(secret) {
            Ok(value) => return Ok(value),
            Err(refused) => refused,
        };
        for identity in &self.others {
            if let Ok(value) = identity.open(secret) {
                return Ok(value);
            }
        }
        Err(refused)
    }

    /// The same secret encrypted to `node` alone (for a send), opened with whichever key opens
    /// it; its digest kept.
    ///
    /// # Errors
    /// As [`Keyring::open`] and [`crate::seal::encrypt`].
    pub fn reseal(
        &self,
        secret: &SecretValue,
        node: &Recipient,
    ) -> Result<SecretValue, SecretsError> {
        let value = self.open(secret)?;
        Ok(SecretValue {
            digest: secret.digest.clone(),
            ciphertext: crate::seal::encrypt(std::slice::from_ref(node), &value)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_sealed_to_a_retired_key_is_opened_with_it_and_resealed_with_its_digest() {
        let old = MeshKey::generate();
        let current = MeshKey::generate();
        let node = Identity::generate();
        let sealed_before = old.seal(&[], b"kept").unwrap();
        let sealed_now = current.seal(&[], b"now").unwrap();
        let alone = Keyring::new(MeshKey::new(current.identity().clone()), Vec::new());
        assert!(alone.open(&sealed_before).is_err());
        assert_eq!(alone.opened_by(&sealed_before), None);
        let ring = Keyring::new(current, vec![old.identity().clone()]);
        assert_eq!(ring.opened_by(&sealed_now), Some(0));
        assert_eq!(ring.opened_by(&sealed_before), Some(1));
        let resealed = ring.reseal(&sealed_before, &node.recipient()).unwrap();
        assert_eq!(resealed.digest, sealed_before.digest);
        assert_eq!(node.open(&resealed).unwrap().as_slice(), b"kept");
        let stranger = MeshKey::generate().seal(&[], b"x").unwrap();
        assert!(matches!(
            ring.open(&stranger),
            Err(SecretsError::Decrypt { .. })
        ));
    }
}
