//! `status`: each node's last report, the open plans and what needs attention; `--watch`
//! keeps going on a fleet.

use crate::{render, Output};
use anyhow::Result;
use mesh_controller::status;
use std::process::ExitCode;

/// Each node's last report, the open plans and what each waits on, the modules behind,
/// stopped rollouts, and nodes stuck, mid-change or with a window open.
///
/// "Behind" is only what the open plans have yet to build or roll out. On a fleet
/// (`--bus`) each node's last report is read from the bus's reports stream, which every
/// report reaches (heartbeats too), so what a host did between pushes is shown; a node not
/// heard for three heartbeats is "silent since …".
///
/// Exit codes: 0 all well; 3 something needs attention (a node stuck, mid-change, silent,
/// with drift or a window open; a node held for a move; a stopped rollout; a failure
/// recorded); 1 error reading the home.
#[derive(clap::Args)]
pub struct Args {
    /// On a fleet, seconds without a report after which a node is called silent (default:
    /// three of a host's default 30 s heartbeats; set it to three of yours).
    #[arg(long, value_name = "SECS", default_value_t = mesh_controller::push::SILENT_AFTER_SECS)]
    silent_after: u64,
    /// On a fleet, keep going: on a terminal, redraw on every report a host publishes (and
    /// every 5 s, so a node falling silent shows); otherwise print a line for each change
    /// (with `--output json`, one overview a line). Runs until interrupted.
    #[arg(long)]
    watch: bool,
}

/// Prints the overview: exit 3 when something needs attention.
pub fn exec(args: Args, env: &super::Env) -> Result<ExitCode> {
    if args.watch {
        return watch(env, args.silent_after);
    }
    let status = status::overview(&env.home, mesh_host::now(), args.silent_after)?;
    match env.output {
        Output::Json => print!("{}", status.json_document()?),
        Output::Text => print!("{}", render::status(&status)),
    }
    Ok(if status.needs_attention() {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

/// `status --watch`: the overview again on every report heard on the bus.
fn watch(env: &super::Env, silent_after: u64) -> Result<ExitCode> {
    use std::io::{IsTerminal as _, Write as _};
    let Some(bus) = &env.bus else {
        eprintln!(
            "status --watch hears the reports hosts publish on a fleet's bus: give --bus URL \
             (the embedded default has no bus to hear; run `status` after a push)"
        );
        return Ok(ExitCode::from(2));
    };
    let watch = status::ReportWatch::open(&env.home, bus)?;
    let terminal = std::io::stdout().is_terminal();
    let mut last: Option<status::Overview> = None;
    loop {
        let now = mesh_host::now();
        let overview = status::overview(&env.home, now, silent_after)?;
        let mut out = std::io::stdout().lock();
        match env.output {
            Output::Json => writeln!(out, "{}", serde_json::to_string(&overview)?)?,
            Output::Text if terminal => {
                // Home, clear, then the status as `status` prints it.
                write!(out, "\x1b[H\x1b[2J{}", render::status(&overview))?;
            }
            Output::Text => {
                for line in status::changes(last.as_ref(), &overview) {
                    writeln!(out, "{now} {line}")?;
                }
            }
        }
        out.flush()?;
        drop(out);
        last = Some(overview);
        watch.next(std::time::Duration::from_secs(5))?;
    }
}
