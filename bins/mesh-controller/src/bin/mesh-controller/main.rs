//! `mesh-controller`: composes each node's declaration from the catalogue and inventory, shows
//! it, sends it, and keeps what was sent and what each node reported.
//!
//! The binary parses arguments and renders; everything it does is a call into the
//! [`mesh_controller`] library. Start at [`Command`]: each command is a file of [`commands`]
//! holding its arguments and an `exec` that calls the library and renders the answer; what a
//! person reads is rendered in [`render`]; progress lines and bars in [`lines`]. `demo` is the
//! binary's own.

use mesh_cli_docs as cli_docs;
mod commands;
mod errors;
mod lines;
mod render;

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};
use commands::{
    broker, build, check, completions, demo, init, man, merge, node, plan, plans, push, records,
    repo, runtimes, secrets, serve, settings, status,
};
use std::path::PathBuf;
use std::process::ExitCode;

/// The mesh's controller: composes what each machine should hold, shows it, and sends it.
///
/// Exit codes: 0 success; 1 error (nothing was changed unless the message says otherwise);
/// 2 refused or held, see the message (e.g. `push` with no node, a held move, `plan --diff
/// --detailed-exitcode` with a difference); 3 sent, but some node did not converge, or a
/// plan stopped (a build failed or a rollout stopped at a node).
///
/// With `--bus`, the fleet's bus: `push` sends to the hosts running `mesh-host serve` and
/// waits for their reports, grants first; `merge`, `plans resume` and `push --behind` roll out
/// to them, one machine first; `runtimes` and `broker` need it. Without it, the embedded
/// default: hosts run in this process.
#[derive(Parser)]
#[command(version, about, long_about)]
pub struct Cli {
    /// The mesh home: inventory, catalogue, settings, what was sent, reports.
    #[arg(long, env = "MESH_HOME", default_value = "mesh-home", global = true)]
    home: PathBuf,
    /// The archive store: `oci:PATH` (an OCI image layout directory) or `http://HOST:PORT`
    /// (an OCI registry). Default: `oci:<home>/store/oci`.
    #[arg(
        long,
        env = "MESH_STORE",
        global = true,
        value_name = "oci:PATH|http://HOST:PORT"
    )]
    store: Option<String>,
    /// Output for people (`text`) or scripts (`json`).
    #[arg(long, value_enum, default_value = "text", global = true)]
    output: Output,
    /// The bus, and the TLS this controller proves itself with.
    #[command(flatten)]
    bus: mesh_bus::cli::BusArgs,
    /// The controller's bus password file (default `<home>/bus/passwords/controller`), used
    /// while it has no seed (mode 0600: refused when others may read it).
    #[arg(
        long,
        env = "MESH_BUS_PASSWORD_FILE",
        global = true,
        value_name = "FILE"
    )]
    bus_password_file: Option<PathBuf>,
    /// The controller's NKey seed file, which it signs with (default `<home>/bus/nkey.seed`
    /// when `broker keygen` made it; mode 0600: refused when others may read it).
    #[arg(long, env = "MESH_BUS_SEED", global = true, value_name = "FILE")]
    bus_seed: Option<PathBuf>,
    /// How many copies the mesh's streams, records bucket and module state buckets keep
    /// (recorded on the bus, so later runs keep it); default: the recorded number, else 1 on
    /// a single server and 3 when the server reports a cluster. Streams made earlier with
    /// fewer are listed by `broker replicas` and raised by `broker raise-replicas`.
    #[arg(long, env = "MESH_BUS_REPLICAS", global = true, value_name = "N")]
    bus_replicas: Option<usize>,
    /// How long the records on the bus are tried again.
    #[command(flatten)]
    bus_retry: mesh_bus::cli::RecordsRetryArgs,
    /// The registry's CA (a PEM file), over `https://`: its certificate must be signed by one
    /// of these, and only these are trusted.
    #[arg(long, env = "MESH_STORE_CA", global = true, value_name = "FILE")]
    store_ca: Option<PathBuf>,
    /// The controller's registry credentials (it pushes and deletes): a file holding
    /// `USER:PASSWORD` on one line, mode 0600 (refused when others may read it).
    #[arg(
        long,
        env = "MESH_STORE_CREDENTIALS",
        global = true,
        value_name = "FILE"
    )]
    store_credentials: Option<PathBuf>,
    /// The most bytes a node's report may hold: a larger one is refused unread and shown on
    /// that node as `unreadable report` (every other node reads as usual).
    #[arg(
        long,
        env = "MESH_REPORT_LIMIT",
        global = true,
        value_name = "BYTES",
        default_value_t = mesh_controller::MAX_REPORT_BYTES
    )]
    report_limit: usize,
    /// The command.
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

