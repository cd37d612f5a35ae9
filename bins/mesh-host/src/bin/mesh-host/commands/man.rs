//! `man`: the manual pages from the command line itself.

use crate::Cli;
use anyhow::{Context, Result};
use clap::CommandFactory;
use std::path::PathBuf;
use std::process::ExitCode;

/// Prints the manual page (roff) on standard output, e.g. `mesh-host man | man -l -`; with
/// `--dir DIR`, writes one page per command and subcommand there and lists them.
#[derive(clap::Args)]
pub struct Args {
    /// Where to write every page (`mesh-host.1`, `mesh-host-COMMAND.1`, …).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Prints or writes the pages (nothing else is read).
pub fn exec(args: &Args) -> Result<ExitCode> {
    crate::cli_docs::man(Cli::command(), args.dir.as_deref())
        .context("writing the manual pages")?;
    Ok(ExitCode::SUCCESS)
}
