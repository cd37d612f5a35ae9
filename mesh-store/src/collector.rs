//! The collector's run, whole: what `mesh-collector sweep` and `mesh-collector collect` do,
//! as calls a tool can make without copying the binary (the rules “What the mesh keeps, for a
//! reason”, “The sweep holds before it lets go” and “Nothing fails silently”).
//!
//! Start at [`Collector::open`]: it opens the store a [`CollectorOptions`] names and takes the
//! store lock. Then [`Collector::run`] with the records the mesh keeps — files under the home,
//! or the controller's records bucket on a fleet's bus, which the caller opens (this crate
//! knows no bus) — and a [`RunOptions`]: it holds the controller's plans lease when asked,
//! reads what the mesh holds ([`crate::records`]), computes what it keeps ([`crate::keep`]),
//! and sweeps ([`crate::sweep`]) or collects ([`crate::collect`]), answering a [`RunOutcome`].
//! Last, [`RunOutcome::keep_problem`] records what the run left wrong as a problem of the
//! store ([`crate::problems`]), which the controller's `status` shows, or clears it.
//!
//! # Guarantees
//! - The store lock is held from [`Collector::open`] until the [`Collector`] is dropped, the
//!   records read included: no publish on this machine falls between the reading of the
//!   records and the letting go. Asked for, the plans lease is held for the whole of
//!   [`Collector::run`]: no controller on any machine publishes meanwhile.
//! - A real collection of a registry never runs without the commands that stop and start it.
//! - A dry run asked for records no problem; a run that leaves every kept archive held clears
//!   the store's.

use crate::collect::{
    collect, CollectError, CollectReport, CommandProcess, GarbageCollector, LayoutCollector,
    RegistryCollector,
};
use crate::keep::keep_set;
use crate::layout::OciLayoutStore;
use crate::lock::{LockError, SweepLock};
use crate::open::open_store_with;
use crate::problems::{clear_problem, record_problem, ProblemError, ProblemKind};
use crate::records::{read_module_records, RecordError};
use crate::store::{default_store_spec, ArchiveStore, StoreAccess, StoreError, StoreSpec};
use crate::sweep::{sweep, KeptState, SweepReport};
use mesh_records::lease::{Lease, LeaseError};
use mesh_records::record_store::RecordStore;
use std::path::PathBuf;
use std::sync::Arc;

/// Which store a [`Collector`] works on, under which mesh home.
#[derive(Debug, Clone)]
pub struct CollectorOptions {
    /// The mesh home (the controller's): the store lock is under it, and so is the default
    /// store.
    pub home: PathBuf,
    /// The store; `None`: the home's own, `oci:<home>/store/oci` ([`default_store_spec`]).
    pub store: Option<StoreSpec>,
    /// The registry's CA and the controller's credentials (the collector holds and lets go
    /// as the controller).
    pub access: StoreAccess,
}

/// What a run does.
#[derive(Debug, Clone)]
pub enum Operation {
    /// Hold every kept archive, then let go of every held archive not kept ([`sweep`]).
    Sweep,
    /// Sweep, then delete what nothing holds ([`collect`]): for real only when every kept
    /// archive is held. A registry is collected as its [`RegistryCollection`] says.
    Collect(RegistryCollection),
}

impl Operation {
    /// The operation's name, as the command line types it (`sweep`, `collect`).
    pub fn name(&self) -> &'static str {
        match self {
            Operation::Sweep => "sweep",
            Operation::Collect(_) => "collect",
        }
    }
}

/// How a registry is collected: by its own `garbage-collect`, stopped for a real run and
/// started again after ([`RegistryCollector`]). An OCI layout needs none of it.
#[derive(Debug, Clone)]
pub struct RegistryCollection {
    /// The configuration file the registry serves with; needed to collect a registry.
    pub config: Option<PathBuf>,
    /// The registry binary (`/usr/bin/docker-registry`).
    pub binary: PathBuf,
    /// A shell command that stops the registry; needed, with `start`, for a real collection.
    pub stop: Option<String>,
    /// A shell command that starts the registry again.
    pub start: Option<String>,
}

