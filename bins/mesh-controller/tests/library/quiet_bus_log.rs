//! A quiet bus log: the controller's own permission checks after a change of the users (a node
//! enrolled, its grants proven before code is sent) leave no `[ERR]` or `[WRN]` line in
//! nats-server's log, so an operator can take every error there as one.

use crate::support;
use support::fleet::{Bed, BedBus};

#[test]
fn a_users_reload_and_its_permission_checks_leave_no_error_in_the_servers_log() {
    let mut bed = Bed::new(&["a"]);
    bed.start_host("bus");
    bed.start_host("a");
    let server_log = || match &*bed.server.lock().unwrap() {
        BedBus::Single(server) => server.log(),
        BedBus::Cluster(_) => unreachable!("one server"),
    };
    // What the test bed itself did to start (a key it does not know refused, to know the users
    // in force) is before this.
    let before = server_log().len();
    // The first push writes the users with the grants of the modules assigned, the server
    // reloads them, and the controller proves every node's permissions in force before it sends.
    bed.expect(&["push", "bus", "a"], 0);
    // A second change, from users the bus confirmed: `agent`'s state bucket granted to the bus
    // node too, proven in force against the users it replaces.
    let inventory = bed.record("inventory.toml").unwrap();
    let inventory: String = inventory
        .lines()
        .map(|line| {
            if line.starts_with("agent = ") {
                "agent = [\"a\", \"bus\"]\n".to_owned()
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    bed.put_inventory(&inventory);
    bed.expect(&["push", "bus", "a"], 0);
    let log = server_log()[before..].to_owned();
    assert!(
        log.matches("Reloaded").count() >= 2,
        "not two users reloads in the log:\n{log}"
    );
    let complaints: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("[ERR]") || line.contains("[WRN]"))
        .collect();
    assert!(
        complaints.is_empty(),
        "the server's log holds {} complaint(s):\n{}",
        complaints.len(),
        complaints.join("\n")
    );
}
