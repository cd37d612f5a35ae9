//! A real `docker-registry` (Debian's CNCF distribution) on a free loopback port, for tests and
//! benchmarks: the one launcher every crate's tests use.
//!
//! [`TestRegistry::start`] serves plain HTTP to anyone; [`TestRegistry::start_secured`] serves
//! TLS only with a [`TestPki`]'s certificate and accepts only its htpasswd users (bcrypt, cost
//! 4: the registry checks the hash on every request). Its storage is in its own directory
//! (under `$MESH_TEST_REGISTRY_TMP` when set, a tmpfs: the tests measure the mesh, not the
//! disk). A test may stop and start it again ([`RegistryHandle::stop`],
//! [`RegistryHandle::start_again`]), as a collection does. [`ShellRegistry`] is one an operator's
//! service manager would run: started and stopped by shell commands, which a test hands to the
//! collector. Dropping either stops the registry and removes its directory.
//!
//! What it must never do: listen anywhere but loopback, or pass quietly when the binary is
//! missing — it fails saying to install the Debian package (tests are never skipped).

use crate::pki::TestPki;
use crate::wait::{free_port, wait_for};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The Debian binary the tests run.
pub const REGISTRY_BINARY: &str = "/usr/bin/docker-registry";

/// How long a registry is given to answer `/v2/` after it is started; only bounds a failure.
pub const ANSWER_LIMIT: Duration = Duration::from_secs(60);

/// How a [`TestRegistry`] is secured: TLS with certificates from a [`TestPki`], and htpasswd
/// users.
pub struct Secured<'a> {
    /// The certificates.
    pub pki: &'a TestPki,
    /// Each user and password it accepts.
    pub users: &'a [(&'a str, &'a str)],
}

/// How a registry is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistryOptions {
    /// `storage.delete.enabled`: whether a manifest may be deleted.
    pub delete_enabled: bool,
    /// `storage.cache.blobdescriptor: inmemory`: the cache that answers for a blob a
    /// `garbage-collect` swept until the registry is started again (what a collection must
    /// ride out).
    pub blob_descriptor_cache: bool,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        RegistryOptions {
            delete_enabled: true,
            blob_descriptor_cache: true,
        }
    }
}

/// A docker-registry this test owns: its storage, configuration and process.
pub struct TestRegistry {
    dir: tempfile::TempDir,
    config: PathBuf,
    /// Its port on 127.0.0.1.
    pub port: u16,
    tls_ca: Option<PathBuf>,
    child: Arc<Mutex<Option<Child>>>,
}

fn require_binary() {
    assert!(
        Path::new(REGISTRY_BINARY).exists(),
        "{REGISTRY_BINARY} is missing: install the Debian package with \
         `apt-get install docker-registry` (the README's test command does)"
    );
}

fn registry_dir() -> tempfile::TempDir {
    match std::env::var_os("MESH_TEST_REGISTRY_TMP") {
        Some(base) => tempfile::tempdir_in(base),
        None => tempfile::tempdir(),
    }
    .expect("a temporary directory for the registry")
}

/// The configuration of a registry on `port` keeping its blobs under `storage`.
fn config_text(storage: &Path, port: u16, options: &RegistryOptions) -> String {
    let cache = if options.blob_descriptor_cache {
        "  cache:\n    blobdescriptor: inmemory\n"
    } else {
        ""
    };
    format!(
        "version: 0.1\n\
         log:\n  level: error\n  accesslog:\n    disabled: true\n\
         storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: {}\n{cache}\
         http:\n  addr: 127.0.0.1:{port}\n  relativeurls: true\n",
        storage.display(),
        options.delete_enabled
    )
}

fn spawn(config: &Path) -> Child {
    Command::new(REGISTRY_BINARY)
        .arg("serve")
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn docker-registry")
}

