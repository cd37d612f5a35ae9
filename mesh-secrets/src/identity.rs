//! An age X25519 identity, and the file that keeps it: the mesh's secrets key on the
//! controller, a host's own key beside its NKey seed.
//!
//! The file is age's identity format (`# public key: age1…` then `AGE-SECRET-KEY-1…`), so an
//! operator can open a secret with the `age` tool in an emergency. It is made `0600` from its
//! creation (mesh-records' `write_secret`) and refused when others than its owner may read it.

use crate::{Recipient, SecretsError};
use age::secrecy::ExposeSecret as _;
use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::str::FromStr as _;
use zeroize::Zeroizing;

/// An age X25519 identity (its secret half zeroized when dropped).
#[derive(Clone)]
pub struct Identity {
    pub(crate) inner: age::x25519::Identity,
}

/// Shows the public key only.
impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Identity({})", self.recipient())
    }
}

impl Identity {
    /// A new identity, from the operating system's randomness.
    pub fn generate() -> Identity {
        Identity {
            inner: age::x25519::Identity::generate(),
        }
    }

    /// Its public key: what a secret is encrypted to for it.
    pub fn recipient(&self) -> Recipient {
        Recipient {
            inner: self.inner.to_public(),
        }
    }

    /// The identity's secret half as age writes it (`AGE-SECRET-KEY-1…`), zeroized when
    /// dropped.
    pub(crate) fn secret_text(&self) -> Zeroizing<String> {
        Zeroizing::new(self.inner.to_string().expose_secret().to_owned())
    }

    /// Makes a new identity and keeps it in a new file at `path` (its directory made `0700` if
    /// absent), mode `0600` from its creation.
    ///
    /// # Errors
    /// [`SecretsError::Io`], with `AlreadyExists` when the file is there (it is never
    /// replaced: the secrets encrypted to it would be lost).
    pub fn create(path: &Path) -> Result<Identity, SecretsError> {
        let identity = Identity::generate();
        identity.keep(path)?;
        Ok(identity)
    }

    /// Keeps this identity in a new file at `path` (its directory made `0700` if absent),
    /// mode `0600` from its creation: a retired mesh key, kept beside the current one.
    ///
    /// # Errors
    /// [`SecretsError::Io`], with `AlreadyExists` when the file is there (never replaced).
    pub fn keep(&self, path: &Path) -> Result<(), SecretsError> {
        let identity = self;
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            if !parent.exists() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(parent)
                    .map_err(|source| SecretsError::Io {
                        path: parent.to_owned(),
                        operation: "make the directory of",
                        source,
                    })?;
            }
        }
        let text = Zeroizing::new(format!(
            "# public key: {}\n{}\n",
            identity.recipient(),
            identity.secret_text().as_str()
        ));
        mesh_records::secret::write_secret(path, text.as_bytes()).map_err(|error| match error {
            mesh_records::secret::SecretFileError::Io {
                operation, source, ..
            } => SecretsError::Io {
                path: path.to_owned(),
                operation,
                source,
            },
            other => SecretsError::Io {
                path: path.to_owned(),
                operation: "write",
                source: std::io::Error::other(other.to_string()),
            },
        })
    }

    /// Reads the identity kept at `path`.
    ///
    /// # Errors
    /// [`SecretsError::NotPrivate`] when anyone but its owner may read or write it (nothing is
    /// read then), [`SecretsError::NotAnIdentity`], [`SecretsError::Io`].
    pub fn load(path: &Path) -> Result<Identity, SecretsError> {
        let io = |operation| {
            move |source| SecretsError::Io {
                path: path.to_owned(),
                operation,
                source,
            }
        };
        let mut file = std::fs::File::open(path).map_err(io("open"))?;
        let mode = file.metadata().map_err(io("look at"))?.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(SecretsError::NotPrivate {
                path: path.to_owned(),
                mode,
            });
        }
        let mut text = Zeroizing::new(String::with_capacity(256));
        file.read_to_string(&mut text).map_err(io("read"))?;
        text.lines()
            .map(str::trim)
            .find(|line| line.starts_with("AGE-SECRET-KEY-1"))
            .and_then(|line| age::x25519::Identity::from_str(line).ok())
            .map(|inner| Identity { inner })
            .ok_or_else(|| SecretsError::NotAnIdentity {
                path: path.to_owned(),
            })
    }

    /// Reads the identity at `path`, making it first when there is none.
    ///
    /// # Errors
    /// As [`Identity::load`] and [`Identity::create`].
    pub fn load_or_create(path: &Path) -> Result<Identity, SecretsError> {
        match Identity::create(path) {
            Ok(identity) => Ok(identity),
            Err(SecretsError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::AlreadyExists =>
            {
                Identity::load(path)
            }
            Err(other) => Err(other),
        }
    }
}

use std::os::unix::fs::DirBuilderExt as _;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_file_is_made_0600_read_back_and_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secrets/mesh.key");
        let made = Identity::create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o600);
        let read = Identity::load(&path).unwrap();
        assert_eq!(read.recipient(), made.recipient());
        assert!(matches!(
            Identity::create(&path),
            Err(SecretsError::Io { source, .. }) if source.kind() == std::io::ErrorKind::AlreadyExists
        ));
        assert_eq!(
            Identity::load_or_create(&path).unwrap().recipient(),
            made.recipient()
        );
        let shown = format!("{read:?}");
        assert!(!shown.contains("AGE-SECRET-KEY"), "{shown}");
    }

    #[test]
    fn an_identity_file_others_may_read_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mesh.key");
        Identity::create(&path).unwrap();
        for mode in [0o640, 0o604, 0o660] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let error = Identity::load(&path).unwrap_err();
            let message = error.to_string();
            assert!(
                matches!(error, SecretsError::NotPrivate { mode: m, .. } if m == mode),
                "{message}"
            );
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert!(!message.contains("AGE-SECRET-KEY"), "{message}");
        }
    }

    #[test]
    fn a_file_without_an_identity_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mesh.key");
        mesh_records::secret::write_secret(&path, b"# nothing\nAGE-SECRET-KEY-1NOPE\n").unwrap();
        let error = Identity::load(&path).unwrap_err();
        assert!(
            matches!(error, SecretsError::NotAnIdentity { .. }),
            "{error}"
        );
    }
}
