//! Against a real docker-registry (Debian's CNCF distribution 2.8), started by each test on a
//! free loopback port with deletion enabled.

mod support;

use mesh_store::archive::Archive;
use mesh_store::collect::{collect, CollectReport, RegistryCollector};
use mesh_store::keep::KeepSet;
use mesh_store::lock::{PublishLock, SweepLock};
use mesh_store::manifest::{
    holding_manifest, holding_manifest_digest, holding_tag, MANIFEST_MEDIA_TYPE,
};
use mesh_store::open_store;
use mesh_store::record_store::DirRecords;
use mesh_store::records::{record_build, write_module_record, ModuleRecord};
use mesh_store::store::{publish, ArchiveStore, Holding};
use mesh_store::sweep::{sweep, KeptState, ReleasedState};
use mesh_test_support::registry::{TestRegistry, REGISTRY_BINARY};
use std::path::Path;
use support::{archive, build, keep_of, Fault, Proxy, RegistryExt};

fn collector(registry: &TestRegistry) -> RegistryCollector {
    RegistryCollector {
        binary: REGISTRY_BINARY.into(),
        config: registry.config().to_owned(),
        process: Box::new(registry.collector_process()),
        base_url: registry.base_url(),
        ca_file: registry.ca_file(),
    }
}

/// A started `registry`, a store on it, and an empty home for the locks and module records.
fn store_and_home(
    registry: TestRegistry,
) -> (TestRegistry, Box<dyn ArchiveStore>, tempfile::TempDir) {
    let store = open_store(&registry.spec()).unwrap();
    (registry, store, tempfile::tempdir().unwrap())
}

/// Publishes each of `archives` under one publish lock on `home`, released after.
async fn publish_under_lock<'a>(
    store: &dyn ArchiveStore,
    home: &Path,
    archives: impl IntoIterator<Item = &'a Archive>,
) {
    let lock = PublishLock::acquire(home).await.unwrap();
    for archive in archives {
        publish(store, &lock, archive).await.unwrap();
    }
}

/// A collection asked to run for real (not dry) by the registry's own collector, under a sweep
/// lock on `home`; it still runs dry when it refuses.
async fn collect_asked_for_real(
    store: &dyn ArchiveStore,
    home: &Path,
    keep: &KeepSet,
    registry: &TestRegistry,
) -> CollectReport {
    let lock = SweepLock::acquire(home).await.unwrap();
    let mut collector = collector(registry);
    collect(store, &lock, keep, &mut collector, false)
        .await
        .unwrap()
}

fn record(home: &Path, module: &str, held: bool, builds: &[(&Archive, u64)]) {
    let mut record = ModuleRecord::new(module);
    record.held = held;
    for (archive, at) in builds {
        record.builds.push(build(module, &archive.reference, *at));
    }
    record.current = builds.last().map(|(a, _)| a.reference.clone());
    write_module_record(&DirRecords::new(home), &record).unwrap();
}

