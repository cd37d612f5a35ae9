//! The mesh's controller as a library: everything `mesh-controller` does, as calls that return
//! values, so a Rust tool can compose, push, drive a one-machine-first rollout, read status and
//! change settings without copying a line of the binary.
//!
//! Start at [`runtime::Mesh::open`] (a mesh: its home — [`home::Home`], its records files under
//! it or the bus's records bucket — its store and the fleet it sends through) and the
//! [`runtime::Runtime`] that drives its plans. The folders are its layers, in the order they
//! depend on each other (a layer uses only those above it):
//! - [`error`], `fail` (the fail points, built with the `fail-points` feature);
//! - [`home`]: the records, and a node's last report as heard;
//! - [`catalogue`]: registered repositories (and the clones of those registered by URL),
//!   builds and what is deployed, a module's newest version, the catalogues a command reads;
//! - [`secrets`]: the mesh's secrets key and the operators' keys, the keys a rotation retired,
//!   a module's secret files, and `secrets rotate`;
//! - [`push`]: composing declarations and what a push did for each node;
//! - [`settings`]: settings layers read and replaced (every replaced layer kept), and the
//!   settings a coming version would orphan;
//! - [`bus`]: the controller on a fleet's bus — its credential, a node's NKey recorded and its
//!   password dropped ("Secrets never leave their owner"), the bus's users and their proof,
//!   looking after the bus, who is there, a merge announced to the daemon, its heartbeat;
//! - [`plans`]: merges make plans, kept so they resume where they stood;
//! - [`records`]: the records a command opens, moved onto the bus, exported and restored;
//! - [`status`]: each node's last report and what the plans wait on, the drift a person
//!   acknowledged, the nodes behind, and what it comes to (`status`'s exit code);
//! - [`executor`]: the one place declarations leave — a push and every rollout send through
//!   it, through a [`executor::fleet::Fleet`] (in process, or a fleet's bus), and it records
//!   what was sent and heard;
//! - [`runtime`]: a mesh opened once ([`runtime::Mesh::open`]: home, store, fleet) and the
//!   [`runtime::Runtime`] every command drives through; what `check` finds, what a plan would
//!   do, a new mesh home; `Mesh::status`, what `status` shows now;
//! - [`http`]: the status page, `/metrics` and `/status.json` over HTTP;
//! - [`hooks`]: the webhooks a forge announces a push through, and the repositories polled;
//! - [`daemon`]: the controller as a daemon on a fleet.
//!
//! What a person reads is rendered by the binary, never here; progress goes through the
//! [`Progress`] the caller gives.
//!
//! What it must never do: send a node a declaration before its grants, move a running
//! container's data without an acknowledgement, or say a node converged that did not.

#![warn(unreachable_pub)]

// In dependency order, a layer at a time: each uses only the layers above it. The public
// modules group the operations of their layer; the rest is the crate's own.
mod error;
#[cfg(feature = "fail-points")]
pub mod fail;
/// Without the `fail-points` feature a fail point is nothing (see `fail.rs`).
#[cfg(not(feature = "fail-points"))]
mod fail {
    /// Does nothing: this build has no fail points.
    #[inline(always)]
    pub(crate) fn point(_step: &str) {}
}

mod home;

pub mod catalogue;

pub mod secrets;

mod push;

pub mod settings;

pub mod bus;

mod intent;

pub mod plans;

pub mod records;

pub mod status;

mod executor;

mod runtime;

pub mod http;

mod hooks;

mod notify;

pub mod daemon;

// The front door: a mesh opened, the runtime that drives it, and the values they answer with.
pub use error::{Error, Given, NoMesh, Result};
pub use executor::fleet::in_process::{container_prefix, InProcessFleet};
pub use executor::fleet::{Fleet, Grants, ReportHeard};
pub use executor::{decide, push, sealed_for_their_nodes};
pub use home::heard::MAX_REPORT_BYTES;
pub use home::{declaration_key, Home, LayerChange};
pub use push::{
    compose_node, require_node, status as node_statuses, targets, verdict, Checked, NoNodeNamed,
    NodeResult, NodeStatus, PushResult, Verdict, SILENT_AFTER_SECS,
};
pub use runtime::check::{check, Check};
pub use runtime::init::init;
pub use runtime::preview::{
    diff, diff_all, merge as preview_merge, preview, NodeChange, NodeDiff, Preview,
};
pub use runtime::{
    DriveMode, DriveOptions, GivenFleet, MergeOptions, Mesh, MeshOptions, PushOptions, Runtime,
    SettingsEdit, SettingsOptions, StatusRead,
};

/// Where a long call says what it is doing, a line at a time (a rollout's sends, a plan's
/// builds). The binary prints them; an embedding tool logs or collects them.
pub trait Progress: Send + Sync {
    /// One line of progress.
    fn line(&self, text: &str);

    /// Where a module's rollout stands, after each of its steps: what a progress bar draws.
    /// The lines go on as well; the default ignores it.
    fn rollout(&self, _at: &RolloutProgress) {}
}

/// Where a module's rollout stands (counts only: the cost is the same at 10,000 nodes).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct RolloutProgress {
    /// The plan.
    pub plan: String,
    /// The module.
    pub module: String,
    /// The running nodes it goes to.
    pub total: usize,
    /// Those that applied it.
    pub applied: usize,
    /// Those sent it and not yet heard applying it.
    pub in_flight: usize,
    /// Those held for a move (the rule “A moved mount is held”).
    pub held: usize,
    /// The machine everything waits on while it goes first, if one does now.
    pub waiting_on: Option<String>,
    /// The stage, as a word: `first`, `rest`, `held`, `done`, `stopped`.
    pub stage: &'static str,
}

impl RolloutProgress {
    /// Where a rollout stands from the parts its plan record keeps (counters only).
    pub fn of_parts(
        plan: &str,
        module: &str,
        parts: &mesh_plan::rollout::RolloutParts,
    ) -> RolloutProgress {
        use mesh_plan::rollout::Stage;
        let (stage, waiting_on) = match parts.stage {
            Stage::NotStarted => ("first", None),
            Stage::BusNode => (
                "first",
                parts.bus_node.as_ref().map(|(node, _)| node.clone()),
            ),
            Stage::FirstNode => ("first", parts.first.clone()),
            Stage::Rest => ("rest", None),
            Stage::Held => ("held", None),
            Stage::Done => ("done", None),
            Stage::Stopped => ("stopped", None),
        };
        RolloutProgress {
            plan: plan.to_owned(),
            module: module.to_owned(),
            total: parts.nodes,
            applied: parts.applied,
            in_flight: parts.in_flight,
            held: parts.held,
            waiting_on,
            stage,
        }
    }
}

/// Progress nobody reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl Progress for Quiet {
    fn line(&self, _text: &str) {}
}

/// Progress kept in memory, for a caller that shows it later (and for tests).
#[derive(Debug, Default)]
pub struct Collected(pub std::sync::Mutex<Vec<String>>);

impl Progress for Collected {
    fn line(&self, text: &str) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(text.to_owned());
    }
}

/// Fails with every problem listed, when there are any.
///
/// # Errors
/// [`Error::Problems`] when `problems` is not empty: "the catalogue or inventory has N
/// problem(s); nothing was sent", each problem on its own line.
pub(crate) fn refuse_problems(problems: &[mesh_model::Diagnostic]) -> Result<()> {
    if problems.is_empty() {
        return Ok(());
    }
    Err(Error::Problems {
        problems: problems.to_vec(),
    })
}
