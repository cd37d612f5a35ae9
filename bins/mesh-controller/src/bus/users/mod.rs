//! The bus's users: one per node, allowed its own subjects and what its modules are granted
//! (`ModuleDefinition.grants`), plus the controller and the probe user ([`authorization`]);
//! how they travel to the node holding the bus ([`UsersFile`], [`with_users_file`]); and the
//! proof that the bus has them in force ([`confirm`]).
//!
//! An enrolled node is in the users file by its public key only; a node not yet enrolled by
//! its password ([`crate::bus::enroll::node_credentials`]). An enrolled node's seed never leaves
//! its host, so the controller cannot log in as it to prove its permissions in force: the users
//! file carries a probe user ([`mesh_bus::subjects::PROBE_USER`], its key derived from the
//! controller's secret) allowed to publish on a subject naming that very file; the server letting
//! it publish there has loaded the file, and with it every node's permissions.
//!
//! # How the users file travels
//! The users file grows with the fleet (some hundreds of bytes a node: megabytes at 10,000,
//! past the bus's 1 MiB `max_payload`), so no declaration and no record holds it whole. It
//! travels as module builds do: packed as an archive ([`users_archive`]: one file,
//! [`USERS_ARCHIVE_PATH`]) published to the store, which the bus node's declaration names as
//! the archive of the module [`USERS_MODULE`], its file read from it by path and content digest
//! ([`with_users_file`]); the bus node's host fetches it from the store and checks both
//! digests (`mesh_host::archives`). The bus node's declaration is so the same size whatever
//! the number of nodes.
//!
//! The store keeps that archive as it keeps a module's builds ("What the mesh keeps, for a
//! reason"): the store's record of the module [`USERS_MODULE`] (`store/modules/mesh-bus.json`)
//! names as its current build the archive the bus node was last sent ([`users_sent`]), and as
//! recent builds the last few published ([`publish_users`]) — so what the bus node was last sent,
//! and one being sent, are kept by every sweep, and the collector needs nothing of its own. The
//! record of the users the bus last confirmed in force ([`confirm::CONFIRMED_KEY`]) holds their
//! digest and the archive they can be read from.
//!
//! What it must never do: put a secret of an enrolled node in the users file, or let the users
//! file ride inside a declaration or a record.

pub(crate) mod confirm;

use crate::bus::credentials::{controller_credential, controller_secret, probe_seed, BusConfig};
use crate::error::{bad_record, Context, Error, Result};
use crate::home::Home;
use crate::push::Checked;
use mesh_bus::grants;
use mesh_bus::NodeSecret;
use mesh_model::build::{ArchiveRef, Build};
use mesh_model::declaration::{ArchivedFile, Declaration, FileSpec, Resource, Spec};
use mesh_model::inventory::Inventory;
use mesh_model::module::Catalogue;
use mesh_model::module::{EntryKind, ModuleTree};
use mesh_store::archive::{archive_tree, unpack_archive, Archive};
use mesh_store::store::ArchiveStore;
use std::collections::BTreeSet;

/// Where the node holding the bus keeps the bus's users; its server configuration includes
/// this file, and its server is reloaded when it changes (`contrib/systemd`).
pub(crate) const USERS_PATH: &str = "/etc/nats/mesh-users.conf";

/// The users file's resource id in the bus node's declaration.
pub(crate) const USERS_RESOURCE: &str = "mesh-bus/file/users";

/// The module the users file belongs to in the bus node's declaration: the name its archive is
/// named by there, and the store's record (`store/modules/mesh-bus.json`) that keeps it.
pub(crate) const USERS_MODULE: &str = "mesh-bus";

/// The users file's path inside its archive.
pub(crate) const USERS_ARCHIVE_PATH: &str = "users.conf";

/// What the store's record of [`USERS_MODULE`] names as the repository of its builds: no
/// repository's name (it holds a space), so no merge ever forgets it.
pub(crate) const USERS_REPOSITORY: &str = "(the bus's users)";

