//! Fail points: named steps at which a test makes the controller die, deterministically, as if
//! it were killed there (never "after N ms").
//!
//! `MESH_FAIL_AT=STEP` aborts the process (SIGABRT: no destructor runs, no record is finished)
//! the first time it reaches `STEP`; `STEP#N` the N-th time. The steps a drive passes are named
//! in [`STEPS`]. Unset, a fail point costs one environment read per step.

/// The environment variable naming the step to die at.
pub const FAIL_AT: &str = "MESH_FAIL_AT";

/// The steps, in the order a rollout passes them (`<module>` and `<node>` filled in):
/// - `plan-saved`: a merge's plan was saved, before anything was built;
/// - `built:<module>`: a module's build was recorded in its plan;
/// - `sent:<module>:<node>`: a node was sent the module's declaration and it was recorded sent;
/// - `heard:<module>:<node>`: a node's report of it was heard and the plan saved;
/// - `deployed:<module>`: the module's rollout finished and its build was made current.
pub const STEPS: [&str; 5] = [
    "plan-saved",
    "built:<module>",
    "sent:<module>:<node>",
    "heard:<module>:<node>",
    "deployed:<module>",
];

/// Dies here when `MESH_FAIL_AT` names this step (see the module's documentation).
pub fn point(step: &str) {
    let Some(wanted) = std::env::var_os(FAIL_AT) else {
        return;
    };
    let wanted = wanted.to_string_lossy();
    let (name, nth) = match wanted.rsplit_once('#') {
        Some((name, nth)) => (name, nth.parse::<usize>().unwrap_or(1)),
        None => (wanted.as_ref(), 1),
    };
    if name != step {
        return;
    }
    static PASSED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let passed = PASSED.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    if passed == nth {
        eprintln!("fail point: dying at `{step}` ({FAIL_AT})");
        std::process::abort();
    }
}
