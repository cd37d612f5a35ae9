//! Recording what is taken: what is at each newly declared resource is recorded (made or found,
//! with the found bytes kept) before anything changes, and a file's or directory's missing
//! parents are recorded before they are made.

use super::{target_of, Engine};
use crate::fsops;
use crate::state::{Origin, Record};
use crate::ApplyError;
use mesh_model::declaration::{Resource, Spec};
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
    /// What is at a declared resource now, as an origin; `None` when it cannot be taken (the
    /// apply will fail it and say why).
    fn observe(&mut self, resource: &Resource) -> Result<Option<Origin>, ApplyError> {
        match &resource.spec {
            Spec::File(f) => {
                let Ok(resolved) = self.paths.resolve(&f.path) else {
                    return Ok(None);
                };
                match &resolved.meta {
                    None => Ok(Some(Origin::Made)),
                    Some(meta) if meta.is_file() => {
                        let Ok(bytes) = fs::read(&resolved.full) else {
                            return Ok(None);
                        };
                        let content = self.dir.keep_found(&bytes)?;
                        let (mode, uid, gid) = fsops::mode_owner(meta);
                        Ok(Some(Origin::FoundFile {
                            content,
                            mode,
                            uid,
                            gid,
                        }))
                    }
                    Some(_) => Ok(None),
                }
            }
            Spec::Directory(d) => {
                let Ok(resolved) = self.paths.resolve(&d.path) else {
                    return Ok(None);
                };
                Ok(match &resolved.meta {
                    None => Some(Origin::Made),
                    Some(meta) if meta.is_dir() => {
                        let (mode, uid, gid) = fsops::mode_owner(meta);
                        Some(Origin::FoundDirectory { mode, uid, gid })
                    }
                    Some(_) => None,
                })
            }
            Spec::Membership(m) => Ok(match self.db() {
                Ok(db) if db.is_member(&m.account, &m.group) => Some(Origin::FoundMembership),
                Ok(db) if db.membership_problem(&m.account, &m.group).is_none() => {
                    Some(Origin::Made)
                }
                _ => None,
            }),
            // A container or a network is recorded once its runtime has made it.
            Spec::Container(_) | Spec::Network(_) => Ok(None),
            // A job leaves nothing to record: what it last ran is kept in the state's `jobs`.
            Spec::Job(_) => Ok(None),
            Spec::Account(a) => Ok(self.observe_account(a)),
        }
    }

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
                        target: target_of(&resource.spec),
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
                    target: target_of(&resource.spec),
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
