//! `mesh-collector`: the store's sweep and collection (the rules “What the mesh keeps, for a reason”, “The sweep holds before it lets go” and “An archive is published with a manifest that holds it”).
//!
//! Reads what the mesh holds from the module records (see `mesh_store::records`) — under
//! `--home`, or on a fleet (`--bus`) in the controller's records bucket — computes the keep
//! set, and then
//! - `sweep` holds every kept archive and lets go of every held archive not kept;
//! - `collect` sweeps, then deletes what nothing holds — for real only when every kept archive
//!   is held, dry otherwise.
//!
//! Start at [`run`]. It must never collect for real on a partial view, and never run the
//! registry's `garbage-collect` with `--delete-untagged`.
//!
//! A run that leaves a kept archive unheld, missing or lost (or fails to sweep) records that as
//! a problem of the store in the records it read (`mesh_store::problems`), which the
//! controller's `status` shows; a later run with every kept archive held clears it. A dry run
//! asked for writes no problem.
//!
//! Exit codes: 0 every kept archive held (and, for `collect`, collected as asked); 1 an error
//! (records unreadable, the store failed, the collection failed); 2 a usage error; 3 a kept
//! archive is not held (missing, or dry run), so a collection ran or would run dry.

use mesh_cli_docs as cli_docs;

use anyhow::{bail, Context as _};
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use mesh_bus::records::KvRecords;
use mesh_bus::NatsOptions;
use mesh_store::collect::{
    collect, CollectReport, CommandProcess, GarbageCollector, LayoutCollector, RegistryCollector,
};
use mesh_store::keep::keep_set;
use mesh_store::layout::OciLayoutStore;
use mesh_store::lease::Lease;
use mesh_store::lock::SweepLock;
use mesh_store::open_store_with;
use mesh_store::problems::{clear_problem, record_problem, ProblemKind};
use mesh_store::record_store::{DirRecords, RecordStore};
use mesh_store::records::read_module_records;
use mesh_store::store::{default_store_spec, StoreAccess, StoreSpec};
use mesh_store::sweep::{sweep, KeptState, ReleasedState, SweepReport};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Keeps the mesh's store: holds every archive the mesh keeps, lets go of the rest, and
/// collects what nothing holds.
///
/// An archive is kept when a module the mesh holds names it as its current build or
/// built it among its five most recent builds; a module the mesh no longer holds keeps nothing.
/// The records are read from DIR/store/modules/*.json, or with --bus from the controller's
/// records bucket on the fleet's bus (keys store/modules/*.json).
///
/// Exit codes: 0 every kept archive held; 1 an error; 2 a usage error; 3 a kept archive is not
/// held (a collection then runs dry).
#[derive(Debug, Parser)]
#[command(name = "mesh-collector", version)]
struct Cli {
    /// The mesh home (the controller's); records and the store lock live under it. Needed by
    /// `sweep` and `collect`.
    #[arg(long, value_name = "DIR")]
    home: Option<PathBuf>,

    /// A fleet's bus (NATS JetStream), e.g. nats://bus.example:4222: the module records are
    /// the controller's, in its records bucket there, not files under --home; the collector
    /// holds the controller's plans lock there for its whole run (no build is published
    /// meanwhile on any machine), waiting while a controller holds it.
    #[arg(long, env = "MESH_BUS", value_name = "URL")]
    bus: Option<String>,

    /// The controller's bus password file (the collector reads the controller's records as
    /// the controller), used when the controller has no seed. Default:
    /// DIR/bus/passwords/controller.
    #[arg(long, env = "MESH_BUS_PASSWORD_FILE", value_name = "FILE")]
    bus_password_file: Option<PathBuf>,

    /// The controller's NKey seed file, which the collector signs with as the controller
    /// (mode 0600: refused when others may read it). Default: DIR/bus/nkey.seed when
    /// `mesh-controller broker keygen` made it.
    #[arg(long, env = "MESH_BUS_SEED", value_name = "FILE")]
    bus_seed: Option<PathBuf>,

