//! A real `nats-server` on loopback, for tests and benchmarks.
//!
//! [`NatsServer::start`] runs `nats-server` with JetStream, listening on 127.0.0.1 at a free
//! port, its store in its own directory, and waits until it answers;
//! [`NatsServer::start_with_config`] adds the users ([`mesh_bus::grants::authorization_config`]);
//! [`NatsServer::reload`] replaces them and has the server reload;
//! [`NatsServer::start_with_tls`] serves TLS only ([`ServerTls`]: its certificate and key, and
//! for mTLS the CA client certificates must be signed by). Dropping the handle kills the
//! server and removes its directory.
//!
//! The listen address and JetStream are in the configuration file (`server.conf`, which
//! includes the users from `users.conf`), not the flags `-js -a -p -sd`: on nats-server 2.9.10 a
//! reload of a server started with `-js` counts JetStream as changed and leaves it answering
//! nothing (found by this crate's grant test). The bus node must be set up the same way.
//!
//! The binary is `$MESH_NATS_SERVER` when set (the test command runs the bus and fleet tests
//! once with Debian's 2.9 and once with the current release), else `nats-server` on PATH. Its
//! version ([`version_of`]) decides the configuration: from 2.10 on, JetStream runs with
//! `sync_interval: always` (every write on disk before it is acknowledged; 2.9 refuses the
//! field, and flushes every 2 minutes); `MESH_NATS_SYNC=server` leaves the server's own
//! default on every version, for benchmarks ([`syncs_every_write`]). For several servers in
//! a cluster see
//! [`crate::nats_cluster`].
//!
//! What it must never do: listen anywhere but loopback, or pass quietly when the binary is
//! missing — that is an error saying to install the Debian package `nats-server` (tests fail on
//! it; they are never skipped).

use mesh_bus::version::ServerVersion;
use std::collections::HashMap;
use std::io::BufRead as _;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Why a server could not be started or reloaded.
#[derive(Debug, thiserror::Error)]
pub enum NatsServerError {
    /// The binary is not installed.
    #[error(
        "nats-server is not installed (looked for $MESH_NATS_SERVER, on PATH and in /usr/sbin): \
         install the Debian package `nats-server` (apt-get install nats-server)"
    )]
    Missing,
    /// Something around the server failed (its directory, a free port, the process).
    #[error("nats-server: {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// The server did not come up.
    #[error("nats-server on port {port} did not start: {log}")]
    NotStarted {
        /// The port it was given.
        port: u16,
        /// The end of its log.
        log: String,
    },
}

/// A running `nats-server`, killed when dropped.
#[derive(Debug)]
pub struct NatsServer {
    child: Option<Child>,
    /// Its `server_name`, unique to this process and start: the greeting that says it is
    /// this server's, not another test's that took the port (see [`NatsServer::run`]).
    name: String,
    port: u16,
    dir: tempfile::TempDir,
    binary: PathBuf,
    tls: Option<ServerTls>,
    version: ServerVersion,
}

/// A server's TLS: it then accepts TLS connections only (`tls { … }` in its configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTls {
    /// Its certificate (PEM).
    pub cert_file: PathBuf,
    /// Its key (PEM).
    pub key_file: PathBuf,
    /// For mTLS: the CA a client's certificate must be signed by; every client must then
    /// present one (`verify: true`).
    pub client_ca_file: Option<PathBuf>,
}

impl ServerTls {
    /// The server configuration's `tls` block.
    pub fn config(&self) -> String {
        let mut out = format!(
            "tls {{\n  cert_file: {:?}\n  key_file: {:?}\n",
            self.cert_file, self.key_file
        );
        if let Some(ca) = &self.client_ca_file {
            out.push_str(&format!("  ca_file: {ca:?}\n  verify: true\n"));
        }
        out.push_str("}\n");
        out
    }
}

