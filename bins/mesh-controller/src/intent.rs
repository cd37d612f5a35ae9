//! Each node's *intent*: the declaration it should run now — the deployed builds of its modules
//! (the home's catalogue for a module never deployed), its settings layers, the inventory and
//! the secrets as they are — kept by digest, whole and module by module, beside what it was
//! sent and what it reported ([`crate::status::pending`] compares the three).
//!
//! Start at [`keep_current`]: it reads a fingerprint of the intents' inputs (the inventory,
//! every settings layer, the deployed records, the home's catalogue, the mesh's secrets key)
//! and, when it differs from the one kept beside the intents, composes every node's intent once
//! over the one shared catalogue and writes those that changed. The paths that change an input
//! (a rollout that deploys, `settings set`, an inventory change, `secrets rotate`) call it; a
//! `status` that finds the fingerprint changed (a path that forgot) recomposes once and says so
//! in the log. `status` itself reads the digests only ([`IntentStore::all`]).
//!
//! The node holding a fleet's bus is also sent the bus's users file. It is not the modules'
//! doing, so its intent is its modules' declaration with the users file it was last sent
//! carried over (as `plan NODE --diff` compares it): its digest is compared without that file
//! on both sides ([`without_users_file`]).
//!
//! # Layout
//! `intents/nodes/<n>.json`: an [`IntentsRecord`], the [`IntentRecord`]s of consecutive nodes in
//! node order, as many as fit in [`INTENTS_RECORD_BYTES`] (so a status reads a few records, not
//! one a node, and a change to every intent writes as few); `intents/fingerprint.json`: a
//! [`FingerprintRecord`]. Both the controller's own, versioned.
//!
//! # Guarantees
//! - Nothing is sent: an intent is composed and recorded, never published.
//! - A record is written only when the node's intent changed; the fingerprint is written after
//!   every node's record, so a refresh stopped midway is made again by the next.

use crate::error::{Error, Result};
use crate::home::Home;
use mesh_model::declaration::Declaration;
use mesh_model::inventory::Inventory;
use mesh_model::module::{load_catalogue, Catalogue};
use mesh_store::store::ArchiveStore;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;
use std::collections::BTreeMap;

/// The format version of an intent's records.
pub(crate) const INTENT_FORMAT: u32 = 1;

/// The key of the intents' fingerprint.
const FINGERPRINT_KEY: &str = "intents/fingerprint.json";

/// The directory of the nodes' intents, many nodes a record.
const NODES_DIR: &str = "intents/nodes";

/// How many bytes of intents one record of `intents/nodes/` holds at most (a node's own is
/// never split): far under a record's 64 KiB.
pub(crate) const INTENTS_RECORD_BYTES: usize = 48 * 1024;

/// The intents of consecutive nodes (disk format, version [`INTENT_FORMAT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct IntentsRecord {
    /// Format version.
    pub format: u32,
    /// Each node's intent, in node order.
    pub nodes: Vec<IntentRecord>,
}

/// One node's intent (disk format, version [`INTENT_FORMAT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct IntentRecord {
    /// Format version.
    pub format: u32,
    /// The node.
    pub node: String,
    /// The digest of its intended declaration (for the node holding the bus, without the
    /// bus's users file).
    pub declaration: String,
    /// Each module's part of it, by module: the digest of its resources, archive and drift
    /// policy ([`module_digests`]).
    pub modules: BTreeMap<String, String>,
    /// The build each module's part names, by module (`None` for a module of the home's
    /// catalogue that names no archive).
    #[serde(default)]
    pub builds: BTreeMap<String, Option<String>>,
    /// For each module whose part holds secrets, the digest of its part with every secret's
    /// keyed digest left out: a part sent that differs only by its secrets is told by it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub without_secrets: BTreeMap<String, String>,
    /// Modules assigned to it that no catalogue the nodes run has (they reach it with their
    /// plan's rollout): what it was sent of them is not judged.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub unknown: std::collections::BTreeSet<String>,
}

/// What the intents were composed from (disk format, version [`INTENT_FORMAT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct FingerprintRecord {
    /// Format version.
    pub format: u32,
    /// The fingerprint of the inputs ([`fingerprint`]).
    pub fingerprint: String,
    /// How many nodes have an intent.
    pub nodes: usize,
}