/// A GET of `path` on the registry at `port`: the whole response (status line, headers, body),
/// if it answered. Over TLS (curl, trusting `tls_ca` only) when given a CA, with `user`'s
/// basic-auth credentials (`USER:PASSWORD`) when given.
fn get(port: u16, tls_ca: Option<&Path>, user: Option<&str>, path: &str) -> Option<String> {
    let Some(ca) = tls_ca else {
        return plain_get(port, path);
    };
    let mut curl = Command::new("curl");
    curl.args(["--silent", "--include", "--http1.1", "--max-time", "10"])
        .arg("--cacert")
        .arg(ca);
    if let Some(user) = user {
        curl.arg("--user").arg(user);
    }
    let out = curl
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn plain_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    stream.read_to_string(&mut out).ok()?;
    Some(out)
}

/// Waits until the registry at `port` answers `/v2/`: 200, or 401 to the anonymous when it is
/// secured.
fn wait_answering(port: u16, tls_ca: Option<&Path>) {
    wait_for(
        &format!("docker-registry on 127.0.0.1:{port} answering /v2/"),
        ANSWER_LIMIT,
        || match get(port, tls_ca, None, "/v2/") {
            Some(response)
                if response.starts_with("HTTP/1.1 200") || response.starts_with("HTTP/1.1 401") =>
            {
                Ok(())
            }
            Some(response) => Err(response),
            None => Err("no answer".to_owned()),
        },
    );
}

impl TestRegistry {
    /// Starts a registry with deletion enabled, over plain HTTP, on a free loopback port, and
    /// waits until it answers. Fails (never skips) when the binary is missing.
    pub fn start() -> TestRegistry {
        TestRegistry::start_with(RegistryOptions::default(), None)
    }

    /// As [`TestRegistry::start`], with `storage.delete.enabled` as given.
    pub fn start_with_deletion(delete_enabled: bool) -> TestRegistry {
        let options = RegistryOptions {
            delete_enabled,
            ..RegistryOptions::default()
        };
        TestRegistry::start_with(options, None)
    }

    /// As [`TestRegistry::start`], serving TLS only with `secured`'s certificate and accepting
    /// only its users.
    pub fn start_secured(secured: Secured<'_>) -> TestRegistry {
        TestRegistry::start_with(RegistryOptions::default(), Some(secured))
    }

