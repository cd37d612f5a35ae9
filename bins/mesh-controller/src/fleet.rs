//! The controller over NATS, for a fleet: `--bus URL` sends to the real hosts (`mesh-host
//! serve`) and hears their reports; `runtimes` asks who is there; `broker consumer-reset` and
//! `broker users` look after the bus.
//!
//! Start at [`push`]. A push over the bus is the embedded push ([`crate::push::push`]) with the
//! in-process agents replaced by the bus, and with **grants before code** (rule 13, ADR 0218
//! §1, issue 249) in front:
//! 1. the bus's users are composed ([`authorization`]): one per node, allowed its own subjects
//!    and what its modules are granted (`ModuleDefinition.grants`), plus the controller;
//! 2. every granted state bucket is made;
//! 3. when the composed text differs from the last one the bus confirmed
//!    (the record [`CONFIRMED_KEY`], its digest) — the list of users changed, or a node's grants
//!    did — the node holding the bus is sent **first**, its declaration naming the file
//!    [`USERS_PATH`] (its server includes that file and reloads when it changes); the send goes
//!    on only once that node reported the file in place and the server has every node's
//!    permissions in force, proven one by one as that node's user (each granted one allowed,
//!    each taken away refused: [`mesh_bus::probe`]). A grant that fails fails the send:
//!    nothing else is sent, and the error says why;
//! 4. every other node's declaration consumer is made (from now, rule 24) and its declaration
//!    published on JetStream; the push waits for each node's settled report (a report of the
//!    declaration sent that is not mid-change), up to the timeout.
//!
//! Credentials (rule 31): a node enrolled with its NKey (`node enroll`, [`crate::enroll`]) is
//! in the users file by its public key only. A node not yet enrolled has a password, generated
//! once and kept in the records (`bus/passwords/<node>`: on a fleet the bus's records bucket,
//! which no node may read; a file of mode 0600 under the home before the records are moved
//! there), to be given to that node's host as its `--password-file` (`broker password NODE`),
//! and dropped when it is enrolled. The controller signs with its own seed (`--bus-seed`, or
//! `<home>/bus/nkey.seed` made by `broker keygen`) or, without one, uses its password
//! (`--bus-password-file`, or `<home>/bus/passwords/controller`); either stays on the
//! controller's machine: it opens the bus, and so the records. The server is verified against
//! `--bus-ca` ([`BusArgs::tls`]).
//!
//! An enrolled node's seed never leaves its host, so the controller cannot log in as it to
//! prove its permissions in force: the users file carries a probe user
//! ([`mesh_bus::subjects::PROBE_USER`], its key derived from the controller's secret) allowed to
//! publish on a subject naming that very file; the server letting it publish there has loaded
//! the file, and with it every node's permissions.
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
//! The store keeps that archive as it keeps a module's builds (rule 22): the store's record of
//! the module [`USERS_MODULE`] (`store/modules/mesh-bus.json`) names as its current build the
//! archive the bus node was last sent, and as recent builds the last few published — so what
//! the bus node was last sent, and one being sent, are kept by every sweep, and the collector
//! needs nothing of its own. The record of the users the bus last confirmed in force
//! ([`CONFIRMED_KEY`]) holds their digest and the archive they can be read from.
//!
//! What it must never do: send a declaration before its node's grants are confirmed when they
//! changed, report a node as converged from a heartbeat of an older declaration, or drop a
//! node that did not answer (it is named "no report", and in `runtimes` "not heard"), or say
//! that a module of a node whose runtime was not heard is missing or running elsewhere.

use crate::error::{bad_record, bus_error, file_error, Context, Error, Result};
use crate::executor::Fleet;
use crate::home::Home;
use crate::push::Checked;
use mesh_bus::grants;
use mesh_bus::jetstream;
use mesh_bus::probe;
use mesh_bus::{subjects, Bus, BusTls, NatsBus, NatsOptions, NodeSecret};
use mesh_model::build::{ArchiveRef, Build};
use mesh_model::declaration::{ArchivedFile, Declaration, FileSpec, Resource, Spec};
use mesh_model::inventory::Inventory;
use mesh_model::module::Catalogue;
use mesh_model::module::{EntryKind, ModuleTree};
use mesh_model::report::{Outcome, Report};
use mesh_store::archive::{archive_tree, unpack_archive, Archive};
use mesh_store::store::ArchiveStore;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

/// Where the node holding the bus keeps the bus's users; its server configuration includes
/// this file, and its server is reloaded when it changes (`contrib/systemd`).
pub const USERS_PATH: &str = "/etc/nats/mesh-users.conf";

/// The users file's resource id in the bus node's declaration.
pub const USERS_RESOURCE: &str = "mesh-bus/file/users";

/// The module the users file belongs to in the bus node's declaration: the name its archive is
/// named by there, and the store's record (`store/modules/mesh-bus.json`) that keeps it.
pub const USERS_MODULE: &str = "mesh-bus";

/// The users file's path inside its archive.
pub const USERS_ARCHIVE_PATH: &str = "users.conf";

/// What the store's record of [`USERS_MODULE`] names as the repository of its builds: no
/// repository's name (it holds a space), so no merge ever forgets it.
pub const USERS_REPOSITORY: &str = "(the bus's users)";

