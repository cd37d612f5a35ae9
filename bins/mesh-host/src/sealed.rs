//! The host's side of the rule “A secret is readable only where it is used”: its own age key,
//! beside its NKey seed, and a file's template of secrets rendered at apply time with it.
//!
//! Start at [`render_sealed`]: every file of a declaration that is a template of secrets
//! (`FileSpec::sealed`) is handed to the engine to render with this host's key when the apply
//! needs its content ([`mesh_apply::sealed`]: a file the host last left rendered from the very
//! same pieces, and finds unchanged, is not rendered again), or is given the reason it cannot
//! be — no key on this host; a secret this key cannot open (corrupted, or sealed to another
//! key) fails when rendered, naming module and key — so it fails and nothing of it is written.
//!
//! What it must never do: put a secret's value in a reason, a log line or a report.

use mesh_apply::sealed::{Deferred, RenderSecrets};
use mesh_apply::ArchivedContents;
use mesh_model::declaration::{Declaration, Spec};
use mesh_model::secret::SealedPiece;
use mesh_secrets::{Identity, SecretsError};
use std::path::Path;
use std::sync::Arc;

/// Where, under the state directory, the host keeps its age key (`mesh-host keygen` makes it,
/// mode 0600; it never leaves this machine): `<state-dir>/bus/age.key`.
pub const AGE_KEY_FILE: &str = "bus/age.key";

/// Makes this host's age key (or finds the one it has) under `state_dir`: its public key is
/// what `mesh-controller node enroll --age-key` records. Answers the key and whether it was
/// made now.
///
/// # Errors
/// The key file cannot be written, or the one there is not a key or may be read by others.
pub fn age_keygen(state_dir: &Path) -> Result<(mesh_secrets::Recipient, bool), SecretsError> {
    let path = state_dir.join(AGE_KEY_FILE);
    let existed = path.exists();
    let identity = Identity::load_or_create(&path)?;
    Ok((identity.recipient(), !existed))
}

/// Hands every template of secrets of `declaration` to the engine in `contents`, to render
/// with the host's key under `state_dir` when the apply needs it ([`mesh_apply::sealed`]); with
/// no key, each gets the reason instead. A declaration with no secret reads no key.
pub fn render_sealed(declaration: &Declaration, state_dir: &Path, contents: &mut ArchivedContents) {
    if !declaration.holds_secrets() {
        return;
    }
    let path = state_dir.join(AGE_KEY_FILE);
    let identity = match Identity::load(&path) {
        Ok(identity) => Ok(identity),
        Err(SecretsError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Err(format!(
                "this host has no age key ({}): `mesh-host keygen` makes it, and \
                 `mesh-controller node enroll --age-key` records it",
                path.display()
            ))
        }
        Err(error) => Err(error.to_string()),
    };
    let host_key = identity.map(|identity| {
        let recipient = identity.recipient().to_string();
        (Arc::new(HostKey { identity }), recipient)
    });
    let templates = declaration
        .resources
        .iter()
        .filter_map(|resource| match &resource.spec {
            Spec::File(file) => file.sealed.as_ref().map(|pieces| (resource, pieces)),
            // No other kind is rendered from secrets.
            _ => None,
        });
    contents.deferred.reserve(templates.clone().count());
    for (resource, pieces) in templates {
        match &host_key {
            Ok((key, recipient)) => {
                let renderer: Arc<dyn RenderSecrets> = Arc::clone(key) as _;
                let deferred = Deferred::new(rendered_from(recipient, pieces), renderer);
                contents.deferred.insert(resource.id.clone(), deferred);
            }
            Err(reason) => {
                let reason = format!(
                    "it uses {} of `{}`, and {reason}",
                    keys_of(pieces),
                    resource.module
                );
                contents.unavailable.insert(resource.id.clone(), reason);
            }
        }
    }
}

/// What a file is rendered from, as this host identifies it: a digest of its pieces as sent
/// (the ciphertexts too, so a secret sealed again, or corrupted, is opened again) and of the
/// key that opens them.
fn rendered_from(recipient: &str, pieces: &[SealedPiece]) -> String {
    use sha2::Digest as _;
    // Each part with its length before it, so no two sequences of pieces read the same;
    // hashed as they are, without a copy of them.
    fn part(hasher: &mut sha2::Sha256, text: &str) {
        hasher.update((text.len() as u64).to_le_bytes());
        hasher.update(text.as_bytes());
    }
    let mut hasher = sha2::Sha256::new();
    part(&mut hasher, recipient);
    for piece in pieces {
        match piece {
            SealedPiece::Text(text) => {
                hasher.update(b"t");
                part(&mut hasher, text);
            }
            SealedPiece::Secret { key, value } => {
                hasher.update(b"s");
                part(&mut hasher, key);
                part(&mut hasher, &value.digest);
                part(&mut hasher, &value.ciphertext);
            }
        }
    }
    mesh_model::sha256_text(hasher.finalize().into())
}

/// This host's age key, rendering templates of secrets for the engine.
struct HostKey {
    identity: Identity,
}

impl RenderSecrets for HostKey {
    fn render(&self, module: &str, pieces: &[SealedPiece]) -> Result<String, String> {
        render(&self.identity, module, pieces)
    }
}

/// "the secret `password`" or "the secrets `a`, `b`".
fn keys_of(pieces: &[SealedPiece]) -> String {
    let keys: Vec<String> = pieces
        .iter()
        .filter_map(|piece| match piece {
            SealedPiece::Secret { key, .. } => Some(format!("`{key}`")),
            SealedPiece::Text(_) => None,
        })
        .collect();
    let noun = if keys.len() == 1 { "secret" } else { "secrets" };
    format!("the {noun} {}", keys.join(", "))
}

/// A template of secrets rendered, or why not (naming module and key, never a value).
///
/// The text is made in one allocation large enough for every piece (a value is no longer than
/// its ciphertext), so no copy of a value is left behind by a reallocation; it is zeroized when
/// the engine lets it go (`mesh_apply::sealed::Deferred`'s drop), or here when a later piece
/// fails. Each opened value is zeroized as soon as it is copied.
fn render(identity: &Identity, module: &str, pieces: &[SealedPiece]) -> Result<String, String> {
    let room = pieces
        .iter()
        .map(|piece| match piece {
            SealedPiece::Text(text) => text.len(),
            SealedPiece::Secret { value, .. } => value.ciphertext.len(),
        })
        .sum();
    let mut text = zeroize::Zeroizing::new(String::with_capacity(room));
    for piece in pieces {
        match piece {
            SealedPiece::Text(piece) => text.push_str(piece),
            SealedPiece::Secret { key, value } => {
                let opened = identity.open(value).map_err(|error| {
                    format!(
                        "the secret `{key}` of `{module}` cannot be opened with this host's key \
                         (corrupted, or sealed to another key: {error}); nothing of it is written"
                    )
                })?;
                let value = std::str::from_utf8(&opened)
                    .map_err(|_| format!("the secret `{key}` of `{module}` is not UTF-8 text"))?;
                text.push_str(value);
            }
        }
    }
    // Handed on whole: the contents zeroize it when they are let go.
    Ok(std::mem::take(&mut *text))
}
