//! `mesh-host window`: run a maintenance step with containers held still, and list the open
//! windows (the rule “A maintenance window holds containers still”).
//!
//! The window itself — its record under the state directory, its lapse, what an apply does
//! during it — is [`mesh_apply::window`]; this is the command line and the process around the
//! step: the step runs as a child, and SIGINT or SIGTERM are passed on to it, so the window is
//! released on every path this process lives through. A SIGKILL cannot be caught: that window
//! is judged closed by every reader as soon as this process is gone.

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use mesh_apply::window::{self, ProcessIdentity, RecordedWindow, WindowState};
use mesh_apply::HostConfig;
use mesh_apply::{ContainerRuntime, ContainerRuntimeChoice, NoContainerRuntime, Podman};
use std::ffi::OsString;
use std::process::ExitCode;

/// Maintenance windows: run a step (a backup, a migration) with containers held still, and
/// list the open windows. Every apply on this machine leaves held containers alone and
/// reports them `held-still`; see `window run --help`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: WindowCommand,
}

/// Runs a `window` subcommand on the host the global options name.
pub fn exec(args: &Args, cli: &crate::Cli) -> Result<ExitCode> {
    run(
        &args.command,
        &super::host_config(cli),
        matches!(cli.output, crate::Output::Json),
        mesh_store::clock::now(),
    )
}

/// What `mesh-host window` does.
#[derive(Subcommand)]
pub enum WindowCommand {
    /// Runs a step with containers held still: records the window under the state directory,
    /// stops the held containers, runs the step, starts them again, and releases the window.
    ///
    /// While the window is open, every apply on this machine (the daemon, a hand-run apply)
    /// leaves the held containers alone and reports them `held-still` naming the step; the
    /// first apply after converges them. The window is released when the step succeeds, fails,
    /// or this process gets SIGINT or SIGTERM (passed on to the step). A window whose process is
    /// gone (even by SIGKILL) is treated as closed, and every window lapses six hours after it
    /// opened.
    ///
    /// Only containers the mesh made can be held. Exit codes: the step's own; 128+N when a
    /// signal N ended it; 1 when the window could not be opened or released (a release that
    /// could not start a container says which; the next apply starts it).
    ///
    /// Example: mesh-host window run --step nightly-backup --hold mesh-db-db --
    /// /usr/local/bin/backup-db
    Run(RunArgs),
    /// Lists the windows recorded under the state directory: open ones, and those judged closed
    /// (lapsed, or their process gone) that no apply has cleared yet.
    List,
}

