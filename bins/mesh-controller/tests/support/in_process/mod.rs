//! The controller called as a library, in process, on a test [`Mesh`]'s home or on a fleet
//! bed's real bus ([`Bed`]): each method does what its command's `exec` does
//! (`src/bin/mesh-controller/commands/`), without the rendering, and answers with what the
//! command prints with `--output json` — as that JSON, so a test's assertions on it read the
//! same, or as the library's value it is printed from — beside the progress lines it would have
//! printed and the library's value that decides its exit code. The methods are kept by command
//! group: `plans` (repositories, merges, plans, builds, `check`, `plan`), `push`, `status`,
//! `settings`, `secrets`, `records` and `broker` (the bus's own commands, `runtimes` among
//! them).
//!
//! What only the binary does — parsing, rendering, exit codes as a process ends with them, a
//! fail point's death — stays with [`Mesh::run`] and its kin.

mod plans;
mod push;
mod status;

// Each test file uses some of them.
#[allow(unused_imports)]
pub use plans::{Driven, MergeFlags, Merged};
#[allow(unused_imports)]
pub use push::Pushed;
#[allow(unused_imports)]
pub use status::Status;

use super::fleet::Bed;
use super::Mesh;

use mesh_controller::catalogue;
use mesh_controller::MeshOptions;
use mesh_controller::Runtime;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

impl Mesh {
    /// The mesh of this home opened as a Rust tool opens it: the embedded default (the records
    /// under the home, one host agent per node in this process) and the home's store.
    pub fn library(&self) -> Library {
        self.library_with(MeshOptions::default())
            .unwrap_or_else(|error| panic!("opening the mesh: {error}"))
    }

    /// The mesh of this home opened with `options` (another store, a bus); the error as the
    /// binary says it.
    pub fn library_with(&self, options: MeshOptions) -> Result<Library, String> {
        Library::open(self.home(), options)
    }
}

impl Bed {
    /// What the bed's controller commands are given as flags, as the options a Rust tool opens
    /// the mesh with: the bus and its CA, the secured store, the retry limit on a cluster.
    pub fn mesh_options(&self) -> MeshOptions {
        let secured = self
            .registry
            .secured
            .as_ref()
            .expect("the bed's store is secured");
        let store_access = mesh_store::store::StoreAccess {
            ca_file: Some(secured.pki.ca_file.clone()),
            credentials_file: Some(secured.controller_credentials.clone()),
        };
        MeshOptions {
            bus: Some({
                let bus = mesh_controller::bus::BusConfig::new(self.url.clone())
                    .with_ca_file(&self.pki.ca_file);
                match self.retry_limit() {
                    Some(limit) => bus.with_retry_limit(limit),
                    None => bus,
                }
            }),
            store: Some(self.registry.url().parse().expect("the store's URL")),
            store_access,
            report_limit: None,
        }
    }

    /// The bed's mesh opened as a Rust tool opens it on the fleet's bus: the records on the bus,
    /// the store the controller commands are given, the sends to the real hosts — what the
    /// bed's controller commands are given as flags ([`Bed::mesh_options`]).
    pub fn library(&self) -> Library {
        self.try_library()
            .unwrap_or_else(|error| panic!("opening the mesh on the bus: {error}"))
    }

    /// [`Bed::library`], the error as the binary says it (a bus reloading its users refuses the
    /// controller's login for a moment).
    pub fn try_library(&self) -> Result<Library, String> {
        Library::open(self.home.path(), self.mesh_options())
    }
}

/// A mesh opened in process, and the runtime its async calls run on.
pub struct Library {
    mesh: Arc<mesh_controller::Mesh>,
    tokio: tokio::runtime::Runtime,
}

impl Library {
    /// The mesh at `home` opened with `options` (the embedded default, a bus, another store);
    /// the error as the binary says it.
    pub fn open(home: &Path, options: MeshOptions) -> Result<Library, String> {
        let mesh = mesh_controller::Mesh::open(home, options).map_err(|e| said(&e))?;
        Ok(Library {
            mesh: Arc::new(mesh),
            tokio: tokio::runtime::Runtime::new().expect("a tokio runtime"),
        })
    }

    /// The mesh, whose front door a test calls.
    pub fn mesh(&self) -> &mesh_controller::Mesh {
        &self.mesh
    }

    /// The mesh's home.
    pub fn home(&self) -> &mesh_controller::Home {
        self.mesh.home()
    }

    /// A call of the front door on the mesh, run on the library's runtime; its error as the
    /// binary says it.
    pub fn call<T>(
        &self,
        call: impl AsyncFnOnce(&mesh_controller::Mesh) -> mesh_controller::Result<T>,
    ) -> Result<T, String> {
        self.tokio.block_on(call(&self.mesh)).map_err(|e| said(&e))
    }

