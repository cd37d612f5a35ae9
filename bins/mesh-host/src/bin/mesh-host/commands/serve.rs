//! `serve`: the node's daemon on a fleet, until SIGTERM or SIGINT ([`mesh_host::serve::run`]).

use crate::cli_docs::exit::Exit;
use crate::Cli;
use anyhow::Result;
use mesh_host::serve::{RunError, ServeOptions};
use std::process::ExitCode;
use std::time::Duration;

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
#[derive(clap::Args)]
pub struct Args {
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
}

/// Checks its flags, then runs the daemon until SIGTERM or SIGINT: exit 0 stopped, 2 a flag
/// or the credential missing.
pub fn exec(args: &Args, cli: &Cli) -> Result<ExitCode> {
    let archives = super::archive_source(cli)?;
    let (Some(node), Some(bus_url)) = (cli.node.clone(), cli.bus.bus.clone()) else {
        eprintln!(
            "error: serve needs --node NODE (or MESH_NODE), --bus URL (or MESH_BUS), and \
             --password-file FILE or the seed `mesh-host keygen` makes"
        );
        return Ok(Exit::Usage.into());
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MESH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(mesh_host::log_in_colour())
        .init();
    let seconds = |secs: u64| Duration::from_secs(secs.max(1));
    let served = mesh_host::serve::run(ServeOptions {
        node,
        bus_url,
        password_file: cli.password_file.clone(),
        bus_tls: cli.bus.tls(),
        host: mesh_apply::HostConfig {
            retry: mesh_apply::RetryPolicy {
                initial_backoff_secs: args.first_retry.max(1),
                ..mesh_apply::RetryPolicy::default()
            },
            ..super::host_config(cli)
        },
        archives,
        heartbeat: seconds(args.heartbeat),
        reconcile: seconds(args.reconcile),
        full_check: seconds(args.full_check),
        stop_timeout: seconds(args.stop_timeout),
    });
    match served {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(RunError::NoCredential { state_dir }) => {
            eprintln!(
                "error: serve needs --password-file FILE, or a seed: run `mesh-host --state-dir \
                 {} keygen` and enroll the public key it prints",
                state_dir.display()
            );
            Ok(Exit::Usage.into())
        }
        Err(error) => Err(error.into()),
    }
}
