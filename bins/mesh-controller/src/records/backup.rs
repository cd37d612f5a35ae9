//! Backing up the controller's records and restoring them: `records export FILE` and
//! `records import FILE` (*nothing kept grows with the number of plans*: the records can be
//! exported and restored).
//!
//! An archive is a text file, one JSON object a line: a header, then one line per record in
//! key order, its bytes in base64 with their size and SHA-256, so a record comes back byte for
//! byte and a damaged archive is refused before anything is written:
//!
//! ```text
//! {"format":1,"kind":"mesh-records","records":2,"from":"bucket MESH_RECORDS on nats://…","made-at":1764763200}
//! {"key":"bus/nkeys/a","size":57,"sha256":"sha256:…","bytes":"VUFCQ0…"}
//! {"key":"inventory.toml","size":120,"sha256":"sha256:…","bytes":"YnVzLW5v…"}
//! ```
//!
//! # Invariants
//! - An export is taken under the plans lock: no plan, rollout, push or collection writes
//!   records while it reads them. A secret is in it as the records keep it, ciphertext.
//! - The archive holds the records only, never what stays on the controller's machine (the
//!   catalogue, the mesh's secrets key, the controller's own bus password and seed) nor the
//!   plans lease.
//! - An import writes into an empty bucket or home only: one holding a record the archive does
//!   not hold byte for byte is refused by name, nothing written. The inventory is written last,
//!   so an import stopped part way holds no mesh, and running it again finishes it.
//! - An import writes records only — the inventory and keys of the record families
//!   ([`crate::home::keys`]) — never what stays on the machine, whatever an archive's keys say
//!   (its digests are of the bytes, not of the keys).
//! - A newer minor version's fields in the archive are ignored; a newer format is named.

use crate::bus::credentials;
use crate::error::{file_error, Error, Result};
use crate::home::Home;
use base64::Engine as _;
use mesh_model::inventory::INVENTORY_FILE;
use serde::{Deserialize, Serialize};
use std::io::{BufRead as _, Write as _};
use std::path::Path;

/// The archive format this build writes and reads.
pub(crate) const ARCHIVE_FORMAT: u32 = 1;

/// What the header says the file is.
const ARCHIVE_KIND: &str = "mesh-records";

/// Where the plans lease is kept on a bus: the lock of whoever runs, never a record to restore.
const LOCKS_DIR: &str = "locks";

/// The archive's first line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Header {
    format: u32,
    kind: String,
    records: usize,
    from: String,
    made_at: u64,
}

/// One record of an archive.
#[derive(Debug, Serialize, Deserialize)]
struct Line {
    key: String,
    size: usize,
    sha256: String,
    bytes: String,
}

/// What `records export` wrote.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Exported {
    /// The archive.
    pub file: String,
    /// Where the records came from.
    pub from: String,
    /// The archive's format.
    pub format: u32,
    /// How many records.
    pub records: usize,
    /// Their bytes, in all.
    pub bytes: u64,
}

/// What `records import FILE` restored.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Restored {
    /// The archive.
    pub file: String,
    /// Where the records are now.
    pub into: String,
    /// Where the archive says they came from.
    pub from: String,
    /// How many records.
    pub records: usize,
    /// Of those, how many were there already, byte for byte (an import run again).
    pub already: usize,
}

/// Every record key of `home`, sorted: the whole bucket on a bus (but the plans lease), the
/// record directories and the inventory under a home (never the controller's own password and
/// seed, which stay on its machine).
///
/// # Errors
/// A listing cannot be read.
pub(crate) fn record_keys(home: &Home) -> Result<Vec<String>> {
    let records = home.records();
    let mut keys = if home.records_on_bus() {
        records.keys_under("")?
    } else {
        let mut keys = Vec::new();
        for dir in crate::home::keys::RECORD_DIRS {
            keys.extend(
                records
                    .keys_under(dir)?
                    .into_iter()
                    .filter(|key| !kept_on_the_machine(key)),
            );
        }
        if records.get(INVENTORY_FILE)?.is_some() {
            keys.push(INVENTORY_FILE.to_owned());
        }
        keys
    };
    keys.retain(|key| !key.starts_with(&format!("{LOCKS_DIR}/")));
    keys.sort();
    keys.dedup();
    Ok(keys)
}

/// Whether `key`, under a family's directory, is what stays on the controller's machine: its
/// own bus password and seed.
fn kept_on_the_machine(key: &str) -> bool {
    key.strip_prefix("bus/passwords/") == Some(mesh_bus::subjects::CONTROLLER_USER)
        || key == credentials::CONTROLLER_SEED_FILE
}

