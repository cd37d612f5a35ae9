//! One `mesh-host serve` process on a real loopback `nats-server`, for the tests of what the
//! daemon does between pushes: its root and state directory are a sandbox, its
//! reports are read from the bus, and every wait is on a condition with a deadline.
//!
//! Secured as a fleet is (the rule “Secrets never leave their owner”): the server serves TLS only,
//! with certificates from the test's own CA, and knows the host and the test's controller by their
//! NKeys alone (the users file holds public keys); the host signs with the seed made in its state
//! directory, as `mesh-host keygen` makes it, and verifies the server with `--bus-ca`.

#![allow(dead_code)]

use mesh_test_support::pki;

use futures_util::StreamExt;
use mesh_bus::grants::{users_config, BusUsers, NodeUser, UserCredential};
use mesh_bus::{jetstream, subjects, BusTls, NatsBus, NatsOptions};
use mesh_model::declaration::{Declaration, FileSpec, Resource, Spec};
use mesh_model::report::Report;
use mesh_test_support::nats_server::{NatsServer, ServerTls};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Bounds a wait that should end far sooner (a failure, not a timing, ends it).
pub const DEADLINE: Duration = Duration::from_secs(60);

pub struct Daemon {
    pub rt: tokio::runtime::Runtime,
    pub server: NatsServer,
    pub js: async_nats::jetstream::Context,
    reports: async_nats::Subscriber,
    pub child: Option<Child>,
    pub dir: tempfile::TempDir,
    /// The bus's CA and certificates.
    pub pki: pki::TestPki,
    pub node: String,
    /// Extra arguments and environment for `serve`.
    pub serve_args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl Daemon {
    /// A server and a sandbox root (`root` and `alice` accounts); no daemon yet
    /// ([`Daemon::start`]).
    pub fn new(node: &str) -> Daemon {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::Builder::new()
            .prefix("mesh-host-daemon-")
            .tempdir()
            .unwrap();
        // The host's seed, as `mesh-host keygen` makes it, and the test's controller's.
        let host_seed = dir.path().join("state").join(mesh_host::NKEY_SEED_FILE);
        std::fs::create_dir_all(host_seed.parent().unwrap()).unwrap();
        let host_key = mesh_bus::keys::make_seed_file(&host_seed).unwrap();
        let controller_key =
            mesh_bus::keys::make_seed_file(&dir.path().join("controller.seed")).unwrap();
        let users = users_config(&BusUsers {
            controller: UserCredential::Nkey(controller_key.public_key),
            nodes: vec![NodeUser {
                node: node.to_owned(),
                credential: UserCredential::Nkey(host_key.public_key),
                buckets: vec![],
                subjects: vec![],
            }],
        })
        .unwrap();
        let pki = pki::TestPki::new("daemon");
        let server = NatsServer::start_with_tls(
            &users,
            &ServerTls {
                cert_file: pki.server_cert.clone(),
                key_file: pki.server_key.clone(),
                client_ca_file: None,
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let controller = NatsOptions::for_controller_nkey(
            server.url(),
            mesh_bus::keys::read_seed_file(&dir.path().join("controller.seed")).unwrap(),
        )
        .with_tls(BusTls::with_ca(&pki.ca_file));
        let (js, reports) = rt.block_on(async {
            let bus = NatsBus::connect(&controller).await.unwrap();
            let js = bus.jetstream();
            jetstream::ensure_streams(&js).await.unwrap();
            let reports = bus
                .client()
                .subscribe(subjects::report(node))
                .await
                .unwrap();
            bus.client().flush().await.unwrap();
            (js, reports)
        });
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(
            root.join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(
            root.join("etc/group"),
            "root:x:0:\nalice:x:1000:\nvideo:x:44:\n",
        )
        .unwrap();
        std::fs::write(root.join("etc/gshadow"), "root:::\nalice:!::\nvideo:!::\n").unwrap();
        std::fs::write(root.join("etc/shadow"), "root:!:1::::::\nalice:!:1::::::\n").unwrap();
        Daemon {
            rt,
            server,
            js,
            reports,
            child: None,
            dir,
            pki,
            node: node.to_owned(),
            serve_args: Vec::new(),
            env: Vec::new(),
        }
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// The path of machine path `path` under the sandbox root.
    pub fn path(&self, path: &str) -> PathBuf {
        self.root().join(path.trim_start_matches('/'))
    }

    /// Starts `mesh-host serve` (heartbeat every second; containers as `containers` says).
    pub fn start(&mut self, containers: &[&str]) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mesh-host"));
        command
            .arg("--node")
            .arg(&self.node)
            .arg("--bus")
            .arg(self.server.url())
            .arg("--bus-ca")
            .arg(&self.pki.ca_file)
            .env_remove("MESH_BUS_PASSWORD_FILE")
            .arg("--root")
            .arg(self.root())
            .arg("--state-dir")
            .arg(self.state_dir())
            .args(containers)
            .arg("serve")
            .arg("--heartbeat")
            .arg("1")
            .args(&self.serve_args)
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(self.dir.path().join("serve.log")).unwrap(),
            ));
        for (key, value) in &self.env {
            command.env(key, value);
        }
        self.child = Some(command.spawn().unwrap());
    }

    /// Starts `mesh-host serve` as its systemd unit does: the node, the bus and its CA only in
    /// `MESH_NODE`, `MESH_BUS` and `MESH_BUS_CA`, the other options after the subcommand.
    pub fn start_from_the_environment(&mut self) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mesh-host"));
        command
            .env_remove("MESH_BUS_PASSWORD_FILE")
            .env("MESH_NODE", &self.node)
            .env("MESH_BUS", self.server.url())
            .env("MESH_BUS_CA", &self.pki.ca_file)
            .arg("serve")
            .arg("--heartbeat")
            .arg("1")
            .arg("--root")
            .arg(self.root())
            .arg("--state-dir")
            .arg(self.state_dir())
            .args(["--containers", "none"])
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(self.dir.path().join("serve.log")).unwrap(),
            ));
        self.child = Some(command.spawn().unwrap());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }

    /// Waits until the daemon's log says `line` (panics after [`DEADLINE`]).
    pub fn wait_for_log(&self, line: &str) {
        eventually(&format!("the log says {line:?}"), || {
            self.log().contains(line)
        });
    }

    /// Publishes `declaration` on the node's subject (stored by the stream) as the controller
    /// sends one: with a message id of its own, so the host applies a send it hears twice (live,
    /// and as the stream's last when it asks again on connecting) once.
    pub fn send(&self, declaration: &Declaration) {
        static SENDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let send = SENDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let message_id = format!(
            "{}:{}:test-{}-{send}",
            self.node,
            declaration.digest(),
            std::process::id()
        );
        self.rt.block_on(async {
            jetstream::publish_declaration(
                &self.js,
                &self.node,
                declaration.canonical_json(),
                &message_id,
            )
            .await
            .unwrap();
        });
    }

    /// The next report heard, or `None` once `until` passed.
    pub fn next_report(&mut self, until: Instant) -> Option<Report> {
        let wait = until.saturating_duration_since(Instant::now());
        let reports = &mut self.reports;
        let message = self
            .rt
            .block_on(async { tokio::time::timeout(wait, reports.next()).await })
            .ok()??;
        Some(Report::from_json(&message.payload).unwrap())
    }

    /// Reads reports until one satisfies `wanted` (panics, with the log, after [`DEADLINE`]).
    pub fn wait_for(&mut self, what: &str, wanted: impl Fn(&Report) -> bool) -> Report {
        self.wait_within(DEADLINE, what, wanted)
    }

    /// [`Daemon::wait_for`] with another deadline.
    pub fn wait_within(
        &mut self,
        deadline: Duration,
        what: &str,
        wanted: impl Fn(&Report) -> bool,
    ) -> Report {
        let until = Instant::now() + deadline;
        let mut last = None;
        while let Some(report) = self.next_report(until) {
            if wanted(&report) {
                return report;
            }
            last = Some(report);
        }
        panic!(
            "no report {what} within {deadline:?}; the last: {last:#?}\nlog:\n{}",
            self.log()
        );
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits until `condition` holds, looking again every 20 ms (panics after [`DEADLINE`], which
/// only bounds a failure).
pub fn eventually(what: &str, condition: impl Fn() -> bool) {
    let until = Instant::now() + DEADLINE;
    while !condition() {
        assert!(Instant::now() < until, "never: {what}");
        // Only paces the looks at the condition: the test waits on it, not on time.
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `path` exists (panics after [`DEADLINE`]).
pub fn wait_for_file(path: &Path) {
    eventually(&format!("{} appears", path.display()), || path.exists());
}

/// The file `/etc/app/<name>` of module `app`, holding `content` (root's, mode 0644).
pub fn app_file(name: &str, content: &str) -> Resource {
    Resource {
        id: format!("app/file/{name}"),
        module: "app".into(),
        together: None,
        after: Vec::new(),
        spec: Spec::File(FileSpec {
            path: format!("/etc/app/{name}"),
            content: Some(content.to_owned()),
            source: None,
            sealed: None,
            mode: 0o644,
            owner: "root".into(),
            group: "root".into(),
        }),
    }
}
