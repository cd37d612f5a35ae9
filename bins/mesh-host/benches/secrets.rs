//! What secrets cost, against baselines measured in the same run:
//!
//! - an apply of 1,000 files each rendered from a secret (the host opening each with its own
//!   age key, [`mesh_host::receive`] then [`mesh_host::apply_received`]) against the same
//!   1,000 files with their values as plain settings, first onto an empty root, then again
//!   at once (nothing to change; the files were just written, so no stamp is kept yet and
//!   each is read: compared byte for byte when plain, by the digest of what the host rendered
//!   there before when of secrets), then again later (the stat cache's stamps kept: after one
//!   that keeps them, none reads a file): the target is at most 1.5×.
//!
//! An apply with nothing to change takes a few milliseconds, less than what the machine's
//! other work moves one by: each is timed [`REPEATS`] times in a row (the same apply each time:
//! nothing it does changes what the next one finds), and a round takes their median.
//!
//! The controller's re-encryption of each node's secrets before a send is measured on its own
//! path by `cargo bench -p mesh-controller --bench secrets_send`.
//!
//! Run with `cargo bench -p mesh-host --bench secrets`. It prints every number; it checks no
//! bound (the book records them). `cargo test --benches` runs a smoke run of 50.

use mesh_apply::{ContainerRuntimeChoice, HostConfig};
use mesh_host::{apply_received, receive, ArchiveSource};
use mesh_model::declaration::{resource_id, Declaration, FileSpec, Resource, Spec};
use mesh_model::secret::{SealedPiece, SecretValue};
use std::time::{Duration, Instant};

const FILES: usize = 1_000;
const SMOKE: usize = 50;
const ROUNDS: usize = 5;
/// How many times a round times each apply with nothing to change (it takes their median).
const REPEATS: usize = 7;

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

/// A first apply onto an empty root, one again at once (nothing to change), and one again
/// later with the stamps of the files kept (after one that keeps them): their times, the two
/// with nothing to change each the median of [`REPEATS`].
fn applies(
    runtime: &tokio::runtime::Runtime,
    declaration: &Declaration,
    key: Option<&std::path::Path>,
) -> (Duration, Duration, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let config = host(dir.path());
    if let Some(key) = key {
        // The host's key, the one the declaration was sealed to: copied in (mode 0600).
        let bus = dir.path().join("state/bus");
        std::fs::create_dir_all(&bus).unwrap();
        std::fs::copy(key, bus.join("age.key")).unwrap();
    }
    let bytes = declaration.canonical_json();
    // `now` well past the files' ctimes for the applies later: their stamps are kept (the
    // stat cache keeps none within two seconds of a file's change).
    let later = mesh_store::clock::now() + 60;
    let apply = |now: u64| {
        let started = Instant::now();
        let source = ArchiveSource::cache_only(&config.state_dir);
        let received = runtime
            .block_on(receive(&source, "n", &bytes, now))
            .unwrap();
        let report = apply_received(&config, &received, now);
        let took = started.elapsed();
        assert!(
            report
                .resources
                .values()
                .all(|outcome| outcome.word() == "applied" || outcome.word() == "unchanged"),
            "{report:?}"
        );
        took
    };
    let median_of_repeats = |now: u64| {
        let mut times: Vec<Duration> = (0..REPEATS).map(|_| apply(now)).collect();
        times.sort();
        times[REPEATS / 2]
    };
    let first = apply(1000);
    let again = median_of_repeats(1000);
    apply(later);
    let stamped = median_of_repeats(later);
    (first, again, stamped)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let measured = std::env::args().any(|a| a == "--bench");
    let (files, rounds) = if measured {
        (FILES, ROUNDS)
    } else {
        (SMOKE, 1)
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
    let (mut first, mut again, mut stamped) = (Vec::new(), Vec::new(), Vec::new());
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for round in 0..rounds {
        let (plain_first, plain_again, plain_stamped) = applies(&runtime, &plain, None);
        let (sealed_first, sealed_again, sealed_stamped) =
            applies(&runtime, &sealed, Some(&key_file));
        let ratio = |s: Duration, p: Duration| s.as_secs_f64() / p.as_secs_f64();
        first.push(ratio(sealed_first, plain_first));
        again.push(ratio(sealed_again, plain_again));
        stamped.push(ratio(sealed_stamped, plain_stamped));
        println!(
            "round {round}: {files} files: first apply plain {:.0} ms, of secrets {:.0} ms ({:.2}×); \
             again at once (median of {REPEATS}) plain {:.1} ms, of secrets {:.1} ms ({:.2}×); \
             again by stamps (median of {REPEATS}) plain {:.1} ms, of secrets {:.1} ms ({:.2}×)",
            ms(plain_first),
            ms(sealed_first),
            first[round],
            ms(plain_again),
            ms(sealed_again),
            again[round],
            ms(plain_stamped),
            ms(sealed_stamped),
            stamped[round]
        );
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let range = |v: &[f64]| format!("{:.2}–{:.2}", v[0], v[v.len() - 1]);
    println!(
        "apply of {files} files of secrets vs plain settings (median of {rounds} rounds, range): \
         first {:.2}× ({}), again at once {:.2}× ({}), again by stamps {:.2}× ({}) \
         (target ≤ 1.5×)",
        median(&mut first),
        range(&first),
        median(&mut again),
        range(&again),
        median(&mut stamped),
        range(&stamped)
    );
}
