//! One file per command, in the way of cargo's `commands/`: each holds the command's arguments
//! (`Args`, or `Command` for a command of subcommands), with its help, and an `exec` that calls
//! the [`mesh_controller`] library, renders the answer ([`crate::render`]) and says the exit
//! code. A rule of the mesh lives in the library, so a tool embedding it gets the CLI's answer;
//! what is here is parsing, printing and exit codes.

pub mod broker;
pub mod build;
pub mod check;
pub mod completions;
pub mod demo;
pub mod init;
pub mod man;
pub mod merge;
pub mod node;
pub mod plan;
pub mod plans;
pub mod push;
pub mod records;
pub mod repo;
pub mod runtimes;
pub mod secrets;
pub mod serve;
pub mod settings;
pub mod status;

use crate::lines::Lines;
use crate::{Cli, Output};
use anyhow::{Context, Result};
use mesh_cli_docs::exit::Exit;
use mesh_controller::bus::BusConfig;

use mesh_controller::Home;
use mesh_controller::Mesh;
use mesh_controller::MeshOptions;
use mesh_controller::Runtime;
use mesh_store::store::ArchiveStore;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// What every command but `completions` and `man` runs with: the home, the store and the bus
/// the global options name, a runtime, and where progress goes.
pub struct Env {
    /// The home's path as given (`--home`).
    pub home_path: PathBuf,
    /// The mesh home, its records under it or on the bus.
    pub home: Home,
    /// Text or JSON.
    pub output: Output,
    /// The fleet's bus, when `--bus` names one.
    pub bus: Option<BusConfig>,
    /// The bus options with no URL: what `broker users` renders for without `--bus`.
    pub local_bus: BusConfig,
    /// The mesh: the home, the store and the fleet.
    pub mesh: Arc<Mesh>,
    /// The runtime the library's async calls run on.
    pub runtime: tokio::runtime::Runtime,
    /// Progress lines (and bars on a terminal).
    pub progress: Arc<Lines>,
}

impl Env {
    /// Opens the mesh — the home (on the bus with `--bus`), the store and the fleet — and
    /// starts a runtime.
    pub fn open(cli: &Cli) -> Result<Env> {
        let bus_config = |url: String| {
            let mut bus = BusConfig::new(url);
            if let Some(file) = &cli.bus_password_file {
                bus = bus.with_password_file(file);
            }
            if let Some(file) = &cli.bus_seed {
                bus = bus.with_seed_file(file);
            }
            if let Some(file) = &cli.bus.bus_ca {
                bus = bus.with_ca_file(file);
            }
            if let (Some(cert_file), Some(key_file)) = (&cli.bus.bus_cert, &cli.bus.bus_key) {
                bus = bus.with_client_certificate(cert_file, key_file);
            }
            if let Some(replicas) = cli.bus_replicas {
                bus = bus.with_replicas(replicas);
            }
            if let Some(limit) = cli.bus_retry.limit() {
                bus = bus.with_retry_limit(limit);
            }
            bus
        };
        let reads_only = cli.command.reads_only();
        let bus = cli.bus.bus.clone().map(|url| {
            let bus = bus_config(url);
            if reads_only {
                bus.reading_only()
            } else {
                bus
            }
        });
        let store: Option<mesh_store::store::StoreSpec> = match &cli.store {
            Some(spec) => Some(spec.parse().with_context(|| format!("--store {spec}"))?),
            None => None,
        };
        let mesh = Mesh::open(
            &cli.home,
            MeshOptions {
                bus: bus.clone(),
                store,
                store_access: mesh_store::store::StoreAccess {
                    ca_file: cli.store_ca.clone(),
                    credentials_file: cli.store_credentials.clone(),
                },
                report_limit: Some(cli.report_limit),
            },
        )?;
        Ok(Env {
            home_path: cli.home.clone(),
            home: mesh.home().clone(),
            output: cli.output,
            bus,
            local_bus: bus_config(String::new()),
            mesh: Arc::new(mesh),
            runtime: tokio::runtime::Runtime::new()?,
            progress: Arc::new(Lines::new(cli.output)),
        })
    }

    /// The bus, for a command that talks to a fleet's.
    pub fn need_bus(&self) -> Result<BusConfig> {
        self.bus
            .clone()
            .context("this command talks to a fleet's bus: give --bus URL (or MESH_BUS)")
    }

    /// The archive store.
    pub fn store(&self) -> &dyn ArchiveStore {
        self.mesh.store()
    }

    /// The library's runtime of the mesh, which plans, rollouts and pushes drive through;
    /// progress goes to the command's lines.
    pub fn drives(&self) -> Runtime {
        Runtime::new(Arc::clone(&self.mesh), Arc::clone(&self.progress) as _)
    }

    /// The modules whose running containers' data may move (`--move`).
    pub fn moves(moves: &[String]) -> BTreeSet<String> {
        moves.iter().cloned().collect()
    }

    /// The catalogue the mesh composes from (registered repositories' builds over the home's
    /// modules) and its problems.
    pub fn checked(&self) -> Result<mesh_controller::Checked> {
        Ok(self.runtime.block_on(self.mesh.checked())?)
    }

    /// Prints `value` as pretty JSON on standard output.
    pub fn print_json(&self, value: &impl serde::Serialize) -> Result<()> {
        println!("{}", serde_json::to_string_pretty(value)?);
        Ok(())
    }
}

/// Prints the plans a drive left (`plans resume`, `push --behind`, `build --behind`): exit 3
/// when one of them stopped.
pub fn print_plans_driven(output: Output, plans: &[mesh_model::plan::Plan]) -> Result<ExitCode> {
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(plans)?),
        Output::Text if plans.is_empty() => println!("no open plans"),
        Output::Text => {
            for plan in plans {
                print!("{}", crate::render::plan_summary(plan));
            }
        }
    }
    Ok(if mesh_controller::plans::any_stopped(plans) {
        Exit::Attention.into()
    } else {
        ExitCode::SUCCESS
    })
}
