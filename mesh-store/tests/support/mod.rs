//! Shared by the integration tests and the benchmark: a real `docker-registry` started on a
//! free loopback port, and a tiny HTTP proxy in front of it that counts requests and can
//! answer 500 or drop connections.
#![allow(dead_code)]

pub mod pki;

use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use mesh_model::build::{ArchiveRef, Build};
use mesh_model::module::{EntryKind, ModuleTree};
use mesh_store::archive::{archive_tree, Archive};
use mesh_store::collect::RegistryProcess;
use mesh_store::store::StoreSpec;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The Debian binary the tests run.
pub const REGISTRY_BINARY: &str = "/usr/bin/docker-registry";

/// A docker-registry this test owns: its storage, config and process.
pub struct TestRegistry {
    /// Storage and config live here.
    pub dir: tempfile::TempDir,
    /// The config file.
    pub config: PathBuf,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Over TLS: the CA file its certificate is signed by.
    tls_ca: Option<PathBuf>,
    child: Arc<Mutex<Option<Child>>>,
}

/// How a [`TestRegistry`] is secured: TLS with certificates from a [`pki::TestPki`], and
/// htpasswd users (bcrypt).
pub struct Secured<'a> {
    /// The certificates.
    pub pki: &'a pki::TestPki,
    /// Each user and password it accepts.
    pub users: &'a [(&'a str, &'a str)],
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind a loopback port")
        .local_addr()
        .unwrap()
        .port()
}

fn spawn_registry(config: &Path) -> Child {
    Command::new(REGISTRY_BINARY)
        .arg("serve")
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn docker-registry")
}

