//! `repo`: registering catalogue repositories and listing them.

use crate::Output;
use anyhow::Result;
use clap::Subcommand;
use mesh_controller::catalogue;

use std::path::PathBuf;
use std::process::ExitCode;

/// `repo` subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Registers a git repository of modules (`modules/<name>/module.toml`).
    ///
    /// A path is read in place. A URL (`https://`, `ssh://`, `file://`), or any location with
    /// `--poll`, is kept as a bare clone of its branch under the home (`repos/NAME.git`),
    /// fetched with real git: by `serve` every `--poll` seconds (a new head is announced and
    /// planned), and whenever a merge names a commit the clone has not got.
    ///
    /// Exit codes: 0 registered; 1 error (not a git repository, no such branch, a repository of
    /// that name already registered, a webhook secret file others may read).
    Add {
        /// The name merges use.
        name: String,
        /// Where the repository is: a path, or a URL to fetch it from.
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
        /// `serve` fetches the repository every SECS seconds and announces a new head of its
        /// branch (no webhook needed, no inbound connection).
        #[arg(long, value_name = "SECS")]
        poll: Option<u64>,
        /// The SSH private key the repository is fetched with (mode 0600).
        #[arg(long, value_name = "FILE", conflicts_with = "token_file")]
        ssh_key_file: Option<PathBuf>,
        /// A file holding the token the repository is fetched with over HTTPS (mode 0600),
        /// sent as HTTP basic authentication's password (user `oauth2`).
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
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
            poll,
            ssh_key_file,
            token_file,
        } => {
            let record = catalogue::add_with(
                &env.home,
                &name,
                &path,
                &catalogue::AddOptions {
                    branch,
                    modules_dir,
                    hook_secret_file,
                    poll_secs: poll,
                    ssh_key_file,
                    token_file,
                },
            )?;
            match env.output {
                Output::Json => env.print_json(&record)?,
                Output::Text => println!(
                    "registered `{}`: {} branch {} (modules in `{}/`){}; its first merge plans every module",
                    record.name,
                    location(&record),
                    record.branch,
                    record.modules_dir,
                    if record.hook_secret_file.is_some() {
                        format!(", taking webhooks at /hooks/{}", record.name)
                    } else {
                        String::new()
                    }
                ),
            }
        }
        Command::List => {
            let repos = env.home.repos().all()?;
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
                            location(&repo),
                            repo.branch,
                            repo.last_planned
                                .as_deref()
                                .map_or("never", catalogue::short_commit)
                        );
                    }
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Where a repository is: its path, or the URL its clone is fetched from (and how often).
fn location(repo: &catalogue::RepoRecord) -> String {
    match &repo.remote {
        None => repo.path.display().to_string(),
        Some(remote) => match remote.poll_secs {
            Some(secs) => format!("{} (polled every {secs} s)", remote.url),
            None => remote.url.clone(),
        },
    }
}
