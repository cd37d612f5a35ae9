//! What the mesh holds: one record per module under the mesh home, the keep set's input.
//!
//! The controller writes a [`ModuleRecord`] for every module it builds
//! ([`record_build`] after each publish, [`forget_module`] when the mesh stops holding a
//! module, [`write_module_record`] for anything else); the collector only reads them
//! ([`read_module_records`]).
//!
//! # Layout on disk
//! `<home>/store/modules/<module>.json`, one file per module, each a [`ModuleRecord`] in JSON
//! with `"format": 1`, written atomically (temporary file, fsync, rename). A module whose file
//! is absent, or says `"held": false`, is one the mesh does not hold: it keeps nothing.
//!
//! # Guarantees
//! - A dry-run build is never recorded (rule 18): [`record_build`] refuses it.
//! - Two writers of the same record never lose each other's builds: the read-modify-write is
//!   done under a lock on `<home>/store/modules/.lock`.

use crate::lock::{exclusive_file_lock, write_atomically, PublishLock};
use mesh_model::build::{ArchiveRef, Build};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The version of [`ModuleRecord`] this crate writes and reads.
pub const MODULE_RECORD_FORMAT: u32 = 1;

/// Everything the keep set needs to know about one module (disk format, version
/// [`MODULE_RECORD_FORMAT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
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
    /// Archives an inventory or definition pins for this module.
    #[serde(default)]
    pub pinned: Vec<ArchiveRef>,
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
            pinned: Vec::new(),
            builds: Vec::new(),
        }
    }
}

/// An error reading or writing module records.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// A file or directory could not be read or written.
    #[error("cannot access module record {path}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A record that is not valid JSON for its format.
    #[error("module record {path} is not a valid record")]
    Json {
        /// The path.
        path: PathBuf,
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
    },
    /// A record of a format this build does not read.
    #[error(
        "module record {path} has format {found}; this mesh reads format {MODULE_RECORD_FORMAT}"
    )]
    Format {
        /// The path.
        path: PathBuf,
        /// The format found.
        found: u32,
    },
    /// A record whose `module` is not its file's name.
    #[error("module record {path} names module `{module}`, not its file's name")]
    Mismatch {
        /// The path.
        path: PathBuf,
        /// The module it names.
        module: String,
    },
    /// A module name that cannot be a file name.
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

/// The directory holding module records: `<home>/store/modules`.
pub fn module_records_dir(home: &Path) -> PathBuf {
    home.join("store").join("modules")
}

fn record_path(home: &Path, module: &str) -> Result<PathBuf, RecordError> {
    let plain = !module.is_empty()
        && !module.starts_with('.')
        && module
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !plain {
        return Err(RecordError::Name {
            module: module.to_owned(),
        });
    }
    Ok(module_records_dir(home).join(format!("{module}.json")))
}

fn read_record(path: &Path) -> Result<ModuleRecord, RecordError> {
    let bytes = std::fs::read(path).map_err(|source| RecordError::Io {
        path: path.to_owned(),
        source,
    })?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|source| RecordError::Json {
            path: path.to_owned(),
            source,
        })?;
    let found = value.get("format").and_then(|f| f.as_u64()).unwrap_or(0) as u32;
    if found != MODULE_RECORD_FORMAT {
        return Err(RecordError::Format {
            path: path.to_owned(),
            found,
        });
    }
    let record: ModuleRecord =
        serde_json::from_value(value).map_err(|source| RecordError::Json {
            path: path.to_owned(),
            source,
        })?;
    let expected = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    if record.module != expected {
        return Err(RecordError::Mismatch {
            path: path.to_owned(),
            module: record.module,
        });
    }
    Ok(record)
}

/// Reads every module record under `home`, sorted by module. No directory means no records.
///
/// # Errors
/// [`RecordError`] naming the first file that cannot be read or is not a valid record: a
/// collector must not decide what to keep from a partial view.
pub fn read_module_records(home: &Path) -> Result<Vec<ModuleRecord>, RecordError> {
    let dir = module_records_dir(home);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(RecordError::Io { path: dir, source }),
    };
    let mut paths = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| RecordError::Io {
            path: dir.clone(),
            source,
        })?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".json") && !name.starts_with('.') {
            paths.push(entry.path());
        }
    }
    paths.sort();
    paths.iter().map(|p| read_record(p)).collect()
}

/// Reads one module's record, `None` when it has none.
///
/// # Errors
/// As [`read_module_records`], for this one file.
pub fn read_module_record(home: &Path, module: &str) -> Result<Option<ModuleRecord>, RecordError> {
    let path = record_path(home, module)?;
    if !path.exists() {
        return Ok(None);
    }
    read_record(&path).map(Some)
}

/// Writes a module's record atomically, replacing what was there.
///
/// # Errors
/// [`RecordError::Name`] for a module name that cannot be a file name, [`RecordError::Io`]
/// naming the path that could not be written.
pub fn write_module_record(home: &Path, record: &ModuleRecord) -> Result<(), RecordError> {
    let path = record_path(home, &record.module)?;
    let bytes = serde_json::to_vec_pretty(record).expect("a module record always serializes");
    write_atomically(&path, &bytes).map_err(|source| RecordError::Io { path, source })
}

fn update_record(
    home: &Path,
    module: &str,
    change: impl FnOnce(&mut ModuleRecord),
) -> Result<ModuleRecord, RecordError> {
    let lock_path = module_records_dir(home).join(".lock");
    let _guard = exclusive_file_lock(&lock_path).map_err(|source| RecordError::Io {
        path: lock_path.clone(),
        source,
    })?;
    let mut record = read_module_record(home, module)?.unwrap_or_else(|| ModuleRecord::new(module));
    change(&mut record);
    write_module_record(home, &record)?;
    Ok(record)
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
/// the path that could not be read or written.
pub fn record_build(
    home: &Path,
    _lock: &PublishLock,
    build: &Build,
) -> Result<ModuleRecord, RecordError> {
    if build.dry_run {
        return Err(RecordError::DryRun {
            module: build.module.clone(),
            commit: build.commit.clone(),
        });
    }
    update_record(home, &build.module, |record| {
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
/// [`RecordError`] naming the path that could not be read or written.
pub fn forget_module(home: &Path, module: &str) -> Result<ModuleRecord, RecordError> {
    update_record(home, module, |record| record.held = false)
}
