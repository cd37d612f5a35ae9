//! What the mesh holds: one record per module, the keep set's input.
//!
//! The controller writes a [`ModuleRecord`] for every module it builds
//! ([`record_build`] after each publish, [`forget_module`] when the mesh stops holding a
//! module, [`write_module_record`] for anything else); the collector only reads them
//! ([`read_module_records`]).
//!
//! # Where they are
//! Key `store/modules/<module>.json` of the mesh's [`RecordStore`]: the file
//! `<home>/store/modules/<module>.json` in the embedded default, the same key in the records
//! bucket on a fleet. Each is a [`ModuleRecord`] in JSON with `"format": 1`, written whole. A
//! module whose record is absent, or says `"held": false`, is one the mesh does not hold: it
//! keeps nothing.
//!
//! # Guarantees
//! - A dry-run build is never recorded (the rule “A merge heard twice makes one plan”):
//!   [`record_build`] refuses it.
//! - Two writers of the same record never lose each other's builds: the read-modify-write is
//!   [`RecordStore::update`] (a lock on a directory, compare-and-set on a bucket).

use crate::lock::PublishLock;
use mesh_model::build::{ArchiveRef, Build};
use mesh_records::record_store::{RecordStore, RecordStoreError};
use serde::{Deserialize, Serialize};

/// The version of [`ModuleRecord`] this crate writes and reads.
pub const MODULE_RECORD_FORMAT: u32 = 1;

/// Where module records are: `store/modules` in the mesh's [`RecordStore`].
pub const MODULE_RECORDS_DIR: &str = "store/modules";

/// Everything the keep set needs to know about one module (disk format, version
/// [`MODULE_RECORD_FORMAT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ModuleRecord {
    /// Always [`MODULE_RECORD_FORMAT`].
    pub format: u32,
    /// The module's name (also the file's name).
    pub module: String,
    /// Whether the mesh holds the module. A module it no longer holds keeps nothing.
    pub held: bool,
    /// The build the module's definition names now (what the mesh deploys).
    #[serde(default)]
    pub current: Option<ArchiveRef>,
    /// Every recorded build, oldest first.
    #[serde(default)]
    pub builds: Vec<Build>,
}

impl ModuleRecord {
    /// A new record for a module the mesh holds, with nothing built yet.
    pub fn new(module: &str) -> ModuleRecord {
        ModuleRecord {
            format: MODULE_RECORD_FORMAT,
            module: module.to_owned(),
            held: true,
            current: None,
            builds: Vec::new(),
        }
    }
}

/// An error reading or writing module records.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The record store could not be read or written.
    #[error(transparent)]
    Store(#[from] RecordStoreError),
    /// A record that is not valid JSON for its format.
    #[error("module record {location} is not a valid record")]
    Json {
        /// Where it is.
        location: String,
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
    },
    /// A record of a format this build does not read.
    #[error(
        "module record {location} has format {found}; this mesh reads format {MODULE_RECORD_FORMAT}"
    )]
    Format {
        /// Where it is.
        location: String,
        /// The format found.
        found: u32,
    },
    /// A record pinning archives: pins were never written by the mesh and are no reason to
    /// keep an archive (the rule “What the mesh keeps, for a reason”); remove `pinned` from the
    /// record.
    #[error(
        "module record {location} pins archives; pins are not kept by the mesh (the rule “What the mesh keeps, for a reason”): \
         remove its `pinned` list (keep an archive by making it the module's current build)"
    )]
    Pinned {
        /// Where it is.
        location: String,
    },
    /// A record whose `module` is not its key's name.
    #[error("module record {location} names module `{module}`, not its own name")]
    Mismatch {
        /// Where it is.
        location: String,
        /// The module it names.
        module: String,
    },
    /// A module name that cannot name a record.
    #[error("`{module}` cannot name a module record")]
    Name {
        /// The name.
        module: String,
    },
    /// A dry-run build was offered for recording.
    #[error("build of `{module}` at {commit} is a dry run; dry runs are never recorded")]
    DryRun {
        /// The module.
        module: String,
        /// The commit.
        commit: String,
    },
}

fn record_key(module: &str) -> Result<String, RecordError> {
    let plain = !module.is_empty()
        && !module.starts_with('.')
        && !module.ends_with('.')
        && module
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !plain {
        return Err(RecordError::Name {
            module: module.to_owned(),
        });
    }
    Ok(format!("{MODULE_RECORDS_DIR}/{module}.json"))
}

fn parse_record(location: &str, module: &str, bytes: &[u8]) -> Result<ModuleRecord, RecordError> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|source| RecordError::Json {
            location: location.to_owned(),
            source,
        })?;
    let mut value = value;
    let found = value.get("format").and_then(|f| f.as_u64()).unwrap_or(0) as u32;
    if found != MODULE_RECORD_FORMAT {
        return Err(RecordError::Format {
            location: location.to_owned(),
            found,
        });
    }
    // Records written before pins were removed hold `"pinned": []`:
    // nothing ever pinned an archive, so an empty list is read as nothing; a list that is not
    // empty was written by hand and is refused, naming it, rather than silently dropped.
    if let Some(object) = value.as_object_mut() {
        match object.remove("pinned") {
            None => {}
            Some(serde_json::Value::Array(pins)) if pins.is_empty() => {}
            Some(_) => {
                return Err(RecordError::Pinned {
                    location: location.to_owned(),
                })
            }
        }
    }
    let record: ModuleRecord =
        serde_json::from_value(value).map_err(|source| RecordError::Json {
            location: location.to_owned(),
            source,
        })?;
    if record.module != module {
        return Err(RecordError::Mismatch {
            location: location.to_owned(),
            module: record.module,
        });
    }
    Ok(record)
}

