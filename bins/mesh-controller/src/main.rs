//! `mesh-controller`: composes each node's declaration from the catalogue and inventory, shows
//! it, sends it, and keeps what was sent and what each node reported.
//!
//! Start at [`Command`]; the mesh home's layout is in [`home`]; sending is in [`push`]; what a
//! person reads is rendered in [`render`].

mod demo;
mod home;
mod init;
mod push;
mod render;
mod settings;

use anyhow::{bail, Result};
use clap::{Parser, Subcommand, ValueEnum};
use home::Home;
use std::path::PathBuf;
use std::process::ExitCode;

/// The mesh's controller: composes what each machine should hold, shows it, and sends it.
///
/// Exit codes: 0 success; 1 error (nothing was changed unless the message says otherwise);
/// 2 refused or held, see the message (e.g. `push` with no node, a held move, `plan --diff
/// --detailed-exitcode` with a difference); 3 sent, but some node did not converge.
#[derive(Parser)]
#[command(version, about, long_about)]
pub struct Cli {
    /// The mesh home: inventory, catalogue, settings, what was sent, reports.
    #[arg(long, env = "MESH_HOME", default_value = "mesh-home", global = true)]
    home: PathBuf,
    /// Output for people (`text`) or scripts (`json`).
    #[arg(long, value_enum, default_value = "text", global = true)]
    output: Output,
    #[command(subcommand)]
    command: Command,
}

/// How results are printed.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// For people.
    Text,
    /// For scripts: one JSON document on standard output.
    Json,
}

/// The controller's commands.
#[derive(Subcommand)]
pub enum Command {
    /// Makes a new mesh home.
    ///
    /// With `--example`, the home holds the book's example mesh: six modules, three nodes
    /// (control, home, laptop) and their settings, with sandbox roots under `<home>/roots`.
    Init {
        /// Start from the book's example mesh.
        #[arg(long)]
        example: bool,
    },
    /// Validates the catalogue and the inventory, listing every problem at once.
    Check,
    /// Prints the declaration a node would be sent now, or with `--diff` what would change.
    Plan {
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
    },
    /// Composes, sends and applies declarations, then prints what each node reported.
    ///
    /// Name the nodes, or say `--all`: a push with no node is refused.
    Push {
        /// The nodes to send to.
        nodes: Vec<String>,
        /// Send to every node.
        #[arg(long, conflicts_with = "nodes")]
        all: bool,
        /// Send a module whose running container would get another host directory at a mount
        /// (its data moving); without it such a node's push is held. Repeatable.
        #[arg(long = "move", value_name = "MODULE")]
        moves: Vec<String>,
        /// Seconds to wait for each node's report.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
    },
    /// Each node's last report: state, counts, and every resource that did not take.
    Status,
    /// Reads and replaces settings layers; every replaced layer is kept.
    #[command(subcommand)]
    Settings(SettingsCommand),
    /// Runs init, plan, push and status in a temporary home, explaining each step.
    Demo,
}

