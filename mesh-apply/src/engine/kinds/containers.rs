//! Container resources, through the [`crate::ContainerRuntime`] seam: a lone container brought
//! to its spec, recorded once made, and left alone while a maintenance window holds it still.

use super::super::{Attempt, Engine};
use crate::containers::DeclaredContainer;
use crate::progress::pause_point;
use crate::state::{Origin, Record, Target};
use crate::ApplyError;
use mesh_model::declaration::{ContainerSpec, Resource, Spec};
use std::collections::BTreeSet;

impl<'a> Engine<'a, '_> {
    /// Brings a lone container to its spec (made, replaced, started, or restarted when a file
    /// it restarts on changed or it owes a restart), and records it once it is made. One
    /// recorded as made that runs as declared, with no restart wanted, is left as it is
    /// without marking the machine mid-change: an apply that changes nothing never says so.
    ///
    /// A container whose last attempt failed — its judgement among others — is judged again
    /// when it is left as it is ([`crate::ContainerRuntime::judge_again`]): a failed judgement
    /// is never forgotten because nothing changed since, and the container stays failed, with
    /// the judgement's reason, until it passes.
    pub(in crate::engine) fn apply_container(
        &mut self,
        resource: &Resource,
        spec: &ContainerSpec,
    ) -> Result<Attempt, ApplyError> {
        let restart = self.restart_wanted(&resource.id, spec, &BTreeSet::new());
        let failed_before = self.failed_before(&resource.id);
        if !restart && self.runs_as_recorded(resource, spec) {
            if failed_before {
                let judged = self.seams.containers.judge_again(&declared(resource, spec));
                return Ok(judged.map(|()| Vec::new()).into());
            }
            return Ok(Attempt::Took(Vec::new()));
        }
        self.begin_change()?;
        if restart {
            pause_point("restart", &resource.id);
        }
        let mut result = self
            .seams
            .containers
            .apply(&declared(resource, spec), restart);
        if failed_before && result.as_ref().is_ok_and(Vec::is_empty) {
            // Left as it was: judged again, not taken as it was judged last.
            result = self
                .seams
                .containers
                .judge_again(&declared(resource, spec))
                .map(|()| Vec::new());
        }
        match &result {
            Ok(_) => {
                self.record_made(resource)?;
                self.paid_restart(&resource.id);
            }
            // Made, then failed its judgement: the mesh's own all the same — judged again by
            // the next apply, removed once undeclared.
            Err(_) => {
                if let Ok(true) = self.seams.containers.made(&declared(resource, spec)) {
                    self.record_made(resource)?;
                }
            }
        }
        Ok(result.into())
    }

    /// Whether resource `id` failed when it was last attempted (its failure is kept in the
    /// state, so a host started again knows it too).
    pub(in crate::engine) fn failed_before(&self, id: &str) -> bool {
        self.state.failures.contains_key(id)
    }

    /// Whether container `resource`, recorded as made, runs as declared (changing nothing; a
    /// runtime that cannot say, or cannot be asked, is taken as no).
    pub(in crate::engine) fn runs_as_recorded(
        &self,
        resource: &Resource,
        spec: &ContainerSpec,
    ) -> bool {
        self.state.resources.contains_key(&resource.id)
            && matches!(
                self.seams
                    .containers
                    .runs_as_declared(&declared(resource, spec)),
                Ok(true)
            )
    }

    pub(in crate::engine) fn record_made(&mut self, resource: &Resource) -> Result<(), ApplyError> {
        if !self.state.resources.contains_key(&resource.id) {
            self.state.resources.insert(
                resource.id.clone(),
                Record {
                    target: Target::of(&resource.spec),
                    origin: Origin::Made,
                },
            );
            self.save()?;
        }
        Ok(())
    }

    /// The step holding a declared container still, if a window holds it; for a job, the step
    /// holding its container or a container of its module (a job does not run while a window
    /// holds its module's containers: it would change what the step works on).
    pub(in crate::engine) fn held_container(&self, resource: &Resource) -> Option<String> {
        match &resource.spec {
            Spec::Container(c) => self.held.get(&c.name).cloned(),
            Spec::Job(j) => self
                .held
                .get(&j.run.name)
                .or_else(|| self.held_modules.get(&resource.module))
                .cloned(),
            // No other kind runs a container.
            _ => None,
        }
    }

    /// The step holding a recorded container still, if a window holds it.
    pub(in crate::engine) fn held_step(&self, target: &Target) -> Option<String> {
        match target {
            Target::Container { name } => self.held.get(name).cloned(),
            // No other kind runs a container.
            _ => None,
        }
    }
}
/// A declared container as its runtime is told of it.
pub(in crate::engine) fn declared<'r>(
    resource: &'r Resource,
    spec: &'r ContainerSpec,
) -> DeclaredContainer<'r> {
    DeclaredContainer {
        id: &resource.id,
        module: &resource.module,
        spec,
    }
}

/// How the container `spec` differs from what the host left there: not running (one an open
/// window holds still is not looked at).
pub(in crate::engine) fn drift(
    spec: &ContainerSpec,
    look: &mut super::super::look::Look<'_>,
    say: &mut super::super::look::Say<'_>,
) {
    // Its name on this machine (`HostConfig::container_prefix`).
    let name = format!("{}{}", look.container_prefix, spec.name);
    if look.held.contains(&name) {
        return;
    }
    match look.containers.examine(&name) {
        Ok(None) => {}
        Ok(Some(found)) => say("running", "running".into(), found),
        Err(error) => say("running", "running".into(), error),
    }
}