/// Reads every module record, sorted by module. None recorded means no records.
///
/// # Errors
/// [`RecordError`] naming the first record that cannot be read or is not a valid record: a
/// collector must not decide what to keep from a partial view.
pub fn read_module_records(records: &dyn RecordStore) -> Result<Vec<ModuleRecord>, RecordError> {
    let mut out = Vec::new();
    for name in records.list(MODULE_RECORDS_DIR)? {
        let Some(module) = name.strip_suffix(".json") else {
            continue;
        };
        out.extend(read_module_record(records, module)?);
    }
    Ok(out)
}

/// Reads one module's record, `None` when it has none.
///
/// # Errors
/// As [`read_module_records`], for this one record.
pub fn read_module_record(
    records: &dyn RecordStore,
    module: &str,
) -> Result<Option<ModuleRecord>, RecordError> {
    let key = record_key(module)?;
    match records.get(&key)? {
        None => Ok(None),
        Some(bytes) => parse_record(&records.locate(&key), module, &bytes).map(Some),
    }
}

/// Writes a module's record, replacing what was there.
///
/// # Errors
/// [`RecordError::Name`] for a module name that cannot name a record, [`RecordError::Store`]
/// naming the record that could not be written.
pub fn write_module_record(
    records: &dyn RecordStore,
    record: &ModuleRecord,
) -> Result<(), RecordError> {
    let key = record_key(&record.module)?;
    let bytes = serde_json::to_vec_pretty(record).expect("a module record always serializes");
    records.put(&key, &bytes)?;
    Ok(())
}

fn update_record(
    records: &dyn RecordStore,
    module: &str,
    mut change: impl FnMut(&mut ModuleRecord),
) -> Result<ModuleRecord, RecordError> {
    let key = record_key(module)?;
    let location = records.locate(&key);
    let written = records.update(&key, &mut |current| {
        let mut record = match current {
            Some(bytes) => parse_record(&location, module, bytes).map_err(|e| e.to_string())?,
            None => ModuleRecord::new(module),
        };
        change(&mut record);
        Ok(serde_json::to_vec_pretty(&record).expect("a module record always serializes"))
    })?;
    parse_record(&location, module, &written)
}

/// Records a published build: appends it to its module's builds, makes it the module's
/// current build, and marks the module held. Call it while still holding the
/// [`PublishLock`] the publish took, so no sweep runs between publish and record.
///
/// # Guarantees
/// Idempotent for the same build: recording it twice keeps one entry.
///
/// # Errors
/// [`RecordError::DryRun`] for a dry-run build (nothing is written); [`RecordError`] naming
/// the record that could not be read or written.
pub fn record_build(
    records: &dyn RecordStore,
    _lock: &PublishLock,
    build: &Build,
) -> Result<ModuleRecord, RecordError> {
    if build.dry_run {
        return Err(RecordError::DryRun {
            module: build.module.clone(),
            commit: build.commit.clone(),
        });
    }
    update_record(records, &build.module, |record| {
        if !record.builds.contains(build) {
            record.builds.push(build.clone());
        }
        record.current = Some(build.archive.clone());
        record.held = true;
    })
}

/// Marks a module as no longer held by the mesh: from the next sweep on it keeps nothing.
/// Its history stays in the record.
///
/// # Errors
/// [`RecordError`] naming the record that could not be read or written.
pub fn forget_module(records: &dyn RecordStore, module: &str) -> Result<ModuleRecord, RecordError> {
    update_record(records, module, |record| record.held = false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_records::record_store::DirRecords;

    /// Pins were a field nothing set. Records written before it was removed
    /// hold an empty list, read as nothing; a list that is not empty is refused, naming the
    /// record, rather than dropped unseen.
    #[test]
    fn an_older_records_empty_pins_are_read_and_real_pins_refused() {
        let dir = tempfile::tempdir().unwrap();
        let records = DirRecords::new(dir.path());
        let older = r#"{"format": 1, "module": "web", "held": true, "current": null,
                        "pinned": [], "builds": []}"#;
        records
            .put("store/modules/web.json", older.as_bytes())
            .unwrap();
        let read = read_module_record(&records, "web").unwrap().unwrap();
        assert_eq!(read, ModuleRecord::new("web"));
        let pinning = r#"{"format": 1, "module": "api", "held": true,
                          "pinned": [{"digest": "sha256:aa", "size": 1}]}"#;
        records
            .put("store/modules/api.json", pinning.as_bytes())
            .unwrap();
        let error = read_module_records(&records).unwrap_err().to_string();
        assert!(
            error.contains("api.json") && error.contains("pins archives"),
            "{error}"
        );
    }
}
