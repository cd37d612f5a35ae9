//! The host's side of the rule “A secret is readable only where it is used”: its own age key,
//! beside its NKey seed, and a file's template of secrets rendered at apply time with it.
//!
//! Start at [`render_sealed`]: every file of a declaration that is a template of secrets
//! (`FileSpec::sealed`) is rendered into the contents the engine writes, or is given the
//! reason it cannot be — no key on this host, or a secret this key cannot open (corrupted, or
//! sealed to another key), naming module and key — so it fails and nothing of it is written.
//!
//! What it must never do: put a secret's value in a reason, a log line or a report.

use mesh_apply::ArchivedContents;
use mesh_model::declaration::{Declaration, Spec};
use mesh_model::secret::SealedPiece;
use mesh_secrets::{Identity, SecretsError};
use std::path::Path;

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

/// Renders every template of secrets of `declaration` into `contents` with the host's key
/// under `state_dir`; a file that cannot be rendered gets the reason instead. A declaration
/// with no secret reads no key.
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
    for resource in &declaration.resources {
        let Spec::File(file) = &resource.spec else {
            continue;
        };
        let Some(pieces) = &file.sealed else {
            continue;
        };
        let rendered = match &identity {
            Ok(identity) => render(identity, &resource.module, pieces),
            Err(reason) => Err(format!(
                "it uses {} of `{}`, and {reason}",
                keys_of(pieces),
                resource.module
            )),
        };
        match rendered {
            Ok(text) => {
                contents.read.insert(resource.id.clone(), text);
            }
            Err(reason) => {
                contents.unavailable.insert(resource.id.clone(), reason);
            }
        }
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
/// the contents that hold it are let go (`ArchivedContents`' drop), or here when a later piece
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
