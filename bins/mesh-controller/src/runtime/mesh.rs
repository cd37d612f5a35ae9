//! A mesh opened: its home and records, its store, and the fleet its plans and pushes go to —
//! picked once, at [`Mesh::open`].

use crate::bus::credentials::BusConfig;
use crate::catalogue::builds;
use crate::error::{Error, Result};
use crate::executor::cancel::Cancel;
use crate::executor::fleet::in_process::InProcessFleet;
use crate::executor::fleet::nats::NatsFleet;
use crate::executor::fleet::Fleet;
use crate::home::Home;
use mesh_store::store::{ArchiveStore, StoreAccess, StoreSpec};
use std::path::Path;
use std::sync::Arc;

/// How a mesh is opened.
#[derive(Debug, Clone, Default)]
pub struct MeshOptions {
    /// A fleet's bus: the records are on it and the sends go to its real hosts. `None`: the
    /// embedded default, the records under the home and one host agent per node in this
    /// process.
    pub bus: Option<BusConfig>,
    /// The archive store (`None`: the home's, `oci:<home>/store/oci`).
    pub store: Option<StoreSpec>,
    /// The controller's access to the store (its CA and credentials).
    pub store_access: StoreAccess,
    /// The most bytes a node's report may hold (`None`: [`crate::home::heard::MAX_REPORT_BYTES`]);
    /// a larger one is that node's `unreadable report`.
    pub report_limit: Option<usize>,
}

/// A fleet a caller brings (a Rust tool's own hosts, a simulation), shared by the drives that
/// send through it one at a time.
pub type GivenFleet = Arc<tokio::sync::Mutex<Box<dyn Fleet>>>;

/// The fleet a mesh sends through.
enum Pick {
    /// One host agent per node in this process.
    InProcess,
    /// The real hosts on a fleet's bus.
    Bus(Box<BusConfig>),
    /// The caller's.
    Given(GivenFleet),
}

/// A mesh: its home, its store and its fleet.
pub struct Mesh {
    home: Home,
    store: Box<dyn ArchiveStore>,
    /// The controller's access to the store (its CA and credentials), through which a fleet's
    /// bus users travel to the bus node.
    store_access: StoreAccess,
    fleet: Pick,
}

/// A fleet started for a drive or a push: its own, or the caller's, held for the while.
pub enum Started {
    /// Started for this drive or push.
    Own(Box<dyn Fleet>),
    /// The caller's, held.
    Given(tokio::sync::OwnedMutexGuard<Box<dyn Fleet>>),
}

impl Started {
    /// The fleet.
    pub fn fleet(&mut self) -> &mut dyn Fleet {
        match self {
            Started::Own(fleet) => fleet.as_mut(),
            Started::Given(fleet) => fleet.as_mut(),
        }
    }
}

impl Mesh {
    /// Opens the mesh at `home` (its records on the bus when `options` names one), its store,
    /// and picks its fleet: the bus's real hosts, else one host agent per node in this process.
    ///
    /// # Errors
    /// The records cannot be opened (on the bus: it cannot be reached); the store cannot be
    /// opened ("opening the store SPEC").
    pub fn open(home: &Path, options: MeshOptions) -> Result<Mesh> {
        let home = crate::records::open_home(home, options.bus.as_ref())?;
        let home = match options.report_limit {
            Some(limit) => home.with_report_limit(limit),
            None => home,
        };
        let spec = options
            .store
            .unwrap_or_else(|| mesh_store::store::default_store_spec(home.root()));
        let store =
            mesh_store::open_store_with(&spec, &options.store_access).map_err(|source| {
                Error::Invalid {
                    what: format!("opening the store {spec}"),
                    source: Some(Box::new(source)),
                }
            })?;
        Ok(Mesh {
            home,
            store,
            store_access: options.store_access,
            fleet: match options.bus {
                Some(bus) => Pick::Bus(Box::new(bus)),
                None => Pick::InProcess,
            },
        })
    }

    /// The mesh sending through `fleet` instead (a Rust tool's own hosts, a simulation).
    pub fn with_fleet(self, fleet: GivenFleet) -> Mesh {
        Mesh {
            fleet: Pick::Given(fleet),
            ..self
        }
    }

    /// The home.
    pub fn home(&self) -> &Home {
        &self.home
    }

    /// The archive store.
    pub fn store(&self) -> &dyn ArchiveStore {
        self.store.as_ref()
    }

