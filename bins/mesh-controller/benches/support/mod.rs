//! What the benches share: where a bench's home is made, the nodes' names and an inventory of
//! them, the ten modules' repository ([`modules`]), a home's records moved onto a real bus
//! ([`on_bus`]), every node's report in the reports stream ([`fleet_reports`]); and, the
//! tests' own, the simulated hosts ([`simulated`]) and the ten modules ([`ten_modules`]).

// Each bench takes the part it measures with.
#![allow(dead_code)]

pub mod fleet_reports;
pub mod modules;
pub mod on_bus;
#[path = "../../tests/support/simulated.rs"]
pub mod simulated;
#[path = "../../tests/support/ten_modules.rs"]
pub mod ten_modules;

use std::path::{Path, PathBuf};

/// Where a bench's homes are made: `MESH_BENCH_TMP`, else `/dev/shm` (tmpfs: the records'
/// fsyncs on this shared disk swing by 10x from run to run), else the system's.
pub fn scratch() -> PathBuf {
    match std::env::var_os("MESH_BENCH_TMP") {
        Some(dir) => dir.into(),
        None if Path::new("/dev/shm").is_dir() => "/dev/shm".into(),
        None => std::env::temp_dir(),
    }
}

/// The name of node `i`.
pub fn node_name(i: usize) -> String {
    format!("n{i:05}")
}

/// The inventory of `nodes` nodes (the first holds the bus), each assigned every one of
/// `modules`.
pub fn inventory(nodes: usize, modules: &[String]) -> String {
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
    for module in modules {
        inventory.push_str(&format!("{module} = [{everyone}]\n"));
    }
    inventory
}
