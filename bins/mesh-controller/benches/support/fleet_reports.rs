//! What the status benches share: a home of N nodes whose records are on a real loopback
//! `nats-server`, and every node's latest report in its reports stream.

use super::{inventory, node_name, on_bus};
use mesh_bus::{subjects, NatsBus, NatsOptions};
use mesh_controller::Home;
use mesh_model::report::{MachineState, Outcome, Report, REPORT_FORMAT};
use mesh_test_support::nats_server::NatsServer;
use std::path::Path;

/// A home of `nodes` nodes, each assigned one module, its records moved to the bus, the bus
/// running the users it composes; returns the home and the controller's password.
pub fn fleet_home(dir: &Path, server: &NatsServer, nodes: usize) -> (Home, String) {
    let root = dir.join("home");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(
        root.join("inventory.toml"),
        inventory(nodes, &["app".to_owned()]),
    )
    .unwrap();
    let (home, _, _) = on_bus::onto_bus(&root, server.url(), |users| server.reload(users).unwrap());
    let password = std::fs::read_to_string(root.join("bus/passwords/controller")).unwrap();
    (home, password.trim().to_owned())
}

/// One converged report of 30 resources for every node, published on its report subject into
/// the reports stream, and waited for until the stream holds them all.
pub fn publish_reports(url: &str, password: &str, nodes: usize) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let bus = NatsBus::connect(&NatsOptions::for_controller(url, password))
            .await
            .unwrap();
        let js = bus.jetstream();
        mesh_bus::jetstream::ensure_streams(&js).await.unwrap();
        let now = mesh_store::clock::now();
        for i in 0..nodes {
            let node = node_name(i);
            let report = Report {
                format: REPORT_FORMAT,
                node: node.clone(),
                declaration: format!("sha256:{:064x}", i),
                machine: MachineState::Converged,
                resources: (0..30)
                    .map(|r| (format!("app/file/f{r:02}"), Outcome::Unchanged))
                    .collect(),
                undeclared: Default::default(),
                findings: Vec::new(),
                windows: Vec::new(),
                resumed_from_mid_change: false,
                host_failure: None,
                drift: Vec::new(),
                started_at: now,
                finished_at: now,
                send: None,
                published_at: None,
            };
            js.publish(
                subjects::report(&node),
                serde_json::to_vec(&report).unwrap().into(),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        }
    });
}
