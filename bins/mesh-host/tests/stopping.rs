//! Stopping always stops: `mesh-host serve` sent SIGTERM exits within the bound its `--help`
//! states whatever the bus is doing — here, gone (its nats-server killed first), which once
//! left the daemon logging "SIGTERM: stopping" and never exiting. A second signal ends it at
//! once. Every wait is on the process's exit, bounded only to fail.

mod daemon;

use daemon::Daemon;
use mesh_model::declaration::Declaration;
use mesh_model::report::MachineState;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::time::Duration;

/// Far above the stated bound: reaching it is the failure, not a timing.
const FAIL_AFTER: Duration = Duration::from_secs(90);

fn signal(daemon: &Daemon, signal: Signal) {
    let pid = daemon.child.as_ref().unwrap().id();
    kill(Pid::from_raw(i32::try_from(pid).unwrap()), signal).unwrap();
}

/// Waits for the daemon's exit; its status, or a panic with the log after [`FAIL_AFTER`].
fn exit_of(daemon: &mut Daemon) -> std::process::ExitStatus {
    let log = daemon.dir.path().join("serve.log");
    let child = daemon.child.as_mut().unwrap();
    let status = mesh_test_support::wait::wait_for("mesh-host serve to exit", FAIL_AFTER, || {
        child.try_wait().unwrap().ok_or_else(|| {
            format!(
                "still running; log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        })
    });
    daemon.child = None;
    status
}

fn serving_with_the_bus_gone(node: &str) -> Daemon {
    let mut daemon = Daemon::new(node);
    daemon.start(&["--containers", "none"]);
    daemon.send(&Declaration::new(node, Vec::new()));
    daemon.wait_for("converged", |report| {
        report.machine == MachineState::Converged
    });
    daemon.server.kill();
    daemon
}

#[test]
fn a_host_whose_bus_is_gone_stops_on_sigterm() {
    let mut daemon = serving_with_the_bus_gone("stopping");
    signal(&daemon, Signal::SIGTERM);
    let status = exit_of(&mut daemon);
    assert_eq!(status.code(), Some(0), "log:\n{}", daemon.log());
}

/// A daemon held in its stop (the fail point [`mesh_host::SERVE_STOPPING`] sleeps there).
fn held_in_its_stop(node: &str, stop_timeout: &str) -> Daemon {
    let mut daemon = Daemon::new(node);
    daemon.serve_args = vec!["--stop-timeout".to_owned(), stop_timeout.to_owned()];
    daemon.env = vec![(
        "FAILPOINTS".to_owned(),
        format!("{}=sleep(600000)", mesh_host::SERVE_STOPPING),
    )];
    daemon.start(&["--containers", "none"]);
    daemon.send(&Declaration::new(node, Vec::new()));
    daemon.wait_for("converged", |report| {
        report.machine == MachineState::Converged
    });
    daemon
}

#[test]
fn a_second_signal_ends_a_stop_that_hangs_at_once() {
    let mut daemon = held_in_its_stop("second-signal", "3600");
    signal(&daemon, Signal::SIGTERM);
    daemon::eventually("the stop is under way", || {
        daemon.log().contains("SIGTERM: stopping")
    });
    signal(&daemon, Signal::SIGTERM);
    let status = exit_of(&mut daemon);
    assert_eq!(status.code(), Some(1), "log:\n{}", daemon.log());
    assert!(
        daemon.log().contains("a second signal: stopping at once"),
        "{}",
        daemon.log()
    );
}

#[test]
fn a_stop_that_hangs_ends_at_its_bound() {
    let mut daemon = held_in_its_stop("bound", "1");
    signal(&daemon, Signal::SIGTERM);
    let status = exit_of(&mut daemon);
    assert_eq!(status.code(), Some(1), "log:\n{}", daemon.log());
    assert!(
        daemon.log().contains("not stopped within the bound"),
        "{}",
        daemon.log()
    );
}
