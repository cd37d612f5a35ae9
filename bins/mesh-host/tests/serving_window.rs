//! Maintenance windows on a serving host (the rule “A maintenance window holds containers
//! still”), with real podman, a real `mesh-host serve` on a real nats-server and a real
//! `mesh-host window run`: a window opened is reported at once with no apply inside it; a
//! declaration during it leaves the held container alone; when the window closes the host
//! applies again by itself and converges the container with no push; and a window past its
//! lapse is no longer repeated by heartbeats. Every wait is on a report (a condition).
//! Needs podman configured as `scripts/podman-env.sh` does; fails, never skips, without it.

mod daemon;

use daemon::Daemon;
use mesh_model::declaration::Declaration;
use mesh_model::report::{MachineState, Outcome};
use mesh_test_support::podman::*;
use std::process::{Command, Stdio};

/// `mesh-host` on the daemon's root and state directory.
fn host_command(host: &Daemon) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mesh-host"));
    command
        .arg("--root")
        .arg(host.root())
        .arg("--state-dir")
        .arg(host.state_dir())
        .args(["--podman-stop-timeout", "0"]);
    command
}

fn held_still() -> Outcome {
    Outcome::HeldStill {
        step: "backup".to_owned(),
    }
}

/// A serving host converged on one container; its name.
fn serving(names: &mut Containers, what: &str) -> (Daemon, String, Declaration) {
    podman_config();
    let name = names.name(what);
    let mut host = Daemon::new("box");
    host.start(&["--containers", "podman", "--podman-stop-timeout", "0"]);
    let v1 = Declaration::new("box", vec![container("db", "db", &name)]);
    host.send(&v1);
    host.wait_for("of the first declaration converged", |r| {
        r.declaration == v1.digest() && r.machine == MachineState::Converged
    });
    (host, name, v1)
}

