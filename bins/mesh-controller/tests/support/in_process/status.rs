//! `status` through the library.

use super::{said, Library};
use mesh_controller::status;

use serde_json::Value;

/// What `status` says.
pub struct Status {
    /// What `status --output json` prints.
    pub json: Value,
    /// The same, byte for byte as printed.
    pub document: String,
    /// The exit code the overview is judged to (`status::judge`): 0 settled, 4 in progress, 3
    /// needs attention.
    pub code: u8,
}

impl Library {
    /// `/metrics` as `mesh-controller serve --http` answers it now (the Prometheus text).
    pub fn metrics(&self) -> String {
        let pages = mesh_controller::http::Pages::new(
            self.home().clone(),
            mesh_controller::SILENT_AFTER_SECS,
        );
        let snapshot = pages
            .snapshot(mesh_store::clock::now())
            .unwrap_or_else(|error| panic!("{}", said(&error)));
        mesh_controller::http::metrics(&snapshot)
    }

    /// `status --output json`, judged now as `status` judges it.
    pub fn status(&self) -> Status {
        self.try_status().unwrap_or_else(|error| panic!("{error}"))
    }

    /// [`Library::status`], the error as the binary says it.
    pub fn try_status(&self) -> Result<Status, String> {
        self.status_with(&status::StatusOptions::default())
    }

    /// `status --output json` with its options (`--silent-after`, …), judged now as `status`
    /// judges it; the error as the binary says it.
    pub fn status_with(&self, options: &status::StatusOptions) -> Result<Status, String> {
        // As `status` does: what each node should run, composed again when its inputs changed.
        self.tokio
            .block_on(mesh_controller::status::current_for_status(
                self.home(),
                self.mesh.store(),
            ));
        let now = mesh_store::clock::now();
        let mut overview =
            status::overview_with(self.home(), now, options).map_err(|e| said(&e))?;
        // On a fleet with a daemon, the merges waiting on its consumer, read from the bus.
        if let (Some(_), Some(bus)) = (&overview.daemon, self.mesh.bus()) {
            if let Some(waiting) = self
                .tokio
                .block_on(mesh_controller::bus::merges_waiting(self.home(), bus))
            {
                overview.set_merges_waiting(waiting, now);
            }
        }
        let verdict = status::judge(&overview, now, status::DEFAULT_MID_CHANGE_AFTER_SECS);
        let document = overview.json_document(&verdict).map_err(|e| said(&e))?;
        Ok(Status {
            json: serde_json::from_str(&document).unwrap(),
            document,
            code: verdict.health.exit_code(),
        })
    }
}
