//! `archives`: the archive cache listed.

use crate::{Cli, Output};
use anyhow::{Context, Result};
use std::process::ExitCode;

/// Lists the archive cache (`<state-dir>/archives`): each archive's digest, size, when this
/// host last used it, and whether the last declaration applied names it.
///
/// After every apply the host removes the cached archives that declaration does not name,
/// except the 3 most recently used (so going back to a previous declaration needs no
/// fetch). It removes nothing else: not a file it did not make, not a symbolic link. A
/// prune that could not be done is logged and noted in the apply's report; the apply
/// itself is never failed by it.
#[derive(clap::Args)]
pub struct Args {}

/// Prints the listing.
pub fn exec(_args: &Args, cli: &Cli) -> Result<ExitCode> {
    let listing = mesh_host::archives::list_cache(&cli.state_dir).with_context(|| {
        format!(
            "reading the archive cache under {}",
            cli.state_dir.display()
        )
    })?;
    match cli.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&listing)?),
        Output::Text => print!("{}", mesh_host::archives::render_listing(&listing)),
    }
    Ok(ExitCode::SUCCESS)
}
