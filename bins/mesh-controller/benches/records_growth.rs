//! The records stay bounded over many merges: N simulated hosts (`Simulated`, in this process:
//! each declaration answered at once with a real converged report), the controller's records
//! in a real nats-server's `mesh-records` bucket, a first merge of ten modules, then one merge
//! after another, each changing one module. After each merge the records are collected as the
//! daemon collects them (`mesh_controller::records::collect`: the plans that ended folded, the
//! plans older than the newest 50 removed, the declarations no record names; the grace 0, so
//! what the daemon collects ten minutes later is collected at once).
//!
//! `cargo bench -p mesh-controller --bench records_growth`. Knobs (environment):
//! `MESH_BENCH_HOSTS` (default 1000), `MESH_BENCH_MERGES` (default 100), `MESH_BENCH_TMP`
//! (where the home is made; default `/dev/shm`).
//!
//! Printed: after the first merge and every tenth, the records in the bucket (keys, and the
//! bytes of their values), the bytes the bucket's stream holds (with each key's older values),
//! the merge's and the collection's times; then the last against the first as ratios (target:
//! keys and bytes within 2x). Nothing is asserted: the numbers are read, not tested.

mod support;

use mesh_controller::GivenFleet;
use mesh_controller::Home;
use mesh_controller::Mesh;
use mesh_controller::MeshOptions;
use mesh_controller::Runtime;
use mesh_test_support::nats_server::NatsServer;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::modules::{git, write};
use support::ten_modules::MODULES;
use support::{on_bus, scratch, simulated};

fn main() {
    let hosts: usize = std::env::var("MESH_BENCH_HOSTS")
        .ok()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(1000);
    let merges: usize = std::env::var("MESH_BENCH_MERGES")
        .ok()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(100);
    let server = NatsServer::start().unwrap_or_else(|e| panic!("nats-server: {e}"));
    let dir = tempfile::Builder::new()
        .prefix("mesh-bench-growth-")
        .tempdir_in(scratch())
        .unwrap();
    let (home, bus) = on_bus::ten_modules_on_bus(dir.path(), hosts, server.url(), |users| {
        server.reload(users).unwrap()
    });
    let fleet: GivenFleet = Arc::new(tokio::sync::Mutex::new(Box::new(
        simulated::Simulated::default(),
    )));
    let mesh = Mesh::open(
        home.root(),
        MeshOptions {
            bus: Some(bus),
            store: Some(mesh_store::store::default_store_spec(dir.path())),
            ..MeshOptions::default()
        },
    )
    .unwrap()
    .with_fleet(fleet);
    let home = mesh.home().clone();
    let runtime = Runtime::new(Arc::new(mesh), Arc::new(mesh_controller::Quiet));
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let repo = dir.path().join("repo");
    println!(
        "records over {merges} merges: {hosts} simulated hosts, the records on a loopback \
         nats-server; merge 1 of {MODULES} modules, each after it changes one module"
    );
    let mut first: Option<Measured> = None;
    let mut second_merge = Duration::ZERO;
    for merge in 1..=merges {
        if merge > 1 {
            let module = format!("m{:02}", merge % MODULES);
            write(
                &repo.join(format!("modules/{module}/files/one")),
                &format!("{module} one v{merge}\n"),
            );
            git(
                &repo,
                &["commit", "-q", "-am", &format!("{module}: v{merge}")],
            );
        }
        let started = Instant::now();
        let outcome = tokio
            .block_on(runtime.merge("cat", &Default::default()))
            .unwrap_or_else(|e| panic!("merge {merge}: {e:#}"));
        let merged = started.elapsed();
        let mesh_controller::plans::MergeOutcome::Planned { plan, .. } = outcome else {
            panic!("merge {merge} did not plan: {outcome:?}")
        };
        assert_eq!(
            plan.state,
            mesh_model::plan::PlanState::Done,
            "merge {merge}"
        );
        if merge == 2 {
            second_merge = merged;
        }
        let started = Instant::now();
        let collected =
            mesh_controller::records::collect(&home, mesh_store::clock::now(), Duration::ZERO, 50)
                .unwrap_or_else(|e| panic!("collecting after merge {merge}: {e:#}"));
        let collect = started.elapsed();
        if merge == 1 || merge % 10 == 0 || merge == merges {
            let measured = measure(&home, &server);
            println!(
                "  after merge {merge:3}: {} records, {} bytes ({:.1} per host); the stream \
                 {} bytes; merge {:.2} s, collection {:.2} s ({} declarations, {} plans removed)",
                measured.keys,
                measured.bytes,
                measured.keys as f64 / hosts as f64,
                measured.stream_bytes,
                merged.as_secs_f64(),
                collect.as_secs_f64(),
                collected.collected.count,
                collected.plans.removed_plans.len()
            );
            match &first {
                None => first = Some(measured),
                Some(first) if merge == merges => {
                    let keys = measured.keys as f64 / first.keys as f64;
                    let bytes = measured.bytes as f64 / first.bytes as f64;
                    println!(
                        "  after {merges} merges / after 1: records {keys:.2}x, their bytes \
                         {bytes:.2}x (target <= 2x: {}); the stream's bytes {:.2}x; merge \
                         {merges} / merge 2 (one module each): {:.2}x",
                        if keys <= 2.0 && bytes <= 2.0 {
                            "met"
                        } else {
                            "NOT met"
                        },
                        measured.stream_bytes as f64 / first.stream_bytes as f64,
                        merged.as_secs_f64() / second_merge.as_secs_f64()
                    );
                }
                Some(_) => {}
            }
        }
    }
}

/// The records in the bucket at one moment.
struct Measured {
    keys: usize,
    bytes: u64,
    stream_bytes: u64,
}

/// The records (every key, chunks included, and the bytes of their values) and the bytes the
/// bucket's stream holds.
fn measure(home: &Home, server: &NatsServer) -> Measured {
    let stats = home.records().stat_under("").unwrap();
    let password = std::fs::read_to_string(home.root().join("bus/passwords/controller")).unwrap();
    let options = mesh_bus::NatsOptions::for_controller(server.url(), password.trim());
    let stream_bytes = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let bus = mesh_bus::NatsBus::connect(&options).await.unwrap();
        let mut stream = bus
            .jetstream()
            .get_stream(mesh_bus::subjects::bucket_stream_name(
                mesh_bus::subjects::RECORDS_BUCKET,
            ))
            .await
            .unwrap();
        stream.info().await.unwrap().state.bytes
    });
    Measured {
        keys: stats.len(),
        bytes: stats.iter().map(|s| s.size).sum(),
        stream_bytes,
    }
}
