//! `mesh-host`: the host agent's command line. `apply` applies a declaration file by hand.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use mesh_apply::HostConfig;
use mesh_host::render_report;
use mesh_model::declaration::Declaration;
use mesh_model::report::MachineState;
use std::path::PathBuf;
use std::process::ExitCode;

/// The mesh's host agent: applies declarations to this machine under a root prefix.
///
/// Exit codes: 0 converged; 3 applied but some resources did not take (see the report);
/// 2 refused (bad input, nothing changed); 1 any other error.
#[derive(Parser)]
#[command(version, about, long_about)]
struct Cli {
    /// The root prefix resources are applied under (`/` on a real machine; a sandbox in tests).
    #[arg(long, default_value = "/")]
    root: PathBuf,
    /// The host's state directory (what it made, what it found, failures, windows).
    #[arg(long, default_value = "/var/lib/mesh-host")]
    state_dir: PathBuf,
    /// Output for people (`text`) or scripts (`json`).
    #[arg(long, value_enum, default_value = "text", global = true)]
    output: Output,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Applies a declaration file (JSON) once and prints the report.
    ///
    /// A file that is not a valid declaration is refused with the reason, and nothing under
    /// the root changes.
    Apply {
        /// The declaration, as `mesh-controller plan NODE --output json` prints it.
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(1)
        }
    }
}

fn run() -> Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::Apply { file } => {
            let bytes =
                std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
            let declaration = match Declaration::from_json(&bytes) {
                Ok(declaration) => declaration,
                Err(error) => {
                    eprintln!(
                        "error: {} refused, nothing applied: {error}",
                        file.display()
                    );
                    return Ok(ExitCode::from(2));
                }
            };
            let config = HostConfig {
                root: cli.root,
                state_dir: cli.state_dir,
                ..HostConfig::default()
            };
            let report = match mesh_apply::apply(&config, &declaration, mesh_host::now()) {
                Ok(report) => report,
                Err(error) => {
                    eprintln!("error: apply refused, nothing applied: {error}");
                    return Ok(ExitCode::from(2));
                }
            };
            match cli.output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
                Output::Text => print!("{}", render_report(&report)),
            }
            Ok(match report.machine {
                MachineState::Converged => ExitCode::SUCCESS,
                MachineState::MidChange | MachineState::Partial => ExitCode::from(3),
            })
        }
    }
}
