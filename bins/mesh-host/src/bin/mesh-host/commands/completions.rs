//! `completions`: shell completions from the command line itself.

use crate::Cli;
use anyhow::{Context, Result};
use clap::CommandFactory;
use std::process::ExitCode;

/// Prints shell completions on standard output, e.g.
/// `mesh-host completions bash > /usr/share/bash-completion/completions/mesh-host`.
#[derive(clap::Args)]
pub struct Args {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// Prints the completions (nothing else is read).
pub fn exec(args: &Args) -> Result<ExitCode> {
    crate::cli_docs::print_completions(args.shell, Cli::command())
        .context("writing the completions")?;
    Ok(ExitCode::SUCCESS)
}
