//! Job resources, through the [`crate::ContainerRuntime`] seam: a container run to its end,
//! which must exit 0. It runs when what it runs (its image, command, environment and the
//! content of the files it runs again on) differs from what it ran when it last succeeded on
//! this machine, kept in the state's `jobs`; never otherwise.

use super::super::{Attempt, Engine};
use crate::containers::DeclaredContainer;
use crate::ApplyError;
use mesh_model::declaration::{rerun_file_digest, JobSpec, Resource, Spec};
use std::collections::BTreeMap;

impl<'a> Engine<'a, '_> {
    /// Runs a lone job when it is due ([`Engine::job_due`]), and keeps what it ran once it
    /// succeeded: `ran to its end` with its log tail, nothing when it was not due, or the
    /// failure with its exit code and log tail.
    pub(super) fn apply_job(
        &mut self,
        resource: &Resource,
        spec: &JobSpec,
    ) -> Result<Attempt, ApplyError> {
        let Some(digest) = self.job_due(resource, spec) else {
            return Ok(Attempt::Took(Vec::new()));
        };
        self.begin_change()?;
        match self.run_job(resource, spec) {
            Ok(ran) => {
                self.job_succeeded(&resource.id, digest);
                self.save()?;
                Ok(Attempt::Took(vec![ran]))
            }
            Err(reason) => Ok(Attempt::Failed(reason)),
        }
    }

    /// The digest of what the job runs now, when it differs from what it ran when it last
    /// succeeded here (it is due); `None` when it has run this already.
    pub(in crate::engine) fn job_due(&self, resource: &Resource, spec: &JobSpec) -> Option<String> {
        let contents: Vec<(&str, Option<String>)> = spec
            .rerun_on
            .iter()
            .map(|id| {
                let file = self.declaration.resource(id);
                let digest = file
                    .and_then(|file| self.sent.content_digest(file))
                    .map(std::borrow::Cow::into_owned)
                    // A template of secrets: its text and its secrets' keyed digests.
                    .or_else(|| match file.map(|f| &f.spec) {
                        Some(Spec::File(f)) => rerun_file_digest(f),
                        _ => None,
                    });
                (id.as_str(), digest)
            })
            .collect();
        let files: BTreeMap<&str, Option<&str>> = contents
            .iter()
            .map(|(id, digest)| (*id, digest.as_deref()))
            .collect();
        let digest = spec.run_digest(&files);
        (self.state.jobs.get(&resource.id) != Some(&digest)).then_some(digest)
    }

    /// Runs the job's container to its end: what the report says of a success, or why it
    /// failed (its exit code and log tail).
    pub(in crate::engine) fn run_job(
        &self,
        resource: &Resource,
        spec: &JobSpec,
    ) -> Result<String, String> {
        let declared = DeclaredContainer {
            id: &resource.id,
            module: &resource.module,
            spec: &spec.run,
        };
        let run = self
            .seams
            .containers
            .run_job(&declared, spec.timeout_secs())?;
        if run.exit_code == 0 {
            Ok(format!(
                "ran to its end (exit code 0); the last lines of its log: {}",
                run.log
            ))
        } else {
            Err(format!(
                "job `{}` exited with code {}; the last lines of its log: {}",
                spec.run.name, run.exit_code, run.log
            ))
        }
    }

    /// Keeps what a job ran once it succeeded: it does not run again until that changes.
    pub(in crate::engine) fn job_succeeded(&mut self, id: &str, digest: String) {
        self.state.jobs.insert(id.to_owned(), digest);
        self.dirty = true;
    }
}
