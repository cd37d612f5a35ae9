//! Encrypting a secret to its recipients, opening it with an identity, and the keyed digest.
//!
//! A sealed secret is mesh-model's [`SecretValue`]: the age file (binary, base64) and the
//! digest. [`MeshKey::seal`] makes one for the mesh key and the operators' keys;
//! [`MeshKey::reseal`] gives the same value, encrypted to one node's key alone, for a send;
//! [`Identity::open`] is how the host (or the controller with the mesh key) reads one.

use crate::{Identity, Recipient, SecretsError};
use base64::Engine as _;
use hmac::Mac as _;
use mesh_model::secret::SecretValue;
use std::io::{Read as _, Write as _};
use std::path::Path;
use zeroize::Zeroizing;

/// A secret's value in memory: zeroized when dropped.
pub type Plaintext = Zeroizing<Vec<u8>>;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// What the digest key is derived under, so that it is never the identity itself.
const DIGEST_KEY_LABEL: &[u8] = b"mesh secrets: the key of the digest a person sees, v1";

/// Encrypts `plaintext` to every one of `recipients` (an age file, base64).
///
/// # Errors
/// [`SecretsError::Encrypt`] when there is no recipient or age refuses.
pub fn encrypt(recipients: &[Recipient], plaintext: &[u8]) -> Result<String, SecretsError> {
    let encrypt_error = |reason: String| SecretsError::Encrypt { reason };
    let encryptor = age::Encryptor::with_recipients(
        recipients
            .iter()
            .map(|recipient| &recipient.inner as &dyn age::Recipient),
    )
    .map_err(|e| encrypt_error(e.to_string()))?;
    let mut ciphertext = Vec::with_capacity(plaintext.len() + 256);
    let mut writer = encryptor
        .wrap_output(&mut ciphertext)
        .map_err(|e| encrypt_error(e.to_string()))?;
    writer
        .write_all(plaintext)
        .map_err(|e| encrypt_error(e.to_string()))?;
    writer.finish().map_err(|e| encrypt_error(e.to_string()))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(ciphertext))
}

impl Identity {
    /// Opens a ciphertext (an age file, base64) encrypted to this identity.
    ///
    /// # Errors
    /// [`SecretsError::NotBase64`]; [`SecretsError::Decrypt`] for a corrupted ciphertext or
    /// one encrypted to another key.
    pub fn open_ciphertext(&self, ciphertext: &str) -> Result<Plaintext, SecretsError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(ciphertext.trim())
            .map_err(|_| SecretsError::NotBase64)?;
        let decrypt_error = |reason: String| SecretsError::Decrypt { reason };
        let decryptor = age::Decryptor::new_buffered(bytes.as_slice())
            .map_err(|e| decrypt_error(e.to_string()))?;
        let mut reader = decryptor
            .decrypt(std::iter::once(&self.inner as &dyn age::Identity))
            .map_err(|e| decrypt_error(e.to_string()))?;
        // The value is no longer than its ciphertext: reserved once, it is never moved (and so
        // never left behind un-zeroized).
        let mut plaintext = Zeroizing::new(Vec::with_capacity(bytes.len()));
        reader
            .read_to_end(&mut plaintext)
            .map_err(|e| decrypt_error(e.to_string()))?;
        Ok(plaintext)
    }

    /// Opens a secret encrypted to this identity.
    ///
    /// # Errors
    /// As [`Identity::open_ciphertext`].
    pub fn open(&self, secret: &SecretValue) -> Result<Plaintext, SecretsError> {
        self.open_ciphertext(&secret.ciphertext)
    }
}

/// The mesh's secrets key: the controller's identity, and the key of the digest derived from
/// it.
pub struct MeshKey {
    identity: Identity,
    digest_key: Zeroizing<Vec<u8>>,
}

/// Shows the public key only.
impl std::fmt::Debug for MeshKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MeshKey({})", self.recipient())
    }
}

