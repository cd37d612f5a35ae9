//! `status --watch` on a fleet (issue 13, rule 27): a real TLS-only `nats-server`, real
//! `mesh-host serve` processes. Without a terminal the watch prints a line for each change it
//! sees in the overview, again on every report a host publishes; the embedded default has no
//! bus to hear, and says so with exit 2.

mod support;

use std::io::BufRead as _;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use support::fleet::Bed;

/// A generous bound on a failure, never a pace.
const DEADLINE: Duration = Duration::from_secs(60);

/// The watch process, killed and reaped however the test ends.
struct Watching(Child);

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for a line of the watch that `wanted` accepts; every line read is kept in `seen`.
fn wait_for_line(
    lines: &mpsc::Receiver<String>,
    seen: &mut Vec<String>,
    what: &str,
    wanted: impl Fn(&str) -> bool,
) -> String {
    let until = Instant::now() + DEADLINE;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                seen.push(line.clone());
                if wanted(&line) {
                    return line;
                }
            }
            Err(_) => panic!("never {what}; the watch printed:\n{}", seen.join("\n")),
        }
    }
}

#[test]
fn status_watch_prints_a_line_for_each_node_whose_report_changed_as_hosts_report() {
    let mut bed = Bed::new(&["a"]);
    for node in ["bus", "a"] {
        bed.start_host(node);
    }
    let child = bed
        .command(&["status", "--watch"])
        .env("MESH_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut watching = Watching(child);
    let stdout = watching.0.stdout.take().unwrap();
    let (sender, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    // The first overview names every node; nothing was pushed yet.
    wait_for_line(&lines, &mut seen, "`a` with no report", |l| {
        l.ends_with(" a: no report")
    });
    wait_for_line(&lines, &mut seen, "`bus` with no report", |l| {
        l.ends_with(" bus: no report")
    });

    // A push: each host's report is heard by the watch, which prints the node converged on
    // the declaration sent.
    bed.push_all(30, 0);
    for node in ["bus", "a"] {
        wait_for_line(&lines, &mut seen, &format!("`{node}` converged"), |l| {
            l.contains(&format!(" {node}: converged, declaration sha256:"))
                && l.ends_with("(current)")
        });
    }
    // A line is a change: the heartbeats repeating the same report print nothing more for
    // these nodes until something changes.
    assert_eq!(
        seen.iter().filter(|l| l.contains(" a: converged")).count(),
        1,
        "{seen:#?}"
    );
}

#[test]
fn status_watch_without_a_bus_says_it_needs_one_and_exits_2() {
    let home = tempfile::tempdir().unwrap();
    let controller = |args: &[&str]| {
        std::process::Command::new(support::fleet::controller_binary())
            .arg("--home")
            .arg(home.path())
            .args(args)
            .env_remove("MESH_BUS")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let init = controller(&["init", "--example"]);
    assert!(init.status.success(), "{init:?}");
    let out = controller(&["status", "--watch"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("status --watch hears the reports hosts publish on a fleet's bus"),
        "{stderr}"
    );
}
