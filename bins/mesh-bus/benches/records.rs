//! What the controller's records cost on the bus: [`KvRecords`] (a JetStream key-value bucket,
//! each blocking call run on a private runtime from a scoped thread of its own) against
//! baselines measured in the same run on the same loopback `nats-server`, which this benchmark
//! starts. Run:
//!
//! ```text
//! cargo bench -p mesh-bus --bench records
//! ```
//!
//! It prints p50/p90/p99 and the ratios of the p50s for:
//! 1. `KvRecords::get` of a 2 KiB record against a raw request/reply round trip (one
//!    async-nats client answering its own small request with 2 KiB, the shape of a get);
//! 2. `KvRecords::put` of a 2 KiB record against a raw JetStream publish awaited to its
//!    acknowledgement, to a plain stream (file storage, as the bucket), with the same
//!    `kv::Store::put` awaited directly beside them;
//! 3. `keys_under("settings")` with none, 1,000 and 5,000 keys in the bucket (the ratio
//!    5,000 / 1,000 should be about 5×; the empty listing is the fixed cost), beside
//!    `DirRecords::keys_under` over the same keys in a temporary directory. The 5,000 are in
//!    the bucket of a second loopback server, so the two sizes can be listed in turn;
//! 4. the per-call overhead: `KvRecords::get` (a call handed to its runtime's worker, the answer
//!    waited for on the caller's thread) against the same `kv::Store::get` awaited directly on a
//!    runtime, beside `block_on` onto a one-worker runtime from the calling thread, an empty
//!    scoped thread spawned and joined, and the two together (how `KvRecords` called until the
//!    first runs of this benchmark showed it doubled every call).
//!
//! Blocks of each way alternate, so drift on this noisy machine touches them alike. Only
//! ratios are to be read: absolute times move with the machine's load.

use futures_util::StreamExt as _;
use mesh_bus::records::{bucket_key, KvRecords};
use mesh_bus::subjects::RECORDS_BUCKET;
use mesh_bus::NatsOptions;
use mesh_records::record_store::{DirRecords, RecordStore};
use mesh_test_support::nats_server::NatsServer;
use std::path::Path;
use std::time::{Duration, Instant};

#[path = "support/summary.rs"]
mod summary;
use summary::{summarize, Summary};

/// The size of every record and payload.
const RECORD: usize = 2048;
/// Untimed calls of each way before measuring.
const WARM_UP: usize = 200;
/// Alternating blocks of each way.
const BLOCKS: usize = 20;
/// Calls of each way in a block.
const PER_BLOCK: usize = 200;
/// Timed `keys_under` calls at each size, for each store.
const LISTINGS: usize = 25;
/// Keys under `settings/<module>/`: `mesh.json` and nine `nodes/<node>.json`.
const KEYS_PER_MODULE: usize = 10;
/// The sizes of the settings listing: none (the bucket holds only the get/put record, the
/// listing's fixed cost), then 1,000 and 5,000.
const SIZES: [usize; 3] = [0, 1_000, 5_000];

/// The key read and written by the get and put measurements.
const KEY: &str = "inventory/bench.json";

