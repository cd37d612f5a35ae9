//! `mesh-host`: the host agent's command line. `apply` applies a declaration file by hand;
//! `window` runs a maintenance step with containers held still (the `window` module);
//! `archives` lists the archive cache; `drift` lists and shows the hand edits kept before
//! files were put back.

use mesh_cli_docs as cli_docs;
mod containers;
mod window;

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
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
    /// This machine's node name (`serve`).
    #[arg(long)]
    node: Option<String>,
    /// The bus, e.g. `nats://bus.example:4222` (`serve`).
    #[arg(long, value_name = "URL")]
    bus: Option<String>,
    /// A file holding the node's bus password, as the controller keeps it under
    /// `<home>/bus/passwords/<node>` (`serve`, until the node is enrolled with an NKey; without
    /// it, `serve` signs with the seed `keygen` made).
    #[arg(long, value_name = "FILE", env = "MESH_BUS_PASSWORD_FILE")]
    password_file: Option<PathBuf>,
    #[command(flatten)]
    bus_tls: BusTlsArgs,
    /// The archive store a declaration's archived files are fetched from when they are not in
    /// this host's cache (`<state-dir>/archives`): `oci:PATH` or `http://HOST:PORT[/REPOSITORY]`,
    /// the controller's `--store` (`apply`, `serve`).
    #[arg(long, value_name = "SPEC", env = "MESH_STORE")]
    store: Option<String>,
    /// The registry's CA (a PEM file), over `https://`: its certificate must be signed by one
    /// of these, and only these are trusted.
    #[arg(long, value_name = "FILE", env = "MESH_STORE_CA")]
    store_ca: Option<PathBuf>,
    /// This host's registry credentials (it only pulls): a file holding `USER:PASSWORD` on one
    /// line, mode 0600 (refused when others may read it).
    #[arg(long, value_name = "FILE", env = "MESH_STORE_CREDENTIALS")]
    store_credentials: Option<PathBuf>,
    #[command(flatten)]
    containers: containers::ContainerArgs,
    #[command(subcommand)]
    command: Command,
}

/// The bus's TLS (`serve`): the CA its certificate must be signed by, and this host's
/// certificate where the server verifies clients (mTLS).
#[derive(clap::Args)]
struct BusTlsArgs {
    /// The bus server's CA (a PEM file): TLS is then required and only these CAs are trusted
    /// (`serve`).
    #[arg(long, value_name = "FILE", env = "MESH_BUS_CA")]
    bus_ca: Option<PathBuf>,
    /// This host's client certificate (PEM), for a bus that verifies clients (`serve`; needs
    /// `--bus-key`).
    #[arg(long, value_name = "FILE", env = "MESH_BUS_CERT", requires = "bus_key")]
    bus_cert: Option<PathBuf>,
    /// The key of `--bus-cert` (PEM, mode 0600: refused when others may read it).
    #[arg(long, value_name = "FILE", env = "MESH_BUS_KEY", requires = "bus_cert")]
    bus_key: Option<PathBuf>,
}

