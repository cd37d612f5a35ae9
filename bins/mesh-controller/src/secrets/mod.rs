//! The mesh's secrets on the controller: its secrets key and the operators' keys in the home,
//! `settings set-secret` and `secrets recipients add|remove` (the rule “A secret is readable
//! only where it is used”); `secrets rotate` is `crate::secrets::rotate`'s, on what this keeps.
//!
//! Start at [`seal`] (a value read from standard input, sealed to the mesh key and the
//! operators' keys) and [`change_recipients`]. Where they are kept, under the home, never in the
//! records:
//!
//! ```text
//! <home>/secrets/mesh.key        the mesh's secrets key (an age identity, 0600; `mesh_secrets`)
//! <home>/secrets/mesh.key.next   the next one, while `secrets rotate` is under way
//! <home>/secrets/recipients      the operators' age keys, one a line
//! <home>/secrets/retired/<age1…>.key
//!                                a key a rotation retired, while a build needs it
//!                                (`crate::secrets::retired`)
//! ```
//!
//! A secret at rest is sealed to [`sealing_key`] (the next key while a rotation is under way)
//! and opened with [`keyring`] (the mesh key, the next one, the retired ones).
//!
//! Every record of a settings layer (and of its history) holds a secret as ciphertext only
//! (`mesh_model::secret::SecretValue`); re-sealing one rewrites the record whole, by
//! read-modify-write ([`mesh_store::record_store::RecordStore::update`]).
//!
//! What it must never do: write a secret's value anywhere, or put it in an error or a log.

pub(crate) mod retired;
pub(crate) mod rotate;
pub(crate) mod rotate_files;
pub(crate) mod secret_files;

pub use retired::said;
pub(crate) use rotate::rotate;
pub use rotate::Rotated;
pub use secret_files::{encrypt_file, Encrypted};

use crate::error::{Error, Result};
use crate::home::Home;
use mesh_model::secret::SecretValue;
use mesh_secrets::{MeshKey, Recipient};
use serde::Serialize;
use serde_json::Value;
use std::path::PathBuf;
use std::str::FromStr as _;

/// The mesh's secrets key, relative to the home.
pub(crate) const MESH_KEY_FILE: &str = "secrets/mesh.key";

/// The next mesh key while `secrets rotate` is under way, relative to the home.
pub(crate) const NEXT_MESH_KEY_FILE: &str = "secrets/mesh.key.next";

/// The operators' keys, relative to the home.
pub(crate) const RECIPIENTS_FILE: &str = "secrets/recipients";

/// The mesh keys a rotation retired, relative to the home: one file each, `<age1…>.key`
/// (0600), kept while a build the mesh may still send holds a secret file sealed to it
/// ([`crate::secrets::retired`]).
pub(crate) const RETIRED_DIR: &str = "secrets/retired";

/// The record of a node's age public key (`age1…`, no secret), which its secrets are sealed to
/// for each send.
pub(crate) fn node_key_record(node: &str) -> String {
    format!("secrets/nodes/{node}")
}

/// Records `key` as `node`'s age public key (`node enroll --age-key`); answers the key it
/// replaced, if another.
///
/// # Errors
/// A key that is not an age X25519 public key (nothing is recorded); the record cannot be
/// written.
pub fn enroll_age_key(home: &Home, node: &str, key: &str) -> Result<Option<String>> {
    let key = Recipient::from_str(key)
        .map_err(secrets_error(format!("reading the age key of `{node}`")))?;
    let record = node_key_record(node);
    let before = home
        .get(&record)?
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned());
    home.put(&record, format!("{key}\n").as_bytes())?;
    Ok(before.filter(|before| *before != key.to_string()))
}