/// The intents' records ([`crate::home::keys`]).
#[derive(Clone, Copy)]
pub struct IntentStore<'h> {
    home: &'h Home,
}

impl Home {
    /// Each node's intent and the fingerprint of what they were composed from.
    pub fn intents(&self) -> IntentStore<'_> {
        IntentStore { home: self }
    }
}

impl IntentStore<'_> {
    /// Every node's intent, by node: the few records of `intents/nodes/`. A record that does not
    /// read leaves its nodes out (their intents unknown until the next refresh writes them).
    ///
    /// # Errors
    /// The records cannot be listed.
    pub fn all(&self) -> Result<BTreeMap<String, IntentRecord>> {
        let mut all = BTreeMap::new();
        for (_, bytes) in self.home.records().values_under(NODES_DIR)? {
            if let Ok(record) = serde_json::from_slice::<IntentsRecord>(&bytes) {
                if record.format == INTENT_FORMAT {
                    all.extend(record.nodes.into_iter().map(|n| (n.node.clone(), n)));
                }
            }
        }
        Ok(all)
    }

    /// The fingerprint kept beside the intents, if any.
    ///
    /// # Errors
    /// The record cannot be read.
    pub fn fingerprint(&self) -> Result<Option<FingerprintRecord>> {
        Ok(self
            .home
            .get(FINGERPRINT_KEY)?
            .and_then(|bytes| serde_json::from_slice::<FingerprintRecord>(&bytes).ok())
            .filter(|record| record.format == INTENT_FORMAT))
    }
}

/// The fingerprint of everything an intent is composed from: the inventory's bytes, every
/// settings layer, the deployed records, the home's catalogue (each file's path and bytes) and
/// the mesh's secrets keys (their public halves). Reads; composes nothing.
///
/// # Errors
/// A record, the catalogue or a key cannot be read.
pub fn fingerprint(home: &Home) -> Result<String> {
    let mut hash = sha2::Sha256::new();
    let mut part = |name: &str, bytes: &[u8]| {
        hash.update(name.as_bytes());
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(bytes);
    };
    let inventory = home
        .records()
        .get(mesh_model::inventory::INVENTORY_FILE)?
        .unwrap_or_default();
    part("inventory", &inventory);
    for (key, bytes) in home.records().values_under("settings")? {
        part(&key, &bytes);
    }
    for (key, bytes) in home.records().values_under("deployed")? {
        part(&key, &bytes);
    }
    let dir = home.modules_dir();
    let mut files = Vec::new();
    files_under(&dir, &mut files)?;
    files.sort();
    for path in files {
        let bytes = std::fs::read(&path).map_err(crate::error::file_error(
            "reading the catalogue file",
            &path,
        ))?;
        part(
            &path.strip_prefix(&dir).unwrap_or(&path).to_string_lossy(),
            &bytes,
        );
    }
    for file in [
        crate::secrets::MESH_KEY_FILE,
        crate::secrets::NEXT_MESH_KEY_FILE,
    ] {
        let path = home.root().join(file);
        if path.exists() {
            let key = mesh_secrets::MeshKey::load(&path).map_err(crate::secrets::secrets_error(
                format!("reading {}", path.display()),
            ))?;
            part(file, key.recipient().to_string().as_bytes());
        }
    }
    Ok(mesh_model::sha256_text(hash.finalize().into()))
}

/// Every file under `dir` (none when it is not a directory).
fn files_under(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries {
        let entry = entry.map_err(crate::error::file_error("listing", dir))?;
        let path = entry.path();
        let kind = entry
            .file_type()
            .map_err(crate::error::file_error("reading the type of", &path))?;
        if kind.is_dir() {
            files_under(&path, out)?;
        } else if kind.is_file() {
            out.push(path);
        }
    }
    Ok(())
}

/// What [`keep_current`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kept {
    /// The fingerprint was unchanged: nothing was composed.
    Current,
    /// The intents were composed again.
    Recomposed {
        /// How many nodes have an intent.
        nodes: usize,
        /// How many nodes' intents changed (written).
        changed: usize,
    },
}

