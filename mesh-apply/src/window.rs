//! Maintenance windows (the rule “A maintenance window holds containers still”): a step — a backup,
//! a migration — run with containers held still.
//!
//! Start with [`open`] and [`OpenWindow::release`] (what `mesh-host window run` does), then
//! [`open_windows`] (what every apply reads).
//!
//! ```text
//! <state-dir>/windows/<pid>-<process-start>.json   WindowFile, one per open window
//! ```
//!
//! The state directory is the one place every applier on the machine reads (the daemon, a
//! hand-run `mesh-host apply`), so a window recorded there is seen by all of them. An apply
//! during a window leaves the containers it holds alone and reports them `held-still{step}`;
//! the first apply after it converges them (starts them).
//!
//! # Invariants
//! - A window is written atomically before any container is stopped, and removed only after
//!   they were started again: an apply never sees a held container stopped without its window.
//! - A window is **open** only while its process lives — the pid **and** its start time (from
//!   `/proc/<pid>/stat`), so a reused pid does not keep it open — and for at most
//!   [`LAPSE_SECS`] after it opened. Otherwise it is treated as closed, whatever is on disk.
//! - Time is an argument (`now`, seconds since the epoch); nothing here reads the clock.

use crate::containers::ContainerRuntime;
use crate::fsops;
use mesh_model::report::WindowSummary;
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};

/// The version of [`WindowFile`] this build writes and reads.
pub const WINDOW_FORMAT: u32 = 1;

/// A window lapses this many seconds after it opened (six hours), even if its process lives.
pub const LAPSE_SECS: u64 = 6 * 60 * 60;

const WINDOWS_DIR: &str = "windows";

/// One open window on disk (`windows/<pid>-<process-start>.json`, version [`WINDOW_FORMAT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct WindowFile {
    /// The format version.
    pub format: u32,
    /// The step's name.
    pub step: String,
    /// The containers it holds still (their names on the machine).
    pub containers: Vec<String>,
    /// The process that holds the window open.
    pub pid: u32,
    /// That process's start time (clock ticks after boot, `/proc/<pid>/stat` field 22).
    pub process_start: u64,
    /// When it opened (seconds since the epoch).
    pub opened_at: u64,
}

/// A process, told apart from a later one given the same pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessIdentity {
    /// Its pid.
    pub pid: u32,
    /// Its start time (clock ticks after boot, `/proc/<pid>/stat` field 22).
    pub start_time: u64,
}

impl ProcessIdentity {
    /// This process.
    ///
    /// # Errors
    /// When `/proc/self/stat` cannot be read.
    pub fn current() -> io::Result<Self> {
        let pid = std::process::id();
        match Self::of(pid)? {
            Some(identity) => Ok(identity),
            None => Err(io::Error::other("this process has no /proc entry")),
        }
    }

    /// The live process with `pid`, if there is one (a zombie is not live).
    ///
    /// # Errors
    /// When `/proc/<pid>/stat` exists but cannot be read or parsed.
    pub fn of(pid: u32) -> io::Result<Option<Self>> {
        let text = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        // `pid (comm) state ... starttime ...`: comm may hold spaces and parentheses.
        let after_comm = text
            .rfind(')')
            .map(|i| &text[i + 1..])
            .ok_or_else(|| io::Error::other(format!("/proc/{pid}/stat has no `(comm)`")))?;
        let fields: Vec<&str> = after_comm.split_whitespace().collect();
        if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
            return Ok(None);
        }
        // Field 3 (state) is index 0, so field 22 (starttime) is index 19.
        let start_time = fields
            .get(19)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| io::Error::other(format!("/proc/{pid}/stat has no start time")))?;
        Ok(Some(ProcessIdentity { pid, start_time }))
    }
}

/// Whether a recorded window holds, and if not, why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowState {
    /// Its process lives and it is younger than [`LAPSE_SECS`].
    Open,
    /// It opened [`LAPSE_SECS`] or more ago.
    Lapsed,
    /// Its process is gone (or the pid now belongs to another process).
    ProcessGone,
}

/// A window found on disk, judged at some `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedWindow {
    /// What the file says.
    pub window: WindowFile,
    /// Where it is.
    pub path: PathBuf,
    /// Whether it holds.
    pub state: WindowState,
}

/// Why a window could not be opened, read or released.
#[derive(Debug, thiserror::Error)]
pub enum WindowError {
    /// A window file or the windows directory could not be read or written.
    #[error("cannot use the window record at {}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A window file holds something this build does not read.
    #[error("the window record {} is unreadable: {reason}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The window asked for makes no sense.
    #[error("{reason}")]
    Invalid {
        /// Why.
        reason: String,
    },
    /// A container could not be held still; the window was not opened (those already stopped
    /// were started again, and the record removed).
    #[error("cannot hold `{container}` still: {reason}")]
    Hold {
        /// The container.
        container: String,
        /// Why.
        reason: String,
    },
    /// Some held containers could not be started again (the window is released anyway; the next
    /// apply converges them).
    #[error("the window for `{step}` is released, but {}", problems.join("; "))]
    Restart {
        /// The step.
        step: String,
        /// One sentence per container.
        problems: Vec<String>,
    },
}