/// The longest a push waits for the bus to have every node's permissions in force after the
/// bus node reported the users file in place (its server reloading).
pub const GRANTS_CONFIRM_LIMIT: Duration = Duration::from_secs(30);

/// How the controller reaches the bus: `--bus URL`, its credential (`--bus-seed FILE`, or
/// `--bus-password-file FILE`) and the bus's TLS (`--bus-ca FILE`, `--bus-cert`/`--bus-key`).
#[derive(Debug, Clone, Default)]
pub struct BusArgs {
    /// The bus, e.g. `tls://bus.example:4222`.
    pub url: String,
    /// The controller's password file (default `<home>/bus/passwords/controller`), used when
    /// it has no seed.
    pub password_file: Option<PathBuf>,
    /// The controller's NKey seed file (default `<home>/bus/nkey.seed` when there is one).
    pub seed_file: Option<PathBuf>,
    /// The CA the server is verified against, and the controller's client certificate.
    pub tls: BusTls,
    /// The controller's access to its store (`--store-ca`, `--store-credentials`), through
    /// which the bus's users travel to the bus node.
    pub store_access: mesh_store::store::StoreAccess,
    /// How many copies of each stream and bucket to make (`--bus-replicas N`, recorded when
    /// given); `None`: the recorded number, else 1 on a single server and 3 on a cluster
    /// ([`crate::broker::wanted_replicas`]).
    pub replicas: Option<usize>,
}

/// Where the controller's own NKey seed is kept under the home (`broker keygen` makes it,
/// 0600): on this machine only, never among the records.
pub const CONTROLLER_SEED_FILE: &str = "bus/nkey.seed";

/// The controller's seed file: `--bus-seed`, else [`CONTROLLER_SEED_FILE`] under the home
/// when it is there (`None`: the controller is on its password).
pub fn controller_seed_file(home: &Home, bus: &BusArgs) -> Option<PathBuf> {
    bus.seed_file.clone().or_else(|| {
        let path = home.root().join(CONTROLLER_SEED_FILE);
        path.exists().then_some(path)
    })
}

/// `broker keygen`: makes the controller's NKey seed under the home (0600), or shows the one
/// there; the next push puts its public key in the users file instead of its password.
///
/// # Errors
/// The seed cannot be written, or the one there is not a seed or is readable by others.
pub fn controller_keygen(home: &Home) -> Result<mesh_bus::keys::MadeSeed> {
    let path = home.root().join(CONTROLLER_SEED_FILE);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(file_error("making", dir))?;
    }
    mesh_bus::keys::make_seed_file(&path).map_err(|source| Error::Invalid {
        what: format!("the controller's bus seed {}", path.display()),
        source: Some(Box::new(source)),
    })
}

/// What the controller proves itself with: its seed when it has one, else its password.
///
/// # Errors
/// A seed or password file that cannot be read, is readable by others, or holds no seed (the
/// error names the file, never what it holds).
pub fn controller_secret(home: &Home, bus: &BusArgs) -> Result<NodeSecret> {
    if let Some(seed_file) = controller_seed_file(home, bus) {
        let seed = mesh_bus::keys::read_seed_file(&seed_file).map_err(|source| Error::Invalid {
            what: "reading the controller's bus seed".to_owned(),
            source: Some(Box::new(source)),
        })?;
        return Ok(NodeSecret::NkeySeed(seed.trim().to_owned()));
    }
    Ok(NodeSecret::Password(controller_password(home, bus)?))
}

/// The controller's user as the users file holds it: its public key, or its password.
fn controller_credential(secret: &NodeSecret) -> Result<grants::UserCredential> {
    Ok(match secret {
        NodeSecret::Password(password) => grants::UserCredential::Password(password.clone()),
        NodeSecret::NkeySeed(seed) => grants::UserCredential::Nkey(
            mesh_bus::keys::public_key_of_seed(seed)
                .ok_or_else(|| Error::invalid("the controller's seed is not an NKey user seed"))?,
        ),
    })
}

/// The probe user's seed ([`mesh_bus::subjects::PROBE_USER`]), derived from the controller's
/// secret: kept nowhere, the same on any machine holding that secret.
fn probe_seed(secret: &NodeSecret) -> String {
    let text = match secret {
        NodeSecret::Password(password) => password,
        NodeSecret::NkeySeed(seed) => seed,
    };
    mesh_bus::keys::derived_user_seed(text, mesh_bus::subjects::PROBE_USER)
}

/// How the controller connects: its credential and the bus's TLS.
///
/// # Errors
/// As [`controller_secret`].
pub fn controller_options(home: &Home, bus: &BusArgs) -> Result<NatsOptions> {
    let options = match controller_secret(home, bus)? {
        NodeSecret::Password(password) => NatsOptions::for_controller(&bus.url, password),
        NodeSecret::NkeySeed(seed) => NatsOptions::for_controller_nkey(&bus.url, seed),
    };
    Ok(NatsOptions {
        replicas: bus.replicas,
        ..options.with_tls(bus.tls.clone())
    })
}

/// Where the controller's own bus password is kept when `--bus-password-file` is not given:
/// `<home>/bus/passwords/controller` — on this machine, for it is what opens the bus (and so
/// the records on it).
pub fn password_path(home: &Home, user: &str) -> PathBuf {
    home.root().join("bus").join("passwords").join(user)
}

