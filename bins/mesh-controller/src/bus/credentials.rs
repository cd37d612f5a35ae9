//! The controller on the bus: how it reaches it ([`BusConfig`]: the URL, its credential and the
//! bus's TLS), what it proves itself with — its NKey seed (`--bus-seed`, or
//! [`CONTROLLER_SEED_FILE`] made by `broker keygen`) or, without one, its password
//! (`--bus-password-file`, or `<home>/bus/passwords/controller`) — and the nodes' bus
//! passwords until they are enrolled ([`crate::bus::enroll`]).
//!
//! Credentials ("Secrets never leave their owner"): a node not yet enrolled has a password,
//! generated once and kept in the records (`bus/passwords/<node>`: on a fleet the bus's records
//! bucket, which no node may read; a file of mode 0600 under the home before the records are moved
//! there), to be given to that node's host as its `--password-file` (`broker password NODE`), and
//! dropped when it is enrolled. The controller's seed or password stays on the controller's
//! machine: it opens the bus, and so the records. The server is verified against `--bus-ca`
//! ([`BusConfig::with_ca_file`]).
//!
//! What it must never do: put the controller's seed or password among the records, or name a
//! secret in an error.

use crate::error::{bad_record, bus_error, file_error, Context, Error, Result};
use crate::home::Home;
use mesh_bus::grants;
use mesh_bus::{BusTls, NatsBus, NatsOptions, NodeSecret};
use std::path::PathBuf;

/// How the controller reaches a fleet's bus: its URL, its credential (an NKey seed file, else a
/// password file, else the password kept in the home) and the bus's TLS, and how it treats the
/// bus (how many copies of each stream to make, how long an unanswered call on the records is
/// tried again). Built with its methods:
///
/// ```
/// let bus = mesh_controller::bus::BusConfig::new("tls://bus.example:4222")
///     .with_ca_file("/etc/mesh/ca.pem")
///     .with_seed_file("/etc/mesh/controller.seed");
/// assert_eq!(bus.url(), "tls://bus.example:4222");
/// ```
#[derive(Debug, Clone, Default)]
pub struct BusConfig {
    /// The bus, e.g. `tls://bus.example:4222`.
    pub(crate) url: String,
    /// The controller's password file (default `<home>/bus/passwords/controller`), used when
    /// it has no seed.
    pub(crate) password_file: Option<PathBuf>,
    /// The controller's NKey seed file (default `<home>/bus/nkey.seed` when there is one).
    pub(crate) seed_file: Option<PathBuf>,
    /// The CA the server is verified against, and the controller's client certificate.
    pub(crate) tls: BusTls,
    /// How many copies of each stream and bucket to make (recorded when given); `None`: the
    /// recorded number, else 1 on a single server and 3 on a cluster
    /// ([`crate::bus::broker::wanted_replicas`]).
    pub(crate) replicas: Option<usize>,
    /// How long a call on the records that gets no answer is tried again before it fails;
    /// `None`: [`mesh_bus::records::RETRY_LIMIT`].
    pub(crate) retry_limit: Option<std::time::Duration>,
    /// A command that only reads: the controller's password is read, never made.
    pub(crate) reads_only: bool,
}

impl BusConfig {
    /// The bus at `url`, reached with the controller's password kept in the home, without TLS
    /// options of its own.
    pub fn new(url: impl Into<String>) -> BusConfig {
        BusConfig {
            url: url.into(),
            ..BusConfig::default()
        }
    }

    /// The controller proves itself with the password in `file` (refused when others may read
    /// it) instead of the one kept in the home. A seed, when there is one, goes first.
    #[must_use]
    pub fn with_password_file(mut self, file: impl Into<PathBuf>) -> BusConfig {
        self.password_file = Some(file.into());
        self
    }

    /// The controller proves itself with the NKey seed in `file` (default: the one `broker
    /// keygen` made under the home, when there is one).
    #[must_use]
    pub fn with_seed_file(mut self, file: impl Into<PathBuf>) -> BusConfig {
        self.seed_file = Some(file.into());
        self
    }

    /// The server is verified against the CA in `file`.
    #[must_use]
    pub fn with_ca_file(mut self, file: impl Into<PathBuf>) -> BusConfig {
        self.tls.ca_file = Some(file.into());
        self
    }

    /// The controller shows the client certificate in `cert_file`, with its key in `key_file`
    /// (mutual TLS).
    #[must_use]
    pub fn with_client_certificate(
        mut self,
        cert_file: impl Into<PathBuf>,
        key_file: impl Into<PathBuf>,
    ) -> BusConfig {
        self.tls.client_certificate = Some(mesh_bus::ClientCertificate {
            cert_file: cert_file.into(),
            key_file: key_file.into(),
        });
        self
    }

