//! A unit's turn, in dependency order: a unit with a blocked member fails, one whose dependency
//! did not take is skipped, one whose drift is to be left is held, one still in its backoff
//! waits, and otherwise it is attempted — a lone resource by its kind, a together group whole.

use super::group::group_reason;
use super::{Attempt, Engine};
use crate::order::Unit;
use crate::ApplyError;
use mesh_model::declaration::Resource;
use mesh_model::report::Outcome;

impl<'a> Engine<'a, '_> {
    /// Takes one unit (a lone resource or a together group) in its turn.
    pub(super) fn apply_unit(&mut self, unit: &Unit) -> Result<(), ApplyError> {
        let declaration = self.declaration;
        // A lone resource's unit (nearly every unit) lists its member without an allocation.
        let lone: [&Resource; 1];
        let group: Vec<&Resource>;
        let members: &[&Resource] = match unit.members.as_slice() {
            [only] => {
                lone = [&declaration.resources[*only]];
                &lone
            }
            many => {
                group = many.iter().map(|&i| &declaration.resources[i]).collect();
                &group
            }
        };
        // Blocked members (what they replace could not be released) fail the unit.
        if let Some((id, reason)) = members.iter().find_map(|r| {
            self.blocked
                .get(&r.id)
                .map(|reason| (r.id.clone(), reason.clone()))
        }) {
            for member in members {
                let reason = if member.id == id {
                    reason.clone()
                } else {
                    group_reason(unit, &id, &reason)
                };
                self.fail(&member.id, reason);
            }
            return Ok(());
        }
        // Gating: every dependency must have taken.
        if let Some(gate) = unit
            .deps
            .iter()
            .find(|dep| !self.outcomes.get(dep).is_some_and(Outcome::took))
        {
            for member in members {
                // One a window holds still is said so: the window, not the gate, holds it (a
                // container after its module's job, both held by a backup).
                let outcome = match self.held_container(member) {
                    Some(step) => Outcome::HeldStill { step },
                    None => Outcome::Skipped {
                        gated_by: gate.clone(),
                    },
                };
                self.outcomes.insert(member.id.clone(), outcome);
            }
            return Ok(());
        }
        // Drift its policy says to leave (*drift is seen, and reported even when corrected*).
        if members.iter().any(|r| self.seams.progress.leave(&r.id)) {
            for member in members {
                let step = crate::progress::LEFT_AS_FOUND.to_owned();
                self.outcomes
                    .insert(member.id.clone(), Outcome::HeldStill { step });
            }
            return Ok(());
        }
        // Backoff.
        if members
            .iter()
            .any(|r| self.state.failures.contains_key(&r.id))
        {
            return self.apply_unit_after_failures(unit, members);
        }
        self.attempt_unit(unit, members)
    }

    /// [`Engine::apply_unit`] for a unit some member of which failed before.
    fn apply_unit_after_failures(
        &mut self,
        unit: &Unit,
        members: &[&Resource],
    ) -> Result<(), ApplyError> {
        let waiting: Vec<(String, Option<Outcome>)> = members
            .iter()
            .map(|r| (r.id.clone(), self.waiting(r)))
            .collect();
        if let Some(first) = waiting
            .iter()
            .find(|(_, w)| w.is_some())
            .map(|(id, _)| id.clone())
        {
            for (id, outcome) in waiting {
                let outcome = outcome.unwrap_or_else(|| Outcome::Skipped {
                    gated_by: first.clone(),
                });
                self.outcomes.insert(id, outcome);
            }
            return Ok(());
        }
        self.attempt_unit(unit, members)
    }

    fn attempt_unit(&mut self, unit: &Unit, members: &[&Resource]) -> Result<(), ApplyError> {
        if unit.group.is_none() {
            let resource = members[0];
            if let Some(step) = self.held_container(resource) {
                // *A maintenance window holds containers still*: an apply during it leaves them
                // alone.
                self.outcomes
                    .insert(resource.id.clone(), Outcome::HeldStill { step });
                return Ok(());
            }
            match self.apply_one(resource)? {
                Attempt::Took(changed) => {
                    let outcome = self.success(&resource.id, changed);
                    self.outcomes.set(unit.members[0], outcome);
                }
                Attempt::Failed(reason) => self.fail(&resource.id, reason),
            }
            return Ok(());
        }
        self.apply_group(unit, members)
    }
}
