//! `mesh-host window run` and `window list` against real podman (the rule “A maintenance window
//! holds containers still”: an apply during a backup recreated what the backup had stopped). Needs
//! podman configured as `scripts/podman-env.sh` does; fails, never skips, without it.

use mesh_model::declaration::Declaration;
use mesh_model::report::{Outcome, Report};
use mesh_test_support::podman::*;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

/// A sandbox root and state directory, and a declaration file holding one container.
struct Host {
    _dir: tempfile::TempDir,
    root: PathBuf,
    state: PathBuf,
    declaration: PathBuf,
    scratch: PathBuf,
    container: String,
}

impl Host {
    fn new(names: &mut Containers, what: &str) -> Host {
        podman_config();
        let dir = tempfile::tempdir().unwrap();
        let (root, state) = (dir.path().join("root"), dir.path().join("state"));
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
        std::fs::write(root.join("etc/group"), "root:x:0:\n").unwrap();
        let container = names.name(what);
        let declaration = Declaration::new("box", vec![container_resource(&container)]);
        let file = dir.path().join("declaration.json");
        std::fs::write(&file, declaration.canonical_json()).unwrap();
        let scratch = dir.path().join("scratch");
        std::fs::create_dir_all(&scratch).unwrap();
        Host {
            _dir: dir,
            root,
            state,
            declaration: file,
            scratch,
            container,
        }
    }

    fn command(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mesh-host"));
        command
            .arg("--root")
            .arg(&self.root)
            .arg("--state-dir")
            .arg(&self.state)
            .args(["--podman-stop-timeout", "0"]);
        command
    }

    fn host(&self, args: &[&str]) -> Output {
        self.command().args(args).output().expect("mesh-host runs")
    }

    /// `mesh-host apply`, as JSON.
    fn apply(&self) -> Report {
        let out = self.host(&[
            "--output",
            "json",
            "apply",
            self.declaration.to_str().unwrap(),
        ]);
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
    }

    /// The shell words of a hand-run apply, for a step to run.
    fn apply_words(&self) -> String {
        format!(
            "{} --root {} --state-dir {} --podman-stop-timeout 0 --output json apply {}",
            env!("CARGO_BIN_EXE_mesh-host"),
            self.root.display(),
            self.state.display(),
            self.declaration.display()
        )
    }

    fn running(&self) -> bool {
        status(&self.root, &self.container)
            .expect("the container exists")
            .running
    }

