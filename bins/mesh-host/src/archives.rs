//! Where a declaration's archived files come from: the host's archive cache, then the store.
//!
//! A format-2 declaration names, per module that comes from a build, its archive (digest and
//! size), and each of that module's files that is not a template by its path in the archive and
//! its content's digest. Before applying, the host reads every archive named ([`read_archived`]):
//! from its cache `<state-dir>/archives/<hex>` when the entry there is the digest named (an entry
//! that is not is removed), else from the store (`--store`), which checks the digest, and keeps
//! what it fetched in the cache. Each archived file is then read from its unpacked archive and
//! checked against its content digest.
//!
//! # Guarantees
//! - An archive that cannot be had (not in the cache, and the store cannot give it or gives
//!   other bytes) fails exactly the files read from it: each is reported `failed` with a reason
//!   naming the archive and the store, nothing of it is written, and every other resource is
//!   applied as usual (mesh-apply's [`mesh_apply::apply_archived`]).
//! - Nothing is taken from the cache or the store without its digest checked.
//! - The cache is only ever added to by whole, checked archives (temporary file, then rename).
//!
//! # Spread
//! A rollout sends many hosts their declarations at once; a host that must fetch an archive
//! first waits a random share of its spread ([`ArchiveSource::with_fetch_spread`], the
//! binary's `--fetch-spread`, [`DEFAULT_FETCH_SPREAD`] by default), once per declaration, so
//! the store is not asked by every host in the same instant. What is in the cache is never
//! waited for.
//!
//! # Pruning
//! After every apply ([`crate::apply_received`]), [`prune_after_apply`] removes the cached
//! archives the declaration just applied does not name, except the [`KEEP_UNNAMED`] most
//! recently used of them (a revert, or the previous declaration sent again, needs no fetch). It
//! also records which archives that declaration names ([`NAMED_RECORD`]), for `mesh-host
//! archives` ([`list_cache`]).
//!
//! "Used" is this host's own record: an entry's modification time, set to the host's clock when
//! the entry is written and every time it is read for an apply. No other machine's clock, and
//! no build time, enters into it.
//!
//! Pruning never:
//! - removes an archive the declaration just applied names;
//! - removes anything but a cache entry: a regular file named by 64 hex digits directly in the
//!   cache directory (other files, directories and symbolic links are left alone, and a
//!   symbolic link is never followed; a cache directory that is itself a link is not pruned);
//! - fails an apply: what it could not do is logged and returned, and the host says it in the
//!   apply's report as a note (a finding, which the report format already carries).

use mesh_apply::ArchivedContents;
use mesh_model::build::ArchiveRef;
use mesh_model::declaration::{Declaration, Spec};
use mesh_store::archive::unpack_archive;
use mesh_store::open_store_with;
use mesh_store::store::{ArchiveStore, StoreAccess, StoreError, StoreSpec};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

/// The directory, under a host's state directory, its archive cache lives in.
pub const CACHE_DIR: &str = "archives";

/// Where a host gets the archives its declarations name: its cache, then the store (if it was
/// given one).
#[derive(Clone)]
pub struct ArchiveSource {
    cache: PathBuf,
    state_dir: PathBuf,
    store: Option<Arc<dyn ArchiveStore>>,
    spread: std::time::Duration,
}

/// How long a host waits before it fetches from the store, at most, by default (`mesh-host
/// --fetch-spread`): a rollout's sends reach many hosts at once, and each waits its own random
/// share of this first, so the store is not asked by all of them in the same instant.
pub const DEFAULT_FETCH_SPREAD: std::time::Duration = std::time::Duration::from_secs(2);

/// A wait drawn evenly from `[0, spread)`: each host's own (seeded by this process's random
/// hasher keys and a count, so two hosts started together draw apart).
pub fn spread_delay(spread: std::time::Duration) -> std::time::Duration {
    use std::hash::{BuildHasher as _, Hasher as _};
    use std::sync::atomic::{AtomicU64, Ordering};
    static DRAWN: AtomicU64 = AtomicU64::new(0);
    if spread.is_zero() {
        return spread;
    }
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(DRAWN.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    let nanos = u64::try_from(spread.as_nanos()).unwrap_or(u64::MAX);
    std::time::Duration::from_nanos(hasher.finish() % nanos)
}

impl std::fmt::Debug for ArchiveSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveSource")
            .field("cache", &self.cache)
            .field("store", &self.store.as_ref().map(|s| s.name()))
            .finish()
    }
}