    /// `settings set MODULE [--node NODE] JSON` (keys merged into the layer, none dropped):
    /// the front door's `settings_edit`, as the command calls it.
    pub fn settings_set(
        &self,
        module: &str,
        node: Option<&str>,
        json: &str,
    ) -> Result<mesh_controller::settings::Answer, String> {
        self.call(async |mesh| {
            mesh.settings_edit(
                &crate::support::layer(module, node),
                &mesh_controller::SettingsEdit::Set {
                    json,
                    replace: false,
                },
                mesh_store::clock::now(),
            )
            .await
        })
    }

    /// `settings rename MODULE OLD NEW`: the front door's `settings_rename`, as the command
    /// calls it.
    pub fn settings_rename(
        &self,
        module: &str,
        old: &str,
        new: &str,
    ) -> Result<mesh_controller::settings::Renamed, String> {
        self.call(async |mesh| {
            mesh.settings_rename(
                module,
                (old, new),
                "mesh-controller settings rename",
                mesh_store::clock::now(),
            )
            .await
        })
    }

    /// `broker users`: the bus's users as the controller composes them now.
    pub fn users_text(&self) -> Result<String, String> {
        self.call(async |mesh| {
            let checked = mesh.checked().await?;
            let bus = mesh.bus().cloned().unwrap_or_default();
            mesh_controller::bus::users_text(mesh.home(), &checked, &bus)
        })
    }

    /// Runs an async call of the front door on the library's runtime.
    pub fn block_on<F: std::future::Future>(&self, call: F) -> F::Output {
        self.tokio.block_on(call)
    }

    /// The bus (the command's `--bus`), as a command that needs one asks for it.
    fn bus(&self) -> Result<&mesh_controller::bus::BusConfig, String> {
        self.mesh.bus().ok_or_else(|| {
            "this command talks to a fleet's bus: give --bus URL (or MESH_BUS)".to_owned()
        })
    }

    /// A runtime of the mesh whose progress is collected.
    fn drives(&self) -> (Runtime, Arc<mesh_controller::Collected>) {
        let progress = Arc::new(mesh_controller::Collected::default());
        let runtime = Runtime::new(Arc::clone(&self.mesh), Arc::clone(&progress) as _);
        (runtime, progress)
    }

    /// The catalogue the mesh composes from and its problems (the binary's `Env::checked`).
    fn checked(&self) -> Result<mesh_controller::Checked, String> {
        self.home().require().map_err(|e| said(&e))?;
        self.tokio
            .block_on(mesh_controller::catalogue::effective_catalogue(
                self.home(),
                self.mesh.store(),
            ))
            .map_err(|e| said(&e))
    }

    /// What records read in an older format were migrated on the way (the binary says each,
    /// once, as a `note:` after the command).
    pub fn migrations(&self) -> Vec<String> {
        self.home().take_migrations()
    }

    /// catalogue, overlaid with each module's deployed build.
    pub fn read(&self) -> Result<catalogue::Running, String> {
        catalogue::read(self.home()).map_err(|e| said(&e))
    }
}

/// The records as a test reads and writes them, through the front door's `records::get` and
/// `records::put_by_hand`.
impl Library {
    /// One record as text (`None`: there is none, the refusal `records get` prints then).
    pub fn record(&self, key: &str) -> Option<String> {
        match mesh_controller::records::get(self.home(), key).map_err(|e| said(&e)) {
            Ok(bytes) => Some(String::from_utf8(bytes).expect("a record of text")),
            Err(error) => {
                assert!(error.contains("there is no record"), "{error}");
                None
            }
        }
    }

    /// `records put inventory.toml FILE`, the file holding `text`.
    pub fn put_inventory(
        &self,
        text: &str,
    ) -> Result<mesh_controller::records::PutOutcome, String> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("inventory.toml");
        std::fs::write(&file, text).unwrap();
        mesh_controller::records::put_by_hand(self.home(), "inventory.toml", &file, None)
            .map_err(|e| said(&e))
    }
}

impl Bed {
    /// One of the controller's records, as `records get` gives it (`None`: there is none), read
    /// through the library.
    pub fn record(&self, key: &str) -> Option<String> {
        self.library().record(key)
    }

    /// `records put inventory.toml FILE` through the library, `text` the file's.
    pub fn put_inventory(&self, text: &str) {
        let outcome = self
            .library()
            .put_inventory(text)
            .unwrap_or_else(|error| panic!("records put: {error}"));
        assert_eq!(outcome, mesh_controller::records::PutOutcome::Replaced);
    }
}

/// The modules (or nodes) a flag names, as a set.
fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|name| (*name).to_owned()).collect()
}

/// The progress lines collected, one a line, as the binary prints them.
fn lines(progress: &mesh_controller::Collected) -> String {
    progress
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|line| format!("{line}\n"))
        .collect()
}

/// An error as the binary says it after `error: `: each cause after the one it explains.
pub fn said(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
