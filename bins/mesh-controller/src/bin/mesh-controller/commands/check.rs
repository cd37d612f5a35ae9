//! `check`: every problem of the catalogue and the inventory at once, each registered
//! repository's head as its next merge would build it, and the settings that merge would
//! orphan; saying which catalogues it read.

use crate::Output;
use anyhow::Result;
use mesh_cli_docs::exit::Exit;

use std::process::ExitCode;

/// Validates the catalogue and the inventory, listing every problem at once; validates each
/// registered repository's head (what its next merge would build and deploy) the same way;
/// and names every setting a layer holds that such a merge would orphan (the head no longer
/// accepts the key, or accepts it with another type). It first says what it read: the home's
/// catalogue/modules, overlaid with each module's deployed build (what push and plan compose
/// from), and each repository's head — a repository registered by URL fetched first, as its
/// next merge would be (when the fetch fails, it says it read the commit last fetched, and why).
///
/// Exit codes: 0 nothing found; 3 problems or orphans found (a person mends them); 1 the home
/// or a repository cannot be read.
#[derive(clap::Args)]
pub struct Args {}

/// Lists the problems and the orphans: exit 3 when there is any.
pub fn exec(_args: Args, env: &super::Env) -> Result<ExitCode> {
    let checked = env.checked()?;
    let check = mesh_controller::check(&env.home, &checked)?;
    let sound = check.sound();
    if let Output::Text = env.output {
        println!("read {}", check.running);
        for head in &check.heads {
            println!(
                "read {head}, what its next merge deploys ({})",
                match head.modules.len() {
                    0 => "no module the inventory assigns".to_owned(),
                    _ => head.modules.join(", "),
                }
            );
        }
    }
    match env.output {
        Output::Json => env.print_json(&check)?,
        Output::Text if sound => {
            for waiting in &check.waiting {
                println!("{waiting}");
            }
            println!("the catalogue and inventory are sound");
        }
        Output::Text => {
            for waiting in &check.waiting {
                println!("{waiting}");
            }
            for problem in &check.problems {
                println!("{problem}");
            }
            for head in &check.heads {
                for problem in &head.problems {
                    println!("in {head}: {problem}");
                }
            }
            for coming in &check.orphans {
                print!("{}", coming.render_text(None));
            }
            let orphaned: usize = check.orphans.iter().map(|o| o.orphans.orphans.len()).sum();
            let head_problems: usize = check.heads.iter().map(|h| h.problems.len()).sum();
            let found = check.problems.len() + head_problems;
            match orphaned {
                0 => println!("{found} problem(s)"),
                n => println!("{found} problem(s), {n} orphaned setting(s)"),
            }
        }
    }
    Ok(if sound {
        ExitCode::SUCCESS
    } else {
        // Problems found: a person mends the catalogue or the inventory (an error reading
        // them is 1, from `main`).
        Exit::Attention.into()
    })
}
