//! Builds and what is deployed: a module's build is the deterministic archive of its directory
//! at a commit, published to the store held by its manifest and recorded; a module's
//! *deployed* build is the one its last finished rollout made current.
//!
//! Start at [`build_module`], then [`effective_catalogue`]: the catalogue every send composes
//! from — the home's `catalogue/modules`, with each module a rollout finished taken from its
//! deployed build in the store instead.
//!
//! # Layout
//! `<home>/deployed/<module>.json`: a [`DeployedRecord`] (the controller's own, versioned).
//! Builds are recorded by mesh-store under `<home>/store/modules/<module>.json`.
//!
//! # Invariants
//! - A dry-run build is never published, recorded or deployed (the rule “A merge heard twice makes
//!   one plan”).
//! - A module is built only when the whole catalogue at its commit validates for it: a module
//!   with any diagnostic fails its build, naming every problem.

use crate::error::{Context, Error, Result};
use crate::home::Home;
use mesh_model::build::{ArchiveRef, Build};
use mesh_model::module::{load_catalogue, Catalogue, CatalogueSource};
use mesh_model::Diagnostic;
use mesh_store::archive::{archive_tree, unpack_archive};
use mesh_store::store::ArchiveStore;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The format version of a deployed record.
pub(crate) const DEPLOYED_FORMAT: u32 = 1;

/// The build a module's last finished rollout made current (disk format, version
/// [`DEPLOYED_FORMAT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct DeployedRecord {
    /// Format version.
    pub format: u32,
    /// The module.
    pub module: String,
    /// The repository it was built from.
    pub repository: String,
    /// The commit built.
    pub commit: String,
    /// The archive in the store.
    pub archive: ArchiveRef,
    /// The plan whose rollout finished it.
    pub plan: String,
    /// When it became current (seconds since the epoch).
    pub at: u64,
    /// The nodes of the module its rollout did not send because they were not running, by
    /// name: each is behind on the module until it is sent ([`crate::status::behind`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub not_running: BTreeMap<String, NotSent>,
}

/// A node a finished rollout did not send because it was not running: what it held then and
/// what the rollout composed for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct NotSent {
    /// The digest of the declaration it had last been sent (`None`: nothing yet).
    pub before: Option<String>,
    /// The digest of the declaration the rollout composed for it.
    pub declaration: String,
}

/// The deployed builds' records ([`crate::home::keys`]): `deployed/<module>.json`, one a
/// module, each its build a finished rollout made current.
#[derive(Clone, Copy)]
pub struct DeployedStore<'h> {
    home: &'h Home,
}

impl Home {
    /// The deployed builds' records.
    pub fn deployed(&self) -> DeployedStore<'_> {
        DeployedStore { home: self }
    }
}

impl DeployedStore<'_> {
    /// A module's deployed build, if a rollout ever finished one.
    pub fn get(&self, module: &str) -> Result<Option<DeployedRecord>> {
        self.home.read_record(
            &format!("deployed/{module}.json"),
            "a deployed record",
            DEPLOYED_FORMAT,
        )
    }

    /// Every deployed module, by name.
    pub fn all(&self) -> Result<Vec<DeployedRecord>> {
        let mut out = Vec::new();
        for name in self.home.json_stems("deployed")? {
            out.extend(self.get(&name)?);
        }
        Ok(out)
    }

    /// Makes a build the module's deployed one.
    pub fn write(&self, record: &DeployedRecord) -> Result<()> {
        self.home
            .put_json(&format!("deployed/{}.json", record.module), record)
    }
}