/// Where the `nats-server` binary is: `$MESH_NATS_SERVER`, then PATH, then `/usr/sbin`.
///
/// # Errors
/// [`NatsServerError::Missing`] when it is in none of them.
pub fn binary() -> Result<PathBuf, NatsServerError> {
    if let Some(path) = std::env::var_os("MESH_NATS_SERVER") {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(NatsServerError::Missing)
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("nats-server"))
        .find(|candidate| candidate.is_file())
        .ok_or(NatsServerError::Missing)
}

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> NatsServerError {
    let what = what.into();
    move |source| NatsServerError::Io { what, source }
}

impl NatsServer {
    /// Starts a JetStream server on a free loopback port.
    ///
    /// # Errors
    /// [`NatsServerError`] when the binary is missing or the server does not come up.
    pub fn start() -> Result<NatsServer, NatsServerError> {
        NatsServer::start_with_config("")
    }

    /// Starts a JetStream server on a free loopback port with `config` (server configuration
    /// text, e.g. an `authorization` block) as its configuration file.
    ///
    /// # Errors
    /// [`NatsServerError`] when the binary is missing or the server does not come up (the
    /// message holds the end of its log, e.g. a configuration it could not read).
    pub fn start_with_config(config: &str) -> Result<NatsServer, NatsServerError> {
        NatsServer::start_serving(config, None)
    }

    /// As [`NatsServer::start_with_config`], serving TLS only with `tls`: its URL is then
    /// `tls://127.0.0.1:<port>`, and a client that does not speak TLS is refused.
    ///
    /// # Errors
    /// As [`NatsServer::start_with_config`] (a certificate it cannot read is in the log's end).
    pub fn start_with_tls(config: &str, tls: &ServerTls) -> Result<NatsServer, NatsServerError> {
        NatsServer::start_serving(config, Some(tls.clone()))
    }

    fn start_serving(config: &str, tls: Option<ServerTls>) -> Result<NatsServer, NatsServerError> {
        let binary = binary()?;
        let version = version_of(&binary)?;
        let dir = tempfile::Builder::new()
            .prefix("mesh-nats-")
            .tempdir()
            .map_err(io("making its directory"))?;
        std::fs::write(dir.path().join(USERS_FILE), config).map_err(io("writing its users"))?;
        let name = unique_name();
        let mut last = None;
        for _ in 0..5 {
            let port = free_port()?;
            let mut text = format!("server_name: {name:?}\n");
            text.push_str(&server_config(
                port,
                &dir.path().join("store"),
                &dir.path().join(LOG_FILE),
                version,
            ));
            if let Some(tls) = &tls {
                text.push_str(&tls.config());
            }
            match NatsServer::spawn(&binary, dir.path(), &name, port, &text) {
                Ok(child) => {
                    return Ok(NatsServer {
                        child: Some(child),
                        name,
                        port,
                        dir,
                        binary,
                        tls,
                        version,
                    })
                }
                Err(error) => last = Some(error),
            }
        }
        Err(last.expect("tried at least once"))
    }

    /// A server of a cluster named `name` (unique: [`unique_name`]), its configuration `text`
    /// (holding its `server_name` and `tls`'s block when it serves TLS) written and run from
    /// `dir`.
    pub(crate) fn start_member(
        binary: &Path,
        version: ServerVersion,
        dir: tempfile::TempDir,
        (name, port): (&str, u16),
        text: &str,
        tls: Option<ServerTls>,
    ) -> Result<NatsServer, NatsServerError> {
        let child = NatsServer::spawn(binary, dir.path(), name, port, text)?;
        Ok(NatsServer {
            child: Some(child),
            name: name.to_owned(),
            port,
            dir,
            binary: binary.to_owned(),
            tls,
            version,
        })
    }

    /// Writes `text` as its configuration and runs it, waiting until it greets on `port` as
    /// `name`.
    fn spawn(
        binary: &Path,
        dir: &Path,
        name: &str,
        port: u16,
        text: &str,
    ) -> Result<Child, NatsServerError> {
        std::fs::write(dir.join(CONFIG_FILE), text).map_err(io("writing its configuration"))?;
        NatsServer::run(binary, dir, name, port)
    }