fn show(name: &str, s: Summary) {
    println!(
        "  {name:<50} p50 {:>9.1?}  p90 {:>9.1?}  p99 {:>9.1?}  mean {:>9.1?}",
        s.p50, s.p90, s.p99, s.mean
    );
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

/// Times `call` once.
fn timed<T>(call: impl FnOnce() -> T) -> Duration {
    let start = Instant::now();
    std::hint::black_box(call());
    start.elapsed()
}

/// Times `PER_BLOCK` awaits of `call` inside one `block_on`, so the runtime's entry is not
/// counted.
fn timed_async<F: std::future::Future>(
    runtime: &tokio::runtime::Runtime,
    mut call: impl FnMut() -> F,
) -> Vec<Duration> {
    runtime.block_on(async {
        let mut samples = Vec::with_capacity(PER_BLOCK);
        for _ in 0..PER_BLOCK {
            let start = Instant::now();
            std::hint::black_box(call().await);
            samples.push(start.elapsed());
        }
        samples
    })
}

/// The settings keys of a mesh with `count / KEYS_PER_MODULE` modules.
fn settings_keys(count: usize) -> Vec<String> {
    (0..count / KEYS_PER_MODULE)
        .flat_map(|module| {
            std::iter::once(format!("settings/m{module:04}/mesh.json")).chain(
                (1..KEYS_PER_MODULE)
                    .map(move |node| format!("settings/m{module:04}/nodes/n{node:03}.json")),
            )
        })
        .collect()
}

/// Writes `keys` as files under `dir`, as `DirRecords` keeps them (without its fsync per
/// record: only the listing is measured).
fn write_files(dir: &Path, keys: &[String], value: &[u8]) {
    for key in keys {
        let path = dir.join(key);
        std::fs::create_dir_all(path.parent().expect("a key has a directory")).expect("mkdir");
        std::fs::write(&path, value).expect("write");
    }
}

/// Everything measured, per way.
#[derive(Default)]
struct Samples {
    raw_request: Vec<Duration>,
    records_get: Vec<Duration>,
    direct_get: Vec<Duration>,
    hop_get: Vec<Duration>,
    scoped_hop_get: Vec<Duration>,
    scoped_thread: Vec<Duration>,
    raw_publish: Vec<Duration>,
    direct_put: Vec<Duration>,
    records_put: Vec<Duration>,
}

fn main() {
    let server = NatsServer::start().unwrap_or_else(|error| panic!("{error}"));
    let url = server.url();
    let value = bytes::Bytes::from(vec![b'x'; RECORD]);

    // The bench's own runtime: the baselines and the bucket opened directly.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let (client, js) = runtime.block_on(async {
        let client = async_nats::connect(&url).await.expect("connect");
        // Raw request/reply: the client answers its own small requests with 2 KiB.
        let mut asked = client.subscribe("bench.records.get").await.expect("sub");
        let answering = client.clone();
        let answer = value.clone();
        tokio::spawn(async move {
            while let Some(request) = asked.next().await {
                let reply = request.reply.expect("a request");
                answering
                    .publish(reply, answer.clone())
                    .await
                    .expect("answer");
            }
        });
        mesh_bus::nats::round_trip(&client).await.expect("sync");
        let js = async_nats::jetstream::new(client.clone());
        js.create_stream(async_nats::jetstream::stream::Config {
            name: "BENCH_RECORDS".into(),
            subjects: vec!["bench.records.put".into()],
            storage: async_nats::jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await
        .expect("a plain stream");
        (client, js)
    });

    // The records, as the controller opens them (this makes the bucket).
    let records = KvRecords::open(&NatsOptions::new(&url)).unwrap_or_else(|e| panic!("{e}"));
    let store = runtime
        .block_on(js.get_key_value(RECORDS_BUCKET))
        .expect("the bucket, opened directly");
    records.put(KEY, &value).expect("put");

    // A one-worker runtime of our own with its own connection, as `KvRecords` has, entered
    // with `block_on` from the calling thread (no thread spawned).
    let hop = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let hop_store = hop.block_on(async {
        let client = async_nats::connect(&url).await.expect("connect");
        async_nats::jetstream::new(client)
            .get_key_value(RECORDS_BUCKET)
            .await
            .expect("the bucket")
    });

    let request = bytes::Bytes::from_static(KEY.as_bytes());
    let raw_request = || client.request("bench.records.get", request.clone());
    let raw_publish = || async {
        js.publish("bench.records.put", value.clone())
            .await
            .expect("publish")
            .await
            .expect("ack")
    };
    // The bucket's own key of the record (`KvRecords` keeps `KEY` there).
    let raw_key = bucket_key(KEY);
    let direct_get = || async { store.get(&raw_key).await.expect("get").expect("there") };
    let direct_put = || async { store.put(&raw_key, value.clone()).await.expect("put") };

    for _ in 0..WARM_UP {
        runtime.block_on(raw_request()).expect("answer");
        runtime.block_on(raw_publish());
        runtime.block_on(direct_get());
        runtime.block_on(direct_put());
        hop.block_on(hop_store.get(&raw_key)).expect("get");
        records.get(KEY).expect("get");
        records.put(KEY, &value).expect("put");
    }

    let mut samples = Samples::default();
    let start = Instant::now();
    for _ in 0..BLOCKS {
        for sample in timed_async(&runtime, raw_request) {
            samples.raw_request.push(sample);
        }
        for _ in 0..PER_BLOCK {
            samples
                .records_get
                .push(timed(|| records.get(KEY).expect("get").expect("there")));
        }
        samples.direct_get.extend(timed_async(&runtime, direct_get));
        for _ in 0..PER_BLOCK {
            samples.hop_get.push(timed(|| {
                hop.block_on(hop_store.get(&raw_key)).expect("get")
            }));
        }
        for _ in 0..PER_BLOCK {
            samples.scoped_hop_get.push(timed(|| {
                std::thread::scope(|scope| {
                    scope
                        .spawn(|| hop.block_on(hop_store.get(&raw_key)).expect("get"))
                        .join()
                        .expect("joined")
                })
            }));
        }
        for _ in 0..PER_BLOCK {
            samples.scoped_thread.push(timed(|| {
                std::thread::scope(|scope| scope.spawn(|| 1).join().expect("joined"))
            }));
        }
        samples
            .raw_publish
            .extend(timed_async(&runtime, raw_publish));
        for _ in 0..PER_BLOCK {
            samples
                .records_put
                .push(timed(|| records.put(KEY, &value).expect("put")));
        }
        samples.direct_put.extend(timed_async(&runtime, direct_put));
    }
    let calls_took = start.elapsed();

    let raw_request = summarize(samples.raw_request);
    let records_get = summarize(samples.records_get);
    let direct_get = summarize(samples.direct_get);
    let hop_get = summarize(samples.hop_get);
    let scoped_hop_get = summarize(samples.scoped_hop_get);
    let scoped_thread = summarize(samples.scoped_thread);
    let raw_publish = summarize(samples.raw_publish);
    let direct_put = summarize(samples.direct_put);
    let records_put = summarize(samples.records_put);
    let n = BLOCKS * PER_BLOCK;
    println!(
        "records on a loopback nats-server, {RECORD}-byte records, {n} calls of each way \
         in {BLOCKS} alternating blocks ({calls_took:.1?})"
    );
    println!("1. get");
    show("raw request/reply (2 KiB answer)", raw_request);
    show("KvRecords::get", records_get);
    println!(
        "  ratio KvRecords::get / raw request (p50): {:.2}×  (p90: {:.2}×)",
        ratio(records_get.p50, raw_request.p50),
        ratio(records_get.p90, raw_request.p90)
    );
    println!("2. put");
    show("raw JetStream publish, acked, plain stream", raw_publish);
    show("KvRecords::put", records_put);
    show("  (kv::Store::put awaited on a runtime)", direct_put);
    println!(
        "  ratio KvRecords::put / raw publish (p50): {:.2}×  (p90: {:.2}×); \
         awaited kv::Store::put / raw publish: {:.2}×",
        ratio(records_put.p50, raw_publish.p50),
        ratio(records_put.p90, raw_publish.p90),
        ratio(direct_put.p50, raw_publish.p50)
    );
    println!("4. per-call overhead");
    show("kv::Store::get awaited on a runtime", direct_get);
    show("  block_on onto a 1-worker runtime, same thread", hop_get);
    show("  a scoped thread spawned and joined, empty", scoped_thread);
    show("  both (KvRecords' first way)", scoped_hop_get);
    show("KvRecords::get", records_get);
    println!(
        "  ratio KvRecords::get / awaited kv::Store::get (p50): {:.2}×  (+{:.1?}; \
         block_on alone {:.2}×)",
        ratio(records_get.p50, direct_get.p50),
        records_get.p50.saturating_sub(direct_get.p50),
        ratio(hop_get.p50, direct_get.p50)
    );
    println!(
        "  the per-call overhead against the raw round trip (p50): {:.2}×",
        ratio(
            records_get.p50.saturating_sub(direct_get.p50),
            raw_request.p50
        )
    );

    // 3. keys_under("settings"): first with no settings at all (the bucket holds the one
    // record above: the listing's fixed cost); then 1,000 keys in this server's bucket and
    // 5,000 in a second server's, listed in turn so drift touches both sizes alike.
    let empty_dir = tempfile::tempdir().expect("a directory");
    let empty_files = DirRecords::new(empty_dir.path());
    let (mut bucket, mut directory) = (Vec::new(), Vec::new());
    for _ in 0..LISTINGS {
        bucket.push(timed(|| records.keys_under("settings").expect("list")));
        directory.push(timed(|| empty_files.keys_under("settings").expect("list")));
    }
    let mut listings = vec![(0, summarize(bucket), summarize(directory))];

    let large_server = NatsServer::start().unwrap_or_else(|error| panic!("{error}"));
    let large_records =
        KvRecords::open(&NatsOptions::new(large_server.url())).unwrap_or_else(|e| panic!("{e}"));
    large_records.put(KEY, &value).expect("put");
    let all_keys = settings_keys(SIZES[2]);
    let mut sized = Vec::new();
    for (size, url, records) in [
        (SIZES[1], url.as_str(), &records),
        (SIZES[2], large_server.url().as_str(), &large_records),
    ] {
        let keys = &all_keys[..size];
        runtime.block_on(fill_bucket(url, keys, &value));
        let dir = tempfile::Builder::new()
            .prefix("mesh-bench-records-")
            .tempdir()
            .expect("a directory");
        write_files(dir.path(), keys, &value);
        let files = DirRecords::new(dir.path());
        assert_eq!(records.keys_under("settings").expect("list").len(), size);
        assert_eq!(files.keys_under("settings").expect("list").len(), size);
        sized.push((size, records, files, dir, Vec::new(), Vec::new()));
    }
    for _ in 0..LISTINGS {
        for (_, records, files, _, bucket, directory) in &mut sized {
            bucket.push(timed(|| records.keys_under("settings").expect("list")));
            directory.push(timed(|| files.keys_under("settings").expect("list")));
        }
    }
    for (size, _, _, _, bucket, directory) in sized {
        listings.push((size, summarize(bucket), summarize(directory)));
    }

    println!(
        "3. keys_under(\"settings\"), {LISTINGS} listings of each \
         ({} settings keys per module)",
        KEYS_PER_MODULE
    );
    for (size, bucket, directory) in &listings {
        show(&format!("KvRecords, {size} settings keys"), *bucket);
        show(&format!("DirRecords, {size} settings keys"), *directory);
        println!(
            "  ratio KvRecords / DirRecords at {size} (p50): {:.2}×",
            ratio(bucket.p50, directory.p50)
        );
    }
    let (empty, small, large) = (&listings[0], &listings[1], &listings[2]);
    println!(
        "  ratio {} / {} keys (p50): KvRecords {:.2}×, DirRecords {:.2}×",
        large.0,
        small.0,
        ratio(large.1.p50, small.1.p50),
        ratio(large.2.p50, small.2.p50)
    );
    let above = |at: &(usize, Summary, Summary), bucket: bool| {
        if bucket {
            at.1.p50.saturating_sub(empty.1.p50)
        } else {
            at.2.p50.saturating_sub(empty.2.p50)
        }
    };
    println!(
        "  the same above the empty listing (p50): KvRecords {:.2}×, DirRecords {:.2}×",
        ratio(above(large, true), above(small, true)),
        ratio(above(large, false), above(small, false))
    );

    drop(large_records);
    drop(records);
    hop.shutdown_background();
    runtime.shutdown_background();
    drop(large_server);
    drop(server);
}

/// Puts `keys` in the records bucket at `url`, 64 in flight.
async fn fill_bucket(url: &str, keys: &[String], value: &bytes::Bytes) {
    let client = async_nats::connect(url).await.expect("connect");
    let store = async_nats::jetstream::new(client)
        .get_key_value(RECORDS_BUCKET)
        .await
        .expect("the bucket");
    let mut puts = futures_util::stream::iter(keys)
        .map(|key| store.put(bucket_key(key), value.clone()))
        .buffer_unordered(64);
    while let Some(put) = puts.next().await {
        put.expect("put");
    }
}
