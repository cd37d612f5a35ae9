//! The sweep (the rules “The sweep holds before it lets go” and “An archive is published with a
//! manifest that holds it”): hold every kept archive, then let go of the rest.
//!
//! Start with [`sweep`]; it answers a [`SweepReport`] that says, per kept archive, whether it
//! was already held, held by this sweep, or is missing, and per released archive what became
//! of it.
//!
//! # Guarantees
//! - Every kept archive is held (its holding manifest recomputed from the record) before
//!   anything is let go.
//! - Nothing is let go on a partial view: if the listing or any kept archive's check or hold
//!   fails, the release phase does not run and the report says why.
//! - Letting go removes the holding manifest only; the blob goes at the next collection.
//! - Requests on a registry: one listing, then one per kept archive that is already held;
//!   more only for archives that need holding or letting go.
//! - Never runs without the [`SweepLock`]: no publish is half-recorded while it looks.

use crate::keep::{KeepReason, KeepSet};
use crate::lock::SweepLock;
use crate::store::{ArchiveStore, Holding, Release, StoreError};
use mesh_model::build::ArchiveRef;
use serde::Serialize;

/// What the sweep found or did for one kept archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum KeptState {
    /// Held before the sweep.
    AlreadyHeld,
    /// Not held before; this sweep held it (its blob was there).
    HeldNow,
    /// Not held; a real sweep would hold it (dry run).
    WouldHold,
    /// Its blob is not in the store: it cannot be held. Loud: a fetch of it would fail.
    Missing,
    /// The store could not say or do: the archive may be unheld.
    Failed {
        /// The error, as a person reads it.
        error: String,
    },
}

/// One kept archive in a [`SweepReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeptOutcome {
    /// The archive.
    pub archive: ArchiveRef,
    /// Why it is kept.
    pub reasons: Vec<KeepReason>,
    /// What the sweep found or did.
    #[serde(flatten)]
    pub state: KeptState,
}

/// What became of one archive that is held but not kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum ReleasedState {
    /// Its holding manifest was removed.
    Released,
    /// Its holding manifest was gone already.
    AlreadyGone,
    /// A real sweep would remove its holding manifest (dry run).
    WouldRelease,
    /// Not let go: the sweep's view was partial (see [`SweepReport::failures`]).
    Skipped,
    /// Removing its holding manifest failed.
    Failed {
        /// The error, as a person reads it.
        error: String,
    },
}

/// One archive let go (or not) in a [`SweepReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReleasedOutcome {
    /// The archive's digest.
    pub digest: String,
    /// What became of it.
    #[serde(flatten)]
    pub state: ReleasedState,
}

/// The answer of a sweep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SweepReport {
    /// The store swept.
    pub store: String,
    /// Whether nothing was changed.
    pub dry_run: bool,
    /// Every kept archive, by digest.
    pub kept: Vec<KeptOutcome>,
    /// Every held archive that is not kept, by digest.
    pub released: Vec<ReleasedOutcome>,
    /// Everything that went wrong, each naming store and digest.
    pub failures: Vec<String>,
}

impl SweepReport {
    /// How many archives are kept.
    pub fn kept_count(&self) -> usize {
        self.kept.len()
    }

    /// How many kept archives are held after the sweep.
    pub fn held_count(&self) -> usize {
        self.kept
            .iter()
            .filter(|k| matches!(k.state, KeptState::AlreadyHeld | KeptState::HeldNow))
            .count()
    }

    /// The kept archives whose blob is gone.
    pub fn missing(&self) -> impl Iterator<Item = &KeptOutcome> {
        self.kept
            .iter()
            .filter(|k| matches!(k.state, KeptState::Missing))
    }

    /// Whether every kept archive is held ("N of N held").
    pub fn all_held(&self) -> bool {
        self.held_count() == self.kept_count()
    }

    /// `held N of M`.
    pub fn held_line(&self) -> String {
        format!("held {} of {}", self.held_count(), self.kept_count())
    }

