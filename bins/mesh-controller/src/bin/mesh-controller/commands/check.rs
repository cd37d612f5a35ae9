//! `check`: every problem of the catalogue and the inventory at once.

use crate::Output;
use anyhow::Result;
use mesh_controller::push;
use std::process::ExitCode;

/// Validates the catalogue and the inventory, listing every problem at once.
#[derive(clap::Args)]
pub struct Args {}

/// Lists the problems: exit 1 when there is any.
pub fn exec(_args: Args, env: &super::Env) -> Result<ExitCode> {
    let problems = push::problems(&env.home, &env.checked()?)?;
    match env.output {
        Output::Json => env.print_json(&problems)?,
        Output::Text if problems.is_empty() => println!("the catalogue and inventory are sound"),
        Output::Text => {
            for problem in &problems {
                println!("{problem}");
            }
            println!("{} problem(s)", problems.len());
        }
    }
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