/// `mesh-host window run`.
#[derive(clap::Args)]
pub struct RunArgs {
    /// The step's name, as reports show it (`held-still{step}`).
    #[arg(long)]
    step: String,
    /// A container (its name on the machine, e.g. `mesh-db-db`) to hold still; repeat for more,
    /// or give several after one `--hold`.
    #[arg(long, required = true, num_args = 1..)]
    hold: Vec<String>,
    /// The step: a program and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// Runs a `window` subcommand.
fn run(command: &WindowCommand, host: &HostConfig, json: bool, now: u64) -> Result<ExitCode> {
    match command {
        WindowCommand::Run(args) => run_step(args, host, now),
        WindowCommand::List => {
            let windows = window::list(&host.state_dir, now)?;
            if json {
                let listed: Vec<serde_json::Value> = windows.iter().map(window_json).collect();
                println!("{}", serde_json::to_string_pretty(&listed)?);
            } else {
                print!("{}", render_windows(&windows));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn state_word(state: WindowState) -> &'static str {
    match state {
        WindowState::Open => "open",
        WindowState::Lapsed => "lapsed",
        WindowState::ProcessGone => "process-gone",
    }
}

fn window_json(recorded: &RecordedWindow) -> serde_json::Value {
    serde_json::json!({
        "step": recorded.window.step,
        "containers": recorded.window.containers,
        "pid": recorded.window.pid,
        "opened-at": recorded.window.opened_at,
        "state": state_word(recorded.state),
    })
}

/// The windows as a person reads them.
fn render_windows(windows: &[RecordedWindow]) -> String {
    use std::fmt::Write as _;
    let open = windows
        .iter()
        .filter(|w| w.state == WindowState::Open)
        .count();
    let mut out = format!("{open} open window(s)\n");
    for recorded in windows {
        let w = &recorded.window;
        let _ = writeln!(
            out,
            "  {:<12} step `{}` holds {} (pid {}, opened {})",
            state_word(recorded.state),
            w.step,
            w.containers.join(", "),
            w.pid,
            mesh_store::clock::rfc3339(w.opened_at)
        );
    }
    out
}

/// `window run`: open, run the step, release — on every path this process lives through.
fn run_step(args: &RunArgs, host: &HostConfig, now: u64) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the signal handling")?;
    // Signals are caught from here on: a SIGINT or SIGTERM while the containers are being
    // stopped is acted on once they are, never by dying with the window open.
    let (mut interrupt, mut terminate) = {
        let _entered = runtime.enter();
        use tokio::signal::unix::{signal, SignalKind};
        (
            signal(SignalKind::interrupt()).context("catching SIGINT")?,
            signal(SignalKind::terminate()).context("catching SIGTERM")?,
        )
    };
    let podman;
    let containers: &dyn ContainerRuntime = match &host.containers {
        ContainerRuntimeChoice::Podman(config) => {
            podman = Podman::new(config.clone(), &host.root);
            &podman
        }
        ContainerRuntimeChoice::Unsupported => &NoContainerRuntime,
    };
    let process = ProcessIdentity::current().context("reading this process's start time")?;
    let opened = window::open(
        &host.state_dir,
        &args.step,
        &args.hold,
        process,
        now,
        containers,
    )?;
    eprintln!(
        "window `{}` open: holding {} still",
        args.step,
        opened.window().containers.join(", ")
    );

    let ended = runtime.block_on(async {
        // A signal that came while the containers were being stopped: the step never starts.
        tokio::select! {
            biased;
            _ = interrupt.recv() => return Ended::Signal(nix::sys::signal::Signal::SIGINT),
            _ = terminate.recv() => return Ended::Signal(nix::sys::signal::Signal::SIGTERM),
            _ = std::future::ready(()) => {}
        }
        let mut child = match tokio::process::Command::new(&args.command[0])
            .args(&args.command[1..])
            .spawn()
        {
            Ok(child) => child,
            Err(error) => return Ended::NotStarted(error),
        };
        let signal = tokio::select! {
            status = child.wait() => return Ended::Step(status),
            _ = interrupt.recv() => nix::sys::signal::Signal::SIGINT,
            _ = terminate.recv() => nix::sys::signal::Signal::SIGTERM,
        };
        if let Some(pid) = child.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX)),
                signal,
            );
        }
        let _ = child.wait().await;
        Ended::Signal(signal)
    });

    let released = opened.release(containers);
    let code = match &ended {
        Ended::Step(Ok(status)) => {
            eprintln!("window `{}`: the step ended ({status})", args.step);
            match status.code() {
                Some(code) => u8::try_from(code).unwrap_or(1),
                None => {
                    use std::os::unix::process::ExitStatusExt as _;
                    128u8.saturating_add(u8::try_from(status.signal().unwrap_or(0)).unwrap_or(0))
                }
            }
        }
        Ended::Step(Err(error)) => {
            eprintln!("error: waiting for the step: {error}");
            1
        }
        Ended::NotStarted(error) => {
            eprintln!(
                "error: cannot start the step `{}`: {error}",
                args.command[0].to_string_lossy()
            );
            127
        }
        Ended::Signal(signal) => {
            eprintln!("window `{}`: stopped by {signal}", args.step);
            128u8.saturating_add(u8::try_from(*signal as i32).unwrap_or(0))
        }
    };
    match released {
        Ok(()) => {
            eprintln!("window `{}` released", args.step);
            Ok(ExitCode::from(code))
        }
        Err(error) if code == 0 => bail!(error),
        Err(error) => {
            eprintln!("error: {error}");
            Ok(ExitCode::from(code))
        }
    }
}

/// How the step ended.
enum Ended {
    /// It ran and exited.
    Step(std::io::Result<std::process::ExitStatus>),
    /// It could not be started.
    NotStarted(std::io::Error),
    /// A signal came; it was passed on to the step (if it had started).
    Signal(nix::sys::signal::Signal),
}