    /// The bus server's CA (a PEM file): TLS is then required and only these CAs are trusted.
    #[arg(long, env = "MESH_BUS_CA", value_name = "FILE")]
    bus_ca: Option<PathBuf>,

    /// The store: oci:PATH (an OCI image layout directory) or http://HOST:PORT[/REPOSITORY]
    /// (an OCI registry; repository mesh/archives by default). Default: oci:DIR/store/oci.
    #[arg(long, value_name = "SPEC")]
    store: Option<String>,

    /// The registry's CA (a PEM file), over https://: its certificate must be signed by one of
    /// these, and only these are trusted.
    #[arg(long, env = "MESH_STORE_CA", value_name = "FILE")]
    store_ca: Option<PathBuf>,

    /// The controller's registry credentials (the collector holds and lets go as the
    /// controller): a file holding USER:PASSWORD on one line, mode 0600 (refused when others
    /// may read it).
    #[arg(long, env = "MESH_STORE_CREDENTIALS", value_name = "FILE")]
    store_credentials: Option<PathBuf>,

    /// How to print the answer.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,

    #[command(subcommand)]
    command: TopCommand,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    /// For a person.
    Text,
    /// One JSON document.
    Json,
}

impl Command {
    /// The command's name, as typed.
    fn name(&self) -> &'static str {
        match self {
            Command::Sweep { .. } => "sweep",
            Command::Collect { .. } => "collect",
        }
    }
}

