//! The hosts declarations go to, as a transport: send, hear the next report, issue grants. The
//! seam between the controller's decisions and the machines; what is recorded of a send or a
//! report is the executor's ([`crate::executor::Executor`]), never a fleet's.
//!
//! Start at [`Fleet`]. Two fleets: [`in_process::InProcessFleet`] (the embedded default: one
//! host agent per node in this process) and [`nats::NatsFleet`] (a fleet's real hosts over
//! NATS, with real grants). A Rust tool may bring its own (`tests/support/simulated.rs` is one).

pub(crate) mod in_process;
pub(crate) mod nats;

use crate::bus::users::UsersFile;
use crate::error::{Error, Result};
use mesh_model::declaration::Outgoing;
use mesh_model::inventory::Inventory;
use mesh_model::module::Catalogue;
use mesh_model::report::Report;
use std::time::Duration;

/// What issuing grants came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grants {
    /// Issued: what was done, for a progress line.
    Issued(String),
    /// Not issued, and why: the caller tries again (a rollout) or fails the send (a push).
    Failed(String),
}

/// What sending several declarations came to.
#[derive(Debug, Default)]
pub struct Sent {
    /// The declarations the fleet took, by their place in those given, in the order taken.
    pub taken: Vec<usize>,
    /// The first send that failed, if one did (the others may have been taken).
    pub failed: Option<Error>,
}

/// What a fleet heard on a node's report subject.
#[derive(Debug, Clone)]
pub enum ReportHeard {
    /// A report that reads, published by its own node.
    Report(Report),
    /// What `node` published as its report and does not read as one (garbage, a newer major
    /// format, over the report limit, naming another node): that node's problem, passed on so
    /// the gate judges it at once ([`crate::home::heard::judge`]).
    Unreadable {
        /// The node whose subject it was published on.
        node: String,
        /// Why it does not read, its size and first bytes.
        report: crate::home::heard::UnreadableReport,
    },
}

impl ReportHeard {
    /// The node it was heard from.
    pub fn node(&self) -> &str {
        match self {
            ReportHeard::Report(report) => &report.node,
            ReportHeard::Unreadable { node, .. } => node,
        }
    }
}

/// The hosts the executor sends to.
///
/// # Guarantees (what an implementation must keep)
/// - [`Fleet::send`] returns once the declaration is on its way for certain (stored by the
///   bus); sending the same declaration twice is harmless (a host's apply is idempotent).
/// - [`Fleet::next_report`] returns only reports published on their own node's subject; one
///   that does not read is passed on as [`ReportHeard::Unreadable`], never dropped.
/// - [`Fleet::issue_grants`] answers [`Grants::Failed`] for a grant that failed (the caller
///   tries it again or fails the send), and never sends code.
/// - Nothing is recorded here: the executor records what was sent and heard.
#[async_trait::async_trait]
pub trait Fleet: Send {
    /// Fixes what the sends composed from `catalogue` and `inventory` need of the fleet (over
    /// NATS: the bus's users and granted buckets).
    ///
    /// # Errors
    /// The grants cannot be composed (every problem named).
    fn prepare(&mut self, catalogue: &Catalogue, inventory: &Inventory) -> Result<()>;

    /// Why the sends change the bus's users, if they do, so that the node holding the bus goes
    /// first. `grants_change` says whether a rolled-out module's own grants change (in process,
    /// where there is nothing confirmed to compare with, that is the test).
    fn users_change(&self, grants_change: bool) -> Option<String>;

    /// The node holding the bus and the users file every declaration sent to it names (from
    /// its archive in the store, [`crate::bus::users::with_users_file`]).
    fn users_file(&self) -> Option<UsersFile>;

    /// The state directory of `node`'s host when it runs in this process (the embedded
    /// fleet): its age key is there, so its secrets are sealed to it without an enrollment.
    /// `None` for a host elsewhere, whose key `node enroll --age-key` records.
    fn host_state_dir(&self, _node: &str) -> Option<std::path::PathBuf> {
        None
    }

    /// Issues the grants of `nodes`.
    ///
    /// # Errors
    /// The records cannot be read or written.
    async fn issue_grants(&mut self, nodes: &[String]) -> Result<Grants>;

    /// Sends `declaration` to its node (its canonical JSON, made once by the caller).
    ///
    /// # Errors
    /// The transport did not take it.
    async fn send(&mut self, declaration: &Outgoing) -> Result<()>;

    /// Sends several declarations (to distinct nodes), as [`Fleet::send`] each; a fleet that
    /// can overlaps them (bounded). The default sends one after another and stops at the first
    /// that fails.
    async fn send_many(&mut self, declarations: &[&Outgoing]) -> Sent {
        let mut sent = Sent::default();
        for (index, declaration) in declarations.iter().enumerate() {
            match self.send(declaration).await {
                Ok(()) => sent.taken.push(index),
                Err(error) => {
                    sent.failed = Some(error);
                    break;
                }
            }
        }
        sent
    }

    /// The next report heard within `wait`, readable or not.
    ///
    /// # Errors
    /// The fleet's reports ended.
    async fn next_report(&mut self, wait: Duration) -> Result<Option<ReportHeard>>;

    /// The next report of a node `wanted` says yes to, heard within `wait`, readable or not;
    /// every other report heard meanwhile is passed over — without being read, where the
    /// fleet can tell its node first (over NATS, by its subject) — and so is lost to the
    /// caller. At most [`PASSED_OVER`] are passed over in one call (then `None`, as if nothing
    /// was heard), so a flood of others cannot hold the caller.
    ///
    /// # Errors
    /// The fleet's reports ended.
    async fn next_report_of(
        &mut self,
        wait: Duration,
        wanted: &(dyn for<'n> Fn(&'n str) -> bool + Sync),
    ) -> Result<Option<ReportHeard>> {
        let until = tokio::time::Instant::now() + wait;
        for _ in 0..PASSED_OVER {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            match self.next_report(left).await? {
                Some(heard) if wanted(heard.node()) => return Ok(Some(heard)),
                Some(_) => {}
                None => return Ok(None),
            }
        }
        Ok(None)
    }
}

/// The most reports [`Fleet::next_report_of`] passes over in one call.
pub(crate) const PASSED_OVER: usize = 4_096;
