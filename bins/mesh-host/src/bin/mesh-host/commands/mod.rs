//! One file per command, as the controller has them: each holds the command's arguments
//! (`Args`), with its help, and an `exec` that calls the [`mesh_host`] library (or mesh-apply's
//! engine), prints the answer and says the exit code. What every command shares is here: the
//! host the global options name, the archives its files are read from, and the exit code of a
//! report. A rule of the host lives in the libraries; what is here is parsing, printing and
//! exit codes.

pub mod apply;
pub mod archives;
pub mod completions;
pub mod drift;
pub mod forget;
pub mod keygen;
pub mod man;
pub mod serve;
pub mod window;

use crate::cli_docs::exit::Exit;
use crate::Cli;
use anyhow::{Context, Result};
use mesh_apply::HostConfig;
use mesh_model::report::{MachineState, Report};
use std::process::ExitCode;

/// The host the global options name: its root, its state directory and how it runs
/// containers.
pub fn host_config(cli: &Cli) -> HostConfig {
    HostConfig {
        root: cli.root.clone(),
        state_dir: cli.state_dir.clone(),
        containers: cli.containers.choice(),
        container_prefix: cli.containers.container_prefix.clone(),
        ..HostConfig::default()
    }
}

/// The archive cache under `--state-dir`, and the store `--store` names (if any), reached with
/// the registry's CA and this host's credentials as the flags name them.
pub fn archive_source(cli: &Cli) -> Result<mesh_host::ArchiveSource> {
    let access = mesh_store::store::StoreAccess {
        ca_file: cli.store_ca.clone(),
        credentials_file: cli.store_credentials.clone(),
    };
    let spec: Option<mesh_store::store::StoreSpec> = cli
        .store
        .as_deref()
        .map(|spec| spec.parse().with_context(|| format!("--store {spec}")))
        .transpose()?;
    if !(cli.fetch_spread.is_finite() && (0.0..=3600.0).contains(&cli.fetch_spread)) {
        anyhow::bail!(
            "--fetch-spread {}: give the seconds, from 0 to 3600",
            cli.fetch_spread
        );
    }
    Ok(
        mesh_host::ArchiveSource::open_with(&cli.state_dir, spec.as_ref(), &access)
            .context("opening the store")?
            .with_fetch_spread(std::time::Duration::from_secs_f64(cli.fetch_spread)),
    )
}

/// The exit code of an apply's report: 0 converged, 3 applied but some resources did not take.
pub fn report_exit_code(report: &Report) -> ExitCode {
    match report.machine {
        MachineState::Converged => Exit::Done.into(),
        MachineState::MidChange | MachineState::Partial => Exit::Attention.into(),
    }
}
