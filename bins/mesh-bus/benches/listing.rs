//! A listing costs what it returns, not what the records hold: `KvRecords::keys_under` of one
//! module's settings directory (10 keys: `mesh.json` and nine `nodes/<node>.json`) among
//! 200,000 other records, against the same listing of those 10 keys alone. Each set of records
//! is on a loopback nats-server of its own, started here. Run:
//!
//! ```text
//! cargo bench -p mesh-bus --bench listing
//! MESH_BENCH_OTHERS=500000 cargo bench -p mesh-bus --bench listing
//! MESH_BENCH_SIBLINGS=200000 cargo bench -p mesh-bus --bench listing
//! ```
//!
//! The other records are spread over the directories a fleet's records hold after merges
//! (`sent/`, `deployed/`, `rollouts/<plan>/<module>/`, `declarations/`), each a bucket of its
//! own. `MESH_BENCH_SIBLINGS` (default 0: not measured) also lists the 10 keys among that many
//! other records in their own top-level directory (`settings/<module>/nodes/…` of other
//! modules), on a third server: the case a bucket per top-level directory does not cover on a
//! 2.9 server. Blocks of listings alternate between the servers, so drift on this noisy machine
//! touches them alike; the ratio of the p50s is what to read (target: at most 2×).

use futures_util::StreamExt as _;
use mesh_bus::records::{place, KvRecords};
use mesh_bus::NatsOptions;
use mesh_records::record_store::RecordStore;
use mesh_test_support::nats_server::NatsServer;
use std::time::{Duration, Instant};

#[path = "support/summary.rs"]
mod summary;
use summary::{summarize, Summary};

/// The directory listed.
const DIR: &str = "settings/web";
/// Alternating blocks of listings, and listings of each bucket in a block.
const BLOCKS: usize = 20;
const PER_BLOCK: usize = 10;
/// Untimed listings of each bucket before measuring.
const WARM_UP: usize = 10;

fn dir_keys() -> Vec<String> {
    std::iter::once(format!("{DIR}/mesh.json"))
        .chain((0..9).map(|n| format!("{DIR}/nodes/n{n:05}.json")))
        .collect()
}

/// `count` keys of other directories, as a fleet's bucket holds them.
fn other_keys(count: usize) -> Vec<String> {
    (0..count)
        .map(|i| match i % 4 {
            0 => format!("sent/n{i:07}.json"),
            1 => format!("deployed/m{:02}/n{i:07}.json", i % 10),
            2 => format!("rollouts/plan-{}/m{:02}/n{i:07}.json", i % 7, i % 10),
            _ => format!("declarations/{i:064x}.json"),
        })
        .collect()
}

/// `count` keys of other modules' settings, in the directory listed's own top-level directory.
fn sibling_keys(count: usize) -> Vec<String> {
    (0..count)
        .map(|i| format!("settings/m{:04}/nodes/n{i:07}.json", i % 1000))
        .collect()
}

/// Puts `keys` in their records buckets at `url` (made already), 256 in flight.
async fn fill(url: &str, keys: &[String], value: &bytes::Bytes) {
    let client = async_nats::connect(url).await.expect("connect");
    let js = async_nats::jetstream::new(client);
    let mut stores = std::collections::BTreeMap::new();
    for key in keys {
        let (bucket, _) = place(key);
        if let std::collections::btree_map::Entry::Vacant(entry) = stores.entry(bucket) {
            let store = js.get_key_value(entry.key()).await.expect("the bucket");
            entry.insert(store);
        }
    }
    let mut puts = futures_util::stream::iter(keys)
        .map(|key| {
            let (bucket, in_bucket) = place(key);
            stores[&bucket].put(in_bucket, value.clone())
        })
        .buffer_unordered(256);
    while let Some(put) = puts.next().await {
        put.expect("put");
    }
}

fn show(name: &str, s: Summary) {
    println!(
        "{name:<58} p50 {:>9.2?}  p90 {:>9.2?}  p99 {:>9.2?}  mean {:>9.2?}",
        s.p50, s.p90, s.p99, s.mean
    );
}

fn main() {
    let others: usize = std::env::var("MESH_BENCH_OTHERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200_000);
    let value = bytes::Bytes::from(vec![b'x'; 64]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");

    let siblings: usize = std::env::var("MESH_BENCH_SIBLINGS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let empty_server = NatsServer::start().unwrap_or_else(|error| panic!("{error}"));
    let full_server = NatsServer::start().unwrap_or_else(|error| panic!("{error}"));
    let empty = KvRecords::open(&NatsOptions::new(empty_server.url())).expect("records");
    let full = KvRecords::open(&NatsOptions::new(full_server.url())).expect("records");
    let sibling_server =
        (siblings > 0).then(|| NatsServer::start().unwrap_or_else(|error| panic!("{error}")));
    let crowded = sibling_server
        .as_ref()
        .map(|server| KvRecords::open(&NatsOptions::new(server.url())).expect("records"));
    let wanted = dir_keys();
    for records in [&empty, &full].into_iter().chain(crowded.as_ref()) {
        records
            .make_directories(&["settings", "sent", "deployed", "rollouts", "declarations"])
            .expect("the buckets");
        for key in &wanted {
            records.put(key, &value).expect("put");
        }
    }
    let started = Instant::now();
    runtime.block_on(fill(&full_server.url(), &other_keys(others), &value));
    println!(
        "filled the second server with {others} other records in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    if let Some(server) = &sibling_server {
        let started = Instant::now();
        runtime.block_on(fill(&server.url(), &sibling_keys(siblings), &value));
        println!(
            "filled the third server with {siblings} other modules' settings in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }

    let list = |records: &KvRecords| -> Duration {
        let started = Instant::now();
        let keys = records.keys_under(DIR).expect("a listing");
        let took = started.elapsed();
        assert_eq!(keys.len(), wanted.len(), "the listing of {DIR}: {keys:?}");
        took
    };
    for _ in 0..WARM_UP {
        list(&empty);
        list(&full);
    }
    if let Some(crowded) = &crowded {
        for _ in 0..WARM_UP {
            list(crowded);
        }
    }
    let (mut in_empty, mut in_full, mut in_crowded) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..BLOCKS {
        for _ in 0..PER_BLOCK {
            in_empty.push(list(&empty));
        }
        for _ in 0..PER_BLOCK {
            in_full.push(list(&full));
        }
        if let Some(crowded) = &crowded {
            for _ in 0..PER_BLOCK {
                in_crowded.push(list(crowded));
            }
        }
    }
    let (empty_summary, full_summary) = (summarize(in_empty), summarize(in_full));
    show(
        &format!("keys_under({DIR}): its 10 keys alone"),
        empty_summary,
    );
    show(
        &format!("keys_under({DIR}): its 10 keys among {others} others"),
        full_summary,
    );
    let ratio = full_summary.p50.as_secs_f64() / empty_summary.p50.as_secs_f64();
    println!("ratio of the p50s, {others} other records / none: {ratio:.2}x (target: at most 2x)");
    if !in_crowded.is_empty() {
        let crowded_summary = summarize(in_crowded);
        show(
            &format!("keys_under({DIR}): among {siblings} other settings"),
            crowded_summary,
        );
        let ratio = crowded_summary.p50.as_secs_f64() / empty_summary.p50.as_secs_f64();
        println!(
            "ratio of the p50s, {siblings} other modules' settings / none: {ratio:.2}x \
             (the same top-level directory)"
        );
    }
    runtime.shutdown_background();
}
