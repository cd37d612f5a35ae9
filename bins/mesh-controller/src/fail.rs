//! Fail points: named steps at which a test makes the controller die, deterministically, as if
//! it were killed there (never "after N ms").
//!
//! Compiled only with the crate's `fail-points` feature, which its tests turn on (a
//! dev-dependency on the crate itself with the feature): a build without it — every release
//! binary — has a [`point`] that does nothing and reads no environment (`lib.rs` gives it).
//!
//! `MESH_FAIL_AT=STEP` aborts the process (SIGABRT: no destructor runs, no record is finished)
//! the first time it reaches `STEP`; `STEP#N` the N-th time. The steps a drive passes are named
//! in [`STEPS`]. Unset, a fail point costs one environment read per step.
//!
//! `MESH_HOLD_AT=STEP` (or `STEP#N`) with `MESH_HOLD_DIR=DIR` pauses there instead: the
//! process writes `DIR/paused` (holding the step's name) and waits until `DIR/release` exists,
//! then goes on — so a test does something to the world (kills a bus server) at a known step
//! of a live rollout, never "after N ms". The thread that reached the step is blocked while it
//! waits; the rest of the process (the plans lease's renewals, the bus client) runs on.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The environment variable naming the step to die at.
pub const FAIL_AT: &str = "MESH_FAIL_AT";

/// The environment variable naming the step to hold at (a pause).
pub const HOLD_AT: &str = "MESH_HOLD_AT";

/// The directory a pause writes its marker in and waits for its release file in.
pub const HOLD_DIR: &str = "MESH_HOLD_DIR";

/// The file a pause writes (its content: the step) once it waits.
pub const PAUSED_FILE: &str = "paused";

/// The file whose existence ends a pause.
pub const RELEASE_FILE: &str = "release";

/// The steps, in the order a rollout passes them (`<module>` and `<node>` filled in):
/// - `plan-saved`: a merge's plan was saved (holding the unfinished modules of the older plans
///   it supersedes), before anything was built;
/// - `superseded:<plan>`: an older plan was marked superseded by it (after the plan was saved);
/// - `built:<module>`: a module's build was recorded in its plan;
/// - `sent:<module>:<node>`: a node was sent the module's declaration and it was recorded sent;
/// - `heard:<module>:<node>`: a node's report of it was heard and the plan saved;
/// - `deployed:<module>`: the module's rollout finished and its build was made current.
pub const STEPS: [&str; 6] = [
    "plan-saved",
    "superseded:<plan>",
    "built:<module>",
    "sent:<module>:<node>",
    "heard:<module>:<node>",
    "deployed:<module>",
];

/// Dies here when `MESH_FAIL_AT` names this step (see the module's documentation).
pub fn point(step: &str) {
    static DIE_PASSED: AtomicUsize = AtomicUsize::new(0);
    static HOLD_PASSED: AtomicUsize = AtomicUsize::new(0);
    if reached(FAIL_AT, step, &DIE_PASSED) {
        eprintln!("fail point: dying at `{step}` ({FAIL_AT})");
        std::process::abort();
    }
    if reached(HOLD_AT, step, &HOLD_PASSED) {
        pause(step);
    }
}

/// Whether `variable` names `step` and this is the time it names (counted in `passed`).
fn reached(variable: &str, step: &str, passed: &AtomicUsize) -> bool {
    let Some(wanted) = std::env::var_os(variable) else {
        return false;
    };
    let wanted = wanted.to_string_lossy();
    let (name, nth) = match wanted.rsplit_once('#') {
        Some((name, nth)) => (name, nth.parse::<usize>().unwrap_or(1)),
        None => (wanted.as_ref(), 1),
    };
    name == step && passed.fetch_add(1, Ordering::SeqCst) + 1 == nth
}

/// Writes the marker and waits for the release file (see the module's documentation). A pause
/// without `MESH_HOLD_DIR`, or whose marker cannot be written, aborts: a test asked for it.
///
/// Reached on a worker of a multi-threaded tokio runtime, the wait first hands the worker's
/// other tasks to another thread (`block_in_place`), so that nothing but the paused step waits.
fn pause(step: &str) {
    let on_worker = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if on_worker {
        tokio::task::block_in_place(|| wait_for_release(step));
    } else {
        wait_for_release(step);
    }
}

fn wait_for_release(step: &str) {
    let Some(dir) = std::env::var_os(HOLD_DIR).map(std::path::PathBuf::from) else {
        eprintln!("fail point: {HOLD_AT} names `{step}` but {HOLD_DIR} is not set");
        std::process::abort();
    };
    if let Err(error) = std::fs::write(dir.join(PAUSED_FILE), step) {
        eprintln!("fail point: cannot write {}: {error}", dir.display());
        std::process::abort();
    }
    eprintln!("fail point: paused at `{step}` ({HOLD_AT}) until {RELEASE_FILE} exists");
    while !dir.join(RELEASE_FILE).exists() {
        // Only paces the looks at the release file.
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
