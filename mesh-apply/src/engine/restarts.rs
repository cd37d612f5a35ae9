//! The restarts a changed file owes the containers that restart on it (`restart_on`): owed
//! durably before the file is committed, and paid only when the container is brought to its spec
//! or undeclared, so that each is made at least once.

use super::Engine;
use crate::ApplyError;
use mesh_model::declaration::{ContainerSpec, Declaration, Spec};
use mesh_model::report::Outcome;
use std::collections::{BTreeMap, BTreeSet};

/// File resource id → the declared containers that restart on it.
fn restarters_of(declaration: &Declaration) -> BTreeMap<&str, Vec<&str>> {
    let mut out: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for resource in &declaration.resources {
        if let Spec::Container(c) = &resource.spec {
            for file in &c.restart_on {
                out.entry(file.as_str())
                    .or_default()
                    .push(resource.id.as_str());
            }
        }
    }
    out
}

impl<'a> Engine<'a, '_> {
    /// Whether container `id` must restart: a file it restarts on changed in this apply, or it
    /// owes a restart (such a file changed in an apply that stopped before the restart).
    pub(super) fn restart_wanted(
        &self,
        id: &str,
        spec: &ContainerSpec,
        changed_in_group: &BTreeSet<String>,
    ) -> bool {
        self.state.pending_restarts.contains(id)
            || spec.restart_on.iter().any(|id| {
                changed_in_group.contains(id)
                    || matches!(self.outcomes.get(id), Some(Outcome::Applied { .. }))
            })
    }

    /// Before files `ids` are committed: records, durably, that the declared containers
    /// restarting on them (and already made: one still to be created starts with the new
    /// files) owe a restart, so that a host killed before the restart makes it on the next
    /// apply (*resources declared together apply all-or-nothing*). Writes nothing when no such
    /// container restarts on them, or each owes one already.
    ///
    /// # Errors
    /// The state could not be written (nothing was committed then).
    pub(super) fn owe_restarts<'i>(
        &mut self,
        ids: impl IntoIterator<Item = &'i str>,
    ) -> Result<(), ApplyError> {
        let declaration = self.declaration;
        let restarters = self
            .restarters
            .get_or_insert_with(|| restarters_of(declaration));
        if restarters.is_empty() {
            return Ok(());
        }
        let mut added = false;
        for id in ids {
            for container in restarters.get(id).into_iter().flatten() {
                if self.state.resources.contains_key(*container)
                    && !self.state.pending_restarts.contains(*container)
                {
                    self.state.pending_restarts.insert((*container).to_owned());
                    added = true;
                }
            }
        }
        if added {
            self.save()?;
        }
        Ok(())
    }

    /// Container `id` was brought to its spec (restarted, or made, replaced or started with the
    /// files as they are now): it owes no restart any more.
    pub(super) fn paid_restart(&mut self, id: &str) {
        if self.state.pending_restarts.remove(id) {
            self.dirty = true;
        }
    }
}
