//! The `records` commands through the library: the records on the bus or under a home.

use super::{said, Library};
use crate::support::fleet::Bed;
use mesh_controller::records;

use serde_json::Value;
use std::path::Path;
use std::time::Duration;

impl Library {
    /// `records collect --grace-minutes MINUTES` (`--output json` prints it).
    pub fn records_collect(
        &self,
        grace_minutes: u64,
    ) -> Result<mesh_controller::records::DeclarationsCollected, String> {
        mesh_controller::records::collect(
            self.home(),
            mesh_store::clock::now(),
            Duration::from_secs(grace_minutes.saturating_mul(60)),
            mesh_controller::plans::KEEP_PLANS,
        )
        .map_err(|e| said(&e))
    }

    /// `records get KEY`: the record's bytes.
    pub fn records_get(&self, key: &str) -> Result<Vec<u8>, String> {
        records::get(self.home(), key).map_err(|e| said(&e))
    }

    /// One record as text (`None`: there is none, the refusal `records get` prints then).
    pub fn record(&self, key: &str) -> Option<String> {
        match self.records_get(key) {
            Ok(bytes) => Some(String::from_utf8(bytes).expect("a record of text")),
            Err(error) => {
                assert!(error.contains("there is no record"), "{error}");
                None
            }
        }
    }

    /// `records list DIR --output json`.
    pub fn records_list(&self, dir: &str) -> Result<Vec<String>, String> {
        self.home().require().map_err(|e| said(&e))?;
        self.home()
            .records()
            .list(dir.trim_end_matches('/'))
            .map_err(|e| said(&e))
    }

    /// `records put KEY FILE [--base BASE]`.
    pub fn records_put(
        &self,
        key: &str,
        file: &Path,
        base: Option<&Path>,
    ) -> Result<records::PutOutcome, String> {
        records::put_by_hand(self.home(), key, file, base).map_err(|e| said(&e))
    }

    /// `records put inventory.toml FILE`, the file holding `text`.
    pub fn put_inventory(&self, text: &str) -> Result<records::PutOutcome, String> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("inventory.toml");
        std::fs::write(&file, text).unwrap();
        self.records_put("inventory.toml", &file, None)
    }

    /// `records import` (no file): the home's records at `home` moved onto the bus
    /// (`--output json` prints what was copied).
    pub fn records_import(&self, home: &Path) -> Result<Value, String> {
        let bus = self.bus()?;
        let imported = records::import(home, self.home(), bus.url()).map_err(|e| said(&e))?;
        Ok(serde_json::to_value(imported).unwrap())
    }

    /// `records export FILE` (`--output json` prints what was written).
    pub fn records_export(&self, file: &Path) -> Result<records::Exported, String> {
        records::export(self.home(), file, mesh_store::clock::now()).map_err(|e| said(&e))
    }

    /// `records import FILE`: the archive restored into the records (`--output json` prints
    /// what was restored).
    pub fn records_restore(&self, file: &Path) -> Result<records::Restored, String> {
        records::restore(self.home(), file).map_err(|e| said(&e))
    }
}

impl Bed {
    /// One of the controller's records, as `records get` gives it (`None`: there is none), read
    /// through the library.
    pub fn record(&self, key: &str) -> Option<String> {
        self.library().record(key)
    }

    /// `records put inventory.toml FILE` through the library, `text` the file's.
    pub fn put_inventory(&self, text: &str) {
        let outcome = self
            .library()
            .put_inventory(text)
            .unwrap_or_else(|error| panic!("records put: {error}"));
        assert_eq!(outcome, records::PutOutcome::Replaced);
    }
}
