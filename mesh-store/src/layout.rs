//! The embedded default store: an OCI image layout directory.
//!
//! `oci-layout`, `index.json` and `blobs/sha256/<hex>`, as the OCI image layout spec lays them
//! out, so `skopeo inspect --raw oci:PATH:TAG` and `umoci` read it. A holding manifest is an
//! entry of `index.json` whose `org.opencontainers.image.ref.name` annotation is its holding
//! tag; releasing an archive removes that entry; [`OciLayoutStore::collect_garbage`] is a
//! mark-and-sweep from `index.json`.
//!
//! # Guarantees
//! - Every file is written atomically (temporary file in the same directory, fsync, rename):
//!   a reader never sees half a blob or half an index.
//! - `index.json` is changed under an exclusive lock on `PATH/.mesh-index.lock`, so concurrent
//!   publishes never lose each other's entries; entries that are not ours are kept as found.
//! - Collection deletes only blobs that no manifest reachable from `index.json` names.

use crate::archive::Archive;
use crate::garbage::GarbageReport;
use crate::manifest::{
    archive_digest_of_tag, holding_manifest, holding_manifest_digest, holding_tag, ARTIFACT_TYPE,
    EMPTY_CONFIG, EMPTY_CONFIG_DIGEST, MANIFEST_MEDIA_TYPE,
};
use crate::store::{ArchiveStore, Holding, Release, StoreError};
use async_trait::async_trait;
use mesh_model::build::ArchiveRef;
use mesh_records::files::{exclusive_file_lock, write_atomically};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The annotation naming an `index.json` entry (what `oci:PATH:TAG` looks up).
pub const REF_NAME_ANNOTATION: &str = "org.opencontainers.image.ref.name";

/// The `index.json` of an OCI image layout (image index, `schemaVersion` 2). Fields this crate
/// does not use are kept as found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImageIndex {
    /// Always 2.
    #[serde(rename = "schemaVersion")]
    pub schema_version: u32,
    /// `application/vnd.oci.image.index.v1+json`.
    #[serde(rename = "mediaType", default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The manifests the layout names.
    pub manifests: Vec<IndexEntry>,
    /// Anything else found in the file.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// One manifest named by `index.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IndexEntry {
    /// The manifest's media type.
    #[serde(rename = "mediaType")]
    pub media_type: String,
    /// Its digest.
    pub digest: String,
    /// Its size.
    pub size: u64,
    /// Its artifact type, when it has one.
    #[serde(
        rename = "artifactType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub artifact_type: Option<String>,
    /// Annotations (the ref name among them).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Anything else found in the entry.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

impl IndexEntry {
    fn ref_name(&self) -> Option<&str> {
        self.annotations
            .get(REF_NAME_ANNOTATION)
            .map(String::as_str)
    }
}

/// An OCI image layout directory used as the store.
#[derive(Debug, Clone)]
pub struct OciLayoutStore {
    root: PathBuf,
}

impl OciLayoutStore {
    /// The layout at `root`; made on first write.
    pub fn new(root: &Path) -> OciLayoutStore {
        OciLayoutStore {
            root: root.to_owned(),
        }
    }

