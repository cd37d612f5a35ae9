//! `records`: where the controller's records are, and reading and replacing them by hand.

use crate::{render, Output};
use anyhow::Result;
use clap::Subcommand;
use mesh_cli_docs::exit::Exit;
use mesh_controller::records;

use std::path::PathBuf;
use std::process::ExitCode;

/// `records` subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Without FILE, moves the home's records onto the bus (`--bus`): every record is copied,
    /// the inventory last, and the home is marked as moved, so a later command on it without
    /// `--bus` is refused rather than reading records no longer kept. The catalogue, sandbox
    /// roots and the controller's own password stay in the home.
    ///
    /// With FILE, restores an archive `records export` wrote into the records — the bus's
    /// bucket with `--bus`, else the files under the home — which must be empty: one holding a
    /// record the archive does not hold byte for byte is refused naming it, nothing written.
    /// The archive is checked whole first (every record's size and SHA-256); the inventory is
    /// written last, so an import stopped part way is finished by running it again.
    ///
    /// Exit codes: 0 copied or restored; 1 error (the bus already holds a mesh, or the records
    /// are not empty, or the archive is damaged: nothing was written; a record could not be
    /// written: run it again).
    Import {
        /// An archive `records export` wrote.
        file: Option<PathBuf>,
    },
    /// Writes every record to FILE (mode 0600), a versioned archive `records import FILE`
    /// restores byte for byte: taken under the plans lock (no plan, rollout, push or
    /// collection writes meanwhile), secrets in it as ciphertext, as the records keep them.
    /// The catalogue, the mesh's secrets key and the controller's own bus password and seed
    /// stay on this machine and are not in it: back them up with the home.
    ///
    /// Exit codes: 0 written; 1 error (no archive is left).
    Export {
        /// The archive to write (replaced whole).
        file: PathBuf,
    },
    /// Lists the records one level under DIR (default: the top), as a directory would.
    List {
        /// The directory, e.g. `plans` or `settings/web`.
        #[arg(default_value = "")]
        dir: String,
    },
    /// Folds the plans that ended: the records of their rollouts' nodes removed, what the plan
    /// must remember of them (how many nodes ended where, their latencies, each node that did
    /// not finish) kept in the plan record; removes the plans older than `--keep-plans` that
    /// nothing reads. Then removes the declarations no record names any more: each is kept once by
    /// its digest, and kept while what a node was last sent, or an open plan's rollout (what a node
    /// is sent, what it ran before, what it was sent back), names it. One written within the grace
    /// is kept all the same (a push writes it before the record naming it). Also removes the chunks
    /// of replaced records on a fleet's bus. Says how many were removed and their bytes. Waits
    /// while a plan is being driven.
    ///
    /// Exit codes: 0 collected; 1 error (a record could not be read: nothing was removed).
    Collect {
        /// Keep what no record names when it was written less than this many minutes ago.
        #[arg(long, value_name = "MINUTES", default_value_t = 10)]
        grace_minutes: u64,
        /// How many of the newest plans are kept whole; an older one that ended is removed,
        /// unless it is its repository's newest or `status` still shows a rollout it stopped.
        #[arg(long, value_name = "N", default_value_t = mesh_controller::plans::KEEP_PLANS)]
        keep_plans: usize,
    },
    /// Prints one record, e.g. `inventory.toml` or `plans/plan-3.json`.
    ///
    /// Exit codes: 0 printed; 1 error (no such record).
    Get {
        /// The record's key.
        key: String,
    },
    /// Replaces the inventory (`inventory.toml`) with FILE (`-`: standard input) — on a fleet
    /// the way to edit it, as the file under the home is edited without `--bus`. The new
    /// inventory must read as one; a node added, removed or re-assigned reaches the fleet
    /// with the next push or rollout. Settings layers are changed with `settings set`.
    ///
    /// With `--base` (the inventory as `records get` gave it when the edit began) the put is
    /// compare-and-set: refused, nothing changed, when another operator changed the
    /// inventory since.
    ///
    /// Exit codes: 0 replaced; 1 error (not an inventory: nothing was changed); 2 refused:
    /// the inventory is no longer `--base` (nothing was changed: read it again, edit, put).
    Put {
        /// The record's key: `inventory.toml`.
        key: String,
        /// The file holding the new record, or `-` for standard input.
        file: PathBuf,
        /// The inventory the edit started from: the put goes ahead only while the inventory
        /// is still exactly this.
        #[arg(long, value_name = "FILE")]
        base: Option<PathBuf>,
    },
}

impl Command {
    /// Whether it only reads the records (`list`, `get`, `export`).
    pub fn reads_only(&self) -> bool {
        match self {
            Command::List { .. } | Command::Get { .. } | Command::Export { .. } => true,
            Command::Import { .. } | Command::Collect { .. } | Command::Put { .. } => false,
        }
    }
}

/// Imports, exports, lists, collects, gets or puts.
pub fn exec(command: Command, env: &super::Env) -> Result<ExitCode> {
    let home = &env.home;
    match command {
        Command::Import { file: Some(file) } => {
            let restored = records::restore(home, &file)?;
            match env.output {
                Output::Json => env.print_json(&restored)?,
                Output::Text => println!(
                    "restored {} records from {} (exported from {}) into {}{}",
                    restored.records,
                    restored.file,
                    restored.from,
                    restored.into,
                    match restored.already {
                        0 => String::new(),
                        n => format!(" ({n} of them were there already)"),
                    }
                ),
            }
        }
        Command::Export { file } => {
            let exported = records::export(home, &file, mesh_store::clock::now())?;
            match env.output {
                Output::Json => env.print_json(&exported)?,
                Output::Text => println!(
                    "wrote {} records ({} bytes) of {} to {} (records archive format {})",
                    exported.records, exported.bytes, exported.from, exported.file, exported.format
                ),
            }
        }
        Command::Import { file: None } => {
            let bus = env.need_bus()?;
            let imported = records::import(&env.home_path, home, bus.url())?;
            match env.output {
                Output::Json => env.print_json(&imported)?,
                Output::Text => println!(
                    "copied {} records from {} to {}; the home is marked as moved: give \
                     --bus {} with every command on it from now on",
                    imported.keys.len(),
                    imported.home,
                    imported.records,
                    bus.url()
                ),
            }
        }
        Command::List { dir } => {
            home.require()?;
            let names = home.records().list(dir.trim_end_matches('/'))?;
            match env.output {
                Output::Json => env.print_json(&names)?,
                Output::Text => names.iter().for_each(|name| println!("{name}")),
            }
        }
        Command::Collect {
            grace_minutes,
            keep_plans,
        } => {
            let collected = records::collect(
                home,
                mesh_store::clock::now(),
                std::time::Duration::from_secs(grace_minutes.saturating_mul(60)),
                keep_plans,
            )?;
            match env.output {
                Output::Json => env.print_json(&collected)?,
                Output::Text => print!("{}", render::declarations_collected(&collected)),
            }
        }
        Command::Get { key } => {
            let bytes = records::get(home, &key)?;
            use std::io::Write as _;
            std::io::stdout().write_all(&bytes)?;
        }
        Command::Put { key, file, base } => {
            match records::put_by_hand(home, &key, &file, base.as_deref())? {
                records::PutOutcome::Replaced => {
                    println!("replaced {}", home.records().locate(&key));
                }
                records::PutOutcome::BaseChanged => {
                    println!(
                        "refused: {} is no longer the inventory --base holds (it was changed \
                         since); nothing was changed: read it again with `records get {key}`, \
                         make the edit on that, and put it again",
                        home.records().locate(&key)
                    );
                    return Ok(Exit::Refused.into());
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