/// The catalogue source sends compose from: the home's catalogue, with every deployed module
/// read from its archive in the store (and the archive recorded in
/// [`CatalogueSource::archives`], so the declarations name it and its files reach the hosts
/// inside it).
///
/// # Errors
/// When the home's catalogue cannot be read, or a deployed archive is missing from the store or
/// is not the bytes its record names.
pub(crate) async fn effective_source(
    home: &Home,
    store: &dyn ArchiveStore,
) -> Result<CatalogueSource> {
    let dir = home.modules_dir();
    let mut source = if dir.is_dir() {
        mesh_store::tree::read_catalogue(&dir, "catalogue/modules").map_err(|source| {
            Error::Invalid {
                what: format!("reading the catalogue at {}", dir.display()),
                source: Some(Box::new(source)),
            }
        })?
    } else {
        CatalogueSource {
            prefix: "catalogue/modules".to_owned(),
            ..CatalogueSource::default()
        }
    };
    for deployed in home.deployed().all()? {
        let archive = store
            .fetch(&deployed.archive)
            .await
            .for_module(&deployed.module, || {
                format!(
                    "the deployed build of `{}` ({}, {} at {}) could not be read from {}",
                    deployed.module,
                    deployed.archive.digest,
                    deployed.repository,
                    short_commit(&deployed.commit),
                    store.name()
                )
            })?;
        let tree = unpack_archive(&archive.bytes, Some(&deployed.archive))
            .for_module(&deployed.module, || {
                format!("the deployed build of `{}`", deployed.module)
            })?;
        source.modules.insert(deployed.module.clone(), tree);
        // Its files reach the hosts inside this archive (the declaration names it).
        source
            .archives
            .insert(deployed.module.clone(), deployed.archive.clone());
    }
    Ok(source)
}

/// Where an in-process host agent of the embedded default reads archived files: its cache
/// under its state directory, then the controller's own store.
///
/// # Errors
/// When the store's client cannot be made.
pub(crate) fn host_archives(
    home: &Home,
    node: &str,
    store: &mesh_store::store::StoreSpec,
) -> Result<mesh_host::ArchiveSource> {
    mesh_host::ArchiveSource::open(&home.node_state_dir(node), Some(store))
        .for_node(node, || format!("opening the store {store} for `{node}`"))
}

/// The spec of an open store: its name ([`ArchiveStore::name`] is the spec).
///
/// # Errors
/// When the name is not a spec.
pub(crate) fn store_spec(store: &dyn ArchiveStore) -> Result<mesh_store::store::StoreSpec> {
    let name = store.name();
    name.parse().map_err(|source| Error::Internal {
        doing: format!("the store's name {name} is not a store spec"),
        source: Some(Box::new(source)),
    })
}

/// [`effective_source`], validated.
///
/// # Errors
/// As [`effective_source`].
pub async fn effective_catalogue(
    home: &Home,
    store: &dyn ArchiveStore,
) -> Result<(Catalogue, Vec<Diagnostic>)> {
    Ok(load_catalogue(&effective_source(home, store).await?))
}

/// Makes `archive` the module's current build in the store's record (what the keep set keeps
/// because a definition names it), under the publish lock.
pub(crate) fn set_current(
    home: &Home,
    _lock: &mesh_store::lock::PublishLock,
    module: &str,
    archive: &ArchiveRef,
) -> Result<()> {
    let mut record = mesh_store::records::read_module_record(home.records(), module)
        .for_module(module, || {
            format!("reading the store's record of `{module}`")
        })?
        .unwrap_or_else(|| mesh_store::records::ModuleRecord::new(module));
    if record.current.as_ref() != Some(archive) {
        record.current = Some(archive.clone());
        record.held = true;
        mesh_store::records::write_module_record(home.records(), &record)
            .for_module(module, || {
                format!("writing the store's record of `{module}`")
            })?;
    }
    Ok(())
}

/// Records that a rollout finished: the build is the module's deployed one, and the current
/// build in the store's record.
///
/// # Errors
/// When a record cannot be written.
pub(crate) async fn deploy(home: &Home, record: &DeployedRecord) -> Result<()> {
    let lock = mesh_store::lock::PublishLock::acquire(home.root())
        .await
        .for_module(&record.module, || {
            format!("taking the publish lock to deploy `{}`", record.module)
        })?;
    set_current(home, &lock, &record.module, &record.archive)?;
    home.deployed().write(record)
}

/// A commit shortened for people (12 characters).
pub fn short_commit(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}