    /// The layout's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn io(&self, operation: &'static str, path: &Path, source: std::io::Error) -> StoreError {
        StoreError::Io {
            store: self.name(),
            operation,
            path: path.to_owned(),
            source,
        }
    }

    fn blob_path(&self, digest: &str) -> Result<PathBuf, StoreError> {
        let hex = digest
            .strip_prefix("sha256:")
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| StoreError::Corrupt {
                store: self.name(),
                path: self.root.clone(),
                reason: format!("`{digest}` is not a sha256 digest"),
            })?;
        Ok(self.root.join("blobs").join("sha256").join(hex))
    }

    fn ensure_layout(&self) -> Result<(), StoreError> {
        let blobs = self.root.join("blobs").join("sha256");
        std::fs::create_dir_all(&blobs).map_err(|e| self.io("create", &blobs, e))?;
        let layout = self.root.join("oci-layout");
        if !layout.exists() {
            write_atomically(&layout, br#"{"imageLayoutVersion":"1.0.0"}"#)
                .map_err(|e| self.io("write", &layout, e))?;
        }
        let index = self.root.join("index.json");
        if !index.exists() {
            let empty = ImageIndex {
                schema_version: 2,
                media_type: Some("application/vnd.oci.image.index.v1+json".to_owned()),
                manifests: Vec::new(),
                other: BTreeMap::new(),
            };
            let bytes = serde_json::to_vec(&empty).expect("an index always serializes");
            // Under the index lock: two first publishes must not both write an empty index
            // over one another's entries.
            let lock = self.root.join(".mesh-index.lock");
            let _guard = exclusive_file_lock(&lock).map_err(|e| self.io("lock", &lock, e))?;
            if !index.exists() {
                write_atomically(&index, &bytes).map_err(|e| self.io("write", &index, e))?;
            }
        }
        Ok(())
    }

    fn write_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let path = self.blob_path(digest)?;
        if path.exists() {
            return Ok(());
        }
        write_atomically(&path, bytes).map_err(|e| self.io("write", &path, e))
    }

    /// Reads `index.json` (an absent layout reads as an empty index).
    ///
    /// # Errors
    /// [`StoreError::Io`] or [`StoreError::Corrupt`] naming the file.
    pub fn read_index(&self) -> Result<ImageIndex, StoreError> {
        let path = self.root.join("index.json");
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
                store: self.name(),
                path: path.clone(),
                reason: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ImageIndex {
                schema_version: 2,
                media_type: None,
                manifests: Vec::new(),
                other: BTreeMap::new(),
            }),
            Err(e) => Err(self.io("read", &path, e)),
        }
    }

    fn update_index<T>(&self, change: impl FnOnce(&mut ImageIndex) -> T) -> Result<T, StoreError> {
        self.ensure_layout()?;
        let lock = self.root.join(".mesh-index.lock");
        let _guard = exclusive_file_lock(&lock).map_err(|e| self.io("lock", &lock, e))?;
        let mut index = self.read_index()?;
        let answer = change(&mut index);
        let path = self.root.join("index.json");
        let bytes = serde_json::to_vec(&index).expect("an index always serializes");
        write_atomically(&path, &bytes).map_err(|e| self.io("write", &path, e))?;
        Ok(answer)
    }

    /// Mark-and-sweep from `index.json`: every blob no manifest reachable from the index names
    /// is deleted (only listed when `dry_run`). Hold the [`crate::lock::SweepLock`] meanwhile.
    ///
    /// # Errors
    /// [`StoreError`] naming the file that could not be read or deleted; a manifest blob that
    /// cannot be parsed, or whose content is not its digest, stops the collection before
    /// anything is deleted.
    pub fn collect_garbage(&self, dry_run: bool) -> Result<GarbageReport, StoreError> {
        let index = self.read_index()?;
        let mut marked = BTreeSet::new();
        // Each manifest to visit, with the file that names it: a name that is no digest is
        // that file's fault, and said so.
        let index_path = self.root.join("index.json");
        let mut to_visit: Vec<(String, PathBuf)> = index
            .manifests
            .iter()
            .map(|m| (m.digest.clone(), index_path.clone()))
            .collect();
        while let Some((digest, named_in)) = to_visit.pop() {
            if !marked.insert(digest.clone()) {
                continue;
            }
            let path = self.blob_path(&digest).map_err(|_| StoreError::Corrupt {
                store: self.name(),
                path: named_in,
                reason: format!("it names `{digest}`, which is not a sha256 digest"),
            })?;
            let bytes = match std::fs::read(&path) {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(self.io("read", &path, e)),
            };
            // A manifest changed in place would name other blobs than it did, and what it
            // held would be deleted as unnamed: its content must still be its digest.
            let actual = mesh_model::sha256_digest(&bytes);
            if actual != digest {
                return Err(StoreError::Corrupt {
                    store: self.name(),
                    path: path.clone(),
                    reason: format!(
                        "a manifest whose content is not its digest (its content is {actual})"
                    ),
                });
            }
            let manifest: Value =
                serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
                    store: self.name(),
                    path: path.clone(),
                    reason: format!("a manifest that is not JSON: {e}"),
                })?;
            if let Some(config) = manifest.get("config").and_then(|c| c.get("digest")) {
                marked.insert(config.as_str().unwrap_or_default().to_owned());
            }
            for layer in manifest
                .get("layers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(d) = layer.get("digest").and_then(Value::as_str) {
                    marked.insert(d.to_owned());
                }
            }
            for child in manifest
                .get("manifests")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(d) = child.get("digest").and_then(Value::as_str) {
                    to_visit.push((d.to_owned(), path.clone()));
                }
            }
        }
        let blobs = self.root.join("blobs").join("sha256");
        let mut report = GarbageReport {
            dry_run,
            deleted: Vec::new(),
            blobs_marked: marked.len(),
            output: String::new(),
        };
        let entries = match std::fs::read_dir(&blobs) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(report),
            Err(e) => return Err(self.io("list", &blobs, e)),
        };
        let mut names: Vec<String> = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| self.io("list", &blobs, e))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        for name in names {
            let path = blobs.join(&name);
            if name.starts_with(".tmp-") {
                // A write cut short: no publish runs during a collection.
                if !dry_run {
                    std::fs::remove_file(&path).map_err(|e| self.io("delete", &path, e))?;
                }
                continue;
            }
            let digest = format!("sha256:{name}");
            if !marked.contains(&digest) {
                if !dry_run {
                    std::fs::remove_file(&path).map_err(|e| self.io("delete", &path, e))?;
                }
                report.deleted.push(digest);
            }
        }
        Ok(report)
    }
}