impl ArchiveSource {
    /// The cache under `state_dir`, and the store `spec` names (none: the cache only).
    ///
    /// # Errors
    /// [`StoreError`] when the store's client cannot be made (nothing is contacted yet).
    pub fn open(state_dir: &Path, spec: Option<&StoreSpec>) -> Result<ArchiveSource, StoreError> {
        ArchiveSource::open_with(state_dir, spec, &StoreAccess::default())
    }

    /// As [`ArchiveSource::open`], reaching a registry with `access` (its CA, the host's
    /// pull credentials).
    ///
    /// # Errors
    /// [`StoreError`] when the store's client cannot be made, or a file of `access` cannot be
    /// used (the credentials readable by others, say); nothing is contacted yet.
    pub fn open_with(
        state_dir: &Path,
        spec: Option<&StoreSpec>,
        access: &StoreAccess,
    ) -> Result<ArchiveSource, StoreError> {
        Ok(ArchiveSource {
            cache: state_dir.join(CACHE_DIR),
            state_dir: state_dir.to_owned(),
            store: spec
                .map(|spec| open_store_with(spec, access))
                .transpose()?
                .map(Arc::from),
            spread: std::time::Duration::ZERO,
        })
    }

    /// The same source, waiting a random share of `spread` ([`spread_delay`]) before the
    /// first fetch from the store of each declaration applied (none: zero, the default of the
    /// library; the binary's is [`DEFAULT_FETCH_SPREAD`]). An archive in the cache is never
    /// waited for.
    #[must_use]
    pub fn with_fetch_spread(mut self, spread: std::time::Duration) -> ArchiveSource {
        self.spread = spread;
        self
    }

    /// The most a fetch waits first ([`ArchiveSource::with_fetch_spread`]).
    pub fn fetch_spread(&self) -> std::time::Duration {
        self.spread
    }

    /// The cache under `state_dir` and no store.
    pub fn cache_only(state_dir: &Path) -> ArchiveSource {
        ArchiveSource {
            cache: state_dir.join(CACHE_DIR),
            state_dir: state_dir.to_owned(),
            store: None,
            spread: std::time::Duration::ZERO,
        }
    }

    /// The host's state directory (where its age key is, for a template of secrets).
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// Where the cache keeps an archive: `<state-dir>/archives/<hex of its digest>`.
    pub fn cache_path(&self, digest: &str) -> PathBuf {
        self.cache.join(entry_name(digest))
    }

    /// The store's name, for messages.
    fn store_name(&self) -> String {
        self.store
            .as_ref()
            .map_or_else(|| "no store (--store)".to_owned(), |s| s.name())
    }

