//! Together groups, applied all-or-nothing: every member staged, the group recorded with what
//! each member was, then committed in order; a failed step puts back what was committed, and a
//! host killed mid-commit has the next apply put the group back whole
//! ([`put_back_interrupted_group_with`]).

use super::discover::Prepared;
use super::kinds::containers::declared;
use super::kinds::files::FileRead;
use super::{with_real_seams, Engine, Seams};
use crate::containers::{DeclaredContainer, SetAside};
use crate::fsops;
use crate::order::Unit;
use crate::progress::{pause_point, NoProgress};
use crate::state::{
    ContainerWas, GroupCommit, GroupContainer, GroupDirectory, GroupFile, GroupMembership,
    StateDir, STATE_FORMAT,
};
use crate::{ApplyError, HostConfig};
use mesh_model::declaration::{ContainerSpec, JobSpec, Resource, Spec};
use mesh_model::report::{Finding, Outcome};
use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::PathBuf;

/// Puts back a together group whose commit was interrupted (a [`crate::state::GroupCommit`]
/// left in the state directory), with the real seams (`apply`'s): the first step of the next
/// apply, public so that a test can look at the machine as that apply will find it. See
/// [`put_back_interrupted_group_with`].
///
/// # Errors
/// As [`put_back_interrupted_group_with`].
pub fn put_back_interrupted_group(config: &HostConfig) -> Result<Option<String>, ApplyError> {
    with_real_seams(config, &NoProgress, |seams| {
        put_back_interrupted_group_with(config, seams)
    })
}

/// Puts back a together group whose commit was interrupted, with the given seams; returns the
/// group's name when there was one. Every apply does this first (*resources declared together apply
/// all-or-nothing*).
///
/// # Guarantees
/// The whole group is as it was before its commit, whichever step the host stopped at: each
/// member file that was there gets its `.mesh-old` copy back and each that was not is removed
/// (with its staged copy); each membership the commit added is removed; each directory it
/// created is removed (left, and said, when it holds something) and each it changed gets its
/// mode and owner back; each container is put back by `ContainerRuntime::restore` (one it
/// created removed, one it started stopped, one it replaced given its name back from
/// `<name>.mesh-old` and started if it ran). Then the record goes. Containers come last, so a
/// container given back starts with the group's old files. Idempotent.
///
/// # Errors
/// When the record cannot be read or removed, or a member cannot be put back
/// ([`ApplyError::GroupPutBack`]): the record stays, the `.mesh-old` copies and containers are
/// kept, and the next apply tries again.
pub fn put_back_interrupted_group_with(
    config: &HostConfig,
    seams: &Seams<'_>,
) -> Result<Option<String>, ApplyError> {
    let dir = StateDir::open(&config.state_dir)?;
    Ok(put_back_group(&dir, &config.root, seams)?.map(|(group, _)| group))
}

