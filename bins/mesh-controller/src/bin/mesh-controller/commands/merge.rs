//! `merge`: hears a merge, plans it, builds and rolls it out.

use crate::{render, Output};
use anyhow::Result;
use mesh_cli_docs::exit::Exit;
use mesh_controller::bus;

use std::process::ExitCode;

/// Hears a merge to a registered repository: plans it, then builds and rolls it out.
///
/// The paths changed since the repository's last planned commit are read whole from git;
/// the modules they belong to and every module depending on them are planned in tiers (the
/// first merge plans every module). Older open plans of the same repository and branch are
/// superseded, their unfinished modules taken in. Each tier's modules are built (a build
/// byte-identical to the deployed one is not redeployed) and rolled out one machine first.
/// A merge heard twice makes one plan. Open plans of other repositories are resumed after.
/// With `--bus`, the rollouts go to the fleet's hosts, each send's grants issued first.
///
/// With `--announce` (and `--bus`), the merge of the branch's head is announced to the running
/// daemon (`serve`) instead, which plans and drives it: so two controllers never drive one plan.
/// A git `post-receive` hook runs it.
///
/// Exit codes: 0 the plan is done (or was already made, or `--plan-only`; or announced); 1
/// error (a dependency cycle among the affected modules is named; no plan is made; with
/// `--announce`, no daemon has heard merges on the bus); 3 the plan stopped (a build failed,
/// or a rollout stopped at a node: `status` says where and why).
#[derive(clap::Args)]
pub struct Args {
    /// The repository.
    repo: String,
    /// The merged commit (default: the head of the repository's branch).
    #[arg(long)]
    commit: Option<String>,
    /// Make the plan and stop there: nothing is built or sent until `plans resume`,
    /// `build --behind`, `push --behind` or the next merge.
    #[arg(long)]
    plan_only: bool,
    /// Send a module's nodes whose running container would get another host directory at
    /// a mount (its data moving); without it the rollout holds such a node, names module,
    /// mount and both directories, and goes on with the others. Repeatable.
    #[arg(long = "move", value_name = "MODULE")]
    moves: Vec<String>,
    /// Send a module's nodes whose layers hold a setting its new version no longer accepts
    /// (or accepts with another type), that setting dropped: each node gets what the version
    /// gives instead, and says so. Without it the rollout holds such a node, naming module,
    /// layer, key and value, and goes on with the others. Repeatable.
    #[arg(long = "drop-settings", value_name = "MODULE")]
    drop_settings: Vec<String>,
    /// Announce the merge of the branch's head on the bus to the running daemon (`serve`),
    /// which plans and drives it, instead of planning it here; prints what was announced.
    #[arg(long, conflicts_with_all = ["commit", "plan_only", "moves", "drop_settings"])]
    announce: bool,
}

/// Hears the merge (with `--plan-only`, answering with the plan's preview): exit 3 when the
/// plan stopped.
pub fn exec(args: Args, env: &super::Env) -> Result<ExitCode> {
    env.home.require()?;
    if args.announce {
        return announce(&args.repo, env);
    }
    let options = mesh_controller::MergeOptions {
        commit: args.commit.clone(),
        plan_only: args.plan_only,
        moves: super::Env::moves(&args.moves),
        drop_settings: super::Env::moves(&args.drop_settings),
    };
    let merged = env.runtime.block_on(mesh_controller::preview_merge(
        &env.drives(),
        &args.repo,
        &options,
    ))?;
    match env.output {
        Output::Json => env.print_json(&merged)?,
        Output::Text => {
            print!("{}", render::merge(&merged.outcome));
            if let Some(preview) = &merged.preview {
                print!("{}", render::preview(preview));
            }
        }
    }
    Ok(if merged.outcome.stopped() {
        Exit::Attention.into()
    } else {
        ExitCode::SUCCESS
    })
}

/// `merge NAME --announce`: the merge of the branch's head announced to the daemon.
fn announce(repo: &str, env: &super::Env) -> Result<ExitCode> {
    let bus = env.need_bus()?;
    let announced = env
        .runtime
        .block_on(bus::announce_head(&env.home, &bus, repo))?;
    match env.output {
        Output::Json => env.print_json(&announced)?,
        Output::Text => print!("{}", render::announced(&announced)),
    }
    Ok(ExitCode::SUCCESS)
}