use crate::enroll::password_key;

/// `bytes` random bytes from `/dev/urandom`, in hex; `what` they are for names them in an
/// error.
pub fn random_hex(bytes: usize, what: &str) -> Result<String> {
    let mut random = vec![0u8; bytes];
    use std::io::Read as _;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut file| file.read_exact(&mut random))
        .map_err(file_error(&format!("reading for {what}"), "/dev/urandom"))?;
    Ok(random.iter().map(|b| format!("{b:02x}")).collect())
}

fn random_password() -> Result<String> {
    random_hex(16, "a password")
}

/// `user`'s bus password (`controller` or a node's name), generated (random, 32 hex digits)
/// the first time it is asked for and the same ever after. The controller's, and in the
/// embedded default every node's, is a file under `<home>/bus/passwords` (mode 0600); on a
/// fleet a node's is in the records (`bus/passwords/<node>`), so a controller started on
/// another machine composes the same users and no host is locked out.
pub fn password(home: &Home, user: &str) -> Result<String> {
    if home.records_on_bus() && user != mesh_bus::subjects::CONTROLLER_USER {
        let key = password_key(user);
        let bytes = match home.get(&key)? {
            Some(bytes) => bytes,
            None => {
                let fresh = format!("{}\n", random_password()?);
                home.records()
                    .update(&key, &mut |current| {
                        Ok(current.map_or_else(|| fresh.clone().into_bytes(), <[u8]>::to_vec))
                    })
                    .for_node(user, || format!("keeping `{user}`'s bus password"))?
            }
        };
        let text =
            String::from_utf8(bytes).map_err(bad_record(home.records().locate(&key), "text"))?;
        return Ok(text.trim_end_matches(['\n', '\r']).to_owned());
    }
    let path = password_path(home, user);
    match std::fs::read_to_string(&path) {
        Ok(text) => return Ok(text.trim_end_matches(['\n', '\r']).to_owned()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(file_error("reading", &path)(error)),
    }
    let password = random_password()?;
    let dir = path.parent().expect("a password file has a directory");
    std::fs::create_dir_all(dir).map_err(file_error("making", dir))?;
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(file_error("making", &path))?;
    writeln!(file, "{password}").map_err(file_error("writing", &path))?;
    file.sync_all().map_err(file_error("writing", &path))?;
    Ok(password)
}

/// The controller's bus password: `--bus-password-file` (refused when others may read it),
/// else the one kept in the home.
pub fn controller_password(home: &Home, bus: &BusArgs) -> Result<String> {
    match &bus.password_file {
        Some(file) => Ok(mesh_store::secret::read_secret(file)
            .map_err(|source| Error::Invalid {
                what: "the controller's bus password".to_owned(),
                source: Some(Box::new(source)),
            })?
            .trim_end_matches(['\n', '\r'])
            .to_owned()),
        None => password(home, mesh_bus::subjects::CONTROLLER_USER),
    }
}

/// `broker password NODE`: the node's bus password, for its host's `--password-file` (made if
/// it has none).
///
/// # Errors
/// The node is enrolled with an NKey (it has no password: its host signs with its seed);
/// the password cannot be read or made.
pub fn node_password(home: &Home, node: &str) -> Result<String> {
    if crate::enroll::enrolled_key(home, node)?.is_some() {
        return Err(Error::refused(format!(
            "`{node}` is enrolled with an NKey and has no bus password: its host signs with the \
             seed `mesh-host keygen` made (serve without --password-file)"
        )));
    }
    password(home, node)
}

/// The bus's users as the server's `authorization` block: the controller, one user per node
/// with the state buckets and event subjects its assigned modules are granted — an enrolled
/// node by its public key, one not yet enrolled by its password — and the probe user
/// ([`mesh_bus::subjects::PROBE_USER`]).
///
/// # Errors
/// Every grant problem at once (a bad bucket name, a subject overlapping the mesh's own, …),
/// each naming its node; a password that cannot be read or made.
pub fn authorization(
    home: &Home,
    catalogue: &Catalogue,
    inventory: &Inventory,
    controller: &NodeSecret,
) -> Result<String> {
    let mut nodes = Vec::new();
    // One listing of the keys and one of the passwords, not a read per node.
    let mut credentials = crate::enroll::node_credentials(home, inventory.file.nodes.keys())?;
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
pub fn users_text(home: &Home, checked: &Checked, bus: &BusArgs) -> Result<String> {
    let inventory = home.inventory()?;
    let controller = controller_secret(home, bus)?;
    authorization(home, &checked.0, &inventory, &controller)
}

/// Every bucket the nodes' modules are granted.
fn granted_buckets(catalogue: &Catalogue, inventory: &Inventory) -> BTreeSet<String> {
    inventory
        .file
        .nodes
        .keys()
        .flat_map(|node| inventory.modules_of(node))
        .filter_map(|module| catalogue.module(module))
        .flat_map(|module| module.definition.grants.buckets.iter().cloned())
        .collect()
}

/// The record of the users the bus last confirmed in force: a [`ConfirmedUsers`] (their
/// digest, and the archive in the store they can be read from), never the text.
pub const CONFIRMED_KEY: &str = "bus/authorization.json";

/// The record that held the confirmed users' whole text before [`CONFIRMED_KEY`]; read when
/// that one is absent, and removed once it is written.
pub const CONFIRMED_TEXT_KEY: &str = "bus/authorization.conf";

/// The format of [`ConfirmedUsers`].
pub const CONFIRMED_FORMAT: u32 = 1;

/// The users the bus last confirmed in force (record [`CONFIRMED_KEY`], format
/// [`CONFIRMED_FORMAT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ConfirmedUsers {
    /// Always [`CONFIRMED_FORMAT`].
    pub format: u32,
    /// `sha256:<hex>` of the users file's text.
    pub users: String,
    /// The archive in the store holding the text ([`USERS_ARCHIVE_PATH`]).
    pub archive: ArchiveRef,
}

/// What the bus last confirmed: the users' digest, and either the archive holding them or (a
/// record of the format before [`CONFIRMED_KEY`]) their text.
enum Confirmed {
    Archived(ConfirmedUsers),
    Text(String),
}

impl Confirmed {
    fn digest(&self) -> String {
        match self {
            Confirmed::Archived(record) => record.users.clone(),
            Confirmed::Text(text) => mesh_model::sha256_digest(text.as_bytes()),
        }
    }
}

/// The users the bus last confirmed in force, if any.
fn confirmed(home: &Home) -> Result<Option<Confirmed>> {
    if let Some(bytes) = home.get(CONFIRMED_KEY)? {
        let record: ConfirmedUsers = serde_json::from_slice(&bytes).map_err(bad_record(
            home.records().locate(CONFIRMED_KEY),
            "a record of confirmed users",
        ))?;
        if record.format != CONFIRMED_FORMAT {
            return Err(Error::Format {
                location: home.records().locate(CONFIRMED_KEY),
                found: record.format.to_string(),
                expected: CONFIRMED_FORMAT,
            });
        }
        return Ok(Some(Confirmed::Archived(record)));
    }
    Ok(home
        .get(CONFIRMED_TEXT_KEY)?
        .map(|bytes| Confirmed::Text(String::from_utf8_lossy(&bytes).into_owned())))
}

/// The digest of the users the bus last confirmed in force, if any.
///
/// # Errors
/// The record cannot be read, or is not one.
pub fn confirmed_digest(home: &Home) -> Result<Option<String>> {
    Ok(confirmed(home)?.map(|confirmed| confirmed.digest()))
}

/// The text of the users the bus last confirmed, where it can be had: from the store, by the
/// archive the record names (checked against its digests), or from a record of the format
/// before. `None`, logged, when the store cannot give it.
async fn confirmed_text(confirmed: &Confirmed, store: &dyn ArchiveStore) -> Option<String> {
    let record = match confirmed {
        Confirmed::Text(text) => return Some(text.clone()),
        Confirmed::Archived(record) => record,
    };
    let read = async {
        let fetched = store.fetch(&record.archive).await?;
        let text = read_users_archive(&fetched.bytes, &record.archive)?;
        if mesh_model::sha256_digest(text.as_bytes()) != record.users {
            return Err(Error::BadRecord {
                location: format!("the bus's users archive {}", record.archive.digest),
                what: format!("the users {}", record.users),
                source: None,
            });
        }
        Ok::<_, Error>(text)
    };
    match read.await {
        Ok(text) => Some(text),
        Err(error) => {
            tracing::warn!(archive = %record.archive.digest, store = %store.name(),
                error = error.chain_line(),
                "the users the bus last confirmed cannot be read: only what the new ones \
                 allow is proven, not what they take away");
            None
        }
    }
}

/// Records `users` (packed as `archive`) as the ones the bus confirmed in force, and removes a
/// record of the format before, which held the text.
///
/// # Errors
/// The records cannot be written.
pub fn record_confirmed(home: &Home, users: &str, archive: &ArchiveRef) -> Result<()> {
    home.put_json(
        CONFIRMED_KEY,
        &ConfirmedUsers {
            format: CONFIRMED_FORMAT,
            users: mesh_model::sha256_digest(users.as_bytes()),
            archive: archive.clone(),
        },
    )?;
    if home.get(CONFIRMED_TEXT_KEY)?.is_some() {
        home.records().delete(CONFIRMED_TEXT_KEY)?;
        tracing::info!(
            "the record of the confirmed users is now their digest ({CONFIRMED_KEY}); \
             {CONFIRMED_TEXT_KEY}, which held their text, is removed"
        );
    }
    Ok(())
}

/// The group the bus node's `nats-server` runs as (Debian's package: user and group `nats`),
/// which must read the users file.
pub const USERS_GROUP: &str = "nats";

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

impl UsersFile {
    /// The users file of `users`, packed in `archive` ([`users_archive`]), for `bus_node`.
    pub fn new(bus_node: &str, users: &str, archive: &Archive) -> UsersFile {
        UsersFile {
            bus_node: bus_node.to_owned(),
            archive: archive.reference.clone(),
            sha256: mesh_model::sha256_digest(users.as_bytes()),
        }
    }
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
pub fn read_users_archive(bytes: &[u8], archive: &ArchiveRef) -> Result<String> {
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
pub fn with_users_file(declaration: Declaration, users: &UsersFile) -> Declaration {
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
pub fn with_users_file_of(declaration: Declaration, sent: &Declaration) -> Declaration {
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

/// Publishes the users archive to the store, held by its manifest (rule 21), and records it
/// among the recent builds of [`USERS_MODULE`] in the store's record (the last
/// [`mesh_store::keep::RECENT_BUILDS_KEPT`] kept there), under the publish lock, so no sweep
/// lets it go before the bus node is sent it. The record's current build (what the bus node
/// was last sent) is left as it is.
///
/// # Errors
/// The store or the record cannot be written.
pub async fn publish_users(home: &Home, store: &dyn ArchiveStore, archive: &Archive) -> Result<()> {
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
pub async fn users_sent(home: &Home, archive: &ArchiveRef) -> Result<()> {
    let lock = mesh_store::lock::PublishLock::acquire(home.root())
        .await
        .for_module(USERS_MODULE, || {
            "taking the publish lock to keep the bus's users".to_owned()
        })?;
    crate::builds::set_current(home, &lock, USERS_MODULE, archive)
}

/// Connects as the controller.
pub async fn connect(home: &Home, bus: &BusArgs) -> Result<NatsBus> {
    let options = controller_options(home, bus)?;
    NatsBus::connect(&options).await.map_err(bus_error(|| {
        format!("connecting to the bus at {}", bus.url)
    }))
}

/// A report heard on the bus, if it reads and was published on its own node's subject (a
/// node's grants let it publish only its own); otherwise logged and `None`. A permission
/// probe's message on a report subject ([`probe::is_probe`]) is passed over quietly.
fn heard_report(message: &mesh_bus::Message) -> Option<Report> {
    if probe::is_probe(&message.payload) {
        return None;
    }
    let report = match Report::from_json(&message.payload) {
        Ok(report) => report,
        Err(error) => {
            tracing::warn!(subject = %message.subject, %error, "an unreadable report");
            return None;
        }
    };
    if message.subject != subjects::report(&report.node) {
        tracing::warn!(subject = %message.subject, node = %report.node,
            "a report published on another node's subject: ignored");
        return None;
    }
    Some(report)
}

/// The `Nats-Msg-Id` one send of a declaration is published with: its node, its digest and
/// `send` (made once per send, before any attempt). A publish tried again within the send —
/// its answer lost, the bus restarting — is so stored once (JetStream drops a message whose
/// id it stored within the stream's duplicate window), while a later send of the same
/// declaration (a push again, a resumed rollout) is a new message the host applies again.
pub fn declaration_message_id(declaration: &Declaration, send: &str) -> String {
    format!("{}:{}:{send}", declaration.node, declaration.digest())
}

/// Records `declarations` sent (together), then says the users archive one names was sent.
async fn recorded_sent(home: &Home, declarations: &[&Declaration]) -> Result<()> {
    home.record_sent_many(declarations)?;
    for declaration in declarations {
        if let Some(archive) = declaration.archives.get(USERS_MODULE) {
            users_sent(home, archive).await?;
        }
    }
    Ok(())
}

/// Publishes `declaration` on its node's subject through JetStream with the message id
/// `message_id` (stored when this returns), its consumer made first; records nothing.
///
/// # Guarantees
/// Published again with the same `message_id` within the stream's duplicate window, the
/// declaration is stored once.
async fn publish(bus: &NatsBus, declaration: &Declaration, message_id: &str) -> Result<()> {
    let js = bus.jetstream();
    let node = &declaration.node;
    jetstream::ensure_declaration_consumer(&js, node)
        .await
        .map_err(bus_error(|| {
            format!("making the declaration consumer of `{node}`")
        }))?;
    jetstream::publish_declaration(&js, node, declaration.canonical_json(), message_id)
        .await
        .map_err(bus_error(|| {
            format!("`{node}`: the declarations stream did not store it")
        }))?;
    Ok(())
}

/// [`publish`], then the declaration recorded sent — the publish tried again for up to
/// [`SEND_RETRY_LIMIT`]: a server restarting, or one reloading its users (nats-server 2.9 may
/// answer for a moment that the stream does not exist). Every attempt carries the same
/// message id ([`declaration_message_id`]), so one stored before its answer was lost is not
/// stored again.
///
/// # Errors
/// The bus did not store it within the limit; the home cannot be written.
async fn send_patiently(home: &Home, bus: &NatsBus, declaration: &Declaration) -> Result<()> {
    publish_patiently(bus, declaration).await?;
    recorded_sent(home, &[declaration]).await
}

/// [`publish`], tried again as [`send_patiently`] does.
async fn publish_patiently(bus: &NatsBus, declaration: &Declaration) -> Result<()> {
    let message_id = declaration_message_id(declaration, &random_hex(8, "a send's id")?);
    let deadline = tokio::time::Instant::now() + SEND_RETRY_LIMIT;
    loop {
        match publish(bus, declaration, &message_id).await {
            Ok(()) => return Ok(()),
            Err(error) if tokio::time::Instant::now() < deadline => {
                tracing::warn!(node = %declaration.node, error = error.chain_line(),
                    "the bus did not take a declaration; trying again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(error) => {
                // Said when it is why: the declarations' stream has no leader (its cluster lost
                // its quorum), so the operator is not left with a bare time-out.
                let why = jetstream::leaderless(
                    &bus.jetstream(),
                    mesh_bus::subjects::DECLARATIONS_STREAM,
                )
                .await
                .map(|why| {
                    format!(
                        " — {why}; it is not stored (a server that had not yet seen the \
                             quorum lost may hold it and store it once when quorum returns: \
                             its message id keeps a second copy out)"
                    )
                })
                .unwrap_or_default();
                return Err(error).for_node(&declaration.node, || {
                    format!(
                        "the bus did not take `{}`'s declaration within {} s{why}",
                        declaration.node,
                        SEND_RETRY_LIMIT.as_secs()
                    )
                });
            }
        }
    }
}

/// Whether the bus node's report says the users file is in place.
fn users_file_in_place(report: &Report) -> Result<(), String> {
    match report.resources.get(USERS_RESOURCE) {
        Some(Outcome::Applied { .. } | Outcome::Unchanged) => Ok(()),
        Some(other) => Err(format!(
            "the users file is {}{}",
            other.word(),
            mesh_host::outcome_detail(other)
        )),
        None => Err("its report does not name the users file".to_owned()),
    }
}

/// Waits until the server has put every node's permissions in force (the bus node's server
/// has reloaded `users`), or [`GRANTS_CONFIRM_LIMIT`]: for each node, connected as its user,
/// every permission `users` gives it is allowed and every one `confirmed` (the users the bus
/// last confirmed) gave it and `users` does not is refused — one by one
/// ([`mesh_bus::probe::prove_permissions`]). A change of permissions alone, the users the
/// same, is so proven before any code that needs it is sent (issue 249).
///
/// An enrolled node's seed is not the controller's to sign with: the probe user proves the
/// file in force first (its permission names the file, so every node's permissions in it
/// are in force with it); each node still on a password is then proven as that node.
///
/// # Errors
/// The first user whose permissions are not in force by the limit, with every permission not
/// proven: the permission and what the server said. A password that cannot be read.
async fn confirm_users(
    home: &Home,
    bus: &BusArgs,
    controller: &NodeSecret,
    inventory: &Inventory,
    users: &str,
    confirmed: Option<&str>,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + GRANTS_CONFIRM_LIMIT;
    let expected = grants::permissions_in_config(users);
    let previous = confirmed
        .map(grants::permissions_in_config)
        .unwrap_or_default();
    if let Some(permissions) = expected.get(mesh_bus::subjects::PROBE_USER) {
        let mut options = NatsOptions {
            credentials: Some(mesh_bus::nats::Credentials::Nkey {
                user: mesh_bus::subjects::PROBE_USER.to_owned(),
                seed: probe_seed(controller),
            }),
            name: Some("mesh-controller proving the bus's users".to_owned()),
            inbox_prefix: Some(mesh_bus::subjects::probe_inbox_prefix()),
            ..NatsOptions::new(&bus.url)
        }
        .with_tls(bus.tls.clone());
        options.connect_timeout = Duration::from_secs(2);
        if let Err(unproven) = probe::prove_permissions(
            &options,
            permissions,
            previous.get(mesh_bus::subjects::PROBE_USER),
            deadline,
        )
        .await
        {
            return Err(Error::Bus {
                doing: format!(
                    "the bus has not put its new users in force {}s after they were sent",
                    GRANTS_CONFIRM_LIMIT.as_secs()
                ),
                source: Some(
                    unproven
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                        .into(),
                ),
            });
        }
    }
    let on_passwords = crate::enroll::nodes_on_passwords(home, inventory)?;
    for node in &on_passwords {
        let user = mesh_bus::subjects::node_user(node);
        let Some(permissions) = expected.get(&user) else {
            return Err(Error::refused(format!(
                "the bus's users do not name `{user}`"
            )));
        };
        let mut options =
            NatsOptions::for_node(&bus.url, node, password(home, node)?).with_tls(bus.tls.clone());
        options.connect_timeout = Duration::from_secs(2);
        options.name = Some(format!("mesh-controller checking {node}'s grants"));
        if let Err(unproven) =
            probe::prove_permissions(&options, permissions, previous.get(&user), deadline).await
        {
            return Err(Error::Node {
                node: node.clone(),
                doing: format!(
                    "the bus has not put `{user}`'s permissions in force {}s after its users \
                     were sent",
                    GRANTS_CONFIRM_LIMIT.as_secs()
                ),
                source: Box::new(Error::bus(
                    unproven
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; "),
                )),
            });
        }
    }
    Ok(())
}

/// How long making a granted state bucket is tried again (a server reloading its users)
/// before the grant fails.
pub const BUCKET_RETRY_LIMIT: Duration = Duration::from_secs(10);

/// How many declarations a send to many nodes keeps in flight at once.
pub const SEND_CONCURRENCY: usize = 64;

/// How long a send keeps trying a bus that does not take it (a server restarting or
/// reloading) before it fails; a rollout's plan keeps its place and `plans resume` sends again.
pub const SEND_RETRY_LIMIT: Duration = Duration::from_secs(60);

/// A fleet's real hosts over the bus (every send with `--bus`: `push`, `merge`, `plans resume`,
/// `push --behind`, the daemon): the real grants, declarations published to each node's
/// consumer, reports heard on `mesh.report.*`. The executor ([`crate::executor`]) drives it.
///
/// # Guarantees
/// - Grants before code (rule 13): [`Fleet::issue_grants`] makes the granted state
///   buckets, and while the bus's users for the rollout differ from the ones the bus last
///   confirmed it answers only the bus node's grants (its declaration names the users file,
///   [`Fleet::users_file`]); any other node's grants fail until the bus node reported the
///   file in place and the server has every node's permissions in force, proven one by one
///   — then the users are recorded as confirmed.
/// - The bus node's declaration always names the users file, so no send takes it away; the
///   archive holding it is in the store, held and kept, before any declaration naming it is
///   sent (see [How the users file travels](self)).
/// - A send is stored by JetStream before it is recorded sent; a bus that does not take it is
///   tried again for up to [`SEND_RETRY_LIMIT`], stored once however often it is tried.
pub struct NatsFleet {
    args: BusArgs,
    bus: NatsBus,
    store: Box<dyn ArchiveStore>,
    reports: mesh_bus::Subscription,
    controller: NodeSecret,
    /// The bus's users as this rollout's catalogue and inventory compose them.
    users: String,
    /// [`NatsFleet::users`] packed as an archive.
    users_archive: Option<Archive>,
    /// The users archives this fleet published to the store (by digest).
    published: BTreeSet<String>,
    buckets: BTreeSet<String>,
    inventory: Option<Inventory>,
    /// How many copies the streams and module state buckets this fleet makes keep.
    replicas: usize,
}

impl NatsFleet {
    /// Connects as the controller, makes the mesh's streams and listens for reports; the bus's
    /// users travel through `store` (the controller's archive store).
    ///
    /// # Errors
    /// The bus cannot be reached, or the streams cannot be made; the store's client cannot be
    /// made.
    pub async fn start(
        home: &Home,
        args: &BusArgs,
        store: &mesh_store::store::StoreSpec,
    ) -> Result<NatsFleet> {
        let controller = controller_secret(home, args)?;
        let store = mesh_store::open_store_with(store, &args.store_access)
            .for_module(USERS_MODULE, || {
                format!("opening the store {store} for the bus's users")
            })?;
        let bus = connect(home, args).await?;
        let replicas = crate::broker::wanted_replicas(home, args, &bus)?;
        jetstream::ensure_streams_with(&bus.jetstream(), replicas)
            .await
            .map_err(bus_error(|| "making the mesh's streams".to_owned()))?;
        let reports = bus
            .subscribe(subjects::ALL_REPORTS)
            .await
            .map_err(bus_error(|| "listening for reports".to_owned()))?;
        Ok(NatsFleet {
            args: args.clone(),
            bus,
            store,
            reports,
            controller,
            users: String::new(),
            users_archive: None,
            published: BTreeSet::new(),
            buckets: BTreeSet::new(),
            inventory: None,
            replicas,
        })
    }

    /// Whether the users composed differ from the ones the bus last confirmed. A record that
    /// cannot be read counts as a change (the bus node goes first, which is always safe).
    fn users_differ(&self, home: &Home) -> bool {
        confirmed_digest(home).ok().flatten()
            != Some(mesh_model::sha256_digest(self.users.as_bytes()))
    }

    /// Publishes the users archive `declaration` names, if it names one this fleet has not
    /// published yet ([`publish_users`]).
    async fn publish_users_of(&mut self, home: &Home, declaration: &Declaration) -> Result<()> {
        let Some(named) = declaration.archives.get(USERS_MODULE) else {
            return Ok(());
        };
        if self.published.contains(&named.digest) {
            return Ok(());
        }
        let archive = self
            .users_archive
            .as_ref()
            .filter(|archive| &archive.reference == named)
            .ok_or_else(|| {
                Error::internal(format!(
                    "`{}`'s declaration names the users archive {}, which this rollout did not \
                     compose",
                    declaration.node, named.digest
                ))
            })?;
        publish_users(home, self.store.as_ref(), archive).await?;
        self.published.insert(named.digest.clone());
        Ok(())
    }
}

#[async_trait::async_trait]
impl Fleet for NatsFleet {
    /// Fixes the bus's users (and the archive they travel in) and granted buckets for one
    /// module's rollout, from the catalogue and inventory it composes from.
    ///
    /// # Errors
    /// As [`authorization`].
    fn prepare(&mut self, home: &Home, catalogue: &Catalogue, inventory: &Inventory) -> Result<()> {
        self.users = authorization(home, catalogue, inventory, &self.controller)?;
        self.users_archive = Some(users_archive(&self.users)?);
        self.buckets = granted_buckets(catalogue, inventory);
        self.inventory = Some(inventory.clone());
        Ok(())
    }

    fn users_change(&self, home: &Home, _grants_change: bool) -> Option<String> {
        self.users_differ(home)
            .then(|| "the bus's users differ from the ones it confirmed".to_owned())
    }

    /// The node holding the bus and the users file (in its archive) it is sent with every
    /// declaration.
    fn users_file(&self) -> Option<UsersFile> {
        let inventory = self.inventory.as_ref()?;
        let archive = self.users_archive.as_ref()?;
        Some(UsersFile::new(
            &inventory.file.bus_node,
            &self.users,
            archive,
        ))
    }

    /// Issues the grants of `nodes` (see the type's guarantees): `Ok(Ok(what was done))`,
    /// `Ok(Err(why not))` for a grant that failed (the state machine tries it again).
    ///
    /// # Errors
    /// The home cannot be read or written.
    async fn issue_grants(
        &mut self,
        home: &Home,
        nodes: &[String],
    ) -> Result<std::result::Result<String, String>> {
        let js = self.bus.jetstream();
        for bucket in &self.buckets {
            // A server reloading its users answers for a moment "jetstream unavailable": try
            // again for a while before the grant fails.
            let deadline = tokio::time::Instant::now() + BUCKET_RETRY_LIMIT;
            loop {
                match jetstream::ensure_bucket_with(&js, bucket, self.replicas).await {
                    Ok(_) => break,
                    Err(error) if tokio::time::Instant::now() < deadline => {
                        tracing::debug!(bucket, %error, "a state bucket could not be made; trying again");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(error) => {
                        return Ok(Err(format!("making state bucket `{bucket}`: {error}")))
                    }
                }
            }
        }
        let (Some(inventory), Some(users_file)) = (self.inventory.as_ref(), self.users_file())
        else {
            return Ok(Err("the rollout's users were not composed".to_owned()));
        };
        if !self.users_differ(home) {
            return Ok(Ok(format!(
                "state buckets made ({}); the bus's users are as it confirmed them",
                self.buckets.len()
            )));
        }
        let bus_node = &inventory.file.bus_node;
        if nodes.iter().all(|node| node == bus_node) {
            return Ok(Ok(format!(
                "the bus's users changed: `{bus_node}`, holding the bus, is sent them first"
            )));
        }
        // Everyone else waits for the bus node to have the users in place.
        let users_resource =
            with_users_file(Declaration::new(bus_node.clone(), Vec::new()), &users_file)
                .resources
                .into_iter()
                .find(|r| r.id == USERS_RESOURCE);
        let sent = home.sent(bus_node)?;
        match sent {
            Some(sent) if sent.resources.iter().any(|r| Some(r) == users_resource.as_ref()) => {
                match home.report(bus_node)? {
                    Some(report) if report.declaration == sent.digest() => {
                        if let Err(reason) = users_file_in_place(&report) {
                            return Ok(Err(format!("on `{bus_node}`, {reason}")));
                        }
                    }
                    Some(_) | None => {
                        return Ok(Err(format!(
                            "`{bus_node}`, holding the bus, has not reported the bus's new users in place"
                        )))
                    }
                }
            }
            Some(_) | None => {
                return Ok(Err(format!(
                    "the bus's users changed and `{bus_node}`, holding the bus, was not sent them"
                )))
            }
        }
        let previous = match confirmed(home)? {
            Some(confirmed) => confirmed_text(&confirmed, self.store.as_ref()).await,
            None => None,
        };
        if let Err(error) = confirm_users(
            home,
            &self.args,
            &self.controller,
            inventory,
            &self.users,
            previous.as_deref(),
        )
        .await
        {
            return Ok(Err(error.chain_line()));
        }
        record_confirmed(home, &self.users, &users_file.archive)?;
        Ok(Ok("the bus confirmed its new users".to_owned()))
    }

    /// Publishes a declaration to its node's consumer and records it sent, trying a bus that
    /// does not take it again for up to [`SEND_RETRY_LIMIT`]; a users archive it names is put
    /// in the store first.
    ///
    /// # Errors
    /// The store did not take the users archive; the bus did not store the declaration within
    /// the limit; the home cannot be written.
    async fn send(&mut self, home: &Home, declaration: &Declaration) -> Result<()> {
        self.publish_users_of(home, declaration).await?;
        send_patiently(home, &self.bus, declaration).await
    }

    /// Overlapped: at most [`SEND_CONCURRENCY`] declarations in flight at once.
    async fn send_many(&mut self, home: &Home, declarations: &[Declaration]) -> Result<()> {
        use futures_util::StreamExt as _;
        for declaration in declarations {
            self.publish_users_of(home, declaration).await?;
        }
        let bus = &self.bus;
        let sends: Vec<_> = declarations
            .iter()
            .map(|declaration| {
                Box::pin(async move { (declaration, publish_patiently(bus, declaration).await) })
            })
            .collect();
        let mut sends = futures_util::stream::iter(sends).buffer_unordered(SEND_CONCURRENCY);
        let mut first_error = None;
        let mut stored = Vec::with_capacity(declarations.len());
        while let Some((declaration, sent)) = sends.next().await {
            match sent {
                Ok(()) => stored.push(declaration),
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        // What the bus stored is recorded as sent, together (not a round trip per node).
        recorded_sent(home, &stored).await?;
        first_error.map_or(Ok(()), Err)
    }

    /// The next report heard within `wait`, recorded in the home.
    ///
    /// # Errors
    /// The home cannot be written; the subscription ended.
    async fn next_report(&mut self, home: &Home, wait: Duration) -> Result<Option<Report>> {
        let until = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(until, self.reports.next()).await {
                Ok(Some(message)) => {
                    if let Some(report) = heard_report(&message) {
                        home.record_report(&report)?;
                        return Ok(Some(report));
                    }
                }
                Ok(None) => return Err(Error::bus("the bus's report subscription ended")),
                Err(_) => return Ok(None),
            }
        }
    }
}
