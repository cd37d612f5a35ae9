//! Reading directories into [`ModuleTree`]s and catalogues into [`CatalogueSource`]s.

use mesh_model::module::{CatalogueSource, EntryKind, ModuleTree};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// An error reading a directory tree.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// A path could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file name that is not UTF-8.
    #[error("{path} has a name that is not UTF-8")]
    Name {
        /// The path.
        path: PathBuf,
    },
}

/// Reads every entry under `dir` (not following links) into a tree keyed by relative path.
///
/// # Errors
/// [`TreeError::Read`] naming the path that could not be read.
pub fn read_tree(dir: &Path) -> Result<ModuleTree, TreeError> {
    let mut tree = ModuleTree::default();
    walk(dir, dir, &mut tree)?;
    Ok(tree)
}

fn walk(base: &Path, dir: &Path, tree: &mut ModuleTree) -> Result<(), TreeError> {
    let read = |path: &Path, source| TreeError::Read {
        path: path.to_owned(),
        source,
    };
    let mut entries: Vec<_> = fs::read_dir(dir)
        .map_err(|e| read(dir, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| read(dir, e))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let relative = path
            .strip_prefix(base)
            .expect("walked paths are under the base")
            .to_str()
            .ok_or_else(|| TreeError::Name { path: path.clone() })?
            .to_owned();
        let meta = fs::symlink_metadata(&path).map_err(|e| read(&path, e))?;
        let kind = meta.file_type();
        if kind.is_symlink() {
            let target = fs::read_link(&path).map_err(|e| read(&path, e))?;
            tree.entries.insert(
                relative,
                EntryKind::Symlink {
                    target: target.to_string_lossy().into_owned(),
                },
            );
        } else if kind.is_dir() {
            tree.entries.insert(relative, EntryKind::Directory);
            walk(base, &path, tree)?;
        } else if kind.is_file() {
            let bytes = fs::read(&path).map_err(|e| read(&path, e))?;
            let executable = meta.permissions().mode() & 0o111 != 0;
            tree.entries
                .insert(relative, EntryKind::File { bytes, executable });
        } else {
            tree.entries.insert(relative, EntryKind::Other);
        }
    }
    Ok(())
}

/// Reads a catalogue: every directory under `modules_dir` is a module directory.
///
/// `prefix` names the directory in diagnostics (e.g. `modules`). A plain file directly under
/// `modules_dir` is ignored (a README, say).
///
/// # Errors
/// [`TreeError`] naming the path that could not be read.
pub fn read_catalogue(modules_dir: &Path, prefix: &str) -> Result<CatalogueSource, TreeError> {
    let mut source = CatalogueSource {
        prefix: prefix.to_owned(),
        ..CatalogueSource::default()
    };
    let mut entries: Vec<_> = fs::read_dir(modules_dir)
        .map_err(|source| TreeError::Read {
            path: modules_dir.to_owned(),
            source,
        })?
        .collect::<Result<_, _>>()
        .map_err(|source| TreeError::Read {
            path: modules_dir.to_owned(),
            source,
        })?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let meta = fs::symlink_metadata(&path).map_err(|source| TreeError::Read {
            path: path.clone(),
            source,
        })?;
        let name = entry
            .file_name()
            .into_string()
            .map_err(|_| TreeError::Name { path: path.clone() })?;
        if meta.file_type().is_symlink() {
            // A module directory that is a link: recorded so validation refuses it.
            let mut tree = ModuleTree::default();
            tree.entries.insert(
                ".".to_owned(),
                EntryKind::Symlink {
                    target: fs::read_link(&path)
                        .map(|t| t.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                },
            );
            source.modules.insert(name, tree);
        } else if meta.is_dir() {
            source.modules.insert(name, read_tree(&path)?);
        }
    }
    Ok(source)
}