/// The state of a recorded window at `now`.
///
/// # Errors
/// When `/proc` cannot be read for its pid.
pub fn judge(window: &WindowFile, now: u64) -> io::Result<WindowState> {
    if now.saturating_sub(window.opened_at) >= LAPSE_SECS {
        return Ok(WindowState::Lapsed);
    }
    Ok(match ProcessIdentity::of(window.pid)? {
        Some(p) if p.start_time == window.process_start => WindowState::Open,
        Some(_) | None => WindowState::ProcessGone,
    })
}

/// The finding an apply reports for a window that ended without being released: its holder
/// is gone, or it lapsed; its containers are converged by that apply.
pub fn ended_abnormally(closed: &RecordedWindow) -> String {
    let why = match closed.state {
        WindowState::Lapsed => format!(
            "it lapsed {} h after it opened at {}",
            LAPSE_SECS / 3600,
            closed.window.opened_at
        ),
        WindowState::ProcessGone => format!(
            "its process (pid {}) is gone without releasing it",
            closed.window.pid
        ),
        WindowState::Open => "it is still open".to_owned(),
    };
    format!(
        "the maintenance window for `{}` ended abnormally: {why}; the containers it held ({}) \
         are converged",
        closed.window.step,
        closed.window.containers.join(", ")
    )
}

/// Every window recorded under `state_dir`, judged at `now`, in the order they opened.
///
/// # Errors
/// [`WindowError::Io`] when the directory or a file cannot be read, [`WindowError::Format`] for
/// a file of another format: an apply must not guess whether such a window holds containers.
pub fn list(state_dir: &Path, now: u64) -> Result<Vec<RecordedWindow>, WindowError> {
    let dir = state_dir.join(WINDOWS_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(WindowError::Io { path: dir, source }),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| WindowError::Io {
            path: dir.clone(),
            source,
        })?;
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue; // a temp file being written
        }
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            // Released between the listing and the read.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(source) => return Err(WindowError::Io { path, source }),
        };
        let window = parse(&path, &bytes)?;
        let state = judge(&window, now).map_err(|source| WindowError::Io {
            path: PathBuf::from(format!("/proc/{}/stat", window.pid)),
            source,
        })?;
        found.push(RecordedWindow {
            window,
            path,
            state,
        });
    }
    found.sort_by(|a, b| (a.window.opened_at, &a.path).cmp(&(b.window.opened_at, &b.path)));
    Ok(found)
}

fn parse(path: &Path, bytes: &[u8]) -> Result<WindowFile, WindowError> {
    #[derive(Deserialize)]
    struct Version {
        format: u32,
    }
    let format_error = |reason: String| WindowError::Format {
        path: path.to_path_buf(),
        reason,
    };
    let version: Version =
        serde_json::from_slice(bytes).map_err(|e| format_error(e.to_string()))?;
    if version.format != WINDOW_FORMAT {
        return Err(format_error(format!(
            "format {}, this build reads format {WINDOW_FORMAT}",
            version.format
        )));
    }
    serde_json::from_slice(bytes).map_err(|e| format_error(e.to_string()))
}

/// The windows that hold at `now` (see [`list`]).
///
/// # Errors
/// As [`list`].
pub fn open_windows(state_dir: &Path, now: u64) -> Result<Vec<WindowFile>, WindowError> {
    Ok(list(state_dir, now)?
        .into_iter()
        .filter(|w| w.state == WindowState::Open)
        .map(|w| w.window)
        .collect())
}

/// Removes the records of windows that no longer hold at `now` (lapsed, or their process gone).
/// Best effort: a record left behind is judged closed again by the next reader. Returns the
/// windows removed.
///
/// # Errors
/// As [`list`].
pub fn prune_closed(state_dir: &Path, now: u64) -> Result<Vec<RecordedWindow>, WindowError> {
    let closed: Vec<RecordedWindow> = list(state_dir, now)?
        .into_iter()
        .filter(|w| w.state != WindowState::Open)
        .collect();
    for window in &closed {
        let _ = std::fs::remove_file(&window.path);
    }
    Ok(closed)
}

/// What a report says of an open window.
pub fn summary(window: &WindowFile) -> WindowSummary {
    WindowSummary {
        step: window.step.clone(),
        containers: window.containers.clone(),
        opened_at: window.opened_at,
        holder: Some(window.pid),
    }
}

/// A window this process opened; release it with [`OpenWindow::release`] on every path.
#[derive(Debug)]
pub struct OpenWindow {
    window: WindowFile,
    path: PathBuf,
}

