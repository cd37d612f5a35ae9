//! `check`: every problem of the catalogue and the inventory at once, and the settings the next
//! merge of each registered repository would orphan.

use crate::Output;
use anyhow::Result;
use mesh_controller::{newest, orphans, push};
use std::process::ExitCode;

/// Validates the catalogue and the inventory, listing every problem at once, and names every
/// setting a layer holds that the next merge of a registered repository would orphan (its head
/// no longer accepts the key, or accepts it with another type).
#[derive(clap::Args)]
pub struct Args {}

/// What `check --output json` prints.
#[derive(serde::Serialize)]
struct Checked<'a> {
    problems: &'a [mesh_model::Diagnostic],
    orphans: &'a [orphans::ComingOrphans],
    waiting: &'a [newest::Waiting],
}

/// Lists the problems and the orphans: exit 1 when there is any.
pub fn exec(_args: Args, env: &super::Env) -> Result<ExitCode> {
    let checked = env.checked()?;
    let problems = push::problems(&env.home, &checked)?;
    let orphans = orphans::at_heads(&env.home, &checked)?;
    let waiting = newest::waiting(&env.home, &checked.0, &env.home.inventory()?)?;
    match env.output {
        Output::Json => env.print_json(&Checked {
            problems: &problems,
            orphans: &orphans,
            waiting: &waiting,
        })?,
        Output::Text if problems.is_empty() && orphans.is_empty() => {
            for waiting in &waiting {
                println!("{waiting}");
            }
            println!("the catalogue and inventory are sound");
        }
        Output::Text => {
            for waiting in &waiting {
                println!("{waiting}");
            }
            for problem in &problems {
                println!("{problem}");
            }
            for coming in &orphans {
                print!("{}", coming.render_text(None));
            }
            let orphaned: usize = orphans.iter().map(|o| o.orphans.orphans.len()).sum();
            match orphaned {
                0 => println!("{} problem(s)", problems.len()),
                n => println!("{} problem(s), {n} orphaned setting(s)", problems.len()),
            }
        }
    }
    Ok(if problems.is_empty() && orphans.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
