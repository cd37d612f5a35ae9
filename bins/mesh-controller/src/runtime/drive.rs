//! Driving a plan: tier by tier, each module built, then rolled out one machine first through
//! the executor, the plan saved after every step.

use super::{Ctx, Started};
use crate::catalogue::builds;
use crate::error::{Context, Result};
use crate::executor::Executor;
use crate::home::Home;
use crate::plans::merge::lenient_dependency_graph;
use crate::plans::{outcome_of, plan_source, record_built, PlanRecord};
use mesh_model::module::CatalogueSource;
use mesh_model::plan::{PlanState, RolloutOutcome};
use std::collections::BTreeSet;

/// What driving a plan does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DriveMode {
    /// Build and roll out, tier by tier.
    #[default]
    All,
    /// Only build what is not built (`build --behind`).
    BuildOnly,
    /// Only roll out what is built, tier by tier, up to the first module not built
    /// (`push --behind`).
    RolloutOnly,
}

/// Carries a plan out as far as `mode` says, saving it after every step. A plan that is not
/// open is left as it is. A cancelled drive ([`Ctx::cancel`]) stops at its next step
/// boundary and writes nothing after.
///
/// # Errors
/// When the home, the store or the bus fails (a build's publish too: tried again, it may
/// pass); a module that does not validate or archive, or a stopped rollout, is recorded in the
/// plan (state `stopped`), not returned as an error.
pub(crate) async fn drive(ctx: &Ctx, record: &mut PlanRecord, mode: DriveMode) -> Result<()> {
    if !record.plan.state.is_open() {
        return Ok(());
    }
    let home = ctx.home();
    let id = record.plan.id.clone();
    let mut source: Option<CatalogueSource> = None;
    // The fleet, started at the first rollout (a drive that only builds starts none).
    let mut started: Option<Started> = None;
    // Modules that stopped, and every module of the plan built from one: not built, not rolled
    // out. The others go on.
    let mut blocked: BTreeSet<String> = BTreeSet::new();
    if record
        .plan
        .rollouts
        .values()
        .any(|r| matches!(r.outcome, Some(RolloutOutcome::Stopped { .. })))
    {
        hold(ctx, record, &mut source, &mut blocked)?;
    }
    let tiers = record.plan.tiers.clone();
    for (index, tier) in tiers.iter().enumerate() {
        if mode != DriveMode::RolloutOnly {
            for module in tier {
                if blocked.contains(module)
                    || record.work[module].build.is_some()
                    || outcome_of(record, module).is_some()
                {
                    continue;
                }
                if ctx.cancel.is_cancelled() {
                    return Ok(());
                }
                let catalogue = match &source {
                    Some(source) => source,
                    None => source.insert(plan_source(home, record)?),
                };
                record.plan.state = PlanState::Building;
                home.plans().write(record)?;
                // A module that does not validate or archive stops (the same on every
                // try); a store or records failure fails the drive, tried again.
                let built = match builds::prepare_build(
                    &builds::BuildSource {
                        repository: &record.plan.repository,
                        commit: &record.plan.commit,
                        source: catalogue,
                    },
                    module,
                    mesh_store::clock::now(),
                    false,
                ) {
                    Ok(prepared) => Ok(builds::publish_build(home, ctx.store(), prepared)
                        .await
                        .for_plan(&id, || format!("{id}: building `{module}`"))?),
                    Err(error) => Err(error),
                };
                match built {
                    Ok(built) => {
                        let still =
                            crate::plans::still_to_send(home, ctx.store(), &built.build).await?;
                        let identical = record_built(home, record, &built.build, &still)?;
                        ctx.progress().line(&format!(
                            "{id} tier {index}: built `{module}` {} ({} bytes){}",
                            mesh_host::short(&built.build.archive.digest),
                            built.build.archive.size,
                            if identical {
                                ", byte-identical to its deployed build: not redeployed".to_owned()
                            } else if !still.is_empty() {
                                format!(
                                    ", byte-identical to its deployed build, which {} ran \
                                     another build of: rolled out again",
                                    crate::executor::some_nodes(&still)
                                )
                            } else {
                                String::new()
                            }
                        ));
                        home.plans().write(record)?;
                        crate::fail::point(&format!("built:{module}"));
                    }
                    Err(error) => {
                        let reason = error.chain_line();
                        ctx.progress().line(&format!(
                            "{id} tier {index}: the build of `{module}` failed: {reason}"
                        ));
                        record
                            .plan
                            .rollouts
                            .entry(module.clone())
                            .or_default()
                            .outcome = Some(RolloutOutcome::Stopped {
                            node: String::new(),
                            reason: format!("the build failed: {reason}"),
                        });
                        home.plans().write(record)?;
                        hold(ctx, record, &mut source, &mut blocked)?;
                    }
                }
            }
        }
        if mode == DriveMode::BuildOnly {
            continue;
        }
        for module in tier {
            if blocked.contains(module) || outcome_of(record, module).is_some() {
                continue;
            }
            if record.work[module].build.is_none() {
                ctx.progress().line(&format!(
                    "{id} tier {index}: `{module}` is not built yet; a build of what is behind builds it"
                ));
                return end_drive(record, home, &blocked);
            }
            if ctx.cancel.is_cancelled() {
                return Ok(());
            }
            let fleet = match &mut started {
                Some(started) => started,
                None => started.insert(ctx.mesh.start_fleet().await?),
            };
            record.plan.state = PlanState::RollingOut;
            home.plans().write(record)?;
            ctx.progress()
                .line(&format!("{id} tier {index}: rolling out `{module}`"));
            let mut executor = Executor::new(home, fleet.fleet(), ctx.progress(), &ctx.moves)
                .cancelled_by(&ctx.cancel)
                .dropping_settings(&ctx.drop_settings);
            crate::executor::roll_out(&mut executor, ctx.store(), record, module)
                .await
                .for_plan(&id, || format!("{id}: rolling out `{module}`"))?;
            if ctx.cancel.is_cancelled() {
                return Ok(());
            }
            match outcome_of(record, module) {
                Some(RolloutOutcome::Stopped { .. }) => {
                    hold(ctx, record, &mut source, &mut blocked)?;
                }
                // Its build deployed: a key a rotation retired may no longer be needed.
                Some(RolloutOutcome::Done) => {
                    let retirement = crate::secrets::retired::sweep(home, ctx.store())
                        .await
                        .for_plan(&id, || format!("{id}: the retired mesh keys"))?;
                    for line in crate::secrets::retired::said(&retirement) {
                        ctx.progress().line(&format!("{id}: {line}"));
                    }
                }
                None => {}
            }
        }
    }
    // What the nodes should run changed with the builds the drive deployed: composed once, at
    // its end (a `status` meanwhile composes them itself).
    crate::intent::keep_current_logged(home, ctx.store(), "a drive").await;
    end_drive(record, home, &blocked)
}

