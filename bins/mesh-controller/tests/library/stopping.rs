//! Stopping always stops: `mesh-controller serve` sent SIGTERM exits within the bound its
//! `--help` states whatever the bus is doing — here, gone (its nats-server killed first). The
//! wait is on the process's exit, bounded only to fail.

use crate::support;
use std::io::BufRead as _;
use std::process::Stdio;
use std::time::Duration;
use support::fleet::{Bed, BedBus};

/// Far above the stated bound: reaching it is the failure, not a timing.
const FAIL_AFTER: Duration = Duration::from_secs(90);

#[test]
fn the_daemon_whose_bus_is_gone_stops_on_sigterm() {
    let bed = Bed::new(&[]);
    let log = bed.home.path().join("serve.log");
    let mut child = bed
        .command(&["serve", "--http", "127.0.0.1:0"])
        .env("MESH_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stdout = std::io::BufReader::new(stdout);
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.starts_with("serving the status page on "), "{line:?}");
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    // In its loop: its merge consumer is on the bus.
    let rt = support::fleet::runtime();
    let bus = bed.controller_bus(&rt);
    support::fleet::wait_for_merge_consumer(&rt, &bus);

    match &mut *bed.server.lock().unwrap() {
        BedBus::Single(server) => server.kill(),
        BedBus::Cluster(_) => unreachable!("one server"),
    }
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = support::wait_for("serve to exit after SIGTERM", FAIL_AFTER, || {
        child.try_wait().unwrap().ok_or_else(|| {
            format!(
                "still running; log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        })
    });
    assert_eq!(
        status.code(),
        Some(0),
        "log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

// A daemon stopped on purpose does not page: `mesh-controller serve` sent SIGTERM publishes a
// last heartbeat saying it stopped, and when; `status` names it stopped at that time (the
// machine's own time in text, RFC 3339 in JSON), never silent, and with no open plan waiting on
// it nothing needs a person.
#[test]
fn a_daemon_stopped_by_sigterm_is_shown_stopped_never_silent() {
    // A settled fleet: each node sent what it should hold, and converged.
    let mut bed = Bed::new(&["a"]);
    bed.start_host("bus");
    bed.start_host("a");
    bed.expect(&["push", "bus", "a"], 0);
    let log = bed.home.path().join("serve.log");
    /// Killed if the test fails before it stops the daemon itself.
    struct Daemon(std::process::Child);
    impl Drop for Daemon {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut daemon = Daemon(
        bed.command(&["serve", "--heartbeat", "1"])
            .env("MESH_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let child = &mut daemon.0;
    // In its loop, and beating: its merge consumer is on the bus, and `status` shows it running.
    let rt = support::fleet::runtime();
    let bus = bed.controller_bus(&rt);
    support::fleet::wait_for_merge_consumer(&rt, &bus);
    let status_json = || {
        let out = bed
            .command(&["status", "--output", "json"])
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(&out.stderr)))
    };
    support::wait_for("the daemon's first heartbeat", FAIL_AFTER, || {
        let status = status_json();
        if status["daemon"].is_object() {
            Ok(status)
        } else {
            Err(format!("no heartbeat yet: {status}"))
        }
    });

    let sent = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let exited = support::wait_for("serve to exit after SIGTERM", FAIL_AFTER, || {
        child
            .try_wait()
            .unwrap()
            .ok_or_else(|| "still running".to_owned())
    });
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(exited.code(), Some(0), "log:\n{said}");
    // Its last heartbeat, published before it exited, says it stopped.
    let status = status_json();
    let stopped_at = status["daemon"]["stopped-at"]
        .as_str()
        .unwrap_or_else(|| panic!("no stopped-at: {status}\nlog:\n{said}"));
    assert!(
        stopped_at.ends_with('Z') && stopped_at.contains('T'),
        "{stopped_at}"
    );
    assert_eq!(status["daemon"]["silent"], false, "{status}");

    // In text, in the machine's own time (here a zone with an offset of its own), exit 0.
    let out = bed
        .command(&["status"])
        .env("TZ", "Asia/Kolkata")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}\n{stderr}");
    let line = text
        .lines()
        .find(|line| line.starts_with("daemon: "))
        .unwrap_or_else(|| panic!("no daemon line:\n{text}"));
    assert!(line.contains(" stopped at 20"), "{line}");
    assert!(
        line.contains("+05:30"),
        "not in the machine's own time: {line}"
    );
    assert!(!text.to_lowercase().contains("silent"), "{text}");
}
