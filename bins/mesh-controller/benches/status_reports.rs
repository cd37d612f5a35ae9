//! `status` over a fleet's latest reports (the rule “Every report is heard, from one source”): the
//! controller's [`mesh_controller::status::overview`] over N nodes whose latest reports are in the
//! bus's reports stream (a real loopback `nats-server`, the records in its `mesh-records` bucket),
//! against reading those same reports raw from the stream — one last-message-by-subject read per
//! node, as the overview's own source does — in the same run.
//!
//! `cargo bench -p mesh-controller --bench status_reports`. Knobs (environment):
//! `MESH_BENCH_NODES` (default 10000), `MESH_BENCH_TMP` (where the home is made; default
//! `/dev/shm`). It prints the ratio (target ≤ 3×); nothing is asserted but that the overview
//! saw every node's report.

mod support;

use mesh_bus::{subjects, NatsOptions};
use mesh_test_support::nats_server::NatsServer;
use std::time::Instant;
use support::fleet_reports::{fleet_home, publish_reports};
use support::{node_name, scratch};

const ROUNDS: usize = 3;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let measured = std::env::args().any(|a| a == "--bench");
    let nodes: usize = std::env::var("MESH_BENCH_NODES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(if measured { 10_000 } else { 50 });
    let server = NatsServer::start().expect("nats-server (is it installed?)");
    let dir = tempfile::Builder::new()
        .prefix("mesh-bench-status-")
        .tempdir_in(scratch())
        .unwrap();
    let set_up = Instant::now();
    let (home, password) = fleet_home(dir.path(), &server, nodes);
    publish_reports(&server.url(), &password, nodes);
    println!(
        "status over {nodes} nodes' latest reports: set up in {:.1} s",
        set_up.elapsed().as_secs_f64()
    );
    let raw_reader =
        mesh_bus::records::KvRecords::open(&NatsOptions::for_controller(server.url(), &password))
            .unwrap();
    let names: Vec<String> = (0..nodes).map(node_name).collect();
    let mut ratios = Vec::new();
    for round in 0..ROUNDS {
        let started = Instant::now();
        let mut bytes = 0usize;
        for node in &names {
            let (payload, _) = raw_reader
                .last_message(mesh_bus::subjects::REPORTS_STREAM, &subjects::report(node))
                .unwrap()
                .expect("every node reported");
            bytes += payload.len();
        }
        let raw = started.elapsed();
        let started = Instant::now();
        let overview =
            mesh_controller::status::overview(&home, mesh_store::clock::now(), 3 * 30).unwrap();
        let status = started.elapsed();
        let heard = overview.nodes.iter().filter(|n| n.report.is_some()).count();
        assert_eq!(heard, nodes, "the overview saw every node's report");
        let ratio = status.as_secs_f64() / raw.as_secs_f64();
        println!(
            "  round {round}: raw reads {raw:.2?} ({bytes} bytes); status::overview {status:.2?} = {ratio:.2}x"
        );
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "status::overview / raw reads of the reports stream (median): {:.2}x (target 3.0x)",
        ratios[ratios.len() / 2]
    );
}
