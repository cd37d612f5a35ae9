//! Machine paths under the root prefix, checked never to pass through a symbolic link (the rule “No
//! symbolic links to move data”).

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// A machine path resolved under the root.
pub(crate) struct Resolved {
    /// The path under the root.
    pub(crate) full: PathBuf,
    /// Ancestors (machine paths, shallowest first) that do not exist yet.
    pub(crate) missing_parents: Vec<String>,
    /// What is at the path now (`None`: nothing).
    pub(crate) meta: Option<fs::Metadata>,
}

/// A regular file's path opened under the root.
pub(crate) struct Opened {
    /// The path under the root.
    pub(crate) full: PathBuf,
    /// Ancestors (machine paths, shallowest first) that do not exist yet.
    pub(crate) missing_parents: Vec<String>,
    /// What is there now, opened for reading, with its metadata (`None`: nothing).
    pub(crate) current: Option<(fs::File, fs::Metadata)>,
}

/// Resolves machine paths under one root, remembering the ancestors already checked.
pub(crate) struct RootPaths {
    root: PathBuf,
    real_dirs: HashSet<String>,
}

impl RootPaths {
    pub(crate) fn new(root: &Path) -> Self {
        RootPaths {
            root: root.to_path_buf(),
            real_dirs: HashSet::new(),
        }
    }

    /// The path under the root for a machine path (no checks).
    pub(crate) fn full(&self, machine_path: &str) -> PathBuf {
        // `root.join(relative)`, made at its length at once (join grows a copy of the root).
        let relative = machine_path.trim_start_matches('/');
        let mut full = PathBuf::with_capacity(self.root.as_os_str().len() + 1 + relative.len());
        full.push(&self.root);
        full.push(relative);
        full
    }

    /// Notes that a directory now exists (the engine made it).
    pub(crate) fn made_dir(&mut self, machine_path: &str) {
        self.real_dirs.insert(machine_path.to_owned());
    }

    /// Forgets what is known of a directory (it was removed).
    pub(crate) fn forget(&mut self, machine_path: &str) {
        self.real_dirs.remove(machine_path);
    }

    /// Resolves `machine_path`: every existing ancestor must be a real directory, and the path
    /// itself must not be a symbolic link.
    ///
    /// Errors are sentences naming machine paths.
    pub(crate) fn resolve(&mut self, machine_path: &str) -> Result<Resolved, String> {
        let (full, missing_parents) = self.resolve_parent(machine_path)?;
        let meta = if missing_parents.is_empty() {
            match fs::symlink_metadata(&full) {
                Ok(meta) if meta.file_type().is_symlink() => return Err(symlink(machine_path)),
                Ok(meta) => Some(meta),
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => return Err(format!("cannot examine `{machine_path}`: {e}")),
            }
        } else {
            None
        };
        Ok(Resolved {
            full,
            missing_parents,
            meta,
        })
    }

    /// Opens the regular file at `machine_path` for reading, never following a link, with its
    /// metadata; `None` when nothing is there. One open and one fstat: the no-op apply's path.
    pub(crate) fn open_file(&mut self, machine_path: &str) -> Result<Opened, String> {
        use nix::fcntl::OFlag;
        use std::os::unix::fs::OpenOptionsExt as _;
        let (full, missing_parents) = self.resolve_parent(machine_path)?;
        if !missing_parents.is_empty() {
            return Ok(Opened {
                full,
                missing_parents,
                current: None,
            });
        }
        let opened = fs::OpenOptions::new()
            .read(true)
            .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits())
            .open(&full);
        let examine = |e: io::Error| format!("cannot examine `{machine_path}`: {e}");
        match opened {
            Ok(file) => {
                let meta = file.metadata().map_err(examine)?;
                Ok(Opened {
                    full,
                    missing_parents,
                    current: Some((file, meta)),
                })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Opened {
                full,
                missing_parents,
                current: None,
            }),
            Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) => {
                Err(symlink(machine_path))
            }
            Err(e) => Err(examine(e)),
        }
    }

    /// Checks every ancestor of `machine_path`; returns the path under the root and the
    /// ancestors that do not exist yet.
    fn resolve_parent(&mut self, machine_path: &str) -> Result<(PathBuf, Vec<String>), String> {
        // Fast path: the parent is already known to be a real directory.
        if let Some(cut) = machine_path.rfind('/').filter(|&cut| cut > 0) {
            if self.real_dirs.contains(&machine_path[..cut]) {
                return Ok((self.full(machine_path), Vec::new()));
            }
        }
        let mut missing_parents = Vec::new();
        let mut prefix = String::new();
        let segments: Vec<&str> = machine_path.split('/').filter(|s| !s.is_empty()).collect();
        let Some((_, ancestors)) = segments.split_last() else {
            return Err(format!("`{machine_path}` names no path"));
        };
        for segment in ancestors {
            prefix.push('/');
            prefix.push_str(segment);
            if !missing_parents.is_empty() {
                missing_parents.push(prefix.clone());
                continue;
            }
            if self.real_dirs.contains(&prefix) {
                continue;
            }
            match fs::symlink_metadata(self.full(&prefix)) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(format!(
                        "`{machine_path}` passes through the symbolic link `{prefix}`; the mesh \
                         does not follow links"
                    ))
                }
                Ok(meta) if meta.is_dir() => {
                    self.real_dirs.insert(prefix.clone());
                }
                Ok(_) => {
                    return Err(format!(
                        "`{machine_path}` cannot be made: `{prefix}` is not a directory"
                    ))
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    missing_parents.push(prefix.clone());
                }
                Err(e) => return Err(format!("cannot examine `{prefix}`: {e}")),
            }
        }
        Ok((self.full(machine_path), missing_parents))
    }
}

fn symlink(machine_path: &str) -> String {
    format!("`{machine_path}` is a symbolic link; the mesh does not manage links")
}

/// Whether machine path `ancestor` is a strict ancestor of `path`.
pub(crate) fn is_ancestor(ancestor: &str, path: &str) -> bool {
    path.len() > ancestor.len()
        && path.starts_with(ancestor)
        && path.as_bytes()[ancestor.len()] == b'/'
}

/// The depth of a machine path (`/a/b` is 2).
pub(crate) fn depth(path: &str) -> usize {
    path.split('/').filter(|s| !s.is_empty()).count()
}