/// Makes the intents current: when the fingerprint of their inputs differs from the one kept
/// (or none is kept), every node's intent is composed again ([`refresh`]); else nothing is.
///
/// # Errors
/// As [`refresh`].
pub async fn keep_current(home: &Home, store: &dyn ArchiveStore) -> Result<Kept> {
    let now = fingerprint(home)?;
    if home
        .intents()
        .fingerprint()?
        .is_some_and(|kept| kept.fingerprint == now)
    {
        return Ok(Kept::Current);
    }
    refresh_at(home, store, now).await
}

/// [`keep_current`] for `status`: a fingerprint found changed is a path that forgot to keep the
/// intents current, said in the log once they are composed again. A failure is logged and the
/// intents kept are read as they are: `status` is never refused for it.
pub async fn current_for_status(home: &Home, store: &dyn ArchiveStore) {
    match keep_current(home, store).await {
        Ok(Kept::Current) => {}
        Ok(Kept::Recomposed { nodes, changed }) => tracing::info!(
            nodes,
            changed,
            "status: the intents' inputs changed since they were composed (a path that \
             changed them did not compose them again); composed again"
        ),
        Err(error) => tracing::warn!(
            error = %error.chain_line(),
            "status: the intents could not be composed again; those kept are read"
        ),
    }
}

/// [`keep_current`] after `what` changed an input (a rollout that deployed, a settings change,
/// a rotation): a failure is logged, never the changer's failure — the next `status` composes
/// them again.
pub(crate) async fn keep_current_logged(home: &Home, store: &dyn ArchiveStore, what: &str) {
    if let Err(error) = keep_current(home, store).await {
        tracing::warn!(
            error = %error.chain_line(),
            "{what}: the intents could not be composed again; the next status composes them"
        );
    }
}

async fn refresh_at(home: &Home, store: &dyn ArchiveStore, fingerprint: String) -> Result<Kept> {
    let source = crate::catalogue::builds::effective_source(home, store).await?;
    let (catalogue, _) = load_catalogue(&source);
    let mut inventory = home.inventory()?;
    // A module in no catalogue the nodes run reaches its nodes with its plan's rollout: it is
    // no part of what they should run until then, and what they were sent of it is not judged.
    let unknown: BTreeMap<String, Vec<String>> = inventory
        .assigned_modules()
        .into_iter()
        .filter(|module| catalogue.module(module).is_none())
        .map(|module| {
            let nodes = inventory.nodes_of(module).into_iter().map(str::to_owned);
            (module.to_owned(), nodes.collect())
        })
        .collect();
    inventory.retain_assignments(|module| catalogue.module(module).is_some());
    let nodes: Vec<String> = inventory.file.nodes.keys().cloned().collect();
    let kept = home.intents().all()?;
    let mut intents = intents_of(&catalogue, &inventory, &nodes);
    for (module, nodes) in unknown {
        for node in nodes {
            if let Some(intent) = intents.get_mut(&node) {
                intent.unknown.insert(module.clone());
            }
        }
    }
    write_intents(home, &intents)?;
    home.put_json(
        FINGERPRINT_KEY,
        &FingerprintRecord {
            format: INTENT_FORMAT,
            fingerprint,
            nodes: intents.len(),
        },
    )?;
    let changed = intents
        .iter()
        .filter(|(node, record)| kept.get(*node) != Some(*record))
        .count()
        + kept
            .keys()
            .filter(|node| !intents.contains_key(*node))
            .count();
    Ok(Kept::Recomposed {
        nodes: intents.len(),
        changed,
    })
}

