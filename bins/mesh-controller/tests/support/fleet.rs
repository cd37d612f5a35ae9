//! The fleet bed: several `mesh-host serve` processes, each with its own root and
//! state directory, one real `nats-server` started with the users the controller composed,
//! and the controller given `--bus`.
//!
//! Secured as on real machines (the rule “Secrets never leave their owner”): the server serves TLS
//! only, with certificates made by the test's own CA ([`super::pki`]), and every client verifies it
//! against that CA (`--bus-ca`); the controller signs with its own seed (`broker keygen`), and
//! every host with the seed `mesh-host keygen` made in its state directory, its public key enrolled
//! by the controller (`node enroll`): the users file holds public keys and permissions, no
//! password. The store is the bed's own [`super::Registry::start_secured`] (TLS only, htpasswd
//! users): the controller and the collector push and delete as its controller user, every host
//! pulls as its host user, each trusting the store's own CA.
//!
//! [`Bed::on_cluster`] runs the bus as a loopback cluster of three servers instead,
//! each serving TLS with the same users, every client given all three URLs.
//!
//! The bed's own controller steps — the seed, the enrollments, the first users file, the
//! records moved onto the bus, a record read or the inventory put, a push of every node — call
//! the controller library in process ([`super::in_process`]); [`Bed::run`] and its kin run the
//! binary for what only it does.
//!
//! The bus node's server is reloaded the way `contrib/systemd/mesh-nats-users.path` does it on
//! a real machine: a watcher sees the users file its host wrote change and reloads the server.

use super::in_process::Library;
use super::pki::TestPki;
use super::{Registry, StoreUser};
use mesh_bus::{BusTls, NatsBus, NatsOptions};
use mesh_controller::MeshOptions;
use mesh_test_support::nats_cluster::NatsCluster;
use mesh_test_support::nats_server::{NatsServer, NatsServerError, ServerTls};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub fn controller_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mesh-controller"))
}

/// `target/<profile>/mesh-host`, beside the controller (the test command builds it first).
pub fn host_binary() -> PathBuf {
    let path = controller_binary().with_file_name("mesh-host");
    assert!(
        path.is_file(),
        "{} is not built: run `cargo build -p mesh-host` first (scripts/test does)",
        path.display()
    );
    path
}

pub const BASE_MODULE: &str = r#"name = "base"

[files.hello]
source = "files/hello"
path = "/etc/mesh/hello"
"#;

pub const AGENT_MODULE: &str = r#"name = "agent"

[files.agent]
source = "files/agent.conf"
path = "/etc/agent.conf"

[grants]
buckets = ["agent_state"]
subjects = ["agent.events"]
"#;

/// The bed's bus: one server, or a loopback cluster.
pub enum BedBus {
    Single(NatsServer),
    Cluster(NatsCluster),
}

impl BedBus {
    /// Restarts the single server (SIGKILL, started again with its store).
    pub fn restart(&mut self) -> Result<(), NatsServerError> {
        match self {
            BedBus::Single(server) => server.restart(),
            BedBus::Cluster(_) => panic!("restart a cluster's servers one by one (cluster())"),
        }
    }

    /// The cluster.
    pub fn cluster(&mut self) -> &mut NatsCluster {
        match self {
            BedBus::Cluster(cluster) => cluster,
            BedBus::Single(_) => panic!("the bed's bus is a single server"),
        }
    }

    /// Every server's URL, comma-separated.
    fn url(&self) -> String {
        match self {
            BedBus::Single(server) => server.url(),
            BedBus::Cluster(cluster) => cluster.urls(),
        }
    }

    /// Each server's URL.
    fn each_url(&self) -> Vec<String> {
        match self {
            BedBus::Single(server) => vec![server.url()],
            BedBus::Cluster(cluster) => (0..cluster.len()).map(|i| cluster.url(i)).collect(),
        }
    }