impl BusTlsArgs {
    fn tls(&self) -> mesh_bus::BusTls {
        mesh_bus::BusTls {
            ca_file: self.bus_ca.clone(),
            client_certificate: match (&self.bus_cert, &self.bus_key) {
                (Some(cert_file), Some(key_file)) => Some(mesh_bus::ClientCertificate {
                    cert_file: cert_file.clone(),
                    key_file: key_file.clone(),
                }),
                _ => None,
            },
        }
    }
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
    /// Makes this host's NKey for the bus (or shows the one it has): writes the seed to
    /// `<state-dir>/bus/nkey.seed`, mode 0600 (it never leaves this machine), and prints the
    /// public key to enroll: `mesh-controller node enroll NODE PUBLIC-KEY`.
    ///
    /// A seed already there is kept, never replaced: remove the file to make a new key, and
    /// enroll the new public key.
    Keygen,
    /// Runs as the node's daemon on a fleet (needs `--node`, `--bus`, and `--password-file` or
    /// the seed `keygen` made).
    ///
    /// It reads its declarations from the bus (its subject, and the declarations stream's
    /// last one when it starts or reconnects, so one sent while it was down is not lost),
    /// applies each, reports on every apply and on a heartbeat, applies
    /// again when a failed resource's backoff elapses, answers discovery, and rides out bus
    /// restarts. SIGTERM or SIGINT stop it once the apply under way has finished, within
    /// `--stop-timeout` seconds whatever the bus is doing (a bus that is gone is not waited
    /// for); a second signal, or the bound elapsing, ends it at once, which every write
    /// survives as it survives a kill.
    ///
    /// Exit codes: 0 stopped by a signal; 2 refused (a flag missing); 1 any other error, or
    /// stopped at once (a second signal, the bound).
    Serve {
        /// Seconds between heartbeat reports.
        #[arg(long, default_value_t = 30)]
        heartbeat: u64,
        /// Seconds a failed resource waits before it is tried again (doubling after each
        /// further failure, up to an hour).
        #[arg(long, value_name = "SECS", default_value_t = 30)]
        first_retry: u64,
        /// Seconds between two examinations for drift (a managed resource changed by hand)
        /// when nothing watched changed: the backstop behind the watch on declared paths, and
        /// how often containers are checked to be running.
        #[arg(long, value_name = "SECS", default_value_t = 300)]
        reconcile: u64,
        /// Seconds between two examinations that read every managed file whatever its size,
        /// times and inode say.
        #[arg(long, value_name = "SECS", default_value_t = 86_400)]
        full_check: u64,
        /// Seconds it takes at most to stop after SIGTERM or SIGINT, before it stops at once.
        #[arg(long, value_name = "SECS", default_value_t = 30)]
        stop_timeout: u64,
    },
    /// Lists the archive cache (`<state-dir>/archives`): each archive's digest, size, when this
    /// host last used it, and whether the last declaration applied names it.
    ///
    /// After every apply the host removes the cached archives that declaration does not name,
    /// except the 3 most recently used (so going back to a previous declaration needs no
    /// fetch). It removes nothing else: not a file it did not make, not a symbolic link. A
    /// prune that could not be done is logged and noted in the apply's report; the apply
    /// itself is never failed by it.
    Archives,
    /// Maintenance windows: run a step (a backup, a migration) with containers held still, and
    /// list the open windows. Every apply on this machine leaves held containers alone and
    /// reports them `held-still`; see `window run --help`.
    Window {
        #[command(subcommand)]
        command: window::WindowCommand,
    },
    /// Hand edits the host kept before putting files back as declared (the filebucket, under
    /// `<state-dir>/filebucket`, at most 1 MiB a file and 32 MiB in all, oldest given up
    /// first): list them, or show how one differs from the file now.
    Drift {
        #[command(subcommand)]
        command: DriftCommand,
    },
    /// Gives back everything the mesh holds on this machine: a host leaving the fleet, or a
    /// quick-start home thrown away (`--root $MESH_HOME/roots/NODE --state-dir
    /// $MESH_HOME/state/NODE`).
    ///
    /// Without `--yes` it only lists what it would give back. With it, it applies a declaration
    /// with nothing in it, so the rules of undeclaring hold: what the mesh made is removed
    /// (containers stopped and removed, files deleted), what it found is given back as it was,
    /// a directory holding data the mesh did not put there is kept, and nothing the mesh did
    /// not make is touched. Stop `mesh-host serve` first, or its next declaration makes it all
    /// again.
    ///
    /// Exit codes: 0 everything given back (or nothing to do); 3 something could not be (the
    /// report says what and why); 1 the state cannot be read.
    Forget {
        /// Do it (without it, only list).
        #[arg(long)]
        yes: bool,
    },
    /// Prints shell completions on standard output, e.g.
    /// `mesh-host completions bash > /usr/share/bash-completion/completions/mesh-host`.
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Prints the manual page (roff) on standard output, e.g. `mesh-host man | man -l -`; with
    /// `--dir DIR`, writes one page per command and subcommand there and lists them.
    Man {
        /// Where to write every page (`mesh-host.1`, `mesh-host-COMMAND.1`, …).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum DriftCommand {
    /// Lists the hand edits kept, newest first: id, path, size, when, resource.
    List,
    /// Shows a kept hand edit: a unified diff from what was kept (`-`) to what the file holds
    /// now (`+`). Exits 2 when no hand edit has that id.
    Show {
        /// The id `drift list` (or the apply's report) gives.
        id: String,
        /// Writes the kept content to standard output as it was, byte for byte (to put it back
        /// by hand, or read content that is not text).
        #[arg(long)]
        raw: bool,
    },
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
            ExitCode::from(1)
        }
    }
}

