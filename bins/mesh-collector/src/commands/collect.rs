//! `collect`: sweep, then delete what nothing holds.

use mesh_store::collector::{Operation, RegistryCollection, Verdict};
use std::path::PathBuf;

/// Sweep, then delete every blob nothing holds: for real only when the sweep reports every
/// kept archive held ("held N of N"), dry otherwise. A registry is collected by its own
/// `garbage-collect` (never --delete-untagged), stopped for the run and started after.
#[derive(Debug, clap::Args)]
pub struct Args {
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
}

/// Collects the store and prints the answer.
pub async fn exec(args: &Args, env: &super::Env<'_>) -> anyhow::Result<Verdict> {
    let registry = RegistryCollection {
        config: args.registry_config.clone(),
        binary: args.registry_binary.clone(),
        stop: args.registry_stop.clone(),
        start: args.registry_start.clone(),
    };
    super::run(env, Operation::Collect(registry), args.dry_run).await
}