    /// Gives every server `users`: a running one reloads; a killed one reads them when it is
    /// started again.
    fn reload(&self, users: &str) -> Result<(), NatsServerError> {
        let servers: Vec<&NatsServer> = match self {
            BedBus::Single(server) => vec![server],
            BedBus::Cluster(cluster) => (0..cluster.len()).map(|i| cluster.server(i)).collect(),
        };
        for server in servers {
            if server.is_running() {
                server.reload(users)?;
            } else {
                let file = server
                    .dir()
                    .join(mesh_test_support::nats_server::USERS_FILE);
                std::fs::write(file, users).map_err(|source| NatsServerError::Io {
                    what: "writing a killed server's users".to_owned(),
                    source,
                })?;
            }
        }
        Ok(())
    }
}

pub struct Bed {
    /// The mesh home.
    pub home: tempfile::TempDir,
    /// The bus.
    pub server: Arc<Mutex<BedBus>>,
    /// The bus's URL (every server's, comma-separated, on a cluster).
    pub url: String,
    /// Each node's `mesh-host serve` process.
    pub hosts: BTreeMap<String, Child>,
    /// The store every controller command and host is given: a real docker-registry serving
    /// TLS with htpasswd users (dropped after the hosts, which the bed's drop stops).
    pub registry: Registry,
    /// The bus's CA and certificates.
    pub pki: TestPki,
    watching: Arc<AtomicBool>,
    /// The watcher's thread, joined on drop so that the server is dropped (killed) with the bed
    /// and not left running when the test process exits.
    watcher: Option<std::thread::JoinHandle<()>>,
    /// How long the watcher waits, in milliseconds, before it reloads a changed users file.
    reload_delay_ms: Arc<AtomicU64>,
    /// When the watcher last reloaded the server (milliseconds since the epoch).
    reloaded_at_ms: Arc<AtomicU64>,
    /// Whether the bus is a cluster.
    on_cluster: bool,
}

/// How long the controller's records calls are tried again on a cluster bed (seconds).
const CLUSTER_RETRY_LIMIT: &str = "180";

