//! `secrets rotate`: a new mesh key, and every secret at rest sealed again to it (the rule “A
//! secret is readable only where it is used”): the settings layers and their history
//! (`crate::secrets`), the declarations kept as sent, and the catalogues' secret files
//! ([`crate::secrets::rotate_files`]); then the old key retired ([`crate::secrets::retired`]) and
//! the new one put in its place.
//!
//! Start at [`rotate`]. What it must never do: leave a secret at rest that no key kept opens,
//! or replace the mesh key before everything is sealed to the next one.

use crate::error::{Error, Result};
use crate::home::Home;
use crate::secrets::{
    keyring, mesh_key, operators, reseal_records, secrets_error, MESH_KEY_FILE, NEXT_MESH_KEY_FILE,
};
use mesh_model::secret::SecretValue;
use mesh_secrets::MeshKey;
use serde::Serialize;

/// What `secrets rotate` did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Rotated {
    /// The new mesh key's public half.
    pub mesh_key: String,
    /// How many secret values were sealed again to it.
    pub resealed: usize,
    /// How many declarations kept as sent were sealed again to it (their digests kept).
    pub declarations: usize,
    /// The secret files of the catalogues re-sealed, by repository, and their commits.
    pub repositories: Vec<crate::secrets::rotate_files::Resealed>,
    /// The repositories it could not finish: the old key is kept until they are.
    pub pending: Vec<crate::secrets::rotate_files::Pending>,
    /// The retired mesh keys kept (and what needs each) or dropped, once it is done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retired: Option<crate::secrets::retired::Retirement>,
}

/// `secrets rotate`: a new mesh key, and every secret at rest (every settings layer and its
/// history, every declaration kept as sent, and the catalogues' secret files) sealed again to
/// it and the operators' keys; the old key is then retired — kept beside it
/// (`secrets/retired/<age1…>.key`, 0600) while a build the mesh may still send holds a secret
/// file sealed to it ([`crate::secrets::retired`]) — and the new one put in its place.
///
/// # Guarantees
/// The new key is kept (`secrets/mesh.key.next`) before any record is rewritten, and the old
/// one is retired before the new one replaces it, once every record is rewritten: a rotation
/// stopped midway is resumed by running it again, each secret opened with whichever key opens
/// it.
///
/// # Errors
/// A secret no key opens (named by its record); a record or key file that cannot be read or
/// written; a deployed build that cannot be read from the store.
pub(crate) async fn rotate(
    home: &Home,
    store: &dyn mesh_store::store::ArchiveStore,
) -> Result<Rotated> {
    let old = mesh_key(home)?;
    let next_path = home.root().join(NEXT_MESH_KEY_FILE);
    let next = MeshKey::load_or_create(&next_path)
        .map_err(secrets_error("making the next mesh key".into()))?;
    // The mesh key, then the next one (a rotation stopped midway sealed some to it) and the
    // retired ones.
    let keyring = keyring(home)?;
    let operators = operators(home)?;
    let mut each = |secret: &SecretValue| -> Result<SecretValue> {
        let value = keyring.open(secret).map_err(secrets_error(
            "opening a secret with the mesh key (or the next one)".into(),
        ))?;
        next.seal(&operators, &value)
            .map_err(secrets_error("sealing a secret".into()))
    };
    let resealed = reseal_records(home, &mut each)?;
    let declarations = reseal_declarations(home, &mut each)?;
    let opens_with_next = |secret: &SecretValue| next.open(secret).is_ok();
    let (repositories, pending) =
        crate::secrets::rotate_files::reseal_repositories(home, &mut each, &opens_with_next)?;
    let mut retired = None;
    if pending.is_empty() {
        crate::secrets::retired::retire(home, old.identity())?;
        let key_path = home.root().join(MESH_KEY_FILE);
        std::fs::rename(&next_path, &key_path).map_err(crate::error::file_error(
            "putting the new mesh key in place of",
            &key_path,
        ))?;
        retired = Some(crate::secrets::retired::sweep(home, store).await?);
    }
    Ok(Rotated {
        mesh_key: next.recipient().to_string(),
        resealed,
        declarations,
        repositories,
        pending,
        retired,
    })
}

/// Re-seals every secret of every declaration kept under `declarations/` (what was sent, which
/// a revert sends again) with `each`, its keyed digest kept: a declaration is kept by its
/// digest, which counts a secret by it, so its record's key stays right. Answers how many
/// declarations it rewrote.
fn reseal_declarations(
    home: &Home,
    each: &mut dyn FnMut(&SecretValue) -> Result<SecretValue>,
) -> Result<usize> {
    let records = home.records();
    let mut total = 0;
    for key in records.keys_under("declarations")? {
        let mut failure = None;
        let mut rewritten = false;
        records
            .update(&key, &mut |old| {
                rewritten = false;
                let Some(old) = old else {
                    return Err("removed meanwhile".into());
                };
                let mut declaration = mesh_model::declaration::Declaration::from_json(old)
                    .map_err(|e| e.to_string())?;
                if !declaration.holds_secrets() {
                    return Ok(old.to_vec());
                }
                let resealed =
                    declaration
                        .secrets_mut()
                        .into_iter()
                        .try_for_each(|(_, _, secret)| {
                            let digest = secret.digest.clone();
                            *secret = SecretValue {
                                digest,
                                ..each(secret)?
                            };
                            Ok::<(), Error>(())
                        });
                match resealed {
                    Ok(()) => {
                        rewritten = true;
                        Ok(declaration.canonical_json())
                    }
                    Err(error) => {
                        let said = error.to_string();
                        failure = Some(error);
                        Err(said)
                    }
                }
            })
            .map_err(|source| match failure.take() {
                Some(error) => Error::Invalid {
                    what: format!("re-sealing the secrets of {key}"),
                    source: Some(Box::new(error)),
                },
                None => Error::Records(source),
            })?;
        total += usize::from(rewritten);
    }
    Ok(total)
}
