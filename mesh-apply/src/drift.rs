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
use crate::engine::look::Look;
use crate::paths::RootPaths;
use crate::stamps::StatCache;
use crate::HostConfig;
use mesh_model::declaration::Declared;
use mesh_model::report::{Drift, DriftAction, Report};
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
        let held: Vec<String> = crate::window::open_windows(&config.state_dir, now)
            .map(|windows| windows.into_iter().flat_map(|w| w.containers).collect())
            .unwrap_or_default();
        let mut out = Vec::new();
        if report.declaration != declared.digest() {
            return out;
        }
        let mut look = Look {
            paths: RootPaths::new(&config.root),
            accounts: ShadowUtils::new(&config.root).read().ok(),
            cache: &mut self.cache,
            hashed: 0,
            full,
            now,
            containers,
            container_prefix: &config.container_prefix,
            held: &held,
        };
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
            crate::engine::kinds::drift(resource, declared, &mut look, &mut say);
        }
        self.hashed = look.hashed;
        self.save();
        out
    }

    /// Writes the stat cache when it changed (a failure only costs work later).
    pub fn save(&mut self) {
        self.cache.save();
    }
}