impl MeshKey {
    /// The mesh key of an identity.
    pub fn new(identity: Identity) -> MeshKey {
        let mut mac = HmacSha256::new_from_slice(identity.secret_text().as_bytes())
            .expect("HMAC takes a key of any length");
        mac.update(DIGEST_KEY_LABEL);
        let digest_key = Zeroizing::new(mac.finalize().into_bytes().to_vec());
        MeshKey {
            identity,
            digest_key,
        }
    }

    /// A new mesh key (for `secrets rotate`; kept by the caller).
    pub fn generate() -> MeshKey {
        MeshKey::new(Identity::generate())
    }

    /// Reads the mesh key at `path`, making it first when there is none.
    ///
    /// # Errors
    /// As [`Identity::load_or_create`].
    pub fn load_or_create(path: &Path) -> Result<MeshKey, SecretsError> {
        Identity::load_or_create(path).map(MeshKey::new)
    }

    /// Reads the mesh key at `path`.
    ///
    /// # Errors
    /// As [`Identity::load`].
    pub fn load(path: &Path) -> Result<MeshKey, SecretsError> {
        Identity::load(path).map(MeshKey::new)
    }

    /// The identity (to keep it in a file, or to open a secret).
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// Its public key.
    pub fn recipient(&self) -> Recipient {
        self.identity.recipient()
    }

    /// The keyed digest of a value: `sha256:<hex>` of HMAC-SHA256 under a key derived from the
    /// mesh key. A change of the value changes it; the value cannot be guessed from it without
    /// the mesh key.
    pub fn digest(&self, value: &[u8]) -> String {
        let mut mac =
            HmacSha256::new_from_slice(&self.digest_key).expect("HMAC takes a key of any length");
        mac.update(value);
        format!("sha256:{}", hex::encode(mac.finalize().into_bytes()))
    }

    /// Seals a value for rest: encrypted to the mesh key and to each of `operators`, with its
    /// keyed digest.
    ///
    /// # Errors
    /// [`SecretsError::Encrypt`].
    pub fn seal(&self, operators: &[Recipient], value: &[u8]) -> Result<SecretValue, SecretsError> {
        let mut recipients = vec![self.recipient()];
        recipients.extend(operators.iter().cloned());
        recipients.sort();
        recipients.dedup();
        Ok(SecretValue {
            digest: self.digest(value),
            ciphertext: encrypt(&recipients, value)?,
        })
    }

    /// Opens a secret sealed to the mesh key.
    ///
    /// # Errors
    /// As [`Identity::open_ciphertext`].
    pub fn open(&self, secret: &SecretValue) -> Result<Plaintext, SecretsError> {
        self.identity.open(secret)
    }

    /// The same secret, encrypted to `node` alone (for a send): opened in memory only, the
    /// value zeroized when this returns. The digest is kept, so a declaration's digest does not
    /// depend on which key its secrets travel to.
    ///
    /// # Errors
    /// As [`MeshKey::open`] and [`encrypt`].
    pub fn reseal(
        &self,
        secret: &SecretValue,
        node: &Recipient,
    ) -> Result<SecretValue, SecretsError> {
        let value = self.open(secret)?;
        Ok(SecretValue {
            digest: secret.digest.clone(),
            ciphertext: encrypt(std::slice::from_ref(node), &value)?,
        })
    }

