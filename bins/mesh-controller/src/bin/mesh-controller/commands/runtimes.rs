//! `runtimes`: who is there on the bus, against the inventory.

use crate::{render, Output};
use anyhow::Result;
use mesh_controller::bus;

use std::process::ExitCode;

/// Asks the bus who is there (needs `--bus`).
///
/// Lists each runtime with its answer time, size and modules, the runtimes that said they
/// are there and not what they serve, and the nodes no runtime answered for. Waits at least
/// 750 ms, and up to 5 s for every runtime that said it is there.
///
/// Against the inventory: a module assigned to a heard node that its host does not serve is
/// "missing on <node>"; a module a host serves that is assigned only to other nodes is
/// "running elsewhere". While a node's runtime is not heard, nothing is said of its modules
/// but that they are not known.
///
/// Exit codes: 0 every node heard, each serving what the inventory assigns it; 2 a module
/// missing or running elsewhere (whether or not some runtime was also not heard); 3 some
/// runtime or node not heard, and nothing missing or elsewhere among those heard; 1 error.
#[derive(clap::Args)]
pub struct Args {}

/// Asks and prints: the exit code says what is missing or not heard.
pub fn exec(_args: Args, env: &super::Env) -> Result<ExitCode> {
    env.home.require()?;
    let found = env
        .runtime
        .block_on(bus::runtimes(&env.home, &env.need_bus()?))?;
    match env.output {
        Output::Json => env.print_json(&found)?,
        Output::Text => print!("{}", render::runtimes(&found)),
    }
    Ok(ExitCode::from(found.exit_code()))
}
