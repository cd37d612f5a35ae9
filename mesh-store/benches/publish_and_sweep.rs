//! Benchmark of the registry store against a real docker-registry on loopback.
//!
//! `cargo bench -p mesh-store --bench publish_and_sweep` prints:
//! - publishing N archives (blob + holding manifest) against a plain blob-upload loop with the
//!   same client, in the same run: the ratio must be at least 0.7;
//! - a sweep of M kept, already-held archives through a counting proxy: at most one request per
//!   archive plus the listing.
//!
//! `MESH_BENCH_PUBLISH` (default 500) and `MESH_BENCH_SWEEP` (default 5000) set N and M;
//! `MESH_TEST_REGISTRY_TMP=/dev/shm` puts the registry's storage on a tmpfs (the registry
//! fsyncs every file it writes, so on a slow disk the disk dominates).

#[path = "../tests/support/mod.rs"]
mod support;

use mesh_store::archive::Archive;
use mesh_store::keep::keep_set;
use mesh_store::lock::{PublishLock, SweepLock};
use mesh_store::open_store;
use mesh_store::records::ModuleRecord;
use mesh_store::store::{publish, publish_all, ArchiveStore, PUBLISH_CONCURRENCY};
use mesh_store::sweep::sweep;
use mesh_test_support::registry::TestRegistry;
use std::sync::Arc;
use std::time::Instant;
use support::{archive, build, Proxy, RegistryExt};

fn count(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn archives(prefix: &str, n: usize) -> Vec<Archive> {
    (0..n).map(|i| archive(&format!("{prefix}-{i}"))).collect()
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}

async fn run() {
    let publishes = count("MESH_BENCH_PUBLISH", 500);
    let swept = count("MESH_BENCH_SWEEP", 5000);
    let registry = TestRegistry::start();
    let store = open_store(&registry.spec()).unwrap();
    let home = tempfile::tempdir().unwrap();
    let lock = PublishLock::acquire(home.path()).await.unwrap();

    // Warm the client and the registry (connections, the empty config).
    for a in archives("warm", 20) {
        publish(&*store, &lock, &a).await.unwrap();
    }

    // Two rounds, alternating, best of each: the ratios are taken within one run.
    let (mut plain_best, mut one_best, mut all_best) = (f64::MAX, f64::MAX, f64::MAX);
    for round in 0..2 {
        let plain = archives(&format!("plain-{round}"), publishes);
        let start = Instant::now();
        for a in &plain {
            store.put_blob(a).await.unwrap();
        }
        plain_best = plain_best.min(start.elapsed().as_secs_f64());

        let held = archives(&format!("one-{round}"), publishes);
        let start = Instant::now();
        for a in &held {
            publish(&*store, &lock, a).await.unwrap();
        }
        one_best = one_best.min(start.elapsed().as_secs_f64());

        let held = archives(&format!("all-{round}"), publishes);
        let start = Instant::now();
        for answer in publish_all(&*store, &lock, &held, PUBLISH_CONCURRENCY).await {
            answer.unwrap();
        }
        all_best = all_best.min(start.elapsed().as_secs_f64());
    }
    let rate = |secs: f64| publishes as f64 / secs;
    let ratio = plain_best / all_best;
    println!(
        "plain blob-upload loop: {:.0} archives/s; publish one by one: {:.0}/s (ratio {:.2}); \
         publish_all ({PUBLISH_CONCURRENCY} in flight): {:.0}/s (ratio {ratio:.2}, need >= 0.70) {}",
        rate(plain_best),
        rate(one_best),
        plain_best / one_best,
        rate(all_best),
        if ratio >= 0.7 { "ok" } else { "TOO SLOW" }
    );

    // The sweep: M kept archives, all held already, in a repository of their own.
    let sweep_spec: mesh_store::store::StoreSpec = format!("{}/bench/sweep", registry.base_url())
        .parse()
        .unwrap();
    let sweep_store: Arc<dyn ArchiveStore> = Arc::from(open_store(&sweep_spec).unwrap());
    let kept = Arc::new(archives("kept", swept));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let lock = Arc::new(lock);
    for worker in 0..8 {
        let (store, kept, lock) = (sweep_store.clone(), kept.clone(), lock.clone());
        tasks.spawn(async move {
            for a in kept.iter().skip(worker).step_by(8) {
                publish(&*store, &lock, a).await.unwrap();
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let setup = start.elapsed().as_secs_f64();
    drop(lock);
    // Every archive the current build of a module of its own, so all M are kept.
    let records: Vec<ModuleRecord> = kept
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let mut record = ModuleRecord::new(&format!("m{i}"));
            record
                .builds
                .push(build(&record.module.clone(), &a.reference, i as u64));
            record.current = Some(a.reference.clone());
            record
        })
        .collect();
    let keep = keep_set(&records);
    assert_eq!(keep.len(), swept);

    let proxy = Proxy::start(&registry.base_url()).await;
    let through_proxy = open_store(&proxy.spec_for("bench/sweep")).unwrap();
    let sweep_lock = SweepLock::acquire(home.path()).await.unwrap();
    let start = Instant::now();
    let report = sweep(&*through_proxy, &sweep_lock, &keep, false).await;
    let elapsed = start.elapsed().as_secs_f64();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(report.held_count(), swept);
    let requests = proxy.take_requests();
    // Per archive: a manifest or blob request. Everything else is the listing (with the
    // client's `GET /v2/` handshake before it).
    let (per_archive, listing): (Vec<_>, Vec<_>) = requests
        .iter()
        .partition(|(_, p)| p.contains("/manifests/") || p.contains("/blobs/"));
    let listing_paths: Vec<String> = listing.iter().map(|(m, p)| format!("{m} {p}")).collect();
    let (listing, per_archive) = (listing.len(), per_archive.len());
    println!(
        "sweep of {swept} kept, held archives ({} released): {} requests ({listing} listing + \
         {per_archive} per-archive; limit {swept} + listing) in {elapsed:.2}s {} \
         [listing: {}] [setup: {swept} publishes, 8 at a time, in {setup:.1}s]",
        report.released.len(),
        requests.len(),
        if per_archive <= swept {
            "ok"
        } else {
            "TOO MANY"
        },
        listing_paths.join(", "),
    );
}
