//! Where a declaration's archived files come from: the host's archive cache, then the store.
//!
//! A format-2 declaration names, per module that comes from a build, its archive (digest and
//! size), and each of that module's files that is not a template by its path in the archive and
//! its content's digest. Before applying, the host reads every archive named ([`read_archived`]):
//! from its cache `<state-dir>/archives/<hex>` when the entry there is the digest named (an entry
//! that is not is removed), else from the store (`--store`), which checks the digest, and keeps
//! what it fetched in the cache. Each archived file is then read from its unpacked archive and
//! checked against its content digest.
//!
//! # Guarantees
//! - An archive that cannot be had (not in the cache, and the store cannot give it or gives
//!   other bytes) fails exactly the files read from it: each is reported `failed` with a reason
//!   naming the archive and the store, nothing of it is written, and every other resource is
//!   applied as usual (mesh-apply's [`mesh_apply::apply_archived`]).
//! - Nothing is taken from the cache or the store without its digest checked.
//! - The cache is only ever added to by whole, checked archives (temporary file, then rename).

use mesh_apply::ArchivedContents;
use mesh_model::build::ArchiveRef;
use mesh_model::declaration::{Declaration, Spec};
use mesh_store::archive::unpack_archive;
use mesh_store::store::{open_store, ArchiveStore, StoreError, StoreSpec};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The directory, under a host's state directory, its archive cache lives in.
pub const CACHE_DIR: &str = "archives";

/// Where a host gets the archives its declarations name: its cache, then the store (if it was
/// given one).
#[derive(Clone)]
pub struct ArchiveSource {
    cache: PathBuf,
    store: Option<Arc<dyn ArchiveStore>>,
}

impl std::fmt::Debug for ArchiveSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveSource")
            .field("cache", &self.cache)
            .field("store", &self.store.as_ref().map(|s| s.name()))
            .finish()
    }
}

impl ArchiveSource {
    /// The cache under `state_dir`, and the store `spec` names (none: the cache only).
    ///
    /// # Errors
    /// [`StoreError`] when the store's client cannot be made (nothing is contacted yet).
    pub fn open(state_dir: &Path, spec: Option<&StoreSpec>) -> Result<ArchiveSource, StoreError> {
        Ok(ArchiveSource {
            cache: state_dir.join(CACHE_DIR),
            store: spec.map(open_store).transpose()?.map(Arc::from),
        })
    }

    /// The cache under `state_dir` and no store.
    pub fn cache_only(state_dir: &Path) -> ArchiveSource {
        ArchiveSource {
            cache: state_dir.join(CACHE_DIR),
            store: None,
        }
    }

    /// Where the cache keeps an archive: `<state-dir>/archives/<hex of its digest>`.
    pub fn cache_path(&self, digest: &str) -> PathBuf {
        self.cache
            .join(digest.strip_prefix("sha256:").unwrap_or(digest))
    }

    /// The store's name, for messages.
    fn store_name(&self) -> String {
        self.store
            .as_ref()
            .map_or_else(|| "no store (--store)".to_owned(), |s| s.name())
    }

    /// The archive's bytes from the cache, if an entry there is exactly them. An entry that is
    /// not (corrupt, cut short) is removed, so it is fetched again.
    fn cached(&self, archive: &ArchiveRef) -> Option<Vec<u8>> {
        let path = self.cache_path(&archive.digest);
        let bytes = std::fs::read(&path).ok()?;
        if bytes.len() as u64 == archive.size && mesh_model::sha256_digest(&bytes) == archive.digest
        {
            return Some(bytes);
        }
        tracing::warn!(path = %path.display(), digest = %archive.digest, "a cached archive is not its digest: fetched again");
        let _ = std::fs::remove_file(&path);
        None
    }

    /// Keeps checked archive bytes in the cache (best effort: a cache that cannot be written
    /// only means the next apply fetches again).
    fn keep(&self, archive: &ArchiveRef, bytes: &[u8]) {
        let path = self.cache_path(&archive.digest);
        let temp = path.with_extension("partial");
        let kept = std::fs::create_dir_all(&self.cache)
            .and_then(|()| std::fs::write(&temp, bytes))
            .and_then(|()| std::fs::rename(&temp, &path));
        if let Err(error) = kept {
            let _ = std::fs::remove_file(&temp);
            tracing::warn!(path = %path.display(), %error, "cannot keep an archive in the cache");
        }
    }

    /// One archive's bytes, checked: from the cache, else fetched from the store and kept.
    async fn bytes(&self, module: &str, archive: &ArchiveRef) -> Result<Vec<u8>, String> {
        if let Some(bytes) = self.cached(archive) {
            return Ok(bytes);
        }
        let Some(store) = &self.store else {
            return Err(format!(
                "the archive of `{module}` ({}) is not in this host's cache and the host has no \
                 store to fetch it from (--store)",
                archive.digest
            ));
        };
        match store.fetch(archive).await {
            Ok(fetched) => {
                self.keep(archive, &fetched.bytes);
                Ok(fetched.bytes)
            }
            Err(error) => Err(format!(
                "the archive of `{module}` ({}) could not be fetched from {}: {error}",
                archive.digest,
                store.name()
            )),
        }
    }
}

/// Reads the content of every archived file of `declaration` from its archive (see the module
/// docs): what [`mesh_apply::apply_archived`] applies with.
///
/// # Guarantees
/// Every archived file is in exactly one of [`ArchivedContents::read`] (its content, whose
/// digest is the one declared) and [`ArchivedContents::unavailable`] (why not, naming the archive
/// and, when it was fetched, the store).
pub async fn read_archived(declaration: &Declaration, source: &ArchiveSource) -> ArchivedContents {
    let mut contents = ArchivedContents::default();
    let mut trees = BTreeMap::new();
    for (module, archive) in &declaration.archives {
        let tree = match source.bytes(module, archive).await {
            Ok(bytes) => unpack_archive(&bytes, Some(archive)).map_err(|error| {
                format!(
                    "the archive of `{module}` ({}) from {} cannot be unpacked: {error}",
                    archive.digest,
                    source.store_name()
                )
            }),
            Err(reason) => Err(reason),
        };
        trees.insert(module.as_str(), tree);
    }
    for resource in &declaration.resources {
        let Spec::File(file) = &resource.spec else {
            continue;
        };
        let Some(wanted) = &file.source else {
            continue;
        };
        let read = match trees.get(resource.module.as_str()) {
            None => Err(format!(
                "its content is in the archive of `{}`, which the declaration does not name",
                resource.module
            )),
            Some(Err(reason)) => Err(reason.clone()),
            Some(Ok(tree)) => {
                let digest = &declaration.archives[&resource.module].digest;
                match tree.file(&wanted.path) {
                    None => Err(format!(
                        "`{}` is not a file of the archive of `{}` ({digest})",
                        wanted.path, resource.module
                    )),
                    Some(bytes) if mesh_model::sha256_digest(bytes) != wanted.sha256 => {
                        Err(format!(
                            "`{}` in the archive of `{}` ({digest}) is {}, the declaration says {}",
                            wanted.path,
                            resource.module,
                            mesh_model::sha256_digest(bytes),
                            wanted.sha256
                        ))
                    }
                    Some(bytes) => String::from_utf8(bytes.to_vec()).map_err(|_| {
                        format!(
                            "`{}` in the archive of `{}` ({digest}) is not UTF-8 text",
                            wanted.path, resource.module
                        )
                    }),
                }
            }
        };
        match read {
            Ok(content) => contents.read.insert(resource.id.clone(), content),
            Err(reason) => contents.unavailable.insert(resource.id.clone(), reason),
        };
    }
    contents
}