/// The collector's commands: the store's, and what documents the command line.
#[derive(Debug, Subcommand)]
enum TopCommand {
    #[command(flatten)]
    Store(Command),
    /// Prints shell completions on standard output, e.g.
    /// `mesh-collector completions bash > /usr/share/bash-completion/completions/mesh-collector`.
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Prints the manual page (roff) on standard output, e.g. `mesh-collector man | man -l -`; with
    /// `--dir DIR`, writes one page per command and subcommand there and lists them.
    Man {
        /// Where to write every page (`mesh-collector.1`, `mesh-collector-COMMAND.1`, …).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// What the collector does to a store.
#[derive(Debug, Clone, Subcommand)]
enum Command {
    /// Hold every kept archive (backfilling a missing holding manifest from the record), then
    /// let go of every held archive not kept by removing its manifest. Nothing is let go if
    /// any part of the store could not be read.
    Sweep {
        /// Say what would be held and let go; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Sweep, then delete every blob nothing holds: for real only when the sweep reports every
    /// kept archive held ("held N of N"), dry otherwise. A registry is collected by its own
    /// `garbage-collect` (never --delete-untagged), stopped for the run and started after.
    Collect {
        /// Sweep and collect dry: change nothing, list what would be deleted.
        #[arg(long)]
        dry_run: bool,

        /// The registry's configuration file (the one it serves with). Registry only.
        #[arg(long, value_name = "PATH")]
        registry_config: Option<PathBuf>,

        /// The registry binary.
        #[arg(long, value_name = "PATH", default_value = "/usr/bin/docker-registry")]
        registry_binary: PathBuf,

        /// A shell command that stops the registry (e.g. `systemctl stop docker-registry`).
        /// Needed for a real collection of a registry.
        #[arg(long, value_name = "COMMAND")]
        registry_stop: Option<String>,

        /// A shell command that starts the registry again. Needed with --registry-stop.
        #[arg(long, value_name = "COMMAND")]
        registry_start: Option<String>,
    },
}

/// What is printed with `--output json`.
#[derive(Debug, Serialize)]
struct Answer {
    command: &'static str,
    store: String,
    dry_run: bool,
    kept: usize,
    held: usize,
    missing: usize,
    released: usize,
    summary: String,
    sweep: SweepReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    collection: Option<CollectionAnswer>,
    exit_code: u8,
}

#[derive(Debug, Serialize)]
struct CollectionAnswer {
    for_real: bool,
    refused: Option<String>,
    deleted: Vec<String>,
    lost: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = match &cli.command {
        TopCommand::Completions { shell } => {
            return match cli_docs::print_completions(*shell, Cli::command()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: writing the completions: {e}");
                    ExitCode::from(1)
                }
            };
        }
        TopCommand::Man { dir } => {
            return match cli_docs::man(Cli::command(), dir.as_deref()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: writing the manual pages: {e}");
                    ExitCode::from(1)
                }
            };
        }
        TopCommand::Store(command) => command.clone(),
    };
    if cli.home.is_none() {
        eprintln!("error: --home DIR is needed: the mesh home whose store is swept or collected");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(&cli, command)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// `--home`, which `main` has checked is given.
fn home(cli: &Cli) -> &std::path::Path {
    cli.home
        .as_deref()
        .expect("main refuses sweep and collect without --home")
}

/// Where the module records are: files under `--home`, or with `--bus` the controller's
/// records bucket.
fn open_records(cli: &Cli) -> anyhow::Result<Arc<dyn RecordStore>> {
    let Some(url) = &cli.bus else {
        return Ok(Arc::new(DirRecords::new(home(cli))));
    };
    let seed_file = cli.bus_seed.clone().or_else(|| {
        let default = home(cli).join("bus/nkey.seed");
        (cli.bus_password_file.is_none() && default.exists()).then_some(default)
    });
    let options = match seed_file {
        Some(seed_file) => NatsOptions::for_controller_nkey(
            url,
            mesh_bus::keys::read_seed_file(&seed_file).context("the controller's bus seed")?,
        ),
        None => {
            let file = cli
                .bus_password_file
                .clone()
                .unwrap_or_else(|| home(cli).join("bus/passwords/controller"));
            let password =
                mesh_store::secret::read_secret(&file).context("the controller's bus password")?;
            NatsOptions::for_controller(url, password)
        }
    };
    let records = KvRecords::open(&NatsOptions {
        name: Some("mesh-collector".to_owned()),
        tls: mesh_bus::BusTls {
            ca_file: cli.bus_ca.clone(),
            client_certificate: None,
        },
        ..options
    })
    .with_context(|| format!("opening the controller's records on {url}"))?;
    // As the controller keeps them: a large record in chunks.
    Ok(Arc::new(mesh_store::chunked::ChunkedRecords::new(
        Arc::new(records),
    )))
}

/// Runs one command and prints its answer; returns the exit code.
async fn run(cli: &Cli, command: Command) -> anyhow::Result<u8> {
    let spec: StoreSpec = match &cli.store {
        Some(spec) => spec.parse()?,
        None => default_store_spec(home(cli)),
    };
    let store = open_store_with(
        &spec,
        &StoreAccess {
            ca_file: cli.store_ca.clone(),
            credentials_file: cli.store_credentials.clone(),
        },
    )?;
    let lock = SweepLock::acquire(home(cli))
        .await
        .context("the store lock is shared with every publish")?;
    let store_records = open_records(cli)?;
    // On a fleet the controller publishes and records builds on its own machine, which this
    // machine's lock does not reach: the plans lease on the bus (held by a controller while it
    // builds) keeps every publish out for the whole run.
    let _lease = match &cli.bus {
        Some(_) => Some(
            Lease::acquire(
                Arc::clone(&store_records),
                &format!("mesh-collector {}", command.name()),
                Arc::default(),
            )
            .context("taking the plans lock on the bus, so no build is published meanwhile")?,
        ),
        None => None,
    };
    let records = read_module_records(store_records.as_ref())?;
    let keep = keep_set(&records);
    let asked_dry = match &command {
        Command::Sweep { dry_run } | Command::Collect { dry_run, .. } => *dry_run,
    };
    let command_name = command.name();
    let (answer, text) = match command {
        Command::Sweep { dry_run } => {
            let report = sweep(&*store, &lock, &keep, dry_run).await;
            let code = exit_code(&report, None);
            (answer("sweep", &report, None, code), render_sweep(&report))
        }
        Command::Collect {
            dry_run,
            registry_config,
            registry_binary,
            registry_stop,
            registry_start,
        } => {
            let mut collector: Box<dyn GarbageCollector> = match &spec {
                StoreSpec::Layout(path) => Box::new(LayoutCollector {
                    layout: OciLayoutStore::new(path),
                }),
                StoreSpec::Registry { .. } => {
                    let Some(config) = registry_config else {
                        bail!("collecting a registry needs --registry-config (the file it serves with)");
                    };
                    let process = match (registry_stop, registry_start) {
                        (Some(stop), Some(start)) => CommandProcess { stop, start },
                        _ if dry_run => CommandProcess {
                            stop: "false".to_owned(),
                            start: "true".to_owned(),
                        },
                        _ => bail!(
                            "a real collection of a registry stops it for the run: give \
                             --registry-stop and --registry-start (or --dry-run)"
                        ),
                    };
                    let base_url = spec.registry_base_url().unwrap_or_default();
                    Box::new(RegistryCollector {
                        binary: registry_binary,
                        config,
                        process: Box::new(process),
                        base_url,
                        ca_file: cli.store_ca.clone(),
                    })
                }
            };
            let report = collect(&*store, &lock, &keep, &mut *collector, dry_run).await?;
            let code = exit_code(&report.sweep, Some(&report));
            let mut text = render_sweep(&report.sweep);
            text.push_str(&render_collection(&report));
            (answer("collect", &report.sweep, Some(&report), code), text)
        }
    };
    // The rule “Nothing fails silently”: what this run left wrong reaches the controller's `status` as a problem of the
    // store, until a run leaves every kept archive held. A dry run asked for changes nothing.
    if !asked_dry {
        keep_problem(store_records.as_ref(), command_name, &answer)
            .context("recording the collector's answer for `status`")?;
    }
    match cli.output {
        Output::Text => print!("{text}"),
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&answer).context("cannot write the answer as JSON")?
        ),
    }
    Ok(answer.exit_code)
}

/// Records the run's answer as a problem of the store when it is not all well (exit 1 or 3),
/// and clears the store's problem when it is.
fn keep_problem(
    records: &dyn RecordStore,
    command: &'static str,
    answer: &Answer,
) -> anyhow::Result<()> {
    if answer.exit_code == 0 {
        clear_problem(records, ProblemKind::Collection, &answer.store)?;
        return Ok(());
    }
    let mut details: Vec<String> = answer
        .sweep
        .missing()
        .map(|kept| format!("missing {}: its blob is gone", kept.archive.digest))
        .collect();
    details.extend(
        answer
            .sweep
            .kept
            .iter()
            .filter_map(|kept| match &kept.state {
                KeptState::WouldHold => Some(format!("unheld {}", kept.archive.digest)),
                KeptState::Failed { error } => {
                    Some(format!("unknown {}: {error}", kept.archive.digest))
                }
                KeptState::AlreadyHeld | KeptState::HeldNow | KeptState::Missing => None,
            }),
    );
    details.extend(answer.sweep.failures.iter().map(|f| format!("failed: {f}")));
    if let Some(collection) = &answer.collection {
        details.extend(collection.lost.iter().map(|d| format!("LOST {d}")));
        if let Some(why) = &collection.refused {
            details.push(format!("collection ran dry: {why}"));
        }
    }
    record_problem(
        records,
        ProblemKind::Collection,
        &answer.store,
        &format!("`mesh-collector {command}`: {}", answer.summary),
        details,
        mesh_store::clock::now(),
        &format!("mesh-collector {command}"),
    )?;
    Ok(())
}

fn exit_code(sweep: &SweepReport, collection: Option<&CollectReport>) -> u8 {
    let lost = collection.is_some_and(|c| !c.lost.is_empty());
    if !sweep.failures.is_empty() || lost {
        1
    } else if !sweep.all_held() {
        3
    } else {
        0
    }
}

fn answer(
    command: &'static str,
    sweep: &SweepReport,
    collection: Option<&CollectReport>,
    exit_code: u8,
) -> Answer {
    Answer {
        command,
        store: sweep.store.clone(),
        dry_run: sweep.dry_run,
        kept: sweep.kept_count(),
        held: sweep.held_count(),
        missing: sweep.missing().count(),
        released: sweep
            .released
            .iter()
            .filter(|r| r.state == ReleasedState::Released)
            .count(),
        summary: summary(sweep),
        sweep: sweep.clone(),
        collection: collection.map(|c| CollectionAnswer {
            for_real: c.collected_for_real,
            refused: c.refused.clone(),
            deleted: c.garbage.deleted.clone(),
            lost: c.lost.clone(),
        }),
        exit_code,
    }
}

fn summary(sweep: &SweepReport) -> String {
    let released = sweep
        .released
        .iter()
        .filter(|r| r.state == ReleasedState::Released)
        .count();
    let would = sweep
        .released
        .iter()
        .filter(|r| r.state == ReleasedState::WouldRelease)
        .count();
    let released = if sweep.dry_run {
        format!("would release {would}")
    } else {
        format!("released {released}")
    };
    format!(
        "kept {}, {}, missing {}, {released}",
        sweep.kept_count(),
        sweep.held_line(),
        sweep.missing().count()
    )
}

fn render_sweep(sweep: &SweepReport) -> String {
    let mut out = String::new();
    let dry = if sweep.dry_run { " (dry run)" } else { "" };
    out.push_str(&format!("store {}{dry}\n", sweep.store));
    out.push_str(&format!("{}\n", summary(sweep)));
    if !sweep.kept.is_empty() {
        out.push_str("\nkept:\n");
        for kept in &sweep.kept {
            let state = match &kept.state {
                KeptState::AlreadyHeld => "held".to_owned(),
                KeptState::HeldNow => "held now".to_owned(),
                KeptState::WouldHold => "unheld, would hold".to_owned(),
                KeptState::Missing => "MISSING: its blob is gone".to_owned(),
                KeptState::Failed { error } => format!("UNKNOWN: {error}"),
            };
            let why: Vec<String> = kept.reasons.iter().map(ToString::to_string).collect();
            out.push_str(&format!(
                "  {}  {state}  ({})\n",
                kept.archive.digest,
                why.join("; ")
            ));
        }
    }
    if !sweep.released.is_empty() {
        out.push_str("\nnot kept:\n");
        for released in &sweep.released {
            let state = match &released.state {
                ReleasedState::Released => "released".to_owned(),
                ReleasedState::AlreadyGone => "already gone".to_owned(),
                ReleasedState::WouldRelease => "would release".to_owned(),
                ReleasedState::Skipped => "kept held: the sweep's view was partial".to_owned(),
                ReleasedState::Failed { error } => format!("NOT RELEASED: {error}"),
            };
            out.push_str(&format!("  {}  {state}\n", released.digest));
        }
    }
    if !sweep.failures.is_empty() {
        out.push_str("\nfailures (nothing was let go):\n");
        for failure in &sweep.failures {
            out.push_str(&format!("  {failure}\n"));
        }
    }
    out
}

fn render_collection(report: &CollectReport) -> String {
    let mut out = String::new();
    let how = match (&report.refused, report.collected_for_real) {
        (Some(why), _) => format!("dry run, refused: {why}"),
        (None, true) => "for real".to_owned(),
        (None, false) => "dry run, as asked".to_owned(),
    };
    out.push_str(&format!("\ncollection {how}\n"));
    let verb = if report.collected_for_real {
        "deleted"
    } else {
        "would delete"
    };
    out.push_str(&format!(
        "{verb} {} blob(s)\n",
        report.garbage.deleted.len()
    ));
    for digest in &report.garbage.deleted {
        out.push_str(&format!("  {digest}\n"));
    }
    if !report.lost.is_empty() {
        out.push_str("\nLOST after collection (kept, blob gone):\n");
        for digest in &report.lost {
            out.push_str(&format!("  {digest}\n"));
        }
    }
    out
}
