//! What the controller pays to send secrets: each node's declaration with its secrets sealed
//! again to that node's age key alone, on the executor's own path
//! ([`mesh_controller::sealed_for_their_nodes`], what `Executor::send_many` does
//! before the fleet takes the declarations): the mesh key read from the home once, each node's
//! key read from its record, the declaration copied and each secret opened with the mesh key
//! and sealed to the node's key.
//!
//! 1,000 nodes, each enrolled with an age key of its own, each sent a declaration whose one
//! file uses one secret. Run with `cargo bench -p mesh-controller --bench secrets_send`
//! (`MESH_BENCH_NODES` changes the count). It prints every number; it checks no bound (the
//! book records them). `cargo test --benches` runs a smoke run of 50 nodes.

use mesh_controller::sealed_for_their_nodes;
use mesh_controller::Home;
use mesh_controller::Result;
use mesh_model::declaration::{Declaration, Outgoing};
use mesh_test_support::sealed::{password_pieces, sealed_file};
use std::time::Instant;

const ROUNDS: usize = 3;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let measured = std::env::args().any(|a| a == "--bench");
    let nodes: usize = std::env::var("MESH_BENCH_NODES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(if measured { 1_000 } else { 50 });
    let dir = tempfile::tempdir().unwrap();
    let home = Home::new(dir.path());
    let secret = mesh_controller::secrets::seal(&home, b"a secret of every node").unwrap();
    let declarations: Vec<Outgoing> = (0..nodes)
        .map(|i| {
            let node = format!("n{i:05}");
            let key = mesh_secrets::Identity::generate().recipient().to_string();
            mesh_controller::secrets::enroll_age_key(&home, &node, &key).unwrap();
            Outgoing::new(Declaration::new(
                &node,
                vec![sealed_file(
                    "db",
                    "creds",
                    "/etc/db/creds",
                    password_pieces(secret.clone()),
                )],
            ))
        })
        .collect();
    let mut times = Vec::new();
    for round in 0..if measured { ROUNDS } else { 1 } {
        let started = Instant::now();
        // Hosts elsewhere: none keeps its state in this process.
        let sealed = sealed_for_their_nodes(&home, &|_| None, &declarations);
        let took = started.elapsed();
        assert!(sealed.iter().all(Result::is_ok));
        times.push(took);
        println!(
            "round {round}: {nodes} nodes' declarations sealed to their own keys: {:.0} ms \
             ({:.2} ms a node)",
            took.as_secs_f64() * 1e3,
            took.as_secs_f64() * 1e3 / nodes as f64
        );
    }
    times.sort();
    let median = times[times.len() / 2];
    println!(
        "the executor's re-encryption before a send, {nodes} nodes (median of {}): {:.0} ms, \
         {:.2} ms a node",
        times.len(),
        median.as_secs_f64() * 1e3,
        median.as_secs_f64() * 1e3 / nodes as f64
    );
}
