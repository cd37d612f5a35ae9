//! `status --watch` on a fleet (the rule “Every report is heard, from one source”): a real TLS-only
//! `nats-server`, real `mesh-host serve` processes. Without a terminal the watch prints a line for
//! each change it sees in the overview, again on every report a host publishes; on a terminal (a
//! real one, made by `script`) it redraws the whole status on each; the embedded default has no bus
//! to hear, and says so with exit 2.

use crate::support;
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
    // The two hosts report in either order: a line already seen for one while waiting for
    // the other counts.
    for node in ["bus", "a"] {
        let converged = |l: &str| {
            l.contains(&format!(" {node}: converged, declaration sha256:"))
                && l.ends_with("(current)")
        };
        if !seen.iter().any(|l| converged(l)) {
            wait_for_line(&lines, &mut seen, &format!("`{node}` converged"), converged);
        }
    }
    // A line is a change: the heartbeats repeating the same report print nothing more for
    // these nodes until something changes.
    assert_eq!(
        seen.iter().filter(|l| l.contains(" a: converged")).count(),
        1,
        "{seen:#?}"
    );
    // Each line starts with the time it was seen, as a person reads it (RFC 3339, UTC), not
    // seconds since the epoch.
    for line in &seen {
        let time = line.split(' ').next().unwrap_or_default();
        let shape: String = time
            .chars()
            .map(|c| if c.is_ascii_digit() { '9' } else { c })
            .collect();
        assert_eq!(shape, "9999-99-99T99:99:99Z", "{line}");
    }
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

/// The watch under a real terminal (`script`, util-linux), its whole process group killed
/// however the test ends (`script` and the watch it runs).
struct OnTerminal(Child);

impl Drop for OnTerminal {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &group])
            .status();
        let _ = self.0.wait();
    }
}

/// `text` quoted for `sh`.
fn quoted(text: &std::ffi::OsStr) -> String {
    format!("'{}'", text.to_string_lossy().replace('\'', r"'\''"))
}

#[test]
fn on_a_terminal_status_watch_redraws_the_whole_status_on_every_change() {
    use std::io::Read as _;
    use std::os::unix::process::CommandExt as _;
    let mut bed = Bed::new(&["a"]);
    for node in ["bus", "a"] {
        bed.start_host(node);
    }
    let watch = bed.command(&["status", "--watch"]);
    let line = std::iter::once(watch.get_program())
        .chain(watch.get_args())
        .map(quoted)
        .collect::<Vec<_>>()
        .join(" ");
    let mut script = std::process::Command::new("script");
    script.args(["-qfec", &line, "/dev/null"]);
    // The bed's command removes what the environment would otherwise give the controller;
    // `script` passes its environment on.
    for (key, value) in watch.get_envs() {
        match value {
            Some(value) => script.env(key, value),
            None => script.env_remove(key),
        };
    }
    let child = script
        .env("MESH_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut terminal = OnTerminal(child);
    let mut stdout = terminal.0.stdout.take().unwrap();
    let screen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let writer = std::sync::Arc::clone(&screen);
    std::thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        while let Ok(read @ 1..) = stdout.read(&mut buffer) {
            writer.lock().unwrap().extend_from_slice(&buffer[..read]);
        }
    });
    // Each frame: the cursor home, the screen cleared, the status as `status` prints it.
    const CLEAR: &str = "\x1b[H\x1b[2J";
    let frames = || -> Vec<String> {
        let text = String::from_utf8_lossy(&screen.lock().unwrap()).into_owned();
        text.split(CLEAR)
            .skip(1)
            .map(|frame| frame.replace("\r\n", "\n"))
            .collect()
    };
    let shows = |frame: &str, node: &str, state: &str| {
        frame
            .lines()
            .any(|line| line.starts_with(&format!("{node}: {state}")))
    };
    let first = support::wait_for("a first frame naming every node", DEADLINE, || {
        frames()
            .into_iter()
            .find(|f| shows(f, "a", "never sent") && shows(f, "bus (bus)", "never sent"))
            .ok_or_else(|| format!("{:?}", frames()))
    });
    assert!(!first.contains("converged"), "{first}");
    // A push: the reports heard redraw the screen, the whole status each time, until a frame
    // shows both nodes converged.
    bed.push_all(30, 0);
    let last = support::wait_for("a frame with both nodes converged", DEADLINE, || {
        frames()
            .into_iter()
            .rev()
            .find(|f| shows(f, "a", "converged") && shows(f, "bus (bus)", "converged"))
            .ok_or_else(|| format!("{:?}", frames().last()))
    });
    // A redraw is the whole status, not a line added: it still ends with the plans.
    assert!(last.contains("plans: "), "{last}");
    assert!(!last.contains("never sent"), "{last}");
}
