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
//! - Asked for while its runtime shuts down, a lock is not taken: the caller gets a
//!   [`LockError`] saying so, never a panic.

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
        let path = lock_path(&home);
        spawn_blocking(path, move || PublishLock::acquire_blocking(&home)).await
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
        let path = lock_path(&home);
        spawn_blocking(path, move || SweepLock::acquire_blocking(&home)).await
    }
}

/// Runs `f` on the runtime's blocking threads. A panic in `f` goes on as a panic; a runtime
/// shutting down before `f` ran (its blocking threads no longer take work) is a [`LockError`] on
/// `path`: the lock was not taken, so there is nothing to release.
async fn spawn_blocking<T: Send + 'static>(
    path: PathBuf,
    f: impl FnOnce() -> Result<T, LockError> + Send + 'static,
) -> Result<T, LockError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(taken) => taken,
        Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
        Err(_) => Err(LockError {
            path,
            source: std::io::Error::other("not taken: the runtime is shutting down"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lock asked for on a runtime that has shut down is an error naming the lock file; it
    /// panicked (`JoinError::into_panic` of a cancelled task) before.
    #[test]
    fn a_lock_asked_for_while_its_runtime_shuts_down_is_an_error_not_a_panic() {
        let home = tempfile::tempdir().unwrap();
        let gone = tokio::runtime::Runtime::new().unwrap();
        let handle = gone.handle().clone();
        drop(gone);
        let driver = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (sweep, publish) = driver.block_on(async {
            // The blocking work is spawned on the runtime that shut down.
            let _on_the_gone_runtime = handle.enter();
            (
                SweepLock::acquire(home.path()).await,
                PublishLock::acquire(home.path()).await,
            )
        });
        for error in [sweep.unwrap_err(), publish.unwrap_err()] {
            assert_eq!(error.path, lock_path(home.path()));
            assert!(
                error.source.to_string().contains("shutting down"),
                "{error}: {}",
                error.source
            );
        }
        // Nothing holds the lock: it is taken exclusively without waiting.
        take(home.path(), FlockOperation::NonBlockingLockExclusive).unwrap();
    }
}