/// The age public key `node`'s secrets are sealed to: the one enrolled, or — for a host of
/// the embedded fleet, whose state directory `embedded` is under the home — that host's own,
/// made on first use. `None`: the node has none.
///
/// # Errors
/// A recorded key that is not one; a host key file others may read.
pub(crate) fn node_recipient(
    home: &Home,
    node: &str,
    embedded: Option<&std::path::Path>,
) -> Result<Option<Recipient>> {
    let record = node_key_record(node);
    if let Some(bytes) = home.get(&record)? {
        let text = String::from_utf8_lossy(&bytes);
        return Recipient::from_str(text.trim())
            .map(Some)
            .map_err(secrets_error(format!("reading the record {record}")));
    }
    match embedded {
        Some(state_dir) => {
            mesh_secrets::Identity::load_or_create(&state_dir.join(mesh_host::sealed::AGE_KEY_FILE))
                .map(|identity| Some(identity.recipient()))
                .map_err(secrets_error(format!(
                    "the age key of `{node}`'s embedded host"
                )))
        }
        None => Ok(None),
    }
}

/// The record directories whose records may hold a secret: the settings layers and their
/// history.
const SECRET_BEARING: [&str; 2] = ["settings", "history/settings"];

pub(crate) fn secrets_error(doing: String) -> impl FnOnce(mesh_secrets::SecretsError) -> Error {
    move |source| Error::Invalid {
        what: doing,
        source: Some(Box::new(source)),
    }
}

fn path_of(home: &Home, file: &str) -> PathBuf {
    home.root().join(file)
}

/// The mesh's secrets key, made on first use.
///
/// # Errors
/// A key file others may read (named), or one that cannot be read or made.
pub(crate) fn mesh_key(home: &Home) -> Result<MeshKey> {
    let path = path_of(home, MESH_KEY_FILE);
    MeshKey::load_or_create(&path).map_err(secrets_error("reading the mesh's secrets key".into()))
}

/// The key a value is sealed to at rest now: the next mesh key while a rotation is under way
/// (what the rotation leaves every secret sealed to, so nothing sealed meanwhile is left
/// behind by it), else the mesh key.
///
/// # Errors
/// As [`mesh_key`].
pub(crate) fn sealing_key(home: &Home) -> Result<MeshKey> {
    let next = path_of(home, NEXT_MESH_KEY_FILE);
    if next.exists() {
        return MeshKey::load(&next).map_err(secrets_error("reading the next mesh key".into()));
    }
    mesh_key(home)
}

/// The retired mesh keys, by public key, in the order of their files' names.
///
/// # Errors
/// A key file others may read (named), or one that cannot be read.
pub(crate) fn retired_keys(home: &Home) -> Result<Vec<(PathBuf, mesh_secrets::Identity)>> {
    let dir = path_of(home, RETIRED_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => {
            return Err(crate::error::file_error("listing", &dir)(error));
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "key"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            mesh_secrets::Identity::load(&path)
                .map(|identity| (path, identity))
                .map_err(secrets_error("reading a retired mesh key".into()))
        })
        .collect()
}

/// Every key a secret at rest may be sealed to: the mesh key, the next one while a rotation
/// is under way, and the keys rotations retired that are still kept.
///
/// # Errors
/// As [`mesh_key`] and [`retired_keys`].
pub(crate) fn keyring(home: &Home) -> Result<mesh_secrets::Keyring> {
    let current = mesh_key(home)?;
    let mut others = Vec::new();
    let next = path_of(home, NEXT_MESH_KEY_FILE);
    if next.exists() {
        others.push(
            mesh_secrets::Identity::load(&next)
                .map_err(secrets_error("reading the next mesh key".into()))?,
        );
    }
    others.extend(
        retired_keys(home)?
            .into_iter()
            .map(|(_, identity)| identity),
    );
    Ok(mesh_secrets::Keyring::new(current, others))
}

/// The operators' keys (none when the file is absent).
///
/// # Errors
/// A line of the file that is not a key (named by number).
pub(crate) fn operators(home: &Home) -> Result<Vec<Recipient>> {
    let path = path_of(home, RECIPIENTS_FILE);
    mesh_secrets::recipients::read_recipients(&path)
        .map_err(secrets_error("reading the operators' keys".into()))
}

/// Seals a value for a settings layer: encrypted to the mesh key (the next one while a
/// rotation is under way, [`sealing_key`]) and the operators' keys, with its keyed digest.
///
/// # Errors
/// As [`sealing_key`] and [`operators`]; an empty value is refused.
pub fn seal(home: &Home, value: &[u8]) -> Result<SecretValue> {
    if value.is_empty() {
        return Err(Error::refused(
            "the secret read from standard input is empty; nothing changed",
        ));
    }
    let key = sealing_key(home)?;
    key.seal(&operators(home)?, value)
        .map_err(secrets_error("sealing the secret".into()))
}