/// Ends a drive: the plan is done, or stopped, when nothing is left to do
/// ([`mesh_plan::merge::plan_end`]); otherwise it stays open, rolling out once everything not
/// held back is built.
pub(super) fn end_drive(
    record: &mut PlanRecord,
    home: &Home,
    held: &BTreeSet<String>,
) -> Result<()> {
    record.held = held.clone();
    match mesh_plan::merge::plan_end(&record.plan, held) {
        Some(state) => record.plan.state = state,
        None => {
            let all_built = record
                .plan
                .modules
                .iter()
                .filter(|m| !held.contains(*m))
                .all(|m| record.work[m].build.is_some());
            if all_built {
                record.plan.state = PlanState::RollingOut;
            }
        }
    }
    home.plans().write(record)
}

/// Recomputes what the plan's stopped modules hold back ([`mesh_plan::merge::held_back`]),
/// saying which modules are newly held and from what.
fn hold(
    ctx: &Ctx,
    record: &PlanRecord,
    source: &mut Option<CatalogueSource>,
    held: &mut BTreeSet<String>,
) -> Result<()> {
    let source = match source {
        Some(source) => source,
        None => source.insert(plan_source(ctx.home(), record)?),
    };
    let graph = lenient_dependency_graph(source);
    let now_held = mesh_plan::merge::held_back(&record.plan, &graph);
    for module in now_held.difference(held) {
        if outcome_of(record, module).is_some() {
            continue;
        }
        let from = graph
            .get(module)
            .and_then(|deps| deps.iter().find(|d| now_held.contains(*d)))
            .map_or("a module", String::as_str);
        ctx.progress().line(&format!(
            "{}: `{module}` is built from `{from}`, which stopped: left as it is",
            record.plan.id
        ));
    }
    *held = now_held;
    Ok(())
}
