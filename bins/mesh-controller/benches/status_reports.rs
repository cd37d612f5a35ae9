//! `status` over a fleet's latest reports (issue 13, rule 27): the controller's
//! [`mesh_controller::status::overview`] over N nodes whose latest reports are in the bus's
//! reports stream (a real loopback `nats-server`, the records in its `mesh-records` bucket),
//! against reading those same reports raw from the stream — one last-message-by-subject read
//! per node, as the overview's own source does — in the same run.
//!
//! `cargo bench -p mesh-controller --bench status_reports`. Knobs (environment):
//! `MESH_BENCH_NODES` (default 10000), `MESH_BENCH_TMP` (where the home is made; default
//! `/dev/shm`). It prints the ratio (target ≤ 3×); nothing is asserted but that the overview
//! saw every node's report.

use mesh_bus::nats_server::NatsServer;
use mesh_bus::{subjects, NatsBus, NatsOptions};
use mesh_controller::fleet::BusArgs;
use mesh_controller::home::Home;
use mesh_model::report::{MachineState, Outcome, Report, REPORT_FORMAT};
use std::path::Path;
use std::time::{Duration, Instant};

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
                .last_message(mesh_bus::jetstream::REPORTS_STREAM, &subjects::report(node))
                .unwrap()
                .expect("every node reported");
            bytes += payload.len();
        }
        let raw = started.elapsed();
        let started = Instant::now();
        let overview = mesh_controller::status::overview(&home, mesh_host::now(), 3 * 30).unwrap();
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

fn node_name(i: usize) -> String {
    format!("n{i:05}")
}

/// A home of `nodes` nodes, each assigned one module, its records moved to the bus, the bus
/// running the users it composes; returns the home and the controller's password.
fn fleet_home(dir: &Path, server: &NatsServer, nodes: usize) -> (Home, String) {
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
    let users = mesh_controller::fleet::users_text(
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
fn publish_reports(url: &str, password: &str, nodes: usize) {
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
fn scratch() -> std::path::PathBuf {
    match std::env::var_os("MESH_BENCH_TMP") {
        Some(dir) => dir.into(),
        None if Path::new("/dev/shm").is_dir() => "/dev/shm".into(),
        None => std::env::temp_dir(),
    }
}
