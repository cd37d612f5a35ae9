//! The outcomes of an apply's declared resources, kept by each resource's place in the
//! declaration while the apply runs, and made the report's map (by id) once at its end.
//!
//! A no-op apply of many files gives each one an outcome: kept in a map by id, every outcome
//! cost a copy of its id and a search among ids spread over the heap (a tenth of
//! such an apply). Here an outcome is put in its resource's slot; the map is built once, in the
//! declaration's order (its resources are sorted by id, a declaration's rule), without a
//! search.

use mesh_model::declaration::Declaration;
use mesh_model::report::Outcome;
use std::collections::BTreeMap;

/// Outcomes by the index of their resource in a declaration.
pub(crate) struct Outcomes<'a> {
    declaration: &'a Declaration,
    /// `slots[i]`: the outcome of `declaration.resources[i]`, once it has one.
    slots: Vec<Option<Outcome>>,
    /// Outcomes of ids the declaration does not hold (none are given today; kept so that the
    /// report would still hold one).
    others: BTreeMap<String, Outcome>,
}

impl<'a> Outcomes<'a> {
    pub(crate) fn new(declaration: &'a Declaration) -> Self {
        let mut slots = Vec::new();
        slots.resize_with(declaration.resources.len(), || None);
        Outcomes {
            declaration,
            slots,
            others: BTreeMap::new(),
        }
    }

    /// The index of declared resource `id`.
    fn index_of(&self, id: &str) -> Option<usize> {
        self.declaration
            .resources
            .binary_search_by(|r| r.id.as_str().cmp(id))
            .ok()
    }

    /// Gives the resource at `index` in the declaration its outcome (replacing any).
    pub(crate) fn set(&mut self, index: usize, outcome: Outcome) {
        self.slots[index] = Some(outcome);
    }

    /// Gives resource `id` its outcome (replacing any).
    pub(crate) fn insert(&mut self, id: String, outcome: Outcome) {
        match self.index_of(&id) {
            Some(index) => self.set(index, outcome),
            None => {
                self.others.insert(id, outcome);
            }
        }
    }

    /// The outcome of resource `id`, if it has one yet.
    pub(crate) fn get(&self, id: &str) -> Option<&Outcome> {
        match self.index_of(id) {
            Some(index) => self.slots[index].as_ref(),
            None => self.others.get(id),
        }
    }

    /// The report's map: resource id → outcome.
    pub(crate) fn into_map(self) -> BTreeMap<String, Outcome> {
        let declared = self
            .declaration
            .resources
            .iter()
            .zip(self.slots)
            .filter_map(|(resource, outcome)| Some((resource.id.clone(), outcome?)));
        if self.others.is_empty() {
            // In id order already: the map is built without a search.
            declared.collect()
        } else {
            let mut map = self.others;
            map.extend(declared);
            map
        }
    }
}
