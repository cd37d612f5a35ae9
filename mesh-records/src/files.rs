//! Files written whole and locked: the two file operations every record on disk relies on.
//!
//! [`write_atomically`] writes a temporary file beside its target, fsyncs it and renames it
//! over the target, so a reader (or a machine that lost power) sees the old bytes or the new,
//! never half; [`exclusive_file_lock`] takes an advisory `flock` guarding a read-modify-write of
//! one file (a record, a module record, an OCI layout's `index.json`).

use rustix::fs::{flock, FlockOperation};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

/// An exclusive `flock` on `path` (made if absent), held until the file is dropped: guards a
/// read-modify-write of one file (a module record, a layout's `index.json`).
pub fn exclusive_file_lock(path: &Path) -> std::io::Result<File> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    flock(&file, FlockOperation::LockExclusive)?;
    Ok(file)
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, fsync, rename.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut temp = tempfile_in(dir)?;
    temp.1.write_all(bytes)?;
    temp.1.sync_all()?;
    std::fs::rename(&temp.0, path)?;
    Ok(())
}

fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    loop {
        let name = format!(
            ".tmp-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let path = dir.join(name);
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}
