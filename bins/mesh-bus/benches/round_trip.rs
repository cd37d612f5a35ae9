//! A NATS request/reply round trip, raw (async-nats alone) and through the [`Bus`] trait
//! ([`NatsBus`] asking and answering), on a loopback `nats-server` this benchmark starts.
//!
//! This is the baseline the host benchmark compares with (declaration sent → no-op
//! apply → report heard, at most 3× a raw round trip). Run:
//!
//! ```text
//! cargo bench -p mesh-bus --bench round_trip
//! ```
//!
//! It prints p50, p90, p99 and mean for each way, and the ratios bus / raw. Blocks of raw and
//! bus round trips alternate, so drift on the machine touches both alike. The same two ways run
//! again against a second server serving TLS only (certificates made by the benchmark, the
//! client verifying the server against its CA): the mesh's overhead over raw async-nats over
//! TLS, and TLS's own cost (TLS raw / plain raw), are printed from the same run.

use futures_util::StreamExt;
use mesh_bus::{Bus, BusTls, InProcessBus, NatsBus, NatsOptions};
use mesh_test_support::nats_server::{NatsServer, ServerTls};
use std::time::{Duration, Instant};

use mesh_test_support::pki;
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

/// A raw async-nats connection to `url`, verifying the server against `ca` when given.
async fn raw_connect(url: &str, ca: Option<&std::path::Path>) -> async_nats::Client {
    let mut options = async_nats::ConnectOptions::new();
    if let Some(ca) = ca {
        options = options
            .add_root_certificates(ca.to_owned())
            .require_tls(true);
    }
    options.connect(url).await.expect("connect")
}

/// The raw and the bus asker on a server at `url` (answerers started), as `options` reach it.
async fn askers(
    url: &str,
    ca: Option<&std::path::Path>,
    options: &NatsOptions,
) -> (async_nats::Client, NatsBus) {
    // Raw: async-nats asking, async-nats answering, as its documentation shows.
    let raw_answerer = raw_connect(url, ca).await;
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
    let raw_asker = raw_connect(url, ca).await;

    // Through the trait: NatsBus asking, NatsBus answering.
    answer_through_the_bus(
        NatsBus::connect(options).await.expect("connect"),
        "bench.bus",
    )
    .await;
    let bus_asker = NatsBus::connect(options).await.expect("connect");
    (raw_asker, bus_asker)
}

async fn run() {
    let server = NatsServer::start().unwrap_or_else(|error| panic!("{error}"));
    let options = NatsOptions::new(server.url());
    let (raw_asker, bus_asker) = askers(&server.url(), None, &options).await;

    let pki = pki::TestPki::new("bench");
    let tls_server = NatsServer::start_with_tls(
        "",
        &ServerTls {
            cert_file: pki.server_cert.clone(),
            key_file: pki.server_key.clone(),
            client_ca_file: None,
        },
    )
    .unwrap_or_else(|error| panic!("{error}"));
    let tls_options = NatsOptions::new(tls_server.url()).with_tls(BusTls::with_ca(&pki.ca_file));
    let (tls_raw_asker, tls_bus_asker) =
        askers(&tls_server.url(), Some(&pki.ca_file), &tls_options).await;

    // For reference: the in-process bus of the embedded mode.
    let in_process = InProcessBus::new();
    answer_through_the_bus(in_process.clone(), "bench.bus").await;

    let raw_payload = bytes::Bytes::from(vec![7u8; PAYLOAD]);
    let payload = vec![7u8; PAYLOAD];
    for _ in 0..WARM_UP {
        raw_round_trip(&raw_asker, &raw_payload).await;
        bus_round_trip(&bus_asker, "bench.bus", &payload).await;
        raw_round_trip(&tls_raw_asker, &raw_payload).await;
        bus_round_trip(&tls_bus_asker, "bench.bus", &payload).await;
        bus_round_trip(&in_process, "bench.bus", &payload).await;
    }
    let (mut raw, mut bus, mut local) = (Vec::new(), Vec::new(), Vec::new());
    let (mut tls_raw, mut tls_bus) = (Vec::new(), Vec::new());
    for _ in 0..BLOCKS {
        for _ in 0..PER_BLOCK {
            raw.push(raw_round_trip(&raw_asker, &raw_payload).await);
        }
        for _ in 0..PER_BLOCK {
            bus.push(bus_round_trip(&bus_asker, "bench.bus", &payload).await);
        }
        for _ in 0..PER_BLOCK {
            tls_raw.push(raw_round_trip(&tls_raw_asker, &raw_payload).await);
        }
        for _ in 0..PER_BLOCK {
            tls_bus.push(bus_round_trip(&tls_bus_asker, "bench.bus", &payload).await);
        }
        for _ in 0..PER_BLOCK {
            local.push(bus_round_trip(&in_process, "bench.bus", &payload).await);
        }
    }
    let (raw, bus, local) = (summarize(raw), summarize(bus), summarize(local));
    let (tls_raw, tls_bus) = (summarize(tls_raw), summarize(tls_bus));
    println!(
        "request/reply round trips, {PAYLOAD}-byte payload, {} each, nats-server on loopback",
        BLOCKS * PER_BLOCK
    );
    show("raw async-nats", &raw);
    show("Bus trait over NatsBus", &bus);
    show("raw async-nats, TLS", &tls_raw);
    show("Bus trait over NatsBus, TLS", &tls_bus);
    show("Bus trait, in-process", &local);
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "ratio NatsBus / raw: p50 {:.2}x  p90 {:.2}x  mean {:.2}x",
        ratio(bus.p50, raw.p50),
        ratio(bus.p90, raw.p90),
        ratio(bus.mean, raw.mean)
    );
    println!(
        "ratio NatsBus / raw over TLS: p50 {:.2}x  p90 {:.2}x  mean {:.2}x",
        ratio(tls_bus.p50, tls_raw.p50),
        ratio(tls_bus.p90, tls_raw.p90),
        ratio(tls_bus.mean, tls_raw.mean)
    );
    println!(
        "TLS's own cost, raw TLS / raw plain: p50 {:.2}x  p90 {:.2}x  mean {:.2}x",
        ratio(tls_raw.p50, raw.p50),
        ratio(tls_raw.p90, raw.p90),
        ratio(tls_raw.mean, raw.mean)
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
