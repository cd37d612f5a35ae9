//! The status page and `/metrics` over a fleet's records: `GET /`,
//! `GET /?nodes=all` (one page of the list), `GET /metrics` and `GET /status.json` from
//! [`mesh_controller::http::serve`] on loopback, over N nodes whose latest reports are in the
//! reports stream of a real `nats-server` (the records in its bucket) — against what
//! `status --output json` does over the same records, in the same run:
//! [`mesh_controller::status::overview`] and [`Overview::json_document`].
//!
//! `cargo bench -p mesh-controller --bench status_pages`. Knobs (environment):
//! `MESH_BENCH_NODES` (default 10000), `MESH_BENCH_TMP` (where the home is made; default
//! `/dev/shm`). It prints each answer's time and its ratio to the baseline (target ≤ 3×);
//! nothing is asserted but that each answer is whole and names every node it should.
//!
//! [`Overview::json_document`]: mesh_controller::status::Overview::json_document

mod support;

use mesh_controller::http;
use mesh_test_support::nats_server::NatsServer;
use std::io::{Read as _, Write as _};
use std::time::{Duration, Instant};
use support::fleet_reports::{fleet_home, publish_reports};
use support::scratch;

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
        .prefix("mesh-bench-pages-")
        .tempdir_in(scratch())
        .unwrap();
    let set_up = Instant::now();
    let (home, password) = fleet_home(dir.path(), &server, nodes);
    publish_reports(&server.url(), &password, nodes);
    println!(
        "status pages over {nodes} nodes' latest reports: set up in {:.1} s",
        set_up.elapsed().as_secs_f64()
    );

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let bound = runtime
        .block_on(http::bind(&http::Listen {
            addr: "127.0.0.1:0".parse().unwrap(),
            tls: None,
            public: false,
        }))
        .unwrap();
    let addr = bound.local_addr();
    let pages = std::sync::Arc::new(http::Pages::new(home.clone(), 3 * 30));
    runtime.spawn(http::serve(bound, pages, std::future::pending()));

    let targets = ["/", "/?nodes=all", "/metrics", "/status.json"];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); targets.len()];
    for round in 0..ROUNDS {
        let started = Instant::now();
        let now = mesh_store::clock::now();
        let overview = mesh_controller::status::overview(&home, now, 3 * 30).unwrap();
        let verdict = mesh_controller::status::judge(
            &overview,
            now,
            mesh_controller::status::DEFAULT_MID_CHANGE_AFTER_SECS,
        );
        let document = overview.json_document(&verdict).unwrap();
        let baseline = started.elapsed();
        assert_eq!(overview.nodes.len(), nodes);
        print!(
            "  round {round}: status --output json's work {baseline:.2?} ({} bytes)",
            document.len()
        );
        for (at, target) in targets.iter().enumerate() {
            let started = Instant::now();
            let body = get(addr, target);
            let took = started.elapsed();
            match *target {
                "/metrics" => {
                    assert!(body.contains(&format!("mesh_nodes{{state=\"converged\"}} {nodes}\n")))
                }
                "/status.json" => assert_eq!(body.len(), document.len()),
                _ => assert!(body.trim_end().ends_with("</html>"), "not a whole page"),
            }
            let ratio = took.as_secs_f64() / baseline.as_secs_f64();
            print!("; {target} {took:.2?} = {ratio:.2}x");
            ratios[at].push(ratio);
        }
        println!();
    }
    for (target, mut ratios) in targets.iter().zip(ratios) {
        ratios.sort_by(f64::total_cmp);
        println!(
            "GET {target} / status --output json's work (median): {:.2}x (target 3.0x)",
            ratios[ratios.len() / 2]
        );
    }
    // The pages' home goes with the runtime; this one after it (its records' own runtime is
    // not dropped inside another).
    runtime.shutdown_timeout(Duration::from_secs(5));
    drop(home);
}

/// `GET target` from the server at `addr`: the body, once the answer is whole.
fn get(addr: std::net::SocketAddr, target: &str) -> String {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let answer = String::from_utf8(answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{target}: {head}");
    body.to_owned()
}
