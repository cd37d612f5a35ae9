//! The fleet bed (issue 8): several `mesh-host serve` processes, each with its own root, state
//! directory and bus password, one real `nats-server` started with the users the controller
//! composed, and the controller given `--bus`.
//!
//! The bus node's server is reloaded the way `contrib/systemd/mesh-nats-users.path` does it on
//! a real machine: a watcher sees the users file its host wrote change and reloads the server.

use mesh_bus::nats_server::NatsServer;
use mesh_bus::{NatsBus, NatsOptions};
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

pub struct Bed {
    /// The mesh home.
    pub home: tempfile::TempDir,
    /// The bus.
    pub server: Arc<Mutex<NatsServer>>,
    /// The bus's URL.
    pub url: String,
    /// Each node's `mesh-host serve` process.
    pub hosts: BTreeMap<String, Child>,
    /// The store every controller command is given (`--store`), when not the default.
    pub store: Option<String>,
    watching: Arc<AtomicBool>,
    /// The watcher's thread, joined on drop so that the server is dropped (killed) with the bed
    /// and not left running when the test process exits.
    watcher: Option<std::thread::JoinHandle<()>>,
    /// How long the watcher waits, in milliseconds, before it reloads a changed users file.
    reload_delay_ms: Arc<AtomicU64>,
    /// When the watcher last reloaded the server (milliseconds since the epoch).
    reloaded_at_ms: Arc<AtomicU64>,
}

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
    /// and `a` also `agent`; a server started with the users `broker users` prints; no host
    /// started yet.
    pub fn new(nodes: &[&str]) -> Bed {
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
        let mut bed = Bed {
            server: Arc::new(Mutex::new(
                NatsServer::start().unwrap_or_else(|e| panic!("{e}")),
            )),
            url: String::new(),
            home,
            hosts: BTreeMap::new(),
            store: None,
            watching: Arc::new(AtomicBool::new(true)),
            watcher: None,
            reload_delay_ms: Arc::new(AtomicU64::new(0)),
            reloaded_at_ms: Arc::new(AtomicU64::new(0)),
        };
        // The bus has no users yet: they are composed from the home, without --bus.
        let out = bed.local_command(&["broker", "users"]).output().unwrap();
        assert!(out.status.success(), "broker users: {out:?}");
        let users = String::from_utf8(out.stdout).unwrap();
        {
            let server = bed.server.lock().unwrap();
            server.reload(&users).unwrap();
            bed.url = server.url();
        }
        bed.watcher = Some(bed.watch_users_file());
        // The reload is asynchronous, and the server let anyone in before it: wait until the
        // users are in force — a wrong password refused — and the controller's user let in.
        let password =
            std::fs::read_to_string(bed.home.path().join("bus/passwords/controller")).unwrap();
        runtime().block_on(async {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let wrong = NatsOptions::for_controller(bed.url.clone(), "not-the-password");
                let right =
                    NatsOptions::for_controller(bed.url.clone(), password.trim().to_owned());
                let in_force = NatsBus::connect(&wrong).await.is_err();
                match (in_force, NatsBus::connect(&right).await) {
                    (true, Ok(_)) => break,
                    (_, Err(error)) if Instant::now() > deadline => panic!("{error}"),
                    (false, Ok(_)) if Instant::now() > deadline => {
                        panic!("the bus's users were not in force within 10 s")
                    }
                    (false, Ok(_)) | (_, Err(_)) => {
                        tokio::time::sleep(Duration::from_millis(50)).await
                    }
                }
            }
        });
        // From here on the records are the bus's: the home's are moved there.
        bed.expect(&["records", "import"], 0);
        bed
    }

    /// One of the controller's records, as `records get` prints it (`None`: there is none).
    pub fn record(&self, key: &str) -> Option<String> {
        let out = self.run(&["records", "get", key]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            Some(String::from_utf8(out.stdout).unwrap())
        } else {
            assert!(stderr.contains("there is no record"), "{stderr}");
            None
        }
    }

    /// The controller's records on the bus, read directly (as the controller does).
    pub fn records(&self) -> mesh_bus::records::KvRecords {
        let password =
            std::fs::read_to_string(self.home.path().join("bus/passwords/controller")).unwrap();
        mesh_bus::records::KvRecords::open(&NatsOptions::for_controller(
            self.url.clone(),
            password.trim().to_owned(),
        ))
        .unwrap()
    }

    /// Replaces the inventory on the bus (`records put inventory.toml -`).
    pub fn put_inventory(&self, text: &str) {
        use std::io::Write as _;
        let mut child = self
            .command(&["records", "put", "inventory.toml", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "records put: {out:?}");
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
            .env_remove("MESH_STORE");
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
        // A node's password is in the controller's records on the bus; its host is given it
        // in a file, as an operator would with `broker password NODE > FILE`.
        let password_file = self.home.path().join("bus/passwords").join(node);
        if !password_file.exists() {
            let password = self.expect(&["broker", "password", node], 0);
            write(&password_file, &password);
            // As an operator installs it: `install -m 0600` (a host refuses one others read).
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&password_file, std::fs::Permissions::from_mode(0o600))
                .unwrap();
        }
        let child =
            Command::new(host_binary())
                .arg("--node")
                .arg(node)
                .arg("--bus")
                .arg(&self.url)
                .arg("--password-file")
                .arg(self.home.path().join("bus/passwords").join(node))
                .arg("--root")
                .arg(self.root(node))
                .arg("--state-dir")
                .arg(self.state_dir(node))
                // The controller's store: archived files are fetched from it.
                .arg("--store")
                .arg(self.store.clone().unwrap_or_else(|| {
                    format!("oci:{}", self.home.path().join("store/oci").display())
                }))
                .args(["serve", "--heartbeat", "1"])
                .args(serve)
                .env("MESH_LOG", "error")
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
            .args(
                self.store
                    .iter()
                    .flat_map(|store| ["--store", store.as_str()]),
            )
            .args(args)
            .env_remove("MESH_BUS")
            .env_remove("MESH_BUS_PASSWORD_FILE")
            .env_remove("MESH_STORE");
        command
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
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

    /// `push --all` as JSON: node → its result.
    pub fn push_all(&self, timeout: u64, code: i32) -> BTreeMap<String, serde_json::Value> {
        let timeout = timeout.to_string();
        let out = self.expect(
            &["push", "--all", "--timeout", &timeout, "--output", "json"],
            code,
        );
        let results: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
        results
            .into_iter()
            .map(|r| (r["node"].as_str().unwrap().to_owned(), r))
            .collect()
    }

    /// A controller connection, living in `rt` (the runtime that uses it).
    pub fn controller_bus(&self, rt: &tokio::runtime::Runtime) -> NatsBus {
        let password =
            std::fs::read_to_string(self.home.path().join("bus/passwords/controller")).unwrap();
        rt.block_on(NatsBus::connect(&NatsOptions::for_controller(
            self.url.clone(),
            password.trim().to_owned(),
        )))
        .unwrap()
    }
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