/// [`put_back_interrupted_group_with`]: the group's name and what was left (a created
/// directory that holds something), when there was one.
pub(super) fn put_back_group(
    dir: &StateDir,
    root: &std::path::Path,
    seams: &Seams<'_>,
) -> Result<Option<(String, Vec<String>)>, ApplyError> {
    let Some(record) = dir.read_group_commit(root)? else {
        return Ok(None);
    };
    let failed = |reason: String| ApplyError::GroupPutBack {
        group: record.group.clone(),
        reason,
    };
    let mut left = Vec::new();
    for file in &record.files {
        let old = fsops::old_name(&file.target);
        let result = if file.existed {
            match fs::symlink_metadata(&old) {
                // Committed (or about to be): the copy is the file as it was.
                Ok(_) => fs::rename(&old, &file.target),
                // Not committed yet: the file is as it was.
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            }
        } else {
            fsops::remove_if_present(&file.target)
        }
        .and_then(|()| fsops::remove_if_present(&fsops::new_name(&file.target)));
        // The record names the file: one that cannot be put back is the record's group's
        // failure, said as such (a damaged record may name a path no file can be at).
        result.map_err(|e| failed(format!("file `{}`: {e}", file.target.display())))?;
        if let Some(parent) = file.target.parent() {
            let _ = fsops::sync_dir(parent);
        }
    }
    for membership in &record.memberships {
        let (account, group) = (&membership.account, &membership.group);
        let db = seams
            .accounts
            .read()
            .map_err(|e| failed(format!("cannot read the accounts: {e}")))?;
        if db.is_member(account, group) {
            seams
                .accounts
                .remove_membership(account, group)
                .map_err(|e| failed(format!("cannot remove `{account}` from `{group}`: {e}")))?;
        }
    }
    for directory in record.directories.iter().rev() {
        let target = &directory.target;
        let result = if directory.created {
            match fs::remove_dir(target) {
                Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => {
                    left.push(format!(
                        "directory `{}`, which the group created, holds something: it is left",
                        target.display()
                    ));
                    Ok(())
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        } else {
            fsops::set_mode_owner(target, directory.mode, directory.uid, directory.gid)
        };
        result.map_err(|e| failed(format!("directory `{}`: {e}", target.display())))?;
    }
    for container in record.containers.iter().rev() {
        seams
            .containers
            .restore(&container.resource, &container.name, &container.before)
            .map_err(|e| failed(format!("container `{}`: {e}", container.name)))?;
    }
    dir.clear_group_commit()?;
    Ok(Some((record.group, left)))
}

/// The record of a together group about to commit: every member its commit changes, with
/// what it was.
fn group_record(unit: &Unit, members: &[&Resource], staged: &[Staged]) -> GroupCommit {
    let mut record = GroupCommit {
        format: STATE_FORMAT,
        group: unit.group.clone().unwrap_or_default(),
        files: Vec::new(),
        directories: Vec::new(),
        memberships: Vec::new(),
        containers: Vec::new(),
        newer: Default::default(),
    };
    for (member, step) in members.iter().zip(staged) {
        match step {
            Staged::Nothing => {}
            Staged::File {
                target, existed, ..
            } => record.files.push(GroupFile {
                target: target.clone(),
                existed: *existed,
            }),
            Staged::Directory {
                full,
                create,
                before: (mode, uid, gid),
                ..
            } => record.directories.push(GroupDirectory {
                target: full.clone(),
                created: *create,
                mode: *mode,
                uid: *uid,
                gid: *gid,
            }),
            Staged::Job { .. } => {}
            Staged::Membership { account, group } => record.memberships.push(GroupMembership {
                account: account.clone(),
                group: group.clone(),
            }),
            Staged::Container { spec, was, .. } => record.containers.push(GroupContainer {
                resource: member.id.clone(),
                name: spec.name.clone(),
                before: was.clone(),
            }),
        }
    }
    record
}

/// What staging one member of a together group came to.
enum Staging {
    /// It is staged: its commit makes it as declared.
    Staged(Staged),
    /// It cannot be staged, and why: the group does not apply.
    Broken(String),
}

/// One member of a together group, staged.
enum Staged {
    /// Already as declared.
    Nothing,
    /// A file written beside its target.
    File {
        target: PathBuf,
        temp: PathBuf,
        existed: bool,
        changed: Vec<String>,
    },
    /// A directory to create or to fix.
    Directory {
        full: PathBuf,
        machine_path: String,
        create: bool,
        wanted: (u32, u32, u32),
        before: (u32, u32, u32),
        changed: Vec<String>,
    },
    /// A membership to add.
    Membership { account: String, group: String },
    /// A container to bring to its spec.
    Container {
        spec: Box<ContainerSpec>,
        restart: bool,
        /// What it is now (kept in the group's record, to put it back).
        was: ContainerWas,
    },
    /// A job due to run, and the digest of what it runs.
    Job { spec: Box<JobSpec>, digest: String },
}

/// What a committed member needs to be put back.
enum Committed {
    Nothing,
    File {
        target: PathBuf,
        old: Option<PathBuf>,
    },
    Directory {
        full: PathBuf,
        machine_path: String,
        created: bool,
        before: (u32, u32, u32),
    },
    Membership {
        account: String,
        group: String,
    },
    Container {
        id: String,
        module: String,
        spec: Box<ContainerSpec>,
        /// What it was before ([`ContainerRuntime::restore`] puts it back).
        was: ContainerWas,
        /// The container it replaced, kept aside until the group is whole.
        aside: Option<SetAside>,
        /// Restart it once the group is whole (a `restart_on` file changed, and it was running
        /// as declared already).
        restart: bool,
    },
    /// A job that ran to its end: nothing to put back (a job cannot be unrun); what it ran is
    /// kept once the group is whole, so a group put back runs it again next time.
    Job {
        id: String,
        digest: String,
    },
}

impl<'a> Engine<'a, '_> {
    /// Applies a together group all-or-nothing: stage every member, record the group, commit
    /// in order (putting back what was committed when a step fails), then let go of what was
    /// kept aside and make the restarts the group waited for.
    pub(super) fn apply_group(
        &mut self,
        unit: &Unit,
        members: &[&Resource],
    ) -> Result<(), ApplyError> {
        // Stage every member; nothing live changes.
        let mut staged: Vec<Staged> = Vec::with_capacity(members.len());
        let mut changed_in_group = BTreeSet::new();
        let mut broken: Option<(String, String)> = None;
        for member in members {
            match self.stage(member, &changed_in_group)? {
                Staging::Staged(s) => {
                    if !matches!(s, Staged::Nothing) {
                        changed_in_group.insert(member.id.clone());
                    }
                    staged.push(s);
                }
                Staging::Broken(reason) => {
                    broken = Some((member.id.clone(), reason));
                    break;
                }
            }
        }
        if let Some((breaker, reason)) = broken {
            discard(&staged);
            self.fail_group(unit, members, &breaker, &reason);
            return Ok(());
        }

        // Every member the commit changes is recorded, with what it was, before the first
        // commit step, so that a host killed in the middle puts the whole group back.
        let record = group_record(unit, members, &staged);
        let journaled = !(record.files.is_empty()
            && record.directories.is_empty()
            && record.memberships.is_empty()
            && record.containers.is_empty());
        // Containers restarting on a member file owe the restart from before its commit.
        self.owe_restarts(
            members
                .iter()
                .zip(&staged)
                .filter(|(_, s)| matches!(s, Staged::File { .. }))
                .map(|(m, _)| m.id.as_str()),
        )?;
        if journaled {
            self.dir.write_group_commit(&record)?;
        }

        // Commit in order; on a failure put back what was committed.
        let mut restart_failures: Vec<(String, String)> = Vec::new();
        let mut committed: Vec<Committed> = Vec::with_capacity(staged.len());
        let mut changes: Vec<Vec<String>> = Vec::with_capacity(staged.len());
        for (index, step) in staged.iter().enumerate() {
            pause_point("commit", &members[index].id);
            match self.commit(members[index], step) {
                Ok((done, changed)) => {
                    committed.push(done);
                    changes.push(changed);
                }
                Err(reason) => {
                    discard(&staged[index..]);
                    let mut reason = reason;
                    // Containers last, as after a crash: one given back starts with the
                    // group's old files.
                    let (containers, others): (Vec<&Committed>, Vec<&Committed>) = committed
                        .iter()
                        .rev()
                        .partition(|done| matches!(done, Committed::Container { .. }));
                    let mut whole_again = true;
                    for done in others.into_iter().chain(containers) {
                        if let Err(e) = self.put_back(done) {
                            whole_again = false;
                            reason.push_str(&format!("; and putting back failed: {e}"));
                        }
                    }
                    if journaled && whole_again {
                        self.dir.clear_group_commit()?;
                    } else if journaled {
                        // The record stays: the next apply puts the group back first.
                        reason.push_str(" (the next apply puts the group back first)");
                    }
                    self.fail_group(unit, members, &members[index].id, &reason);
                    return Ok(());
                }
            }
        }
        // The group is whole: said so durably first (a host killed from here on finishes with
        // the group new), then what was kept to put it back goes, then the restarts it waited for.
        if journaled {
            self.dir.clear_group_commit()?;
        }
        for (index, done) in committed.iter().enumerate() {
            match done {
                Committed::File { old: Some(old), .. } => {
                    let _ = fsops::remove_if_present(old);
                }
                Committed::Container {
                    id,
                    module,
                    spec,
                    was: _,
                    aside,
                    restart,
                } => {
                    if let Some(aside) = aside {
                        pause_point("let-go", id);
                        if let Err(e) = self.seams.containers.let_go(aside) {
                            self.findings.push(Finding {
                                resource: id.clone(),
                                message: format!(
                                    "the container it replaced, kept as `{}`, could not be \
                                     removed: {e}",
                                    aside.kept_as
                                ),
                            });
                        }
                    }
                    if *restart {
                        pause_point("restart", id);
                        let declared = DeclaredContainer { id, module, spec };
                        match self.seams.containers.apply(&declared, true) {
                            Ok(changed) => changes[index].extend(changed),
                            Err(reason) => restart_failures.push((id.clone(), reason)),
                        }
                    }
                }
                Committed::Job { id, digest } => self.job_succeeded(id, digest.clone()),
                Committed::Nothing
                | Committed::File { old: None, .. }
                | Committed::Directory { .. }
                | Committed::Membership { .. } => {}
            }
        }
        for (member, changed) in members.iter().zip(changes) {
            if let Some((_, reason)) = restart_failures.iter().find(|(id, _)| *id == member.id) {
                self.fail(&member.id, reason.clone());
                continue;
            }
            match self.held_container(member) {
                Some(step) => {
                    self.outcomes
                        .insert(member.id.clone(), Outcome::HeldStill { step });
                }
                None => {
                    self.paid_restart(&member.id);
                    self.succeed(&member.id, changed);
                }
            }
        }
        Ok(())
    }

    fn fail_group(&mut self, unit: &Unit, members: &[&Resource], breaker: &str, reason: &str) {
        for member in members {
            let reason = if member.id == breaker {
                reason.to_owned()
            } else {
                group_reason(unit, breaker, reason)
            };
            self.fail(&member.id, reason);
        }
    }

    /// Stages one member of a together group: nothing live changes (a file is written beside its
    /// target, a container's current state is read).
    fn stage(
        &mut self,
        resource: &Resource,
        changed_in_group: &BTreeSet<String>,
    ) -> Result<Staging, ApplyError> {
        match &resource.spec {
            Spec::File(spec) => {
                let change = match self.examine_file(resource, spec, FileRead::ByPath) {
                    Ok(change) => change,
                    Err(reason) => return Ok(Staging::Broken(reason)),
                };
                if change.changed.is_empty() {
                    return Ok(Staging::Staged(Staged::Nothing));
                }
                if let Prepared::Failed(reason) =
                    self.prepare_change(resource, &change.missing_parents)?
                {
                    return Ok(Staging::Broken(reason));
                }
                if change.existed && change.changed.iter().any(|c| c == "content") {
                    if let Err(reason) = self.keep_hand_edit(resource, spec, &change.full) {
                        return Ok(Staging::Broken(reason));
                    }
                }
                match fsops::stage(&change.full, &change.wanted) {
                    Ok(temp) => Ok(Staging::Staged(Staged::File {
                        target: change.full,
                        temp,
                        existed: change.existed,
                        changed: change.changed,
                    })),
                    Err(e) => Ok(Staging::Broken(format!(
                        "cannot stage `{}`: {e}",
                        spec.path
                    ))),
                }
            }
            Spec::Directory(spec) => {
                let change = match self.examine_directory(spec) {
                    Ok(change) => change,
                    Err(reason) => return Ok(Staging::Broken(reason)),
                };
                if change.changed.is_empty() {
                    return Ok(Staging::Staged(Staged::Nothing));
                }
                if let Prepared::Failed(reason) =
                    self.prepare_change(resource, &change.missing_parents)?
                {
                    return Ok(Staging::Broken(reason));
                }
                Ok(Staging::Staged(Staged::Directory {
                    full: change.full,
                    machine_path: spec.path.clone(),
                    create: change.create,
                    wanted: change.wanted,
                    before: change.before,
                    changed: change.changed,
                }))
            }
            Spec::Membership(spec) => {
                match self.membership_missing(spec) {
                    Ok(true) => {}
                    Ok(false) => return Ok(Staging::Staged(Staged::Nothing)),
                    Err(reason) => return Ok(Staging::Broken(reason)),
                }
                self.ensure_record(resource)?;
                Ok(Staging::Staged(Staged::Membership {
                    account: spec.account.clone(),
                    group: spec.group.clone(),
                }))
            }
            // Held by a window: it runs after the window, when it is still due.
            Spec::Job(_) if self.held_container(resource).is_some() => {
                Ok(Staging::Staged(Staged::Nothing))
            }
            Spec::Job(spec) => Ok(Staging::Staged(match self.job_due(resource, spec) {
                Some(digest) => {
                    // Its commit changes the machine; files and memberships mark when they
                    // record.
                    self.begin_change()?;
                    Staged::Job {
                        spec: spec.clone(),
                        digest,
                    }
                }
                None => Staged::Nothing,
            })),
            Spec::Container(spec) if self.held.contains_key(&spec.name) => {
                Ok(Staging::Staged(Staged::Nothing))
            }
            Spec::Container(spec) => {
                // One whose last attempt failed is committed, and so judged again.
                if !self.restart_wanted(&resource.id, spec, changed_in_group)
                    && !self.failed_before(&resource.id)
                    && self.runs_as_recorded(resource, spec)
                {
                    return Ok(Staging::Staged(Staged::Nothing));
                }
                // Its commit changes the machine.
                self.begin_change()?;
                let containers = self.seams.containers;
                let declared = declared(resource, spec);
                let was = containers
                    .check(&declared)
                    .and_then(|()| containers.before_commit(&declared));
                Ok(match was {
                    Ok(was) => Staging::Staged(Staged::Container {
                        spec: spec.clone(),
                        restart: self.restart_wanted(&resource.id, spec, changed_in_group),
                        was,
                    }),
                    Err(reason) => Staging::Broken(reason),
                })
            }
            // The other kinds (a network, an account, …) are never staged.
            _ => Ok(Staging::Broken(format!(
                "a {} cannot be in a together group",
                resource.spec.kind()
            ))),
        }
    }

    fn commit(
        &mut self,
        resource: &Resource,
        step: &Staged,
    ) -> Result<(Committed, Vec<String>), String> {
        match step {
            Staged::Nothing => Ok((Committed::Nothing, Vec::new())),
            Staged::File {
                target,
                temp,
                existed,
                changed,
            } => {
                let old = if *existed {
                    let old = fsops::old_name(target);
                    fsops::remove_if_present(&old)
                        .and_then(|()| fs::hard_link(target, &old))
                        .map_err(|e| format!("cannot keep the old `{}`: {e}", show(resource)))?;
                    Some(old)
                } else {
                    None
                };
                fs::rename(temp, target).map_err(|e| {
                    if let Some(old) = &old {
                        let _ = fs::remove_file(old);
                    }
                    format!("cannot commit `{}`: {e}", show(resource))
                })?;
                self.touched(target);
                Ok((
                    Committed::File {
                        target: target.clone(),
                        old,
                    },
                    changed.clone(),
                ))
            }
            Staged::Directory {
                full,
                machine_path,
                create,
                wanted,
                before,
                changed,
            } => {
                let (mode, uid, gid) = *wanted;
                let result = if *create {
                    // A member file's staging may have made it already, as its parent.
                    match fs::create_dir(full) {
                        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
                        _ => fsops::set_mode_owner(full, mode, uid, gid),
                    }
                } else {
                    fsops::set_mode_owner(full, mode, uid, gid)
                };
                result.map_err(|e| format!("cannot commit `{machine_path}`: {e}"))?;
                if *create {
                    self.touched(full);
                    self.paths.made_dir(machine_path);
                }
                Ok((
                    Committed::Directory {
                        full: full.clone(),
                        machine_path: machine_path.clone(),
                        created: *create,
                        before: *before,
                    },
                    changed.clone(),
                ))
            }
            Staged::Membership { account, group } => {
                let changed = self.add_membership(&resource.id, account, group)?;
                Ok((
                    Committed::Membership {
                        account: account.clone(),
                        group: group.clone(),
                    },
                    changed,
                ))
            }
            Staged::Job { spec, digest } => {
                let ran = self.run_job(resource, spec)?;
                Ok((
                    Committed::Job {
                        id: resource.id.clone(),
                        digest: digest.clone(),
                    },
                    vec![ran],
                ))
            }
            Staged::Container { spec, restart, was } => {
                // All-or-nothing: the container it replaces is kept until the group is whole, and
                // a restart waits for the whole group.
                let containers = self.seams.containers;
                let put_back = |mut reason: String| {
                    if let Err(e) = containers.restore(&resource.id, &spec.name, was) {
                        reason.push_str(&format!("; and putting it back failed: {e}"));
                    }
                    reason
                };
                let aside = containers
                    .set_aside(&declared(resource, spec))
                    .map_err(put_back)?;
                let changed = containers
                    .apply(&declared(resource, spec), false)
                    .map_err(put_back)?;
                if changed.is_empty() && aside.is_none() && self.failed_before(&resource.id) {
                    // Left as it was, its last judgement failed: judged again.
                    containers
                        .judge_again(&declared(resource, spec))
                        .map_err(put_back)?;
                }
                let changed = match &aside {
                    Some(aside) => aside.changed.clone(),
                    None => changed,
                };
                if let Err(e) = self.record_made(resource) {
                    return Err(put_back(e.to_string()));
                }
                let restart = *restart && matches!(was, ContainerWas::Running);
                Ok((
                    Committed::Container {
                        id: resource.id.clone(),
                        module: resource.module.clone(),
                        spec: spec.clone(),
                        was: was.clone(),
                        aside,
                        restart,
                    },
                    changed,
                ))
            }
        }
    }

    fn put_back(&mut self, done: &Committed) -> Result<(), String> {
        match done {
            Committed::Nothing | Committed::Job { .. } => Ok(()),
            Committed::File { target, old } => match old {
                Some(old) => fs::rename(old, target),
                None => fs::remove_file(target),
            }
            .map_err(|e| format!("{}: {e}", target.display())),
            Committed::Directory {
                full,
                machine_path,
                created,
                before,
            } => if *created {
                self.paths.forget(machine_path);
                fs::remove_dir(full)
            } else {
                fsops::set_mode_owner(full, before.0, before.1, before.2)
            }
            .map_err(|e| format!("`{machine_path}`: {e}")),
            Committed::Membership { account, group } => {
                let result = self.seams.accounts.remove_membership(account, group);
                self.findings.retain(|f| {
                    !f.message
                        .starts_with(&format!("`{account}` was added to `{group}`"))
                });
                self.reload_accounts();
                result.map_err(|e| format!("`{account}` in `{group}`: {e}"))
            }
            Committed::Container { id, spec, was, .. } => {
                let name = &spec.name;
                self.seams
                    .containers
                    .restore(id, name, was)
                    .map_err(|e| format!("container `{name}`: {e}"))
            }
        }
    }
}
pub(super) fn group_reason(unit: &Unit, breaker: &str, reason: &str) -> String {
    format!(
        "together group `{}` did not apply: `{breaker}` failed: {reason}",
        unit.group.as_deref().unwrap_or_default()
    )
}

fn show(resource: &Resource) -> String {
    match &resource.spec {
        Spec::File(f) => f.path.clone(),
        Spec::Directory(d) => d.path.clone(),
        _ => resource.id.clone(),
    }
}

/// Removes staged temp files.
fn discard(staged: &[Staged]) {
    for step in staged {
        if let Staged::File { temp, .. } = step {
            let _ = fs::remove_file(temp);
        }
    }
}
