//! A module's secret files (`secret = true`): `secrets encrypt FILE` puts a file's value,
//! sealed to the mesh key and the operators' keys, in its place before it is committed, so the
//! catalogue and its git history hold only ciphertext (the rule “A secret is readable only
//! where it is used”).
//!
//! Start at [`encrypt_file`]. The file then holds a [`SecretValue`]'s JSON
//! ([`SecretValue::to_file`]): the executor seals it again to each node's key at a send, and
//! the host writes the value.
//!
//! What it must never do: leave the value in clear beside the file, or put it in an error.

use crate::error::{file_error, Error, Result};
use crate::home::{write_atomic, Home};
use crate::secrets::{mesh_key, operators, secrets_error};
use mesh_model::secret::SecretValue;
use serde::Serialize;
use std::io::Read as _;
use std::path::Path;

/// The largest secret file: a key, a certificate chain, a token file.
pub const MAX_SECRET_FILE: u64 = 1024 * 1024;

/// What `secrets encrypt FILE` did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Encrypted {
    /// The file.
    pub file: String,
    /// Its secret as a person sees it (`<secret sha256:…>`).
    pub secret: String,
    /// Whether it was already encrypted, and was encrypted again to the keys of now.
    pub again: bool,
    /// How many keys can open it: the mesh key and the operators'.
    pub keys: usize,
}

/// `secrets encrypt FILE`: replaces `path`'s value with it sealed to the mesh key and the
/// operators' keys. A file already encrypted is opened with the mesh key and encrypted again
/// to the keys of now (after `secrets recipients add|remove`), its digest unchanged.
///
/// # Errors
/// A file that cannot be read or written, an empty one, one over 1 MiB, or an encrypted one
/// the mesh key cannot open: each named, and nothing changed.
pub fn encrypt_file(home: &Home, path: &Path) -> Result<Encrypted> {
    let file = std::fs::File::open(path).map_err(file_error("reading", path))?;
    let mut value = zeroize::Zeroizing::new(Vec::new());
    file.take(MAX_SECRET_FILE + 1)
        .read_to_end(&mut value)
        .map_err(file_error("reading", path))?;
    let shown = path.display();
    if value.is_empty() {
        return Err(Error::refused(format!(
            "{shown} is empty: a secret file holds its value; nothing changed"
        )));
    }
    if value.len() as u64 > MAX_SECRET_FILE {
        return Err(Error::refused(format!(
            "{shown} is over 1 MiB: a secret file is a key or a token; nothing changed"
        )));
    }
    let mesh = mesh_key(home)?;
    let operators = operators(home)?;
    let (sealed, again) = match SecretValue::from_file(&value) {
        Ok(sealed) => {
            let opened = mesh
                .open(&sealed)
                .map_err(secrets_error(format!("opening {shown} with the mesh key")))?;
            let ciphertext = mesh_secrets::seal::encrypt(
                &[vec![mesh.recipient()], operators.clone()].concat(),
                &opened,
            )
            .map_err(secrets_error(format!("encrypting {shown}")))?;
            let digest = sealed.digest;
            (SecretValue { digest, ciphertext }, true)
        }
        Err(_) => (
            mesh.seal(&operators, &value)
                .map_err(secrets_error(format!("encrypting {shown}")))?,
            false,
        ),
    };
    write_atomic(path, sealed.to_file().as_bytes())?;
    Ok(Encrypted {
        file: shown.to_string(),
        secret: sealed.to_string(),
        again,
        keys: 1 + operators.len(),
    })
}

/// Encrypts, in the home's catalogue, every file a module marks `secret = true` that is still
/// in clear (`init --example`: the example's TLS key, which no mesh key could have sealed
/// before this home had one). Answers the files encrypted.
///
/// # Errors
/// As [`encrypt_file`]; a module definition that cannot be read.
pub fn encrypt_clear_secret_files(home: &Home) -> Result<Vec<Encrypted>> {
    let modules = home.modules_dir();
    let mut done = Vec::new();
    let Ok(entries) = std::fs::read_dir(&modules) else {
        return Ok(done);
    };
    let mut dirs: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    dirs.sort();
    for dir in dirs {
        let toml_path = dir.join("module.toml");
        let Ok(text) = std::fs::read_to_string(&toml_path) else {
            continue;
        };
        let definition: mesh_model::module::ModuleDefinition =
            toml::from_str(&text).map_err(|e| Error::Invalid {
                what: format!("reading {}", toml_path.display()),
                source: Some(Box::new(e)),
            })?;
        for file in definition.files.values().filter(|file| file.secret) {
            let path = dir.join(&file.source);
            let bytes = zeroize::Zeroizing::new(
                std::fs::read(&path).map_err(file_error("reading", &path))?,
            );
            if SecretValue::from_file(&bytes).is_err() {
                done.push(encrypt_file(home, &path)?);
            }
        }
    }
    Ok(done)
}
