//! Account resources: a system account and its group, made with shadow-utils through the
//! [`crate::Accounts`] seam. An account there with the declared ids is adopted and never
//! removed; one with other ids is never changed (*the host never destroys what it did not
//! make*); an account the mesh made is removed once undeclared only when it owns nothing the mesh
//! did not make.

use super::super::{Attempt, Engine};
use crate::state::Origin;
use crate::ApplyError;
use mesh_model::declaration::{AccountSpec, Resource};
use std::os::unix::fs::MetadataExt as _;

impl<'a> Engine<'a, '_> {
    /// What is at a declared account now, as an origin: adopted when it is there with the ids
    /// declared, made when neither it nor its group is there; `None` when it cannot be taken
    /// (the apply fails it and says why).
    pub(super) fn observe_account(&self, spec: &AccountSpec) -> Option<Origin> {
        let db = self.db().ok()?;
        match db.user(&spec.name) {
            Some(_) if self.account_differs(spec).is_none() => Some(Origin::FoundAccount),
            Some(_) => None,
            None if db.group(&spec.name).is_some() => None,
            None => Some(Origin::Made),
        }
    }

    /// How the account there differs from `spec`, if it is there and does.
    fn account_differs(&self, spec: &AccountSpec) -> Option<String> {
        let db = self.db().ok()?;
        let user = db.user(&spec.name)?;
        let group = db.gid(&spec.name);
        let uid_differs = spec.uid.is_some_and(|uid| uid != user.uid);
        let gid_differs = spec
            .gid
            .is_some_and(|gid| group != Some(gid) || user.gid != gid);
        (uid_differs || gid_differs).then(|| {
            let asked = |id: Option<u32>| id.map_or("any".to_owned(), |id| id.to_string());
            format!(
                "account `{}` is there with uid {} and gid {}, and the module declares uid {} and \
                 gid {}; an account the mesh did not make is never changed",
                spec.name,
                user.uid,
                user.gid,
                asked(spec.uid),
                asked(spec.gid)
            )
        })
    }

    /// Makes a declared account that is not there, adopts one there with its ids, and fails,
    /// naming both, one there with other ids or asking ids another account or group holds.
    pub(super) fn apply_account(
        &mut self,
        resource: &Resource,
        spec: &AccountSpec,
    ) -> Result<Attempt, ApplyError> {
        let db = match self.db() {
            Ok(db) => db,
            Err(reason) => return Ok(Attempt::Failed(reason)),
        };
        let name = &spec.name;
        if db.user(name).is_some() {
            if let Some(differs) = self.account_differs(spec) {
                return Ok(Attempt::Failed(differs));
            }
            self.ensure_record(resource)?;
            return Ok(Attempt::Took(Vec::new()));
        }
        if db.group(name).is_some() {
            return Ok(Attempt::Failed(format!(
                "group `{name}` is there without the account `{name}`; the mesh did not make it \
                 and leaves it alone"
            )));
        }
        if let Some(other) = spec.uid.and_then(|uid| db.user_with_uid(uid)) {
            return Ok(Attempt::Failed(format!(
                "account `{name}` asks uid {}, which is the account `{other}`'s",
                spec.uid.unwrap_or_default()
            )));
        }
        if let Some(other) = spec.gid.and_then(|gid| db.group_with_gid(gid)) {
            return Ok(Attempt::Failed(format!(
                "account `{name}` asks gid {}, which is the group `{other}`'s",
                spec.gid.unwrap_or_default()
            )));
        }
        self.ensure_record(resource)?;
        let result = self.seams.accounts.create_account(spec);
        self.reload_accounts();
        Ok(match result {
            Ok(()) => Attempt::Took(vec!["created".to_owned()]),
            Err(e) => Attempt::Failed(format!("cannot make account `{name}`: {e}")),
        })
    }

    /// Removes the account `name` the mesh made, unless it owns something the mesh did not
    /// make: its home holding anything, or a directory kept in this apply because it holds data
    /// the mesh did not put there. Returns what was done.
    pub(super) fn release_account(&mut self, name: &str) -> Result<String, String> {
        let db = self.db()?;
        let Some(user) = db.user(name) else {
            return Ok(format!("account `{name}` the mesh made was already gone"));
        };
        if let Some(owned) = self.owned_by(name, user.uid) {
            return Ok(format!(
                "kept account `{name}`, which the mesh made: it owns {owned}, which the mesh did \
                 not make"
            ));
        }
        let result = self.seams.accounts.remove_account(name);
        self.reload_accounts();
        result.map_err(|e| format!("cannot remove account `{name}`: {e}"))?;
        Ok(format!(
            "removed account `{name}` and its group, which the mesh made"
        ))
    }

    /// Something uid `uid` (the account `name`) owns that the mesh did not make, said as a
    /// sentence's object.
    fn owned_by(&mut self, name: &str, uid: u32) -> Option<String> {
        let mut owned = |path: &str| -> Option<bool> {
            let resolved = self.paths.resolve(path).ok()?;
            let meta = resolved.meta?;
            Some(meta.uid() == uid)
        };
        let kept = self.kept_dirs.clone();
        for kept in kept {
            if owned(&kept) == Some(true) {
                return Some(format!("`{kept}` and what it holds"));
            }
        }
        let home = account_home(&self.config.root, name)?;
        let resolved = self.paths.resolve(&home).ok()?;
        let holds = resolved
            .meta
            .as_ref()
            .is_some_and(|m| m.is_dir() && m.uid() == uid)
            && std::fs::read_dir(&resolved.full).is_ok_and(|mut d| d.next().is_some());
        holds.then(|| format!("its home `{home}` and what it holds"))
    }
}

/// The home directory `etc/passwd` under `root` (or the name service, under `/`) gives the
/// account `name`.
fn account_home(root: &std::path::Path, name: &str) -> Option<String> {
    if root == std::path::Path::new("/") {
        return nix::unistd::User::from_name(name)
            .ok()
            .flatten()
            .map(|user| user.dir.display().to_string());
    }
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&name)).then(|| fields.get(5).map(|h| (*h).to_owned()))?
    })
}
