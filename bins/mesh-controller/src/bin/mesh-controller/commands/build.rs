//! `build`: modules built into the store, held until a plan rolls them out.

use crate::{render, Output};
use anyhow::Result;
use mesh_controller::plans;

use std::process::ExitCode;

/// Builds modules into the store: each at the commit of the newest open plan naming it
/// (for that plan), else at its repository's last planned commit.
///
/// A build is published held by its manifest and recorded; it is rolled out only by a
/// plan. `--dry-run` archives and prints the digest: nothing is published or recorded and
/// nothing can send it.
///
/// Exit codes: 0 built; 1 error (a module that does not validate is named with every
/// problem; no registered repository holds it).
#[derive(clap::Args)]
pub struct Args {
    /// The modules.
    #[arg(required_unless_present = "behind")]
    modules: Vec<String>,
    /// Build what the open plans have yet to build (the list `status` calls behind).
    #[arg(long, conflicts_with = "modules")]
    behind: bool,
    /// Archive and print the digest only.
    #[arg(long, conflicts_with = "behind")]
    dry_run: bool,
}

/// Builds the modules, or what the open plans have yet to build.
pub fn exec(args: Args, env: &super::Env) -> Result<ExitCode> {
    env.home.require()?;
    if args.behind {
        debug_assert!(args.modules.is_empty());
        let plans =
            env.runtime
                .block_on(env.drives().drive_open(&mesh_controller::DriveOptions {
                    mode: mesh_controller::DriveMode::BuildOnly,
                    ..Default::default()
                }))?;
        return super::print_plans_driven(env.output, &plans);
    }
    let built = env.runtime.block_on(plans::build_named(
        &env.home,
        env.store(),
        &args.modules,
        args.dry_run,
    ))?;
    match env.output {
        Output::Json => env.print_json(&built)?,
        Output::Text => print!("{}", render::builds(&built, args.dry_run)),
    }
    Ok(ExitCode::SUCCESS)
}