async fn wait_answering(port: u16, tls_ca: Option<&Path>) {
    let mut client = reqwest::Client::builder();
    if let Some(ca) = tls_ca {
        let pem = std::fs::read(ca).unwrap();
        client = client.tls_certs_only(reqwest::Certificate::from_pem_bundle(&pem).unwrap());
    }
    let client = client.build().unwrap();
    let scheme = if tls_ca.is_some() { "https" } else { "http" };
    for _ in 0..200 {
        if let Ok(r) = client
            .get(format!("{scheme}://127.0.0.1:{port}/v2/"))
            .send()
            .await
        {
            // A secured registry answers 401 to the anonymous.
            if r.status().is_success() || r.status().as_u16() == 401 {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("docker-registry on 127.0.0.1:{port} did not answer within 10 s");
}

impl TestRegistry {
    /// Starts a registry with deletion enabled on a free loopback port. Fails (never skips)
    /// when the binary is missing.
    pub async fn start() -> TestRegistry {
        TestRegistry::start_with_deletion(true).await
    }

    /// As [`TestRegistry::start`], with `storage.delete.enabled` as given.
    pub async fn start_with_deletion(delete_enabled: bool) -> TestRegistry {
        TestRegistry::start_with(delete_enabled, None).await
    }

    /// As [`TestRegistry::start`], serving TLS only with `secured`'s certificate and accepting
    /// only its users (htpasswd, bcrypt).
    pub async fn start_secured(secured: Secured<'_>) -> TestRegistry {
        TestRegistry::start_with(true, Some(secured)).await
    }

    async fn start_with(delete_enabled: bool, secured: Option<Secured<'_>>) -> TestRegistry {
        assert!(
            Path::new(REGISTRY_BINARY).exists(),
            "{REGISTRY_BINARY} is missing: install the Debian package with \
             `apt-get install docker-registry` (the README's test command does)"
        );
        // Storage in memory where there is a tmpfs: the tests measure the mesh, not the disk.
        let dir = match std::env::var_os("MESH_TEST_REGISTRY_TMP") {
            Some(base) => tempfile::tempdir_in(base),
            None => tempfile::tempdir(),
        }
        .expect("temp dir");
        let port = free_port();
        let config = dir.path().join("config.yml");
        let storage = dir.path().join("storage");
        std::fs::create_dir_all(&storage).unwrap();
        let mut text = format!(
            "version: 0.1\n\
             log:\n  level: error\n  accesslog:\n    disabled: true\n\
             storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: {delete_enabled}\n  \
             cache:\n    blobdescriptor: inmemory\n\
             http:\n  addr: 127.0.0.1:{port}\n  relativeurls: true\n",
            storage.display()
        );
        let tls_ca = secured.as_ref().map(|s| s.pki.ca_file.clone());
        if let Some(secured) = &secured {
            // Cost 4: the registry checks the hash on every request (see the book's store page).
            let htpasswd: String = secured
                .users
                .iter()
                .map(|(user, password)| format!("{user}:{}\n", bcrypt::hash(password, 4).unwrap()))
                .collect();
            let htpasswd_file = dir.path().join("htpasswd");
            std::fs::write(&htpasswd_file, htpasswd).unwrap();
            text.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n\
                 auth:\n  htpasswd:\n    realm: mesh\n    path: {}\n",
                secured.pki.server_cert.display(),
                secured.pki.server_key.display(),
                htpasswd_file.display()
            ));
        }
        std::fs::write(&config, text).unwrap();
        let child = spawn_registry(&config);
        wait_answering(port, tls_ca.as_deref()).await;
        TestRegistry {
            dir,
            config,
            port,
            tls_ca,
            child: Arc::new(Mutex::new(Some(child))),
        }
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

    /// The store spec of its default repository.
    pub fn spec(&self) -> StoreSpec {
        self.base_url().parse().unwrap()
    }

    /// A handle that stops and starts this registry.
    pub fn process(&self) -> TestProcess {
        TestProcess {
            child: self.child.clone(),
            config: self.config.clone(),
            port: self.port,
            tls_ca: self.tls_ca.clone(),
        }
    }

    /// Runs the stock collector by hand (stopped registry, plain `garbage-collect`, restart):
    /// the seed's nightly job.
    pub async fn stock_garbage_collect(&self) -> String {
        let mut process = self.process();
        process.stop().await.unwrap();
        let out = Command::new(REGISTRY_BINARY)
            .arg("garbage-collect")
            .arg(&self.config)
            .output()
            .expect("run garbage-collect");
        process.start().await.unwrap();
        assert!(out.status.success(), "garbage-collect failed: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Stops and starts a [`TestRegistry`].
pub struct TestProcess {
    child: Arc<Mutex<Option<Child>>>,
    config: PathBuf,
    port: u16,
    tls_ca: Option<PathBuf>,
}

#[async_trait::async_trait]
impl RegistryProcess for TestProcess {
    async fn stop(&mut self) -> std::io::Result<()> {
        let taken = self.child.lock().unwrap().take();
        if let Some(mut child) = taken {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    async fn start(&mut self) -> std::io::Result<()> {
        let child = spawn_registry(&self.config);
        *self.child.lock().unwrap() = Some(child);
        wait_answering(self.port, self.tls_ca.as_deref()).await;
        Ok(())
    }
}

/// What the proxy does to a request it is told to fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answer 500.
    ServerError,
    /// Close the connection without answering: the registry went away.
    GoneAway,
}

/// A loopback proxy in front of a registry: counts requests, and faults those that match once
/// armed.
pub struct Proxy {
    /// Its port.
    pub port: u16,
    state: Arc<ProxyState>,
}

struct ProxyState {
    upstream: String,
    client: reqwest::Client,
    requests: Mutex<Vec<(String, String)>>,
    armed: AtomicBool,
    fault_after: AtomicUsize,
    fault: Mutex<Option<(Fault, String)>>,
    seen_matching: AtomicUsize,
}

impl Proxy {
    /// Starts a proxy to `upstream` (`http://127.0.0.1:PORT`).
    pub async fn start(upstream: &str) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(ProxyState {
            upstream: upstream.to_owned(),
            client: reqwest::Client::new(),
            requests: Mutex::new(Vec::new()),
            armed: AtomicBool::new(false),
            fault_after: AtomicUsize::new(0),
            fault: Mutex::new(None),
            seen_matching: AtomicUsize::new(0),
        });
        let shared = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                // Without it, small answers wait out the peer's delayed ACK (40 ms each).
                let _ = stream.set_nodelay(true);
                let state = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| forward(state.clone(), req));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Proxy { port, state }
    }

    /// The store spec through the proxy.
    pub fn spec(&self) -> StoreSpec {
        format!("http://127.0.0.1:{}", self.port).parse().unwrap()
    }

    /// The store spec of another repository through the proxy.
    pub fn spec_for(&self, repository: &str) -> StoreSpec {
        format!("http://127.0.0.1:{}/{repository}", self.port)
            .parse()
            .unwrap()
    }

    /// From now on, requests whose `METHOD path` contains `matching` are faulted, after the
    /// first `after` of them went through.
    pub fn fault(&self, fault: Fault, matching: &str, after: usize) {
        *self.state.fault.lock().unwrap() = Some((fault, matching.to_owned()));
        self.state.fault_after.store(after, Ordering::SeqCst);
        self.state.seen_matching.store(0, Ordering::SeqCst);
        self.state.armed.store(true, Ordering::SeqCst);
    }

    /// No more faults.
    pub fn heal(&self) {
        self.state.armed.store(false, Ordering::SeqCst);
    }

    /// Every request so far as (method, path), and forgets them.
    pub fn take_requests(&self) -> Vec<(String, String)> {
        std::mem::take(&mut *self.state.requests.lock().unwrap())
    }
}

#[derive(Debug)]
struct Dropped;
impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dropped by the test proxy")
    }
}
impl std::error::Error for Dropped {}

async fn forward(
    state: Arc<ProxyState>,
    req: hyper::Request<Incoming>,
) -> Result<hyper::Response<Full<hyper::body::Bytes>>, Dropped> {
    let method = req.method().as_str().to_owned();
    let path_and_query = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    state
        .requests
        .lock()
        .unwrap()
        .push((method.clone(), path_and_query.clone()));
    if state.armed.load(Ordering::SeqCst) {
        let fault = state.fault.lock().unwrap().clone();
        if let Some((fault, matching)) = fault {
            if format!("{method} {path_and_query}").contains(&matching) {
                let seen = state.seen_matching.fetch_add(1, Ordering::SeqCst);
                if seen >= state.fault_after.load(Ordering::SeqCst) {
                    match fault {
                        Fault::ServerError => {
                            return Ok(hyper::Response::builder()
                                .status(500)
                                .body(Full::new(hyper::body::Bytes::from_static(b"fault")))
                                .unwrap())
                        }
                        Fault::GoneAway => return Err(Dropped),
                    }
                }
            }
        }
    }
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map_err(|_| Dropped)?.to_bytes();
    let mut request = state.client.request(
        parts.method.clone(),
        format!("{}{}", state.upstream, path_and_query),
    );
    for (name, value) in parts.headers.iter() {
        if name != hyper::header::HOST {
            request = request.header(name, value);
        }
    }
    let response = request.body(body).send().await.map_err(|_| Dropped)?;
    let mut builder = hyper::Response::builder().status(response.status());
    for (name, value) in response.headers() {
        builder = builder.header(name, value);
    }
    let bytes = response.bytes().await.map_err(|_| Dropped)?;
    Ok(builder.body(Full::new(bytes)).unwrap())
}

/// A small module tree whose content depends on `seed`.
pub fn tree(seed: &str) -> ModuleTree {
    let mut tree = ModuleTree::default();
    tree.entries.insert(
        "module.toml".to_owned(),
        EntryKind::File {
            bytes: format!("name = \"m\"\n# {seed}\n").into_bytes(),
            executable: false,
        },
    );
    tree.entries.insert("bin".to_owned(), EntryKind::Directory);
    tree.entries.insert(
        "bin/run".to_owned(),
        EntryKind::File {
            bytes: format!("#!/bin/sh\necho {seed}\n").into_bytes(),
            executable: true,
        },
    );
    tree
}

/// The archive of [`tree`]`(seed)`.
pub fn archive(seed: &str) -> Archive {
    archive_tree(&tree(seed)).unwrap()
}

/// A build record of `module` for `archive` at time `at`.
pub fn build(module: &str, archive: &ArchiveRef, at: u64) -> Build {
    Build {
        module: module.to_owned(),
        repository: "catalogue".to_owned(),
        commit: format!("c{at}"),
        archive: archive.clone(),
        at,
        dry_run: false,
    }
}

/// The keep set of the module records in `home`, as a sweep would read it.
pub fn keep_of(home: &Path) -> mesh_store::keep::KeepSet {
    mesh_store::keep::keep_set(
        &mesh_store::records::read_module_records(&mesh_store::record_store::DirRecords::new(home))
            .unwrap(),
    )
}