/// Whether `key` is a record an archive may restore: the inventory, or a key under a family's
/// directory ([`crate::home::keys::RECORD_DIRS`]) that does not stay on the machine — never
/// the mesh's secrets key, the catalogue, the plans lease or any other file of a home.
fn is_record(key: &str) -> bool {
    let in_a_family = crate::home::keys::RECORD_DIRS.iter().any(|dir| {
        key.strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
    });
    (key == INVENTORY_FILE || in_a_family) && !kept_on_the_machine(key)
}

/// `records export FILE`: writes every record of `home` to an archive at `file` (mode 0600,
/// written whole: a temporary file beside it renamed into place), `now` its date.
///
/// # Errors
/// The home holds no mesh; a record cannot be read (no archive is left); the file cannot be
/// written.
pub fn export(home: &Home, file: &Path, now: u64) -> Result<Exported> {
    home.require()?;
    let _lock = crate::plans::PlansLock::acquire(home, "records export")?;
    let from = home.records().name();
    let mut records = Vec::new();
    for key in record_keys(home)? {
        // A record removed between the listing and its read (a settings layer put back by
        // hand) is not in the archive; nothing the plans lock guards changes meanwhile.
        if let Some(bytes) = home.get(&key)? {
            records.push((key, bytes));
        }
    }
    let header = Header {
        format: ARCHIVE_FORMAT,
        kind: ARCHIVE_KIND.to_owned(),
        records: records.len(),
        from: from.clone(),
        made_at: now,
    };
    let mut text = Vec::new();
    push_line(&mut text, &header);
    let mut bytes = 0;
    for (key, record) in &records {
        bytes += record.len() as u64;
        push_line(
            &mut text,
            &Line {
                key: key.clone(),
                size: record.len(),
                sha256: mesh_model::sha256_digest(record),
                bytes: base64::engine::general_purpose::STANDARD.encode(record),
            },
        );
    }
    write_private(file, &text)?;
    Ok(Exported {
        file: file.display().to_string(),
        from,
        format: ARCHIVE_FORMAT,
        records: records.len(),
        bytes,
    })
}

/// Appends `value` to `text` as one line of JSON.
fn push_line(text: &mut Vec<u8>, value: &impl Serialize) {
    serde_json::to_writer(&mut *text, value).expect("an archive line always serializes");
    text.push(b'\n');
}

/// Writes `bytes` to `path` readable by its owner alone, whole.
fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("records");
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut out| {
            out.write_all(bytes)?;
            out.sync_all()
        });
    if let Err(error) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(file_error("writing", &tmp)(error));
    }
    std::fs::rename(&tmp, path).map_err(file_error("renaming into", path))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(file_error("syncing", dir))
}

/// An archive read whole and checked: its header and every record.
struct Archive {
    from: String,
    records: Vec<(String, Vec<u8>)>,
}