// The incident behind “An archive is published with a manifest that holds it”: archives published
// as bare blobs are deleted by the registry's own collector; archives published by us survive it;
// after a sweep, every kept archive survives a real collection and every released one is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_collection_deletes_bare_archives_and_spares_held_ones() {
    let (registry, store, home) = store_and_home(TestRegistry::start());

    let bare = [archive("bare-1"), archive("bare-2")];
    for a in &bare {
        store.put_blob(a).await.unwrap();
    }
    let held = [archive("held-1"), archive("held-2")];
    publish_under_lock(&*store, home.path(), &held).await;

    let output = registry.stock_garbage_collect();
    for a in &bare {
        assert!(
            !store.has_blob(&a.reference.digest).await.unwrap(),
            "bare archive {} survived the stock collector:\n{output}",
            a.reference.digest
        );
    }
    for a in &held {
        let fetched = store.fetch(&a.reference).await.unwrap();
        assert_eq!(fetched, *a);
    }

    // The fix: the records keep a bare archive (published before the fix) and held-1; held-2
    // belongs to a module the mesh no longer holds.
    let bare3 = archive("bare-3");
    store.put_blob(&bare3).await.unwrap();
    record(home.path(), "web", true, &[(&bare3, 1), (&held[0], 2)]);
    record(home.path(), "old", false, &[(&held[1], 1)]);
    let keep = keep_of(home.path());
    assert_eq!(keep.len(), 2);

    let report = collect_asked_for_real(&*store, home.path(), &keep, &registry).await;
    assert!(report.collected_for_real, "{report:#?}");
    assert_eq!(report.sweep.held_line(), "held 2 of 2");
    assert_eq!(report.refused, None);
    let state_of = |digest: &str| {
        report
            .sweep
            .kept
            .iter()
            .find(|k| k.archive.digest == digest)
            .map(|k| k.state.clone())
    };
    assert_eq!(state_of(&bare3.reference.digest), Some(KeptState::HeldNow));
    assert_eq!(
        state_of(&held[0].reference.digest),
        Some(KeptState::AlreadyHeld)
    );
    assert_eq!(report.sweep.released.len(), 1);
    assert_eq!(report.sweep.released[0].digest, held[1].reference.digest);
    assert_eq!(report.sweep.released[0].state, ReleasedState::Released);
    assert!(report.garbage.deleted.contains(&held[1].reference.digest));
    assert!(report.lost.is_empty());

    // Every kept archive survived the real collection; the released one is gone.
    for kept in [&bare3, &held[0]] {
        assert_eq!(store.fetch(&kept.reference).await.unwrap(), *kept);
        assert_eq!(store.holding(&kept.reference).await.unwrap(), Holding::Held);
    }
    assert!(!store.has_blob(&held[1].reference.digest).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_manifest_is_byte_identical_to_its_recomputation_and_skopeo_reads_it() {
    let (registry, store, home) = store_and_home(TestRegistry::start());
    let a = archive("identical");
    let lock = PublishLock::acquire(home.path()).await.unwrap();
    let published = publish(&*store, &lock, &a).await.unwrap();
    assert_eq!(
        published.manifest_digest,
        holding_manifest_digest(&a.reference)
    );

    let tag = holding_tag(&a.reference.digest);
    let url = format!("{}/v2/mesh/archives/manifests/{tag}", registry.base_url());
    let response = reqwest::Client::new()
        .get(&url)
        .header("accept", MANIFEST_MEDIA_TYPE)
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers()["docker-content-digest"]
            .to_str()
            .unwrap(),
        holding_manifest_digest(&a.reference)
    );
    let stored = response.bytes().await.unwrap();
    assert_eq!(stored.as_ref(), holding_manifest(&a.reference).as_slice());

    let skopeo = std::process::Command::new("skopeo")
        .args(["inspect", "--raw", "--tls-verify=false"])
        .arg(format!(
            "docker://127.0.0.1:{}/mesh/archives:{tag}",
            registry.port
        ))
        .output()
        .expect("skopeo is installed (Debian package skopeo)");
    assert!(skopeo.status.success(), "{skopeo:?}");
    assert_eq!(skopeo.stdout, holding_manifest(&a.reference));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collection_refuses_to_run_for_real_while_a_kept_archive_is_unheld() {
    let (registry, store, home) = store_and_home(TestRegistry::start());
    let kept = archive("kept");
    let ghost = archive("ghost"); // recorded, never uploaded: it cannot be held
    let unkept = archive("unkept");
    let bare = archive("bare");
    publish_under_lock(&*store, home.path(), [&kept, &unkept]).await;
    store.put_blob(&bare).await.unwrap();
    record(home.path(), "web", true, &[(&ghost, 1), (&kept, 2)]);
    let keep = keep_of(home.path());

    let report = collect_asked_for_real(&*store, home.path(), &keep, &registry).await;
    assert!(!report.collected_for_real);
    assert!(report.garbage.dry_run);
    let refused = report.refused.clone().expect("a reason");
    assert!(refused.contains("held 1 of 2"), "{refused}");
    assert_eq!(report.sweep.missing().count(), 1);
    // Ran dry: what it would delete is listed, nothing is deleted.
    assert!(report.garbage.deleted.contains(&bare.reference.digest));
    assert!(store.has_blob(&bare.reference.digest).await.unwrap());
    assert!(store.has_blob(&unkept.reference.digest).await.unwrap());
}

async fn partial_view_releases_nothing(fault: Fault) {
    let (registry, direct, home) = store_and_home(TestRegistry::start());
    let kept: Vec<_> = (0..4).map(|i| archive(&format!("kept-{i}"))).collect();
    let unkept: Vec<_> = (0..3).map(|i| archive(&format!("unkept-{i}"))).collect();
    let bare_kept = archive("bare-kept");
    publish_under_lock(&*direct, home.path(), kept.iter().chain(&unkept)).await;
    direct.put_blob(&bare_kept).await.unwrap();
    let mut builds: Vec<_> = kept.iter().map(|a| (a, 0)).collect();
    builds.push((&bare_kept, 0));
    for (i, (a, _)) in builds.iter().enumerate() {
        record(home.path(), &format!("m{i}"), true, &[(a, i as u64)]);
    }
    let keep = keep_of(home.path());
    assert_eq!(keep.len(), 5);

    let proxy = Proxy::start(&registry.base_url()).await;
    let through_proxy = open_store(&proxy.spec()).unwrap();
    // Checks of held manifests fail from the third on.
    proxy.fault(fault, "HEAD /v2/mesh/archives/manifests/", 2);
    let lock = SweepLock::acquire(home.path()).await.unwrap();
    let report = sweep(&*through_proxy, &lock, &keep, false).await;
    assert!(!report.failures.is_empty(), "{report:#?}");
    assert_eq!(report.released.len(), unkept.len());
    assert!(report
        .released
        .iter()
        .all(|r| r.state == ReleasedState::Skipped));
    // A collection on that view runs dry.
    let mut collector = collector(&registry);
    let collected = collect(&*through_proxy, &lock, &keep, &mut collector, false)
        .await
        .unwrap();
    assert!(!collected.collected_for_real);
    assert!(collected.refused.unwrap().contains("partial view"));
    drop(lock);

    // Every kept archive is held, nothing was let go.
    let listed = direct.list_held().await.unwrap();
    for a in kept.iter().chain([&bare_kept]) {
        assert_eq!(direct.holding(&a.reference).await.unwrap(), Holding::Held);
        assert_eq!(direct.fetch(&a.reference).await.unwrap(), *a);
    }
    for a in &unkept {
        assert!(listed.contains(&a.reference.digest));
    }

    // Healed, the next sweep lets go of what is not kept.
    proxy.heal();
    let lock = SweepLock::acquire(home.path()).await.unwrap();
    let report = sweep(&*through_proxy, &lock, &keep, false).await;
    assert!(report.failures.is_empty(), "{report:#?}");
    assert_eq!(report.held_line(), "held 5 of 5");
    assert!(report
        .released
        .iter()
        .all(|r| r.state == ReleasedState::Released));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_answering_500_mid_sweep_leaves_every_kept_archive_held() {
    partial_view_releases_nothing(Fault::ServerError).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_going_away_mid_sweep_leaves_every_kept_archive_held() {
    partial_view_releases_nothing(Fault::GoneAway).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_listing_lets_nothing_go() {
    let (registry, store, home) = store_and_home(TestRegistry::start());
    let unkept = archive("unkept");
    publish_under_lock(&*store, home.path(), [&unkept]).await;
    let proxy = Proxy::start(&registry.base_url()).await;
    proxy.fault(Fault::ServerError, "/tags/list", 0);
    let through_proxy = open_store(&proxy.spec()).unwrap();
    let lock = SweepLock::acquire(home.path()).await.unwrap();
    let report = sweep(&*through_proxy, &lock, &Default::default(), false).await;
    assert_eq!(report.failures.len(), 1);
    assert!(
        report.failures[0].contains("cannot list held archives"),
        "{report:#?}"
    );
    assert!(report.released.is_empty());
    assert_eq!(
        store.holding(&unkept.reference).await.unwrap(),
        Holding::Held
    );
}

// Publishes running while sweeps and real collections run never lose a kept archive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_during_sweep_and_collection_never_lose_a_kept_archive() {
    let registry = TestRegistry::start();
    let spec = registry.spec();
    let home = tempfile::tempdir().unwrap();
    let home_path = home.path().to_owned();

    let publisher = {
        let home = home_path.clone();
        let spec = spec.clone();
        tokio::spawn(async move {
            let store = open_store(&spec).unwrap();
            for i in 0..24u64 {
                let a = archive(&format!("race-{i}"));
                let module = format!("mod-{}", i % 3);
                let mut attempts = 0;
                loop {
                    let lock = PublishLock::acquire(&home).await.unwrap();
                    match publish(&*store, &lock, &a).await {
                        Ok(_) => {
                            record_build(
                                &DirRecords::new(&home),
                                &lock,
                                &build(&module, &a.reference, i),
                            )
                            .unwrap();
                            break;
                        }
                        // A pooled connection to the registry as it was before a restart.
                        Err(e) if attempts < 3 => {
                            attempts += 1;
                            eprintln!("publish retried: {e}");
                        }
                        Err(e) => panic!("publish failed: {e}"),
                    }
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
    };
    let collections = {
        let home = home_path.clone();
        let mut collector = collector(&registry);
        let spec = spec.clone();
        tokio::spawn(async move {
            let store = open_store(&spec).unwrap();
            let mut real = 0;
            for _ in 0..4 {
                tokio::time::sleep(std::time::Duration::from_millis(120)).await;
                let lock = SweepLock::acquire(&home).await.unwrap();
                let keep = keep_of(&home);
                let report = collect(&*store, &lock, &keep, &mut collector, false)
                    .await
                    .unwrap();
                assert!(report.lost.is_empty(), "{report:#?}");
                if report.collected_for_real {
                    real += 1;
                }
            }
            real
        })
    };
    publisher.await.unwrap();
    let real = collections.await.unwrap();
    assert!(real > 0, "no collection ran for real");

    let store = open_store(&spec).unwrap();
    let keep = keep_of(&home_path);
    assert_eq!(keep.len(), 15, "3 modules × 5 recent builds");
    for kept in keep.archives.values() {
        assert_eq!(store.holding(&kept.archive).await.unwrap(), Holding::Held);
        store.fetch(&kept.archive).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_does_not_allow_deletion_is_said_so() {
    let (_registry, store, home) = store_and_home(TestRegistry::start_with_deletion(false));
    let unkept = archive("unkept");
    publish_under_lock(&*store, home.path(), [&unkept]).await;
    let lock = SweepLock::acquire(home.path()).await.unwrap();
    let report = sweep(&*store, &lock, &Default::default(), false).await;
    assert_eq!(report.failures.len(), 1, "{report:#?}");
    assert!(
        report.failures[0].contains("the registry does not allow deletion (405"),
        "{}",
        report.failures[0]
    );
    assert!(matches!(
        report.released[0].state,
        ReleasedState::Failed { .. }
    ));
    assert_eq!(
        store.holding(&unkept.reference).await.unwrap(),
        Holding::Held
    );
}

/// A registry nothing was pushed to has no repositories directory, and its `garbage-collect`
/// fails saying so: a collection there collects nothing and does not fail (found by
/// `publishes_during_sweep_and_collection_never_lose_a_kept_archive` on a busy machine, when
/// the first collection ran before the first publish).
#[tokio::test]
async fn a_collection_of_a_registry_nothing_was_pushed_to_collects_nothing() {
    let registry = TestRegistry::start();
    let store = open_store(&registry.spec()).unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut collector = collector(&registry);
    let lock = SweepLock::acquire(home.path()).await.unwrap();
    let keep = keep_of(home.path());
    let report = collect(&*store, &lock, &keep, &mut collector, false)
        .await
        .unwrap();
    assert!(report.lost.is_empty(), "{report:#?}");
}