    /// Runs the server of `dir`'s configuration, waiting until it greets on `port` as `name`.
    ///
    /// Only its own greeting counts: the port was free when it was chosen, but another test's
    /// server may have bound it since (a cluster's server started again on the port it had, or
    /// a new one given a port a killed server freed). Taking that greeting for this server's
    /// would have a test talk to a stranger's server while its own exited; instead this one is
    /// reported not started (and a new server is given another port).
    fn run(binary: &Path, dir: &Path, name: &str, port: u16) -> Result<Child, NatsServerError> {
        let log = dir.join(LOG_FILE);
        // What it prints outside its log (a Go panic's trace) is kept beside it.
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(STDERR_FILE))
            .map_err(io("opening its standard error's file"))?;
        let mut child = Command::new(binary)
            .arg("-c")
            .arg(dir.join(CONFIG_FILE))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(io(format!("running {}", binary.display())))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut stranger = false;
            if let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) {
                // A NATS server greets with one line: INFO and a JSON object naming it.
                stream
                    .set_read_timeout(Some(Duration::from_secs(2)))
                    .map_err(io("reading its greeting"))?;
                let mut greeting = String::new();
                let read = std::io::BufReader::new(stream).read_line(&mut greeting);
                if read.is_ok() && greeting.starts_with("INFO ") {
                    if greets_as(&greeting, name) {
                        return Ok(child);
                    }
                    stranger = true;
                }
            }
            let exited = child.try_wait().map_err(io("watching it start"))?;
            if stranger || exited.is_some() || Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                let log = std::fs::read_to_string(&log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                let mut log = tail.into_iter().rev().collect::<Vec<_>>().join(" | ");
                if stranger {
                    log = format!("another server than `{name}` answers on its port; {log}");
                }
                return Err(NatsServerError::NotStarted { port, log });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Its client URL, `nats://127.0.0.1:<port>` (`tls://` when it serves TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "tls" } else { "nats" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// Its URL with the `nats://` scheme whatever it serves: what a client that does not ask
    /// for TLS is given.
    pub fn plain_url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Its whole log (`log_file` of its configuration), as it stands: what a test reads to find
    /// what the server complained of.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join(LOG_FILE)).unwrap_or_default()
    }

    /// The last `lines` lines of its log, and whether it is running: what a test prints when
    /// the bus did not answer it, to tell a server gone from one too slow.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(self.dir.path().join(LOG_FILE)).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(lines).collect();
        // Whether its process is still there (not exited, not a zombie): read off /proc, as
        // the child cannot be waited on through `&self`.
        let state = match &self.child {
            None => "killed",
            Some(child) => {
                let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id()));
                match stat.as_deref().ok().and_then(|s| s.rsplit(") ").next()) {
                    Some(rest) if !rest.starts_with('Z') => "running",
                    _ => "exited",
                }
            }
        };
        let stderr = std::fs::read_to_string(self.dir.path().join(STDERR_FILE)).unwrap_or_default();
        let stderr: Vec<&str> = stderr.lines().take(lines).collect();
        format!(
            "nats-server `{}` on port {} ({state}), the end of its log:\n{}\nthe start of its standard error:\n{}",
            self.name,
            self.port,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            stderr.join("\n")
        )
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its directory (configuration, log, JetStream store).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The version of the binary it runs.
    pub fn version(&self) -> ServerVersion {
        self.version
    }

    /// Whether its process is running (not [`NatsServer::kill`]ed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Its process id.
    ///
    /// # Errors
    /// [`NatsServerError::Io`] when it is not running.
    pub fn pid(&self) -> Result<u32, NatsServerError> {
        self.child
            .as_ref()
            .map(Child::id)
            .ok_or_else(|| NatsServerError::Io {
                what: format!("the server on port {}", self.port),
                source: std::io::Error::other("it is not running"),
            })
    }

    /// Its JetStream store directory.
    pub fn store_dir(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// Stops the server at once (SIGKILL), as a machine losing power does; its directory and
    /// store are kept for [`NatsServer::start_again`]. Killing a stopped server does nothing.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a [`NatsServer::kill`]ed server again on the same port with the same
    /// configuration and whatever its store holds; a running one is left running.
    ///
    /// # Errors
    /// [`NatsServerError`] when it does not come up again.
    pub fn start_again(&mut self) -> Result<(), NatsServerError> {
        if self.child.is_some() {
            return Ok(());
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match NatsServer::run(&self.binary, self.dir.path(), &self.name, self.port) {
                Ok(child) => {
                    self.child = Some(child);
                    return Ok(());
                }
                // The port can take a moment to be free again.
                Err(error) if Instant::now() > deadline => return Err(error),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Stops the server (SIGKILL) and starts it again on the same port with the same
    /// configuration and JetStream store, as a bus machine restarting does: streams,
    /// consumers and their places are kept; every client is disconnected and must reconnect.
    ///
    /// # Errors
    /// [`NatsServerError`] when it does not come up again.
    pub fn restart(&mut self) -> Result<(), NatsServerError> {
        self.kill();
        self.start_again()
    }

    /// Replaces its users with `config` and has it reload (`nats-server --signal
    /// reload=<pid>`), as the node holding the bus does when it is sent new grants.
    ///
    /// # Errors
    /// [`NatsServerError::Io`] when the file cannot be written or the signal not sent.
    pub fn reload(&self, config: &str) -> Result<(), NatsServerError> {
        std::fs::write(self.dir.path().join(USERS_FILE), config)
            .map_err(io("writing its users"))?;
        let status = Command::new(&self.binary)
            .arg("--signal")
            .arg(format!("reload={}", self.pid()?))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(io("signalling it to reload"))?;
        if status.success() {
            Ok(())
        } else {
            Err(NatsServerError::Io {
                what: "signalling it to reload".into(),
                source: std::io::Error::other(format!("nats-server --signal said {status}")),
            })
        }
    }
}

/// The file holding the users, included by the server's configuration.
pub const USERS_FILE: &str = "users.conf";
/// The server's configuration file, in its directory.
pub const CONFIG_FILE: &str = "server.conf";
/// The server's log, in its directory.
pub const LOG_FILE: &str = "server.log";

/// The file in a server's directory that holds what it printed on its standard error (a
/// panic's trace, which its log does not hold).
pub const STDERR_FILE: &str = "server.stderr";

/// A bus server's configuration: loopback at `port`, JetStream storing under `store` — with
/// `sync_interval: always` where the server's `version` has it (2.10 and later: every write is
/// on disk before it is acknowledged; 2.9 refuses the field and flushes every 2 minutes) —,
/// logging to `log`, and the users of [`USERS_FILE`] beside it.
pub fn server_config(port: u16, store: &Path, log: &Path, version: ServerVersion) -> String {
    let sync = if syncs_every_write(version) {
        "  sync_interval: always\n"
    } else {
        ""
    };
    format!(
        "listen: \"127.0.0.1:{port}\"\n\
         jetstream {{\n  store_dir: {store:?}\n{sync}}}\n\
         log_file: {log:?}\n\
         include \"{USERS_FILE}\"\n"
    )
}

/// Whether a server of `version` started here runs with `sync_interval: always`: 2.10 and
/// later do, unless `MESH_NATS_SYNC=server` asks for the server's own sync (every 2 minutes, as
/// on 2.9) — for benchmarks that compare the two servers doing the same work (a bench says
/// which it ran with). The tests never set it.
pub fn syncs_every_write(version: ServerVersion) -> bool {
    version.has_sync_interval() && std::env::var("MESH_NATS_SYNC").as_deref() != Ok("server")
}

/// Where the servers' versions are kept once asked (`nats-server --version`), by binary.
static VERSIONS: OnceLock<Mutex<HashMap<PathBuf, ServerVersion>>> = OnceLock::new();

/// The version of the nats-server binary at `binary` (`nats-server --version`, asked once per
/// binary and process); [`ServerVersion::OLDEST`] when it prints none the mesh can read.
///
/// # Errors
/// [`NatsServerError::Io`] when the binary cannot be run.
pub fn version_of(binary: &Path) -> Result<ServerVersion, NatsServerError> {
    let versions = VERSIONS.get_or_init(Mutex::default);
    if let Some(version) = versions.lock().expect("not poisoned").get(binary) {
        return Ok(*version);
    }
    let output = Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(io(format!("asking {} its version", binary.display())))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let version = ServerVersion::parse(&text).unwrap_or(ServerVersion::OLDEST);
    versions
        .lock()
        .expect("not poisoned")
        .insert(binary.to_owned(), version);
    Ok(version)
}

/// A loopback port free now (the kernel's choice).
///
/// # Errors
/// [`NatsServerError::Io`] when no socket can be bound.
/// Whether `greeting` (a server's INFO line) names the server `name`.
fn greets_as(greeting: &str, name: &str) -> bool {
    let info = greeting.trim_start_matches("INFO ").trim_end();
    serde_json::from_str::<serde_json::Value>(info)
        .is_ok_and(|info| info.get("server_name").and_then(|n| n.as_str()) == Some(name))
}

/// A server name no other server started by this process, or another test's, has: the process
/// id and a count.
pub(crate) fn unique_name() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "mesh-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A free loopback port below the kernel's ephemeral range ([`crate::wait::free_port`]).
pub(crate) fn free_port() -> Result<u16, NatsServerError> {
    crate::wait::try_free_port().map_err(io("finding a free port"))
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_server_says_what_to_install() {
        let message = NatsServerError::Missing.to_string();
        assert!(
            message.contains("Debian package `nats-server`"),
            "{message}"
        );
    }

    #[test]
    fn the_server_listens_on_loopback_with_jetstream_in_its_file() {
        let old = ServerVersion::new(2, 9, 10);
        let config = server_config(4999, Path::new("/s"), Path::new("/l"), old);
        assert_eq!(
            config,
            "listen: \"127.0.0.1:4999\"\njetstream {\n  store_dir: \"/s\"\n}\n\
             log_file: \"/l\"\ninclude \"users.conf\"\n"
        );
        let current = ServerVersion::new(2, 15, 1);
        let config = server_config(4999, Path::new("/s"), Path::new("/l"), current);
        assert_eq!(
            config,
            "listen: \"127.0.0.1:4999\"\njetstream {\n  store_dir: \"/s\"\n  \
             sync_interval: always\n}\n\
             log_file: \"/l\"\ninclude \"users.conf\"\n"
        );
    }

    #[test]
    fn a_greeting_counts_only_from_the_server_named() {
        let info = "INFO {\"server_id\":\"N1\",\"server_name\":\"mesh-7-1\",\"port\":4222}\r\n";
        assert!(greets_as(info, "mesh-7-1"));
        assert!(!greets_as(info, "mesh-7-10"));
        assert!(!greets_as("INFO {\"server_id\":\"N1\"}\r\n", "mesh-7-1"));
        assert!(!greets_as("INFO {trunc", "mesh-7-1"));
    }

    /// A real nats-server holds the port; a second one started on it exits (the port is
    /// taken), and its start is refused naming the stranger instead of taking the first one's
    /// greeting for its own.
    #[test]
    fn a_server_whose_port_another_holds_is_not_started() {
        let first = NatsServer::start().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(USERS_FILE), "").unwrap();
        let name = unique_name();
        let text = format!(
            "server_name: {name:?}\n{}",
            server_config(
                first.port(),
                &dir.path().join("store"),
                &dir.path().join(LOG_FILE),
                first.version,
            )
        );
        let binary = binary().unwrap();
        let error = NatsServer::spawn(&binary, dir.path(), &name, first.port(), &text)
            .expect_err("started on a port another server holds");
        let said = error.to_string();
        assert!(
            said.contains(&format!("another server than `{name}`")),
            "{said}"
        );
        // The first is untouched.
        assert!(TcpStream::connect(("127.0.0.1", first.port())).is_ok());
    }
}