/// The bus's users as the server's `authorization` block: the controller, one user per node
/// with the state buckets and event subjects its assigned modules are granted — an enrolled
/// node by its public key, one not yet enrolled by its password — and the probe user
/// ([`mesh_bus::subjects::PROBE_USER`]).
///
/// # Errors
/// Every grant problem at once (a bad bucket name, a subject overlapping the mesh's own, …),
/// each naming its node; a password that cannot be read or made.
pub(crate) fn authorization(
    home: &Home,
    catalogue: &Catalogue,
    inventory: &Inventory,
    controller: &NodeSecret,
) -> Result<String> {
    let mut nodes = Vec::new();
    // One listing of the keys and one of the passwords, not a read per node.
    let mut credentials = crate::bus::enroll::node_credentials(home, inventory.file.nodes.keys())?;
    for node in inventory.file.nodes.keys() {
        let mut buckets = BTreeSet::new();
        let mut event_subjects = BTreeSet::new();
        for module in inventory.modules_of(node) {
            if let Some(module) = catalogue.module(module) {
                buckets.extend(module.definition.grants.buckets.iter().cloned());
                event_subjects.extend(module.definition.grants.subjects.iter().cloned());
            }
        }
        nodes.push(grants::NodeUser {
            node: node.clone(),
            credential: credentials
                .remove(node)
                .expect("node_credentials answers for every node"),
            buckets: buckets.into_iter().collect(),
            subjects: event_subjects.into_iter().collect(),
        });
    }
    let probe = mesh_bus::keys::public_key_of_seed(&probe_seed(controller))
        .expect("a derived seed is a user seed");
    grants::users_config_with_probe(
        &grants::BusUsers {
            controller: controller_credential(controller)?,
            nodes,
        },
        &probe,
    )
    .map_err(|problems| {
        Error::refused(format!(
            "the bus's grants cannot be composed; nothing was sent:\n{}",
            problems
                .iter()
                .map(|p| format!("  {p}"))
                .collect::<Vec<_>>()
                .join("\n")
        ))
    })
}

/// `broker users`: the bus's users as the server's configuration includes them — to start
/// the bus node's server with, before the first push sends it.
pub fn users_text(home: &Home, checked: &Checked, bus: &BusConfig) -> Result<String> {
    let inventory = home.inventory()?;
    let controller = controller_secret(home, bus)?;
    authorization(home, &checked.0, &inventory, &controller)
}

/// Every bucket the nodes' modules are granted.
pub(crate) fn granted_buckets(catalogue: &Catalogue, inventory: &Inventory) -> BTreeSet<String> {
    inventory
        .file
        .nodes
        .keys()
        .flat_map(|node| inventory.modules_of(node))
        .filter_map(|module| catalogue.module(module))
        .flat_map(|module| module.definition.grants.buckets.iter().cloned())
        .collect()
}

/// The group the bus node's `nats-server` runs as (Debian's package: user and group `nats`),
/// which must read the users file.
pub(crate) const USERS_GROUP: &str = "nats";

/// The bus's users as they travel (see [How the users file travels](self)): the node holding
/// the bus, and the archive in the store its declaration names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsersFile {
    /// The node holding the bus.
    pub bus_node: String,
    /// The archive holding the users file ([`USERS_ARCHIVE_PATH`]).
    pub archive: ArchiveRef,
    /// `sha256:<hex>` of the users file's text.
    pub sha256: String,
}

/// The users file packed as an archive: one file, [`USERS_ARCHIVE_PATH`]. The same text gives
/// the same bytes (so the same digest).
///
/// # Errors
/// None in practice (the one path is plain); an archive error would be named.
pub fn users_archive(users: &str) -> Result<Archive> {
    let mut tree = ModuleTree::default();
    tree.entries.insert(
        USERS_ARCHIVE_PATH.to_owned(),
        EntryKind::File {
            bytes: users.as_bytes().to_vec(),
            executable: false,
        },
    );
    archive_tree(&tree).map_err(|source| Error::Internal {
        doing: "packing the bus's users as an archive".to_owned(),
        source: Some(Box::new(source)),
    })
}

/// The users file's text from its archive's bytes, checked against `archive`.
///
/// # Errors
/// The bytes are not `archive`, or hold no users file, or it is not text.
pub(crate) fn read_users_archive(bytes: &[u8], archive: &ArchiveRef) -> Result<String> {
    let location = format!("the bus's users archive {}", archive.digest);
    let tree = unpack_archive(bytes, Some(archive))
        .map_err(bad_record(location.clone(), "a users archive"))?;
    let text = tree
        .file(USERS_ARCHIVE_PATH)
        .ok_or_else(|| Error::BadRecord {
            location: location.clone(),
            what: format!("an archive holding {USERS_ARCHIVE_PATH}"),
            source: None,
        })?;
    String::from_utf8(text.to_vec()).map_err(bad_record(location, "a users file of text"))
}

