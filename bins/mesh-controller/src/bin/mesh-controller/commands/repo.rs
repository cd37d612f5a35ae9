//! `repo`: registering catalogue repositories and listing them.

use crate::Output;
use anyhow::Result;
use clap::Subcommand;
use mesh_controller::{builds, repos};
use std::path::PathBuf;
use std::process::ExitCode;

/// `repo` subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Registers a git repository of modules (`modules/<name>/module.toml`).
    ///
    /// Exit codes: 0 registered; 1 error (not a git repository, no such branch, a repository of
    /// that name already registered, a webhook secret file others may read).
    Add {
        /// The name merges use.
        name: String,
        /// Where the repository is.
        path: PathBuf,
        /// The branch merges are heard on (default: the repository's current branch).
        #[arg(long)]
        branch: Option<String>,
        /// The directory holding the module directories, relative to the repository's root.
        #[arg(long, default_value = "modules")]
        modules_dir: String,
        /// The file holding the secret its webhooks (`POST /hooks/NAME` on `serve --http` or
        /// `--hooks`) are signed with, as set in the forge (mode 0600: refused when others may
        /// read it). It is read when a webhook comes, never copied into the records or logged.
        #[arg(long, value_name = "FILE")]
        hook_secret_file: Option<PathBuf>,
    },
    /// Lists the registered repositories and their last planned commits.
    List,
}

/// Registers or lists.
pub fn exec(command: Command, env: &super::Env) -> Result<ExitCode> {
    match command {
        Command::Add {
            name,
            path,
            branch,
            modules_dir,
            hook_secret_file,
        } => {
            let record = repos::add_with(
                &env.home,
                &name,
                &path,
                &repos::AddOptions {
                    branch,
                    modules_dir,
                    hook_secret_file,
                },
            )?;
            match env.output {
                Output::Json => env.print_json(&record)?,
                Output::Text => println!(
                    "registered `{}`: {} branch {} (modules in `{}/`); its first merge plans every module",
                    record.name,
                    record.path.display(),
                    record.branch,
                    record.modules_dir
                ),
            }
        }
        Command::List => {
            let repos = env.home.repos()?;
            match env.output {
                Output::Json => env.print_json(&repos)?,
                Output::Text if repos.is_empty() => {
                    println!("no repositories; `repo add NAME PATH` registers one")
                }
                Output::Text => {
                    for repo in repos {
                        println!(
                            "{}: {} branch {}, last planned {}",
                            repo.name,
                            repo.path.display(),
                            repo.branch,
                            repo.last_planned
                                .as_deref()
                                .map_or("never", builds::short_commit)
                        );
                    }
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
