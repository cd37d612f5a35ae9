//! The embedded default: an OCI image layout directory, read back by skopeo and umoci.

mod support;

use mesh_store::archive::Archive;
use mesh_store::collect::{collect, LayoutCollector};
use mesh_store::collector::{
    Collector, CollectorError, CollectorOptions, Operation, RegistryCollection, RunOptions, Verdict,
};
use mesh_store::layout::OciLayoutStore;
use mesh_store::lock::{PublishLock, SweepLock};
use mesh_store::manifest::{holding_manifest, holding_tag};
use mesh_store::problems::read_problems;
use mesh_store::record_store::{DirRecords, RecordStore};
use mesh_store::records::{forget_module, read_module_records, record_build};
use mesh_store::store::{publish, ArchiveStore, Holding, StoreAccess, StoreSpec};
use mesh_store::sweep::{KeptState, ReleasedState};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use support::{archive, build, keep_of};

/// An empty layout store (in the directory returned first, to keep) and an empty home for the
/// locks and module records.
fn layout_and_home() -> (tempfile::TempDir, tempfile::TempDir, OciLayoutStore) {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let store = OciLayoutStore::new(&dir.path().join("store"));
    (dir, home, store)
}

/// Records a build of `module` from `archive` at `at` in `home`'s module records.
fn record(home: &Path, lock: &PublishLock, module: &str, archive: &Archive, at: u64) {
    record_build(
        &DirRecords::new(home),
        lock,
        &build(module, &archive.reference, at),
    )
    .unwrap();
}

fn collector(store: &OciLayoutStore) -> LayoutCollector {
    LayoutCollector {
        layout: store.clone(),
    }
}

#[tokio::test]
async fn skopeo_and_umoci_read_a_held_manifest_from_the_layout() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let layout = dir.path().join("store");
    let store = OciLayoutStore::new(&layout);
    let a = archive("layout");
    let lock = PublishLock::acquire(home.path()).await.unwrap();
    publish(&store, &lock, &a).await.unwrap();
    // Idempotent: publishing again changes nothing.
    let index_before = std::fs::read(layout.join("index.json")).unwrap();
    publish(&store, &lock, &a).await.unwrap();
    assert_eq!(
        std::fs::read(layout.join("index.json")).unwrap(),
        index_before
    );

    let tag = holding_tag(&a.reference.digest);
    let skopeo = Command::new("skopeo")
        .args(["inspect", "--raw"])
        .arg(format!("oci:{}:{tag}", layout.display()))
        .output()
        .expect("skopeo is installed (Debian package skopeo)");
    assert!(skopeo.status.success(), "{skopeo:?}");
    assert_eq!(skopeo.stdout, holding_manifest(&a.reference));

    let umoci = Command::new("umoci")
        .args(["ls", "--layout"])
        .arg(&layout)
        .output()
        .expect("umoci is installed (Debian package umoci)");
    assert!(umoci.status.success(), "{umoci:?}");
    assert_eq!(String::from_utf8_lossy(&umoci.stdout).trim(), tag);

    assert_eq!(store.holding(&a.reference).await.unwrap(), Holding::Held);
    assert_eq!(store.fetch(&a.reference).await.unwrap(), a);
}

#[tokio::test]
async fn a_forgotten_modules_archives_are_released_and_collected_and_kept_ones_survive() {
    let (_dir, home, store) = layout_and_home();
    let web: Vec<_> = (0..7).map(|i| archive(&format!("web-{i}"))).collect();
    let old = archive("old");
    let bare = archive("bare, never recorded");
    let lock = PublishLock::acquire(home.path()).await.unwrap();
    for (i, a) in web.iter().enumerate() {
        publish(&store, &lock, a).await.unwrap();
        record(home.path(), &lock, "web", a, i as u64);
    }
    publish(&store, &lock, &old).await.unwrap();
    record(home.path(), &lock, "old", &old, 1);
    store.put_blob(&bare).await.unwrap();
    drop(lock);
    forget_module(&DirRecords::new(home.path()), "old").unwrap();

    let keep = keep_of(home.path());
    assert_eq!(keep.len(), 5);
    let lock = SweepLock::acquire(home.path()).await.unwrap();
    let mut collector = collector(&store);
    let report = collect(&store, &lock, &keep, &mut collector, false)
        .await
        .unwrap();
    assert!(report.collected_for_real, "{report:#?}");
    assert_eq!(report.sweep.held_line(), "held 5 of 5");
    assert!(report
        .sweep
        .kept
        .iter()
        .all(|k| k.state == KeptState::AlreadyHeld));
    let released: Vec<_> = report.sweep.released.iter().map(|r| &r.digest).collect();
    assert_eq!(released.len(), 3, "web-0, web-1 and old");
    assert!(report
        .sweep
        .released
        .iter()
        .all(|r| r.state == ReleasedState::Released));
    for gone in [&web[0], &web[1], &old, &bare] {
        assert!(report.garbage.deleted.contains(&gone.reference.digest));
        assert!(!store.has_blob(&gone.reference.digest).await.unwrap());
    }
    for kept in &web[2..] {
        assert_eq!(store.fetch(&kept.reference).await.unwrap(), *kept);
    }
    // Every manifest left in the layout still reads (skopeo would refuse a broken one).
    let again = collect(&store, &lock, &keep, &mut collector, false)
        .await
        .unwrap();
    assert!(again.garbage.deleted.is_empty());
    assert!(again.sweep.released.is_empty());
}

