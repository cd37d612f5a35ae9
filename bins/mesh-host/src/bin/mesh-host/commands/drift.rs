//! `drift list` and `drift show`: the hand edits kept before files were put back.

use crate::cli_docs::exit::Exit;
use crate::{Cli, Output};
use anyhow::Result;
use clap::Subcommand;
use mesh_apply::filebucket;
use std::process::ExitCode;

/// Hand edits the host kept before putting files back as declared (the filebucket, under
/// `<state-dir>/filebucket`, at most 1 MiB a file and 32 MiB in all, oldest given up
/// first): list them, or show how one differs from the file now.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

/// What `drift` does.
#[derive(Subcommand)]
enum Command {
    /// Lists the hand edits kept, newest first: id, path, size, when, resource.
    List,
    /// Shows a kept hand edit: a unified diff from what was kept (`-`) to what the file holds
    /// now (`+`). Exits 2 when no hand edit has that id.
    Show {
        /// The id `drift list` (or the apply's report) gives.
        id: String,
        /// Writes the kept content to standard output as it was, byte for byte (to put it back
        /// by hand, or read content that is not text).
        #[arg(long)]
        raw: bool,
    },
}

/// Lists the kept hand edits, or shows one.
pub fn exec(args: &Args, cli: &Cli) -> Result<ExitCode> {
    let (root, state_dir, output) = (&cli.root, &cli.state_dir, cli.output);
    match &args.command {
        Command::List => {
            let index = filebucket::list(state_dir)?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&index.entries)?),
                Output::Text => print!("{}", mesh_host::kept::render_list(&index)),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Show { id, raw } => {
            let (kept, bytes) = match filebucket::read(state_dir, id) {
                Ok(read) => read,
                Err(error @ filebucket::BucketError::NotFound(_)) => {
                    eprintln!("error: {error}");
                    return Ok(Exit::Refused.into());
                }
                Err(error) => return Err(error.into()),
            };
            if *raw {
                use std::io::Write as _;
                std::io::stdout().write_all(&bytes)?;
                return Ok(ExitCode::SUCCESS);
            }
            let now = mesh_host::kept::read_now(root, &kept.path);
            match output {
                Output::Json => {
                    let content = String::from_utf8(bytes.clone()).ok();
                    let current = match &now {
                        mesh_host::kept::Now::File(current) => {
                            String::from_utf8(current.clone()).ok()
                        }
                        _ => None,
                    };
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&serde_json::json!({
                            "kept": kept,
                            "content": content,
                            "now": current,
                        }))?
                    );
                }
                Output::Text => print!("{}", mesh_host::kept::render_show(&kept, &bytes, &now)),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
