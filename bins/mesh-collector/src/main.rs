//! `mesh-collector`: the store's sweep and collection (the rules “What the mesh keeps, for a
//! reason”, “The sweep holds before it lets go” and “An archive is published with a manifest that
//! holds it”).
//!
//! Reads what the mesh holds from the module records (see `mesh_store::records`) — under
//! `--home`, or on a fleet (`--bus`) in the controller's records bucket — computes the keep
//! set, and then
//! - `sweep` holds every kept archive and lets go of every held archive not kept;
//! - `collect` sweeps, then deletes what nothing holds — for real only when every kept archive
//!   is held, dry otherwise.
//!
//! The binary parses arguments and renders; the run itself is a call into mesh-store
//! ([`mesh_store::collector`]). Start at [`Command`]: each command is a file of [`commands`]
//! holding its arguments and an `exec`; what a person reads is rendered in [`render`]. It must
//! never collect for real on a partial view, and never run the registry's `garbage-collect`
//! with `--delete-untagged`.
//!
//! A run that leaves a kept archive unheld, missing or lost (or fails to sweep) records that as
//! a problem of the store in the records it read (`mesh_store::problems`), which the
//! controller's `status` shows; a later run with every kept archive held clears it. A dry run
//! asked for writes no problem.
//!
//! Exit codes, the mesh's table (`mesh_cli_docs::exit`): 0 every kept archive held (and, for
//! `collect`, collected as asked); 1 an error (records unreadable, the store failed, the
//! collection failed); 3 a kept archive is not held (missing, or dry run), so a collection ran or
//! would run dry; 64 a usage error.

use mesh_cli_docs as cli_docs;
mod commands;
mod render;

use clap::{Parser, Subcommand, ValueEnum};
use cli_docs::exit::Exit;
use commands::{collect, completions, man, sweep};
use mesh_store::collector::Verdict;
use std::path::PathBuf;
use std::process::ExitCode;

/// Keeps the mesh's store: holds every archive the mesh keeps, lets go of the rest, and
/// collects what nothing holds.
///
/// An archive is kept when a module the mesh holds names it as its current build or
/// built it among its five most recent builds; a module the mesh no longer holds keeps nothing.
/// The records are read from DIR/store/modules/*.json, or with --bus from the controller's
/// records bucket on the fleet's bus (keys store/modules/*.json), the collector then holding the
/// controller's plans lock there for its whole run (no build is published meanwhile on any
/// machine), waiting while a controller holds it.
///
/// Exit codes: 0 every kept archive held; 1 an error; 3 a kept archive is not held (a
/// collection then runs dry); 64 a usage error.
#[derive(Debug, Parser)]
#[command(name = "mesh-collector", version)]
struct Cli {
    /// The mesh home (the controller's); records and the store lock live under it. Needed by
    /// `sweep` and `collect`.
    #[arg(long, env = "MESH_HOME", global = true, value_name = "DIR")]
    home: Option<PathBuf>,

    /// The bus, and the TLS the collector proves itself with. With `--bus` the module records
    /// are the controller's, in its records bucket there, not files under `--home`; the
    /// collector holds the controller's plans lock there for its whole run (no build is
    /// published meanwhile on any machine), waiting while a controller holds it.
    #[command(flatten)]
    bus: mesh_bus::cli::BusArgs,

    /// How long the records on the bus are tried again.
    #[command(flatten)]
    bus_retry: mesh_bus::cli::RecordsRetryArgs,

    /// The controller's bus password file (the collector reads the controller's records as
    /// the controller), used when the controller has no seed. Default:
    /// DIR/bus/passwords/controller.
    #[arg(
        long,
        env = "MESH_BUS_PASSWORD_FILE",
        global = true,
        value_name = "FILE"
    )]
    bus_password_file: Option<PathBuf>,

    /// The controller's NKey seed file, which the collector signs with as the controller
    /// (mode 0600: refused when others may read it). Default: DIR/bus/nkey.seed when
    /// `mesh-controller broker keygen` made it.
    #[arg(long, env = "MESH_BUS_SEED", global = true, value_name = "FILE")]
    bus_seed: Option<PathBuf>,

    /// The store: oci:PATH (an OCI image layout directory) or http://HOST:PORT[/REPOSITORY]
    /// (an OCI registry; repository mesh/archives by default). Default: oci:DIR/store/oci.
    #[arg(long, env = "MESH_STORE", global = true, value_name = "SPEC")]
    store: Option<String>,

    /// The registry's CA (a PEM file), over https://: its certificate must be signed by one of
    /// these, and only these are trusted.
    #[arg(long, env = "MESH_STORE_CA", global = true, value_name = "FILE")]
    store_ca: Option<PathBuf>,

    /// The controller's registry credentials (the collector holds and lets go as the
    /// controller): a file holding USER:PASSWORD on one line, mode 0600 (refused when others
    /// may read it).
    #[arg(
        long,
        env = "MESH_STORE_CREDENTIALS",
        global = true,
        value_name = "FILE"
    )]
    store_credentials: Option<PathBuf>,

    /// How to print the answer.
    #[arg(long, value_enum, default_value_t = Output::Text, global = true)]
    output: Output,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    /// For a person.
    Text,
    /// One JSON document.
    Json,
}

/// The collector's commands: the store's, and what documents the command line. Each one's
/// arguments, help and `exec` are in its file under [`commands`].
#[derive(Debug, Subcommand)]
enum Command {
    Sweep(sweep::Args),
    Collect(collect::Args),
    Completions(completions::Args),
    Man(man::Args),
}

fn main() -> ExitCode {
    let cli: Cli = cli_docs::exit::parse();
    match &cli.command {
        Command::Completions(args) => return completions::exec(args),
        Command::Man(args) => return man::exec(args),
        Command::Sweep(_) | Command::Collect(_) => {}
    }
    let Some(home) = cli.home.clone() else {
        eprintln!(
            "error: --home DIR (or MESH_HOME) is needed: the mesh home whose store is swept or \
             collected"
        );
        return Exit::Usage.into();
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return Exit::Error.into();
        }
    };
    let env = commands::Env { cli: &cli, home };
    let done = runtime.block_on(async {
        match &cli.command {
            Command::Sweep(args) => sweep::exec(args, &env).await,
            Command::Collect(args) => collect::exec(args, &env).await,
            // Answered above, before anything else is read.
            Command::Completions(_) | Command::Man(_) => Ok(Verdict::AllHeld),
        }
    });
    match done {
        Ok(verdict) => exit_of(verdict).into(),
        Err(e) => {
            eprintln!("error: {e:#}");
            Exit::Error.into()
        }
    }
}

/// The collector's exit code for what a run comes to: the one place it is decided (an error
/// is also [`Exit::Error`], a wrong command line [`Exit::Usage`]).
fn exit_of(verdict: Verdict) -> Exit {
    match verdict {
        Verdict::AllHeld => Exit::Done,
        Verdict::Failed => Exit::Error,
        Verdict::NotHeld => Exit::Attention,
    }
}
