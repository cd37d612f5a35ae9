//! The mesh home: where the controller keeps the inventory, the catalogue, settings and their
//! history, what it sent each node and what each node reported.
//!
//! The controller's **records** are kept in a [`RecordStore`]: in the embedded default, files
//! under the home ([`DirRecords`]); on a fleet (`--bus`), the bus's records bucket
//! (`mesh_bus::records::KvRecords`), so a controller restarted or started on another machine
//! resumes from them. The keys are the same on both. Every family of records — the directory
//! its keys are under, what it holds, and the store that reads and writes it — is in one table,
//! [`keys::FAMILIES`]: each store names its keys, and a command reads and writes them through
//! it. The stores of the home's own families are here: [`LayerStore`] (the settings layers and
//! their history, [`Home::layers`]), [`SentStore`] (what was sent, [`Home::sent`]), [`ReportStore`]
//! (each node's last report, [`Home::reports`]) and [`ProblemStore`] ([`Home::problems`]); the
//! others are in the folder that owns them ([`crate::plans::PlanStore`],
//! [`crate::catalogue::repos::RepoStore`], [`crate::catalogue::builds::DeployedStore`]).
//! `inventory.toml` is the home's own ([`Home::inventory`]); on the bus a record over 60 KiB is
//! kept in chunks (`chunked/<key>/<hex>`, mesh_store::chunked, hidden from listings).
//!
//! What stays on this machine, under the home, whatever holds the records:
//!
//! ```text
//! <home>/catalogue/modules/<module>/...       the catalogue (the operator's source)
//! <home>/roots/<node>/                        the node's sandbox root (embedded default)
//! <home>/state/<node>/                        the node's host state directory
//! <home>/plans/.lock                          held while planning or driving plans
//! <home>/store/lock, <home>/store/oci/        the store lock, the default archive store
//! <home>/bus/passwords/controller             the controller's own bus password
//! <home>/bus/nkey.seed                        the controller's own NKey seed (`broker keygen`)
//! <home>/secrets/mesh.key                     the mesh's secrets key, 0600 ([`crate::secrets`])
//! <home>/secrets/recipients                   the operators' age keys
//! <home>/records-moved                        where the records went (`records import`)
//! ```
//!
//! Every write is whole: a temporary file renamed into place, or one value on the bucket.

pub(crate) mod heard;

use crate::error::{bad_record, file_error, Error, Result};
use mesh_model::inventory::Inventory;
use mesh_model::module::{load_catalogue, Catalogue};
use mesh_model::Diagnostic;
use mesh_store::record_store::{DirRecords, RecordStore};
use serde::Serialize;
use serde_json::Value;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub(crate) mod keys;
mod layers;
mod problems;
mod reports;
mod sent;

/// The file under a home whose records were moved to a bus (`records import`): it names the
/// bus, and a command run on the home without `--bus` is refused instead of reading the old
/// records.
pub(crate) const MOVED_FILE: &str = "records-moved";

/// A mesh home directory, and where its records are.
#[derive(Debug, Clone)]
pub struct Home {
    root: PathBuf,
    records: Arc<dyn RecordStore>,
    on_bus: bool,
    /// The token of the plans lease this process holds on the bus, if it holds one
    /// (`mesh_store::lease`).
    lease: Arc<Mutex<Option<String>>>,
    /// What this process migrated from an older record format, to be said once.
    migrated: Arc<Mutex<Vec<String>>>,
    /// Where the latest reports are read, on a fleet (`None`: the `reports/` records).
    reports: Option<Arc<dyn ReportSource>>,
    /// The most bytes a node's report may hold ([`crate::home::heard::MAX_REPORT_BYTES`] unless
    /// [`Home::with_report_limit`]).
    report_limit: usize,
    /// The inventory last parsed, with the bytes it was parsed from.
    parsed: Arc<Mutex<inventory::ParsedInventory>>,
}

mod inventory;

pub use layers::LayerChange;
pub(crate) use layers::{HistoryRecord, LAYER_TRIES};
pub(crate) use reports::ReportSource;
pub use sent::declaration_key;