impl Drop for Bed {
    fn drop(&mut self) {
        self.watching.store(false, Ordering::SeqCst);
        if let Some(watcher) = self.watcher.take() {
            let _ = watcher.join();
        }
        for child in self.hosts.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

impl Bed {
    /// A home whose nodes are `bus` (holding the bus) and `nodes`, every node running `base`
    /// and `a` also `agent`, each with its own seed made and enrolled; a TLS-only server
    /// started with the users `broker users` prints; no host started yet.
    pub fn new(nodes: &[&str]) -> Bed {
        Bed::start(nodes, None)
    }

    /// As [`Bed::new`], the bus a loopback cluster of `servers` TLS-only servers.
    pub fn on_cluster(nodes: &[&str], servers: usize) -> Bed {
        Bed::start(nodes, Some(servers))
    }

    fn start(nodes: &[&str], cluster: Option<usize>) -> Bed {
        let home = tempfile::Builder::new()
            .prefix("mesh-fleet-")
            .tempdir()
            .unwrap();
        let root = home.path();
        let all: Vec<&str> = std::iter::once("bus")
            .chain(nodes.iter().copied())
            .collect();
        let mut inventory = String::from("bus-node = \"bus\"\n\n");
        for node in &all {
            inventory.push_str(&format!("[nodes.{node}]\n"));
        }
        inventory.push_str(&format!(
            "\n[assignments]\nbase = [{}]\nagent = [\"a\"]\n",
            all.iter()
                .map(|n| format!("\"{n}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        write(&root.join("inventory.toml"), &inventory);
        write(
            &root.join("catalogue/modules/base/module.toml"),
            BASE_MODULE,
        );
        write(
            &root.join("catalogue/modules/base/files/hello"),
            "hello, fleet\n",
        );
        write(
            &root.join("catalogue/modules/agent/module.toml"),
            AGENT_MODULE,
        );
        write(
            &root.join("catalogue/modules/agent/files/agent.conf"),
            "interval = 5\n",
        );
        for node in &all {
            write(
                &root.join(format!("roots/{node}/etc/passwd")),
                "root:x:0:0:root:/root:/bin/sh\n",
            );
            // Debian's nats-server package makes the group `nats` its server runs as.
            write(
                &root.join(format!("roots/{node}/etc/group")),
                "root:x:0:\nnats:x:101:\n",
            );
        }
        let pki = TestPki::new("bus");
        let tls = ServerTls {
            cert_file: pki.server_cert.clone(),
            key_file: pki.server_key.clone(),
            client_ca_file: None,
        };
        let bus = match cluster {
            None => BedBus::Single(
                NatsServer::start_with_tls("", &tls).unwrap_or_else(|e| panic!("{e}")),
            ),
            Some(size) => BedBus::Cluster(
                NatsCluster::start_with_tls(size, "", &tls).unwrap_or_else(|e| panic!("{e}")),
            ),
        };
        let mut bed = Bed {
            server: Arc::new(Mutex::new(bus)),
            url: String::new(),
            home,
            hosts: BTreeMap::new(),
            registry: Registry::start_secured(),
            pki,
            watching: Arc::new(AtomicBool::new(true)),
            watcher: None,
            reload_delay_ms: Arc::new(AtomicU64::new(0)),
            reloaded_at_ms: Arc::new(AtomicU64::new(0)),
            on_cluster: cluster.is_some(),
        };
        // The controller's seed, and every node's made on its host and enrolled, as an operator
        // does before the first push.
        // (Through the library on the home alone, as the binary without `--bus`.)
        let local = Library::open(bed.home.path(), MeshOptions::default())
            .unwrap_or_else(|error| panic!("opening the home: {error}"));
        mesh_controller::bus::controller_keygen(local.home())
            .unwrap_or_else(|error| panic!("broker keygen: {error}"));
        for node in &all {
            let key = bed.host_keygen(node);
            mesh_controller::bus::enroll(local.home(), node, &key)
                .unwrap_or_else(|error| panic!("node enroll {node}: {error}"));
        }
        // The bus has no users yet: they are composed from the home, without --bus.
        let users = local
            .users_text()
            .unwrap_or_else(|error| panic!("broker users: {error}"));
        drop(local);
        {
            let server = bed.server.lock().unwrap();
            server.reload(&users).unwrap();
            bed.url = server.url();
        }
        bed.watcher = Some(bed.watch_users_file());
        // The reload is asynchronous, and the server let anyone in before it: wait until the
        // users are in force on every server — a key it does not know refused — and the
        // controller let in.
        let each_url = bed.server.lock().unwrap().each_url();
        runtime().block_on(async {
            for url in &each_url {
                let deadline = Instant::now() + Duration::from_secs(10);
                loop {
                    // A key no one enrolled.
                    let stranger = mesh_bus::keys::derived_user_seed("a stranger", "the fleet bed");
                    let wrong = NatsOptions::for_controller_nkey(url.clone(), stranger)
                        .with_tls(bed.bus_tls());
                    let right = NatsOptions {
                        url: url.clone(),
                        ..bed.controller_options()
                    };
                    let in_force = NatsBus::connect(&wrong).await.is_err();
                    match (in_force, NatsBus::connect(&right).await) {
                        (true, Ok(_)) => break,
                        (_, Err(error)) if Instant::now() > deadline => panic!("{error}"),
                        (false, Ok(_)) if Instant::now() > deadline => {
                            panic!("the bus's users were not in force within 10 s")
                        }
                        // Only paces the looks at the condition above (the users in force);
                        // the deadline bounds a failure, nothing is asserted on time.
                        (false, Ok(_)) | (_, Err(_)) => {
                            tokio::time::sleep(Duration::from_millis(50)).await
                        }
                    }
                }
            }
        });
        // From here on the records are the bus's: the home's are moved there.
        let library = bed.library();
        let bus = library.mesh().bus().expect("the bed's bus");
        mesh_controller::records::import(bed.home.path(), library.home(), bus.url())
            .unwrap_or_else(|error| panic!("records import: {error}"));
        bed
    }

    /// The controller's records on the bus, read directly (as the controller does).
    pub fn records(&self) -> mesh_bus::records::KvRecords {
        mesh_bus::records::KvRecords::open(&self.controller_options()).unwrap()
    }

    /// How a client verifies the bus: against the bed's CA.
    pub fn bus_tls(&self) -> BusTls {
        BusTls::with_ca(&self.pki.ca_file)
    }

    /// The controller's seed file (`broker keygen` made it under the home).
    pub fn controller_seed_file(&self) -> PathBuf {
        self.home.path().join("bus/nkey.seed")
    }

    /// The controller's connection options: its seed, the bed's CA.
    pub fn controller_options(&self) -> NatsOptions {
        let seed = mesh_bus::keys::read_seed_file(&self.controller_seed_file()).unwrap();
        NatsOptions::for_controller_nkey(self.url.clone(), seed).with_tls(self.bus_tls())
    }

    /// `node`'s seed file, in its host's state directory (`mesh-host keygen` made it).
    pub fn seed_file(&self, node: &str) -> PathBuf {
        self.state_dir(node).join(mesh_host::NKEY_SEED_FILE)
    }

    /// `node`'s connection options as its host makes them: its seed, the bed's CA.
    pub fn node_options(&self, node: &str) -> NatsOptions {
        let seed = mesh_bus::keys::read_seed_file(&self.seed_file(node)).unwrap();
        NatsOptions::for_node_nkey(self.url.clone(), node, seed).with_tls(self.bus_tls())
    }

    /// `mesh-host keygen` in `node`'s state directory: its public key.
    pub fn host_keygen(&self, node: &str) -> String {
        let out = Command::new(host_binary())
            .arg("--state-dir")
            .arg(self.state_dir(node))
            .args(["--output", "json", "keygen"])
            .output()
            .unwrap();
        assert!(out.status.success(), "mesh-host keygen: {out:?}");
        let made: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        made["public_key"].as_str().unwrap().to_owned()
    }

    /// Makes `node`'s seed on its host and enrolls it through the bus (`node enroll`, through
    /// the library), unless
    /// its host has a seed already.
    pub fn enroll(&self, node: &str) {
        if self.seed_file(node).exists() {
            return;
        }
        let key = self.host_keygen(node);
        mesh_controller::bus::enroll(self.library().home(), node, &key)
            .unwrap_or_else(|error| panic!("node enroll {node}: {error}"));
    }

    /// The flags giving the controller its store: `--store URL`, the store's CA and the
    /// controller's credentials.
    pub fn controller_store_flags(&self) -> Vec<String> {
        self.registry.flags(StoreUser::Controller)
    }

    /// A controller command on the home alone, without `--bus`.
    pub fn local_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(controller_binary());
        command
            .arg("--home")
            .arg(self.home.path())
            .args(args)
            .env_remove("MESH_BUS")
            .env_remove("MESH_BUS_PASSWORD_FILE")
            .env_remove("MESH_BUS_SEED")
            .env_remove("MESH_BUS_CA")
            .env_remove("MESH_STORE")
            .env_remove("MESH_STORE_CA")
            .env_remove("MESH_STORE_CREDENTIALS");
        command
    }

    pub fn root(&self, node: &str) -> PathBuf {
        self.home.path().join("roots").join(node)
    }

    pub fn state_dir(&self, node: &str) -> PathBuf {
        self.home.path().join("state").join(node)
    }

    /// What `contrib/systemd/mesh-nats-users.path` does: reload the bus when the users file
    /// the bus node's host wrote changes.
    fn watch_users_file(&self) -> std::thread::JoinHandle<()> {
        let file = self.root("bus").join("etc/nats/mesh-users.conf");
        let server = Arc::clone(&self.server);
        let watching = Arc::clone(&self.watching);
        let delay = Arc::clone(&self.reload_delay_ms);
        let reloaded_at = Arc::clone(&self.reloaded_at_ms);
        std::thread::spawn(move || {
            let mut last = String::new();
            while watching.load(Ordering::SeqCst) {
                if let Ok(text) = std::fs::read_to_string(&file) {
                    if text != last {
                        std::thread::sleep(Duration::from_millis(delay.load(Ordering::SeqCst)));
                        server.lock().unwrap().reload(&text).unwrap();
                        reloaded_at.store(now_ms(), Ordering::SeqCst);
                        last = text;
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    }

    /// From now on, the watcher waits `delay` before it reloads a changed users file: a bus
    /// machine slow to take its new users.
    pub fn delay_reloads(&self, delay: Duration) {
        self.reload_delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// When the watcher last reloaded the server (milliseconds since the epoch; 0: never).
    pub fn reloaded_at_ms(&self) -> u64 {
        self.reloaded_at_ms.load(Ordering::SeqCst)
    }

    pub fn start_host(&mut self, node: &str) {
        self.start_host_with(node, &[]);
    }

    /// Starts `node`'s host with `serve`'s extra flags.
    pub fn start_host_with(&mut self, node: &str, serve: &[&str]) {
        self.start_host_env(node, serve, &[]);
    }

    /// Starts `node`'s host with `serve`'s extra flags and the environment variables `env`
    /// (`FAILPOINTS`: the host's fail points, which `target/debug/mesh-host` has once the
    /// tests are built — the mesh-host tests build it with its `fail-points` feature).
    pub fn start_host_env(&mut self, node: &str, serve: &[&str], env: &[(&str, &str)]) {
        // A node joining later makes its seed and is enrolled now.
        self.enroll(node);
        let child = Command::new(host_binary())
            .arg("--node")
            .arg(node)
            .arg("--bus")
            .arg(&self.url)
            .arg("--bus-ca")
            .arg(&self.pki.ca_file)
            .arg("--root")
            .arg(self.root(node))
            .arg("--state-dir")
            .arg(self.state_dir(node))
            // The controller's store: archived files are fetched from it, as the hosts'
            // user, trusting the store's CA.
            .args(self.registry.flags(StoreUser::Host))
            .args(["serve", "--heartbeat", "1"])
            .args(serve)
            .env_remove("MESH_BUS_PASSWORD_FILE")
            .env_remove("FAILPOINTS")
            .env("MESH_LOG", "error")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        if let Some(mut old) = self.hosts.insert(node.to_owned(), child) {
            let _ = old.kill();
            let _ = old.wait();
        }
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(controller_binary());
        command
            .arg("--home")
            .arg(self.home.path())
            .arg("--bus")
            .arg(&self.url)
            .arg("--bus-ca")
            .arg(&self.pki.ca_file)
            .args(self.controller_store_flags())
            .args(args)
            .env_remove("MESH_BUS")
            .env_remove("MESH_BUS_PASSWORD_FILE")
            .env_remove("MESH_BUS_SEED")
            .env_remove("MESH_BUS_CA")
            .env_remove("MESH_STORE")
            .env_remove("MESH_STORE_CA")
            .env_remove("MESH_STORE_CREDENTIALS");
        // On a cluster the controller's records calls are tried again for up to
        // `CLUSTER_RETRY_LIMIT`: on Debian's 2.9, listings made just after a server was killed
        // were seen to go unanswered for some 80 s (the book's bus page), longer than the
        // default 30 s. A test that wants another limit says `--bus-retry-limit`, which wins.
        if self.on_cluster {
            command.env("MESH_BUS_RETRY_LIMIT", CLUSTER_RETRY_LIMIT);
        } else {
            command.env_remove("MESH_BUS_RETRY_LIMIT");
        }
        command
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// How long the controller's records calls are tried again (`--bus-retry-limit`): on a
    /// cluster bed longer than the default, as [`Bed::command`] says.
    pub fn retry_limit(&self) -> Option<Duration> {
        self.on_cluster
            .then(|| Duration::from_secs(CLUSTER_RETRY_LIMIT.parse().unwrap()))
    }

    /// Runs the controller and checks its exit code; returns standard output.
    pub fn expect(&self, args: &[&str], code: i32) -> String {
        let out = self.run(args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(
            out.status.code(),
            Some(code),
            "mesh-controller {args:?}\nstdout:\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// A controller connection, living in `rt` (the runtime that uses it).
    pub fn controller_bus(&self, rt: &tokio::runtime::Runtime) -> NatsBus {
        rt.block_on(NatsBus::connect(&self.controller_options()))
            .unwrap()
    }
}

/// Waits until `mesh-controller serve`'s merge consumer is on the bus. It is made from now
/// The rule “A durable consumer starts from now” and a merge is stored once per commit (its message
/// id): one announced before it exists is never heard, and announcing it again stores nothing.
pub fn wait_for_merge_consumer(rt: &tokio::runtime::Runtime, bus: &NatsBus) {
    // A JetStream context starts a task: it is made inside the runtime.
    let js = {
        let _in = rt.enter();
        bus.jetstream()
    };
    super::wait_for(
        "the daemon's merge consumer",
        Duration::from_secs(60),
        || {
            rt.block_on(async {
                let stream = js
                    .get_stream(mesh_bus::subjects::EVENTS_STREAM)
                    .await
                    .map_err(|e| e.to_string())?;
                stream
                    .consumer_info(mesh_controller::bus::MERGE_CONSUMER)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
        },
    );
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub fn converged(result: &serde_json::Value) -> bool {
    result["result"] == "reported" && result["report"]["machine"] == "converged"
}

/// The `*.json` files in `dir` (none when it does not exist).
pub fn json_records(dir: PathBuf) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect()
        })
        .unwrap_or_default()
}

/// The name of the server leading JetStream stream `stream`, as the stream's info tells it; an
/// error (to wait on) while the bus cannot be reached or the stream has no leader.
pub async fn stream_leader(options: &NatsOptions, stream: &str) -> Result<String, String> {
    let bus = NatsBus::connect(options).await.map_err(|e| e.to_string())?;
    let mut handle = bus
        .jetstream()
        .get_stream(stream)
        .await
        .map_err(|e| e.to_string())?;
    let info = handle.info().await.map_err(|e| e.to_string())?;
    info.cluster
        .clone()
        .and_then(|cluster| cluster.leader)
        .ok_or_else(|| "no leader".to_owned())
}

/// `node`'s part of `module`'s rollout in plan `id` as the records on the bus hold it: the last
/// step naming it (`rollouts/<id>/<module>/steps/<n>.json`, in order), else its entry in the
/// nodes the rollout found running at its start (`rollouts/<id>/<module>.running.json`), marked
/// `"named-by": "running"`.
pub fn rollout_part(
    records: &mesh_bus::records::KvRecords,
    id: &str,
    module: &str,
    node: &str,
) -> Option<serde_json::Value> {
    use mesh_store::record_store::RecordStore as _;
    let read = |key: &str| -> Option<serde_json::Value> {
        let bytes = records.get(key).unwrap()?;
        Some(serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{key}: {e}")))
    };
    let mut steps = records
        .keys_under(&format!("rollouts/{id}/{module}/steps"))
        .unwrap();
    steps.sort();
    let stepped = steps.iter().rev().find_map(|key| {
        read(key)?["nodes"]
            .as_array()?
            .iter()
            .find(|part| part["node"] == node)
            .cloned()
    });
    stepped.or_else(|| {
        let running = read(&format!("rollouts/{id}/{module}.running.json"))?;
        let mut part = running["running"]
            .as_array()?
            .iter()
            .find(|part| part["node"] == node)?
            .clone();
        part["named-by"] = "running".into();
        Some(part)
    })
}