/// The problems the catalogue at a commit has with `module` (its own, and those of what it
/// depends on, as validation reports them).
pub(crate) fn module_problems(source: &CatalogueSource, module: &str) -> Vec<Diagnostic> {
    if !source.modules.contains_key(module) {
        return vec![Diagnostic::new(
            format!("{}/{module}", source.prefix),
            Some(module),
            None,
            "the module's directory is not in the catalogue at this commit",
        )];
    }
    let own_dir = format!("{}/{module}/", source.prefix);
    let (_, diagnostics) = load_catalogue(source);
    diagnostics
        .into_iter()
        .filter(|d| d.module.as_deref() == Some(module) || d.file.starts_with(&own_dir))
        .collect()
}

/// Where a build comes from: a repository's catalogue at a commit.
#[derive(Debug, Clone, Copy)]
pub struct BuildSource<'a> {
    /// The repository's name.
    pub repository: &'a str,
    /// The commit.
    pub commit: &'a str,
    /// Its catalogue at that commit.
    pub source: &'a CatalogueSource,
}

/// A module built from a repository's catalogue at a commit.
#[derive(Debug, Clone)]
pub struct Built {
    /// The build record (published and recorded unless a dry run).
    pub build: Build,
}

/// A module validated and archived, not yet published ([`prepare_build`]).
pub(crate) struct Prepared {
    build: Build,
    archive: mesh_store::archive::Archive,
}

/// Builds `module` from a repository's catalogue at a commit: validates, archives,
/// and unless `dry_run` publishes under the publish lock and records the build.
///
/// # Errors
/// Every validation problem of the module at once; a store or record failure naming the module
/// and the store.
pub async fn build_module(
    home: &Home,
    store: &dyn ArchiveStore,
    from: &BuildSource<'_>,
    module: &str,
    now: u64,
    dry_run: bool,
) -> Result<Built> {
    let prepared = prepare_build(from, module, now, dry_run)?;
    if dry_run {
        return Ok(Built {
            build: prepared.build,
        });
    }
    publish_build(home, store, prepared).await
}

/// The part of a build that is the module's own: validated and archived (a failure here is the
/// module's, the same on every try).
///
/// # Errors
/// Every validation problem of the module at once; what its files cannot be archived for.
pub(crate) fn prepare_build(
    from: &BuildSource<'_>,
    module: &str,
    now: u64,
    dry_run: bool,
) -> Result<Prepared> {
    let BuildSource {
        repository,
        commit,
        source,
    } = *from;
    let problems = module_problems(source, module);
    if !problems.is_empty() {
        return Err(Error::DoesNotValidate {
            module: module.to_owned(),
            repository: repository.to_owned(),
            commit: commit.to_owned(),
            problems,
        });
    }
    let tree = &source.modules[module];
    let archive = archive_tree(tree).for_module(module, || {
        format!(
            "archiving `{module}` at {repository} {}",
            short_commit(commit)
        )
    })?;
    let build = Build {
        module: module.to_owned(),
        repository: repository.to_owned(),
        commit: commit.to_owned(),
        archive: archive.reference.clone(),
        at: now,
        dry_run,
    };
    Ok(Prepared { build, archive })
}

/// The part of a build that is the store's and the records': published under the publish lock
/// and recorded (a failure here — a store answering 500, a bus gone — may pass on another try).
///
/// # Errors
/// A store or record failure naming the module and the store.
pub(crate) async fn publish_build(
    home: &Home,
    store: &dyn ArchiveStore,
    prepared: Prepared,
) -> Result<Built> {
    let Prepared { build, archive } = prepared;
    let module = build.module.as_str();
    let lock = mesh_store::lock::PublishLock::acquire(home.root())
        .await
        .for_module(module, || {
            format!("taking the publish lock to publish `{module}`")
        })?;
    mesh_store::store::publish(store, &lock, &archive)
        .await
        .for_module(module, || {
            format!("publishing `{module}` to {}", store.name())
        })?;
    mesh_store::records::record_build(home.records(), &lock, &build)
        .for_module(module, || format!("recording the build of `{module}`"))?;
    // The record's current build is what the mesh runs (the keep set keeps it whatever comes
    // after): until a rollout finishes the new one, that stays the deployed build.
    if let Some(deployed) = home.deployed().get(module)? {
        set_current(home, &lock, module, &deployed.archive)?;
    }
    drop(lock);
    Ok(Built { build })
}
