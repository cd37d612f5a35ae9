//! Group membership resources, the whole kind: a membership is added to an account without
//! taking over the account, removed on undeclare only when the mesh added it, and its drift (the
//! account out of the group).

use super::super::look::{Look, Say};
use super::super::release::forgot;
use super::super::{Attempt, Engine};
use crate::state::Origin;
use crate::ApplyError;
use mesh_model::declaration::{MembershipSpec, Resource};
use mesh_model::report::Finding;

impl<'a> Engine<'a, '_> {
    /// What is at a declared membership now: the account a member already (found), or one
    /// the mesh can add (made); `None` when the account or group is not there.
    pub(super) fn observe_membership(&self, m: &MembershipSpec) -> Option<Origin> {
        match self.db() {
            Ok(db) if db.is_member(&m.account, &m.group) => Some(Origin::FoundMembership),
            Ok(db) if db.membership_problem(&m.account, &m.group).is_none() => Some(Origin::Made),
            _ => None,
        }
    }

    /// Whether a membership is still to be added; a reason when it cannot be.
    pub(in crate::engine) fn membership_missing(
        &self,
        spec: &MembershipSpec,
    ) -> Result<bool, String> {
        let db = self.db()?;
        if let Some(problem) = db.membership_problem(&spec.account, &spec.group) {
            return Err(problem);
        }
        Ok(!db.is_member(&spec.account, &spec.group))
    }

    /// Adds a lone membership that is not there yet.
    pub(super) fn apply_membership(
        &mut self,
        resource: &Resource,
        spec: &MembershipSpec,
    ) -> Result<Attempt, ApplyError> {
        match self.membership_missing(spec) {
            Ok(true) => {}
            Ok(false) => return Ok(Attempt::Took(Vec::new())),
            Err(reason) => return Ok(Attempt::Failed(reason)),
        }
        self.ensure_record(resource)?;
        Ok(self
            .add_membership(&resource.id, &spec.account, &spec.group)
            .into())
    }

    pub(in crate::engine) fn add_membership(
        &mut self,
        id: &str,
        account: &str,
        group: &str,
    ) -> Result<Vec<String>, String> {
        let result = self.seams.accounts.add_membership(account, group);
        self.reload_accounts();
        result.map_err(|e| format!("cannot add `{account}` to `{group}`: {e}"))?;
        if !self.db()?.is_member(account, group) {
            return Err(format!(
                "`{account}` is not in `{group}` after adding it (etc/group)"
            ));
        }
        self.findings.push(Finding {
            resource: id.to_owned(),
            message: format!(
                "`{account}` was added to `{group}`: a new login is needed before `{account}`'s \
                 processes have the group"
            ),
        });
        Ok(vec!["added".to_owned()])
    }

    /// Gives back `account`'s membership of `group`: removed when the mesh added it.
    pub(super) fn release_membership(
        &mut self,
        account: &str,
        group: &str,
        origin: &Origin,
    ) -> Result<String, String> {
        match origin {
            Origin::Made => {
                let member = self.db()?.is_member(account, group);
                if !member {
                    return Ok(format!("`{account}` was already out of `{group}`"));
                }
                let result = self.seams.accounts.remove_membership(account, group);
                self.reload_accounts();
                result.map_err(|e| format!("cannot remove `{account}` from `{group}`: {e}"))?;
                Ok(format!(
                    "removed `{account}` from `{group}`, a membership the mesh added"
                ))
            }
            Origin::FoundMembership => Ok(format!(
                "kept `{account}` in `{group}`: it was a member before the mesh"
            )),
            other => Ok(forgot(
                "membership",
                &format!("{account} in {group}"),
                other,
            )),
        }
    }
}

/// How the membership `spec` differs from what the host left there: the account out of the
/// group.
pub(super) fn drift(spec: &MembershipSpec, look: &mut Look<'_>, say: &mut Say<'_>) {
    if let Some(db) = &look.accounts {
        if !db.is_member(&spec.account, &spec.group) {
            say(
                "membership",
                format!("{} in {}", spec.account, spec.group),
                format!("{} not in {}", spec.account, spec.group),
            );
        }
    }
}
