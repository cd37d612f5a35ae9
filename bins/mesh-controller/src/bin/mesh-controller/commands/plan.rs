//! `plan`: the declaration a node would be sent now, or what would change.

use crate::{render, Output};
use anyhow::Result;
use mesh_controller::catalogue;
use mesh_controller::settings;

use std::process::ExitCode;

/// Prints the declaration a node would be sent now, or with `--diff` what would change.
///
/// It composes from what the nodes run: the home's catalogue/modules overlaid with each
/// module's deployed build, and says so on standard error ("read …"); `--diff --output json`
/// names it under `read`.
#[derive(clap::Args)]
pub struct Args {
    /// The node (with `--all`, none).
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    node: Option<String>,
    /// With `--diff`: every node whose intent (what it should run now) differs from what it
    /// was last sent, resource by resource; a node with nothing to change is left out.
    #[arg(long, requires = "diff")]
    all: bool,
    /// Show what differs from what the node was last sent: resources added, changed and
    /// removed, with old and new values; a container's fields that make it recreate are
    /// marked. An unchanged node prints nothing. The settings of the node's layers that an open
    /// plan's version of a module would orphan are named after it.
    #[arg(long)]
    diff: bool,
    /// With `--diff`: exit 2 when there is a difference, 0 when there is none.
    #[arg(long, requires = "diff")]
    detailed_exitcode: bool,
}

/// What `plan NODE --diff --output json` prints: the diff, and what open plans would orphan.
#[derive(serde::Serialize)]
struct Diffed<'a> {
    /// The catalogue composed from.
    read: &'a catalogue::Running,
    #[serde(flatten)]
    diff: &'a mesh_plan::DeclarationDiff,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    orphans: &'a [settings::ComingOrphans],
}

/// What `plan --all --diff --output json` prints: each node's diff.
#[derive(serde::Serialize)]
struct AllDiffed<'a> {
    /// The catalogue composed from.
    read: &'a catalogue::Running,
    /// Every node with something to change, and what.
    nodes: &'a [mesh_controller::NodeDiff],
}

/// Prints the declaration, or the diff (exit 2 with `--detailed-exitcode` when it is not
/// empty).
pub fn exec(args: Args, env: &super::Env) -> Result<ExitCode> {
    let checked = env.checked()?;
    // Said apart from standard output, which holds only the declaration or the diff (an
    // unchanged node's diff is empty).
    let running = catalogue::read(&env.home)?;
    eprintln!("read {running}");
    let Some(node) = args.node.as_deref() else {
        let diffs =
            env.runtime
                .block_on(mesh_controller::diff_all(&env.home, env.store(), &checked))?;
        match env.output {
            Output::Json => env.print_json(&AllDiffed {
                read: &running,
                nodes: &diffs,
            })?,
            Output::Text => {
                // Each diff names its node on its first line.
                for node in &diffs {
                    print!("{}", node.diff.render_text());
                }
            }
        }
        return Ok(if args.detailed_exitcode && !diffs.is_empty() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        });
    };
    if args.diff {
        let diff = mesh_controller::diff(&env.home, &checked, node)?;
        let orphans = settings::in_open_plans(&env.home, &checked, node)?;
        match env.output {
            Output::Json => env.print_json(&Diffed {
                read: &running,
                diff: &diff,
                orphans: &orphans,
            })?,
            Output::Text => {
                print!("{}", diff.render_text());
                for coming in &orphans {
                    print!("{}", coming.render_text(Some(node)));
                }
            }
        }
        return Ok(if args.detailed_exitcode && !diff.is_empty() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        });
    }
    let declaration = mesh_controller::compose_node(&env.home, &checked, node)?;
    match env.output {
        // A secret shows as its keyed digest, never its ciphertext.
        Output::Json => env.print_json(&mesh_model::secret::shown_wire(&serde_json::to_value(
            &declaration,
        )?))?,
        Output::Text => print!("{}", render::declaration(&declaration)),
    }
    Ok(ExitCode::SUCCESS)
}
