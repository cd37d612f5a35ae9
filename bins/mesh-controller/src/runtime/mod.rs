//! The controller's runtime: plans driven — built, then rolled out through the executor — on
//! the fleet the context names.
//!
//! Start at [`merge`] (a merge heard, planned and driven), [`drive_open`] (`plans resume`,
//! `push --behind`, `build --behind`) and [`push`] (`push`).

mod drive;

pub use drive::drive;

use crate::builds;
use crate::error::{Context, Error, Result};
use crate::fleet::Fleet;
use crate::home::Home;
use crate::plans::merge::Heard;
use crate::plans::{MergeOutcome, PlansLock};
use crate::push::{Checked, PushResult};
use crate::repos;
use mesh_model::plan::Plan;
use mesh_store::store::ArchiveStore;
use std::collections::BTreeSet;
use std::time::Duration;

/// What driving a plan does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriveMode {
    /// Build and roll out, tier by tier.
    All,
    /// Only build what is not built (`build --behind`).
    BuildOnly,
    /// Only roll out what is built, tier by tier, up to the first module not built
    /// (`push --behind`).
    RolloutOnly,
}

/// A fleet a caller gives the plans to drive through ([`Ctx::fleet`]).
pub type GivenFleet = std::sync::Arc<tokio::sync::Mutex<Box<dyn Fleet>>>;

/// The fleet of `ctx` when it brings none: over its bus when one is named, else in process.
///
/// # Errors
/// The bus cannot be reached; the store cannot be named to the in-process hosts.
pub async fn start_fleet(ctx: &Ctx<'_>) -> Result<Box<dyn Fleet>> {
    Ok(match &ctx.bus {
        Some(bus) => Box::new(
            crate::fleet::nats::NatsFleet::start(ctx.home, bus, &builds::store_spec(ctx.store)?)
                .await?,
        ),
        None => Box::new(
            crate::fleet::in_process::InProcessFleet::start(
                ctx.home,
                builds::store_spec(ctx.store)?,
            )
            .await?,
        ),
    })
}

/// The controller's context for plan work.
pub struct Ctx<'a> {
    /// The mesh home.
    pub home: &'a Home,
    /// The archive store.
    pub store: &'a dyn ArchiveStore,
    /// Where progress goes.
    pub progress: &'a dyn crate::Progress,
    /// A fleet's bus: rollouts go to its real hosts (`None`: the embedded default, one host
    /// agent per node in this process).
    pub bus: Option<crate::credentials::BusArgs>,
    /// Modules whose running containers' data may move (`--move MODULE`): their held nodes are
    /// sent (rule 12). Empty: every move is held.
    pub moves: BTreeSet<String>,
    /// A fleet the caller brings (a Rust tool's own hosts, a simulation): every rollout sends
    /// through it. `None`: the bus's real hosts when `bus` is named, else one host agent per
    /// node in this process.
    pub fleet: Option<GivenFleet>,
}

/// Hears a merge to a registered repository: makes its plan and, unless `plan_only`, drives it
/// and then any other open plan.
///
/// # Errors
/// When git cannot be read, the affected modules depend on each other in a cycle (named), or a
/// plan cannot be saved; a failed build or rollout is not an error but a stopped plan.
pub async fn merge(
    ctx: &Ctx<'_>,
    name: &str,
    commit: Option<&str>,
    plan_only: bool,
) -> Result<MergeOutcome> {
    let home = ctx.home;
    let repo = home.repo(name)?;
    let commit = repos::resolve(&repo.path, commit.unwrap_or(&repo.branch))
        .for_repo(name, || format!("repository `{name}`"))?;
    let _lock = PlansLock::acquire(home, &format!("merge {name}"))?;
    let (mut record, superseded) =
        match crate::plans::merge::merge(home, ctx.progress, repo, &commit)? {
            Heard::AlreadyPlanned(plan) => return Ok(MergeOutcome::AlreadyPlanned { plan }),
            Heard::Planned { record, superseded } => (record, superseded),
        };
    if !plan_only {
        drive(ctx, &mut record, DriveMode::All).await?;
        for mut other in home.plans()? {
            if other.plan.id != record.plan.id && other.plan.state.is_open() {
                ctx.progress
                    .line(&format!("resuming the open plan {}", other.plan.id));
                drive(ctx, &mut other, DriveMode::All).await?;
            }
        }
    }
    Ok(MergeOutcome::Planned {
        plan: record.plan,
        superseded,
        forgotten: record.forgotten.into_iter().collect(),
    })
}

/// Drives every open plan (or the one named) as far as `mode` says.
///
/// # Errors
/// As [`drive`]; naming a plan that is not open is an error.
pub async fn drive_open(ctx: &Ctx<'_>, only: Option<&str>, mode: DriveMode) -> Result<Vec<Plan>> {
    let _lock = PlansLock::acquire(ctx.home, "driving the open plans")?;
    let mut out = Vec::new();
    if let Some(id) = only {
        let record = ctx.home.plan(id)?;
        if !record.plan.state.is_open() {
            return Err(Error::refused(format!(
                "plan `{id}` is not open (it is {}); a plan that ended is never resumed",
                mesh_plan::plans::state_word(&record.plan.state)
            )));
        }
    }
    for mut record in ctx.home.plans()? {
        if !record.plan.state.is_open() || only.is_some_and(|id| id != record.plan.id) {
            continue;
        }
        drive(ctx, &mut record, mode).await?;
        out.push(record.plan);
    }
    Ok(out)
}

/// Composes, sends and applies the declarations of `nodes` through the context's fleet (the
/// bus's hosts, a fleet the caller brings, or the embedded default), grants first, holding a
/// node whose running container's data would move unless its module is in `ctx.moves`, and
/// waits up to `timeout` for each node's report.
///
/// # Errors
/// When the fleet cannot be started, a grant fails (nothing else is sent), or a record cannot
/// be read or written.
pub async fn push(
    ctx: &Ctx<'_>,
    checked: &Checked,
    nodes: &[String],
    timeout: Duration,
) -> Result<Vec<PushResult>> {
    let mut fleet = start_fleet(ctx).await?;
    crate::executor::push_telling(
        ctx.home,
        fleet.as_mut(),
        checked,
        nodes,
        &ctx.moves,
        timeout,
        ctx.progress,
    )
    .await
}
