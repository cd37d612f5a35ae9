//! `mesh-controller serve` started by a test, and the plans it makes from a catalogue
//! repository's commits.

use super::fleet::{Bed, BASE_MODULE};
use super::{wait_for, Repo};
use std::io::BufRead as _;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

/// The daemon, killed if the test fails before it ends; where it keeps a log, read for a
/// failure's message.
pub struct Daemon {
    child: Child,
    log: Option<PathBuf>,
}

impl Daemon {
    /// Starts `serve` with `flags`, logging at `info` into `serve.log` beside the home's
    /// records (appended to, so a daemon started again after a kill adds to the same log).
    pub fn logged(bed: &Bed, flags: &[&str]) -> Daemon {
        let log = bed.home.path().join("serve.log");
        let mut args = vec!["serve"];
        args.extend_from_slice(flags);
        let child = bed
            .command(&args)
            .env("MESH_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .unwrap(),
            )
            .spawn()
            .unwrap();
        Daemon {
            child,
            log: Some(log),
        }
    }

    /// Its whole log; empty when it keeps none.
    pub fn log(&self) -> String {
        self.log
            .as_ref()
            .and_then(|log| std::fs::read_to_string(log).ok())
            .unwrap_or_default()
    }

    /// The last `lines` lines of its log.
    pub fn tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Kills it (SIGKILL) and waits for it to end.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops it as its service manager does: SIGTERM, and it exits 0.
    pub fn stop(mut self) {
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        assert_eq!(self.child.wait().unwrap().code(), Some(0), "{}", self.log());
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `serve` with `flags`; returns it and the lines it printed before `ready` said it
/// had printed enough (`ready` is asked after each line).
pub fn start_serve(
    bed: &Bed,
    flags: &[&str],
    ready: impl Fn(&[String]) -> bool,
) -> (Daemon, Vec<String>) {
    let mut args = vec!["serve"];
    args.extend_from_slice(flags);
    let mut child = bed
        .command(&args)
        .env("MESH_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let daemon = Daemon { child, log: None };
    let mut stdout = std::io::BufReader::new(stdout);
    let mut lines = Vec::new();
    while !ready(&lines) {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "serve ended after {lines:?}"
        );
        lines.push(line.trim().to_owned());
    }
    // Whatever else it prints is read, so it is never told its standard output went away.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    (daemon, lines)
}

/// A repository holding `base`, its file saying `hello`; the commit.
pub fn commit_base(repo: &Repo, hello: &str) -> String {
    repo.write(&[
        ("modules/base/module.toml", BASE_MODULE),
        ("modules/base/files/hello", hello),
    ]);
    repo.git(&["add", "."]);
    repo.git(&["commit", "-qm", hello.trim()]);
    repo.git(&["rev-parse", "HEAD"])
}

/// The plans, as `plans --output json` lists them (read through the library).
pub fn plans(bed: &Bed) -> Vec<serde_json::Value> {
    serde_json::from_value(bed.library().plans()).unwrap()
}

/// Waits until a plan of `commit` is done; returns every plan then.
pub fn wait_for_plan_done(bed: &Bed, commit: &str) -> Vec<serde_json::Value> {
    wait_for(
        &format!("a plan of {commit} done"),
        Duration::from_secs(120),
        || {
            let plans = plans(bed);
            let state = plans
                .iter()
                .find(|p| p["commit"] == commit)
                .map(|p| p["state"]["state"].clone());
            match state {
                Some(state) if state == "done" => Ok(plans),
                state => Err(format!("its plan is {state:?}: {plans:?}")),
            }
        },
    )
}
