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

    /// `status --output json` with its options (`--silent-after`, …): the front door's
    /// [`mesh_controller::Mesh::read_status`], judged as `status` judges it and printed as it
    /// prints it; the error as the binary says it.
    pub fn status_with(&self, options: &status::StatusOptions) -> Result<Status, String> {
        let read = self.call(async |mesh| mesh.read_status(options).await)?;
        let (overview, now) = (read.overview, read.now);
        let verdict = status::judge(&overview, now, status::DEFAULT_MID_CHANGE_AFTER_SECS);
        let document = overview.json_document(&verdict).map_err(|e| said(&e))?;
        Ok(Status {
            json: serde_json::from_str(&document).unwrap(),
            document,
            code: verdict.health.exit_code(),
        })
    }
}
