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