#[test]
fn a_window_is_reported_at_once_and_what_it_held_converges_by_itself_when_it_closes() {
    let mut names = Containers::new();
    let (mut host, name, v1) = serving(&mut names, "serving-window");

    // A backup holds the container: the serving host says so at once, no apply inside it
    // (the same declaration, and the reconcile interval is five minutes away).
    let started = host.dir.path().join("started");
    let mut window = host_command(&host)
        .args(["window", "run", "--step", "backup", "--hold", &name, "--"])
        .args([
            "sh",
            "-c",
            &format!("touch {}; exec sleep 1000", started.display()),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let report = host.wait_for("naming the window open", |r| {
        r.windows
            .iter()
            .any(|w| w.step == "backup" && w.containers == [name.clone()])
    });
    assert_eq!(report.declaration, v1.digest(), "{report:#?}");
    daemon::wait_for_file(&started);

    // A new declaration during the window changes the container: it is held still.
    let mut changed = container("db", "db", &name);
    spec_mut(&mut changed)
        .env
        .insert("VERSION".to_owned(), "2".to_owned());
    let v2 = Declaration::new("box", vec![changed]);
    host.send(&v2);
    let report = host.wait_for("of the second declaration, held still", |r| {
        r.declaration == v2.digest() && r.machine != MachineState::MidChange
    });
    assert_eq!(
        report.resources["db/container/db"],
        held_still(),
        "{report:#?}"
    );

    // The window closes (SIGTERM: the step is stopped, the container started again as it was,
    // the window released): the host applies again by itself, with no push.
    let term = Command::new("kill")
        .args(["-TERM", &window.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    assert_eq!(window.wait().unwrap().code(), Some(128 + 15));
    let report = host.wait_for("of the second declaration converged", |r| {
        r.declaration == v2.digest() && r.machine == MachineState::Converged
    });
    assert!(report.windows.is_empty(), "{report:#?}");
    assert!(
        matches!(
            &report.resources["db/container/db"],
            Outcome::Applied { .. }
        ),
        "{report:#?}"
    );
    let env = Command::new("podman")
        .args(["container", "inspect", "--format", "{{.Config.Env}}", &name])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&env.stdout).contains("VERSION=2"),
        "{env:?}"
    );
    assert!(status(&host.root(), &name).unwrap().running);
}

#[test]
fn a_window_past_its_lapse_is_no_longer_repeated_by_heartbeats() {
    let mut names = Containers::new();
    let (mut host, name, _) = serving(&mut names, "lapsing-window");

    // A window whose process lives on, recorded as opened a little under six hours ago: it
    // lapses three seconds from now.
    let mut holder = Command::new("sleep").arg("1000").spawn().unwrap();
    let identity = mesh_apply::window::ProcessIdentity::of(holder.id())
        .unwrap()
        .unwrap();
    let now = mesh_store::clock::now();
    let record = mesh_apply::window::WindowFile {
        format: mesh_apply::window::WINDOW_FORMAT,
        step: "backup".into(),
        containers: vec![name.clone()],
        pid: identity.pid,
        process_start: identity.start_time,
        opened_at: now + 3 - mesh_apply::window::LAPSE_SECS,
    };
    let dir = host.state_dir().join("windows");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{}-{}.json", identity.pid, identity.start_time));
    let partial = dir.join(".lapsing.json.tmp");
    std::fs::write(&partial, serde_json::to_vec(&record).unwrap()).unwrap();
    std::fs::rename(&partial, &file).unwrap();
    host.wait_for("naming the window open", |r| {
        r.windows.iter().any(|w| w.step == "backup")
    });

    // Lapsed, it holds nothing: the host applies again and no heartbeat names it after.
    host.wait_for("without the lapsed window", |r| r.windows.is_empty());
    for _ in 0..3 {
        let until = std::time::Instant::now() + daemon::DEADLINE;
        let report = host.next_report(until).expect("a heartbeat");
        assert!(report.windows.is_empty(), "{report:#?}");
    }
    assert!(status(&host.root(), &name).unwrap().running);
    let _ = holder.kill();
    let _ = holder.wait();
}

/// Module `db` of a serving host: its data directory `/srv/db`, its config file holding `conf`,
/// its container `name`, and its job `dump` (as `job_name`), which runs again when the config
/// changes and writes a line to `/srv/db/runs` each time it runs.
fn with_job(name: &str, job_name: &str, conf: &str) -> Declaration {
    use mesh_model::declaration::{DirectorySpec, FileSpec, Mount, Resource, Spec};
    let directory = Resource {
        id: "db/directory/data".into(),
        module: "db".into(),
        together: None,
        after: Vec::new(),
        spec: Spec::Directory(DirectorySpec {
            path: "/srv/db".into(),
            mode: 0o755,
            owner: "root".into(),
            group: "root".into(),
        }),
    };
    let file = Resource {
        id: "db/file/conf".into(),
        module: "db".into(),
        together: None,
        after: Vec::new(),
        spec: Spec::File(FileSpec {
            path: "/etc/db.conf".into(),
            content: Some(conf.to_owned()),
            source: None,
            sealed: None,
            mode: 0o644,
            owner: "root".into(),
            group: "root".into(),
        }),
    };
    let mut dump = job("db", "dump", job_name, "echo ran >> /data/runs");
    let spec = job_mut(&mut dump);
    spec.run.mounts = vec![Mount {
        place: "data".into(),
        source: "/srv/db".into(),
        at: "/data".into(),
        read_only: false,
    }];
    spec.rerun_on = vec!["db/file/conf".into()];
    dump.after = vec!["db/directory/data".into(), "db/file/conf".into()];
    Declaration::new(
        "box",
        vec![directory, file, dump, container("db", "db", name)],
    )
}

/// Issue 41: during a maintenance window holding a module's containers (a backup), the
/// module's job ran and rewrote the data being backed up.
#[test]
fn a_job_whose_input_changed_during_a_window_runs_only_after_the_window_closes() {
    podman_config();
    let mut names = Containers::new();
    let name = names.name("window-job-db");
    let job_name = names.name("window-job-dump");
    let mut host = Daemon::new("box");
    host.start(&["--containers", "podman", "--podman-stop-timeout", "0"]);
    let runs_file = host.path("/srv/db/runs");
    let runs = || std::fs::read_to_string(&runs_file).unwrap_or_default();
    let v1 = with_job(&name, &job_name, "a = 1\n");
    host.send(&v1);
    host.wait_for("of the first declaration converged", |r| {
        r.declaration == v1.digest() && r.machine == MachineState::Converged
    });
    assert_eq!(runs(), "ran\n");

    // A backup holds the module's container.
    let started = host.dir.path().join("started");
    let mut window = host_command(&host)
        .args(["window", "run", "--step", "backup", "--hold", &name, "--"])
        .args([
            "sh",
            "-c",
            &format!("touch {}; exec sleep 1000", started.display()),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    host.wait_for("naming the window open", |r| {
        r.windows.iter().any(|w| w.step == "backup")
    });
    daemon::wait_for_file(&started);

    // The job's input changes during the window: the file is written, the job is held still
    // like the container, and does not run.
    let v2 = with_job(&name, &job_name, "a = 2\n");
    host.send(&v2);
    let report = host.wait_for("of the second declaration, the job held", |r| {
        r.declaration == v2.digest() && r.machine != MachineState::MidChange
    });
    assert_eq!(report.resources["db/job/dump"], held_still(), "{report:#?}");
    assert_eq!(report.resources["db/container/db"], held_still());
    assert!(
        matches!(report.resources["db/file/conf"], Outcome::Applied { .. }),
        "{report:#?}"
    );
    assert_eq!(report.machine, MachineState::Partial);
    assert_eq!(
        std::fs::read_to_string(host.path("/etc/db.conf")).unwrap(),
        "a = 2\n"
    );
    assert_eq!(runs(), "ran\n", "the job ran during the window");

    // The window closes: the host applies again by itself, and the job runs once.
    let term = Command::new("kill")
        .args(["-TERM", &window.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    assert_eq!(window.wait().unwrap().code(), Some(128 + 15));
    let report = host.wait_for("of the second declaration converged", |r| {
        r.declaration == v2.digest() && r.machine == MachineState::Converged
    });
    assert!(
        matches!(report.resources["db/job/dump"], Outcome::Applied { .. }),
        "{report:#?}"
    );
    assert_eq!(runs(), "ran\nran\n");
}
