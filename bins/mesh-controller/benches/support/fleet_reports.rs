//! What the status benches share: a home of N nodes whose records are on a real loopback
//! `nats-server`, and every node's latest report in its reports stream.

use mesh_bus::{subjects, NatsBus, NatsOptions};
use mesh_controller::credentials::BusArgs;
use mesh_controller::home::Home;
use mesh_model::report::{MachineState, Outcome, Report, REPORT_FORMAT};
use mesh_test_support::nats_server::NatsServer;
use std::path::Path;
use std::time::{Duration, Instant};

/// The name of node `i`.
pub fn node_name(i: usize) -> String {
    format!("n{i:05}")
}

/// A home of `nodes` nodes, each assigned one module, its records moved to the bus, the bus
/// running the users it composes; returns the home and the controller's password.
pub fn fleet_home(dir: &Path, server: &NatsServer, nodes: usize) -> (Home, String) {
    let names: Vec<String> = (0..nodes).map(node_name).collect();
    let mut inventory = format!("bus-node = \"{}\"\n\n", names[0]);
    for node in &names {
        inventory.push_str(&format!("[nodes.{node}]\n"));
    }
    inventory.push_str("\n[assignments]\n");
    let everyone = names
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ");
    inventory.push_str(&format!("app = [{everyone}]\n"));
    let root = dir.join("home");
    std::fs::create_dir_all(root.join("catalogue/modules")).unwrap();
    std::fs::write(root.join("inventory.toml"), inventory).unwrap();
    let local = Home::new(&root);
    let users = mesh_controller::users::users_text(
        &local,
        &local.catalogue().unwrap(),
        &BusArgs::default(),
    )
    .unwrap();
    server.reload(&users).unwrap();
    let bus = BusArgs {
        url: server.url(),
        password_file: Some(root.join("bus/passwords/controller")),
        ..BusArgs::default()
    };
    // The reload is asynchronous: wait until the controller is let in (a deadline only bounds
    // a failure).
    let deadline = Instant::now() + Duration::from_secs(30);
    let home = loop {
        match mesh_controller::records::open_home(&root, Some(&bus)) {
            Ok(home) => break home,
            Err(error) if Instant::now() > deadline => panic!("{error:#}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    mesh_controller::records::import(&root, &home, &bus.url).unwrap();
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
        let now = mesh_host::now();
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
                drift: Vec::new(),
                started_at: now,
                finished_at: now,
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

/// Where the bench's home is made: `MESH_BENCH_TMP`, else `/dev/shm`, else the system's.
pub fn scratch() -> std::path::PathBuf {
    match std::env::var_os("MESH_BENCH_TMP") {
        Some(dir) => dir.into(),
        None if Path::new("/dev/shm").is_dir() => "/dev/shm".into(),
        None => std::env::temp_dir(),
    }
}
