//! The accounts an apply reads (owners' ids, kept per owner and group), and group membership
//! resources: a membership is added to an account without taking over the account.

use super::{Attempt, Engine};
use crate::accounts::AccountDatabase;
use crate::ApplyError;
use mesh_model::declaration::{MembershipSpec, Resource};
use mesh_model::report::Finding;

/// How many owner and group pairs an apply keeps the ids of ([`Engine::owner_ids`]).
const OWNERS_KEPT: usize = 16;

impl<'a> Engine<'a, '_> {
    pub(super) fn db(&self) -> Result<&AccountDatabase, String> {
        self.accounts
            .as_ref()
            .map_err(|e| format!("cannot read the accounts: {e}"))
    }

    pub(super) fn reload_accounts(&mut self) {
        self.accounts = self.seams.accounts.read().map_err(|e| e.to_string());
        self.owners.clear();
    }

    /// The uid of account `owner` and gid of group `group`, as the accounts read say; the
    /// answer for each pair is kept until the accounts are read again, so many files of one
    /// owner ask the accounts once (a no-op apply of 10,000 files).
    pub(super) fn owner_ids(&mut self, owner: &str, group: &str) -> Result<(u32, u32), String> {
        if let Some(&(_, _, ids)) = self
            .owners
            .iter()
            .find(|(o, g, _)| o == owner && g == group)
        {
            return Ok(ids);
        }
        let ids = self.look_up_owner_ids(owner, group)?;
        if self.owners.len() < OWNERS_KEPT {
            self.owners.push((owner.to_owned(), group.to_owned(), ids));
        }
        Ok(ids)
    }

    fn look_up_owner_ids(&self, owner: &str, group: &str) -> Result<(u32, u32), String> {
        let db = self.db()?;
        let uid = db.uid(owner).ok_or_else(|| {
            format!(
                "owner `{owner}` is not an account on this machine ({})",
                db.where_accounts()
            )
        })?;
        let gid = db.gid(group).ok_or_else(|| {
            format!(
                "group `{group}` is not a group on this machine ({})",
                db.where_groups()
            )
        })?;
        Ok((uid, gid))
    }

    /// Whether a membership is still to be added; a reason when it cannot be.
    pub(super) fn membership_missing(&self, spec: &MembershipSpec) -> Result<bool, String> {
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

    pub(super) fn add_membership(
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
}

/// How the membership `spec` differs from what the host left there: the account out of the
/// group.
pub(super) fn drift(
    spec: &MembershipSpec,
    look: &mut super::look::Look<'_>,
    say: &mut super::look::Say<'_>,
) {
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
