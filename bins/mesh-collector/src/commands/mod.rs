//! One file per command, as the controller has them: each holds the command's arguments
//! (`Args`), with its help, and an `exec`. `sweep` and `collect` are one run of the collector
//! ([`run`]): the store opened and locked, the records opened, the run itself and the problem
//! it leaves — calls into [`mesh_store::collector`] — then the answer rendered
//! ([`crate::render`]). What is here is parsing, printing and phrasing; a rule of the store
//! lives in mesh-store.

pub mod collect;
pub mod completions;
pub mod man;
pub mod sweep;

use crate::{Cli, Output};
use anyhow::Context as _;
use mesh_bus::keys::{CONTROLLER_PASSWORD_FILE, CONTROLLER_SEED_FILE};
use mesh_bus::records::KvRecords;
use mesh_bus::NatsOptions;
use mesh_store::collector::{
    Collector, CollectorError, CollectorOptions, Operation, RunOptions, Verdict,
};
use mesh_store::record_store::{DirRecords, RecordStore};
use mesh_store::store::{StoreAccess, StoreSpec};
use std::path::PathBuf;
use std::sync::Arc;

/// What `sweep` and `collect` run with: the global options, and the home `main` has checked
/// is given.
pub struct Env<'a> {
    /// The global options.
    pub cli: &'a Cli,
    /// `--home`.
    pub home: PathBuf,
}

impl Env<'_> {
    /// Where the module records are: files under `--home`, or with `--bus` the controller's
    /// records bucket, reached with the controller's seed or password.
    fn open_records(&self) -> anyhow::Result<Arc<dyn RecordStore>> {
        let cli = self.cli;
        let Some(url) = &cli.bus.bus else {
            return Ok(Arc::new(DirRecords::new(&self.home)));
        };
        let seed_file = cli.bus_seed.clone().or_else(|| {
            let default = self.home.join(CONTROLLER_SEED_FILE);
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
                    .unwrap_or_else(|| self.home.join(CONTROLLER_PASSWORD_FILE));
                let password = mesh_store::secret::read_secret(&file)
                    .context("the controller's bus password")?;
                NatsOptions::for_controller(url, password)
            }
        };
        let records = KvRecords::open(&NatsOptions {
            name: Some("mesh-collector".to_owned()),
            tls: cli.bus.tls(),
            ..options
        })
        .with_context(|| format!("opening the controller's records on {url}"))?;
        let records = match cli.bus_retry.limit() {
            Some(limit) => records.with_retry_limit(limit),
            None => records,
        };
        // As the controller keeps them: a large record in chunks.
        Ok(Arc::new(mesh_store::chunked::ChunkedRecords::new(
            Arc::new(records),
        )))
    }
}

/// Runs `operation` on the store (dry with `dry_run`), keeps the problem it leaves for
/// `status`, and prints the answer; returns what it comes to.
pub async fn run(env: &Env<'_>, operation: Operation, dry_run: bool) -> anyhow::Result<Verdict> {
    let cli = env.cli;
    let store: Option<StoreSpec> = cli.store.as_deref().map(str::parse).transpose()?;
    let collector = Collector::open(CollectorOptions {
        home: env.home.clone(),
        store,
        access: StoreAccess {
            ca_file: cli.store_ca.clone(),
            credentials_file: cli.store_credentials.clone(),
        },
    })
    .await?;
    let records = env.open_records()?;
    let by = format!("mesh-collector {}", operation.name());
    let outcome = collector
        .run(
            Arc::clone(&records),
            RunOptions {
                operation,
                dry_run,
                // On a fleet the controller publishes and records builds on its own machine,
                // which this machine's lock does not reach: the plans lease on the bus (held by
                // a controller while it builds) keeps every publish out for the whole run.
                hold_plans_lease: cli.bus.bus.is_some(),
                by: by.clone(),
            },
        )
        .await
        .map_err(phrased)?;
    // The rule “Nothing fails silently”: what this run left wrong reaches the controller's
    // `status` as a problem of the store, until a run leaves every kept archive held.
    outcome
        .keep_problem(records.as_ref(), &by, mesh_store::clock::now())
        .context("recording the collector's answer for `status`")?;
    match cli.output {
        Output::Text => print!("{}", crate::render::text(&outcome)),
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&crate::render::answer(&outcome))
                .context("cannot write the answer as JSON")?
        ),
    }
    Ok(outcome.verdict())
}

/// A run's error in the command line's words: what a registry's collection lacks is named by
/// its flags.
fn phrased(error: CollectorError) -> anyhow::Error {
    match error {
        CollectorError::NoRegistryConfig => anyhow::anyhow!(
            "collecting a registry needs --registry-config (the file it serves with)"
        ),
        CollectorError::NoRegistryProcess => anyhow::anyhow!(
            "a real collection of a registry stops it for the run: give --registry-stop and \
             --registry-start (or --dry-run)"
        ),
        CollectorError::Store(_)
        | CollectorError::Lock(_)
        | CollectorError::Lease(_)
        | CollectorError::Records(_)
        | CollectorError::Collect(_) => error.into(),
    }
}