#[async_trait]
impl ArchiveStore for OciLayoutStore {
    fn name(&self) -> String {
        format!("oci:{}", self.root.display())
    }

    async fn put_blob(&self, archive: &Archive) -> Result<(), StoreError> {
        self.ensure_layout()?;
        self.write_blob(&archive.reference.digest, &archive.bytes)
    }

    async fn hold(&self, archive: &ArchiveRef) -> Result<(), StoreError> {
        self.ensure_layout()?;
        if !self.blob_path(&archive.digest)?.exists() {
            return Err(StoreError::Missing {
                store: self.name(),
                digest: archive.digest.clone(),
            });
        }
        self.write_blob(EMPTY_CONFIG_DIGEST, EMPTY_CONFIG)?;
        let manifest = holding_manifest(archive);
        let digest = holding_manifest_digest(archive);
        self.write_blob(&digest, &manifest)?;
        let tag = holding_tag(&archive.digest);
        let entry = IndexEntry {
            media_type: MANIFEST_MEDIA_TYPE.to_owned(),
            digest,
            size: manifest.len() as u64,
            artifact_type: Some(ARTIFACT_TYPE.to_owned()),
            annotations: BTreeMap::from([(REF_NAME_ANNOTATION.to_owned(), tag.clone())]),
            other: BTreeMap::new(),
        };
        self.update_index(|index| {
            index
                .manifests
                .retain(|m| m.ref_name() != Some(tag.as_str()));
            index.manifests.push(entry);
        })
    }

    async fn list_held(&self) -> Result<BTreeSet<String>, StoreError> {
        let index = self.read_index()?;
        Ok(index
            .manifests
            .iter()
            .filter_map(|m| archive_digest_of_tag(m.ref_name()?))
            .collect())
    }

    async fn holding(&self, archive: &ArchiveRef) -> Result<Holding, StoreError> {
        let tag = holding_tag(&archive.digest);
        let expected = holding_manifest_digest(archive);
        let index = self.read_index()?;
        let named = index
            .manifests
            .iter()
            .any(|m| m.ref_name() == Some(tag.as_str()) && m.digest == expected);
        let whole = named
            && self.blob_path(&expected)?.exists()
            && self.blob_path(&archive.digest)?.exists()
            && self.blob_path(EMPTY_CONFIG_DIGEST)?.exists();
        Ok(if whole {
            Holding::Held
        } else {
            Holding::Unheld
        })
    }

    async fn has_blob(&self, digest: &str) -> Result<bool, StoreError> {
        Ok(self.blob_path(digest)?.exists())
    }

    async fn release(&self, archive_digest: &str) -> Result<Release, StoreError> {
        if !self.root.join("index.json").exists() {
            return Ok(Release::AlreadyGone);
        }
        let tag = holding_tag(archive_digest);
        self.update_index(|index| {
            let before = index.manifests.len();
            index
                .manifests
                .retain(|m| m.ref_name() != Some(tag.as_str()));
            if index.manifests.len() < before {
                Release::Removed
            } else {
                Release::AlreadyGone
            }
        })
    }

    async fn fetch(&self, archive: &ArchiveRef) -> Result<Archive, StoreError> {
        let path = self.blob_path(&archive.digest)?;
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::Missing {
                    store: self.name(),
                    digest: archive.digest.clone(),
                })
            }
            Err(e) => return Err(self.io("read", &path, e)),
        };
        let fetched = Archive::from_bytes(bytes);
        if fetched.reference.digest != archive.digest {
            return Err(StoreError::Digest {
                store: self.name(),
                expected: archive.digest.clone(),
                actual: fetched.reference.digest,
            });
        }
        Ok(fetched)
    }
}
