//! `mesh-host`: the host agent's command line. `apply` applies a declaration file by hand;
//! `serve` runs the node's daemon on a fleet; `window` runs a maintenance step with containers
//! held still; `archives` lists the archive cache; `drift` lists and shows the hand edits kept
//! before files were put back; `forget` gives back all the mesh holds here.
//!
//! The binary parses arguments and renders; what it does is a call into the [`mesh_host`]
//! library (the daemon is [`mesh_host::serve::run`]) or mesh-apply's engine. Start at
//! [`Command`]: each command is a file of [`commands`] holding its arguments and an `exec`;
//! [`containers`] holds the container runtime flags every command shares.

use mesh_cli_docs as cli_docs;
mod commands;
mod containers;

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};
use cli_docs::exit::Exit;
use commands::{apply, archives, completions, drift, forget, keygen, man, serve, window};
use std::path::PathBuf;
use std::process::ExitCode;

/// The mesh's host agent: applies declarations to this machine under a root prefix.
///
/// Exit codes: 0 converged; 1 an error; 2 refused (bad input, or a state directory that cannot
/// be written: nothing changed); 3 applied but some resources did not take (see the report);
/// 64 a usage error. `window run` exits with its step's own code.
#[derive(Parser)]
#[command(version, about, long_about)]
struct Cli {
    /// The root prefix resources are applied under (`/` on a real machine; a sandbox in tests).
    #[arg(long, default_value = "/", global = true)]
    root: PathBuf,
    /// The host's state directory (what it made, what it found, failures, windows).
    #[arg(long, default_value = "/var/lib/mesh-host", global = true)]
    state_dir: PathBuf,
    /// Output for people (`text`) or scripts (`json`).
    #[arg(long, value_enum, default_value = "text", global = true)]
    output: Output,
    /// This machine's node name (`serve`).
    #[arg(long, env = "MESH_NODE", global = true)]
    node: Option<String>,
    /// The bus, and the TLS this host proves itself with (`serve`).
    #[command(flatten)]
    bus: mesh_bus::cli::BusArgs,
    /// A file holding the node's bus password, as the controller keeps it under
    /// `<home>/bus/passwords/<node>` (`serve`, until the node is enrolled with an NKey; without
    /// it, `serve` signs with the seed `keygen` made).
    #[arg(
        long,
        value_name = "FILE",
        env = "MESH_BUS_PASSWORD_FILE",
        global = true
    )]
    password_file: Option<PathBuf>,
    /// The archive store a declaration's archived files are fetched from when they are not in
    /// this host's cache (`<state-dir>/archives`): `oci:PATH` or `http://HOST:PORT[/REPOSITORY]`,
    /// the controller's `--store` (`apply`, `serve`).
    #[arg(long, value_name = "SPEC", env = "MESH_STORE", global = true)]
    store: Option<String>,
    /// The registry's CA (a PEM file), over `https://`: its certificate must be signed by one
    /// of these, and only these are trusted.
    #[arg(long, value_name = "FILE", env = "MESH_STORE_CA", global = true)]
    store_ca: Option<PathBuf>,
    /// This host's registry credentials (it only pulls): a file holding `USER:PASSWORD` on one
    /// line, mode 0600 (refused when others may read it).
    #[arg(
        long,
        value_name = "FILE",
        env = "MESH_STORE_CREDENTIALS",
        global = true
    )]
    store_credentials: Option<PathBuf>,
    /// At most how long a host waits, a random share of it, before it fetches a declaration's
    /// archives from the store (`apply`, `serve`): a rollout's hosts so spread their fetches
    /// over this time instead of asking the store at once. `0` fetches at once.
    #[arg(
        long,
        value_name = "SECONDS",
        env = "MESH_FETCH_SPREAD",
        global = true,
        default_value_t = mesh_host::DEFAULT_FETCH_SPREAD.as_secs_f64()
    )]
    fetch_spread: f64,
    #[command(flatten)]
    containers: containers::ContainerArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Text,
    Json,
}

/// The host's commands: each one's arguments, help and `exec` are in its file under
/// [`commands`].
#[derive(Subcommand)]
enum Command {
    Apply(apply::Args),
    Keygen(keygen::Args),
    Serve(serve::Args),
    Archives(archives::Args),
    Window(window::Args),
    Drift(drift::Args),
    Forget(forget::Args),
    Completions(completions::Args),
    Man(man::Args),
}

fn main() -> ExitCode {
    // Fail points, from `FAILPOINTS`, in a build with the `fail-points` feature only (the
    // tests'); a release build has none and reads nothing.
    #[cfg(feature = "fail-points")]
    let _fail_points = fail::FailScenario::setup();
    match run() {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            Exit::Error.into()
        }
    }
}

/// Runs one command: what documents the command line reads nothing else.
fn run() -> Result<ExitCode> {
    let cli: Cli = cli_docs::exit::parse();
    match &cli.command {
        Command::Completions(args) => completions::exec(args),
        Command::Man(args) => man::exec(args),
        Command::Window(args) => window::exec(args, &cli),
        Command::Forget(args) => forget::exec(args, &cli),
        Command::Drift(args) => drift::exec(args, &cli),
        Command::Keygen(args) => keygen::exec(args, &cli),
        Command::Archives(args) => archives::exec(args, &cli),
        Command::Serve(args) => serve::exec(args, &cli),
        Command::Apply(args) => apply::exec(args, &cli),
    }
}
