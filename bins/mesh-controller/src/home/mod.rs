//! The mesh home: where the controller keeps the inventory, the catalogue, settings and their
//! history, what it sent each node and what each node reported.
//!
//! The controller's **records** are kept in a [`RecordStore`]: in the embedded default, files
//! under the home ([`DirRecords`]); on a fleet (`--bus`), the bus's records bucket
//! (`mesh_bus::records::KvRecords`), so a controller restarted or started on another machine
//! resumes from them. The keys are the same on both (the paths below, relative to the home):
//!
//! ```text
//! inventory.toml                       nodes, bus node, assignments
//! settings/<module>/mesh.json          the mesh layer of a module's settings
//! settings/<module>/nodes/<node>.json  a node's layer
//! history/settings/<module>/<scope>/<revision>.json   every layer replaced
//! declarations/<hex>.json              a declaration, stored once by its digest (sha256 hex)
//! sent/<node>.json                     the digest of the declaration last sent to a node
//! reports/<node>.json                  the node's last report
//! heard/<node>.json                    on a fleet: the node's last readable report, kept while
//!                                      its latest is unreadable (crate::home::heard)
//! repos/<name>.json                    a registered catalogue repository ([`crate::catalogue::repos`])
//! plans/<id>.json                      a plan and the work behind it ([`crate::plans`])
//! rollouts/<plan>/<module>/<node>.json a node's part of a module's rollout, once it changed
//! rollouts/<plan>/<module>.running.json  the nodes a rollout found running at its start
//! deployed/<module>.json               the build a finished rollout made current
//! store/modules/<module>.json          every build of a module (mesh-store's records)
//! store/modules/mesh-bus.json         the bus's users archives: current = the bus node's last
//! bus/passwords/<node>                 a node's bus password, until it is enrolled ([`crate::executor::fleet`])
//! bus/nkeys/<node>                     an enrolled node's NKey public key ([`crate::bus::enroll`])
//! bus/authorization.json               the bus's users last confirmed in force: digest, archive
//! problems/<kind>/<subject>.json       a failure until it is resolved (mesh_store::problems)
//! daemon/heartbeat.json                the daemon's last heartbeat (crate::bus::heartbeat)
//! chunked/<key>/<hex>                  on the bus: a chunk of a record over 60 KiB, e.g. a large
//!                                      inventory (mesh_store::chunked; hidden from listings)
//! ```
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

pub mod heard;

use crate::error::{bad_record, file_error, Error, Result};
use mesh_model::declaration::Declaration;
use mesh_model::inventory::{layer_file, Inventory, LayerScope};
use mesh_model::module::{load_catalogue, Catalogue};
use mesh_model::Diagnostic;
use mesh_store::problems::{Problem, ProblemKind};
use mesh_store::record_store::{DirRecords, RecordStore, Swap};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

mod reports;

/// The file under a home whose records were moved to a bus (`records import`): it names the
/// bus, and a command run on the home without `--bus` is refused instead of reading the old
/// records.
pub const MOVED_FILE: &str = "records-moved";

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

pub use reports::ReportSource;

/// The format version of a `sent/<node>.json` record.
pub const SENT_FORMAT: u32 = 1;

/// What was last sent to a node: the digest of its declaration, which is kept once under
/// `declarations/` (disk format, version [`SENT_FORMAT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SentRecord {
    /// Format version.
    pub format: u32,
    /// The digest of the declaration sent.
    pub declaration: String,
}

/// The record key of the declaration with `digest` (`sha256:<hex>` → `declarations/<hex>.json`).
pub fn declaration_key(digest: &str) -> String {
    format!(
        "declarations/{}.json",
        digest.strip_prefix("sha256:").unwrap_or(digest)
    )
}

/// Whether `text` is a declaration's digest: `sha256:` and 64 lower-case hex digits.
fn is_digest(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// How many times a layer is read again while other writers change it first.
pub const LAYER_TRIES: u32 = 100;

/// What [`Home::replace_layer`] is to do with the layer it found.
#[derive(Debug, Clone, PartialEq)]
pub enum LayerChange {
    /// Write nothing.
    Leave,
    /// Replace it with this layer.
    Set(Value),
    /// Remove it.
    Remove,
}

/// What [`Home::replace_layer`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct Replaced {
    /// The layer it found and decided on (the one replaced, when it was).
    pub old: Option<Value>,
    /// The history record now holding the replaced layer (`None`: nothing was written).
    pub kept: Option<HistoryRecord>,
    /// How many times another writer changed the layer first, so it was read again.
    pub raced: u32,
}