/// `settings` subcommands.
#[derive(Subcommand)]
pub enum SettingsCommand {
    /// Prints a layer as it is (JSON); with `--history`, every earlier layer too.
    Show {
        /// The module.
        module: String,
        /// The node's layer (default: the mesh layer).
        #[arg(long)]
        node: Option<String>,
        /// Also print every layer it replaced, newest first, with when and by which command.
        #[arg(long)]
        history: bool,
    },
    /// Replaces a layer whole with JSON, answering with the keys added, changed and removed.
    ///
    /// A set that would remove any key is refused (nothing changes, exit 2) unless
    /// `--replace`. A set that only adds or changes keys needs nothing. The replaced layer is
    /// kept in the history.
    Set {
        /// The module.
        module: String,
        /// The new layer, a JSON object (e.g. '{"port": 8097}').
        json: String,
        /// The node's layer (default: the mesh layer).
        #[arg(long)]
        node: Option<String>,
        /// Allow the new layer to remove keys.
        #[arg(long)]
        replace: bool,
    },
    /// Removes a layer; it is kept in the history like a set.
    Clear {
        /// The module.
        module: String,
        /// The node's layer (default: the mesh layer).
        #[arg(long)]
        node: Option<String>,
    },
    /// Puts back a layer from the history (`settings show --history` lists revisions).
    Restore {
        /// The module.
        module: String,
        /// The revision to put back.
        revision: u64,
        /// The node's layer (default: the mesh layer).
        #[arg(long)]
        node: Option<String>,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("MESH_LOG"))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    let home = Home::new(&cli.home);
    let output = cli.output;
    match cli.command {
        Command::Init { example } => {
            init::init(&home, example)?;
            println!("made a mesh home at {}", home.root().display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Check => {
            let problems = push::problems(&home)?;
            print_problems(output, &problems)?;
            Ok(if problems.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Plan {
            node,
            diff: true,
            detailed_exitcode,
        } => {
            let declaration = push::compose_node(&home, &node)?;
            let sent = home.sent(&node)?;
            let diff = mesh_plan::diff(sent.as_ref(), &declaration);
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&diff)?),
                Output::Text => print!("{}", diff.render_text()),
            }
            Ok(if detailed_exitcode && !diff.is_empty() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Plan { node, .. } => {
            let declaration = push::compose_node(&home, &node)?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&declaration)?),
                Output::Text => print!("{}", render::declaration(&declaration)),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Push {
            nodes,
            all,
            moves,
            timeout,
        } => {
            let inventory = home.inventory()?;
            let nodes = if all {
                inventory.file.nodes.keys().cloned().collect()
            } else if nodes.is_empty() {
                eprintln!(
                    "error: push names no node; name the nodes (`push home laptop`) or say `--all`"
                );
                return Ok(ExitCode::from(2));
            } else {
                nodes
            };
            let runtime = tokio::runtime::Runtime::new()?;
            let results = runtime.block_on(push::push(
                &home,
                &nodes,
                &moves.into_iter().collect(),
                std::time::Duration::from_secs(timeout),
            ))?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&results)?),
                Output::Text => print!("{}", render::push(&results)),
            }
            Ok(push::exit_code(&results))
        }
        Command::Status => {
            let status = push::status(&home)?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&status)?),
                Output::Text => print!("{}", render::status(&status)),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Settings(command) => {
            let now = mesh_host::now();
            match command {
                SettingsCommand::Show {
                    module,
                    node,
                    history,
                } => settings::show(&home, output, &module, node.as_deref(), history),
                SettingsCommand::Set {
                    module,
                    json,
                    node,
                    replace,
                } => settings::set(&home, output, &module, node.as_deref(), &json, replace, now),
                SettingsCommand::Clear { module, node } => {
                    settings::clear(&home, output, &module, node.as_deref(), now)
                }
                SettingsCommand::Restore {
                    module,
                    revision,
                    node,
                } => settings::restore(&home, output, &module, node.as_deref(), revision, now),
            }
        }
        Command::Demo => demo::run(),
    }
}

fn print_problems(output: Output, problems: &[mesh_model::Diagnostic]) -> Result<()> {
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(problems)?),
        Output::Text if problems.is_empty() => println!("the catalogue and inventory are sound"),
        Output::Text => {
            for problem in problems {
                println!("{problem}");
            }
            println!("{} problem(s)", problems.len());
        }
    }
    Ok(())
}

/// Fails with every problem listed, when there are any.
pub fn refuse_problems(problems: &[mesh_model::Diagnostic]) -> Result<()> {
    if problems.is_empty() {
        return Ok(());
    }
    let listed: Vec<String> = problems.iter().map(|p| format!("  {p}")).collect();
    bail!(
        "the catalogue or inventory has {} problem(s); nothing was sent:\n{}",
        problems.len(),
        listed.join("\n")
    )
}
