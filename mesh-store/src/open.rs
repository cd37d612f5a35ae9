//! Opening a store: the one place a backend is chosen from a [`StoreSpec`], so the trait
//! ([`crate::store`]) knows neither backend and each backend ([`crate::layout`],
//! [`crate::registry`]) knows only the trait.

use crate::layout::OciLayoutStore;
use crate::registry::RegistryStore;
use crate::store::{ArchiveStore, StoreAccess, StoreError, StoreSpec};

/// Opens the store a spec names, anonymously and trusting the system's CAs. Nothing is
/// contacted or created yet. See [`open_store_with`] for a registry that wants credentials or
/// a private CA.
///
/// # Errors
/// [`StoreError`] when the client cannot be built.
pub fn open_store(spec: &StoreSpec) -> Result<Box<dyn ArchiveStore>, StoreError> {
    open_store_with(spec, &StoreAccess::default())
}

/// Opens the store a spec names with `access` (a registry's CA and credentials; a layout
/// needs neither and ignores them). Nothing is contacted or created yet; the files `access`
/// names are read now.
///
/// # Errors
/// [`StoreError::Access`] or [`StoreError::Secret`] when a file of `access` cannot be used
/// (the credentials file readable by others, say); [`StoreError`] when the client cannot be
/// built.
pub fn open_store_with(
    spec: &StoreSpec,
    access: &StoreAccess,
) -> Result<Box<dyn ArchiveStore>, StoreError> {
    match spec {
        StoreSpec::Layout(path) => Ok(Box::new(OciLayoutStore::new(path))),
        StoreSpec::Registry { .. } => Ok(Box::new(RegistryStore::with_access(spec, access)?)),
    }
}