    /// The archive's bytes from the cache, if an entry there is exactly them. An entry that is
    /// not (corrupt, cut short) is removed, so it is fetched again. An entry used is marked so (its
    /// modification time set to now: see [Pruning](self)).
    fn cached(&self, archive: &ArchiveRef) -> Option<Vec<u8>> {
        let path = self.cache_path(&archive.digest);
        let mut file = std::fs::File::open(&path).ok()?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).ok()?;
        if bytes.len() as u64 == archive.size && mesh_model::sha256_digest(&bytes) == archive.digest
        {
            // A link put in the cache is read through, but what it names is not touched.
            let is_file = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file());
            let marked = if is_file {
                file.set_modified(SystemTime::now())
            } else {
                Ok(())
            };
            if let Err(error) = marked {
                // Only the order pruning keeps entries in is older than it should be.
                tracing::warn!(path = %path.display(), %error, "cannot mark a cached archive used");
            }
            return Some(bytes);
        }
        tracing::warn!(path = %path.display(), digest = %archive.digest, "a cached archive is not its digest: fetched again");
        let _ = std::fs::remove_file(&path);
        None
    }

    /// Keeps checked archive bytes in the cache (best effort: a cache that cannot be written
    /// only means the next apply fetches again).
    fn keep(&self, archive: &ArchiveRef, bytes: &[u8]) {
        let path = self.cache_path(&archive.digest);
        let temp = path.with_extension("partial");
        let kept = std::fs::create_dir_all(&self.cache)
            .and_then(|()| std::fs::File::create(&temp))
            .and_then(|mut file| {
                file.write_all(bytes)?;
                file.set_modified(SystemTime::now())
            })
            .and_then(|()| std::fs::rename(&temp, &path));
        if let Err(error) = kept {
            let _ = std::fs::remove_file(&temp);
            tracing::warn!(path = %path.display(), %error, "cannot keep an archive in the cache");
        }
    }

    /// One archive's bytes, checked: from the cache, else fetched from the store and kept —
    /// after the spread's wait, the first time `waited` says none was taken yet.
    async fn bytes(
        &self,
        module: &str,
        archive: &ArchiveRef,
        waited: &mut bool,
    ) -> Result<Vec<u8>, String> {
        if let Some(bytes) = self.cached(archive) {
            return Ok(bytes);
        }
        let Some(store) = &self.store else {
            return Err(format!(
                "the archive of `{module}` ({}) is not in this host's cache and the host has no \
                 store to fetch it from (--store)",
                archive.digest
            ));
        };
        if !*waited {
            *waited = true;
            let delay = spread_delay(self.spread);
            if !delay.is_zero() {
                tracing::debug!(?delay, "waiting this host's share of the fetch spread");
                tokio::time::sleep(delay).await;
            }
        }
        match store.fetch(archive).await {
            Ok(fetched) => {
                self.keep(archive, &fetched.bytes);
                Ok(fetched.bytes)
            }
            Err(error) => Err(format!(
                "the archive of `{module}` ({}) could not be fetched from {}: {error}",
                archive.digest,
                store.name()
            )),
        }
    }
}

/// Reads the content of every archived file of `declaration` from its archive (see the module
/// docs): what [`mesh_apply::apply_archived`] applies with.
///
/// # Guarantees
/// Every archived file is in exactly one of [`ArchivedContents::read`] (its content, whose
/// digest is the one declared) and [`ArchivedContents::unavailable`] (why not, naming the archive
/// and, when it was fetched, the store).
pub async fn read_archived(declaration: &Declaration, source: &ArchiveSource) -> ArchivedContents {
    let mut contents = ArchivedContents::default();
    let mut trees = BTreeMap::new();
    let mut waited = false;
    for (module, archive) in &declaration.archives {
        let tree = match source.bytes(module, archive, &mut waited).await {
            Ok(bytes) => unpack_archive(&bytes, Some(archive)).map_err(|error| {
                format!(
                    "the archive of `{module}` ({}) from {} cannot be unpacked: {error}",
                    archive.digest,
                    source.store_name()
                )
            }),
            Err(reason) => Err(reason),
        };
        trees.insert(module.as_str(), tree);
    }
    for resource in &declaration.resources {
        let Spec::File(file) = &resource.spec else {
            continue;
        };
        let Some(wanted) = &file.source else {
            continue;
        };
        let read = match trees.get(resource.module.as_str()) {
            None => Err(format!(
                "its content is in the archive of `{}`, which the declaration does not name",
                resource.module
            )),
            Some(Err(reason)) => Err(reason.clone()),
            Some(Ok(tree)) => {
                let digest = &declaration.archives[&resource.module].digest;
                match tree.file(&wanted.path) {
                    None => Err(format!(
                        "`{}` is not a file of the archive of `{}` ({digest})",
                        wanted.path, resource.module
                    )),
                    Some(bytes) if mesh_model::sha256_digest(bytes) != wanted.sha256 => {
                        Err(format!(
                            "`{}` in the archive of `{}` ({digest}) is {}, the declaration says {}",
                            wanted.path,
                            resource.module,
                            mesh_model::sha256_digest(bytes),
                            wanted.sha256
                        ))
                    }
                    Some(bytes) => String::from_utf8(bytes.to_vec()).map_err(|_| {
                        format!(
                            "`{}` in the archive of `{}` ({digest}) is not UTF-8 text",
                            wanted.path, resource.module
                        )
                    }),
                }
            }
        };
        match read {
            Ok(content) => contents.read.insert(resource.id.clone(), content),
            Err(reason) => contents.unavailable.insert(resource.id.clone(), reason),
        };
    }
    contents
}

