//! A drive that fails is not silent (the rule “Nothing fails silently”): it is a problem of its
//! plan in `status` — kind `drive`, the plan, the module it was at, the error, since when and
//! how many attempts — and the plan is driven again after a backoff that doubles with each
//! attempt ([`retry_after`], a pure function of the attempts). A drive that does not fail
//! clears the problem; so does the plan's being superseded.

use crate::error::Error;
use crate::home::Home;
use mesh_store::problems::{Attempt, ProblemKind};
use std::time::Duration;

/// The first wait before a failed drive is tried again.
pub(crate) const FIRST_RETRY: Duration = Duration::from_secs(2);

/// The longest wait before a failed drive is tried again.
pub(crate) const LONGEST_RETRY: Duration = Duration::from_secs(5 * 60);

/// How long after its `attempts`-th failure (1 the first) a plan's drive is tried again:
/// [`FIRST_RETRY`], doubled with each attempt, at most [`LONGEST_RETRY`].
pub(crate) fn retry_after(attempts: u32) -> Duration {
    let doublings = attempts.saturating_sub(1).min(16);
    FIRST_RETRY
        .saturating_mul(1 << doublings)
        .min(LONGEST_RETRY)
}

/// Records the failed drive of `plan` as a problem (one attempt more); returns how many
/// attempts it has counted, or `None` when it could not be written (said in the log).
pub(crate) fn record_failure(home: &Home, plan: &str, error: &Error) -> Option<u32> {
    let what = error.chain_line();
    let recorded = mesh_store::problems::record_attempt(
        home.records(),
        &Attempt {
            kind: ProblemKind::Drive,
            subject: plan,
            plan,
            module: error.module(),
            what: &format!("the drive of {plan} failed: {what}"),
            details: &[],
            now: mesh_store::clock::now(),
            by: "mesh-controller serve",
        },
    );
    match recorded {
        Ok(problem) => Some(problem.attempts),
        Err(record_error) => {
            tracing::error!(plan = %plan, error = %record_error,
                "the failed drive's problem could not be written");
            None
        }
    }
}

/// Clears the drive problem of `plan`, if it has one: its drive did not fail, or it ended.
pub(crate) fn clear_failure(home: &Home, plan: &str) {
    match home.problems().clear(ProblemKind::Drive, plan) {
        Ok(true) => tracing::info!(plan = %plan, "the plan's drive problem is resolved"),
        Ok(false) => {}
        Err(error) => tracing::error!(plan = %plan, error = error.chain_line(),
            "the plan's drive problem could not be cleared"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_drive_waits_twice_as_long_each_attempt_up_to_five_minutes() {
        let waits: Vec<u64> = (1..=10).map(|n| retry_after(n).as_secs()).collect();
        assert_eq!(waits, [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(retry_after(0), FIRST_RETRY);
        assert_eq!(retry_after(u32::MAX), LONGEST_RETRY);
    }
}
