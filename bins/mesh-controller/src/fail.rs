//! Fail points: named steps at which a test makes the controller die, deterministically, as if
//! it were killed there (never "after N ms"), on the `fail` crate.
//!
//! Compiled only with the crate's `fail-points` feature, which its tests turn on (a
//! dev-dependency on the crate itself with the feature): a build without it — every release
//! binary — has a [`point`] that does nothing and reads no environment (`lib.rs` gives it), and
//! takes no `fail` crate.
//!
//! The binary reads `FAILPOINTS` once at start (`fail::FailScenario::setup`); a library caller
//! sets a point with `fail::cfg`. A step's action is `return` — abort the process there
//! (SIGABRT: no destructor runs, no record is finished) — or `return(hold)`, a pause: the
//! process writes `$MESH_HOLD_DIR/paused` (holding the step's name) and waits until
//! `$MESH_HOLD_DIR/release` exists, then goes on, so a test does something to the world (kills
//! a bus server) at a known step of a live rollout. The `fail` crate's counts choose the N-th
//! time a step is passed: `sent:web:a=2*off->return` dies the third time ([`die_at`],
//! [`hold_at`] write them). The thread that reached the step is blocked while it waits; the
//! rest of the process (the plans lease's renewals, the bus client) runs on.

/// The environment variable the binary reads its fail points from (the `fail` crate's).
pub const FAILPOINTS: &str = "FAILPOINTS";

/// The `return` argument that makes a step a pause instead of a death.
pub(crate) const HOLD: &str = "hold";

/// The directory a pause writes its marker in and waits for its release file in.
pub const HOLD_DIR: &str = "MESH_HOLD_DIR";

/// The file a pause writes (its content: the step) once it waits.
pub const PAUSED_FILE: &str = "paused";

/// The file whose existence ends a pause.
pub const RELEASE_FILE: &str = "release";

/// `FAILPOINTS`'s value that makes the controller die at `step`, the `nth` time it is passed
/// (from 1).
pub fn die_at(step: &str, nth: usize) -> String {
    format!("{step}={}return", passed_over(nth))
}

/// `FAILPOINTS`'s value that makes the controller pause at `step`, the `nth` time it is passed
/// (from 1), until the release file exists in `MESH_HOLD_DIR`.
pub fn hold_at(step: &str, nth: usize) -> String {
    format!("{step}={}return({HOLD})", passed_over(nth))
}

fn passed_over(nth: usize) -> String {
    match nth.saturating_sub(1) {
        0 => String::new(),
        n => format!("{n}*off->"),
    }
}

/// The steps, in the order a rollout passes them (`<module>` and `<node>` filled in):
/// - `plan-saved`: a merge's plan was saved (holding the unfinished modules of the older plans
///   it supersedes), before anything was built;
/// - `superseded:<plan>`: an older plan was marked superseded by it (after the plan was saved);
/// - `built:<module>`: a module's build was recorded in its plan;
/// - `sending:<node>`: a node's declaration was written as about to be sent, not yet published
///   (a push's too);
/// - `published:<node>`: the bus took it, and it is not yet recorded sent (a push's too);
/// - `sent:<module>:<node>`: a node was sent the module's declaration and it was recorded sent;
/// - `heard:<module>:<node>`: a node's report of it was heard and the plan saved;
/// - `deployed:<module>`: the module's rollout finished and its build was made current.
///
/// Dies, or pauses, here when a fail point names this step (see the module's documentation).
pub(crate) fn point(step: &str) {
    fail::eval(step, |argument| {
        if argument.as_deref() == Some(HOLD) {
            pause(step);
        } else {
            eprintln!("fail point: dying at `{step}`");
            std::process::abort();
        }
    });
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
        eprintln!("fail point: `{step}` holds but {HOLD_DIR} is not set");
        std::process::abort();
    };
    if let Err(error) = std::fs::write(dir.join(PAUSED_FILE), step) {
        eprintln!("fail point: cannot write {}: {error}", dir.display());
        std::process::abort();
    }
    eprintln!("fail point: paused at `{step}` until {RELEASE_FILE} exists");
    while !dir.join(RELEASE_FILE).exists() {
        // Only paces the looks at the release file.
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
