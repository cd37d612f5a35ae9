//! The lock that keeps publication and collection apart.
//!
//! Every publish holds a [`PublishLock`] (shared: publishes run side by side) from before its
//! blob is pushed until its build is recorded; a sweep and a collection hold the [`SweepLock`]
//! (exclusive) for their whole run, records read included. So a sweep never sees an archive that
//! is published but not yet recorded (it would let it go), and no upload overlaps the registry's
//! `garbage-collect`.
//!
//! The lock is an advisory `flock` on `<home>/store/lock`: it excludes every process that uses
//! the same mesh home, on this machine. Where another machine publishes to the same registry,
//! the registry itself is stopped while it is collected, so such a publish fails instead of
//! overlapping.
//!
//! # Guarantees
//! - A lock is released when its guard is dropped, and by the kernel when the process ends: a
//!   crashed collector never leaves the store locked.

use rustix::fs::{flock, FlockOperation};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

/// The path of the lock file under a mesh home.
pub fn lock_path(home: &Path) -> PathBuf {
    home.join("store").join("lock")
}

/// An error taking the store lock.
#[derive(Debug, thiserror::Error)]
#[error("cannot take the store lock {path}")]
pub struct LockError {
    /// The lock file.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

fn take(home: &Path, operation: FlockOperation) -> Result<File, LockError> {
    let path = lock_path(home);
    let fail = |source| LockError {
        path: path.clone(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(fail)?;
    }
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(fail)?;
    flock(&file, operation).map_err(|e| fail(e.into()))?;
    Ok(file)
}

/// Held while publishing and recording builds (shared with other publishes).
#[derive(Debug)]
pub struct PublishLock {
    _file: File,
}

impl PublishLock {
    /// Takes the lock, waiting while a sweep or collection holds it.
    ///
    /// # Errors
    /// [`LockError`] naming the lock file when it cannot be made or locked.
    pub fn acquire_blocking(home: &Path) -> Result<PublishLock, LockError> {
        take(home, FlockOperation::LockShared).map(|file| PublishLock { _file: file })
    }

    /// [`PublishLock::acquire_blocking`] without blocking the async runtime.
    ///
    /// # Errors
    /// As [`PublishLock::acquire_blocking`].
    pub async fn acquire(home: &Path) -> Result<PublishLock, LockError> {
        let home = home.to_owned();
        spawn_blocking(move || PublishLock::acquire_blocking(&home)).await
    }
}

/// Held for a whole sweep or collection (exclusive).
#[derive(Debug)]
pub struct SweepLock {
    _file: File,
}

impl SweepLock {
    /// Takes the lock, waiting for every publish under way to finish.
    ///
    /// # Errors
    /// [`LockError`] naming the lock file when it cannot be made or locked.
    pub fn acquire_blocking(home: &Path) -> Result<SweepLock, LockError> {
        take(home, FlockOperation::LockExclusive).map(|file| SweepLock { _file: file })
    }

    /// [`SweepLock::acquire_blocking`] without blocking the async runtime.
    ///
    /// # Errors
    /// As [`SweepLock::acquire_blocking`].
    pub async fn acquire(home: &Path) -> Result<SweepLock, LockError> {
        let home = home.to_owned();
        spawn_blocking(move || SweepLock::acquire_blocking(&home)).await
    }
}

async fn spawn_blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, LockError> + Send + 'static,
) -> Result<T, LockError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|join| std::panic::resume_unwind(join.into_panic()))
}
