//! Atomic file operations: every write is a temp file beside the target, fsync, rename.
//!
//! Temp names are fixed per target (`.<name>.mesh-new`, and `.<name>.mesh-old` for a together
//! group's put-back copy), so a leftover from a killed host is found and removed by the next apply.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// The staging name beside `target`.
pub(crate) fn new_name(target: &Path) -> PathBuf {
    sibling(target, "mesh-new")
}

/// The put-back name beside `target`.
pub(crate) fn old_name(target: &Path) -> PathBuf {
    sibling(target, "mesh-old")
}

fn sibling(target: &Path, suffix: &str) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.{suffix}"))
}

/// What a file should be.
pub(crate) struct Wanted<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

/// Writes `wanted` to the staging name beside `target`, fully, with mode and owner, and fsyncs
/// it. Returns the staging path; nothing live has changed.
pub(crate) fn stage(target: &Path, wanted: &Wanted<'_>) -> io::Result<PathBuf> {
    let temp = new_name(target);
    remove_if_present(&temp)?;
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        file.write_all(wanted.bytes)?;
        std::os::unix::fs::fchown(&file, Some(wanted.uid), Some(wanted.gid))
            .map_err(|e| owner_error(e, wanted.uid, wanted.gid))?;
        file.set_permissions(fs::Permissions::from_mode(wanted.mode))?;
        file.sync_all()
    })();
    match result {
        Ok(()) => Ok(temp),
        Err(e) => {
            let _ = fs::remove_file(&temp);
            Err(e)
        }
    }
}

/// Writes `wanted` at `target` atomically (stage, then rename over the target).
pub(crate) fn write_atomic(target: &Path, wanted: &Wanted<'_>) -> io::Result<()> {
    let temp = stage(target, wanted)?;
    fs::rename(&temp, target).inspect_err(|_| {
        let _ = fs::remove_file(&temp);
    })
}

/// Writes a state file atomically and durably (mode 0600, the process's owner).
pub(crate) fn write_atomic_private(target: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_private_seen(target, bytes).map(drop)
}

/// [`write_atomic_private`], answering the written file's metadata (taken before it is renamed
/// into place: its inode, size and mtime are the file's at `target` until another write).
pub(crate) fn write_atomic_private_seen(target: &Path, bytes: &[u8]) -> io::Result<fs::Metadata> {
    crate::progress::state_dir_full()?;
    let temp = new_name(target);
    remove_if_present(&temp)?;
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    let written = file.metadata()?;
    drop(file);
    fs::rename(&temp, target)?;
    sync_dir(target.parent().unwrap_or(Path::new(".")))?;
    Ok(written)
}

/// Fsyncs a directory, so renames and removals in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Removes a file if it is there.
pub(crate) fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Mode bits, uid and gid of a metadata.
pub(crate) fn mode_owner(meta: &fs::Metadata) -> (u32, u32, u32) {
    (meta.mode() & 0o7777, meta.uid(), meta.gid())
}

/// Sets mode and owner in place on a file or directory (never following a link: callers have
/// refused links already).
pub(crate) fn set_mode_owner(path: &Path, mode: u32, uid: u32, gid: u32) -> io::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).map_err(|e| owner_error(e, uid, gid))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

/// Creates a directory with exactly `mode` and owner.
pub(crate) fn make_dir(path: &Path, mode: u32, uid: u32, gid: u32) -> io::Result<()> {
    fs::create_dir(path)?;
    set_mode_owner(path, mode, uid, gid)
}

/// A chown failure, saying to whom the file was being given.
fn owner_error(error: io::Error, uid: u32, gid: u32) -> io::Error {
    io::Error::new(
        error.kind(),
        format!("cannot give it to uid {uid}, gid {gid}: {error}"),
    )
}
