//! `sweep`: hold every kept archive, then let go of the rest.

use mesh_store::collector::{Operation, Verdict};

/// Hold every kept archive (backfilling a missing holding manifest from the record), then
/// let go of every held archive not kept by removing its manifest. Nothing is let go if
/// any part of the store could not be read.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Say what would be held and let go; change nothing.
    #[arg(long)]
    dry_run: bool,
}

/// Sweeps the store and prints the answer.
pub async fn exec(args: &Args, env: &super::Env<'_>) -> anyhow::Result<Verdict> {
    super::run(env, Operation::Sweep, args.dry_run).await
}