#[tokio::test]
async fn layout_collection_refuses_to_run_for_real_while_a_kept_archive_is_unheld() {
    let (_dir, home, store) = layout_and_home();
    let kept = archive("kept");
    let ghost = archive("ghost");
    let bare = archive("bare");
    let lock = PublishLock::acquire(home.path()).await.unwrap();
    publish(&store, &lock, &kept).await.unwrap();
    record(home.path(), &lock, "web", &ghost, 1);
    record(home.path(), &lock, "web", &kept, 2);
    store.put_blob(&bare).await.unwrap();
    drop(lock);
    let keep = keep_of(home.path());
    let lock = SweepLock::acquire(home.path()).await.unwrap();
    let mut collector = collector(&store);
    let report = collect(&store, &lock, &keep, &mut collector, false)
        .await
        .unwrap();
    assert!(!report.collected_for_real);
    assert_eq!(
        report.refused.as_deref(),
        Some("held 1 of 2: 1 kept archive(s) missing; collection runs dry until every kept archive is held")
    );
    assert_eq!(report.garbage.deleted, vec![bare.reference.digest.clone()]);
    assert!(store.has_blob(&bare.reference.digest).await.unwrap());
}

#[tokio::test]
async fn a_sweep_holds_a_kept_archive_published_bare() {
    // The incident behind “An archive is published with a manifest that holds it”: archives
    // published before the fix are bare blobs; the sweep backfills.
    let (_dir, home, store) = layout_and_home();
    let bare = archive("bare");
    store.put_blob(&bare).await.unwrap();
    let lock = PublishLock::acquire(home.path()).await.unwrap();
    record(home.path(), &lock, "web", &bare, 1);
    drop(lock);
    assert_eq!(
        store.holding(&bare.reference).await.unwrap(),
        Holding::Unheld
    );
    let keep = keep_of(home.path());
    let lock = SweepLock::acquire(home.path()).await.unwrap();
    let dry = mesh_store::sweep::sweep(&store, &lock, &keep, true).await;
    assert_eq!(dry.kept[0].state, KeptState::WouldHold);
    assert_eq!(dry.held_line(), "held 0 of 1");
    assert_eq!(
        store.holding(&bare.reference).await.unwrap(),
        Holding::Unheld
    );
    let real = mesh_store::sweep::sweep(&store, &lock, &keep, false).await;
    assert_eq!(real.kept[0].state, KeptState::HeldNow);
    assert_eq!(store.holding(&bare.reference).await.unwrap(), Holding::Held);
}

