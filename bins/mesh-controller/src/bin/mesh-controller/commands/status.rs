//! `status`: each node's last report, the open plans and what needs attention; `--watch`
//! keeps going on a fleet.

use crate::{render, Output};
use anyhow::Result;
use mesh_cli_docs::exit::Exit;
use mesh_controller::status;

use std::process::ExitCode;

/// Each node's last report, the open plans and what each waits on, the modules behind,
/// stopped rollouts, and nodes stuck, mid-change or with a window open.
///
/// "Behind" is only what the open plans have yet to build or roll out. On a fleet
/// (`--bus`) each node's last report is read from the bus's reports stream, which every
/// report reaches (heartbeats too), so what a host did between pushes is shown; a node not
/// heard for three heartbeats is "silent since …". A node whose intent — what it should run
/// now: the deployed builds, its settings, the inventory, the secrets — differs from what it
/// was last sent is pending, named with what differs and what sends it.
///
/// Exit codes, for an alert to key on: 0 settled (every node sent a declaration reports it
/// converged and current, nothing pending); 4 in progress and nothing wrong (a node
/// mid-change within its deadline or yet to report what it was sent, an open plan, a pending
/// node an open plan will send, a maintenance window open within its lapse); 3 needs
/// attention (a resource failed or stuck; a window open past its lapse; drift left as found,
/// or put back within the retention and not acknowledged; a node silent or mid-change past
/// its deadline; a node held for a move; a stopped rollout; a pending node nothing will send;
/// a failure recorded); 1 error reading the home; 64 a usage error. With `--output json`, the
/// verdict and each reason for it (node, kind, since) come first.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// On a fleet, seconds without a report after which a node is called silent (default:
    /// three of a host's default 30 s heartbeats; set it to three of yours).
    #[arg(long, value_name = "SECS", default_value_t = mesh_controller::SILENT_AFTER_SECS)]
    silent_after: u64,
    /// On a fleet, keep going: on a terminal, redraw on every report a host publishes (and
    /// every 5 s, so a node falling silent shows); otherwise print a line for each change
    /// (with `--output json`, one overview a line). Runs until interrupted.
    #[arg(long)]
    watch: bool,
    /// Seconds a drift that was put back is shown (and exits 3) after it was seen; `status ack`
    /// clears it sooner.
    #[arg(long, value_name = "SECS", default_value_t = status::DEFAULT_DRIFT_RETENTION_SECS)]
    drift_retention: u64,
    /// Seconds a node may report mid-change, from the start of its apply, before it is past
    /// its deadline (exit 3 rather than 2).
    #[arg(long, value_name = "SECS", default_value_t = status::DEFAULT_MID_CHANGE_AFTER_SECS)]
    mid_change_after: u64,
}

/// `status` subcommands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Acknowledges a node's drift that was put back, so `status` no longer shows it (nor exits
    /// 3 for it) before its retention ends; drift seen later shows again.
    Ack {
        /// The node.
        node: String,
        /// Only this resource's drift (its id, as `status` names it); default: all of it.
        resource: Option<String>,
    },
}

/// Prints the overview: exit 3 when something needs attention.
pub fn exec(args: Args, env: &super::Env) -> Result<ExitCode> {
    if let Some(Command::Ack { node, resource }) = args.command {
        let acked = status::ack(
            &env.home,
            &node,
            resource.as_deref(),
            mesh_store::clock::now(),
        )?;
        match env.output {
            Output::Json => env.print_json(&acked)?,
            Output::Text => print!("{}", render::acked(&acked)),
        }
        return Ok(ExitCode::SUCCESS);
    }
    let options = status::StatusOptions {
        silent_after_secs: args.silent_after,
        drift_retention_secs: args.drift_retention,
    };
    if args.watch {
        return watch(env, &options);
    }
    // What each node should run, composed again only when its inputs changed; the merges
    // waiting on the daemon's consumer read from the bus.
    let read = env.runtime.block_on(env.mesh.read_status(&options))?;
    let (status, now) = (read.overview, read.now);
    let verdict = status::judge(&status, now, args.mid_change_after);
    match env.output {
        Output::Json => print!("{}", status.json_document(&verdict)?),
        Output::Text => print!("{}", render::status(&status)),
    }
    Ok(ExitCode::from(verdict.health.exit_code()))
}

/// `status --watch`: the overview again on every report heard on the bus.
fn watch(env: &super::Env, options: &status::StatusOptions) -> Result<ExitCode> {
    use std::io::{IsTerminal as _, Write as _};
    let Some(bus) = &env.bus else {
        eprintln!(
            "status --watch hears the reports hosts publish on a fleet's bus: give --bus URL \
             (the embedded default has no bus to hear; run `status` after a push)"
        );
        return Ok(Exit::Refused.into());
    };
    let watch = status::ReportWatch::open(&env.home, bus)?;
    let terminal = std::io::stdout().is_terminal();
    let mut last: Option<status::Overview> = None;
    loop {
        env.runtime
            .block_on(mesh_controller::status::current_for_status(
                &env.home,
                env.mesh.store(),
            ));
        let now = mesh_store::clock::now();
        let overview = status::overview_with(&env.home, now, options)?;
        let mut out = std::io::stdout().lock();
        match env.output {
            Output::Json => writeln!(out, "{}", serde_json::to_string(&overview)?)?,
            Output::Text if terminal => {
                // Home, clear, then the status as `status` prints it.
                write!(out, "\x1b[H\x1b[2J{}", render::status(&overview))?;
            }
            Output::Text => {
                for line in status::changes(last.as_ref(), &overview) {
                    writeln!(out, "{} {line}", mesh_store::clock::rfc3339(now))?;
                }
            }
        }
        out.flush()?;
        drop(out);
        last = Some(overview);
        watch.next(std::time::Duration::from_secs(5))?;
    }
}
