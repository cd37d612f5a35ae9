//! `node`: the fleet's nodes and how they prove themselves to the bus.

use crate::{render, Output};
use anyhow::Result;
use clap::Subcommand;
use std::process::ExitCode;

/// `node` subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Enrolls a node's NKey: PUBLIC-KEY is what `mesh-host keygen` printed on that node (its
    /// seed never leaves it). The key is recorded, the node's bus password dropped from the
    /// records, and the next push sends the bus users naming the node by its key (no secret);
    /// from then on its host signs with its seed (`mesh-host serve` without
    /// `--password-file`). Enrolling a node again replaces its key, and says so.
    ///
    /// Exit codes: 0 enrolled; 1 error (not a node of the mesh, not an NKey user public key,
    /// a seed given by mistake: nothing was changed).
    Enroll {
        /// The node.
        node: String,
        /// Its NKey user public key (`U…`, 56 characters).
        public_key: String,
        /// Its age public key (`age1…`, what `mesh-host keygen` printed beside the NKey): the
        /// secrets its declarations use are sealed to it alone at each send. A node without
        /// one is refused a declaration that uses a secret.
        #[arg(long, value_name = "KEY")]
        age_key: Option<String>,
    },
}

/// Enrolls.
pub fn exec(command: Command, env: &super::Env) -> Result<ExitCode> {
    match command {
        Command::Enroll {
            node,
            public_key,
            age_key,
        } => {
            env.home.require()?;
            let enrolled = match &age_key {
                Some(key) => {
                    mesh_controller::bus::enroll_with_age_key(&env.home, &node, &public_key, key)?
                }
                None => mesh_controller::bus::enroll(&env.home, &node, &public_key)?,
            };
            match env.output {
                Output::Json => env.print_json(&enrolled)?,
                Output::Text => {
                    print!("{}", render::enrolled(&enrolled));
                    if let Some(age) = &enrolled.age {
                        let (key, replaced) = (&age.age_key, &age.age_key_replaced);
                        println!(
                            "`{node}`'s age key {key} recorded{}: its secrets are sealed to it \
                             alone at its next send",
                            if replaced.is_some() {
                                ", replacing another"
                            } else {
                                ""
                            }
                        );
                    }
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
