//! A NATS request/reply round trip, raw (async-nats alone) and through the [`Bus`] trait
//! ([`NatsBus`] asking and answering), on a loopback `nats-server` this benchmark starts.
//!
//! This is the baseline the host benchmark compares with (issue 8: declaration sent → no-op
//! apply → report heard, at most 3× a raw round trip). Run:
//!
//! ```text
//! cargo bench -p mesh-bus --bench round_trip
//! ```
//!
//! It prints p50, p90, p99 and mean for each way, and the ratios bus / raw. Blocks of raw and
//! bus round trips alternate, so drift on the machine touches both alike.

use futures_util::StreamExt;
use mesh_bus::nats_server::NatsServer;
use mesh_bus::{Bus, InProcessBus, NatsBus, NatsOptions};
use std::time::{Duration, Instant};

#[path = "support/summary.rs"]
mod summary;
use summary::{summarize, Summary};

const PAYLOAD: usize = 256;
const WARM_UP: usize = 200;
const BLOCKS: usize = 10;
const PER_BLOCK: usize = 300;
const TIMEOUT: Duration = Duration::from_secs(5);

fn show(name: &str, s: &Summary) {
    println!(
        "{name:<28} p50 {:>9.1?}  p90 {:>9.1?}  p99 {:>9.1?}  mean {:>9.1?}",
        s.p50, s.p90, s.p99, s.mean
    );
}

async fn raw_round_trip(client: &async_nats::Client, payload: &bytes::Bytes) -> Duration {
    let start = Instant::now();
    let answer = client
        .request("bench.raw", payload.clone())
        .await
        .expect("raw answer");
    assert_eq!(answer.payload.len(), PAYLOAD);
    start.elapsed()
}

async fn bus_round_trip(bus: &dyn Bus, subject: &str, payload: &[u8]) -> Duration {
    let start = Instant::now();
    let answer = bus
        .request(subject, payload.to_vec(), TIMEOUT)
        .await
        .expect("bus answer");
    assert_eq!(answer.payload.len(), PAYLOAD);
    start.elapsed()
}

async fn answer_through_the_bus(bus: impl Bus + Clone + 'static, subject: &str) {
    let mut asked = bus.subscribe(subject).await.expect("subscribe");
    tokio::spawn(async move {
        while let Some(request) = asked.next().await {
            let payload = request.payload.clone();
            bus.respond(&request, payload).await.expect("respond");
        }
    });
}

async fn run() {
    let server = NatsServer::start().unwrap_or_else(|error| panic!("{error}"));
    let options = NatsOptions::new(server.url());

    // Raw: async-nats asking, async-nats answering, as its documentation shows.
    let raw_answerer = async_nats::connect(server.url()).await.expect("connect");
    let mut raw_asked = raw_answerer
        .subscribe("bench.raw")
        .await
        .expect("subscribe");
    mesh_bus::nats::round_trip(&raw_answerer)
        .await
        .expect("sync");
    tokio::spawn(async move {
        while let Some(request) = raw_asked.next().await {
            let reply = request.reply.expect("a request");
            raw_answerer
                .publish(reply, request.payload)
                .await
                .expect("answer");
        }
    });
    let raw_asker = async_nats::connect(server.url()).await.expect("connect");

    // Through the trait: NatsBus asking, NatsBus answering.
    answer_through_the_bus(
        NatsBus::connect(&options).await.expect("connect"),
        "bench.bus",
    )
    .await;
    let bus_asker = NatsBus::connect(&options).await.expect("connect");

    // For reference: the in-process bus of the embedded mode.
    let in_process = InProcessBus::new();
    answer_through_the_bus(in_process.clone(), "bench.bus").await;

    let raw_payload = bytes::Bytes::from(vec![7u8; PAYLOAD]);
    let payload = vec![7u8; PAYLOAD];
    for _ in 0..WARM_UP {
        raw_round_trip(&raw_asker, &raw_payload).await;
        bus_round_trip(&bus_asker, "bench.bus", &payload).await;
        bus_round_trip(&in_process, "bench.bus", &payload).await;
    }
    let (mut raw, mut bus, mut local) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..BLOCKS {
        for _ in 0..PER_BLOCK {
            raw.push(raw_round_trip(&raw_asker, &raw_payload).await);
        }
        for _ in 0..PER_BLOCK {
            bus.push(bus_round_trip(&bus_asker, "bench.bus", &payload).await);
        }
        for _ in 0..PER_BLOCK {
            local.push(bus_round_trip(&in_process, "bench.bus", &payload).await);
        }
    }
    let (raw, bus, local) = (summarize(raw), summarize(bus), summarize(local));
    println!(
        "request/reply round trips, {PAYLOAD}-byte payload, {} each, nats-server on loopback",
        BLOCKS * PER_BLOCK
    );
    show("raw async-nats", &raw);
    show("Bus trait over NatsBus", &bus);
    show("Bus trait, in-process", &local);
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "ratio NatsBus / raw: p50 {:.2}x  p90 {:.2}x  mean {:.2}x",
        ratio(bus.p50, raw.p50),
        ratio(bus.p90, raw.p90),
        ratio(bus.mean, raw.mean)
    );
}

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(run());
}
