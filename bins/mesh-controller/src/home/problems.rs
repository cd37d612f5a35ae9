//! The failures recorded for `status` until they are resolved (the rule "Nothing fails
//! silently"): `problems/<kind>/<subject>.json` ([`ProblemStore`]).

use super::Home;
use crate::error::Result;
use mesh_store::problems::{Problem, ProblemKind};

/// The failures recorded for `status` ([`crate::home::keys`]).
#[derive(Clone, Copy)]
pub struct ProblemStore<'h> {
    home: &'h Home,
}

impl Home {
    /// The failures recorded for `status`.
    pub fn problems(&self) -> ProblemStore<'_> {
        ProblemStore { home: self }
    }
}

impl ProblemStore<'_> {
    /// Records a failure for `status` until it is resolved (the rule “Nothing fails silently”):
    /// `kind` and `subject` name it (a repository, a node), `what` says it in a line, `details` add
    /// lines. Recording it again keeps when it began.
    ///
    /// # Errors
    /// When the record cannot be written.
    pub fn record(
        &self,
        kind: ProblemKind,
        subject: &str,
        what: &str,
        details: Vec<String>,
        now: u64,
    ) -> Result<Problem> {
        Ok(mesh_store::problems::record_problem(
            self.home.records.as_ref(),
            kind,
            subject,
            what,
            details,
            now,
            "mesh-controller",
        )?)
    }

    /// Clears a failure once what failed succeeded; returns whether one was recorded.
    ///
    /// # Errors
    /// When the record cannot be read or removed.
    pub fn clear(&self, kind: ProblemKind, subject: &str) -> Result<bool> {
        Ok(mesh_store::problems::clear_problem(
            self.home.records.as_ref(),
            kind,
            subject,
        )?)
    }

    /// Every failure recorded and not yet resolved, by kind and subject.
    ///
    /// # Errors
    /// When a record cannot be read or is not a problem.
    pub fn all(&self) -> Result<Vec<Problem>> {
        Ok(mesh_store::problems::read_problems(
            self.home.records.as_ref(),
        )?)
    }
}
