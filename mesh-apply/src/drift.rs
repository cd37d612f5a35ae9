//! Drift (the rule “Drift is seen, and reported even when corrected”): a managed resource changed
//! by hand between declarations. [`Examiner`] compares what the machine holds with what the host
//! left there — every resource the last apply of the same declaration reported as taken — and says
//! what differs, changing nothing.
//!
//! It is cheap enough to run every few seconds: a file's content is read and hashed only when
//! its size, mtime, ctime or inode changed since it was last seen as declared (git's index does
//! the same; ctime cannot be set back from user space), kept in the **stat cache**
//! ([`crate::stamps`], shared with the apply engine). A full check that hashes every file
//! ([`Examiner::examine`] with `full`) is for a longer interval.
//!
//! What it must never do: change anything under the root, or look at a path the declaration
//! does not name.

use crate::accounts::{Accounts, ShadowUtils};
use crate::containers::ContainerRuntime;
use crate::paths::RootPaths;
use crate::stamps::StatCache;
use crate::HostConfig;
use mesh_model::declaration::{Declared, Spec};
use mesh_model::report::{Drift, DriftAction, Report};
use sha2::{Digest as _, Sha256};
use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

/// Examines a machine for drift; keeps the stat cache between examinations.
#[derive(Debug)]
pub struct Examiner {
    cache: StatCache,
    /// Files hashed by the last examination (for benchmarks and tests).
    pub hashed: usize,
}

impl Examiner {
    /// The examiner of the host whose state directory is `state_dir`.
    pub fn open(state_dir: &Path) -> Examiner {
        Examiner {
            cache: StatCache::open(state_dir),
            hashed: 0,
        }
    }

    /// What differs from what the host left, for every resource of `declared` that `report`
    /// (the last apply of that declaration) says took; `now` stamps each drift. A
    /// [`mesh_model::declaration::Sealed`] declaration is not hashed again on each look.
    /// `full` hashes every file whatever its stamp. Each drift's `action` is what the
    /// declaration's policy for its module says
    /// ([`mesh_model::declaration::Declaration::drift_policy`]).
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
        declared: &dyn Declared,
        report: &Report,
        containers: &dyn ContainerRuntime,
        now: u64,
        full: bool,
    ) -> Vec<Drift> {
        self.hashed = 0;
        // The apply engine keeps the same cache: what it wrote since is read afresh.
        self.cache.refresh();
        let mut paths = RootPaths::new(&config.root);
        let accounts = ShadowUtils::new(&config.root).read().ok();
        let held: Vec<String> = crate::window::open_windows(&config.state_dir, now)
            .map(|windows| windows.into_iter().flat_map(|w| w.containers).collect())
            .unwrap_or_default();
        let mut out = Vec::new();
        if report.declaration != declared.digest() {
            return out;
        }
        let declaration = declared.declaration();
        for resource in &declaration.resources {
            if !report
                .resources
                .get(&resource.id)
                .is_some_and(mesh_model::report::Outcome::took)
            {
                continue;
            }
            let action = match declaration.drift_policy(&resource.module) {
                mesh_model::drift::DriftPolicy::Correct => DriftAction::Corrected,
                mesh_model::drift::DriftPolicy::Report => DriftAction::Left,
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
                    // A file rendered from a secret is compared with what this host last
                    // wrote there, and its drift said without its content or its digest (the
                    // rule “A secret is readable only where it is used”).
                    let (declared, shown) = match (declared.content_digest(resource), &spec.sealed)
                    {
                        (Some(declared), _) => (declared.into_owned(), None),
                        (None, Some(pieces)) => match self.cache.left_by_the_mesh(&spec.path) {
                            Some(left) => (
                                left.to_owned(),
                                Some(mesh_model::secret::describe_sealed(pieces)),
                            ),
                            None => continue,
                        },
                        (None, None) => continue,
                    };
                    if !full && self.cache.known_digest(&spec.path, &meta) == Some(&*declared) {
                        continue;
                    }
                    let found = self.digest_of(&spec.path, &resolved.full, &meta, full, now);
                    match (found, shown) {
                        (Ok(found), _) if found == declared => {}
                        (Ok(_), Some(shown)) => say(
                            "content",
                            shown,
                            "other content (not shown: the file holds a secret)".into(),
                        ),
                        (Ok(found), None) => say("content", declared, found),
                        (Err(error), shown) => say(
                            "content",
                            shown.unwrap_or(declared),
                            format!("unreadable: {error}"),
                        ),
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
                // A network is seen through the containers that join it, an account through what
                // it owns.
                Spec::Network(_) | Spec::Account(_) => {}
                // A job's container is gone once it has run: nothing of it stays to drift.
                Spec::Job(_) => {}
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
        now: u64,
    ) -> std::io::Result<String> {
        if !full {
            if let Some(digest) = self.cache.known_digest(path, meta) {
                return Ok(digest.to_owned());
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
        let digest = mesh_model::sha256_text(hasher.finalize().into());
        self.cache.record(path, &meta, &digest, now);
        Ok(digest)
    }

    /// Writes the stat cache when it changed (a failure only costs work later).
    pub fn save(&mut self) {
        self.cache.save();
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