/// The format version of a settings history record.
pub const HISTORY_FORMAT: u32 = 1;

/// One replaced settings layer, as kept in the history (disk format, versioned).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct HistoryRecord {
    /// Format version.
    pub format: u32,
    /// The revision number (1, 2, …) within this layer's history.
    pub revision: u64,
    /// When the layer was replaced (seconds since the epoch).
    pub replaced_at: u64,
    /// The command that replaced it.
    pub command: String,
    /// The layer as it was before (None: there was no layer).
    pub layer: Option<Value>,
}

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

    /// Reads one layer, if set.
    pub fn layer(&self, module: &str, scope: &LayerScope) -> Result<Option<Value>> {
        self.get_json(&layer_file(module, scope))
    }

    /// Replaces a layer after `decide` has seen the layer it replaces, keeping that layer in
    /// the history first.
    ///
    /// `decide` is given the layer as it is and says what to do with it. When another writer
    /// changes the layer between this read and the write, nothing is written over it: the layer
    /// is read again and `decide` called again with it, so what it decided is always relative
    /// to the layer actually replaced.
    ///
    /// # Guarantees
    /// - Compare-and-set: a change made meanwhile by another writer is never overwritten
    ///   unseen ([`RecordStore::compare_and_set`]).
    /// - Every replaced layer is in the history under a revision no other writer has: the
    ///   revision is made only while absent, the next one tried when another writer took it.
    /// - The history record is written before the layer; a controller stopped between the two
    ///   leaves a history record of the layer still in force (nothing is lost).
    ///
    /// # Errors
    /// When a record cannot be read or written, `decide` fails, or other writers changed the
    /// layer [`LAYER_TRIES`] times in a row (nothing was changed).
    pub fn replace_layer(
        &self,
        module: &str,
        scope: &LayerScope,
        command: &str,
        now: u64,
        decide: &mut dyn FnMut(Option<&Value>) -> Result<LayerChange>,
    ) -> Result<Replaced> {
        let key = layer_file(module, scope);
        for raced in 0..LAYER_TRIES {
            let found = self.records.get_versioned(&key)?;
            let (old, version) = match found {
                None => (None, None),
                Some((bytes, version)) => {
                    let layer: Value = serde_json::from_slice(&bytes)
                        .map_err(bad_record(self.records.locate(&key), "valid JSON"))?;
                    (Some(layer), Some(version))
                }
            };
            let new = match decide(old.as_ref())? {
                LayerChange::Leave => {
                    return Ok(Replaced {
                        old,
                        kept: None,
                        raced,
                    })
                }
                LayerChange::Set(layer) => Some(serde_json::to_vec_pretty(&layer)?),
                LayerChange::Remove => None,
            };
            let (kept, kept_key) =
                self.keep_in_history(module, scope, old.clone(), command, now)?;
            match self
                .records
                .compare_and_set(&key, version.as_ref(), new.as_deref())?
            {
                Swap::Done => {
                    return Ok(Replaced {
                        old,
                        kept: Some(kept),
                        raced,
                    })
                }
                // Another writer changed the layer: this replacement did not happen, so its
                // history record goes, and the newer layer is decided on.
                Swap::Stale => self.records.delete(&kept_key)?,
            }
        }
        Err(Error::refused(format!(
            "{} was changed by other writers {LAYER_TRIES} times in a row while it was being \
             replaced; nothing was changed",
            self.records.locate(&key)
        )))
    }

    /// Writes `layer` into the layer's history under the next revision no writer has taken;
    /// returns the record and its key.
    fn keep_in_history(
        &self,
        module: &str,
        scope: &LayerScope,
        layer: Option<Value>,
        command: &str,
        now: u64,
    ) -> Result<(HistoryRecord, String)> {
        let dir = history_dir(module, scope);
        // Revisions are the records' names (`000001.json`): one listing, nothing read.
        let mut revision = self
            .json_stems(&dir)?
            .iter()
            .filter_map(|stem| stem.parse::<u64>().ok())
            .max()
            .unwrap_or(0)
            + 1;
        let mut record = HistoryRecord {
            format: HISTORY_FORMAT,
            revision,
            replaced_at: now,
            command: command.to_owned(),
            layer,
        };
        for _ in 0..LAYER_TRIES {
            record.revision = revision;
            let key = format!("{dir}/{revision:06}.json");
            let bytes = serde_json::to_vec_pretty(&record)?;
            match self.records.compare_and_set(&key, None, Some(&bytes))? {
                Swap::Done => return Ok((record, key)),
                // Another writer took this revision: the next one.
                Swap::Stale => revision += 1,
            }
        }
        Err(Error::refused(format!(
            "no free revision in {} after {LAYER_TRIES} tries; nothing was changed",
            self.records.locate(&dir)
        )))
    }

    /// Every replaced layer, oldest first.
    pub fn history(&self, module: &str, scope: &LayerScope) -> Result<Vec<HistoryRecord>> {
        let dir = history_dir(module, scope);
        let mut records = Vec::new();
        for stem in self.json_stems(&dir)? {
            let key = format!("{dir}/{stem}.json");
            let Some(value) = self.get_json(&key)? else {
                continue;
            };
            let record: HistoryRecord = serde_json::from_value(value)
                .map_err(bad_record(self.records.locate(&key), "a history record"))?;
            records.push(record);
        }
        records.sort_by_key(|r| r.revision);
        Ok(records)
    }

    /// Records a failure for `status` until it is resolved (the rule “Nothing fails silently”): `kind` and `subject`
    /// name it (a repository, a node), `what` says it in a line, `details` add lines.
    /// Recording it again keeps when it began.
    ///
    /// # Errors
    /// When the record cannot be written.
    pub fn record_problem(
        &self,
        kind: ProblemKind,
        subject: &str,
        what: &str,
        details: Vec<String>,
        now: u64,
    ) -> Result<Problem> {
        Ok(mesh_store::problems::record_problem(
            self.records.as_ref(),
            kind,
            subject,
            what,
            details,
            now,
            "mesh-controller",
        )?)
    }

    /// Clears a failure once what failed succeeded; returns whether one was recorded.
    ///
    /// # Errors
    /// When the record cannot be read or removed.
    pub fn clear_problem(&self, kind: ProblemKind, subject: &str) -> Result<bool> {
        Ok(mesh_store::problems::clear_problem(
            self.records.as_ref(),
            kind,
            subject,
        )?)
    }

    /// Every failure recorded and not yet resolved, by kind and subject.
    ///
    /// # Errors
    /// When a record cannot be read or is not a problem.
    pub fn problems(&self) -> Result<Vec<Problem>> {
        Ok(mesh_store::problems::read_problems(self.records.as_ref())?)
    }

    /// The digest of the declaration last sent to `node`, without reading the declaration.
    ///
    /// # Errors
    /// The record cannot be read, or is neither format.
    pub fn sent_digest(&self, node: &str) -> Result<Option<String>> {
        Ok(self.sent_record(node)?.map(|(digest, _)| digest))
    }

    /// The digest of the declaration last sent to each node that was sent one, by node: one
    /// listing of `sent/`, not a read per node (a record of the format before [`SENT_FORMAT`]
    /// is read, and migrated, as [`Home::sent_digest`] does).
    ///
    /// # Errors
    /// The records cannot be listed, or a record is neither format.
    pub fn sent_digests(&self) -> Result<std::collections::BTreeMap<String, String>> {
        let mut digests = std::collections::BTreeMap::new();
        for (key, bytes) in self.records.values_under("sent")? {
            let Some(node) = key
                .strip_prefix("sent/")
                .and_then(|name| name.strip_suffix(".json"))
                .filter(|node| !node.contains('/'))
            else {
                continue;
            };
            let digest = match serde_json::from_slice::<SentRecord>(&bytes) {
                Ok(record) if record.format == SENT_FORMAT => Some(record.declaration),
                Ok(_) | Err(_) => self.sent_digest(node)?,
            };
            if let Some(digest) = digest {
                digests.insert(node.to_owned(), digest);
            }
        }
        Ok(digests)
    }

    /// The declaration last sent to `node`.
    ///
    /// # Errors
    /// The records cannot be read; the pointer names a declaration that is not kept.
    pub fn sent(&self, node: &str) -> Result<Option<Declaration>> {
        let Some((digest, whole)) = self.sent_record(node)? else {
            return Ok(None);
        };
        if let Some(declaration) = whole {
            return Ok(Some(declaration));
        }
        match self.declaration(&digest)? {
            Some(declaration) => Ok(Some(declaration)),
            None => Err(Error::BadRecord {
                location: self.records.locate(&format!("sent/{node}.json")),
                what: format!(
                    "readable: it names declaration {digest}, which is not kept ({})",
                    self.records.locate(&declaration_key(&digest))
                ),
                source: None,
            }),
        }
    }

    /// `sent/<node>.json` read: the digest, and the declaration when the record held it whole
    /// (the format before [`SENT_FORMAT`], migrated here on first read, saying so).
    fn sent_record(&self, node: &str) -> Result<Option<(String, Option<Declaration>)>> {
        let key = format!("sent/{node}.json");
        let Some(bytes) = self.get(&key)? else {
            return Ok(None);
        };
        if let Ok(record) = serde_json::from_slice::<SentRecord>(&bytes) {
            if record.format == SENT_FORMAT {
                // The digest becomes a key: one that is not a digest is this record's fault,
                // named as such, never a look-up of some other key.
                if !is_digest(&record.declaration) {
                    return Err(Error::BadRecord {
                        location: self.records.locate(&key),
                        what: format!(
                            "readable: it names `{}`, which is not a declaration's digest \
                             (sha256:<64 hex>)",
                            record.declaration.escape_debug()
                        ),
                        source: None,
                    });
                }
                return Ok(Some((record.declaration, None)));
            }
        }
        let declaration = Declaration::from_json(&bytes).map_err(bad_record(
            self.records.locate(&key),
            &format!("a declaration (what was sent to `{node}`)"),
        ))?;
        // Migrated: the declaration kept once by digest, the record made a pointer.
        self.record_sent(&declaration)?;
        self.note_migration(format!(
            "{}: the whole declaration was kept in it; it now names {} (kept once by digest)",
            self.records.locate(&key),
            self.records.locate(&declaration_key(&declaration.digest()))
        ));
        Ok(Some((declaration.digest(), Some(declaration))))
    }

    /// The declaration with `digest`, if it is kept.
    ///
    /// # Errors
    /// The record cannot be read or does not read as a declaration.
    pub fn declaration(&self, digest: &str) -> Result<Option<Declaration>> {
        let key = declaration_key(digest);
        let Some(bytes) = self.get(&key)? else {
            return Ok(None);
        };
        Declaration::from_json(&bytes)
            .map(Some)
            .map_err(bad_record(self.records.locate(&key), "a declaration"))
    }

    /// Keeps `declaration` once by its digest ([`Declaration::digest`], what its host reports
    /// it by): the key is the content's digest, so writing it again writes the same bytes — but
    /// for its secrets' ciphertexts, which count by their keyed digests (sealed again to other
    /// operators' keys, the same declaration).
    ///
    /// # Errors
    /// The records cannot be written.
    pub fn keep_declaration(&self, declaration: &Declaration) -> Result<String> {
        let bytes = declaration.canonical_json();
        // The digest its host reports it by: of its bytes, except that a secret counts by its
        // keyed digest (whichever key its ciphertext is sealed to).
        let digest = declaration.digest();
        self.put(&declaration_key(&digest), &bytes)?;
        Ok(digest)
    }

    /// Records what was sent to `node`: the declaration kept by digest, then the node's record
    /// naming it.
    ///
    /// # Errors
    /// The records cannot be written.
    pub fn record_sent(&self, declaration: &Declaration) -> Result<()> {
        let digest = self.keep_declaration(declaration)?;
        self.put_json(
            &format!("sent/{}.json", declaration.node),
            &SentRecord {
                format: SENT_FORMAT,
                declaration: digest,
            },
        )
    }

    /// Records what was sent to each node of `declarations`, as [`Home::record_sent`] does,
    /// together: every declaration kept by digest first, then the nodes' records naming them.
    ///
    /// # Errors
    /// The records cannot be written.
    pub fn record_sent_many(
        &self,
        declarations: &[&mesh_model::declaration::Outgoing],
    ) -> Result<()> {
        let mut kept = Vec::with_capacity(declarations.len());
        let mut named = Vec::with_capacity(declarations.len());
        for declaration in declarations {
            let digest = declaration.digest();
            named.push((
                format!("sent/{}.json", declaration.node()),
                serde_json::to_vec_pretty(&SentRecord {
                    format: SENT_FORMAT,
                    declaration: digest.to_owned(),
                })?,
            ));
            kept.push((declaration_key(digest), declaration.json().to_vec()));
        }
        self.put_many(&kept)?;
        self.put_many(&named)
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

/// Where a layer's replaced versions are kept.
fn history_dir(module: &str, scope: &LayerScope) -> String {
    match scope {
        LayerScope::Mesh => format!("history/settings/{module}/mesh"),
        LayerScope::Node(node) => format!("history/settings/{module}/nodes/{node}"),
    }
}

/// Writes a file atomically: a temporary file beside it, fsync, rename, fsync the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
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
