//! `plans`: listing, showing, closing and resuming plans.

use crate::{render, Output};
use anyhow::Result;
use clap::Subcommand;
use mesh_controller::plans;

use std::process::ExitCode;

/// Lists the plans; `plans show`, `plans close`, `plans resume`, `plans retry`.
///
/// Exit codes: 0 success; 1 error (no such plan; closing or resuming a plan that is not
/// open; retrying one that is not stopped); 3 `plans resume` or `plans retry` left a plan
/// stopped.
#[derive(clap::Args)]
pub struct Args {
    /// What to do (default: list every plan).
    #[command(subcommand)]
    command: Option<Command>,
}

/// `plans` subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Lists every plan (the default).
    List,
    /// Shows one plan: what changed, its tiers, each module's build and rollout.
    Show {
        /// The plan's id (`plan-3`).
        id: String,
        /// Instead, what its rollouts would do across the fleet (as `merge --plan-only`
        /// answers): per tier and module the first machine, each node that changes and how,
        /// the nodes held for a move or in a window, and those unchanged. Reads only; sends
        /// nothing.
        #[arg(long)]
        preview: bool,
    },
    /// Closes an open plan by hand; it is never resumed.
    Close {
        /// The plan's id.
        id: String,
        /// Why, kept in the plan.
        #[arg(long, default_value = "")]
        note: String,
    },
    /// Drives the open plans (or one) on from where they stand: a controller stopped
    /// mid-rollout resumes here (with `--bus`, on the fleet's hosts).
    Resume {
        /// Only this plan.
        id: Option<String>,
        /// Send the nodes of MODULE held because its running container's data would move
        /// (see `status`). Repeatable.
        #[arg(long = "move", value_name = "MODULE")]
        moves: Vec<String>,
        /// Send the nodes of MODULE held because their layers hold a setting its new version
        /// orphans (see `status`), that setting dropped. Repeatable.
        #[arg(long = "drop-settings", value_name = "MODULE")]
        drop_settings: Vec<String>,
    },
    /// Opens a stopped plan again where it stopped, once its cause is fixed (a port freed, a
    /// group made), and drives it: the node its rollout stopped at is sent again (grants
    /// first), then the nodes after it; nodes that applied are not sent again, and a module
    /// whose build failed is built again. A plan a newer plan of its repository and branch came
    /// after is refused (merge again instead).
    Retry {
        /// The stopped plan's id.
        id: String,
        /// As for `plans resume`: send the nodes of MODULE held for a move. Repeatable.
        #[arg(long = "move", value_name = "MODULE")]
        moves: Vec<String>,
        /// As for `plans resume`: send the nodes of MODULE held for orphaned settings, those
        /// dropped. Repeatable.
        #[arg(long = "drop-settings", value_name = "MODULE")]
        drop_settings: Vec<String>,
    },
}

impl Args {
    /// Whether it only reads (lists or shows; a preview sends nothing).
    pub fn reads_only(&self) -> bool {
        match &self.command {
            None | Some(Command::List | Command::Show { .. }) => true,
            Some(Command::Close { .. } | Command::Resume { .. } | Command::Retry { .. }) => false,
        }
    }
}

/// Lists, shows, closes, resumes or retries.
pub fn exec(args: Args, env: &super::Env) -> Result<ExitCode> {
    let home = &env.home;
    match args.command.unwrap_or(Command::List) {
        Command::List => {
            let plans = home.plans().all()?;
            match env.output {
                Output::Json => {
                    let plans: Vec<_> = plans.into_iter().map(|p| p.plan).collect();
                    env.print_json(&plans)?
                }
                Output::Text => print!("{}", render::plans_list(&plans)),
            }
        }
        Command::Show { id, preview: true } => {
            home.require()?;
            let record = home.plans().get(&id)?;
            let preview = env.runtime.block_on(mesh_controller::preview(
                &env.drives().ctx(&Default::default(), &Default::default()),
                &record,
            ))?;
            match env.output {
                Output::Json => env.print_json(&preview)?,
                Output::Text => print!("{}", render::preview(&preview)),
            }
        }
        Command::Show { id, preview: false } => {
            let record = home.plans().get(&id)?;
            match env.output {
                Output::Json => env.print_json(&record)?,
                Output::Text => print!("{}", render::plan_show(&record)),
            }
        }
        Command::Close { id, note } => {
            let record = plans::close(home, &id, &note)?;
            match env.output {
                Output::Json => env.print_json(&record.plan)?,
                Output::Text => print!("{}", render::plan_summary(&record.plan)),
            }
        }
        Command::Resume {
            id,
            moves,
            drop_settings,
        } => {
            home.require()?;
            let plans =
                env.runtime
                    .block_on(env.drives().drive_open(&mesh_controller::DriveOptions {
                        plan: id,
                        mode: mesh_controller::DriveMode::All,
                        moves: super::Env::moves(&moves),
                        drop_settings: super::Env::moves(&drop_settings),
                    }))?;
            return super::print_plans_driven(env.output, &plans);
        }
        Command::Retry {
            id,
            moves,
            drop_settings,
        } => {
            home.require()?;
            let plans =
                env.runtime
                    .block_on(env.drives().retry(&mesh_controller::DriveOptions {
                        plan: Some(id),
                        mode: mesh_controller::DriveMode::All,
                        moves: super::Env::moves(&moves),
                        drop_settings: super::Env::moves(&drop_settings),
                    }))?;
            return super::print_plans_driven(env.output, &plans);
        }
    }
    Ok(ExitCode::SUCCESS)
}
