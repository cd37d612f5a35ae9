//! The truth while an apply runs (the rule “Mid-change is said before anything changes”): a real
//! `mesh-host serve` on a real `nats-server`, a together group whose second member is held at a
//! fail point while it commits.

mod daemon;

use daemon::{wait_for_file, Daemon};
use mesh_model::declaration::{Declaration, Resource};
use mesh_model::report::MachineState;
use std::time::Instant;

fn file(name: &str, content: &str, together: Option<&str>) -> Resource {
    Resource {
        together: together.map(str::to_owned),
        ..daemon::app_file(name, content)
    }
}

#[test]
fn an_observer_sees_mid_change_never_the_old_report_while_a_together_group_commits() {
    let mut host = Daemon::new("slow");
    let release = host.dir.path().join("release");
    host.env.push((
        "FAILPOINTS".to_owned(),
        mesh_apply::progress::pause_at("commit", "app/file/b", &release),
    ));
    host.start(&["--containers", "none"]);

    let first = Declaration::new(
        "slow",
        vec![file("a", "one\n", None), file("b", "one\n", None)],
    );
    host.send(&first);
    let converged = host.wait_for("converged on the first declaration", |r| {
        r.declaration == first.digest() && r.machine == MachineState::Converged
    });
    assert_eq!(converged.machine, MachineState::Converged);

    let second = Declaration::new(
        "slow",
        vec![
            file("a", "two\n", Some("pair")),
            file("b", "two\n", Some("pair")),
        ],
    );
    host.send(&second);
    // Every report from here until the paused commit is released: mid-change of the second.
    let reached = mesh_apply::progress::reached_marker(&release);
    let mut heard_while_paused = 0;
    let until = Instant::now() + daemon::DEADLINE;
    loop {
        let report = host
            .next_report(until)
            .unwrap_or_else(|| panic!("no report while paused\n{}", host.log()));
        if report.declaration == first.digest() {
            // The last heartbeat of the first declaration may go out before the second is heard,
            // but never once the apply of the second has reached its commit.
            assert!(
                !reached.exists(),
                "the old report while mid-change: {report:#?}"
            );
            continue;
        }
        assert_eq!(report.declaration, second.digest());
        assert_eq!(report.machine, MachineState::MidChange, "{report:#?}");
        assert!(
            report
                .findings
                .iter()
                .any(|f| f.message.contains(&second.digest())),
            "it names what is applied: {report:#?}"
        );
        if reached.exists() {
            heard_while_paused += 1;
        }
        // The mid-change report, then two heartbeats while the commit waits: heartbeats go on.
        if heard_while_paused == 2 {
            break;
        }
    }
    wait_for_file(&reached);
    assert_eq!(
        std::fs::read_to_string(host.path("/etc/app/a")).unwrap(),
        "two\n",
        "the first member committed"
    );
    std::fs::write(&release, "").unwrap();
    let done = host.wait_for("converged on the second declaration", |r| {
        r.declaration == second.digest() && r.machine != MachineState::MidChange
    });
    assert_eq!(done.machine, MachineState::Converged, "{done:#?}");
    assert_eq!(
        std::fs::read_to_string(host.path("/etc/app/b")).unwrap(),
        "two\n"
    );
}