/// Replaces every secret a JSON value holds with what `each` makes of it, counting them.
fn reseal_value(
    value: &mut Value,
    each: &mut dyn FnMut(&SecretValue) -> Result<SecretValue>,
    count: &mut usize,
) -> Result<()> {
    if let Some(found) = SecretValue::from_json(value) {
        let secret = found.map_err(Error::invalid)?;
        *value = each(&secret)?.to_json();
        *count += 1;
        return Ok(());
    }
    match value {
        Value::Object(object) => {
            for inner in object.values_mut() {
                reseal_value(inner, each, count)?;
            }
        }
        Value::Array(items) => {
            for inner in items {
                reseal_value(inner, each, count)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Re-seals every secret of every settings layer and history record with `each`, each record
/// rewritten whole by read-modify-write; answers how many values it re-sealed.
pub(crate) fn reseal_records(
    home: &Home,
    each: &mut dyn FnMut(&SecretValue) -> Result<SecretValue>,
) -> Result<usize> {
    let records = home.records();
    let mut total = 0;
    for dir in SECRET_BEARING {
        for key in records.keys_under(dir)? {
            if dir == "settings" && key.starts_with("history/") {
                continue;
            }
            let mut failure = None;
            let mut counted = 0;
            records
                .update(&key, &mut |old| {
                    counted = 0;
                    let Some(old) = old else {
                        return Err("removed meanwhile".into());
                    };
                    let mut value: Value =
                        serde_json::from_slice(old).map_err(|e| e.to_string())?;
                    if !mesh_model::secret::holds_secret(&value) {
                        return Ok(old.to_vec());
                    }
                    match reseal_value(&mut value, each, &mut counted) {
                        Ok(()) => serde_json::to_vec_pretty(&value).map_err(|e| e.to_string()),
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
            total += counted;
        }
    }
    Ok(total)
}

/// What `secrets recipients add|remove` did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct RecipientsAnswer {
    /// The operators' keys now.
    pub recipients: Vec<String>,
    /// How many secret values were sealed again to them.
    pub resealed: usize,
}

/// `secrets recipients add|remove KEY`: the operators' keys with `key` added (or removed),
/// every secret at rest sealed again to the mesh key and them (its digest unchanged).
///
/// # Errors
/// A key that is not an age key; removing a key that is not listed; a secret the mesh key
/// cannot open.
pub fn change_recipients(home: &Home, key: &str, add: bool) -> Result<RecipientsAnswer> {
    let key = Recipient::from_str(key).map_err(secrets_error("reading the key".into()))?;
    let mut keys = operators(home)?;
    let listed = keys.contains(&key);
    match (add, listed) {
        (true, true) => {
            return Err(Error::refused(format!(
                "{key} is already an operator's key; nothing changed"
            )))
        }
        (false, false) => {
            return Err(Error::refused(format!(
                "{key} is not an operator's key; nothing changed"
            )))
        }
        (true, false) => keys.push(key),
        (false, true) => keys.retain(|k| k != &key),
    }
    let keyring = keyring(home)?;
    let sealing = sealing_key(home)?;
    let path = path_of(home, RECIPIENTS_FILE);
    crate::home::write_atomic(
        &path,
        mesh_secrets::recipients::recipients_text(&keys).as_bytes(),
    )?;
    let resealed = reseal_records(home, &mut |secret| {
        let value = keyring
            .open(secret)
            .map_err(secrets_error("opening a secret with the mesh key".into()))?;
        Ok(SecretValue {
            digest: secret.digest.clone(),
            ciphertext: mesh_secrets::seal::encrypt(
                &[vec![sealing.recipient()], keys.clone()].concat(),
                &value,
            )
            .map_err(secrets_error("sealing a secret".into()))?,
        })
    })?;
    let mut recipients: Vec<String> = keys.iter().map(ToString::to_string).collect();
    recipients.sort();
    Ok(RecipientsAnswer {
        recipients,
        resealed,
    })
}
