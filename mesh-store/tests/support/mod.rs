//! Shared by the store's integration tests and its benchmark: the test kit's `docker-registry`
//! as the store sees it (its spec, its process for a collector), a tiny HTTP proxy in front of
//! it that counts requests and can answer 500 or drop connections, and small module trees.
#![allow(dead_code)]

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
use mesh_test_support::registry::{RegistryHandle, TestRegistry};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// What the store's tests ask of the kit's registry beyond starting it.
pub trait RegistryExt {
    /// The store spec of its default repository.
    fn spec(&self) -> StoreSpec;

    /// The collector's handle on its process: stops and starts it (see [`TestProcess`]).
    fn collector_process(&self) -> TestProcess;
}

impl RegistryExt for TestRegistry {
    fn spec(&self) -> StoreSpec {
        self.base_url().parse().unwrap()
    }

    fn collector_process(&self) -> TestProcess {
        TestProcess(self.process())
    }
}

/// Stops and starts a [`TestRegistry`] for the collector; the waits run off the async worker.
pub struct TestProcess(RegistryHandle);

#[async_trait::async_trait]
impl RegistryProcess for TestProcess {
    async fn stop(&mut self) -> std::io::Result<()> {
        let handle = self.0.clone();
        tokio::task::spawn_blocking(move || handle.stop())
            .await
            .map_err(std::io::Error::other)
    }

    async fn start(&mut self) -> std::io::Result<()> {
        let handle = self.0.clone();
        tokio::task::spawn_blocking(move || handle.start_again())
            .await
            .map_err(std::io::Error::other)
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