#[test]
fn a_dry_run_build_is_never_recorded() {
    let home = tempfile::tempdir().unwrap();
    let lock = PublishLock::acquire_blocking(home.path()).unwrap();
    let mut dry = build("web", &archive("dry").reference, 1);
    dry.dry_run = true;
    let error = record_build(&DirRecords::new(home.path()), &lock, &dry).unwrap_err();
    assert_eq!(
        error.to_string(),
        "build of `web` at c1 is a dry run; dry runs are never recorded"
    );
    assert!(read_module_records(&DirRecords::new(home.path()))
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_waits_for_a_sweep_to_finish() {
    let home = tempfile::tempdir().unwrap();
    let sweeping = SweepLock::acquire(home.path()).await.unwrap();
    let path = home.path().to_owned();
    let publishing = tokio::spawn(async move { PublishLock::acquire(&path).await.unwrap() });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(!publishing.is_finished(), "a publish ran during a sweep");
    drop(sweeping);
    let publish_lock = tokio::time::timeout(std::time::Duration::from_secs(5), publishing)
        .await
        .expect("the publish goes ahead once the sweep is done")
        .unwrap();
    // Publishes share the lock with each other.
    let second = PublishLock::acquire(home.path()).await.unwrap();
    drop((publish_lock, second));
}

/// A run of the collector on the layout, collecting: `dry_run` as asked.
fn collector_run(dry_run: bool) -> RunOptions {
    RunOptions {
        operation: Operation::Collect(RegistryCollection {
            config: None,
            binary: "/usr/bin/docker-registry".into(),
            stop: None,
            start: None,
        }),
        dry_run,
        hold_plans_lease: false,
        by: "mesh-collector collect".to_owned(),
    }
}

/// The collector's run as library calls (the rule “Nothing fails silently”): a kept archive
/// whose blob is gone leaves the run not held and a problem of the store at the time given; a
/// dry run asked for records none; a run that holds every kept archive collects for real and
/// clears it.
#[tokio::test]
async fn a_collectors_run_keeps_a_problem_until_every_kept_archive_is_held() {
    let (dir, home, store) = layout_and_home();
    let kept = archive("kept");
    let lock = PublishLock::acquire(home.path()).await.unwrap();
    publish(&store, &lock, &kept).await.unwrap();
    record(home.path(), &lock, "web", &kept, 1);
    // Recorded, never published: its blob is missing.
    record(home.path(), &lock, "api", &archive("ghost"), 1);
    drop(lock);
    let records: Arc<dyn RecordStore> = Arc::new(DirRecords::new(home.path()));
    let collector = Collector::open(CollectorOptions {
        home: home.path().to_owned(),
        store: Some(StoreSpec::Layout(dir.path().join("store"))),
        access: StoreAccess::default(),
    })
    .await
    .unwrap();

    let dry = collector
        .run(Arc::clone(&records), collector_run(true))
        .await
        .unwrap();
    assert_eq!(dry.verdict(), Verdict::NotHeld);
    dry.keep_problem(&*records, "mesh-collector collect", 7)
        .unwrap();
    assert!(
        read_problems(&*records).unwrap().is_empty(),
        "a dry run asked for"
    );

    let real = collector
        .run(Arc::clone(&records), collector_run(false))
        .await
        .unwrap();
    assert_eq!(real.verdict(), Verdict::NotHeld);
    assert!(!real.collection().unwrap().collected_for_real);
    real.keep_problem(&*records, "mesh-collector collect", 7)
        .unwrap();
    let problems = read_problems(&*records).unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(
        problems[0].what,
        "`mesh-collector collect`: kept 2, held 1 of 2, missing 1, released 0"
    );
    assert_eq!((problems[0].since, problems[0].at), (7, 7));
    assert!(problems[0].details.iter().any(|d| d.contains("ran dry")));

    forget_module(&*records, "api").unwrap();
    let whole = collector
        .run(Arc::clone(&records), collector_run(false))
        .await
        .unwrap();
    assert_eq!(whole.verdict(), Verdict::AllHeld);
    assert!(whole.collection().unwrap().collected_for_real);
    whole
        .keep_problem(&*records, "mesh-collector collect", 8)
        .unwrap();
    assert!(read_problems(&*records).unwrap().is_empty());
}

/// A registry's collection needs the file it serves with, and for real the commands that stop
/// and start it: the run says which is missing before it touches the registry.
#[tokio::test]
async fn a_registrys_collection_needs_its_configuration_and_for_real_its_process() {
    let home = tempfile::tempdir().unwrap();
    let collector = Collector::open(CollectorOptions {
        home: home.path().to_owned(),
        store: Some("http://127.0.0.1:9".parse().unwrap()),
        access: StoreAccess::default(),
    })
    .await
    .unwrap();
    let records: Arc<dyn RecordStore> = Arc::new(DirRecords::new(home.path()));
    let error = collector
        .run(Arc::clone(&records), collector_run(false))
        .await
        .err()
        .unwrap();
    assert!(matches!(error, CollectorError::NoRegistryConfig), "{error}");
    let mut with_config = collector_run(false);
    if let Operation::Collect(registry) = &mut with_config.operation {
        registry.config = Some("/etc/docker/registry/config.yml".into());
    }
    let error = collector
        .run(Arc::clone(&records), with_config)
        .await
        .err()
        .unwrap();
    assert!(
        matches!(error, CollectorError::NoRegistryProcess),
        "{error}"
    );
}