impl Home {
    /// The home at `root` (not checked), its records files under it.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        Home {
            records: Arc::new(DirRecords::new(&root)),
            root,
            on_bus: false,
            lease: Arc::default(),
            migrated: Arc::default(),
            reports: None,
            report_limit: crate::home::heard::MAX_REPORT_BYTES,
            parsed: Arc::default(),
        }
    }

    /// The home at `root`, its records on a fleet's bus; each node's latest report read from
    /// `reports` when given (the bus's reports stream), else from the records.
    pub fn on_bus(
        root: impl Into<PathBuf>,
        records: Arc<dyn RecordStore>,
        reports: Option<Arc<dyn ReportSource>>,
    ) -> Self {
        Home {
            root: root.into(),
            records,
            on_bus: true,
            lease: Arc::default(),
            migrated: Arc::default(),
            reports,
            report_limit: crate::home::heard::MAX_REPORT_BYTES,
            parsed: Arc::default(),
        }
    }

    /// What this process migrated from an older record format (each said once, then
    /// forgotten): the binary prints them.
    pub fn take_migrations(&self) -> Vec<String> {
        std::mem::take(
            &mut self
                .migrated
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Notes a migration, to be said ([`Home::take_migrations`]).
    pub fn note_migration(&self, what: String) {
        self.migrated
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(what);
    }

    /// The home directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the records are.
    pub fn records(&self) -> &dyn RecordStore {
        self.records.as_ref()
    }

    /// Where the records are, shared (for a thread of their own).
    pub fn records_shared(&self) -> Arc<dyn RecordStore> {
        Arc::clone(&self.records)
    }

    /// Where this process keeps the token of the plans lease it holds.
    pub fn lease_slot(&self) -> Arc<Mutex<Option<String>>> {
        Arc::clone(&self.lease)
    }

    /// Fails when this process held the plans lease on the bus and it was taken over: it must
    /// write no more plans.
    pub fn check_lease(&self) -> Result<()> {
        let token = self
            .lease
            .lock()
            .expect("the lease token lock is never poisoned")
            .clone();
        match token {
            Some(token) if self.on_bus => Ok(mesh_store::lease::check_held(
                self.records.as_ref(),
                &token,
            )?),
            _ => Ok(()),
        }
    }

    /// Whether the records are on a bus (not files under the home).
    pub fn records_on_bus(&self) -> bool {
        self.on_bus
    }

    /// The record at `key`, if there is one.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.records.get(key)?)
    }

    /// Replaces the record at `key`.
    pub fn put(&self, key: &str, bytes: &[u8]) -> Result<()> {
        Ok(self.records.put(key, bytes)?)
    }

    /// Writes each record of `records`, in order, together where the records' store can
    /// ([`RecordStore::put_many`]).
    ///
    /// # Errors
    /// A record cannot be written (those before it may have been).
    pub fn put_many(&self, records: &[(String, Vec<u8>)]) -> Result<()> {
        Ok(self.records.put_many(records)?)
    }

    /// Writes `value` as pretty JSON at `key`.
    pub fn put_json<T: Serialize>(&self, key: &str, value: &T) -> Result<()> {
        self.put(key, &serde_json::to_vec_pretty(value)?)
    }

    /// The JSON record at `key`, if there is one.
    pub fn get_json(&self, key: &str) -> Result<Option<Value>> {
        match self.get(key)? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(bad_record(self.records.locate(key), "valid JSON")),
        }
    }

    /// Reads one of the controller's versioned records: JSON whose `format` must be
    /// `expected`; `None` when there is none.
    pub fn read_record<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
        what: &str,
        expected: u32,
    ) -> Result<Option<T>> {
        let Some(value) = self.get_json(key)? else {
            return Ok(None);
        };
        self.versioned(key, value, what, expected).map(Some)
    }

    /// `value`, read from the record `key`, as one of the controller's versioned records: its
    /// `format` must be `expected`, and it must read as `what`.
    ///
    /// # Errors
    /// Another format, or not `what`: an error naming the record.
    pub(crate) fn versioned<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
        value: Value,
        what: &str,
        expected: u32,
    ) -> Result<T> {
        let location = self.records.locate(key);
        match value.get("format").and_then(Value::as_u64) {
            Some(found) if found == u64::from(expected) => {}
            found => {
                return Err(Error::Format {
                    location,
                    found: found.map_or("none".to_owned(), |f| f.to_string()),
                    expected,
                })
            }
        }
        serde_json::from_value(value).map_err(bad_record(location, what))
    }

    /// The names of the `*.json` records in `dir`, without the extension, sorted.
    pub fn json_stems(&self, dir: &str) -> Result<Vec<String>> {
        Ok(self
            .records
            .list(dir)?
            .into_iter()
            .filter_map(|name| name.strip_suffix(".json").map(str::to_owned))
            .collect())
    }

    /// The catalogue's modules directory.
    pub fn modules_dir(&self) -> PathBuf {
        self.root.join("catalogue/modules")
    }

    /// Reads and validates the catalogue: modules that are sound, and every problem.
    pub fn catalogue(&self) -> Result<(Catalogue, Vec<Diagnostic>)> {
        let dir = self.modules_dir();
        let source =
            mesh_store::tree::read_catalogue(&dir, "catalogue/modules").map_err(|source| {
                Error::Invalid {
                    what: format!("reading the catalogue at {}", dir.display()),
                    source: Some(Box::new(source)),
                }
            })?;
        Ok(load_catalogue(&source))
    }

    /// The root a node's host applies under.
    pub fn node_root(&self, node: &str, inventory: &Inventory) -> PathBuf {
        match inventory.file.nodes.get(node).and_then(|n| n.root.as_ref()) {
            Some(root) => self.root.join(root),
            None => self.root.join("roots").join(node),
        }
    }

    /// A node's host state directory.
    pub fn node_state_dir(&self, node: &str) -> PathBuf {
        self.root.join("state").join(node)
    }
}

/// Writes a file atomically: a temporary file beside it, fsync, rename, fsync the directory.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().ok_or_else(|| Error::File {
        doing: "writing".to_owned(),
        path: path.to_owned(),
        source: std::io::Error::other("it has no parent directory"),
    })?;
    fs::create_dir_all(dir).map_err(file_error("creating", dir))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    let mut file = fs::File::create(&tmp).map_err(file_error("writing", &tmp))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(file_error("writing", &tmp))?;
    fs::rename(&tmp, path).map_err(file_error("renaming into", path))?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(file_error("syncing", dir))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_is_not_written_once_the_lease_was_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let records: Arc<dyn RecordStore> = Arc::new(DirRecords::new(dir.path()));
        let home = Home::on_bus(dir.path(), Arc::clone(&records), None);
        home.check_lease().unwrap();
        let lease = mesh_store::lease::Lease::acquire(
            home.records_shared(),
            "merge cat",
            home.lease_slot(),
        )
        .unwrap();
        home.check_lease().unwrap();
        let mut record: Value = serde_json::from_slice(
            &records
                .get(mesh_store::lease::PLANS_LEASE)
                .unwrap()
                .unwrap(),
        )
        .unwrap();
        record["holder"]["token"] = Value::from("another controller's");
        home.put_json(mesh_store::lease::PLANS_LEASE, &record)
            .unwrap();
        let error = home.check_lease().unwrap_err().to_string();
        assert!(error.contains("taken over by merge cat"), "{error}");
        drop(lease);
    }
}