    /// How many archives not kept were let go ([`ReleasedState::Released`]).
    pub fn released_count(&self) -> usize {
        self.released_in(&ReleasedState::Released)
    }

    fn released_in(&self, state: &ReleasedState) -> usize {
        self.released.iter().filter(|r| &r.state == state).count()
    }

    /// The sweep in one line: `kept N, held H of N, missing M, released R` (`would release R`
    /// on a dry run).
    pub fn summary(&self) -> String {
        let released = if self.dry_run {
            format!(
                "would release {}",
                self.released_in(&ReleasedState::WouldRelease)
            )
        } else {
            format!("released {}", self.released_count())
        };
        format!(
            "kept {}, {}, missing {}, {released}",
            self.kept_count(),
            self.held_line(),
            self.missing().count()
        )
    }
}

fn describe(error: &StoreError) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

async fn hold_one(
    store: &dyn ArchiveStore,
    archive: &ArchiveRef,
    listed: bool,
    dry_run: bool,
) -> Result<KeptState, StoreError> {
    if listed && store.holding(archive).await? == Holding::Held {
        return Ok(KeptState::AlreadyHeld);
    }
    if !store.has_blob(&archive.digest).await? {
        return Ok(KeptState::Missing);
    }
    if dry_run {
        return Ok(KeptState::WouldHold);
    }
    match store.hold(archive).await {
        Ok(()) => Ok(KeptState::HeldNow),
        // The blob went between the check and the hold.
        Err(StoreError::Missing { .. }) => Ok(KeptState::Missing),
        Err(error) => Err(error),
    }
}

/// Sweeps a store: holds every archive of `keep`, then lets go of every held archive not in
/// it, unless the view was partial. With `dry_run`, nothing is changed and the report says
/// what would be.
///
/// # Guarantees
/// See the module docs. Idempotent: a second sweep with the same keep set finds every kept
/// archive already held and releases nothing.
///
/// # Errors
/// None: every failure is in [`SweepReport::failures`] (and the kept archive it concerns is
/// [`KeptState::Failed`]), so the caller always has the whole picture to print.
pub async fn sweep(
    store: &dyn ArchiveStore,
    _lock: &SweepLock,
    keep: &KeepSet,
    dry_run: bool,
) -> SweepReport {
    let mut report = SweepReport {
        store: store.name(),
        dry_run,
        kept: Vec::new(),
        released: Vec::new(),
        failures: Vec::new(),
    };
    let listed = match store.list_held().await {
        Ok(listed) => Some(listed),
        Err(error) => {
            report
                .failures
                .push(format!("cannot list held archives: {}", describe(&error)));
            None
        }
    };
    for kept in keep.archives.values() {
        // Without a listing, check each one: holding() says for itself.
        let is_listed = listed
            .as_ref()
            .is_none_or(|l| l.contains(&kept.archive.digest));
        let state = match hold_one(store, &kept.archive, is_listed, dry_run).await {
            Ok(state) => state,
            Err(error) => {
                let error = describe(&error);
                report.failures.push(error.clone());
                KeptState::Failed { error }
            }
        };
        report.kept.push(KeptOutcome {
            archive: kept.archive.clone(),
            reasons: kept.reasons.clone(),
            state,
        });
    }
    let Some(listed) = listed else {
        return report;
    };
    let partial = !report.failures.is_empty();
    for digest in listed.iter().filter(|d| !keep.keeps(d)) {
        let state = if partial {
            ReleasedState::Skipped
        } else if dry_run {
            ReleasedState::WouldRelease
        } else {
            match store.release(digest).await {
                Ok(Release::Removed) => ReleasedState::Released,
                Ok(Release::AlreadyGone) => ReleasedState::AlreadyGone,
                Err(error) => {
                    let error = describe(&error);
                    report.failures.push(error.clone());
                    ReleasedState::Failed { error }
                }
            }
        };
        report.released.push(ReleasedOutcome {
            digest: digest.clone(),
            state,
        });
    }
    report
}
