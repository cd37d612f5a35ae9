//! The keep set: which archives the mesh keeps, and why (the rules “What the mesh keeps, for a
//! reason” and “An archive is published with a manifest that holds it”).
//!
//! [`keep_set`] is a pure function of the module records: no IO, no clock.
//!
//! # Guarantees
//! A digest is kept only for a module the mesh holds, and then because
//! - its definition names it now ([`KeepReason::Current`]), or
//! - it is among the [`RECENT_BUILDS_KEPT`] most recent distinct archives built for the module
//!   ([`KeepReason::Recent`]; most recent by build time, a later record winning a tie).
//!
//! A module the mesh no longer holds keeps nothing, however recent its builds.

use crate::records::ModuleRecord;
use mesh_model::build::ArchiveRef;
use serde::Serialize;
use std::collections::BTreeMap;

/// How many of a module's most recent builds are kept.
pub const RECENT_BUILDS_KEPT: usize = 5;

/// Why an archive is kept.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum KeepReason {
    /// The module's definition names it: it is the module's current build.
    Current {
        /// The module.
        module: String,
    },
    /// It is among the module's most recent builds.
    Recent {
        /// The module.
        module: String,
        /// 1 for the most recent, up to [`RECENT_BUILDS_KEPT`].
        rank: usize,
    },
}

impl std::fmt::Display for KeepReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeepReason::Current { module } => write!(f, "current build of {module}"),
            KeepReason::Recent { module, rank } => {
                write!(f, "recent build #{rank} of {module}")
            }
        }
    }
}

/// One kept archive and every reason it is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeptArchive {
    /// The archive.
    pub archive: ArchiveRef,
    /// Why, sorted.
    pub reasons: Vec<KeepReason>,
}

/// Every kept archive, by digest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KeepSet {
    /// Archive digest → the kept archive.
    pub archives: BTreeMap<String, KeptArchive>,
}

impl KeepSet {
    /// Whether `digest` is kept.
    pub fn keeps(&self, digest: &str) -> bool {
        self.archives.contains_key(digest)
    }

    /// How many archives are kept.
    pub fn len(&self) -> usize {
        self.archives.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.archives.is_empty()
    }

    fn add(&mut self, archive: &ArchiveRef, reason: KeepReason) {
        let kept = self
            .archives
            .entry(archive.digest.clone())
            .or_insert_with(|| KeptArchive {
                archive: archive.clone(),
                reasons: Vec::new(),
            });
        if !kept.reasons.contains(&reason) {
            kept.reasons.push(reason);
            kept.reasons.sort();
        }
    }
}

/// The keep set of the given module records.
///
/// # Guarantees
/// Pure and deterministic; see the module docs for the two reasons.
pub fn keep_set(records: &[ModuleRecord]) -> KeepSet {
    let mut set = KeepSet::default();
    for record in records.iter().filter(|r| r.held) {
        let module = &record.module;
        if let Some(current) = &record.current {
            set.add(
                current,
                KeepReason::Current {
                    module: module.clone(),
                },
            );
        }
        // Most recent first: by time, a later entry winning a tie.
        let mut builds: Vec<(usize, &mesh_model::build::Build)> = record
            .builds
            .iter()
            .enumerate()
            .filter(|(_, b)| !b.dry_run)
            .collect();
        builds.sort_by(|(ia, a), (ib, b)| b.at.cmp(&a.at).then(ib.cmp(ia)));
        let mut seen: Vec<&str> = Vec::new();
        for (_, build) in builds {
            if seen.len() == RECENT_BUILDS_KEPT {
                break;
            }
            if seen.contains(&build.archive.digest.as_str()) {
                continue;
            }
            seen.push(&build.archive.digest);
            set.add(
                &build.archive,
                KeepReason::Recent {
                    module: module.clone(),
                    rank: seen.len(),
                },
            );
        }
    }
    set
}
