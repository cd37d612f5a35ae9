//! Drift (rule 28): a managed resource changed by hand between declarations. [`Examiner`]
//! compares what the machine holds with what the host left there — every resource the last
//! apply of the same declaration reported as taken — and says what differs, changing nothing.
//!
//! It is cheap enough to run every few seconds: a file's content is read and hashed only when
//! its size, mtime, ctime or inode changed since it was last seen as declared (git's index does
//! the same; ctime cannot be set back from user space), kept in a **stat cache** under the state
//! directory (`drift/stat-cache.json`, its own versioned format). A full check that hashes every
//! file ([`Examiner::examine`] with `full`) is for a longer interval.
//!
//! What it must never do: change anything under the root, or look at a path the declaration
//! does not name.

use crate::accounts::{Accounts, ShadowUtils};
use crate::containers::ContainerRuntime;
use crate::paths::RootPaths;
use crate::HostConfig;
use mesh_model::declaration::{Declaration, Spec};
use mesh_model::report::{Drift, DriftAction, Report};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// The version of the stat cache's format this build writes and reads.
pub const STAT_CACHE_FORMAT: u32 = 1;

const STAT_CACHE_FILE: &str = "drift/stat-cache.json";

/// What a file was when it was last hashed: its stamp and the digest of its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Stamp {
    /// Size in bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// Status change time, nanoseconds since the epoch.
    pub ctime_ns: i64,
    /// Inode number.
    pub ino: u64,
    /// `sha256:<hex>` of its bytes then.
    pub digest: String,
}

impl Stamp {
    fn same_file(&self, meta: &std::fs::Metadata) -> bool {
        self.size == meta.size()
            && self.ino == meta.ino()
            && self.mtime_ns == nanos(meta.mtime(), meta.mtime_nsec())
            && self.ctime_ns == nanos(meta.ctime(), meta.ctime_nsec())
    }
}

fn nanos(secs: i64, nsecs: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsecs)
}

/// The stat cache (`drift/stat-cache.json`, version [`STAT_CACHE_FORMAT`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct StatCache {
    format: u32,
    /// Machine path → its stamp.
    files: BTreeMap<String, Stamp>,
}

/// Examines a machine for drift; keeps the stat cache between examinations.
#[derive(Debug)]
pub struct Examiner {
    cache: StatCache,
    path: PathBuf,
    dirty: bool,
    /// Files hashed by the last examination (for benchmarks and tests).
    pub hashed: usize,
}

impl Examiner {
    /// The examiner of the host whose state directory is `state_dir`, with its stat cache (an
    /// unreadable or other-format cache is started afresh: it only saves work).
    pub fn open(state_dir: &Path) -> Examiner {
        let path = state_dir.join(STAT_CACHE_FILE);
        let cache = std::fs::read(&path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<StatCache>(&bytes).ok())
            .filter(|cache| cache.format == STAT_CACHE_FORMAT)
            .unwrap_or(StatCache {
                format: STAT_CACHE_FORMAT,
                files: BTreeMap::new(),
            });
        Examiner {
            cache,
            path,
            dirty: false,
            hashed: 0,
        }
    }

