//! The daemon as a process runs it (`mesh-host serve`): [`run`] takes a [`ServeOptions`],
//! reads the node's credential (its password file, or the seed `mesh-host keygen` made under
//! the state directory), makes the state directory, and serves ([`super::serve`]) on a runtime
//! of its own until SIGTERM or SIGINT, stopping within the options' bound
//! ([`super::shutdown_signal_within`]).
//!
//! It installs no logger: that is the binary's, before it calls [`run`].

use super::{serve, shutdown_signal_within, ServeConfig, ServeError};
use mesh_apply::HostConfig;
use std::path::PathBuf;
use std::time::Duration;

/// What [`run`] needs: a [`ServeConfig`] but for the credential, which is read from its file,
/// and the bound on a stop.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The node this host is.
    pub node: String,
    /// The bus, e.g. `nats://bus.example:4222`.
    pub bus_url: String,
    /// A file holding the node's bus password, until it is enrolled with an NKey; `None`: the
    /// seed `mesh-host keygen` made ([`crate::NKEY_SEED_FILE`] under the state directory).
    pub password_file: Option<PathBuf>,
    /// How the bus server is checked (its CA) and this host's certificate for mTLS.
    pub bus_tls: mesh_bus::BusTls,
    /// Root prefix, state directory, retry policy.
    pub host: HostConfig,
    /// Where archived files are read from: the cache under the state directory, then the store.
    pub archives: crate::ArchiveSource,
    /// Time between heartbeat reports ([`ServeConfig::heartbeat`]).
    pub heartbeat: Duration,
    /// Time between two examinations for drift when nothing watched changed
    /// ([`ServeConfig::reconcile`]).
    pub reconcile: Duration,
    /// Time between two examinations that hash every managed file ([`ServeConfig::full_check`]).
    pub full_check: Duration,
    /// How long a stop may take after SIGTERM or SIGINT before it is made at once.
    pub stop_timeout: Duration,
}

/// Why [`run`] did not serve, or stopped other than by being asked to.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No password file was given and the state directory holds no seed.
    #[error("no bus password file, and no seed under {state_dir}")]
    NoCredential {
        /// The state directory the seed was looked for under.
        state_dir: PathBuf,
    },
    /// The password file cannot be read, or others may read it.
    #[error("the node's bus password")]
    Password(#[source] mesh_store::secret::SecretFileError),
    /// The seed cannot be read, is readable by others, or is not a seed.
    #[error("reading the bus seed")]
    Seed(#[source] mesh_bus::keys::KeyError),
    /// The state directory cannot be made.
    #[error("making the state directory {}", path.display())]
    StateDirectory {
        /// The state directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The runtime the daemon runs on cannot be started.
    #[error(transparent)]
    Runtime(std::io::Error),
    /// The daemon stopped on an error.
    #[error(transparent)]
    Serve(#[from] ServeError),
}

/// Runs the daemon until SIGTERM or SIGINT: reads the credential, makes the state directory,
/// and serves on a runtime of its own. Nothing left running is waited for when it ends (the
/// drift watch's blocking thread, a connection being retried): the runtime is let go.
///
/// Call it from a thread with no runtime: it starts its own.
///
/// # Errors
/// [`RunError::NoCredential`] before anything is read; the others when the credential cannot
/// be read, the state directory made, or the daemon stops on an error.
pub fn run(options: ServeOptions) -> Result<(), RunError> {
    let seed_file = options.host.state_dir.join(crate::NKEY_SEED_FILE);
    if options.password_file.is_none() && !seed_file.exists() {
        return Err(RunError::NoCredential {
            state_dir: options.host.state_dir,
        });
    }
    let secret = match &options.password_file {
        Some(password_file) => mesh_bus::NodeSecret::Password(
            mesh_store::secret::read_secret(password_file).map_err(RunError::Password)?,
        ),
        None => mesh_bus::NodeSecret::NkeySeed(
            mesh_bus::keys::read_seed_file(&seed_file).map_err(RunError::Seed)?,
        ),
    };
    std::fs::create_dir_all(&options.host.state_dir).map_err(|source| {
        RunError::StateDirectory {
            path: options.host.state_dir.clone(),
            source,
        }
    })?;
    let config = ServeConfig {
        node: options.node,
        bus_url: options.bus_url,
        secret,
        bus_tls: options.bus_tls,
        host: options.host,
        archives: options.archives,
        heartbeat: options.heartbeat,
        reconcile: options.reconcile,
        full_check: options.full_check,
    };
    let runtime = tokio::runtime::Runtime::new().map_err(RunError::Runtime)?;
    let stop_timeout = options.stop_timeout;
    let served =
        runtime.block_on(async { serve(config, shutdown_signal_within(stop_timeout)).await });
    // Nothing left running is waited for (the drift watch's blocking thread, a connection
    // being retried), whether the daemon stopped or failed: it is done.
    runtime.shutdown_background();
    Ok(served?)
}
