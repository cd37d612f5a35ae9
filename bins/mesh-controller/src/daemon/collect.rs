//! The daemon collects the records by itself, as `records collect` does by hand: every
//! [`super::ServeOptions::collect_every`], and soon after a drive ends a plan, it folds the
//! plans that ended ([`crate::plans::fold`]: their nodes' records removed together), removes the
//! plans older than the newest kept that nothing reads, and the declarations no record names
//! past the grace ([`crate::records::collect_held`]).
//!
//! # Guarantees
//! - A collection runs on a blocking thread of its own, at most one at a time, holding the
//!   runtime's plans lock: the loop goes on hearing merges meanwhile.
//! - A plan being driven is never folded: its drive is writing its records.
//! - A collection that fails is logged and tried again at the next one; nothing is lost (a fold
//!   stopped part way is done again whole).

use crate::runtime::Runtime;
use std::time::Duration;

/// How often the daemon collects unless told (`serve --collect-every`).
pub(crate) const COLLECT_EVERY: Duration = Duration::from_secs(5 * 60);

/// The daemon's collections: when the next is due, and the one running.
pub(crate) struct Collections {
    every: Duration,
    keep_plans: usize,
    grace: Duration,
    next: tokio::time::Instant,
    running: Option<tokio::task::JoinHandle<()>>,
}

impl Collections {
    /// The first collection due at once.
    pub(crate) fn new(every: Duration, keep_plans: usize, grace: Duration) -> Collections {
        Collections {
            every,
            keep_plans,
            grace,
            next: tokio::time::Instant::now(),
            running: None,
        }
    }

    /// A plan ended: collect soon.
    pub(crate) fn plan_ended(&mut self) {
        self.next = tokio::time::Instant::now();
    }

    /// Starts a collection when one is due and none runs.
    pub(crate) fn start_due(&mut self, runtime: &Runtime) {
        if self
            .running
            .as_ref()
            .is_some_and(|task| !task.is_finished())
        {
            return;
        }
        let now = tokio::time::Instant::now();
        if now < self.next {
            return;
        }
        self.next = now + self.every;
        // The lock is taken on the collection's own thread: on a bus it is a lease there, and
        // waiting for a bus that is gone must not hold the daemon's loop (nor its stop).
        let holder = runtime.plans_holder();
        let home = runtime.mesh().home().clone();
        let driving = runtime.driving();
        let (grace, keep) = (self.grace, self.keep_plans);
        self.running = Some(tokio::task::spawn_blocking(move || {
            let _hold = match holder.hold("collecting records") {
                Ok(hold) => hold,
                Err(error) => {
                    tracing::error!(
                        error = error.chain_line(),
                        "the records could not be collected: the plans lock"
                    );
                    return;
                }
            };
            match crate::records::collect_held(
                &home,
                mesh_store::clock::now(),
                grace,
                keep,
                &driving,
            ) {
                Ok(done) => tracing::info!(
                    folded = ?done.plans.plans,
                    node_records = done.plans.node_records,
                    removed_plans = ?done.plans.removed_plans,
                    declarations = done.collected.count,
                    bytes = done.collected.bytes,
                    "records collected"
                ),
                Err(error) => tracing::error!(
                    error = error.chain_line(),
                    "the records could not be collected; tried again at the next collection"
                ),
            }
        }));
    }
}