/// How a [`Collector::run`] goes.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Sweep, or collect.
    pub operation: Operation,
    /// Change nothing: say what would be held, let go and deleted.
    pub dry_run: bool,
    /// Hold the controller's plans lease in the records for the whole run (records on a
    /// fleet's bus, where a controller on another machine publishes builds while it holds
    /// it): the run waits while a controller holds it, saying for whom.
    pub hold_plans_lease: bool,
    /// Who runs it, as the lease names its holder (`mesh-collector sweep`).
    pub by: String,
}

/// An error that stops a run: nothing is let go after it.
#[derive(Debug, thiserror::Error)]
pub enum CollectorError {
    /// The store could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store lock could not be taken.
    #[error("the store lock is shared with every publish")]
    Lock(#[source] LockError),
    /// The plans lease could not be taken.
    #[error("taking the plans lock on the bus, so no build is published meanwhile")]
    Lease(#[source] LeaseError),
    /// What the mesh holds could not be read.
    #[error(transparent)]
    Records(#[from] RecordError),
    /// A registry is collected only with the configuration file it serves with, and none was
    /// given.
    #[error("collecting a registry needs the configuration file it serves with")]
    NoRegistryConfig,
    /// A real collection of a registry stops it for the run, and the commands that stop and
    /// start it were not both given.
    #[error(
        "a real collection of a registry stops it for the run: it needs the commands that stop \
         and start it"
    )]
    NoRegistryProcess,
    /// The collection itself failed.
    #[error(transparent)]
    Collect(#[from] CollectError),
}

/// A store opened for a sweep or a collection, its lock held until this is dropped.
pub struct Collector {
    spec: StoreSpec,
    access: StoreAccess,
    store: Box<dyn ArchiveStore>,
    lock: SweepLock,
}

impl Collector {
    /// Opens the store `options` names and takes the store lock, waiting for every publish
    /// under way on this machine to finish.
    ///
    /// # Errors
    /// [`CollectorError::Store`] when the store cannot be opened (a file of its access cannot
    /// be used), [`CollectorError::Lock`] when the lock cannot be taken.
    pub async fn open(options: CollectorOptions) -> Result<Collector, CollectorError> {
        let spec = options
            .store
            .unwrap_or_else(|| default_store_spec(&options.home));
        let store = open_store_with(&spec, &options.access)?;
        let lock = SweepLock::acquire(&options.home)
            .await
            .map_err(CollectorError::Lock)?;
        Ok(Collector {
            spec,
            access: options.access,
            store,
            lock,
        })
    }

    /// The store, as its spec names it.
    pub fn spec(&self) -> &StoreSpec {
        &self.spec
    }

    /// Sweeps or collects the store: takes the plans lease when asked, reads what the mesh
    /// holds from `records`, computes what it keeps, and runs the operation.
    ///
    /// # Guarantees
    /// See the module docs; a sweep's failures are in its report (and the collection then
    /// runs dry), never a lost view.
    ///
    /// # Errors
    /// [`CollectorError`] when the lease cannot be taken, the records cannot be read, a
    /// registry's collection lacks what it needs, or the collection itself fails.
    pub async fn run(
        &self,
        records: Arc<dyn RecordStore>,
        options: RunOptions,
    ) -> Result<RunOutcome, CollectorError> {
        let _lease = if options.hold_plans_lease {
            Some(
                Lease::acquire(Arc::clone(&records), &options.by, Arc::default())
                    .map_err(CollectorError::Lease)?,
            )
        } else {
            None
        };
        let keep = keep_set(&read_module_records(records.as_ref())?);
        match options.operation {
            Operation::Sweep => Ok(RunOutcome::Swept(
                sweep(&*self.store, &self.lock, &keep, options.dry_run).await,
            )),
            Operation::Collect(registry) => {
                let mut collector = self.garbage_collector(registry, options.dry_run)?;
                let report = collect(
                    &*self.store,
                    &self.lock,
                    &keep,
                    &mut *collector,
                    options.dry_run,
                )
                .await?;
                Ok(RunOutcome::Collected(report))
            }
        }
    }

    /// The store's own way of deleting what nothing holds.
    fn garbage_collector(
        &self,
        registry: RegistryCollection,
        dry_run: bool,
    ) -> Result<Box<dyn GarbageCollector>, CollectorError> {
        Ok(match &self.spec {
            StoreSpec::Layout(path) => Box::new(LayoutCollector {
                layout: OciLayoutStore::new(path),
            }),
            StoreSpec::Registry { .. } => {
                let Some(config) = registry.config else {
                    return Err(CollectorError::NoRegistryConfig);
                };
                let process = match (registry.stop, registry.start) {
                    (Some(stop), Some(start)) => CommandProcess { stop, start },
                    // A dry run does not stop the registry: these are never run.
                    _ if dry_run => CommandProcess {
                        stop: "false".to_owned(),
                        start: "true".to_owned(),
                    },
                    _ => return Err(CollectorError::NoRegistryProcess),
                };
                Box::new(RegistryCollector {
                    binary: registry.binary,
                    config,
                    process: Box::new(process),
                    base_url: self.spec.registry_base_url().unwrap_or_default(),
                    ca_file: self.access.ca_file.clone(),
                })
            }
        })
    }
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// A sweep.
    Swept(SweepReport),
    /// A collection, and the sweep that ran first.
    Collected(CollectReport),
}

/// What a run comes to, as one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every kept archive is held (and a collection collected as asked).
    AllHeld,
    /// A kept archive is not held (missing, or unheld on a dry run): a collection ran, or
    /// would run, dry.
    NotHeld,
    /// The sweep failed somewhere (nothing was let go), or a kept archive's blob is gone
    /// after a real collection.
    Failed,
}

impl RunOutcome {
    /// The sweep (a collection's is the one that ran first).
    pub fn sweep(&self) -> &SweepReport {
        match self {
            RunOutcome::Swept(sweep) => sweep,
            RunOutcome::Collected(collection) => &collection.sweep,
        }
    }