    /// What `status` shows now: each node's last report and what the plans wait on, a node
    /// unheard for [`crate::push::SILENT_AFTER_SECS`] silent (the clock read here, once), and
    /// each node's intent, made current first as `status` does
    /// ([`crate::intent::current_for_status`], on a thread of its own: this may be called from
    /// within an async runtime).
    ///
    /// # Errors
    /// When the home cannot be read.
    pub fn status(&self) -> Result<crate::status::Overview> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| Error::Internal {
                            doing: "starting a runtime to make the intents current".to_owned(),
                            source: Some(Box::new(e)),
                        })?;
                    runtime.block_on(crate::intent::current_for_status(&self.home, self.store()));
                    Ok::<_, Error>(())
                })
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })?;
        crate::status::overview(
            &self.home,
            mesh_store::clock::now(),
            crate::push::SILENT_AFTER_SECS,
        )
    }

    /// The catalogue the mesh composes from — the registered repositories' builds over the
    /// home's modules — and its problems; a home with no mesh is refused first.
    ///
    /// # Errors
    /// The home holds no mesh; the catalogue cannot be read
    /// ([`crate::catalogue::effective_catalogue`]).
    pub async fn checked(&self) -> Result<crate::push::Checked> {
        self.home.require()?;
        builds::effective_catalogue(&self.home, self.store()).await
    }

    /// `secrets rotate`: a new mesh secrets key, every secret sealed again to it
    /// ([`crate::secrets::rotate`]), then what each node should run composed again (every
    /// secret's keyed digest is new).
    ///
    /// # Errors
    /// As [`crate::secrets::rotate`]: the rotation could not begin or a record could not be
    /// written; a repository not done is in [`crate::secrets::Rotated::pending`], not an error.
    pub async fn rotate_secrets(&self) -> Result<crate::secrets::Rotated> {
        let rotated = crate::secrets::rotate(&self.home, self.store()).await?;
        crate::intent::keep_current_logged(&self.home, self.store(), "secrets rotate").await;
        Ok(rotated)
    }

    /// The fleet's bus, when the mesh is on one.
    pub fn bus(&self) -> Option<&BusConfig> {
        match &self.fleet {
            Pick::Bus(bus) => Some(bus),
            Pick::InProcess | Pick::Given(_) => None,
        }
    }

    /// Starts the mesh's fleet for one drive or push (a given fleet is held until the answer
    /// is dropped).
    ///
    /// # Errors
    /// The bus cannot be reached; the store cannot be named to the in-process hosts.
    pub async fn start_fleet(&self) -> Result<Started> {
        Ok(match &self.fleet {
            Pick::Bus(bus) => Started::Own(Box::new(
                NatsFleet::start(
                    &self.home,
                    bus,
                    &builds::store_spec(self.store())?,
                    &self.store_access,
                )
                .await?,
            )),
            Pick::InProcess => Started::Own(Box::new(
                InProcessFleet::start(&self.home, builds::store_spec(self.store())?).await?,
            )),
            Pick::Given(fleet) => Started::Given(Arc::clone(fleet).lock_owned().await),
        })
    }
}

/// The context of one drive or push: the mesh, where progress goes, the modules whose held
/// nodes are sent (`--move`, "A moved mount is held"), and whether the drive was cancelled.
#[derive(Clone)]
pub struct Ctx {
    /// The mesh.
    pub mesh: Arc<Mesh>,
    /// Where progress goes.
    pub progress: Arc<dyn crate::Progress>,
    /// Modules whose running containers' data may move: their held nodes are sent. Empty:
    /// every move is held.
    pub moves: std::collections::BTreeSet<String>,
    /// Modules whose nodes held for orphaned settings are sent anyway, those settings dropped
    /// (`--drop-settings`). Empty: every such node is held.
    pub drop_settings: std::collections::BTreeSet<String>,
    /// Cancelled: the drive stops at its next step.
    pub cancel: Cancel,
}

impl Ctx {
    /// The home.
    pub fn home(&self) -> &Home {
        self.mesh.home()
    }

    /// The archive store.
    pub fn store(&self) -> &dyn ArchiveStore {
        self.mesh.store()
    }

    /// Where progress goes.
    pub fn progress(&self) -> &dyn crate::Progress {
        self.progress.as_ref()
    }
}