    /// Each stream and bucket made keeps `replicas` copies (the number is recorded, and later
    /// calls without one use it).
    #[must_use]
    pub fn with_replicas(mut self, replicas: usize) -> BusConfig {
        self.replicas = Some(replicas);
        self
    }

    /// A call on the records that gets no answer is tried again for `limit` before it fails.
    #[must_use]
    pub fn with_retry_limit(mut self, limit: std::time::Duration) -> BusConfig {
        self.retry_limit = Some(limit);
        self
    }

    /// For a command that only reads: the controller's password kept in the home is read, and
    /// its absence is an error, never a reason to make one.
    #[must_use]
    pub fn reading_only(mut self) -> BusConfig {
        self.reads_only = true;
        self
    }

    /// The bus's URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// Where the controller's own NKey seed is kept under the home (`broker keygen` makes it,
/// 0600): on this machine only, never among the records. The collector reads it there too.
pub(crate) use mesh_bus::keys::CONTROLLER_SEED_FILE;

/// The controller's seed file: `--bus-seed`, else [`CONTROLLER_SEED_FILE`] under the home
/// when it is there (`None`: the controller is on its password).
pub(crate) fn controller_seed_file(home: &Home, bus: &BusConfig) -> Option<PathBuf> {
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
pub fn controller_keygen(home: &Home) -> Result<Keygen> {
    let path = home.root().join(CONTROLLER_SEED_FILE);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(file_error("making", dir))?;
    }
    let made = mesh_bus::keys::make_seed_file(&path).map_err(|source| Error::Invalid {
        what: format!("the controller's bus seed {}", path.display()),
        source: Some(Box::new(source)),
    })?;
    Ok(Keygen {
        seed_file: made.path,
        public_key: made.public_key,
        made: made.made,
    })
}

/// What [`controller_keygen`] did (`broker keygen --output json` prints it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Keygen {
    /// The seed file, under the home.
    pub seed_file: PathBuf,
    /// Its public key (`U…`).
    pub public_key: String,
    /// Whether it was made now (`false`: it was there, and is kept).
    pub made: bool,
}

/// What the controller proves itself with: its seed when it has one, else its password.
///
/// # Errors
/// A seed or password file that cannot be read, is readable by others, or holds no seed (the
/// error names the file, never what it holds).
pub(crate) fn controller_secret(home: &Home, bus: &BusConfig) -> Result<NodeSecret> {
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
pub(crate) fn controller_credential(secret: &NodeSecret) -> Result<grants::UserCredential> {
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
pub(crate) fn probe_seed(secret: &NodeSecret) -> String {
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
pub(crate) fn controller_options(home: &Home, bus: &BusConfig) -> Result<NatsOptions> {
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
pub(crate) fn password_path(home: &Home, user: &str) -> PathBuf {
    home.root().join("bus").join("passwords").join(user)
}

/// The record key of `node`'s bus password (kept until it is enrolled).
pub(crate) fn password_key(node: &str) -> String {
    format!("bus/passwords/{node}")
}

/// `bytes` random bytes from `/dev/urandom`, in hex; `what` they are for names them in an
/// error.
pub(crate) fn random_hex(bytes: usize, what: &str) -> Result<String> {
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
pub(crate) fn password(home: &Home, user: &str) -> Result<String> {
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
pub(crate) fn controller_password(home: &Home, bus: &BusConfig) -> Result<String> {
    match &bus.password_file {
        Some(file) => Ok(mesh_store::secret::read_secret(file)
            .map_err(|source| Error::Invalid {
                what: "the controller's bus password".to_owned(),
                source: Some(Box::new(source)),
            })?
            .trim_end_matches(['\n', '\r'])
            .to_owned()),
        None if bus.reads_only => {
            let path = password_path(home, mesh_bus::subjects::CONTROLLER_USER);
            match std::fs::read_to_string(&path) {
                Ok(text) => Ok(text.trim_end_matches(['\n', '\r']).to_owned()),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => Err(Error::Given {
                    option: crate::error::Given::ControllerSecret,
                    value: None,
                    why: format!(
                        "the controller has no bus seed or password in {}, and a command that \
                         only reads makes none",
                        home.root().display()
                    ),
                }),
                Err(error) => Err(file_error("reading", &path)(error)),
            }
        }
        None => password(home, mesh_bus::subjects::CONTROLLER_USER),
    }
}

/// Connects as the controller.
pub async fn connect(home: &Home, bus: &BusConfig) -> Result<NatsBus> {
    let options = controller_options(home, bus)?;
    NatsBus::connect(&options).await.map_err(bus_error(|| {
        format!("connecting to the bus at {}", bus.url)
    }))
}
