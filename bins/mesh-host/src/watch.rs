//! Watching what the host manages (the rule “Drift is seen, and reported even when corrected”): the
//! directories holding the declared files and directories (and the account files, for memberships)
//! are watched with inotify; any change in one wakes the daemon, which then examines the
//! declaration for drift ([`mesh_apply::drift::Examiner`]). A watch only says *when* to look; what
//! differs is always decided by the examination, so a missed or spurious event costs nothing but a
//! look (the reconcile interval is the backstop).
//!
//! Each watched directory costs one inotify watch (the kernel's memory, not the host's); a
//! watch that cannot be added (a limit reached, a directory not there yet) is logged, and that
//! directory is left to the reconcile interval.

use mesh_model::declaration::{Declaration, Spec};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use std::collections::BTreeSet;
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A running watch; dropping it stops its thread (within a second).
pub struct Watch {
    stop: Arc<AtomicBool>,
    /// How many directories are watched.
    pub watched: usize,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The directories (under `root`) to watch for `declaration`: the parent of every file whose
/// content a declared resource keeps and of every declared directory, every declared directory,
/// and `etc` when it declares a membership or an account.
pub fn watched_directories(root: &Path, declaration: &Declaration) -> BTreeSet<PathBuf> {
    let under = |machine_path: &str| root.join(machine_path.trim_start_matches('/'));
    let mut out = BTreeSet::new();
    for resource in &declaration.resources {
        // The directory of a file whose content a resource keeps (a file's, a line's).
        if let Some(parent) = resource
            .spec
            .file_path()
            .and_then(|p| under(p).parent().map(Path::to_path_buf))
        {
            out.insert(parent);
        }
        match &resource.spec {
            Spec::Directory(dir) => {
                let full = under(&dir.path);
                if let Some(parent) = full.parent() {
                    out.insert(parent.to_path_buf());
                }
                out.insert(full);
            }
            Spec::Membership(_) | Spec::Account(_) => {
                out.insert(under("/etc"));
            }
            // The others are watched by their file (above), or not at all (containers).
            _ => {}
        }
    }
    out
}

/// Starts watching `directories`; every change in one sends `()` on `changed`.
///
/// # Errors
/// When inotify cannot be had at all (then the reconcile interval alone finds drift).
pub fn start(
    directories: &BTreeSet<PathBuf>,
    changed: tokio::sync::mpsc::UnboundedSender<()>,
) -> nix::Result<Watch> {
    // Not IN_MODIFY: a file being written is looked at once it is closed, not half-written.
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK)?;
    let mask = AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_ONLYDIR;
    let mut watched = 0;
    for directory in directories {
        match inotify.add_watch(directory, mask) {
            Ok(_) => watched += 1,
            Err(error) => tracing::debug!(
                directory = %directory.display(),
                %error,
                "not watched (left to the reconcile interval)"
            ),
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = Arc::clone(&stop);
    std::thread::Builder::new()
        .name("mesh-host-watch".into())
        .spawn(move || {
            use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
            while !stopping.load(Ordering::Relaxed) {
                let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
                // Wakes at once on an event; once a second to see whether to stop.
                if let Ok(0) | Err(_) = poll(&mut fds, PollTimeout::from(1000u16)) {
                    continue;
                }
                let mut any = false;
                while let Ok(events) = inotify.read_events() {
                    if events.is_empty() {
                        break;
                    }
                    any = true;
                }
                if any && changed.send(()).is_err() {
                    return;
                }
            }
        })
        .map_err(|_| nix::Error::EAGAIN)?;
    Ok(Watch { stop, watched })
}