    /// Starts one configured by `options`, secured when given `secured`, and waits until it
    /// answers.
    pub fn start_with(options: RegistryOptions, secured: Option<Secured<'_>>) -> TestRegistry {
        require_binary();
        let dir = registry_dir();
        let port = free_port();
        let config = dir.path().join("config.yml");
        let storage = dir.path().join("storage");
        std::fs::create_dir_all(&storage).expect("the registry's storage directory");
        let mut text = config_text(&storage, port, &options);
        let tls_ca = secured.as_ref().map(|s| s.pki.ca_file.clone());
        if let Some(secured) = &secured {
            let htpasswd: String = secured
                .users
                .iter()
                .map(|(user, password)| {
                    let hash = bcrypt::hash(password, 4).expect("a bcrypt hash");
                    format!("{user}:{hash}\n")
                })
                .collect();
            let htpasswd_file = dir.path().join("htpasswd");
            std::fs::write(&htpasswd_file, htpasswd).expect("the registry's htpasswd");
            text.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n\
                 auth:\n  htpasswd:\n    realm: mesh\n    path: {}\n",
                secured.pki.server_cert.display(),
                secured.pki.server_key.display(),
                htpasswd_file.display()
            ));
        }
        std::fs::write(&config, text).expect("the registry's configuration");
        let child = spawn(&config);
        let registry = TestRegistry {
            dir,
            config,
            port,
            tls_ca,
            child: Arc::new(Mutex::new(Some(child))),
        };
        wait_answering(port, registry.tls_ca.as_deref());
        registry
    }

    /// `http://127.0.0.1:PORT` (`https://` when secured).
    pub fn base_url(&self) -> String {
        let scheme = if self.tls_ca.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The CA file its certificate is signed by, when secured.
    pub fn ca_file(&self) -> Option<PathBuf> {
        self.tls_ca.clone()
    }

    /// Its configuration file (what `garbage-collect` is given).
    pub fn config(&self) -> &Path {
        &self.config
    }

    /// The directory holding its configuration and storage.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A GET of `path` as `user` (`USER:PASSWORD`; `None`: anonymous): the whole response
    /// (status line, headers, body), if it answered. Over TLS when secured, trusting its CA
    /// only.
    pub fn get_as(&self, user: Option<&str>, path: &str) -> Option<String> {
        get(self.port, self.tls_ca.as_deref(), user, path)
    }

    /// A handle that stops and starts this registry, for a collector that must.
    pub fn process(&self) -> RegistryHandle {
        RegistryHandle {
            child: self.child.clone(),
            config: self.config.clone(),
            port: self.port,
            tls_ca: self.tls_ca.clone(),
        }
    }

    /// Runs the stock collector by hand (registry stopped, plain `garbage-collect`, started
    /// again) and returns what it printed.
    pub fn stock_garbage_collect(&self) -> String {
        let process = self.process();
        process.stop();
        let out = Command::new(REGISTRY_BINARY)
            .arg("garbage-collect")
            .arg(&self.config)
            .output()
            .expect("run garbage-collect");
        process.start_again();
        assert!(out.status.success(), "garbage-collect failed: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        self.process().stop();
    }
}

/// Stops and starts a [`TestRegistry`] (shared with it: the registry is the same process).
#[derive(Clone)]
pub struct RegistryHandle {
    child: Arc<Mutex<Option<Child>>>,
    config: PathBuf,
    port: u16,
    tls_ca: Option<PathBuf>,
}

impl RegistryHandle {
    /// Kills the registry and waits for it to end; nothing when it is stopped.
    pub fn stop(&self) {
        let taken = self.child.lock().expect("the registry's process").take();
        if let Some(mut child) = taken {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the registry again with the same configuration and waits until it answers.
    pub fn start_again(&self) {
        let child = spawn(&self.config);
        *self.child.lock().expect("the registry's process") = Some(child);
        wait_answering(self.port, self.tls_ca.as_deref());
    }
}

/// A docker-registry run the way an operator's service manager would: started and stopped by
/// shell commands ([`ShellRegistry::start_command`], [`ShellRegistry::stop_command`], a pid
/// file), which a test hands to the collector.
pub struct ShellRegistry {
    dir: tempfile::TempDir,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

impl ShellRegistry {
    /// Starts one over plain HTTP, configured by `options`, and waits until it answers.
    pub fn start(options: RegistryOptions) -> ShellRegistry {
        require_binary();
        let dir = registry_dir();
        let port = free_port();
        let text = config_text(&dir.path().join("storage"), port, &options);
        std::fs::write(dir.path().join("config.yml"), text).expect("the registry's configuration");
        let registry = ShellRegistry { dir, port };
        let status = Command::new("sh")
            .arg("-c")
            .arg(registry.start_command())
            .status()
            .expect("sh runs");
        assert!(status.success(), "{}: {status}", registry.start_command());
        wait_answering(port, None);
        registry
    }

    /// Its configuration file.
    pub fn config(&self) -> String {
        self.dir.path().join("config.yml").display().to_string()
    }

    fn pid_file(&self) -> String {
        self.dir.path().join("pid").display().to_string()
    }

    /// The shell command that starts it (in the background, its pid in a file).
    pub fn start_command(&self) -> String {
        format!(
            "{REGISTRY_BINARY} serve {} >/dev/null 2>&1 & echo $! > {}",
            self.config(),
            self.pid_file()
        )
    }

    /// The shell command that stops it and waits until it is gone.
    pub fn stop_command(&self) -> String {
        let pid = self.pid_file();
        format!("kill $(cat {pid}); while kill -0 $(cat {pid}) 2>/dev/null; do sleep 0.05; done")
    }
}

impl Drop for ShellRegistry {
    fn drop(&mut self) {
        let _ = Command::new("sh")
            .arg("-c")
            .arg(self.stop_command())
            .status();
    }
}
