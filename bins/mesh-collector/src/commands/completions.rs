//! `completions`: shell completions from the command line itself.

use crate::Cli;
use clap::CommandFactory;
use std::process::ExitCode;

/// Prints shell completions on standard output, e.g.
/// `mesh-collector completions bash > /usr/share/bash-completion/completions/mesh-collector`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// Prints the completions (no home needed).
pub fn exec(args: &Args) -> ExitCode {
    match crate::cli_docs::print_completions(args.shell, Cli::command()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: writing the completions: {e}");
            crate::cli_docs::exit::Exit::Error.into()
        }
    }
}