/// Writes the records of `intents` that changed, consecutive nodes a record up to
/// [`INTENTS_RECORD_BYTES`], and removes those beyond the last.
fn write_intents(home: &Home, intents: &BTreeMap<String, IntentRecord>) -> Result<()> {
    let records = home.records();
    let mut kept: BTreeMap<String, Vec<u8>> =
        records.values_under(NODES_DIR)?.into_iter().collect();
    let mut parts: Vec<Vec<IntentRecord>> = Vec::new();
    let mut bytes = 0;
    for record in intents.values() {
        let size = serde_json::to_vec(record)?.len();
        match parts.last_mut() {
            Some(part) if bytes + size <= INTENTS_RECORD_BYTES => {
                part.push(record.clone());
                bytes += size;
            }
            Some(_) | None => {
                parts.push(vec![record.clone()]);
                bytes = size;
            }
        }
    }
    let mut written = Vec::new();
    for (at, nodes) in parts.into_iter().enumerate() {
        let key = format!("{NODES_DIR}/{at:05}.json");
        let bytes = serde_json::to_vec(&IntentsRecord {
            format: INTENT_FORMAT,
            nodes,
        })?;
        if kept.remove(&key).as_ref() != Some(&bytes) {
            written.push((key, bytes));
        }
    }
    home.put_many(&written)?;
    let beyond: Vec<String> = kept.into_keys().collect();
    if !beyond.is_empty() {
        records.delete_many(&beyond)?;
    }
    Ok(())
}

/// From how many nodes the intents are composed on more than one thread.
const PARALLEL_INTENTS: usize = 256;

