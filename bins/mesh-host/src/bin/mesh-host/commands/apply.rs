//! `apply`: a declaration file applied once, by hand.

use crate::cli_docs::exit::Exit;
use crate::{Cli, Output};
use anyhow::{Context, Result};
use mesh_host::render_report;
use mesh_model::declaration::Declaration;
use std::path::PathBuf;
use std::process::ExitCode;

/// Applies a declaration file (JSON) once and prints the report.
///
/// A file that is not a valid declaration is refused with the reason, and nothing under
/// the root changes.
#[derive(clap::Args)]
pub struct Args {
    /// The declaration, as `mesh-controller plan NODE --output json` prints it.
    file: PathBuf,
}

/// Applies the file with the archives its files need (the cache, then the store), and prints
/// the report: exit 0 converged, 3 not, 2 refused or not applied at all (its state directory
/// cannot be written or read: the system's reason is said).
pub fn exec(args: &Args, cli: &Cli) -> Result<ExitCode> {
    let file = &args.file;
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let declaration = match Declaration::from_json(&bytes) {
        Ok(declaration) => declaration,
        Err(error) => {
            eprintln!(
                "error: {} refused, nothing applied: {error}",
                file.display()
            );
            return Ok(Exit::Refused.into());
        }
    };
    let archives = super::archive_source(cli)?;
    let config = super::host_config(cli);
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
        Err(error @ mesh_apply::ApplyError::Declaration { .. }) => {
            eprintln!("error: apply refused, nothing applied: {error}");
            return Ok(Exit::Refused.into());
        }
        // The state directory cannot be written or read: said with the system's reason.
        Err(error) => {
            eprintln!(
                "error: the host cannot apply: {}",
                mesh_host::with_causes(&error)
            );
            return Ok(Exit::Refused.into());
        }
    };
    match cli.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Output::Text => print!("{}", render_report(&report)),
    }
    Ok(super::report_exit_code(&report))
}
