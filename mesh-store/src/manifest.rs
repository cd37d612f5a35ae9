//! The holding manifest: the OCI image manifest that names one archive and nothing else
//! The rule “An archive is published with a manifest that holds it”.
//!
//! [`holding_manifest`] is a pure function of the archive's digest and size, so the sweep can
//! compute it again from a build record and compare it byte for byte with what the store holds.
//! [`holding_tag`] names it in the store, deterministically from the archive digest: a
//! registry's tag list is the only listing it offers, so tags are how held archives are found.
//!
//! # Guarantees
//! - The manifest is canonical JSON (keys sorted, no whitespace) of [`HoldingManifest`]: media
//!   type `application/vnd.oci.image.manifest.v1+json`, `artifactType`
//!   [`ARTIFACT_TYPE`], the empty config ([`EMPTY_CONFIG_DIGEST`], 2 bytes `{}`), one layer
//!   `{mediaType, digest, size}`, no annotations.
//! - Its bytes, and so its digest, change only with the archive's digest or size.

use crate::archive::ARCHIVE_MEDIA_TYPE;
use mesh_model::build::ArchiveRef;
use serde::{Deserialize, Serialize};

/// The `artifactType` of every holding manifest.
pub const ARTIFACT_TYPE: &str = "application/vnd.mesh.module.v1";
/// The OCI image manifest media type.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The media type of the empty config.
pub const EMPTY_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
/// The empty config's bytes.
pub const EMPTY_CONFIG: &[u8] = b"{}";
/// The empty config's digest.
pub const EMPTY_CONFIG_DIGEST: &str =
    "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";
/// What every holding tag starts with; the archive's hex digest follows.
pub const HOLDING_TAG_PREFIX: &str = "mesh-archive-";

/// An OCI descriptor, as the holding manifest writes it (keys in canonical order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Descriptor {
    /// `sha256:<hex>`.
    pub digest: String,
    /// What the blob is.
    #[serde(rename = "mediaType")]
    pub media_type: String,
    /// Its size in bytes.
    pub size: u64,
}

/// The holding manifest as a wire format. Its version is `schemaVersion` 2 of the OCI image
/// manifest together with [`ARTIFACT_TYPE`] (`…v1`); a change to what it holds is a new
/// artifact type. Fields are declared in sorted key order so serde writes canonical JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HoldingManifest {
    /// Always [`ARTIFACT_TYPE`].
    #[serde(rename = "artifactType")]
    pub artifact_type: String,
    /// Always the empty config.
    pub config: Descriptor,
    /// Exactly one layer: the archive.
    pub layers: Vec<Descriptor>,
    /// Always [`MANIFEST_MEDIA_TYPE`].
    #[serde(rename = "mediaType")]
    pub media_type: String,
    /// Always 2.
    #[serde(rename = "schemaVersion")]
    pub schema_version: u32,
}

impl HoldingManifest {
    /// The manifest that holds `archive`.
    pub fn for_archive(archive: &ArchiveRef) -> HoldingManifest {
        HoldingManifest {
            artifact_type: ARTIFACT_TYPE.to_owned(),
            config: Descriptor {
                digest: EMPTY_CONFIG_DIGEST.to_owned(),
                media_type: EMPTY_CONFIG_MEDIA_TYPE.to_owned(),
                size: EMPTY_CONFIG.len() as u64,
            },
            layers: vec![Descriptor {
                digest: archive.digest.clone(),
                media_type: ARCHIVE_MEDIA_TYPE.to_owned(),
                size: archive.size,
            }],
            media_type: MANIFEST_MEDIA_TYPE.to_owned(),
            schema_version: 2,
        }
    }

    /// The archive this manifest holds, if it is a holding manifest at all (our artifact type,
    /// exactly one layer of our media type).
    pub fn held_archive(&self) -> Option<ArchiveRef> {
        match self.layers.as_slice() {
            [layer]
                if self.artifact_type == ARTIFACT_TYPE
                    && layer.media_type == ARCHIVE_MEDIA_TYPE =>
            {
                Some(ArchiveRef {
                    digest: layer.digest.clone(),
                    size: layer.size,
                })
            }
            _ => None,
        }
    }
}

/// The canonical bytes of the manifest that holds `archive`.
///
/// # Guarantees
/// Pure: the same `(digest, size)` gives the same bytes, on every machine and every run.
pub fn holding_manifest(archive: &ArchiveRef) -> Vec<u8> {
    serde_json::to_vec(&HoldingManifest::for_archive(archive))
        .expect("a holding manifest always serializes")
}

/// The digest (`sha256:<hex>`) of [`holding_manifest`]`(archive)`.
pub fn holding_manifest_digest(archive: &ArchiveRef) -> String {
    mesh_model::sha256_digest(&holding_manifest(archive))
}

/// The tag that names the holding manifest of `archive`: `mesh-archive-<hex>`.
pub fn holding_tag(archive_digest: &str) -> String {
    let hex = archive_digest
        .strip_prefix("sha256:")
        .unwrap_or(archive_digest);
    format!("{HOLDING_TAG_PREFIX}{hex}")
}

/// The archive digest a holding tag names, or `None` for a tag that is not ours.
pub fn archive_digest_of_tag(tag: &str) -> Option<String> {
    let hex = tag.strip_prefix(HOLDING_TAG_PREFIX)?;
    let well_formed = hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    well_formed.then(|| format!("sha256:{hex}"))
}
