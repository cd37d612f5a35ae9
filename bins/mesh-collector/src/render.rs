//! What a person or a script reads of a run: the text ([`text`]) and the JSON answer
//! ([`answer`]), both from the [`RunOutcome`] mesh-store returns. Nothing here decides.

use mesh_store::collect::CollectReport;
use mesh_store::collector::RunOutcome;
use mesh_store::sweep::{KeptState, ReleasedState, SweepReport};
use serde::Serialize;

/// What is printed with `--output json`.
#[derive(Debug, Serialize)]
pub struct Answer {
    command: &'static str,
    store: String,
    dry_run: bool,
    kept: usize,
    held: usize,
    missing: usize,
    released: usize,
    summary: String,
    sweep: SweepReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    collection: Option<CollectionAnswer>,
    exit_code: u8,
}

#[derive(Debug, Serialize)]
struct CollectionAnswer {
    for_real: bool,
    refused: Option<String>,
    deleted: Vec<String>,
    lost: Vec<String>,
}

/// The JSON answer of a run.
pub fn answer(outcome: &RunOutcome) -> Answer {
    let sweep = outcome.sweep();
    Answer {
        command: match outcome {
            RunOutcome::Swept(_) => "sweep",
            RunOutcome::Collected(_) => "collect",
        },
        store: sweep.store.clone(),
        dry_run: sweep.dry_run,
        kept: sweep.kept_count(),
        held: sweep.held_count(),
        missing: sweep.missing().count(),
        released: sweep.released_count(),
        summary: sweep.summary(),
        sweep: sweep.clone(),
        collection: outcome.collection().map(|c| CollectionAnswer {
            for_real: c.collected_for_real,
            refused: c.refused.clone(),
            deleted: c.garbage.deleted.clone(),
            lost: c.lost.clone(),
        }),
        exit_code: crate::exit_of(outcome.verdict()).code(),
    }
}

/// A run as a person reads it: the sweep, then the collection when there was one.
pub fn text(outcome: &RunOutcome) -> String {
    let mut text = render_sweep(outcome.sweep());
    if let Some(collection) = outcome.collection() {
        text.push_str(&render_collection(collection));
    }
    text
}

fn render_sweep(sweep: &SweepReport) -> String {
    let mut out = String::new();
    let dry = if sweep.dry_run { " (dry run)" } else { "" };
    out.push_str(&format!("store {}{dry}\n", sweep.store));
    out.push_str(&format!("{}\n", sweep.summary()));
    if !sweep.kept.is_empty() {
        out.push_str("\nkept:\n");
        for kept in &sweep.kept {
            let state = match &kept.state {
                KeptState::AlreadyHeld => "held".to_owned(),
                KeptState::HeldNow => "held now".to_owned(),
                KeptState::WouldHold => "unheld, would hold".to_owned(),
                KeptState::Missing => "MISSING: its blob is gone".to_owned(),
                KeptState::Failed { error } => format!("UNKNOWN: {error}"),
            };
            let why: Vec<String> = kept.reasons.iter().map(ToString::to_string).collect();
            out.push_str(&format!(
                "  {}  {state}  ({})\n",
                kept.archive.digest,
                why.join("; ")
            ));
        }
    }
    if !sweep.released.is_empty() {
        out.push_str("\nnot kept:\n");
        for released in &sweep.released {
            let state = match &released.state {
                ReleasedState::Released => "released".to_owned(),
                ReleasedState::AlreadyGone => "already gone".to_owned(),
                ReleasedState::WouldRelease => "would release".to_owned(),
                ReleasedState::Skipped => "kept held: the sweep's view was partial".to_owned(),
                ReleasedState::Failed { error } => format!("NOT RELEASED: {error}"),
            };
            out.push_str(&format!("  {}  {state}\n", released.digest));
        }
    }
    if !sweep.failures.is_empty() {
        out.push_str("\nfailures (nothing was let go):\n");
        for failure in &sweep.failures {
            out.push_str(&format!("  {failure}\n"));
        }
    }
    out
}

fn render_collection(report: &CollectReport) -> String {
    let mut out = String::new();
    let how = match (&report.refused, report.collected_for_real) {
        (Some(why), _) => format!("dry run, refused: {why}"),
        (None, true) => "for real".to_owned(),
        (None, false) => "dry run, as asked".to_owned(),
    };
    out.push_str(&format!("\ncollection {how}\n"));
    let verb = if report.collected_for_real {
        "deleted"
    } else {
        "would delete"
    };
    out.push_str(&format!(
        "{verb} {} blob(s)\n",
        report.garbage.deleted.len()
    ));
    for digest in &report.garbage.deleted {
        out.push_str(&format!("  {digest}\n"));
    }
    if !report.lost.is_empty() {
        out.push_str("\nLOST after collection (kept, blob gone):\n");
        for digest in &report.lost {
            out.push_str(&format!("  {digest}\n"));
        }
    }
    out
}