    fn windows(&self) -> Vec<serde_json::Value> {
        let out = self.host(&["--output", "json", "window", "list"]);
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// `window run --step backup --hold CONTAINER -- STEP...`, not started.
    fn window_run_command(&self, step: &[&str]) -> Command {
        let mut command = self.command();
        command
            .args(["window", "run", "--step", "backup", "--hold"])
            .arg(&self.container)
            .arg("--")
            .args(step);
        command
    }

    /// `window run` holding the container while `step` (a command and its arguments) runs.
    fn window_run(&self, step: &[&str]) -> Output {
        self.window_run_command(step)
            .output()
            .expect("mesh-host runs")
    }

    /// `window run` started in the background with `step` (a shell script).
    fn spawn_window(&self, step: &str) -> Child {
        self.window_run_command(&["sh", "-c", step])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Waits until the step has started (it creates `started` in the scratch directory).
    fn wait_for_step(&self, child: &mut Child) {
        let started = self.scratch.join("started");
        while !started.exists() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("window run ended before its step started: {status}");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

fn container_resource(name: &str) -> mesh_model::declaration::Resource {
    container("db", "db", name)
}

fn held_still() -> Outcome {
    Outcome::HeldStill {
        step: "backup".to_owned(),
    }
}

#[test]
fn window_run_holds_its_containers_while_the_step_runs_and_starts_them_after() {
    // The incident behind “A maintenance window holds containers still”: the step itself runs a
    // hand apply, as the daemon would during a backup.
    let mut names = Containers::new();
    let host = Host::new(&mut names, "cli-window-run");
    host.apply();
    assert!(host.running());
    let during = host.scratch.join("during.json");
    let seen = host.scratch.join("seen-running");
    let step = format!(
        // The apply exits 3: the machine is partial while a container is held still.
        "podman container inspect --format '{{{{.State.Running}}}}' {} > {} && {{ {} > {} || [ $? = 3 ]; }}",
        host.container,
        seen.display(),
        host.apply_words(),
        during.display()
    );
    let out = host.window_run(&["sh", "-c", &step]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(std::fs::read_to_string(seen).unwrap().trim(), "false");
    let report: Report = serde_json::from_slice(&std::fs::read(during).unwrap()).unwrap();
    assert_eq!(report.resources["db/container/db"], held_still());
    assert_eq!(report.windows[0].step, "backup");

    assert!(host.running(), "started again after the step");
    assert!(host.windows().is_empty(), "released");
    assert_eq!(
        host.apply().resources["db/container/db"],
        Outcome::Unchanged
    );
}

#[test]
fn a_failing_step_releases_its_window_and_passes_on_its_exit_code() {
    let mut names = Containers::new();
    let host = Host::new(&mut names, "cli-window-fails");
    host.apply();
    let out = host.window_run(&["sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(host.running());
    assert!(host.windows().is_empty());

    let out = host.window_run(&["/nonexistent/backup"]);
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    assert!(host.running());
    assert!(host.windows().is_empty());
}

#[test]
fn sigterm_stops_the_step_and_releases_the_window() {
    let mut names = Containers::new();
    let host = Host::new(&mut names, "cli-window-term");
    host.apply();
    let started = host.scratch.join("started");
    let mut child = host.spawn_window(&format!("touch {}; exec sleep 1000", started.display()));
    host.wait_for_step(&mut child);

    let listed = host.windows();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["state"], "open");
    assert_eq!(listed[0]["step"], "backup");
    let text = String::from_utf8(host.host(&["window", "list"]).stdout).unwrap();
    assert!(text.starts_with("1 open window(s)"), "{text}");
    assert!(text.contains(&host.container), "{text}");
    assert!(!host.running());
    let out = host.host(&["apply", host.declaration.to_str().unwrap()]);
    let report = String::from_utf8(out.stdout).unwrap();
    assert!(
        report.contains("held-still db/container/db: held still by step `backup`"),
        "{report}"
    );
    assert!(
        report.contains(&format!(
            "window open: step `backup` holds {} still",
            host.container
        )),
        "{report}"
    );

    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(128 + 15), "{out:?}");
    assert!(host.running(), "started again");
    assert!(host.windows().is_empty(), "released");
}

#[test]
fn a_window_run_killed_with_sigkill_is_closed_and_the_next_apply_starts_its_containers() {
    let mut names = Containers::new();
    let host = Host::new(&mut names, "cli-window-kill");
    host.apply();
    let started = host.scratch.join("started");
    let step_pid = host.scratch.join("step-pid");
    let mut child = host.spawn_window(&format!(
        "echo $$ > {}; touch {}; exec sleep 1000",
        step_pid.display(),
        started.display()
    ));
    host.wait_for_step(&mut child);
    assert_eq!(host.apply().resources["db/container/db"], held_still());

    child.kill().unwrap(); // SIGKILL: nothing is released
    child.wait().unwrap();
    let step = std::fs::read_to_string(&step_pid).unwrap();
    let _ = Command::new("kill").args(["-KILL", step.trim()]).status();
    assert!(!host.running(), "still stopped: nobody started it");
    let listed = host.windows();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["state"], "process-gone");

    let report = host.apply();
    assert_eq!(
        report.resources["db/container/db"],
        Outcome::Applied {
            changed: vec!["started".to_owned()]
        }
    );
    assert!(report.windows.is_empty());
    assert!(host.running());
    assert!(
        host.windows().is_empty(),
        "the closed window's record is cleared"
    );
}

#[test]
fn window_help_explains_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_mesh-host"))
        .args(["window", "run", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for words in ["held-still", "six hours", "--step", "--hold", "SIGTERM"] {
        assert!(text.contains(words), "`{words}` not in:\n{text}");
    }
}