/// Reads and checks the archive at `file`: every line, size and digest, before anything is
/// written.
fn read_archive(file: &Path) -> Result<Archive> {
    let bad = |line: usize, what: String| Error::BadRecord {
        location: format!("{} line {line}", file.display()),
        what,
        source: None,
    };
    let opened = std::fs::File::open(file).map_err(file_error("reading", file))?;
    let mut lines = std::io::BufReader::new(opened).lines();
    let first = lines
        .next()
        .transpose()
        .map_err(file_error("reading", file))?
        .ok_or_else(|| bad(1, "a records archive (the file is empty)".to_owned()))?;
    let header: Header = serde_json::from_str(&first)
        .map_err(|e| bad(1, format!("a records archive's header ({e})")))?;
    if header.kind != ARCHIVE_KIND {
        return Err(bad(
            1,
            format!("a records archive (it says it is `{}`)", header.kind),
        ));
    }
    if header.format > ARCHIVE_FORMAT {
        return Err(bad(
            1,
            format!(
                "an archive this controller reads (it is of format {}, written by a newer \
                 mesh-controller; this one reads up to {ARCHIVE_FORMAT})",
                header.format
            ),
        ));
    }
    let mut records: Vec<(String, Vec<u8>)> = Vec::with_capacity(header.records.min(1 << 20));
    for (index, text) in lines.enumerate() {
        let number = index + 2;
        let text = text.map_err(file_error("reading", file))?;
        if text.is_empty() {
            continue;
        }
        let line: Line = serde_json::from_str(&text)
            .map_err(|e| bad(number, format!("a record of the archive ({e})")))?;
        if !mesh_store::record_store::is_key(&line.key)
            || line.key.starts_with(&format!("{LOCKS_DIR}/"))
        {
            return Err(bad(
                number,
                format!("a record key (`{}` is none)", line.key.escape_debug()),
            ));
        }
        // The digests are of the bytes: a key is checked for what it is.
        if !is_record(&line.key) {
            return Err(bad(
                number,
                format!(
                    "a record of a mesh (`{}` is none: an archive holds the inventory and \
                     the records of its families, never what stays on the controller's machine)",
                    line.key
                ),
            ));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(line.bytes.as_bytes())
            .map_err(|e| bad(number, format!("`{}` in base64 ({e})", line.key)))?;
        if bytes.len() != line.size || mesh_model::sha256_digest(&bytes) != line.sha256 {
            return Err(bad(
                number,
                format!(
                    "`{}` as the archive made it: {} bytes and {}, it holds {} bytes of {}",
                    line.key,
                    line.size,
                    line.sha256,
                    bytes.len(),
                    mesh_model::sha256_digest(&bytes)
                ),
            ));
        }
        // In key order, a record a key lies under came before it: the two could not both be
        // written (the import would stop part way).
        let under = line
            .key
            .match_indices('/')
            .map(|(at, _)| &line.key[..at])
            .find(|dir| {
                records
                    .binary_search_by(|(key, _)| key.as_str().cmp(dir))
                    .is_ok()
            });
        if let Some(record) = under {
            return Err(bad(
                number,
                format!(
                    "a record of a mesh (`{}` lies under the record `{record}`: a record is \
                     never a directory)",
                    line.key
                ),
            ));
        }
        if records.last().is_some_and(|(last, _)| *last >= line.key) {
            return Err(bad(
                number,
                format!(
                    "in key order (`{}` comes after an equal or later key)",
                    line.key
                ),
            ));
        }
        records.push((line.key, bytes));
    }
    if records.len() != header.records {
        return Err(bad(
            1,
            format!(
                "whole: its header counts {} records, it holds {} (cut off?)",
                header.records,
                records.len()
            ),
        ));
    }
    if !records.iter().any(|(key, _)| key == INVENTORY_FILE) {
        return Err(bad(
            1,
            format!("an archive of a mesh: it holds no {INVENTORY_FILE}"),
        ));
    }
    Ok(Archive {
        from: header.from,
        records,
    })
}

/// `records import FILE`: restores the archive at `file` into `home`'s records — a bus's
/// bucket, or the files under a home — which must be empty: one holding any record the
/// archive does not hold byte for byte is refused naming it, and nothing is written. Every
/// record is written, the inventory last; one already there byte for byte (an import run again
/// after it stopped) is left.
///
/// # Errors
/// The archive cannot be read or is damaged (nothing written); the records are not empty
/// (nothing written); a record cannot be written (run it again).
pub fn import(home: &Home, file: &Path) -> Result<Restored> {
    let archive = read_archive(file)?;
    let into = home.records().name();
    let wanted: std::collections::BTreeMap<&str, &[u8]> = archive
        .records
        .iter()
        .map(|(key, bytes)| (key.as_str(), bytes.as_slice()))
        .collect();
    let mut already = std::collections::BTreeSet::new();
    let mut strangers = Vec::new();
    for key in record_keys(home)? {
        let held = home.get(&key)?;
        match (wanted.get(key.as_str()), held) {
            (Some(bytes), Some(held)) if *bytes == held.as_slice() => {
                already.insert(key);
            }
            (_, None) => {}
            _ => strangers.push(key),
        }
    }
    if !strangers.is_empty() {
        let shown: Vec<&str> = strangers.iter().take(5).map(String::as_str).collect();
        return Err(Error::refused(format!(
            "{into} is not empty: it holds {} record{} the archive does not hold byte for byte ({}{}); records \
             import restores into an empty bucket or home only; nothing was written",
            strangers.len(),
            if strangers.len() == 1 { "" } else { "s" },
            shown.join(", "),
            if strangers.len() > shown.len() { ", …" } else { "" }
        )));
    }
    let (inventory, rest): (Vec<_>, Vec<_>) = archive
        .records
        .iter()
        .partition(|(key, _)| key == INVENTORY_FILE);
    for (key, bytes) in rest.into_iter().chain(inventory) {
        if !already.contains(key) {
            home.put(key, bytes)?;
        }
    }
    Ok(Restored {
        file: file.display().to_string(),
        into,
        from: archive.from,
        records: archive.records.len(),
        already: already.len(),
    })
}
