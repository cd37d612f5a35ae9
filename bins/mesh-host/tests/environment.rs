//! Every binary reaches the secure bus: `mesh-host serve` configured as its systemd unit
//! configures it — `MESH_NODE`, `MESH_BUS` and `MESH_BUS_CA` in its environment file, the other
//! options after the subcommand — connects to a TLS bus and reports.

mod daemon;

use daemon::Daemon;
use mesh_model::declaration::Declaration;
use mesh_model::report::MachineState;

#[test]
fn the_host_takes_its_node_and_bus_from_the_environment() {
    let mut host = Daemon::new("from-env");
    host.start_from_the_environment();
    let declaration = Declaration::new("from-env", vec![daemon::app_file("a", "one\n")]);
    host.send(&declaration);
    let heard = host.wait_for("the declaration applied", |report| {
        report.declaration == declaration.digest() && report.machine == MachineState::Converged
    });
    assert_eq!(heard.node, "from-env");
    assert_eq!(
        std::fs::read_to_string(host.path("/etc/app/a")).unwrap(),
        "one\n",
        "applied under the root given after the subcommand"
    );
}
