//! The plans lock: one controller plans or drives at a time.

use crate::error::{file_error, Result};
use crate::home::Home;

/// An exclusive lock on the mesh's plans, held while planning or driving: a `flock` on
/// `<home>/plans/.lock` when the records are the home's, a lease in the records on the bus
/// (`mesh_store::lease`) when they are the bus's, so that controllers on two machines exclude
/// each other too.
pub struct PlansLock {
    /// The home's lock file, held.
    _file: Option<std::fs::File>,
    /// The bus's lease, held.
    _lease: Option<mesh_store::lease::Lease>,
}

impl PlansLock {
    /// Takes the lock for `doing` (said to whoever waits for it), waiting while another
    /// controller holds it.
    ///
    /// # Errors
    /// When the lock file cannot be made or locked, or the lease cannot be read or written.
    pub fn acquire(home: &Home, doing: &str) -> Result<PlansLock> {
        if home.records_on_bus() {
            let lease =
                mesh_store::lease::Lease::acquire(home.records_shared(), doing, home.lease_slot())?;
            return Ok(PlansLock {
                _file: None,
                _lease: Some(lease),
            });
        }
        let dir = home.root().join("plans");
        std::fs::create_dir_all(&dir).map_err(file_error("creating", &dir))?;
        let path = dir.join(".lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(file_error("opening", &path))?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|errno| file_error("locking", &path)(errno.into()))?;
        Ok(PlansLock {
            _file: Some(file),
            _lease: None,
        })
    }
}
