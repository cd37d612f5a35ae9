//! Releasing what is no longer wanted: a resource no longer declared (what the mesh made is
//! removed, what it found is given back), the parent directories the mesh made that no declared
//! path needs any more, and what an interrupted apply left beside its paths.

use super::Engine;
use crate::fsops;
use crate::paths::is_ancestor;
use crate::state::{Origin, Record, Target};
use crate::ApplyError;
use mesh_model::declaration::Spec;
use mesh_model::report::{Finding, Outcome};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;

impl<'a> Engine<'a, '_> {
    /// Removes what an interrupted apply may have left: temporary files beside file paths, and
    /// the file copies and containers kept aside by a together group that was whole when the
    /// host stopped. (Those of a group left mid-commit were given back first, by
    /// [`super::group::put_back_group`]: a group's record gone says it was whole.)
    pub(super) fn remove_leftovers(&mut self) {
        let mut containers: BTreeMap<String, String> = self
            .declaration
            .resources
            .iter()
            .filter_map(|r| match &r.spec {
                Spec::Container(c) => Some((c.name.clone(), r.id.clone())),
                _ => None,
            })
            .collect();
        for (id, record) in &self.state.resources {
            if let Target::Container { name } = &record.target {
                containers.entry(name.clone()).or_insert_with(|| id.clone());
            }
        }
        for (name, id) in containers {
            let message = match self.seams.containers.let_go_leftover(&name) {
                Ok(None) => continue,
                Ok(Some(done)) => done,
                Err(e) => {
                    format!("cannot remove the container kept aside as `{name}.mesh-old`: {e}")
                }
            };
            self.findings.push(Finding {
                resource: id,
                message,
            });
        }
        let mut paths: BTreeSet<String> = self
            .declaration
            .resources
            .iter()
            .filter_map(|r| match &r.spec {
                Spec::File(f) => Some(f.path.clone()),
                _ => None,
            })
            .collect();
        paths.extend(
            self.state
                .resources
                .values()
                .filter_map(|r| match &r.target {
                    Target::File { path } => Some(path.clone()),
                    _ => None,
                }),
        );
        for path in paths {
            if let Ok(resolved) = self.paths.resolve(&path) {
                if resolved.missing_parents.is_empty() {
                    let _ = fsops::remove_if_present(&fsops::new_name(&resolved.full));
                    let _ = fsops::remove_if_present(&fsops::old_name(&resolved.full));
                }
            }
        }
    }

    pub(super) fn release_undeclared(&mut self) -> Result<(), ApplyError> {
        // Both are sorted by id: one walk through the two, no search.
        let mut declared = self.declaration.resources.iter().peekable();
        let mut to_release: Vec<(String, Record)> = Vec::new();
        for (id, record) in &self.state.resources {
            while declared.next_if(|r| r.id < *id).is_some() {}
            let same = declared
                .peek()
                .filter(|r| r.id == *id)
                .is_some_and(|r| record.target.is_of(&r.spec));
            if !same {
                to_release.push((id.clone(), record.clone()));
            }
        }
        if !to_release.is_empty() {
            self.begin_change()?;
        }
        // In the order each kind is given back ([`Target::release_rank`]).
        to_release.sort_by_key(|(id, record)| (record.target.release_rank(), id.clone()));
        for (id, record) in to_release {
            let declared_again = self.declaration.resource(&id).is_some();
            if let Some(step) = self.held_step(&record.target) {
                // A window holds it still: it is released by the first apply after the window.
                if declared_again {
                    self.blocked.insert(
                        id.clone(),
                        format!("what it declared before is held still by step `{step}`"),
                    );
                }
                self.undeclared.insert(id, Outcome::HeldStill { step });
                continue;
            }
            match self.release(&record) {
                Ok(detail) => {
                    self.state.resources.remove(&id);
                    if self.state.failures.remove(&id).is_some() || !declared_again {
                        self.dirty = true;
                    }
                    self.dirty = true;
                    self.undeclared
                        .insert(id.clone(), Outcome::Removed { detail });
                }
                Err(reason) => {
                    let outcome = self.failure(&id, "undeclared".to_owned(), reason.clone());
                    if declared_again {
                        self.blocked.insert(
                            id.clone(),
                            format!("what it declared before could not be released: {reason}"),
                        );
                    }
                    self.undeclared.insert(id, outcome);
                }
            }
        }
        Ok(())
    }

    /// Whether some declared file or directory lies under machine path `dir`.
    pub(super) fn needed_as_parent(&self, dir: &str) -> bool {
        let declared = self.declaration.resources.iter().any(|r| match &r.spec {
            Spec::File(f) => is_ancestor(dir, &f.path),
            Spec::Directory(d) => is_ancestor(dir, &d.path),
            // No other kind makes a path of its own.
            _ => false,
        });
        declared
            || self.state.resources.values().any(|r| {
                r.target
                    .whole_path()
                    .is_some_and(|path| is_ancestor(dir, path))
            })
    }

    /// Whether a declared or recorded file or directory is at machine path `path` itself.
    fn holds_resource_at(&self, path: &str) -> bool {
        let declared = self.declaration.resources.iter().any(|r| match &r.spec {
            Spec::File(f) => f.path == path,
            Spec::Directory(d) => d.path == path,
            // No other kind makes a path of its own.
            _ => false,
        });
        declared
            || self
                .state
                .resources
                .values()
                .any(|r| r.target.whole_path() == Some(path))
    }

    /// Removes parent directories the mesh made that no declared path needs any more (when
    /// empty).
    pub(super) fn release_unneeded_parents(&mut self) -> Result<(), ApplyError> {
        self.release_unneeded_parents_under(None)
    }

    /// As [`Engine::release_unneeded_parents`], for those under machine path `under` only.
    pub(super) fn release_unneeded_parents_under(
        &mut self,
        under: Option<&str>,
    ) -> Result<(), ApplyError> {
        let mut parents: Vec<String> = self
            .state
            .made_parents
            .iter()
            .filter(|p| under.is_none_or(|u| is_ancestor(u, p)))
            .cloned()
            .collect();
        parents.sort_by_key(|p| std::cmp::Reverse(crate::paths::depth(p)));
        for parent in parents {
            if self.needed_as_parent(&parent) || self.holds_resource_at(&parent) {
                continue;
            }
            let full = self.paths.full(&parent);
            let gone = match fs::symlink_metadata(&full) {
                Err(_) => true,
                Ok(meta) if !meta.is_dir() => true,
                Ok(_) => {
                    self.begin_change()?;
                    let removed = fs::remove_dir(&full).is_ok();
                    if removed {
                        self.touched(&full);
                    }
                    removed
                }
            };
            if gone {
                self.paths.forget(&parent);
                self.state.made_parents.remove(&parent);
                self.dirty = true;
            }
        }
        Ok(())
    }
}

/// What is said of a record whose origin does not fit its kind: it is forgotten, nothing given
/// back.
pub(super) fn forgot(kind: &str, what: &str, origin: &Origin) -> String {
    format!("forgot the {kind} `{what}`: its record ({origin:?}) does not fit it")
}
