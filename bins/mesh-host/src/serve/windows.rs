//! Maintenance windows on a serving host (the rule “A maintenance window holds containers
//! still”): the daemon watches the windows directory under the state directory, where
//! `mesh-host window run` records each window, and acts on what it sees at once.
//!
//! # Guarantees
//! - A window opening is published at once: the latest report again, naming the windows open
//!   now, with no apply in between — so `status` shows it with its step and the containers it
//!   holds while nothing else changes.
//! - A window closing (released, its process gone, or lapsed) makes the host apply its
//!   declaration again by itself: what the window held is converged with no push.
//! - A window past its lapse is never repeated: the heartbeat leaves lapsed windows out of what
//!   it repeats ([`without_lapsed`]), and the daemon looks again when the next one lapses.

use super::agent::Agent;
use mesh_apply::window::{self, LAPSE_SECS};
use mesh_model::report::{Report, WindowSummary};
use mesh_store::clock::now;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The directory, under the state directory, holding the windows' records.
fn windows_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("windows")
}

/// Watches the windows directory (made if it is not there); a change is sent on `changed`.
/// `None` when it cannot be watched: the reconcile interval then finds a window closed.
pub(super) fn watch(
    state_dir: &Path,
    changed: tokio::sync::mpsc::UnboundedSender<()>,
) -> Option<crate::watch::Watch> {
    let dir = windows_dir(state_dir);
    if let Err(error) = std::fs::create_dir_all(&dir) {
        tracing::warn!(dir = %dir.display(), %error, "cannot make the windows directory: windows are looked at on the reconcile interval");
        return None;
    }
    match crate::watch::start(&BTreeSet::from([dir.clone()]), changed) {
        Ok(watch) => Some(watch),
        Err(error) => {
            tracing::warn!(dir = %dir.display(), %error, "cannot watch the windows directory: windows are looked at on the reconcile interval");
            None
        }
    }
}

/// `report` as the heartbeat repeats it at `now`: without the windows past their lapse.
pub(super) fn without_lapsed(mut report: Report, now: u64) -> Report {
    report
        .windows
        .retain(|w| now < w.opened_at.saturating_add(LAPSE_SECS));
    report
}

/// When the first of `windows` lapses (seconds since the epoch), if any is open.
pub(super) fn next_lapse(windows: &[WindowSummary]) -> Option<u64> {
    windows
        .iter()
        .map(|w| w.opened_at.saturating_add(LAPSE_SECS))
        .min()
}

impl Agent {
    /// Looks at the windows open now: a window opened is published at once, a window closed
    /// applies the declaration again (see the module's guarantees).
    pub(super) async fn check_windows(&mut self) {
        let open = match window::open_windows(&self.config.host.state_dir, now()) {
            Ok(open) => open,
            Err(error) => {
                tracing::error!(node = %self.config.node, %error, "cannot read the windows; looking again on the reconcile interval");
                return;
            }
        };
        let open: Vec<WindowSummary> = open.iter().map(window::summary).collect();
        if open == self.windows {
            return;
        }
        let closed = self.windows.iter().any(|w| !open.contains(w));
        self.windows = open.clone();
        if closed {
            if let Some(payload) = self.payload.clone() {
                tracing::info!(node = %self.config.node, "a window closed: applying again what it held");
                self.apply(payload).await;
                return;
            }
        }
        let latest = self.live.lock().expect("the live report lock").clone();
        if let Some(mut report) = latest {
            tracing::info!(node = %self.config.node, windows = open.len(), "the windows open changed: reporting them");
            report.windows = open;
            self.publish(&report).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(step: &str, opened_at: u64) -> WindowSummary {
        WindowSummary {
            step: step.into(),
            containers: vec!["mesh-db-db".into()],
            opened_at,
            holder: None,
        }
    }

    #[test]
    fn a_lapsed_window_is_not_repeated_and_the_next_lapse_is_the_earliest() {
        let report = Report {
            format: mesh_model::report::REPORT_FORMAT,
            node: "a".into(),
            declaration: "sha256:x".into(),
            machine: mesh_model::report::MachineState::Partial,
            resources: Default::default(),
            undeclared: Default::default(),
            findings: Vec::new(),
            windows: vec![window("old", 100), window("new", 5000)],
            resumed_from_mid_change: false,
            host_failure: None,
            drift: Vec::new(),
            started_at: 1000,
            finished_at: 1000,
            send: None,
            published_at: None,
        };
        assert_eq!(next_lapse(&report.windows), Some(100 + LAPSE_SECS));
        let before = without_lapsed(report.clone(), 100 + LAPSE_SECS - 1);
        assert_eq!(before.windows.len(), 2);
        let after = without_lapsed(report, 100 + LAPSE_SECS);
        assert_eq!(after.windows, vec![window("new", 5000)]);
        assert_eq!(next_lapse(&[]), None);
    }
}
