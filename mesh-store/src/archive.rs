//! Deterministic archives of module trees, and unpacking them again.
//!
//! [`archive_tree`] turns a [`ModuleTree`] into gzip-compressed tar bytes whose digest depends
//! on the tree's paths, contents and executable bits alone. [`unpack_archive`] is its inverse,
//! used by a host that fetched an archive from the store.
//!
//! # Guarantees
//! - Entries are written in the tree's sorted path order (a directory before what it holds),
//!   with mtime [`ARCHIVE_MTIME`], uid and gid 0, no user or group names, and mode `0755` for
//!   directories and executable files, `0644` for every other file.
//! - The gzip header carries no mtime and no file name, and the OS byte is fixed; compression is
//!   flate2's default backend (miniz_oxide) at level 6. The same tree archived twice, on any
//!   machine, with the same build of this crate, gives the same bytes.
//! - An archive never holds a link, a device or any other special file: archiving a tree that
//!   holds one is refused, and so is unpacking an archive that holds one, or a path that is
//!   absolute or climbs out with `..`.

use mesh_model::build::ArchiveRef;
use mesh_model::module::{EntryKind, ModuleTree};
use std::io::Read;
use std::path::{Component, Path};

/// The modification time written for every entry (seconds since the epoch).
pub const ARCHIVE_MTIME: u64 = 0;

/// The media type of an archive, as the layer of its holding manifest.
pub const ARCHIVE_MEDIA_TYPE: &str = "application/vnd.mesh.module.layer.v1.tar+gzip";

/// An archive: its bytes and the reference (digest and size) that names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archive {
    /// The gzip-compressed tar.
    pub bytes: Vec<u8>,
    /// `sha256:<hex>` of [`Archive::bytes`] and their length.
    pub reference: ArchiveRef,
}

impl Archive {
    /// Wraps bytes already made (read back from a store, say), computing their reference.
    pub fn from_bytes(bytes: Vec<u8>) -> Archive {
        let reference = ArchiveRef {
            digest: mesh_model::sha256_digest(&bytes),
            size: bytes.len() as u64,
        };
        Archive { bytes, reference }
    }
}

/// Why a tree could not be archived, or an archive not unpacked.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The tree holds a symbolic link; archives hold none.
    #[error("`{path}` is a symbolic link (to `{target}`); an archive holds no links")]
    Link {
        /// The entry's path in the tree or archive.
        path: String,
        /// Where it points.
        target: String,
    },
    /// The tree or archive holds something that is neither a file nor a directory.
    #[error("`{path}` is neither a file nor a directory; an archive holds only those")]
    Special {
        /// The entry's path.
        path: String,
    },
    /// A path that is empty, absolute, or climbs out with `..`.
    #[error("`{path}` is not a plain relative path inside the module")]
    Path {
        /// The path as found.
        path: String,
    },
    /// The archive's bytes are not the digest the caller expected.
    #[error("archive bytes are {actual}, not {expected}")]
    Digest {
        /// The digest asked for.
        expected: String,
        /// The digest of the bytes given.
        actual: String,
    },
    /// The bytes are not a gzip-compressed tar, or writing one failed.
    #[error("archive is not a readable gzip-compressed tar")]
    Format {
        /// The reader's or writer's complaint.
        #[source]
        source: std::io::Error,
    },
}

fn format_error(source: std::io::Error) -> ArchiveError {
    ArchiveError::Format { source }
}

