//! Every node's latest report read in one pass (`KvRecords::last_per_subject`, one ordered
//! consumer delivering the last message of each subject) against a request a node
//! (`KvRecords::last_message`, what `status` asked before), over the same reports stream on one
//! loopback nats-server started here. Run:
//!
//! ```text
//! cargo bench -p mesh-bus --bench last_reports
//! MESH_BENCH_HOSTS=100000 cargo bench -p mesh-bus --bench last_reports
//! ```
//!
//! Each host has published three reports of about 1 KiB (the last one is read). Rounds
//! alternate the two readings, so drift on this noisy machine touches both alike; the ratio of
//! their medians is what to read, with the pass's own time.

use futures_util::StreamExt as _;
use mesh_bus::records::KvRecords;
use mesh_bus::subjects::{report, REPORTS_STREAM};
use mesh_bus::NatsOptions;
use mesh_test_support::nats_server::NatsServer;
use std::time::{Duration, Instant};

#[path = "support/summary.rs"]
mod summary;
use summary::summarize;

const ROUNDS: usize = 5;

fn main() {
    let hosts: usize = std::env::var("MESH_BENCH_HOSTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    let server = NatsServer::start().unwrap_or_else(|error| panic!("{error}"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let nodes: Vec<String> = (0..hosts).map(|n| format!("n{n:06}")).collect();
    let started = Instant::now();
    runtime.block_on(async {
        let client = async_nats::connect(server.url()).await.expect("connect");
        let js = async_nats::jetstream::new(client);
        mesh_bus::jetstream::ensure_streams(&js)
            .await
            .expect("streams");
        let body = bytes::Bytes::from(vec![b'r'; 1024]);
        for _ in 0..3 {
            let mut acks = futures_util::stream::iter(&nodes)
                .map(|node| {
                    let js = js.clone();
                    let body = body.clone();
                    async move { js.publish(report(node), body).await.expect("publish").await }
                })
                .buffer_unordered(256);
            while let Some(ack) = acks.next().await {
                ack.expect("stored");
            }
        }
    });
    println!(
        "{hosts} hosts, 3 reports each, published in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let records = KvRecords::open(&NatsOptions::new(server.url())).expect("records");
    let (mut pass, mut each) = (Vec::new(), Vec::new());
    for round in 0..=ROUNDS {
        let started = Instant::now();
        let read = records
            .last_per_subject(REPORTS_STREAM, "mesh.report.>")
            .expect("one pass");
        let one_pass = started.elapsed();
        assert_eq!(read.len(), hosts);
        let started = Instant::now();
        for node in &nodes {
            records
                .last_message(REPORTS_STREAM, &report(node))
                .expect("a request")
                .expect("a report");
        }
        let per_node = started.elapsed();
        // The first round warms both up.
        if round > 0 {
            pass.push(one_pass);
            each.push(per_node);
        }
    }
    let (pass, each) = (summarize(pass), summarize(each));
    let secs = |d: Duration| d.as_secs_f64();
    for (what, summary) in [("one pass", pass), ("a request a node", each)] {
        println!(
            "{what}: p50 {:.3} s, p90 {:.3} s, p99 {:.3} s, mean {:.3} s",
            secs(summary.p50),
            secs(summary.p90),
            secs(summary.p99),
            secs(summary.mean)
        );
    }
    println!(
        "one pass ÷ a request a node: {:.2}×",
        secs(pass.p50) / secs(each.p50)
    );
}
