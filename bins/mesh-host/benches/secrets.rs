//! What secrets cost, against baselines measured in the same run:
//!
//! - an apply of 1,000 files each rendered from a secret (the host opening each with its own
//!   age key, [`mesh_host::receive`] then [`mesh_host::apply_received`]) against the same
//!   1,000 files with their values as plain settings, first onto an empty root and then again
//!   (nothing to change): the target is at most 1.5×;
//! - the controller's re-encryption of a secret to each node's key alone before a send
//!   ([`mesh_secrets::MeshKey::reseal`], what `executor::sealed` does per node) at 1,000 nodes.
//!
//! Run with `cargo bench -p mesh-host --bench secrets`. It prints every number; it checks no
//! bound (the book records them). `cargo test --benches` runs a smoke run of 50.

use mesh_apply::{ContainerRuntimeChoice, HostConfig};
use mesh_host::{apply_received, receive, ArchiveSource};
use mesh_model::declaration::{resource_id, Declaration, FileSpec, Resource, Spec};
use mesh_model::secret::{SealedPiece, SecretValue};
use std::time::{Duration, Instant};

const FILES: usize = 1_000;
const NODES: usize = 1_000;
const SMOKE: usize = 50;
const ROUNDS: usize = 3;

fn value(i: usize) -> String {
    format!("password-{i:05}-{}", "x".repeat(24))
}

fn file(i: usize, sealed: Option<SecretValue>) -> Resource {
    let path = format!("/etc/bench/d{:02}/creds{i:05}", i % 20);
    let mut spec = FileSpec::inline(&path, format!("app:{}\n", value(i)), 0o600, "root", "root");
    if let Some(secret) = sealed {
        spec.content = None;
        spec.sealed = Some(vec![
            SealedPiece::Text("app:".into()),
            SealedPiece::Secret {
                key: "password".into(),
                value: secret,
            },
            SealedPiece::Text("\n".into()),
        ]);
    }
    Resource {
        id: resource_id("db", "file", &format!("creds{i:05}")),
        module: "db".into(),
        together: None,
        after: Vec::new(),
        spec: Spec::File(spec),
    }
}

fn host(dir: &std::path::Path) -> HostConfig {
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    HostConfig {
        root,
        state_dir: dir.join("state"),
        containers: ContainerRuntimeChoice::Unsupported,
        ..HostConfig::default()
    }
}

/// A first apply onto an empty root and a second one (nothing to change): their times.
fn applies(
    runtime: &tokio::runtime::Runtime,
    declaration: &Declaration,
    key: Option<&std::path::Path>,
) -> (Duration, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let config = host(dir.path());
    if let Some(key) = key {
        // The host's key, the one the declaration was sealed to: copied in (mode 0600).
        let bus = dir.path().join("state/bus");
        std::fs::create_dir_all(&bus).unwrap();
        std::fs::copy(key, bus.join("age.key")).unwrap();
    }
    let bytes = declaration.canonical_json();
    let mut times = Vec::new();
    for _ in 0..2 {
        let started = Instant::now();
        let source = ArchiveSource::cache_only(&config.state_dir);
        let received = runtime
            .block_on(receive(&source, "n", &bytes, 1000))
            .unwrap();
        let report = apply_received(&config, &received, 1000);
        times.push(started.elapsed());
        assert!(
            report
                .resources
                .values()
                .all(|outcome| outcome.word() == "applied" || outcome.word() == "unchanged"),
            "{report:?}"
        );
    }
    (times[0], times[1])
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let measured = std::env::args().any(|a| a == "--bench");
    let (files, nodes, rounds) = if measured {
        (FILES, NODES, ROUNDS)
    } else {
        (SMOKE, SMOKE, 1)
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mesh = mesh_secrets::MeshKey::generate();
    let key_dir = tempfile::tempdir().unwrap();
    let key_file = key_dir.path().join("age.key");
    let recipient = mesh_secrets::Identity::load_or_create(&key_file)
        .unwrap()
        .recipient();
    let plain = Declaration::new("n", (0..files).map(|i| file(i, None)).collect());
    let sealed = Declaration::new(
        "n",
        (0..files)
            .map(|i| {
                let secret = mesh.seal(&[], value(i).as_bytes()).unwrap();
                file(i, Some(mesh.reseal(&secret, &recipient).unwrap()))
            })
            .collect(),
    );
    let (mut first, mut again) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let (plain_first, plain_again) = applies(&runtime, &plain, None);
        let (sealed_first, sealed_again) = applies(&runtime, &sealed, Some(&key_file));
        let ratio = |s: Duration, p: Duration| s.as_secs_f64() / p.as_secs_f64();
        first.push(ratio(sealed_first, plain_first));
        again.push(ratio(sealed_again, plain_again));
        println!(
            "round {round}: {files} files: first apply plain {:.0} ms, of secrets {:.0} ms ({:.2}×); \
             again plain {:.0} ms, of secrets {:.0} ms ({:.2}×)",
            plain_first.as_secs_f64() * 1e3,
            sealed_first.as_secs_f64() * 1e3,
            first[round],
            plain_again.as_secs_f64() * 1e3,
            sealed_again.as_secs_f64() * 1e3,
            again[round]
        );
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "apply of {files} files of secrets vs plain settings (median of {rounds}): first {:.2}×, \
         again {:.2}× (target ≤ 1.5×)",
        median(&mut first),
        median(&mut again)
    );

    // The controller's per-node re-encryption: one secret sealed again to each node's key.
    let secret = mesh.seal(&[], b"a secret of every node").unwrap();
    let keys: Vec<_> = (0..nodes)
        .map(|_| mesh_secrets::Identity::generate().recipient())
        .collect();
    let started = Instant::now();
    for key in &keys {
        mesh.reseal(&secret, key).unwrap();
    }
    let took = started.elapsed();
    println!(
        "re-encryption of one secret to each of {nodes} nodes' keys: {:.0} ms ({:.2} ms a node)",
        took.as_secs_f64() * 1e3,
        took.as_secs_f64() * 1e3 / nodes as f64
    );
}