    /// What differs from what the host left, for every resource of `declaration` that
    /// `report` (the last apply of that declaration) says took; `now` stamps each drift.
    /// `full` hashes every file whatever its stamp. Each drift's `action` is what the
    /// declaration's policy for its module says ([`Declaration::drift_policy`]).
    ///
    /// Containers are asked of `containers` ([`ContainerRuntime::examine`]); those held still
    /// by an open maintenance window are not examined.
    ///
    /// # Guarantees
    /// Changes nothing under the root; only the stat cache in the state directory is written
    /// (best effort, [`Examiner::save`]).
    pub fn examine(
        &mut self,
        config: &HostConfig,
        declaration: &Declaration,
        report: &Report,
        containers: &dyn ContainerRuntime,
        now: u64,
        full: bool,
    ) -> Vec<Drift> {
        self.hashed = 0;
        let mut paths = RootPaths::new(&config.root);
        let accounts = ShadowUtils::new(&config.root).read().ok();
        let held: Vec<String> = crate::window::open_windows(&config.state_dir, now)
            .map(|windows| windows.into_iter().flat_map(|w| w.containers).collect())
            .unwrap_or_default();
        let mut out = Vec::new();
        if report.declaration != declaration.digest() {
            return out;
        }
        for resource in &declaration.resources {
            if !report
                .resources
                .get(&resource.id)
                .is_some_and(mesh_model::report::Outcome::took)
            {
                continue;
            }
            let action = match declaration.drift_policy(&resource.module) {
                mesh_model::module::DriftPolicy::Correct => DriftAction::Corrected,
                mesh_model::module::DriftPolicy::Report => DriftAction::Left,
            };
            let mut say = |field: &str, was: String, found: String| {
                out.push(Drift {
                    resource: resource.id.clone(),
                    field: field.to_owned(),
                    was,
                    found,
                    seen_at: now,
                    action,
                });
            };
            match &resource.spec {
                Spec::File(spec) => {
                    let resolved = match paths.resolve(&spec.path) {
                        Ok(resolved) => resolved,
                        Err(problem) => {
                            say("exists", "a regular file".into(), problem);
                            continue;
                        }
                    };
                    let Some(meta) = resolved.meta else {
                        say("exists", "a regular file".into(), "nothing".into());
                        continue;
                    };
                    if !meta.is_file() {
                        say(
                            "exists",
                            "a regular file".into(),
                            "not a regular file".into(),
                        );
                        continue;
                    }
                    mode_owner(
                        &meta,
                        spec.mode,
                        &spec.owner,
                        &spec.group,
                        &accounts,
                        &mut say,
                    );
                    let Some(declared) = spec.content_digest() else {
                        continue;
                    };
                    match self.digest_of(&spec.path, &resolved.full, &meta, full) {
                        Ok(found) if found == declared => {}
                        Ok(found) => say("content", declared, found),
                        Err(error) => say("content", declared, format!("unreadable: {error}")),
                    }
                }
                Spec::Directory(spec) => {
                    let meta = match paths.resolve(&spec.path) {
                        Ok(resolved) => resolved.meta,
                        Err(problem) => {
                            say("exists", "a directory".into(), problem);
                            continue;
                        }
                    };
                    match meta {
                        Some(meta) if meta.is_dir() => mode_owner(
                            &meta,
                            spec.mode,
                            &spec.owner,
                            &spec.group,
                            &accounts,
                            &mut say,
                        ),
                        Some(_) => say("exists", "a directory".into(), "not a directory".into()),
                        None => say("exists", "a directory".into(), "nothing".into()),
                    }
                }
                Spec::Membership(spec) => {
                    if let Some(db) = &accounts {
                        if !db.is_member(&spec.account, &spec.group) {
                            say(
                                "membership",
                                format!("{} in {}", spec.account, spec.group),
                                format!("{} not in {}", spec.account, spec.group),
                            );
                        }
                    }
                }
                Spec::Container(spec) => {
                    // Its name on this machine (`HostConfig::container_prefix`).
                    let name = format!("{}{}", config.container_prefix, spec.name);
                    if held.contains(&name) {
                        continue;
                    }
                    match containers.examine(&name) {
                        Ok(None) => {}
                        Ok(Some(found)) => say("running", "running".into(), found),
                        Err(error) => say("running", "running".into(), error),
                    }
                }
            }
        }
        self.save();
        out
    }

    /// The digest of the file at `full` (machine path `path`), hashed only when its stamp
    /// changed or `full`.
    fn digest_of(
        &mut self,
        path: &str,
        full_path: &Path,
        meta: &std::fs::Metadata,
        full: bool,
    ) -> std::io::Result<String> {
        if !full {
            if let Some(stamp) = self.cache.files.get(path) {
                if stamp.same_file(meta) {
                    return Ok(stamp.digest.clone());
                }
            }
        }
        let mut file = std::fs::File::open(full_path)?;
        let meta = file.metadata()?;
        let mut hasher = Sha256::new();
        let mut buffer = [0u8; 64 * 1024];
        loop {
            let n = file.read(&mut buffer)?;
            if n == 0 {
                break;
            }
            hasher.update(&buffer[..n]);
        }
        self.hashed += 1;
        let digest = format!("sha256:{}", hex::encode(hasher.finalize()));
        let stamp = Stamp {
            size: meta.size(),
            mtime_ns: nanos(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: nanos(meta.ctime(), meta.ctime_nsec()),
            ino: meta.ino(),
            digest: digest.clone(),
        };
        if self.cache.files.get(path) != Some(&stamp) {
            self.cache.files.insert(path.to_owned(), stamp);
            self.dirty = true;
        }
        Ok(digest)
    }

    /// Writes the stat cache when it changed (temp + rename; a failure only costs work later).
    pub fn save(&mut self) {
        if !self.dirty {
            return;
        }
        let Some(dir) = self.path.parent() else {
            return;
        };
        let temporary = dir.join(".stat-cache.json.new");
        let written = std::fs::create_dir_all(dir)
            .and_then(|()| {
                std::fs::write(
                    &temporary,
                    serde_json::to_vec(&self.cache).expect("a stat cache always serializes"),
                )
            })
            .and_then(|()| std::fs::rename(&temporary, &self.path));
        if written.is_ok() {
            self.dirty = false;
        }
    }
}

/// Says a differing mode, owner or group of `meta` against what is declared.
fn mode_owner(
    meta: &std::fs::Metadata,
    mode: u32,
    owner: &str,
    group: &str,
    accounts: &Option<crate::AccountDatabase>,
    say: &mut impl FnMut(&str, String, String),
) {
    let found = meta.mode() & 0o7777;
    if found != mode & 0o7777 {
        say("mode", format!("{mode:04o}"), format!("{found:04o}"));
    }
    let Some(db) = accounts else {
        return;
    };
    if let Some(uid) = db.uid(owner).filter(|uid| *uid != meta.uid()) {
        say(
            "owner",
            format!("{owner} ({uid})"),
            format!("uid {}", meta.uid()),
        );
    }
    if let Some(gid) = db.gid(group).filter(|gid| *gid != meta.gid()) {
        say(
            "group",
            format!("{group} ({gid})"),
            format!("gid {}", meta.gid()),
        );
    }
}
