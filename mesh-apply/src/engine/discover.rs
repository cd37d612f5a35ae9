//! Recording what is taken: what is at each newly declared resource is recorded (made or found,
//! with the found bytes kept) before anything changes, and a file's or directory's missing
//! parents are recorded before they are made.

use super::Engine;
use crate::state::Record;
use crate::state::Target;
use crate::ApplyError;
use mesh_model::declaration::Resource;
use std::fs;
use std::io;

/// Whether a file or directory may change now: its record is written and its parents are there.
pub(super) enum Prepared {
    /// It may change.
    Ready,
    /// A missing parent could not be made, and why: the resource fails.
    Failed(String),
}

impl<'a> Engine<'a, '_> {
    /// Records, before anything is changed, what is at every newly declared resource.
    pub(super) fn discover(&mut self) -> Result<(), ApplyError> {
        let declaration = self.declaration;
        // Both are sorted by id: the resources without a record are found in one walk through
        // the two, no search.
        let mut recorded = self.state.resources.keys().peekable();
        let new: Vec<&Resource> = declaration
            .resources
            .iter()
            .filter(|resource| {
                while recorded.next_if(|id| **id < resource.id).is_some() {}
                recorded.peek().is_none_or(|id| **id != resource.id)
            })
            .collect();
        let mut added = false;
        for resource in new {
            if self.blocked.contains_key(&resource.id) {
                continue;
            }
            if let Some(origin) = self.observe(resource)? {
                self.state.resources.insert(
                    resource.id.clone(),
                    Record {
                        target: Target::of(&resource.spec),
                        origin,
                    },
                );
                added = true;
            }
        }
        if added || self.dirty {
            self.save()?;
        }
        Ok(())
    }

    /// Makes sure a record exists (written) before the resource is changed.
    pub(super) fn ensure_record(&mut self, resource: &Resource) -> Result<(), ApplyError> {
        self.begin_change()?;
        if self.state.resources.contains_key(&resource.id) {
            return Ok(());
        }
        if let Some(origin) = self.observe(resource)? {
            self.state.resources.insert(
                resource.id.clone(),
                Record {
                    target: Target::of(&resource.spec),
                    origin,
                },
            );
            self.save()?;
        }
        Ok(())
    }

    /// Creates missing parent directories, recording them first.
    fn make_parents(&mut self, missing: &[String]) -> Result<Prepared, ApplyError> {
        if missing.is_empty() {
            return Ok(Prepared::Ready);
        }
        let mut new = false;
        for parent in missing {
            new |= self.state.made_parents.insert(parent.clone());
        }
        if new {
            self.save()?;
        }
        for parent in missing {
            let full = self.paths.full(parent);
            match fs::create_dir(&full) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Ok(Prepared::Failed(format!("cannot create `{parent}`: {e}"))),
            }
            if let Err(e) =
                fs::set_permissions(&full, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            {
                return Ok(Prepared::Failed(format!(
                    "cannot set the mode of `{parent}`: {e}"
                )));
            }
            self.touched(&full);
            self.paths.made_dir(parent);
        }
        Ok(Prepared::Ready)
    }

    /// Before a file or directory changes: its record is written and its missing parents made.
    pub(super) fn prepare_change(
        &mut self,
        resource: &Resource,
        missing_parents: &[String],
    ) -> Result<Prepared, ApplyError> {
        self.ensure_record(resource)?;
        self.make_parents(missing_parents)
    }
}