    /// The collection, when the run was one.
    pub fn collection(&self) -> Option<&CollectReport> {
        match self {
            RunOutcome::Swept(_) => None,
            RunOutcome::Collected(collection) => Some(collection),
        }
    }

    /// What the run comes to.
    pub fn verdict(&self) -> Verdict {
        let sweep = self.sweep();
        let lost = self.collection().is_some_and(|c| !c.lost.is_empty());
        if !sweep.failures.is_empty() || lost {
            Verdict::Failed
        } else if !sweep.all_held() {
            Verdict::NotHeld
        } else {
            Verdict::AllHeld
        }
    }

    /// What the run left wrong, a line each: kept archives missing, unheld or unknown, the
    /// sweep's failures, blobs lost, and why a collection ran dry.
    pub fn problem_details(&self) -> Vec<String> {
        let sweep = self.sweep();
        let mut details: Vec<String> = sweep
            .missing()
            .map(|kept| format!("missing {}: its blob is gone", kept.archive.digest))
            .collect();
        details.extend(sweep.kept.iter().filter_map(|kept| match &kept.state {
            KeptState::WouldHold => Some(format!("unheld {}", kept.archive.digest)),
            KeptState::Failed { error } => {
                Some(format!("unknown {}: {error}", kept.archive.digest))
            }
            KeptState::AlreadyHeld | KeptState::HeldNow | KeptState::Missing => None,
        }));
        details.extend(sweep.failures.iter().map(|f| format!("failed: {f}")));
        if let Some(collection) = self.collection() {
            details.extend(collection.lost.iter().map(|d| format!("LOST {d}")));
            if let Some(why) = &collection.refused {
                details.push(format!("collection ran dry: {why}"));
            }
        }
        details
    }

    /// Keeps what the run left wrong where the controller's `status` reads it: a problem of
    /// the store ([`ProblemKind::Collection`]) recorded at `now` as seen by `by` (`mesh-collector
    /// sweep`), unless every kept archive is held, which clears it. A dry run asked for
    /// changes nothing.
    ///
    /// # Errors
    /// [`ProblemError`] when the problem cannot be read or written.
    pub fn keep_problem(
        &self,
        records: &dyn RecordStore,
        by: &str,
        now: u64,
    ) -> Result<(), ProblemError> {
        let sweep = self.sweep();
        if sweep.dry_run {
            return Ok(());
        }
        if self.verdict() == Verdict::AllHeld {
            clear_problem(records, ProblemKind::Collection, &sweep.store)?;
            return Ok(());
        }
        record_problem(
            records,
            ProblemKind::Collection,
            &sweep.store,
            &format!("`{by}`: {}", sweep.summary()),
            self.problem_details(),
            now,
            by,
        )?;
        Ok(())
    }
}
