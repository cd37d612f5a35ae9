//! `init`: a new mesh home, empty or from the book's example.

use crate::Cli;
use anyhow::{bail, Result};
use std::process::ExitCode;

/// Makes a new mesh home.
///
/// With `--example`, the home holds the book's example mesh: six modules, three nodes
/// (control, home, laptop) and their settings, with sandbox roots under `<home>/roots`.
#[derive(clap::Args)]
pub struct Args {
    /// Start from the book's example mesh.
    #[arg(long)]
    example: bool,
}

/// `init` makes a home on this machine: refused with `--bus`, before anything is opened.
pub fn refuse_bus(cli: &Cli) -> Result<()> {
    if let Some(bus) = &cli.bus.bus {
        bail!(
            "`init` makes a mesh home on this machine, not on a bus; make it without --bus, then \
             move its records with `mesh-controller --home {} --bus {} records import`",
            cli.home.display(),
            bus
        );
    }
    Ok(())
}

/// Makes the home.
pub fn exec(args: Args, env: &super::Env) -> Result<ExitCode> {
    mesh_controller::init(&env.home, args.example)?;
    println!("made a mesh home at {}", env.home.root().display());
    Ok(ExitCode::SUCCESS)
}
