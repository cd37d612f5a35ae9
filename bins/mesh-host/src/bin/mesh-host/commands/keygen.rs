//! `keygen`: this host's NKey for the bus, and its age key beside it.

use crate::{Cli, Output};
use anyhow::{Context, Result};
use std::process::ExitCode;

/// Makes this host's NKey for the bus (or shows the one it has): writes the seed to
/// `<state-dir>/bus/nkey.seed`, mode 0600 (it never leaves this machine), and prints the
/// public key to enroll: `mesh-controller node enroll NODE PUBLIC-KEY`.
///
/// A seed already there is kept, never replaced: remove the file to make a new key, and
/// enroll the new public key.
#[derive(clap::Args)]
pub struct Args {}

/// Makes (or finds) both keys and prints what to enroll.
pub fn exec(_args: &Args, cli: &Cli) -> Result<ExitCode> {
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