/// The controller's commands: each one's arguments, help and `exec` are in its file under
/// [`commands`].
#[derive(Subcommand)]
enum Command {
    Init(init::Args),
    Check(check::Args),
    Plan(plan::Args),
    Push(push::Args),
    Status(status::Args),
    /// Registers catalogue repositories.
    #[command(subcommand)]
    Repo(repo::Command),
    Merge(merge::Args),
    Build(build::Args),
    Plans(plans::Args),
    /// Reads and replaces settings layers; every replaced layer is kept.
    #[command(subcommand)]
    Settings(settings::Command),
    Demo(demo::Args),
    Completions(completions::Args),
    Man(man::Args),
    Serve(serve::Args),
    Runtimes(runtimes::Args),
    /// Looks after the bus (needs `--bus`, except `users`).
    #[command(subcommand)]
    Broker(broker::Command),
    /// The fleet's nodes and how they prove themselves to the bus.
    #[command(subcommand)]
    Node(node::Command),
    /// Where the controller's records are (needs `--bus`).
    ///
    /// Without `--bus` the records (inventory, settings and their history, what was sent,
    /// reports, plans, builds, repositories, the nodes' bus passwords) are files under the
    /// home; with `--bus` they are the bus's records bucket, so a controller restarted or
    /// started on another machine resumes from them.
    #[command(subcommand)]
    Records(records::Command),
    /// The mesh's secrets: the operators' keys, and a new mesh secrets key.
    #[command(subcommand)]
    Secrets(secrets::Command),
}

impl Command {
    /// Whether the command only reads: it then makes no home, key or password, and a missing
    /// home is an error.
    fn reads_only(&self) -> bool {
        match self {
            Command::Status(_) | Command::Plan(_) | Command::Runtimes(_) => true,
            Command::Plans(args) => args.reads_only(),
            Command::Settings(command) => command.reads_only(),
            Command::Records(command) => command.reads_only(),
            Command::Init(_)
            | Command::Check(_)
            | Command::Push(_)
            | Command::Repo(_)
            | Command::Merge(_)
            | Command::Build(_)
            | Command::Demo(_)
            | Command::Completions(_)
            | Command::Man(_)
            | Command::Serve(_)
            | Command::Broker(_)
            | Command::Node(_)
            | Command::Secrets(_) => false,
        }
    }
}

fn main() -> ExitCode {
    // Fail points, from `FAILPOINTS`, in a build with the `fail-points` feature only (the
    // tests'); a release build has none and reads nothing.
    #[cfg(feature = "fail-points")]
    let _fail_points = fail::FailScenario::setup();
    // The permission probe's logins refused on purpose are async-nats's errors: not ours.
    let filter = tracing_subscriber::EnvFilter::try_from_env("MESH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error,async_nats::connector=off"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(mesh_host::log_in_colour())
        .with_writer(std::io::stderr)
        .init();
    let cli: Cli = mesh_cli_docs::exit::parse();
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {}", errors::phrased(&error));
            errors::exit_of(&error).into()
        }
    }
}

/// Runs one command: what documents the command line needs no home; every other command gets
/// the home, store and bus the global options name, in a [`commands::Env`].
fn run(cli: Cli) -> Result<ExitCode> {
    match &cli.command {
        Command::Completions(args) => return completions::exec(args),
        Command::Man(args) => return man::exec(args),
        Command::Init(_) => init::refuse_bus(&cli)?,
        _ => {}
    }
    // A command that only reads writes nothing: not a home, not a key, not a password.
    if cli.command.reads_only() && !cli.home.is_dir() {
        anyhow::bail!(
            "there is no mesh home at {home}: a command that only reads makes none (give \
             --home or MESH_HOME, or make one with `mesh-controller --home {home} init`)",
            home = cli.home.display()
        );
    }
    let env = commands::Env::open(&cli)?;
    let serving = matches!(cli.command, Command::Serve(_));
    let done = match cli.command {
        Command::Init(args) => init::exec(args, &env),
        Command::Check(args) => check::exec(args, &env),
        Command::Plan(args) => plan::exec(args, &env),
        Command::Push(args) => push::exec(args, &env),
        Command::Status(args) => status::exec(args, &env),
        Command::Repo(command) => repo::exec(command, &env),
        Command::Merge(args) => merge::exec(args, &env),
        Command::Build(args) => build::exec(args, &env),
        Command::Plans(args) => plans::exec(args, &env),
        Command::Settings(command) => settings::exec(command, &env),
        Command::Demo(args) => demo::exec(args),
        Command::Completions(_) | Command::Man(_) => Ok(ExitCode::SUCCESS),
        Command::Serve(args) => serve::exec(args, &env),
        Command::Runtimes(args) => runtimes::exec(args, &env),
        Command::Broker(command) => broker::exec(command, &env),
        Command::Node(command) => node::exec(command, &env),
        Command::Records(command) => records::exec(command, &env),
        Command::Secrets(command) => secrets::exec(command, &env),
    };
    // Records read in an older format were migrated on the way: say so, once.
    for note in env.home.take_migrations() {
        eprintln!("note: {note}");
    }
    if serving {
        // A stopped daemon lets its runtime go without waiting for the blocking threads: a
        // collection of the records under way there, its bus gone, would hold the stop past
        // its bound. It is left as a kill leaves it, and done again whole by the next.
        let commands::Env { runtime, .. } = env;
        runtime.shutdown_background();
    }
    done
}
