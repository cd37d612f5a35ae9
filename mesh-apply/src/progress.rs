//! What an apply says while it runs (the rule “Mid-change is said before anything changes”):
//! [`ApplyProgress`] is told, once per apply and before the apply changes anything, the
//! `mid-change` report to publish. A daemon publishes it (and repeats it on its heartbeat) so that
//! an observer never reads the last converged report while the machine is changing.
//!
//! Also here: the engine's **fail points** (`pause_point`), named steps a test can make an
//! apply wait at, so a slow apply is made deterministic instead of by sleeping. They exist only
//! with the crate's `fail-points` feature, which its tests (and mesh-host's, through its own
//! feature) turn on; without it a fail point is nothing and reads no environment.

use mesh_model::report::Report;
#[cfg(feature = "fail-points")]
use std::path::{Path, PathBuf};
#[cfg(feature = "fail-points")]
use std::time::{Duration, Instant};

/// Told what an apply is doing while it runs.
pub trait ApplyProgress: Sync {
    /// Called once per apply, **before** its first change to the machine or the state
    /// directory, with the report saying so (machine `mid-change`, the declaration being
    /// applied, when it started). An apply that changes nothing never calls it.
    ///
    /// The apply goes on when this returns: an implementation that publishes the report
    /// returns once it is published (or could not be).
    fn changing(&self, report: &Report);

    /// Whether the apply leaves `resource` as it finds it: drift its module's policy says to
    /// report, not correct (the rule “Drift is seen, and reported even when corrected”). Such a
    /// resource is not attempted and is reported `held-still{step: LEFT_AS_FOUND}` (with the rest
    /// of its together group). Default: no.
    fn leave(&self, _resource: &str) -> bool {
        false
    }

    /// Whether a resource that failed as declared is tried now rather than after its backoff:
    /// the controller asked again (a new send of the declaration — a push, `plans retry`), most
    /// likely once its cause was fixed. Its attempts still count. Default: no (the host's own
    /// retries wait out the backoff).
    fn retry_now(&self) -> bool {
        false
    }
}

/// The step a resource left as found by the drift policy is reported held still by.
pub const LEFT_AS_FOUND: &str = "drift = \"report\": left as found";

/// Progress nobody listens to.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl ApplyProgress for NoProgress {
    fn changing(&self, _report: &Report) {}
}

#[cfg(feature = "fail-points")]
/// `FAILPOINTS`'s value (the `fail` crate's) that makes an apply reaching `step` for
/// `resource` write `FILE.reached` and wait until `release` exists (for tests; see
/// [`pause_point`]). The process applying reads it at start (`fail::FailScenario::setup`, as
/// `mesh-host` does), or a caller sets it with `fail::cfg`.
pub fn pause_at(step: &str, resource: &str, release: &Path) -> String {
    format!("{step}:{resource}=return({})", release.display())
}

#[cfg(feature = "fail-points")]
/// The file a fail point writes when it is reached: `FILE.reached` beside the release `FILE`
/// given to [`pause_at`] (a test waits for it, then kills or releases the apply).
pub fn reached_marker(release: &Path) -> PathBuf {
    let mut reached = release.as_os_str().to_owned();
    reached.push(".reached");
    PathBuf::from(reached)
}

#[cfg(feature = "fail-points")]
/// The longest a fail point waits before the apply goes on anyway (it only bounds a test that
/// forgot to release it).
pub const PAUSE_LIMIT: Duration = Duration::from_secs(600);

#[cfg(feature = "fail-points")]
/// A fail point, on the `fail` crate, named `STEP:RESOURCE`: set to `return(FILE)` ([`pause_at`]),
/// it writes `FILE.reached` and waits until `FILE` exists (at most [`PAUSE_LIMIT`]). Otherwise
/// it returns at once.
///
/// The steps for a together group's member (the rule “Resources declared together apply
/// all-or-nothing”):
/// - `commit` — before the member is committed (the group's record is written);
/// - `stopped` — a container being replaced: the old one stopped, still under its name;
/// - `kept` — the old one renamed `<name>.mesh-old`, its replacement not made yet;
/// - `created` — a container created (or its replacement made) and started, before it is judged;
/// - `let-go` — the group is whole (its record gone), before the container it replaced is removed.
///
/// And for a container, lone or in a group:
/// - `restart` — a file in its `restart_on` was committed (its group whole), before the
///   container restarts (the restart it owes is in the state file).
pub fn pause_point(step: &str, resource: &str) {
    fail::eval(&format!("{step}:{resource}"), |release| {
        let Some(release) = release.map(PathBuf::from) else {
            return;
        };
        let _ = std::fs::write(reached_marker(&release), b"");
        let deadline = Instant::now() + PAUSE_LIMIT;
        while !release.exists() && Instant::now() < deadline {
            // Only paces the looks at the release file; the limit bounds a forgotten release.
            std::thread::sleep(Duration::from_millis(10));
        }
    });
}

/// Without the `fail-points` feature (every release build) a fail point is nothing and reads
/// no environment.
#[cfg(not(feature = "fail-points"))]
#[inline(always)]
pub(crate) fn pause_point(_step: &str, _resource: &str) {}

/// The fail point that makes the host's state directory full: set to `return(FILE)`
/// (`FAILPOINTS=mesh-host.state-dir-full=return(FILE)`), every write of a state file fails,
/// as a full disk fails it (`ENOSPC`: "No space left on device"), for as long as `FILE`
/// exists; a test removes `FILE` to free the space, the process running on. It exists only
/// with the `fail-points` feature ([`state_dir_full`]).
pub const STATE_DIR_FULL: &str = "mesh-host.state-dir-full";

#[cfg(feature = "fail-points")]
/// The failure [`STATE_DIR_FULL`] gives a state write while its file exists, else none.
///
/// # Errors
/// The system's `ENOSPC`, as a full disk answers a write.
pub fn state_dir_full() -> std::io::Result<()> {
    let full = fail::eval(STATE_DIR_FULL, |file| {
        file.is_some_and(|file| Path::new(&file).exists())
    });
    match full {
        Some(true) => Err(std::io::Error::from_raw_os_error(
            nix::errno::Errno::ENOSPC as i32,
        )),
        Some(false) | None => Ok(()),
    }
}

/// Without the `fail-points` feature (every release build) the state directory is never made
/// full by a test, and nothing is read from the environment.
///
/// # Errors
/// None.
#[cfg(not(feature = "fail-points"))]
#[inline(always)]
pub fn state_dir_full() -> std::io::Result<()> {
    Ok(())
}