/// How many cached archives that the declaration just applied does not name are kept after an
/// apply: the most recently used ones.
pub const KEEP_UNNAMED: usize = 3;

/// The file, in the cache directory, recording the archives the last declaration applied names
/// ([`NamedRecord`]).
pub const NAMED_RECORD: &str = "named.json";

/// The format of [`NAMED_RECORD`] this build writes and reads.
pub const NAMED_RECORD_FORMAT: u32 = 1;

/// The archives the last declaration applied names (on disk: [`NAMED_RECORD`], format
/// [`NAMED_RECORD_FORMAT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct NamedRecord {
    /// The format version.
    pub format: u32,
    /// The digest of the declaration applied.
    pub declaration: String,
    /// The archives it names, by module.
    pub archives: BTreeMap<String, ArchiveRef>,
    /// When it was applied (seconds since the epoch, this host's clock).
    pub applied_at: u64,
}

/// One archive in the cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct CacheEntry {
    /// `sha256:<hex>` (what the entry is named by; its bytes are checked when it is read).
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
    /// When this host last wrote it or read it for an apply (seconds since the epoch).
    pub last_used: u64,
    /// The modules of the last declaration applied whose archive it is; empty when that
    /// declaration does not name it.
    pub named_by: Vec<String>,
    /// `last_used` to the precision the file system keeps (orders entries used within a
    /// second).
    #[serde(skip)]
    used: SystemTime,
}

/// What the cache holds: `mesh-host archives`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct CacheListing {
    /// The cache directory.
    pub cache: PathBuf,
    /// The last declaration applied, as the cache recorded it (none: nothing recorded yet).
    pub last_applied: Option<NamedRecord>,
    /// Every entry, most recently used first.
    pub archives: Vec<CacheEntry>,
    /// What could not be read (an unreadable record, an entry whose metadata cannot be read).
    pub problems: Vec<String>,
}

/// An archive's entry name in the cache: the hex of its digest.
fn entry_name(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}

/// Whether `name` is a cache entry's name: 64 lower-case hex digits.
fn is_entry_name(name: &str) -> bool {
    name.len() == 64
        && name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn epoch_secs(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The cache's entries (regular files named by 64 hex digits, symbolic links not followed),
/// most recently used first (then by digest), none of them named yet; and what could not be
/// read.
///
/// # Errors
/// The directory cannot be read (`NotFound`: there is no cache yet).
fn entries(dir: &Path) -> std::io::Result<(Vec<CacheEntry>, Vec<String>)> {
    let mut found = Vec::new();
    let mut problems = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = match entry {
            Ok(entry) => entry,
            Err(error) => {
                problems.push(format!("cannot list {}: {error}", dir.display()));
                continue;
            }
        };
        let name = entry.file_name();
        let Some(name) = name.to_str().filter(|name| is_entry_name(name)) else {
            continue;
        };
        // `DirEntry::metadata` does not follow a symbolic link: a link is not a file here.
        let metadata = match entry.metadata() {
            Ok(metadata) if metadata.file_type().is_file() => metadata,
            Ok(_) => continue,
            Err(error) => {
                problems.push(format!("cannot read {}: {error}", entry.path().display()));
                continue;
            }
        };
        let used = metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        found.push(CacheEntry {
            digest: format!("sha256:{name}"),
            size: metadata.len(),
            last_used: epoch_secs(used),
            named_by: Vec::new(),
            used,
        });
    }
    found.sort_by(|a, b| b.used.cmp(&a.used).then_with(|| a.digest.cmp(&b.digest)));
    Ok((found, problems))
}

/// Reads the record of the last declaration applied in the cache directory `dir`.
fn read_named(dir: &Path) -> Result<Option<NamedRecord>, String> {
    let path = dir.join(NAMED_RECORD);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
    };
    match serde_json::from_slice::<NamedRecord>(&bytes) {
        Ok(record) if record.format == NAMED_RECORD_FORMAT => Ok(Some(record)),
        Ok(record) => Err(format!(
            "{} is format {}, this host reads {NAMED_RECORD_FORMAT}",
            path.display(),
            record.format
        )),
        Err(error) => Err(format!("{} is not a record: {error}", path.display())),
    }
}

