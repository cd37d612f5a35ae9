//! The accounts an apply reads: owners' ids, kept per owner and group.

use super::Engine;
use crate::accounts::AccountDatabase;

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
}
