//! `secrets`: the operators' keys, a new mesh secrets key and a module's secret file
//! encrypted; and reading a secret's value
//! from standard input for `settings set-secret`.

use crate::Output;
use anyhow::{Context as _, Result};
use clap::Subcommand;
use mesh_cli_docs::exit::Exit;
use mesh_controller::secrets;

use std::io::Read as _;
use std::process::ExitCode;

/// `secrets` subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// The operators' age keys: every secret at rest is also encrypted to each, so a person
    /// can open one with the `age` tool in an emergency.
    #[command(subcommand)]
    Recipients(Recipients),
    /// Makes a new mesh secrets key and encrypts every secret at rest (every settings layer
    /// and its history, and every secret file of the home's catalogue and of each registered
    /// repository with a working tree, those files alone committed on its registered branch)
    /// to it and the operators' keys again; says how many values it re-encrypted and which
    /// files in which repository, and their commit. The keyed digests change with the key, so
    /// the next push sends every node that uses a secret, with the same contents. The old key
    /// is kept until everything is done: a rotation stopped midway, or waiting for a
    /// repository registered by URL whose head still holds a file sealed to the old key, is
    /// finished by running it again. Once done, the old key is retired
    /// (`secrets/retired/<age1…>.key`, 0600): the controller still opens with it the secret
    /// files of the builds deployed (or planned) before the rotation, and drops it — saying
    /// so — at the first merge that leaves no such build; it says which builds keep it.
    ///
    /// Exit codes: 0 rotated; 1 error, or a repository not done yet (run it again).
    Rotate,
    /// Encrypts a module's secret file (one its module.toml marks `secret = true`) in place,
    /// to the mesh key and the operators' keys, before it is committed: the catalogue and its
    /// history then hold only ciphertext, and only the host it is sent to opens it. A file
    /// already encrypted is encrypted again to the keys of now, its digest unchanged. While a
    /// rotation is under way it is encrypted to the next mesh key, as the rotation leaves
    /// every secret, so the rotation run again finds it done.
    ///
    /// Exit codes: 0 encrypted; 1 error (nothing changed).
    Encrypt {
        /// The file, in clear (or already encrypted).
        file: std::path::PathBuf,
    },
}

/// `secrets recipients` subcommands.
#[derive(Subcommand)]
pub enum Recipients {
    /// Adds an operator's key (`age1…`) and encrypts every secret at rest to it too.
    Add {
        /// The key.
        key: String,
    },
    /// Removes an operator's key and encrypts every secret at rest again without it (the
    /// history's earlier ciphertexts it could open are not unmade: rotate the secrets).
    Remove {
        /// The key.
        key: String,
    },
}

/// A secret's value from standard input, held zeroized; never from the command line, where
/// `ps` and the shell's history would see it.
///
/// # Errors
/// Standard input cannot be read.
pub fn read_standard_input() -> Result<zeroize::Zeroizing<Vec<u8>>> {
    const LIMIT: usize = mesh_controller::settings::SECRET_LIMIT;
    let mut value = zeroize::Zeroizing::new(Vec::with_capacity(LIMIT));
    std::io::stdin()
        .lock()
        .take(LIMIT as u64 + 1)
        .read_to_end(&mut value)
        .context("reading the secret from standard input")?;
    // Said here without reading the rest; the library refuses a longer secret as well.
    if value.len() > LIMIT {
        anyhow::bail!("a secret is at most 64 KiB; nothing changed");
    }
    Ok(value)
}

/// Runs a `secrets` command.
pub fn exec(command: Command, env: &super::Env) -> Result<ExitCode> {
    match command {
        Command::Recipients(recipients) => {
            let answer = match recipients {
                Recipients::Add { key } => secrets::change_recipients(&env.home, &key, true)?,
                Recipients::Remove { key } => secrets::change_recipients(&env.home, &key, false)?,
            };
            match env.output {
                Output::Json => env.print_json(&answer)?,
                Output::Text => {
                    println!(
                        "{} operator key(s); {} secret value(s) encrypted to them again",
                        answer.recipients.len(),
                        answer.resealed
                    );
                    for key in &answer.recipients {
                        println!("  {key}");
                    }
                }
            }
        }
        Command::Encrypt { file } => {
            let encrypted = mesh_controller::secrets::encrypt_file(&env.home, &file)?;
            match env.output {
                Output::Json => env.print_json(&encrypted)?,
                Output::Text => println!(
                    "{}: {} {}, to the mesh key and {} operator key(s); commit it",
                    encrypted.file,
                    if encrypted.again {
                        "encrypted again"
                    } else {
                        "encrypted"
                    },
                    encrypted.secret,
                    encrypted.keys - 1
                ),
            }
        }
        Command::Rotate => {
            let rotated = env.runtime.block_on(env.mesh.rotate_secrets())?;
            match env.output {
                Output::Json => env.print_json(&rotated)?,
                Output::Text => {
                    println!(
                        "a new mesh secrets key ({}); {} secret value(s) re-encrypted to it",
                        rotated.mesh_key, rotated.resealed
                    );
                    if rotated.declarations > 0 {
                        println!(
                            "  {} declaration(s) kept as sent re-encrypted to it",
                            rotated.declarations
                        );
                    }
                    for repository in &rotated.repositories {
                        let commit = repository.commit.as_deref().map_or_else(
                            || "not a git working tree: commit them".to_owned(),
                            |commit| format!("committed {}", &commit[..commit.len().min(12)]),
                        );
                        println!(
                            "  {}: {} secret file(s) re-encrypted, {commit}",
                            repository.repository,
                            repository.files.len()
                        );
                        for file in &repository.files {
                            println!("    {file}");
                        }
                    }
                    for pending in &rotated.pending {
                        println!("  {}: not done: {}", pending.repository, pending.reason);
                    }
                    if !rotated.pending.is_empty() {
                        println!(
                            "the old mesh key is kept until every repository is done; run \
                             `secrets rotate` again then"
                        );
                    }
                    if let Some(retired) = &rotated.retired {
                        for line in mesh_controller::secrets::said(retired) {
                            println!("{line}");
                        }
                    }
                }
            }
            if !rotated.pending.is_empty() {
                // Some repositories could not be sealed again: a person runs it again.
                return Ok(Exit::Attention.into());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