/// Opens a window for `step` held by `process`: records it under `state_dir`, then stops each
/// container in `hold` (each must be one the mesh made).
///
/// # Guarantees
/// On success the record is on disk (written atomically) and every held container is stopped.
/// On failure nothing is left: containers already stopped are started again and the record is
/// removed.
///
/// # Errors
/// [`WindowError::Invalid`] for an empty step name or no containers, [`WindowError::Io`] when the
/// record cannot be written, [`WindowError::Hold`] when a container cannot be stopped.
pub fn open(
    state_dir: &Path,
    step: &str,
    hold: &[String],
    process: ProcessIdentity,
    now: u64,
    runtime: &dyn ContainerRuntime,
) -> Result<OpenWindow, WindowError> {
    if step.trim().is_empty() {
        return Err(WindowError::Invalid {
            reason: "a window's step needs a name".to_owned(),
        });
    }
    if hold.is_empty() {
        return Err(WindowError::Invalid {
            reason: "a window holds at least one container".to_owned(),
        });
    }
    let mut containers = hold.to_vec();
    containers.sort();
    containers.dedup();
    let window = WindowFile {
        format: WINDOW_FORMAT,
        step: step.to_owned(),
        containers,
        pid: process.pid,
        process_start: process.start_time,
        opened_at: now,
    };
    let dir = state_dir.join(WINDOWS_DIR);
    std::fs::create_dir_all(&dir).map_err(|source| WindowError::Io {
        path: dir.clone(),
        source,
    })?;
    let path = dir.join(format!("{}-{}.json", process.pid, process.start_time));
    let bytes = serde_json::to_vec_pretty(&window).expect("a window always serializes");
    fsops::write_atomic_private(&path, &bytes).map_err(|source| WindowError::Io {
        path: path.clone(),
        source,
    })?;
    let opened = OpenWindow { window, path };
    for (index, container) in opened.window.containers.iter().enumerate() {
        if let Err(reason) = runtime.stop(container) {
            for stopped in &opened.window.containers[..index] {
                let _ = runtime.start(stopped);
            }
            let _ = opened.remove_record();
            return Err(WindowError::Hold {
                container: container.clone(),
                reason,
            });
        }
    }
    Ok(opened)
}

impl OpenWindow {
    /// What is recorded.
    pub fn window(&self) -> &WindowFile {
        &self.window
    }

    /// Where it is recorded.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn remove_record(&self) -> io::Result<()> {
        fsops::remove_if_present(&self.path)?;
        if let Some(dir) = self.path.parent() {
            fsops::sync_dir(dir)?;
        }
        Ok(())
    }

    /// Starts the held containers again, then removes the record.
    ///
    /// # Guarantees
    /// The record is removed whatever happens to the containers (the window is released); a
    /// container that could not be started is converged by the next apply.
    ///
    /// # Errors
    /// [`WindowError::Restart`] naming each container that could not be started;
    /// [`WindowError::Io`] when the record cannot be removed (it still lapses on its own, once
    /// this process is gone).
    pub fn release(self, runtime: &dyn ContainerRuntime) -> Result<(), WindowError> {
        let problems: Vec<String> = self
            .window
            .containers
            .iter()
            .filter_map(|c| runtime.start(c).err().map(|e| format!("`{c}`: {e}")))
            .collect();
        self.remove_record().map_err(|source| WindowError::Io {
            path: self.path.clone(),
            source,
        })?;
        if problems.is_empty() {
            Ok(())
        } else {
            Err(WindowError::Restart {
                step: self.window.step.clone(),
                problems,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_identified_and_a_missing_pid_is_gone() {
        let me = ProcessIdentity::current().unwrap();
        assert_eq!(me.pid, std::process::id());
        assert_eq!(ProcessIdentity::of(me.pid).unwrap(), Some(me));
        // Above the kernel's pid_max (at most 2^22).
        assert_eq!(ProcessIdentity::of(u32::MAX - 1).unwrap(), None);
    }

    #[test]
    fn a_reused_pid_does_not_keep_a_window_open() {
        let me = ProcessIdentity::current().unwrap();
        let window = WindowFile {
            format: WINDOW_FORMAT,
            step: "backup".to_owned(),
            containers: vec!["c".to_owned()],
            pid: me.pid,
            process_start: me.start_time + 1,
            opened_at: 100,
        };
        assert_eq!(judge(&window, 100).unwrap(), WindowState::ProcessGone);
        let window = WindowFile {
            process_start: me.start_time,
            ..window
        };
        assert_eq!(judge(&window, 100).unwrap(), WindowState::Open);
        assert_eq!(
            judge(&window, 100 + LAPSE_SECS - 1).unwrap(),
            WindowState::Open
        );
        assert_eq!(
            judge(&window, 100 + LAPSE_SECS).unwrap(),
            WindowState::Lapsed
        );
    }
}
