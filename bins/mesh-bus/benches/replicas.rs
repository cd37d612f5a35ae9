//! What three copies cost the controller's records: [`KvRecords`] get and put on a loopback
//! cluster of three nats-servers (the bucket with 3 replicas, R3) against a single loopback
//! server (R1), in the same run, each server as the tests start it (`sync_interval: always`
//! where the server has it). Run:
//!
//! ```text
//! cargo bench -p mesh-bus --bench replicas
//! MESH_NATS_SERVER=target/nats-venv/bin/nats-server cargo bench -p mesh-bus --bench replicas
//! ```
//!
//! It prints p50/p90/p99 of a 2 KiB get and put on each, and the ratios R3 / R1 of the p50s.
//! Blocks of each way alternate, so drift on this noisy machine touches them alike. Only
//! ratios are to be read: absolute times move with the machine's load.

use mesh_bus::records::KvRecords;
use mesh_bus::NatsOptions;
use mesh_records::record_store::RecordStore;
use mesh_test_support::nats_cluster::NatsCluster;
use mesh_test_support::nats_server::NatsServer;
use std::time::{Duration, Instant};

#[path = "support/summary.rs"]
mod summary;
use summary::{summarize, Summary};

/// The size of every record.
const RECORD: usize = 2048;
/// Untimed calls of each way before measuring.
const WARM_UP: usize = 100;
/// Alternating blocks of each way.
const BLOCKS: usize = 10;
/// Calls of each way in a block.
const PER_BLOCK: usize = 100;
/// The key read and written.
const KEY: &str = "inventory/bench.json";

fn show(name: &str, s: Summary) {
    println!(
        "  {name:<32} p50 {:>9.1?}  p90 {:>9.1?}  p99 {:>9.1?}  mean {:>9.1?}",
        s.p50, s.p90, s.p99, s.mean
    );
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

fn timed(samples: &mut Vec<Duration>, mut call: impl FnMut()) {
    for _ in 0..PER_BLOCK {
        let start = Instant::now();
        call();
        samples.push(start.elapsed());
    }
}

fn main() {
    let single = NatsServer::start().unwrap_or_else(|error| panic!("{error}"));
    let cluster = NatsCluster::start(3).unwrap_or_else(|error| panic!("{error}"));
    let r1 = KvRecords::open(&NatsOptions::new(single.url())).unwrap_or_else(|e| panic!("{e}"));
    let r3 = KvRecords::open(&NatsOptions::new(cluster.urls())).unwrap_or_else(|e| panic!("{e}"));
    let value = vec![7u8; RECORD];
    for records in [&r1, &r3] {
        for _ in 0..WARM_UP {
            records.put(KEY, &value).expect("put");
            records.get(KEY).expect("get");
        }
    }
    let (mut get1, mut get3, mut put1, mut put3) = (vec![], vec![], vec![], vec![]);
    let start = Instant::now();
    for _ in 0..BLOCKS {
        timed(&mut put1, || r1.put(KEY, &value).expect("put"));
        timed(&mut put3, || r3.put(KEY, &value).expect("put"));
        timed(&mut get1, || {
            std::hint::black_box(r1.get(KEY).expect("get"));
        });
        timed(&mut get3, || {
            std::hint::black_box(r3.get(KEY).expect("get"));
        });
    }
    let took = start.elapsed();
    let version = single.version();
    let (get1, get3, put1, put3) = (
        summarize(get1),
        summarize(get3),
        summarize(put1),
        summarize(put3),
    );
    println!(
        "KvRecords on nats-server {version}, R3 (3-server loopback cluster) vs R1 (one server), \
         {RECORD}-byte records, {} calls of each way in {BLOCKS} alternating blocks ({took:.1?}); \
         sync_interval always: {}",
        BLOCKS * PER_BLOCK,
        version.has_sync_interval()
    );
    show("get, R1", get1);
    show("get, R3", get3);
    show("put, R1", put1);
    show("put, R3", put3);
    println!(
        "  ratio R3 / R1 (p50): get {:.2}×, put {:.2}×  (p90: get {:.2}×, put {:.2}×)",
        ratio(get3.p50, get1.p50),
        ratio(put3.p50, put1.p50),
        ratio(get3.p90, get1.p90),
        ratio(put3.p90, put1.p90)
    );
}