/// `declaration` naming the bus's users as the file [`USERS_PATH`] (owner `root`, group
/// [`USERS_GROUP`], mode 0640: it holds the passwords of nodes not yet enrolled), read from its
/// archive in the store by path and content digest
/// — the declaration's size does not grow with the number of users.
pub(crate) fn with_users_file(declaration: Declaration, users: &UsersFile) -> Declaration {
    let mut resources = declaration.resources;
    resources.retain(|r| r.id != USERS_RESOURCE);
    resources.push(Resource {
        id: USERS_RESOURCE.to_owned(),
        module: USERS_MODULE.to_owned(),
        together: None,
        after: Vec::new(),
        spec: Spec::File(FileSpec {
            path: USERS_PATH.to_owned(),
            content: None,
            source: Some(ArchivedFile {
                path: USERS_ARCHIVE_PATH.to_owned(),
                sha256: users.sha256.clone(),
            }),
            sealed: None,
            mode: 0o640,
            owner: "root".to_owned(),
            group: USERS_GROUP.to_owned(),
        }),
    });
    let mut archives = declaration.archives;
    archives.insert(USERS_MODULE.to_owned(), users.archive.clone());
    Declaration::with_archives(declaration.node, resources, archives)
}

/// `declaration` with the users file `sent` carried (as it was sent: named from its archive,
/// or, sent before the users travelled as an archive, carrying its text), for a diff that
/// compares what the modules change.
pub(crate) fn with_users_file_of(declaration: Declaration, sent: &Declaration) -> Declaration {
    let Some(users) = sent.resource(USERS_RESOURCE).cloned() else {
        return declaration;
    };
    let mut resources = declaration.resources;
    resources.retain(|r| r.id != USERS_RESOURCE);
    resources.push(users);
    let mut archives = declaration.archives;
    if let Some(archive) = sent.archives.get(USERS_MODULE) {
        archives.insert(USERS_MODULE.to_owned(), archive.clone());
    }
    Declaration::with_archives(declaration.node, resources, archives)
}

/// Publishes the users archive to the store, held by its manifest (the rule “An archive is
/// published with a manifest that holds it”), and records it among the recent builds of
/// [`USERS_MODULE`] in the store's record (the last [`mesh_store::keep::RECENT_BUILDS_KEPT`] kept
/// there), under the publish lock, so no sweep lets it go before the bus node is sent it. The
/// record's current build (what the bus node was last sent) is left as it is.
///
/// # Errors
/// The store or the record cannot be written.
pub(crate) async fn publish_users(
    home: &Home,
    store: &dyn ArchiveStore,
    archive: &Archive,
) -> Result<()> {
    let lock = mesh_store::lock::PublishLock::acquire(home.root())
        .await
        .for_module(USERS_MODULE, || {
            "taking the publish lock to publish the bus's users".to_owned()
        })?;
    mesh_store::store::publish(store, &lock, archive)
        .await
        .for_module(USERS_MODULE, || {
            format!("publishing the bus's users to {}", store.name())
        })?;
    let mut record = mesh_store::records::read_module_record(home.records(), USERS_MODULE)
        .for_module(USERS_MODULE, || {
            format!("reading the store's record of `{USERS_MODULE}`")
        })?
        .unwrap_or_else(|| mesh_store::records::ModuleRecord::new(USERS_MODULE));
    record.held = true;
    record
        .builds
        .retain(|build| build.archive != archive.reference);
    record.builds.push(Build {
        module: USERS_MODULE.to_owned(),
        repository: USERS_REPOSITORY.to_owned(),
        commit: archive.reference.digest.clone(),
        archive: archive.reference.clone(),
        at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        dry_run: false,
    });
    let extra = record
        .builds
        .len()
        .saturating_sub(mesh_store::keep::RECENT_BUILDS_KEPT);
    record.builds.drain(..extra);
    mesh_store::records::write_module_record(home.records(), &record)
        .for_module(USERS_MODULE, || {
            format!("writing the store's record of `{USERS_MODULE}`")
        })?;
    drop(lock);
    Ok(())
}

/// Records that the bus node was sent the users in `archive`: the current build of
/// [`USERS_MODULE`] in the store's record, kept by every sweep until it is sent others.
///
/// # Errors
/// The record cannot be read or written.
pub(crate) async fn users_sent(home: &Home, archive: &ArchiveRef) -> Result<()> {
    let lock = mesh_store::lock::PublishLock::acquire(home.root())
        .await
        .for_module(USERS_MODULE, || {
            "taking the publish lock to keep the bus's users".to_owned()
        })?;
    crate::catalogue::builds::set_current(home, &lock, USERS_MODULE, archive)
}
