//! The settings layers and the history of every layer replaced: `settings/<module>/mesh.json`
//! and `settings/<module>/nodes/<node>.json`, each replaced whole, the one it replaced kept
//! under `history/settings/…` ([`LayerStore`]).

use super::Home;
use crate::error::{bad_record, Error, Result};
use mesh_model::inventory::{layer_file, LayerScope};
use mesh_store::record_store::Swap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How many times a layer is read again while other writers change it first.
pub(crate) const LAYER_TRIES: u32 = 100;

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
pub(crate) const HISTORY_FORMAT: u32 = 1;

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

/// Where a layer's replaced versions are kept.
fn history_dir(module: &str, scope: &LayerScope) -> String {
    match scope {
        LayerScope::Mesh => format!("history/settings/{module}/mesh"),
        LayerScope::Node(node) => format!("history/settings/{module}/nodes/{node}"),
    }
}

/// The settings layers and their history ([`crate::home::keys`]).
#[derive(Clone, Copy)]
pub struct LayerStore<'h> {
    home: &'h Home,
}

impl Home {
    /// The settings layers and their history.
    pub fn layers(&self) -> LayerStore<'_> {
        LayerStore { home: self }
    }
}

impl LayerStore<'_> {
    /// Reads one layer, if set.
    pub fn get(&self, module: &str, scope: &LayerScope) -> Result<Option<Value>> {
        self.home.get_json(&layer_file(module, scope))
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
    pub fn replace(
        &self,
        module: &str,
        scope: &LayerScope,
        command: &str,
        now: u64,
        decide: &mut dyn FnMut(Option<&Value>) -> Result<LayerChange>,
    ) -> Result<Replaced> {
        let key = layer_file(module, scope);
        for raced in 0..LAYER_TRIES {
            let found = self.home.records.get_versioned(&key)?;
            let (old, version) = match found {
                None => (None, None),
                Some((bytes, version)) => {
                    let layer: Value = serde_json::from_slice(&bytes)
                        .map_err(bad_record(self.home.records.locate(&key), "valid JSON"))?;
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
                .home
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
                Swap::Stale => self.home.records.delete(&kept_key)?,
            }
        }
        Err(Error::refused(format!(
            "{} was changed by other writers {LAYER_TRIES} times in a row while it was being \
             replaced; nothing was changed",
            self.home.records.locate(&key)
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
            .home
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
            match self
                .home
                .records
                .compare_and_set(&key, None, Some(&bytes))?
            {
                Swap::Done => return Ok((record, key)),
                // Another writer took this revision: the next one.
                Swap::Stale => revision += 1,
            }
        }
        Err(Error::refused(format!(
            "no free revision in {} after {LAYER_TRIES} tries; nothing was changed",
            self.home.records.locate(&dir)
        )))
    }

    /// Every replaced layer, oldest first.
    pub fn history(&self, module: &str, scope: &LayerScope) -> Result<Vec<HistoryRecord>> {
        let dir = history_dir(module, scope);
        let mut records = Vec::new();
        for stem in self.home.json_stems(&dir)? {
            let key = format!("{dir}/{stem}.json");
            let Some(value) = self.home.get_json(&key)? else {
                continue;
            };
            let record: HistoryRecord =
                self.home
                    .versioned(&key, value, "a history record", HISTORY_FORMAT)?;
            records.push(record);
        }
        records.sort_by_key(|r| r.revision);
        Ok(records)
    }
}
