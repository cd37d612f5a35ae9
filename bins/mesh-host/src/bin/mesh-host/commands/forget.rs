//! `forget`: everything the mesh holds on this machine, listed or given back.

use crate::{Cli, Output};
use anyhow::{Context, Result};
use mesh_host::render_report;
use std::process::ExitCode;

/// Gives back everything the mesh holds on this machine: a host leaving the fleet, or a
/// quick-start home thrown away (`--root $MESH_HOME/roots/NODE --state-dir
/// $MESH_HOME/state/NODE`).
///
/// Without `--yes` it only lists what it would give back. With it, it applies a declaration
/// with nothing in it, so the rules of undeclaring hold: what the mesh made is removed
/// (containers stopped and removed, files deleted), what it found is given back as it was,
/// a directory holding data the mesh did not put there is kept, and nothing the mesh did
/// not make is touched. Stop `mesh-host serve` first, or its next declaration makes it all
/// again.
///
/// Exit codes: 0 everything given back (or nothing to do); 3 something could not be (the
/// report says what and why); 1 the state cannot be read.
#[derive(clap::Args)]
pub struct Args {
    /// Do it (without it, only list).
    #[arg(long)]
    yes: bool,
}

/// Lists what the mesh holds here, or (with `--yes`) gives it all back.
pub fn exec(args: &Args, cli: &Cli) -> Result<ExitCode> {
    let holdings = mesh_host::forget::holdings(&cli.state_dir)
        .with_context(|| format!("reading the host state under {}", cli.state_dir.display()))?;
    if !args.yes {
        match cli.output {
            Output::Json => println!("{}", serde_json::to_string_pretty(&holdings)?),
            Output::Text => print!("{}", mesh_host::forget::render_holdings(&holdings)),
        }
        return Ok(ExitCode::SUCCESS);
    }
    let config = super::host_config(cli);
    let node = cli.node.as_deref().unwrap_or("localhost");
    let report =
        mesh_host::forget::forget(&config, node, mesh_store::clock::now()).with_context(|| {
            format!(
                "forgetting what the mesh holds under {}",
                cli.root.display()
            )
        })?;
    match cli.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Output::Text => print!("{}", render_report(&report)),
    }
    Ok(super::report_exit_code(&report))
}