/// Writes the record of the last declaration applied (temporary file, then rename).
fn write_named(dir: &Path, record: &NamedRecord) -> std::io::Result<()> {
    let path = dir.join(NAMED_RECORD);
    let temp = dir.join(format!(".{NAMED_RECORD}.new"));
    let bytes = serde_json::to_vec_pretty(record).expect("a record always serializes");
    let written = std::fs::write(&temp, bytes).and_then(|()| std::fs::rename(&temp, &path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// What the cache under `state_dir` holds: every entry with its size, when it was last used,
/// and which modules of the last declaration applied name it.
///
/// # Errors
/// The cache directory exists and cannot be read (no cache yet is an empty listing).
pub fn list_cache(state_dir: &Path) -> std::io::Result<CacheListing> {
    let cache = state_dir.join(CACHE_DIR);
    let (mut archives, mut problems) = match entries(&cache) {
        Ok(found) => found,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => (Vec::new(), Vec::new()),
        Err(error) => return Err(error),
    };
    let last_applied = read_named(&cache).unwrap_or_else(|problem| {
        problems.push(problem);
        None
    });
    if let Some(record) = &last_applied {
        for entry in &mut archives {
            entry.named_by = record
                .archives
                .iter()
                .filter(|(_, archive)| archive.digest == entry.digest)
                .map(|(module, _)| module.clone())
                .collect();
        }
    }
    Ok(CacheListing {
        cache,
        last_applied,
        archives,
        problems,
    })
}

/// What a prune did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    /// The digests of the entries removed.
    pub removed: Vec<String>,
    /// What could not be done, each naming the path; empty when the prune went through.
    pub problems: Vec<String>,
}

/// Removes from the cache directory `dir` every entry whose digest is not in `named`, except the
/// `keep_unnamed` most recently used of them (see [Pruning](self)).
///
/// # Guarantees
/// Only cache entries are removed (regular files named by 64 hex digits; a symbolic link is
/// neither followed nor removed), never one in `named`; a cache directory that is a symbolic
/// link, or not there, is left as it is. Nothing is returned as an error: what could not be
/// done is in [`Pruned::problems`]. Idempotent: a second prune with the same `named` removes
/// nothing more.
pub fn prune_cache(dir: &Path, named: &BTreeSet<&str>, keep_unnamed: usize) -> Pruned {
    let mut pruned = Pruned::default();
    match std::fs::symlink_metadata(dir) {
        Ok(metadata) if metadata.is_dir() => {}
        Ok(metadata) if metadata.file_type().is_symlink() => {
            pruned.problems.push(format!(
                "{} is a symbolic link: the cache is not pruned through it (make it a \
                 directory, mounted there if it must be on another disk)",
                dir.display()
            ));
            return pruned;
        }
        Ok(_) => {
            pruned
                .problems
                .push(format!("{} is not a directory", dir.display()));
            return pruned;
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return pruned,
        Err(error) => {
            pruned
                .problems
                .push(format!("cannot read {}: {error}", dir.display()));
            return pruned;
        }
    }
    let (found, problems) = match entries(dir) {
        Ok(found) => found,
        Err(error) => {
            pruned
                .problems
                .push(format!("cannot list {}: {error}", dir.display()));
            return pruned;
        }
    };
    pruned.problems.extend(problems);
    let unnamed = found
        .iter()
        .filter(|entry| !named.contains(entry_name(&entry.digest)));
    for entry in unnamed.skip(keep_unnamed) {
        let path = dir.join(entry_name(&entry.digest));
        match std::fs::remove_file(&path) {
            Ok(()) => {
                tracing::info!(digest = %entry.digest, size = entry.size, "removed an archive no declaration here names from the cache");
                pruned.removed.push(entry.digest.clone());
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => pruned
                .problems
                .push(format!("cannot remove {}: {error}", path.display())),
        }
    }
    pruned
}

/// After `declaration` was applied: records the archives it names and prunes the cache under
/// `state_dir` ([`prune_cache`], keeping [`KEEP_UNNAMED`]). A host that has no cache directory
/// (it never cached an archive) does nothing.
///
/// # Guarantees
/// Never fails and never removes an archive `declaration` names. Returns what went wrong, as
/// one sentence for the report (also logged), or `None`.
pub fn prune_after_apply(
    state_dir: &Path,
    declaration: &Declaration,
    declaration_digest: &str,
    now: u64,
) -> Option<String> {
    let dir = state_dir.join(CACHE_DIR);
    if matches!(std::fs::symlink_metadata(&dir), Err(error) if error.kind() == std::io::ErrorKind::NotFound)
    {
        return None;
    }
    let named: BTreeSet<&str> = declaration
        .archives
        .values()
        .map(|archive| entry_name(&archive.digest))
        .collect();
    let mut pruned = prune_cache(&dir, &named, KEEP_UNNAMED);
    if std::fs::symlink_metadata(&dir).is_ok_and(|metadata| metadata.is_dir()) {
        let record = NamedRecord {
            format: NAMED_RECORD_FORMAT,
            declaration: declaration_digest.to_owned(),
            archives: declaration.archives.clone(),
            applied_at: now,
        };
        if let Err(error) = write_named(&dir, &record) {
            pruned.problems.push(format!(
                "cannot record the archives it names in {}: {error}",
                dir.join(NAMED_RECORD).display()
            ));
        }
    }
    if pruned.problems.is_empty() {
        return None;
    }
    let note = format!(
        "the archive cache {} could not be pruned as it should (it may keep growing; the apply \
         is not affected): {}",
        dir.display(),
        pruned.problems.join("; ")
    );
    tracing::warn!("{note}");
    Some(note)
}

/// A size for people: bytes, KiB, MiB or GiB.
fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 3] = ["KiB", "MiB", "GiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut size = bytes as f64 / 1024.0;
    let mut unit = 0;
    while size >= 1024.0 && unit + 1 < UNITS.len() {
        size /= 1024.0;
        unit += 1;
    }
    format!("{size:.1} {}", UNITS[unit])
}

/// `mesh-host archives` as a person reads it: a summary line, then one line per archive (most
/// recently used first), then what could not be read.
pub fn render_listing(listing: &CacheListing) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let total: u64 = listing.archives.iter().map(|entry| entry.size).sum();
    let _ = writeln!(
        out,
        "{}: {} archive(s), {}",
        listing.cache.display(),
        listing.archives.len(),
        human_size(total)
    );
    match &listing.last_applied {
        Some(record) => {
            let _ = writeln!(
                out,
                "last declaration applied: {} at {}, naming {} archive(s)",
                crate::short(&record.declaration),
                mesh_store::clock::rfc3339(record.applied_at),
                record.archives.len()
            );
        }
        None => out.push_str("last declaration applied: none recorded\n"),
    }
    for entry in &listing.archives {
        let named = if entry.named_by.is_empty() {
            "-".to_owned()
        } else {
            format!("named ({})", entry.named_by.join(", "))
        };
        let _ = writeln!(
            out,
            "  {}  {:>10}  used {}  {named}",
            entry.digest,
            human_size(entry.size),
            mesh_store::clock::rfc3339(entry.last_used)
        );
    }
    for problem in &listing.problems {
        let _ = writeln!(out, "  note: {problem}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_spread_delay_is_within_its_bound_and_draws_apart() {
        assert_eq!(spread_delay(Duration::ZERO), Duration::ZERO);
        let spread = Duration::from_secs(2);
        let drawn: BTreeSet<Duration> = (0..200).map(|_| spread_delay(spread)).collect();
        assert!(drawn.iter().all(|d| *d < spread), "{drawn:?}");
        // 200 draws over two seconds in nanoseconds: all alike would be no spread at all.
        assert!(drawn.len() > 150, "{} distinct of 200", drawn.len());
        let low = drawn.iter().filter(|d| **d < spread / 2).count();
        assert!(
            low > 0 && low < drawn.len(),
            "{low} of {} in the first half",
            drawn.len()
        );
    }
}
