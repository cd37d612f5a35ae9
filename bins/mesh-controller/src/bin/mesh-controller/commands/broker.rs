//! `broker`: looking after the bus.

use crate::{render, Output};
use anyhow::Result;
use clap::Subcommand;
use mesh_cli_docs::exit::Exit;
use mesh_controller::bus;

use std::process::ExitCode;

/// `broker` subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Re-makes a stuck durable consumer from now, every other setting kept; afterwards
    /// nothing is pending. Restart the process reading it afterwards.
    ///
    /// Exit codes: 0 reset; 2 refused: the stream is a work queue, whose pending messages are
    /// work to do; 1 error (no such stream or consumer).
    ConsumerReset {
        /// The stream, e.g. `MESH_EVENTS`.
        stream: String,
        /// The durable consumer, e.g. `controller`.
        consumer: String,
    },
    /// Lists the mesh's streams and key-value buckets (records, module state) with fewer
    /// copies than it keeps (`--bus-replicas`, the record of it, or 1 on a single server and 3
    /// on a cluster). Changes nothing.
    ///
    /// Exit codes: 0 every stream has its copies; 3 some have fewer (a person raises them with
    /// `broker raise-replicas`); 1 error.
    Replicas,
    /// Raises the named streams (`MESH_DECLARATIONS`, `KV_mesh-records`, …; default: every one
    /// `broker replicas` lists) to the copies the mesh keeps, every other setting kept; never
    /// lowers. The new copies catch up from the existing one while the stream takes writes.
    RaiseReplicas {
        /// The streams (a bucket's is `KV_<bucket>`).
        streams: Vec<String>,
    },
    /// Prints the bus's users (the server's `authorization` block) as the next push would send
    /// them to the node holding the bus: to start its server with the first time. Makes each
    /// node's password if it has none (with `--bus` in the records on the bus, else under
    /// `<home>/bus/passwords/`).
    Users,
    /// Makes the controller's NKey seed (`<home>/bus/nkey.seed`, mode 0600; it stays on this
    /// machine) or shows the one there, and prints its public key: the next push puts the key
    /// in the bus's users instead of the controller's password, and the controller signs with
    /// the seed from then on.
    Keygen,
    /// Prints a node's bus password, for its host's `--password-file` (made if it has none);
    /// refused for a node enrolled with an NKey, which has none.
    Password {
        /// The node.
        node: String,
    },
}

/// Runs the broker subcommand.
pub fn exec(command: Command, env: &super::Env) -> Result<ExitCode> {
    let home = &env.home;
    match command {
        Command::ConsumerReset { stream, consumer } => {
            let reset = env.runtime.block_on(bus::consumer_reset(
                home,
                &env.need_bus()?,
                &stream,
                &consumer,
            ))?;
            match reset {
                Ok(line) => match env.output {
                    Output::Json => env.print_json(&line)?,
                    Output::Text => println!(
                        "consumer `{consumer}` on `{stream}` made again from now: {} pending \
                         before ({} delivered and unacknowledged), {} now",
                        line.pending_before, line.ack_pending_before, line.pending_after
                    ),
                },
                Err(refused) => {
                    eprintln!("error: {refused}; nothing was changed");
                    return Ok(Exit::Refused.into());
                }
            }
        }
        Command::Replicas => {
            let answer = env
                .runtime
                .block_on(bus::replicas(home, &env.need_bus()?))?;
            match env.output {
                Output::Json => env.print_json(&answer)?,
                Output::Text => print!("{}", render::replicas(&answer)),
            }
            if !answer.short.is_empty() {
                return Ok(Exit::Attention.into());
            }
        }
        Command::RaiseReplicas { streams } => {
            let raised =
                env.runtime
                    .block_on(bus::raise_replicas(home, &env.need_bus()?, &streams))?;
            match env.output {
                Output::Json => env.print_json(&raised)?,
                Output::Text => print!("{}", render::raised_replicas(&raised)),
            }
        }
        Command::Users => {
            let checked = env.checked()?;
            let local = env.bus.clone().unwrap_or_else(|| env.local_bus.clone());
            print!("{}", bus::users_text(home, &checked, &local)?);
        }
        Command::Keygen => {
            let made = bus::controller_keygen(home)?;
            match env.output {
                Output::Json => env.print_json(&made)?,
                Output::Text => {
                    println!("{}", made.public_key);
                    eprintln!(
                        "seed {} ({}; mode 0600, it stays on this machine)",
                        made.seed_file.display(),
                        if made.made {
                            "made"
                        } else {
                            "already there, kept"
                        }
                    );
                }
            }
        }
        Command::Password { node } => {
            mesh_controller::require_node(&home.inventory()?, &node)?;
            println!("{}", bus::node_password(home, &node)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}
