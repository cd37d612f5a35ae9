//! What `contrib/` ships, read by the tools that use it. The systemd units in `contrib/systemd`
//! are what an operator installs: each is read by
//! systemd's own verifier (`systemd-analyze verify`) with its binary where `ExecStart` says
//! (the workspace's built binary in its place), each `ExecStart` of a mesh binary is a command
//! line that binary accepts, and every `MESH_*` variable a unit names is one the command it runs
//! reads.

use std::path::{Path, PathBuf};
use std::process::Command;

fn contrib() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../contrib/systemd")
}

/// `target/debug` (or the profile this test was built in): the test runs from its `deps`.
fn built_binaries() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    for binary in ["mesh-host", "mesh-controller", "mesh-collector"] {
        assert!(
            dir.join(binary).is_file(),
            "{} is not built (the test command builds the binaries first)",
            dir.join(binary).display()
        );
    }
    dir
}

fn units() -> Vec<PathBuf> {
    let mut units: Vec<PathBuf> = std::fs::read_dir(contrib())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("service" | "timer" | "path")
            )
        })
        .collect();
    units.sort();
    assert!(units.len() >= 6, "units read: {units:?}");
    units
}

/// A command line split as systemd splits `ExecStart` (words, double quotes grouping).
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    assert!(!quoted, "an unclosed quote in {line:?}");
    if any {
        words.push(word);
    }
    words
}

#[test]
fn words_are_split_as_systemd_splits_them() {
    assert_eq!(
        words(r#"/bin/x collect --stop "systemctl stop r" -v"#),
        ["/bin/x", "collect", "--stop", "systemctl stop r", "-v"]
    );
}

#[test]
fn systemd_reads_every_unit_without_a_complaint() {
    let binaries = built_binaries();
    let dir = tempfile::tempdir().unwrap();
    let mut copies = Vec::new();
    for unit in units() {
        let text = std::fs::read_to_string(&unit).unwrap();
        let text = text.replace("/usr/local/bin/", &format!("{}/", binaries.display()));
        let copy = dir.path().join(unit.file_name().unwrap());
        std::fs::write(&copy, text).unwrap();
        copies.push(copy);
    }
    let output = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .args(&copies)
        .output()
        .expect("systemd-analyze (Debian's systemd package) runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify: {}\n{stderr}",
        output.status
    );
}

#[test]
fn every_exec_start_is_a_command_its_binary_takes_and_every_variable_one_it_reads() {
    let binaries = built_binaries();
    let mut checked = 0;
    for unit in units() {
        let text = std::fs::read_to_string(&unit).unwrap();
        let Some(line) = text.lines().find_map(|l| l.strip_prefix("ExecStart=")) else {
            continue;
        };
        let words = words(line);
        let Some(binary) = words[0].strip_prefix("/usr/local/bin/") else {
            continue;
        };
        // The command line with `--help` after it: an option or subcommand the binary does
        // not have is refused before the help is printed.
        let help = Command::new(binaries.join(binary))
            .args(&words[1..])
            .arg("--help")
            .env_clear()
            .output()
            .unwrap();
        let help_text = String::from_utf8_lossy(&help.stdout);
        assert!(
            help.status.success(),
            "{}: `{line}` is refused: {}",
            unit.display(),
            String::from_utf8_lossy(&help.stderr)
        );
        let mut named: Vec<&str> = text
            .match_indices("MESH_")
            .map(|(at, _)| {
                let rest = &text[at..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_uppercase() || c == '_'))
                    .unwrap_or(rest.len());
                &rest[..end]
            })
            .collect();
        named.sort_unstable();
        named.dedup();
        for variable in named {
            // The log filter is read by the daemons' logging, not by an option.
            if variable == "MESH_LOG" && matches!(binary, "mesh-host" | "mesh-controller") {
                continue;
            }
            assert!(
                help_text.contains(&format!("env: {variable}=")),
                "{} names {variable}, which `{binary} {}` does not read",
                unit.display(),
                words[1..].join(" ")
            );
        }
        checked += 1;
    }
    assert_eq!(
        checked, 3,
        "the host's, the controller's and the collector's units"
    );
}

/// The alert rules in `contrib/prometheus` are read by Prometheus's own checker, and their unit
/// tests pass: routine work (a window within its lapse) pages nobody; a fleet needing attention
/// and a stopped rollout page after their `for`; a controller whose page is gone pages.
#[test]
fn promtool_reads_the_alert_rules_and_their_tests_pass() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contrib/prometheus");
    for args in [
        &["check", "rules", "mesh-alerts.yml"][..],
        &["test", "rules", "mesh-alerts.test.yml"],
    ] {
        let output = Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("promtool (Debian's prometheus package) runs");
        assert!(
            output.status.success(),
            "promtool {args:?}: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
