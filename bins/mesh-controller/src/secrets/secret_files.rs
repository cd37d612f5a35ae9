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
use crate::secrets::{keyring, operators, sealing_key, secrets_error};
use mesh_model::secret::SecretValue;
use serde::Serialize;
use std::io::Read as _;
use std::path::{Path, PathBuf};

/// The largest secret file: a key, a certificate chain, a token file.
pub(crate) const MAX_SECRET_FILE: u64 = 1024 * 1024;

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
    // Sealed as every secret at rest is now: to the next key while a rotation is under way,
    // so the rotation, finished, leaves it readable (and a repository it waits for done).
    let sealing = sealing_key(home)?;
    let operators = operators(home)?;
    let (sealed, again) = match SecretValue::from_file(&value) {
        Ok(sealed) => {
            let opened = keyring(home)?
                .open(&sealed)
                .map_err(secrets_error(format!("opening {shown} with the mesh key")))?;
            (
                sealing
                    .seal(&operators, &opened)
                    .map_err(secrets_error(format!("encrypting {shown}")))?,
                true,
            )
        }
        Err(_) => (
            sealing
                .seal(&operators, &value)
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

/// A file a module marks `secret = true`.
#[derive(Debug, Clone)]
pub(crate) struct SecretFile {
    /// The module (its directory's name).
    pub module: String,
    /// The file's `source`, relative to the module's directory.
    pub source: String,
    /// Where it is.
    pub path: PathBuf,
}

/// Every file a module under `modules` marks `secret = true`, modules in the order of their
/// directories' names (none when `modules` is not a directory; a directory without a
/// `module.toml` is passed over).
///
/// # Errors
/// A module definition that does not read, named.
pub(crate) fn secret_files_under(modules: &Path) -> Result<Vec<SecretFile>> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(modules) else {
        return Ok(files);
    };
    let mut dirs: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
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
        let module = dir
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        for file in definition.files.values().filter(|file| file.secret) {
            files.push(SecretFile {
                module: module.clone(),
                source: file.source.clone(),
                path: dir.join(&file.source),
            });
        }
    }
    Ok(files)
}

/// Encrypts, in the home's catalogue, every file a module marks `secret = true` that is still
/// in clear (`init --example`: the example's TLS key, which no mesh key could have sealed
/// before this home had one). Answers the files encrypted.
///
/// # Errors
/// As [`encrypt_file`]; a module definition that cannot be read.
pub(crate) fn encrypt_clear_secret_files(home: &Home) -> Result<Vec<Encrypted>> {
    let mut done = Vec::new();
    for file in secret_files_under(&home.modules_dir())? {
        let bytes = zeroize::Zeroizing::new(
            std::fs::read(&file.path).map_err(file_error("reading", &file.path))?,
        );
        if SecretValue::from_file(&bytes).is_err() {
            done.push(encrypt_file(home, &file.path)?);
        }
    }
    Ok(done)
}