    /// A secret sealed to this key, sealed again to `next` and `operators` (for
    /// `secrets rotate`): its digest is `next`'s.
    ///
    /// # Errors
    /// As [`MeshKey::open`] and [`MeshKey::seal`].
    pub fn rotate(
        &self,
        secret: &SecretValue,
        next: &MeshKey,
        operators: &[Recipient],
    ) -> Result<SecretValue, SecretsError> {
        let value = self.open(secret)?;
        next.seal(operators, &value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALUE: &[u8] = b"-----BEGIN PRIVATE KEY----- hunter2-7f3a";

    #[test]
    fn a_sealed_secret_opens_with_the_mesh_key_and_each_operator_key_only() {
        let mesh = MeshKey::generate();
        let operator = Identity::generate();
        let stranger = Identity::generate();
        let sealed = mesh.seal(&[operator.recipient()], VALUE).unwrap();
        assert_eq!(mesh.open(&sealed).unwrap().as_slice(), VALUE);
        assert_eq!(operator.open(&sealed).unwrap().as_slice(), VALUE);
        assert!(matches!(
            stranger.open(&sealed),
            Err(SecretsError::Decrypt { .. })
        ));
        let raw = base64::engine::general_purpose::STANDARD
            .decode(&sealed.ciphertext)
            .unwrap();
        assert!(!raw.windows(VALUE.len()).any(|w| w == VALUE));
        assert!(!sealed.ciphertext.contains("hunter2"));
    }

    #[test]
    fn node_b_cannot_open_what_was_resealed_to_node_a() {
        let mesh = MeshKey::generate();
        let a = Identity::generate();
        let b = Identity::generate();
        let sealed = mesh.seal(&[], VALUE).unwrap();
        let to_a = mesh.reseal(&sealed, &a.recipient()).unwrap();
        assert_eq!(to_a.digest, sealed.digest, "the digest travels unchanged");
        assert_eq!(a.open(&to_a).unwrap().as_slice(), VALUE);
        let refused = b.open(&to_a).unwrap_err();
        assert!(matches!(refused, SecretsError::Decrypt { .. }), "{refused}");
        assert!(!refused.to_string().contains("hunter2"));
        // Nor can the mesh key itself: it went to A alone.
        assert!(mesh.open(&to_a).is_err());
    }

    #[test]
    fn a_corrupted_ciphertext_is_refused() {
        let mesh = MeshKey::generate();
        let sealed = mesh.seal(&[], VALUE).unwrap();
        let mut raw = base64::engine::general_purpose::STANDARD
            .decode(&sealed.ciphertext)
            .unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 0x01;
        let corrupted = SecretValue {
            ciphertext: base64::engine::general_purpose::STANDARD.encode(raw),
            ..sealed.clone()
        };
        assert!(matches!(
            mesh.open(&corrupted),
            Err(SecretsError::Decrypt { .. })
        ));
        let not_base64 = SecretValue {
            ciphertext: "***".into(),
            ..sealed
        };
        assert!(matches!(
            mesh.open(&not_base64),
            Err(SecretsError::NotBase64)
        ));
    }

    #[test]
    fn the_digest_is_keyed_stable_and_changes_with_the_value() {
        let mesh = MeshKey::generate();
        let other = MeshKey::generate();
        assert_eq!(mesh.digest(VALUE), mesh.digest(VALUE));
        assert_ne!(mesh.digest(VALUE), mesh.digest(b"another value"));
        assert_ne!(
            mesh.digest(VALUE),
            other.digest(VALUE),
            "keyed by the mesh key"
        );
        assert_ne!(mesh.digest(VALUE), mesh_model::sha256_digest(VALUE));
        let sealed = mesh.seal(&[], VALUE).unwrap();
        assert_eq!(sealed.digest, mesh.digest(VALUE));
        assert_eq!(sealed.problem(), None);
        let reopened = MeshKey::new(mesh.identity().clone());
        assert_eq!(reopened.digest(VALUE), mesh.digest(VALUE));
    }

    #[test]
    fn rotation_leaves_the_value_readable_with_the_new_key_only() {
        let old = MeshKey::generate();
        let next = MeshKey::generate();
        let sealed = old.seal(&[], VALUE).unwrap();
        let rotated = old.rotate(&sealed, &next, &[]).unwrap();
        assert_eq!(next.open(&rotated).unwrap().as_slice(), VALUE);
        assert!(old.open(&rotated).is_err());
        assert_eq!(rotated.digest, next.digest(VALUE));
    }
}
