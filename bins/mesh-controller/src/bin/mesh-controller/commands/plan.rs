//! `plan`: the declaration a node would be sent now, or what would change.

use crate::{render, Output};
use anyhow::Result;
use mesh_controller::push;
use std::process::ExitCode;

/// Prints the declaration a node would be sent now, or with `--diff` what would change.
#[derive(clap::Args)]
pub struct Args {
    /// The node.
    node: String,
    /// Show what differs from what the node was last sent: resources added, changed and
    /// removed, with old and new values; a container's fields that make it recreate are
    /// marked. An unchanged node prints nothing.
    #[arg(long)]
    diff: bool,
    /// With `--diff`: exit 2 when there is a difference, 0 when there is none.
    #[arg(long, requires = "diff")]
    detailed_exitcode: bool,
}

/// Prints the declaration, or the diff (exit 2 with `--detailed-exitcode` when it is not
/// empty).
pub fn exec(args: Args, env: &super::Env) -> Result<ExitCode> {
    let checked = env.checked()?;
    if args.diff {
        let diff = push::diff(&env.home, &checked, &args.node)?;
        match env.output {
            Output::Json => env.print_json(&diff)?,
            Output::Text => print!("{}", diff.render_text()),
        }
        return Ok(if args.detailed_exitcode && !diff.is_empty() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        });
    }
    let declaration = push::compose_node(&env.home, &checked, &args.node)?;
    match env.output {
        Output::Json => env.print_json(&declaration)?,
        Output::Text => print!("{}", render::declaration(&declaration)),
    }
    Ok(ExitCode::SUCCESS)
}