fn run() -> Result<ExitCode> {
    let cli = Cli::parse();
    match &cli.command {
        Command::Completions { shell } => {
            cli_docs::print_completions(*shell, Cli::command())
                .context("writing the completions")?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Man { dir } => {
            cli_docs::man(Cli::command(), dir.as_deref()).context("writing the manual pages")?;
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }
    let access = store_access(&cli);
    match cli.command {
        // Answered above, before anything else is read.
        Command::Completions { .. } | Command::Man { .. } => Ok(ExitCode::SUCCESS),
        Command::Window { command } => {
            let host = HostConfig {
                root: cli.root,
                state_dir: cli.state_dir,
                containers: cli.containers.choice(),
                container_prefix: cli.containers.container_prefix.clone(),
                ..HostConfig::default()
            };
            window::run(
                command,
                &host,
                matches!(cli.output, Output::Json),
                mesh_store::clock::now(),
            )
        }
        Command::Forget { yes } => forget(&cli, yes),
        Command::Drift { command } => drift(command, &cli.root, &cli.state_dir, cli.output),
        Command::Keygen => {
            let made = mesh_host::keygen(&cli.state_dir)
                .with_context(|| format!("making the bus key under {}", cli.state_dir.display()))?;
            // Beside it, the age key a secret is sealed to for this host alone.
            let (age_key, age_made) = mesh_host::sealed::age_keygen(&cli.state_dir)
                .with_context(|| format!("making the age key under {}", cli.state_dir.display()))?;
            match cli.output {
                Output::Json => println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "public_key": made.public_key,
                        "seed_file": made.path,
                        "made": made.made,
                        "age_key": age_key.to_string(),
                        "age_key_file": cli.state_dir.join(mesh_host::sealed::AGE_KEY_FILE),
                        "age_key_made": age_made,
                    }))?
                ),
                Output::Text => {
                    let said = if made.made {
                        "made"
                    } else {
                        "already there, kept"
                    };
                    println!("{}", made.public_key);
                    eprintln!(
                        "seed {} ({said}; mode 0600, it never leaves this machine)\n\
                         age key {} ({}; mode 0600, it never leaves this machine)\n\
                         enroll both on the controller: mesh-controller node enroll {} {} \
                         --age-key {age_key}",
                        made.path.display(),
                        cli.state_dir
                            .join(mesh_host::sealed::AGE_KEY_FILE)
                            .display(),
                        if age_made {
                            "made"
                        } else {
                            "already there, kept"
                        },
                        cli.node.as_deref().unwrap_or("NODE"),
                        made.public_key
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Archives => {
            let listing = mesh_host::archives::list_cache(&cli.state_dir).with_context(|| {
                format!(
                    "reading the archive cache under {}",
                    cli.state_dir.display()
                )
            })?;
            match cli.output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&listing)?),
                Output::Text => print!("{}", mesh_host::archives::render_listing(&listing)),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve {
            heartbeat,
            first_retry,
            reconcile,
            full_check,
            stop_timeout,
        } => serve(
            cli.node,
            cli.bus,
            cli.password_file,
            cli.bus_tls.tls(),
            archive_source(&cli.state_dir, cli.store.as_deref(), &access)?,
            HostConfig {
                root: cli.root,
                state_dir: cli.state_dir,
                containers: cli.containers.choice(),
                container_prefix: cli.containers.container_prefix.clone(),
                retry: mesh_apply::RetryPolicy {
                    initial_backoff_secs: first_retry.max(1),
                    ..mesh_apply::RetryPolicy::default()
                },
            },
            (heartbeat, reconcile, full_check, stop_timeout),
        ),
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
            let archives = archive_source(&cli.state_dir, cli.store.as_deref(), &access)?;
            let config = HostConfig {
                root: cli.root,
                state_dir: cli.state_dir,
                containers: cli.containers.choice(),
                container_prefix: cli.containers.container_prefix.clone(),
                ..HostConfig::default()
            };
            let mut contents = tokio::runtime::Runtime::new()?
                .block_on(mesh_host::archives::read_archived(&declaration, &archives));
            mesh_host::sealed::render_sealed(&declaration, &config.state_dir, &mut contents);
            let report = match mesh_apply::apply_archived(
                &config,
                &declaration,
                &contents,
                mesh_store::clock::now(),
            ) {
                Ok(mut report) => {
                    mesh_host::prune_archive_cache(&config, &declaration, &mut report);
                    report
                }
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

/// `forget`: lists what the mesh holds here, or (with `yes`) gives it all back.
fn forget(cli: &Cli, yes: bool) -> Result<ExitCode> {
    let holdings = mesh_host::forget::holdings(&cli.state_dir)
        .with_context(|| format!("reading the host state under {}", cli.state_dir.display()))?;
    if !yes {
        match cli.output {
            Output::Json => println!("{}", serde_json::to_string_pretty(&holdings)?),
            Output::Text => print!("{}", mesh_host::forget::render_holdings(&holdings)),
        }
        return Ok(ExitCode::SUCCESS);
    }
    let config = HostConfig {
        root: cli.root.clone(),
        state_dir: cli.state_dir.clone(),
        containers: cli.containers.choice(),
        container_prefix: cli.containers.container_prefix.clone(),
        ..HostConfig::default()
    };
    let node = cli.node.as_deref().unwrap_or("localhost");
    let report =
        mesh_host::forget::forget(&config, node, mesh_store::clock::now()).with_context(|| {
            format!(
                "forgetting what the mesh holds under {}",
                cli.root.display()
            )
        })?;
    match cli.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Output::Text => print!("{}", render_report(&report)),
    }
    Ok(match report.machine {
        MachineState::Converged => ExitCode::SUCCESS,
        MachineState::MidChange | MachineState::Partial => ExitCode::from(3),
    })
}

/// `drift list` and `drift show`.
fn drift(
    command: DriftCommand,
    root: &std::path::Path,
    state_dir: &std::path::Path,
    output: Output,
) -> Result<ExitCode> {
    use mesh_apply::filebucket;
    match command {
        DriftCommand::List => {
            let index = filebucket::list(state_dir)?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&index.entries)?),
                Output::Text => print!("{}", mesh_host::kept::render_list(&index)),
            }
            Ok(ExitCode::SUCCESS)
        }
        DriftCommand::Show { id, raw } => {
            let (kept, bytes) = match filebucket::read(state_dir, &id) {
                Ok(read) => read,
                Err(error @ filebucket::BucketError::NotFound(_)) => {
                    eprintln!("error: {error}");
                    return Ok(ExitCode::from(2));
                }
                Err(error) => return Err(error.into()),
            };
            if raw {
                use std::io::Write as _;
                std::io::stdout().write_all(&bytes)?;
                return Ok(ExitCode::SUCCESS);
            }
            let now = mesh_host::kept::read_now(root, &kept.path);
            match output {
                Output::Json => {
                    let content = String::from_utf8(bytes.clone()).ok();
                    let current = match &now {
                        mesh_host::kept::Now::File(current) => {
                            String::from_utf8(current.clone()).ok()
                        }
                        _ => None,
                    };
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&serde_json::json!({
                            "kept": kept,
                            "content": content,
                            "now": current,
                        }))?
                    );
                }
                Output::Text => print!("{}", mesh_host::kept::render_show(&kept, &bytes, &now)),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The registry's CA and this host's credentials, as the flags name them.
fn store_access(cli: &Cli) -> mesh_store::store::StoreAccess {
    mesh_store::store::StoreAccess {
        ca_file: cli.store_ca.clone(),
        credentials_file: cli.store_credentials.clone(),
    }
}

/// The archive cache under `state_dir`, and the store `spec` names (if any), reached with
/// `access`.
fn archive_source(
    state_dir: &std::path::Path,
    spec: Option<&str>,
    access: &mesh_store::store::StoreAccess,
) -> Result<mesh_host::ArchiveSource> {
    let spec: Option<mesh_store::store::StoreSpec> = spec
        .map(|spec| spec.parse().with_context(|| format!("--store {spec}")))
        .transpose()?;
    mesh_host::ArchiveSource::open_with(state_dir, spec.as_ref(), access)
        .context("opening the store")
}

/// `serve`: checks its flags, then runs the daemon until SIGTERM or SIGINT.
fn serve(
    node: Option<String>,
    bus: Option<String>,
    password_file: Option<PathBuf>,
    bus_tls: mesh_bus::BusTls,
    archives: mesh_host::ArchiveSource,
    host: HostConfig,
    (heartbeat, reconcile, full_check, stop_timeout): (u64, u64, u64, u64),
) -> Result<ExitCode> {
    let (Some(node), Some(bus_url)) = (node, bus) else {
        eprintln!(
            "error: serve needs --node NODE, --bus URL, and --password-file FILE or the seed \
             `mesh-host keygen` makes"
        );
        return Ok(ExitCode::from(2));
    };
    let seed_file = host.state_dir.join(mesh_host::NKEY_SEED_FILE);
    if password_file.is_none() && !seed_file.exists() {
        eprintln!(
            "error: serve needs --password-file FILE, or a seed: run `mesh-host --state-dir {} \
             keygen` and enroll the public key it prints",
            host.state_dir.display()
        );
        return Ok(ExitCode::from(2));
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MESH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(mesh_host::log_in_colour())
        .init();
    let secret = match &password_file {
        Some(password_file) => mesh_bus::NodeSecret::Password(
            mesh_store::secret::read_secret(password_file).context("the node's bus password")?,
        ),
        None => mesh_bus::NodeSecret::NkeySeed(
            mesh_bus::keys::read_seed_file(&seed_file).context("reading the bus seed")?,
        ),
    };
    std::fs::create_dir_all(&host.state_dir)
        .with_context(|| format!("making the state directory {}", host.state_dir.display()))?;
    let config = mesh_host::serve::ServeConfig {
        node,
        bus_url,
        secret,
        bus_tls,
        host,
        archives,
        heartbeat: std::time::Duration::from_secs(heartbeat.max(1)),
        reconcile: std::time::Duration::from_secs(reconcile.max(1)),
        full_check: std::time::Duration::from_secs(full_check.max(1)),
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let served = runtime.block_on(async {
        mesh_host::serve::serve(
            config,
            mesh_host::serve::shutdown_signal_within(std::time::Duration::from_secs(
                stop_timeout.max(1),
            )),
        )
        .await
    });
    // Nothing left running is waited for (the drift watch's blocking thread, a connection
    // being retried), whether the daemon stopped or failed: it is done.
    runtime.shutdown_background();
    served?;
    Ok(ExitCode::SUCCESS)
}
