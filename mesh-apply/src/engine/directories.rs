//! Directory resources: what applying one would change, and making it or giving it its mode and
//! owner. A directory's data outlives its declaration (see `release`).

use super::discover::Prepared;
use super::files::mode_owner_differences;
use super::{Attempt, Engine};
use crate::fsops;
use crate::paths::Resolved;
use crate::ApplyError;
use mesh_model::declaration::{DirectorySpec, Resource};
use std::path::PathBuf;

/// What applying a directory resource would change, found before anything changes.
pub(super) struct DirectoryChange {
    /// The path under the root.
    pub(super) full: PathBuf,
    /// Ancestors (machine paths) that do not exist yet.
    pub(super) missing_parents: Vec<String>,
    /// Nothing is there: the directory is made.
    pub(super) create: bool,
    /// Mode, uid and gid declared.
    pub(super) wanted: (u32, u32, u32),
    /// Mode, uid and gid now (the declared ones when it is to be made).
    pub(super) before: (u32, u32, u32),
    /// What differs (`created` when nothing is there); empty when it is as declared.
    pub(super) changed: Vec<String>,
}

impl<'a> Engine<'a, '_> {
    /// What applying a directory resource would change; a reason when it cannot be applied.
    pub(super) fn examine_directory(
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