/// Archives a module tree deterministically.
///
/// # Guarantees
/// The same tree gives the same bytes, so the same digest (see the module docs for how).
///
/// # Errors
/// [`ArchiveError::Link`] or [`ArchiveError::Special`] for an entry that is neither a file nor a
/// directory, [`ArchiveError::Path`] for a path that is not plain and relative.
pub fn archive_tree(tree: &ModuleTree) -> Result<Archive, ArchiveError> {
    let encoder = flate2::GzBuilder::new()
        .mtime(0)
        .operating_system(255)
        .write(Vec::new(), flate2::Compression::new(6));
    let mut builder = tar::Builder::new(encoder);
    builder.mode(tar::HeaderMode::Deterministic);
    for (path, entry) in &tree.entries {
        check_path(path)?;
        let mut header = tar::Header::new_gnu();
        header.set_mtime(ARCHIVE_MTIME);
        header.set_uid(0);
        header.set_gid(0);
        match entry {
            EntryKind::File { bytes, executable } => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(if *executable { 0o755 } else { 0o644 });
                header.set_size(bytes.len() as u64);
                builder
                    .append_data(&mut header, path, bytes.as_slice())
                    .map_err(format_error)?;
            }
            EntryKind::Directory => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(0o755);
                header.set_size(0);
                builder
                    .append_data(&mut header, path, std::io::empty())
                    .map_err(format_error)?;
            }
            EntryKind::Symlink { target } => {
                return Err(ArchiveError::Link {
                    path: path.clone(),
                    target: target.clone(),
                })
            }
            EntryKind::Other => return Err(ArchiveError::Special { path: path.clone() }),
        }
    }
    let encoder = builder.into_inner().map_err(format_error)?;
    let bytes = encoder.finish().map_err(format_error)?;
    Ok(Archive::from_bytes(bytes))
}

fn check_path(path: &str) -> Result<(), ArchiveError> {
    let plain = !path.is_empty()
        && Path::new(path)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
    if plain {
        Ok(())
    } else {
        Err(ArchiveError::Path {
            path: path.to_owned(),
        })
    }
}

/// Unpacks archive bytes into a tree, checking them against `expected` first when given.
///
/// # Guarantees
/// Nothing is written anywhere: the tree is a value. `unpack_archive(&archive_tree(t)?.bytes,
/// None)` gives back `t` for every tree `archive_tree` accepts.
///
/// # Errors
/// [`ArchiveError::Digest`] when the bytes are not `expected`; [`ArchiveError::Link`],
/// [`ArchiveError::Special`] or [`ArchiveError::Path`] for an entry an archive must not hold;
/// [`ArchiveError::Format`] for bytes that are not a gzip-compressed tar.
pub fn unpack_archive(
    bytes: &[u8],
    expected: Option<&ArchiveRef>,
) -> Result<ModuleTree, ArchiveError> {
    if let Some(expected) = expected {
        let actual = mesh_model::sha256_digest(bytes);
        if actual != expected.digest || bytes.len() as u64 != expected.size {
            return Err(ArchiveError::Digest {
                expected: expected.digest.clone(),
                actual,
            });
        }
    }
    let mut reader = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    let mut tree = ModuleTree::default();
    for entry in reader.entries().map_err(format_error)? {
        let mut entry = entry.map_err(format_error)?;
        let raw = entry.path().map_err(format_error)?;
        let path = raw.to_string_lossy().trim_end_matches('/').to_owned();
        check_path(&path)?;
        let kind = entry.header().entry_type();
        match kind {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let mode = entry.header().mode().map_err(format_error)?;
                let mut bytes = Vec::new();
                entry.read_to_end(&mut bytes).map_err(format_error)?;
                tree.entries.insert(
                    path,
                    EntryKind::File {
                        bytes,
                        executable: mode & 0o111 != 0,
                    },
                );
            }
            tar::EntryType::Directory => {
                tree.entries.insert(path, EntryKind::Directory);
            }
            tar::EntryType::Symlink | tar::EntryType::Link => {
                let target = entry
                    .link_name()
                    .map_err(format_error)?
                    .map(|t| t.to_string_lossy().into_owned())
                    .unwrap_or_default();
                return Err(ArchiveError::Link { path, target });
            }
            _ => return Err(ArchiveError::Special { path }),
        }
    }
    Ok(tree)
}
