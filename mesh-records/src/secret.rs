//! Files that hold a secret (a password, a private key, an NKey seed): made `0600`, and refused
//! when anyone but their owner (and, where a server must read one, its group) can read them.
//!
//! Start at [`read_secret`] (every reader of a secret file goes through it) and
//! [`write_secret`] (every writer). The store's credentials (mesh-store's `StoreAccess`),
//! the host's NKey seed and the bus's client key use these.
//!
//! What it must never do: put a secret's bytes in an error message or a log line — an error
//! names the file and what is wrong with its mode, never what it holds.

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// Why a secret file cannot be used. No variant carries the file's contents.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    /// The file could not be read or written.
    #[error("secret file {path}: cannot {operation}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        operation: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Others (not its owner or group) may read or write it: its secret may already be out.
    #[error(
        "secret file {path} is readable by others (mode {mode:04o}): make it 0600 (or 0640 for \
         a server's group) with `chmod 600 {path}`, and consider the secret leaked if others \
         could read it"
    )]
    ReadableByOthers {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The file is empty (after its trailing newline).
    #[error("secret file {path} is empty")]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

/// Whether a file's `mode` lets others than owner and group at it.
pub fn others_may_read(mode: u32) -> bool {
    mode & 0o007 != 0
}

/// Refuses a secret file that others may read (its mode has any of `0o007`).
///
/// # Errors
/// [`SecretFileError::ReadableByOthers`], or [`SecretFileError::Io`] when it cannot be looked
/// at.
pub fn check_secret_mode(path: &Path) -> Result<(), SecretFileError> {
    let metadata = std::fs::metadata(path).map_err(|source| SecretFileError::Io {
        path: path.to_owned(),
        operation: "look at",
        source,
    })?;
    let mode = metadata.permissions().mode() & 0o7777;
    if others_may_read(mode) {
        return Err(SecretFileError::ReadableByOthers {
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

/// Reads a secret file's text, its trailing newline removed, after checking its mode.
///
/// # Errors
/// [`SecretFileError::ReadableByOthers`] when others may read it (nothing is read then),
/// [`SecretFileError::Empty`], [`SecretFileError::Io`].
pub fn read_secret(path: &Path) -> Result<String, SecretFileError> {
    check_secret_mode(path)?;
    let text = std::fs::read_to_string(path).map_err(|source| SecretFileError::Io {
        path: path.to_owned(),
        operation: "read",
        source,
    })?;
    let text = text.trim_end_matches(['\n', '\r']).to_owned();
    if text.is_empty() {
        return Err(SecretFileError::Empty {
            path: path.to_owned(),
        });
    }
    Ok(text)
}

/// Writes a new secret file, mode `0600` from its creation (never a moment readable by
/// others), refusing to replace one that exists.
///
/// # Guarantees
/// The file is created with `O_EXCL` and mode `0600` and holds `contents` when this returns.
///
/// # Errors
/// [`SecretFileError::Io`], with `AlreadyExists` when the file is there.
pub fn write_secret(path: &Path, contents: &[u8]) -> Result<(), SecretFileError> {
    let io = |operation| {
        move |source| SecretFileError::Io {
            path: path.to_owned(),
            operation,
            source,
        }
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io("create"))?;
    // The umask can only take bits away; set the mode whatever it was.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(io("set the mode of"))?;
    file.write_all(contents).map_err(io("write"))?;
    file.sync_all().map_err(io("sync"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_file_is_made_0600_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seed");
        write_secret(&path, b"SUAB\n").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o600);
        assert_eq!(read_secret(&path).unwrap(), "SUAB");
        let again = write_secret(&path, b"other").unwrap_err();
        assert!(
            matches!(&again, SecretFileError::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists),
            "{again}"
        );
    }

    #[test]
    fn a_secret_file_readable_by_others_is_refused_without_its_contents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("password");
        std::fs::write(&path, "hunter2").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let message = read_secret(&path).unwrap_err().to_string();
        assert!(
            message.contains("readable by others (mode 0644)"),
            "{message}"
        );
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(!message.contains("hunter2"), "{message}");
        // A server's group may read it.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(read_secret(&path).unwrap(), "hunter2");
    }
}
