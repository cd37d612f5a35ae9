//! `man`: the manual pages from the command line itself.

use crate::Cli;
use clap::CommandFactory;
use std::path::PathBuf;
use std::process::ExitCode;

/// Prints the manual page (roff) on standard output, e.g. `mesh-collector man | man -l -`; with
/// `--dir DIR`, writes one page per command and subcommand there and lists them.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to write every page (`mesh-collector.1`, `mesh-collector-COMMAND.1`, …).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Prints or writes the pages (no home needed).
pub fn exec(args: &Args) -> ExitCode {
    match crate::cli_docs::man(Cli::command(), args.dir.as_deref()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: writing the manual pages: {e}");
            crate::cli_docs::exit::Exit::Error.into()
        }
    }
}