/// The intents of `nodes`, by node (a node that cannot be composed left out): on as many
/// threads as the machine has cores (at most 4) from [`PARALLEL_INTENTS`] nodes on.
fn intents_of(
    catalogue: &Catalogue,
    inventory: &Inventory,
    nodes: &[String],
) -> BTreeMap<String, IntentRecord> {
    let one = |node: &String| {
        mesh_plan::compose(catalogue, inventory, node)
            .ok()
            .map(|declaration| record_of(&declaration))
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let records: Vec<Option<IntentRecord>> = if threads <= 1 || nodes.len() < PARALLEL_INTENTS {
        nodes.iter().map(one).collect()
    } else {
        let one = &one;
        std::thread::scope(|scope| {
            let parts: Vec<_> = nodes
                .chunks(nodes.len().div_ceil(threads))
                .map(|part| scope.spawn(move || part.iter().map(one).collect::<Vec<_>>()))
                .collect();
            parts
                .into_iter()
                .flat_map(|part| {
                    part.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        })
    };
    records
        .into_iter()
        .flatten()
        .map(|record| (record.node.clone(), record))
        .collect()
}

/// The intent record of a composed declaration.
pub(crate) fn record_of(declaration: &Declaration) -> IntentRecord {
    let declaration = without_users_file(declaration);
    let parts = module_parts(&declaration);
    IntentRecord {
        format: INTENT_FORMAT,
        node: declaration.node.clone(),
        declaration: declaration.digest(),
        modules: parts
            .iter()
            .map(|(module, part)| (module.clone(), part.digest()))
            .collect(),
        builds: builds_of(&declaration),
        without_secrets: parts
            .iter()
            .filter(|(_, part)| part.holds_secrets())
            .map(|(module, part)| (module.clone(), digest_without_secrets(part)))
            .collect(),
        unknown: std::collections::BTreeSet::new(),
    }
}

/// The digest of `part` with every secret's keyed digest left out.
pub(crate) fn digest_without_secrets(part: &Declaration) -> String {
    let mut part = part.clone();
    for (_, _, secret) in part.secrets_mut() {
        secret.digest.clear();
    }
    part.digest()
}

/// The build each module's part names (`None`: no archive), by module.
pub(crate) fn builds_of(declaration: &Declaration) -> BTreeMap<String, Option<String>> {
    let mut builds: BTreeMap<String, Option<String>> = declaration
        .resources
        .iter()
        .map(|r| (r.module.clone(), None))
        .collect();
    for (module, archive) in &declaration.archives {
        if builds.contains_key(module) {
            builds.insert(module.clone(), Some(archive.digest.clone()));
        }
    }
    builds.remove(crate::bus::users::USERS_MODULE);
    builds
}

/// Each module's part of `declaration`, by module: the digest of the declaration of its
/// resources alone, with its archive and its drift policy (a secret counted by its keyed
/// digest, as [`Declaration::digest`] counts it). The bus's users file is no module's.
pub(crate) fn module_digests(declaration: &Declaration) -> BTreeMap<String, String> {
    module_parts(declaration)
        .into_iter()
        .map(|(module, part)| (module, part.digest()))
        .collect()
}

/// Each module's part of `declaration` as a declaration of its own, by module.
pub(crate) fn module_parts(declaration: &Declaration) -> BTreeMap<String, Declaration> {
    let mut by_module: BTreeMap<String, Vec<mesh_model::declaration::Resource>> = BTreeMap::new();
    for resource in &declaration.resources {
        if resource.module == crate::bus::users::USERS_MODULE {
            continue;
        }
        by_module
            .entry(resource.module.clone())
            .or_default()
            .push(resource.clone());
    }
    by_module
        .into_iter()
        .map(|(module, resources)| {
            let archives = declaration
                .archives
                .get(&module)
                .map(|archive| BTreeMap::from([(module.clone(), archive.clone())]))
                .unwrap_or_default();
            let mut part =
                Declaration::with_archives(declaration.node.clone(), resources, archives);
            if let Some(policy) = declaration.drift.get(&module) {
                part.drift.insert(module.clone(), *policy);
            }
            (module, part)
        })
        .collect()
}

/// `declaration` without the bus's users file (and its archive): what the modules declare.
pub(crate) fn without_users_file(declaration: &Declaration) -> std::borrow::Cow<'_, Declaration> {
    let users = crate::bus::users::USERS_MODULE;
    if !declaration.resources.iter().any(|r| r.module == users)
        && !declaration.archives.contains_key(users)
    {
        return std::borrow::Cow::Borrowed(declaration);
    }
    let resources = declaration
        .resources
        .iter()
        .filter(|r| r.module != users)
        .cloned()
        .collect();
    let mut archives = declaration.archives.clone();
    archives.remove(users);
    let mut stripped = Declaration::with_archives(declaration.node.clone(), resources, archives);
    stripped.drift = declaration.drift.clone();
    std::borrow::Cow::Owned(stripped)
}

/// The nodes whose intent may differ from what they were sent, in node order: every node whose
/// intent is unknown or is not the digest it was sent, and the node holding the bus (it was sent
/// the bus's users file too, so its digests are not compared here). Nothing is composed: a
/// caller diffs these alone ([`crate::runtime::preview::diff`]), every other node's diff empty.
///
/// # Errors
/// The records cannot be read.
pub(crate) fn nodes_to_diff(home: &Home) -> Result<Vec<String>> {
    let inventory = home.inventory()?;
    let intents = home.intents().all()?;
    let sent = home.sent().digests()?;
    Ok(inventory
        .file
        .nodes
        .keys()
        .filter(|node| {
            **node == inventory.file.bus_node
                || intents.get(*node).map(|i| &i.declaration) != sent.get(*node)
        })
        .cloned()
        .collect())
}

/// The nodes assigned `module` whose part of it, as they were last sent, differs from their
/// intent's (the intents made current first): those a rollout of the module's deployed build
/// still has to send it to. A node never sent anything counts; one whose intent is unknown
/// does not.
///
/// # Errors
/// As [`keep_current`]; a declaration kept as sent cannot be read.
pub(crate) async fn nodes_differing_on(
    home: &Home,
    store: &dyn ArchiveStore,
    module: &str,
) -> Result<Vec<String>> {
    keep_current(home, store).await?;
    let intents = home.intents().all()?;
    let inventory = home.inventory()?;
    let sent = home.sent().digests()?;
    let mut differing = Vec::new();
    let assigned: Vec<String> = inventory
        .nodes_of(module)
        .into_iter()
        .map(str::to_owned)
        .collect();
    for node in assigned {
        let Some(intent) = intents.get(&node) else {
            continue;
        };
        // A node sent its intent whole was sent the module's part of it.
        if sent.get(&node) == Some(&intent.declaration) {
            continue;
        }
        let intended = intent.modules.get(module);
        let Some(digest) = sent.get(&node) else {
            differing.push(node);
            continue;
        };
        let declaration = home.sent().declaration(digest)?.ok_or_else(|| {
            Error::internal(format!(
                "the declaration {digest} sent to `{node}` is not kept"
            ))
        })?;
        if module_digests(&declaration).get(module) != intended {
            differing.push(node);
        }
    }
    Ok(differing)
}
