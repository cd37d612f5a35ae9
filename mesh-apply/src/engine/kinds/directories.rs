//! Directory resources, the whole kind: what is at one before it changes, what applying one would
//! change, making it or giving it its mode and owner, giving it back, and its drift. A
//! directory's data outlives its declaration: one the mesh made is removed only when empty.

use super::super::discover::Prepared;
use super::super::look::{drift_of_mode_owner, Look, Say};
use super::super::{Attempt, Engine};
use super::files::mode_owner_differences;
use crate::fsops;
use crate::paths::Resolved;
use crate::state::Origin;
use crate::ApplyError;
use mesh_model::declaration::{DirectorySpec, Resource};
use std::fs;
use std::io;
use std::path::PathBuf;

/// What applying a directory resource would change, found before anything changes.
pub(in crate::engine) struct DirectoryChange {
    /// The path under the root.
    pub(in crate::engine) full: PathBuf,
    /// Ancestors (machine paths) that do not exist yet.
    pub(in crate::engine) missing_parents: Vec<String>,
    /// Nothing is there: the directory is made.
    pub(in crate::engine) create: bool,
    /// Mode, uid and gid declared.
    pub(in crate::engine) wanted: (u32, u32, u32),
    /// Mode, uid and gid now (the declared ones when it is to be made).
    pub(in crate::engine) before: (u32, u32, u32),
    /// What differs (`created` when nothing is there); empty when it is as declared.
    pub(in crate::engine) changed: Vec<String>,
}

impl<'a> Engine<'a, '_> {
    /// What is at a declared directory now, as an origin; `None` when something other than a
    /// directory is there.
    pub(super) fn observe_directory(&mut self, d: &DirectorySpec) -> Option<Origin> {
        let Ok(resolved) = self.paths.resolve(&d.path) else {
            return None;
        };
        match &resolved.meta {
            None => Some(Origin::Made),
            Some(meta) if meta.is_dir() => {
                let (mode, uid, gid) = fsops::mode_owner(meta);
                Some(Origin::FoundDirectory { mode, uid, gid })
            }
            Some(_) => None,
        }
    }

    /// Gives back the directory at `path`: one the mesh made is removed when empty (and kept
    /// while a declared path needs it, or while it holds data the mesh did not put there); one
    /// it found gets back its mode and owner, and is never removed.
    pub(super) fn release_directory(
        &mut self,
        path: &str,
        origin: &Origin,
    ) -> Result<String, String> {
        let path = &path.to_owned();
        match origin {
            Origin::Made => {
                if self.needed_as_parent(path) {
                    self.state.made_parents.insert(path.clone());
                    return Ok(format!(
                        "kept `{path}`, which the mesh made, as the parent of declared paths"
                    ));
                }
                // Parents the mesh made inside it for other paths go first.
                self.release_unneeded_parents_under(Some(path))
                    .map_err(|e| e.to_string())?;
                let resolved = self.paths.resolve(path)?;
                match &resolved.meta {
                    None => Ok(format!("`{path}` the mesh made was already gone")),
                    Some(meta) if meta.is_dir() => match fs::remove_dir(&resolved.full) {
                        Ok(()) => {
                            self.paths.forget(path);
                            self.touched(&resolved.full);
                            Ok(format!("removed `{path}`, which the mesh made"))
                        }
                        Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => {
                            self.kept_dirs.push(path.clone());
                            Ok(format!(
                                "kept `{path}`: it holds data the mesh did not put there"
                            ))
                        }
                        Err(e) => Err(format!("cannot remove `{path}`: {e}")),
                    },
                    Some(_) => Ok(format!(
                        "left `{path}` alone: it is no longer the directory the mesh made"
                    )),
                }
            }
            Origin::FoundDirectory { mode, uid, gid } => {
                let resolved = self.paths.resolve(path)?;
                match &resolved.meta {
                    Some(meta) if meta.is_dir() => {
                        if fsops::mode_owner(meta) != (*mode, *uid, *gid) {
                            fsops::set_mode_owner(&resolved.full, *mode, *uid, *gid)
                                .map_err(|e| format!("cannot give back `{path}`: {e}"))?;
                        }
                        Ok(format!(
                            "kept `{path}` and gave back its mode and owner as found"
                        ))
                    }
                    _ => Ok(format!(
                        "`{path}` the mesh found is no longer a directory; left alone"
                    )),
                }
            }
            other => Ok(super::super::release::forgot("directory", path, other)),
        }
    }

    /// What applying a directory resource would change; a reason when it cannot be applied.
    pub(in crate::engine) fn examine_directory(
        &mut self,
        spec: &DirectorySpec,
    ) -> Result<DirectoryChange, String> {
        let (uid, gid) = self.owner_ids(&spec.owner, &spec.group)?;
        let Resolved {
            full,
            missing_parents,
            meta,
        } = self.paths.resolve(&spec.path)?;
        let wanted = (spec.mode, uid, gid);
        let (create, before, changed) = match &meta {
            None => (true, wanted, vec!["created".to_owned()]),
            Some(meta) if meta.is_dir() => (
                false,
                fsops::mode_owner(meta),
                mode_owner_differences(meta, wanted),
            ),
            Some(_) => return Err(format!("`{}` is not a directory", spec.path)),
        };
        Ok(DirectoryChange {
            full,
            missing_parents,
            create,
            wanted,
            before,
            changed,
        })
    }

    /// Brings a lone directory resource to what is declared: made, or given its mode and owner.
    pub(super) fn apply_directory(
        &mut self,
        resource: &Resource,
        spec: &DirectorySpec,
    ) -> Result<Attempt, ApplyError> {
        let change = match self.examine_directory(spec) {
            Ok(change) => change,
            Err(reason) => return Ok(Attempt::Failed(reason)),
        };
        if change.changed.is_empty() {
            return Ok(Attempt::Took(change.changed));
        }
        if let Prepared::Failed(reason) = self.prepare_change(resource, &change.missing_parents)? {
            return Ok(Attempt::Failed(reason));
        }
        let DirectoryChange {
            full,
            create,
            wanted: (mode, uid, gid),
            changed,
            ..
        } = change;
        let path = &spec.path;
        if create {
            if let Err(e) = fsops::make_dir(&full, mode, uid, gid) {
                return Ok(Attempt::Failed(format!("cannot create `{path}`: {e}")));
            }
            self.touched(&full);
            self.paths.made_dir(path);
        } else if let Err(e) = fsops::set_mode_owner(&full, mode, uid, gid) {
            return Ok(Attempt::Failed(format!(
                "cannot set mode and owner of `{path}`: {e}"
            )));
        }
        Ok(Attempt::Took(changed))
    }
}

/// How the directory `spec` differs from what the host left there.
pub(super) fn drift(spec: &DirectorySpec, look: &mut Look<'_>, say: &mut Say<'_>) {
    let meta = match look.paths.resolve(&spec.path) {
        Ok(resolved) => resolved.meta,
        Err(problem) => {
            say("exists", "a directory".into(), problem);
            return;
        }
    };
    match meta {
        Some(meta) if meta.is_dir() => drift_of_mode_owner(
            &meta,
            (spec.mode, &spec.owner, &spec.group),
            &look.accounts,
            say,
        ),
        Some(_) => say("exists", "a directory".into(), "not a directory".into()),
        None => say("exists", "a directory".into(), "nothing".into()),
    }
}
