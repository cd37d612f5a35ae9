//! `push`: compose, send and apply declarations; or roll out what the open plans built.

use crate::{render, Output};
use anyhow::Result;
use mesh_cli_docs::exit::Exit;
use mesh_controller::catalogue;
use mesh_controller::status::BehindPushed;

use std::process::ExitCode;

/// Composes, sends and applies declarations, then prints what each node reported.
///
/// Name the nodes, or say `--all`: a push with no node is refused. With `--bus`, it sends to
/// the fleet's hosts (`mesh-host serve`) and waits for their reports, grants first: when
/// the bus's users changed, the node holding the bus is sent them first, and a grant that
/// fails fails the send (exit 1, nothing else sent). `--behind` instead rolls
/// out, one machine first, what the open plans built and have not rolled out, then sends the
/// nodes a finished rollout passed over because they were not running, those running now.
///
/// It composes from what the nodes run — the home's catalogue/modules overlaid with each
/// module's deployed build — and says so on standard error ("read …"); `--behind --output
/// json` names it under `read`.
///
/// A node that runs a newer build of a module than the push would send it (a stopped rollout's)
/// is held, naming both builds, unless `--downgrade MODULE` allows it, as a node whose
/// container's data would move is held unless `--move MODULE` allows it.
///
/// Exit codes: 0 every node converged (`--behind`: the plans went as far as their builds,
/// and the nodes behind converged); 1 error; 2 refused or held; 3 some node did not converge
/// (`--behind`: or a plan stopped).
#[derive(clap::Args)]
pub struct Args {
    /// The nodes to send to.
    nodes: Vec<String>,
    /// Send to every node.
    #[arg(long, conflicts_with = "nodes")]
    all: bool,
    /// Send a module whose running container would get another host directory at a mount
    /// (its data moving); without it such a node's push is held. Repeatable.
    #[arg(long = "move", value_name = "MODULE")]
    moves: Vec<String>,
    /// Send a module to nodes that run a newer build of it than the push sends (a stopped
    /// rollout's, left on the nodes it reached): without it such a node's push is held,
    /// naming both builds — a push would otherwise take it back without a word. Repeatable.
    #[arg(long = "downgrade", value_name = "MODULE")]
    downgrades: Vec<String>,
    /// Seconds to wait for each node's report.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Instead of nodes: roll out the modules the open plans built and have not rolled
    /// out (the same list `status` calls behind), one machine first, then send the nodes
    /// behind that run now (passed over by a finished rollout while not running). With
    /// `--move MODULE`, that module's nodes held for a move are sent.
    #[arg(long, conflicts_with_all = ["nodes", "all"])]
    behind: bool,
}

/// Pushes, or drives the open plans' rollouts with `--behind`.
pub fn exec(args: Args, env: &super::Env) -> Result<ExitCode> {
    let drives = env.drives();
    let moves = super::Env::moves(&args.moves);
    if args.behind {
        let plans = env
            .runtime
            .block_on(drives.drive_open(&mesh_controller::DriveOptions {
                mode: mesh_controller::DriveMode::RolloutOnly,
                moves: moves.clone(),
                ..Default::default()
            }))?;
        // Then the nodes a finished rollout passed over, not running then: those running now
        // are sent what the mesh runs.
        let behind = mesh_controller::status::to_send(&env.home)?;
        if behind.is_empty() && matches!(env.output, Output::Text) {
            return super::print_plans_driven(env.output, &plans);
        }
        let results = if behind.running.is_empty() {
            Vec::new()
        } else {
            eprintln!("read {}", catalogue::read(&env.home)?);
            env.runtime.block_on(drives.push(
                &env.checked()?,
                &behind.running,
                &mesh_controller::PushOptions {
                    moves,
                    downgrades: super::Env::moves(&args.downgrades),
                    timeout: std::time::Duration::from_secs(args.timeout),
                },
            ))?
        };
        // Decided first, so that the JSON document takes what was done rather than a copy.
        let code = if mesh_controller::plans::any_stopped(&plans) {
            Exit::Attention
        } else {
            exit_of(mesh_controller::verdict(&results))
        };
        match env.output {
            Output::Json => env.print_json(&BehindPushed {
                read: catalogue::read(&env.home)?,
                plans,
                nodes: results,
                not_running: behind.not_running,
            })?,
            Output::Text => {
                for plan in &plans {
                    print!("{}", render::plan_summary(plan));
                }
                print!("{}", render::push(&results));
                for behind in &behind.not_running {
                    println!(
                        "{}: still not running: behind on `{}` since {} (the inventory says \
                         `running = false`)",
                        behind.node, behind.module, behind.plan
                    );
                }
            }
        }
        return Ok(code.into());
    }
    let nodes = match mesh_controller::targets(&env.home.inventory()?, args.nodes, args.all) {
        Ok(nodes) => nodes,
        Err(mesh_controller::NoNodeNamed) => {
            eprintln!(
                "error: push names no node; name the nodes (`push home laptop`) or say `--all`"
            );
            return Ok(Exit::Refused.into());
        }
    };
    let checked = env.checked()?;
    // Said apart from standard output, which holds the nodes' reports.
    eprintln!("read {}", catalogue::read(&env.home)?);
    let results = env.runtime.block_on(drives.push(
        &checked,
        &nodes,
        &mesh_controller::PushOptions {
            moves,
            downgrades: super::Env::moves(&args.downgrades),
            timeout: std::time::Duration::from_secs(args.timeout),
        },
    ))?;
    match env.output {
        Output::Json => env.print_json(&results)?,
        Output::Text => print!("{}", render::push(&results)),
    }
    Ok(exit_of(mesh_controller::verdict(&results)).into())
}

/// What a push comes to, as its exit code: the one place it is decided.
fn exit_of(verdict: mesh_controller::Verdict) -> Exit {
    match verdict {
        mesh_controller::Verdict::Converged => Exit::Done,
        mesh_controller::Verdict::Held => Exit::Refused,
        mesh_controller::Verdict::NotConverged => Exit::Attention,
    }
}
