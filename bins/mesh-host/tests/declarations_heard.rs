//! How `mesh-host serve` hears what is sent to it: live on its subject, and as the declarations
//! stream's last one, asked for when it subscribes. A real `mesh-host serve` on a real
//! `nats-server`; the ask held unanswered at a fail point.

mod daemon;

use daemon::Daemon;
use mesh_model::declaration::Declaration;
use mesh_model::report::MachineState;

fn hello(content: &str) -> Declaration {
    Declaration::new("quiet", vec![daemon::app_file("hello", content)])
}

/// The incident behind this test: nats-server 2.9 answers a direct get on a declarations stream
/// not made yet only by its timeout (10 s). A host started before the controller first
/// connected waited that long before it read what was sent meanwhile, and a push's first
/// declaration went unreported past a 10 s timeout. A declaration heard while the ask is
/// unanswered is applied: the ask is for what came before the subscription, and it came after.
#[test]
fn a_declaration_heard_while_the_ask_for_the_last_one_is_unanswered_is_applied() {
    let mut host = Daemon::new("quiet");
    host.env.push((
        "FAILPOINTS".to_owned(),
        format!("{}=return", mesh_host::ASK_UNANSWERED),
    ));
    host.start(&["--containers", "none"]);
    // Subscribed (its log says so before it asks): what is published from here is heard live.
    host.wait_for_log("reading declarations");

    let declaration = hello("hello\n");
    host.send(&declaration);
    let report = host.wait_for("converged on what was sent", |r| {
        r.declaration == declaration.digest() && r.machine != MachineState::MidChange
    });
    assert_eq!(report.machine, MachineState::Converged, "{report:#?}");
    assert_eq!(
        std::fs::read_to_string(host.path("/etc/app/hello")).unwrap(),
        "hello\n"
    );
    assert!(
        host.log().contains("the ask is not needed"),
        "{}",
        host.log()
    );
}
