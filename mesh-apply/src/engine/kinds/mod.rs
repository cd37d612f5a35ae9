//! The kinds of resource, each in one place: what is at one before it changes (observe), bringing
//! it to what is declared (apply), giving it back when it is no longer declared (release), and
//! what a hand edit of it looks like between applies (drift).
//!
//! This file routes each kind's part to the file that holds it: one `match` over the kinds per
//! part, so that a new kind is a file of its own beside these and one arm in each `match` here,
//! with the compiler as the checklist (`book/src/adding-a-kind.md` lists the rest). Every kind
//! has its file here; a container and a network are released with one call to the runtime
//! (below), and a job is never recorded, so `jobs` has nothing to give back nor drift.

mod accounts;
pub(super) mod containers;
mod directories;
pub(super) mod files;
mod jobs;
mod lines;
mod memberships;
mod networks;

use super::look::{Look, Say};
use super::{Attempt, Engine};
use crate::state::{Origin, Record, Target};
use crate::ApplyError;
use mesh_model::declaration::{Declared, Resource, Spec};

impl<'a> Engine<'a, '_> {
    /// What is at a declared resource now, as an origin; `None` when it cannot be taken (the
    /// apply will fail it and say why).
    pub(super) fn observe(&mut self, resource: &Resource) -> Result<Option<Origin>, ApplyError> {
        match &resource.spec {
            Spec::File(f) => self.observe_file(f),
            Spec::Directory(d) => Ok(self.observe_directory(d)),
            Spec::Membership(m) => Ok(self.observe_membership(m)),
            // A container or a network is recorded once its runtime has made it.
            Spec::Container(_) | Spec::Network(_) => Ok(None),
            // A job leaves nothing to record: what it last ran is kept in the state's `jobs`.
            Spec::Job(_) => Ok(None),
            Spec::Account(a) => Ok(self.observe_account(a)),
            Spec::Line(l) => Ok(self.observe_line(l)),
        }
    }

    /// Attempts a lone resource.
    pub(super) fn apply_one(&mut self, resource: &Resource) -> Result<Attempt, ApplyError> {
        match &resource.spec {
            Spec::File(f) => self.apply_file(resource, f),
            Spec::Directory(d) => self.apply_directory(resource, d),
            Spec::Membership(m) => self.apply_membership(resource, m),
            Spec::Container(c) => self.apply_container(resource, c),
            Spec::Network(n) => self.apply_network(resource, n),
            Spec::Account(a) => self.apply_account(resource, a),
            Spec::Job(j) => self.apply_job(resource, j),
            Spec::Line(l) => self.apply_line(resource, l),
        }
    }

    /// Gives back what a record no longer declared holds: what the mesh made is removed, what
    /// it found is given back. Says what it did, or why it could not.
    pub(super) fn release(&mut self, record: &Record) -> Result<String, String> {
        let origin = &record.origin;
        match &record.target {
            Target::File { path } => self.release_file(path, origin),
            Target::Directory { path } => self.release_directory(path, origin),
            Target::Membership { account, group } => {
                self.release_membership(account, group, origin)
            }
            Target::Container { name } => match origin {
                Origin::Made => self.seams.containers.remove(name),
                other => Ok(super::release::forgot("container", name, other)),
            },
            Target::Network { name } => match origin {
                Origin::Made => self.seams.containers.remove_network(name),
                other => Ok(super::release::forgot("network", name, other)),
            },
            Target::Account { name } => match origin {
                Origin::Made => self.release_account(name),
                Origin::FoundAccount => Ok(format!(
                    "kept account `{name}`: it was there before the mesh"
                )),
                other => Ok(super::release::forgot("account", name, other)),
            },
            Target::Line { path, line } => self.release_line(path, line, origin),
        }
    }
}

/// Says how the declared `resource` differs from what the host left there, changing nothing.
pub(crate) fn drift(
    resource: &Resource,
    declared: &dyn Declared,
    look: &mut Look<'_>,
    say: &mut Say<'_>,
) {
    match &resource.spec {
        Spec::File(spec) => files::drift(resource, spec, declared, look, say),
        Spec::Directory(spec) => directories::drift(spec, look, say),
        Spec::Membership(spec) => memberships::drift(spec, look, say),
        // A network is seen through the containers that join it, an account through what it
        // owns.
        Spec::Network(_) | Spec::Account(_) => {}
        // A job's container is gone once it has run: nothing of it stays to drift.
        Spec::Job(_) => {}
        Spec::Container(spec) => containers::drift(spec, look, say),
        Spec::Line(spec) => lines::drift(spec, look, say),
    }
}
