//! Drift (the rule “Drift is seen, and reported even when corrected”): a real `mesh-host serve` on
//! a real `nats-server`; managed resources changed by hand are reported at once with what differs,
//! then put back under `drift = "correct"` and left under `drift = "report"`. A file the mesh does
//! not manage is never touched.

mod daemon;

use daemon::{eventually, Daemon};
use mesh_model::declaration::{Declaration, DirectorySpec, MembershipSpec, Resource, Spec};
use mesh_model::drift::DriftPolicy;
use mesh_model::report::{DriftAction, MachineState, Outcome, Report};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::time::{Duration, Instant};

/// The target: a changed managed file is reported within 5 s.
const REPORTED_WITHIN: Duration = Duration::from_secs(5);

fn file(name: &str, content: &str) -> Resource {
    daemon::app_file(name, content)
}

fn directory() -> Resource {
    Resource {
        id: "app/directory/data".into(),
        module: "app".into(),
        together: None,
        after: Vec::new(),
        spec: Spec::Directory(DirectorySpec {
            path: "/srv/data".into(),
            mode: 0o750,
            owner: "root".into(),
            group: "root".into(),
        }),
    }
}

fn membership() -> Resource {
    Resource {
        id: "app/membership/video".into(),
        module: "app".into(),
        together: None,
        after: Vec::new(),
        spec: Spec::Membership(MembershipSpec {
            account: "alice".into(),
            group: "video".into(),
        }),
    }
}

fn declaration(policy: DriftPolicy) -> Declaration {
    let mut declaration = Declaration::new(
        "drifty",
        vec![file("conf", "managed = true\n"), directory(), membership()],
    );
    if policy == DriftPolicy::Report {
        declaration.drift.insert("app".into(), DriftPolicy::Report);
    }
    declaration
}

/// A daemon that applied `declaration(policy)` and reported it converged; the watch alone finds
/// drift (the reconcile interval is an hour).
fn converged(policy: DriftPolicy) -> (Daemon, Declaration) {
    let mut host = Daemon::new("drifty");
    host.serve_args = vec!["--reconcile".into(), "3600".into()];
    host.start(&["--containers", "none"]);
    let declaration = declaration(policy);
    host.send(&declaration);
    let report = host.wait_for("converged", |r| {
        r.declaration == declaration.digest() && r.machine != MachineState::MidChange
    });
    assert_eq!(report.machine, MachineState::Converged, "{report:#?}");
    // The host watches the declared paths once it has applied: a report after the apply is
    // heard when the watch is up (the log says so).
    eventually("the host watches for drift", || {
        host.log().contains("watching for drift")
    });
    (host, declaration)
}

fn with_drift(report: &Report, resource: &str, field: &str) -> bool {
    report
        .drift
        .iter()
        .any(|d| d.resource == resource && d.field == field)
}

#[test]
fn a_managed_file_overwritten_by_hand_is_reported_within_5_s_and_restored() {
    // /etc/mesh/base.conf overwritten on `control` stayed changed, status said
    // converged.
    let (mut host, declaration) = converged(DriftPolicy::Correct);
    let unmanaged = host.path("/etc/app/notes.txt");
    std::fs::write(&unmanaged, "mine\n").unwrap();
    // Written as an editor does (a new file renamed over it), so no look sees it half-written.
    let temporary = host.path("/etc/app/.conf.swp");
    std::fs::write(&temporary, "managed = false\n").unwrap();
    std::fs::rename(&temporary, host.path("/etc/app/conf")).unwrap();
    let report = host.wait_within(REPORTED_WITHIN, "with the file's drift", |r| {
        with_drift(r, "app/file/conf", "content")
    });
    let drift = report.drift.iter().find(|d| d.field == "content").unwrap();
    assert_eq!(
        drift.was,
        mesh_model::sha256_digest(b"managed = true\n"),
        "{drift:?}"
    );
    assert_eq!(drift.found, mesh_model::sha256_digest(b"managed = false\n"));
    assert_eq!(drift.action, DriftAction::Corrected);
    assert_eq!(report.declaration, declaration.digest());
    assert_eq!(
        report.resources["app/file/conf"],
        Outcome::Applied {
            changed: vec!["content".into()]
        },
        "{report:#?}"
    );
    assert_eq!(
        std::fs::read_to_string(host.path("/etc/app/conf")).unwrap(),
        "managed = true\n"
    );
    assert_eq!(std::fs::read_to_string(&unmanaged).unwrap(), "mine\n");
}

#[test]
fn under_report_a_changed_file_is_reported_and_left_as_found() {
    let (mut host, _) = converged(DriftPolicy::Report);
    let temporary = host.path("/etc/app/.conf.swp");
    std::fs::write(&temporary, "by hand\n").unwrap();
    std::fs::rename(&temporary, host.path("/etc/app/conf")).unwrap();
    let report = host.wait_for("with the file's drift", |r| {
        with_drift(r, "app/file/conf", "content")
    });
    assert_eq!(report.drift[0].action, DriftAction::Left, "{report:#?}");
    assert_eq!(report.machine, MachineState::Partial);
    assert!(matches!(
        &report.resources["app/file/conf"],
        Outcome::HeldStill { step } if step.contains("left as found")
    ));
    // A heartbeat later it is still left, and still said.
    let later = host
        .next_report(Instant::now() + daemon::DEADLINE)
        .expect("a heartbeat");
    assert!(with_drift(&later, "app/file/conf", "content"), "{later:#?}");
    assert_eq!(
        std::fs::read_to_string(host.path("/etc/app/conf")).unwrap(),
        "by hand\n"
    );
}

#[test]
fn a_changed_mode_and_owner_are_reported_and_put_back() {
    let (mut host, _) = converged(DriftPolicy::Correct);
    let conf = host.path("/etc/app/conf");
    std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o600)).unwrap();
    let report = host.wait_for("with the mode's drift", |r| {
        with_drift(r, "app/file/conf", "mode")
    });
    let drift = report.drift.iter().find(|d| d.field == "mode").unwrap();
    assert_eq!((drift.was.as_str(), drift.found.as_str()), ("0644", "0600"));
    eventually("the mode put back", || {
        std::fs::metadata(&conf).unwrap().mode() & 0o7777 == 0o644
    });

    let data = host.path("/srv/data");
    std::os::unix::fs::chown(&data, Some(1000), Some(1000)).unwrap();
    let report = host.wait_for("with the owner's drift", |r| {
        with_drift(r, "app/directory/data", "owner")
    });
    let drift = report.drift.iter().find(|d| d.field == "owner").unwrap();
    assert_eq!(
        (drift.was.as_str(), drift.found.as_str()),
        ("root (0)", "uid 1000")
    );
    assert!(with_drift(&report, "app/directory/data", "group"));
    eventually("the owner put back", || {
        let meta = std::fs::metadata(&data).unwrap();
        (meta.uid(), meta.gid()) == (0, 0)
    });
}

#[test]
fn a_membership_removed_by_hand_is_reported_and_added_again() {
    let (mut host, _) = converged(DriftPolicy::Correct);
    let group = host.path("/etc/group");
    let groups = std::fs::read_to_string(&group).unwrap();
    assert!(groups.contains("video:x:44:alice"), "{groups}");
    std::fs::write(&group, groups.replace("video:x:44:alice", "video:x:44:")).unwrap();
    let report = host.wait_for("with the membership's drift", |r| {
        with_drift(r, "app/membership/video", "membership")
    });
    let drift = report
        .drift
        .iter()
        .find(|d| d.field == "membership")
        .unwrap();
    assert_eq!(drift.found, "alice not in video");
    eventually("the membership added again", || {
        std::fs::read_to_string(&group)
            .unwrap()
            .contains("video:x:44:alice")
    });
}

#[test]
fn a_container_stopped_by_hand_is_reported_with_its_exit_and_started_again() {
    // The rule “A container is applied only when it runs”: the host watches its containers
    // (inspection on the reconcile interval).
    let name = format!("mesh-test-drift-{}", std::process::id());
    let podman = |args: &[&str]| {
        std::process::Command::new("podman")
            .args(args)
            .output()
            .expect("podman runs")
    };
    struct Removed<'a>(&'a str);
    impl Drop for Removed<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("podman")
                .args(["rm", "--force", "--time", "0", self.0])
                .output();
        }
    }
    let _removed = Removed(&name);
    let mut host = Daemon::new("drifty");
    host.serve_args = vec!["--reconcile".into(), "1".into()];
    host.start(&["--containers", "podman", "--podman-stop-timeout", "0"]);
    let image = std::env::var("MESH_TEST_IMAGE")
        .expect("podman is not configured: run `source scripts/podman-env.sh` first");
    let declaration = Declaration::new(
        "drifty",
        vec![Resource {
            id: "app/container/app".into(),
            module: "app".into(),
            together: None,
            after: Vec::new(),
            spec: Spec::Container(Box::new(mesh_model::declaration::ContainerSpec {
                name: name.clone(),
                image,
                command: vec![
                    "sh".into(),
                    "-c".into(),
                    "echo serving; exec sleep 1000".into(),
                ],
                env: Default::default(),
                mounts: Vec::new(),
                restart_on: Vec::new(),
                settle_ms: Some(500),
                health: None,
                ..mesh_model::declaration::ContainerSpec::default()
            })),
        }],
    );
    host.send(&declaration);
    let report = host.wait_for("converged", |r| {
        r.declaration == declaration.digest() && r.machine != MachineState::MidChange
    });
    assert_eq!(report.machine, MachineState::Converged, "{report:#?}");
    let killed = podman(&["kill", &name]);
    assert!(killed.status.success(), "{killed:?}");
    let report = host.wait_for("with the container's drift", |r| {
        with_drift(r, "app/container/app", "running")
    });
    let drift = &report.drift[0];
    assert!(drift.found.contains("exited with code 137"), "{drift:?}");
    assert!(drift.found.contains("serving"), "the log's tail: {drift:?}");
    assert_eq!(drift.action, DriftAction::Corrected);
    assert_eq!(
        report.resources["app/container/app"],
        Outcome::Applied {
            changed: vec!["started".into()]
        }
    );
    let running = podman(&[
        "container",
        "inspect",
        "--format",
        "{{.State.Running}}",
        &name,
    ]);
    assert_eq!(String::from_utf8_lossy(&running.stdout).trim(), "true");
}

#[test]
fn a_window_whose_holder_is_sigkilled_has_its_container_running_again_with_no_declaration() {
    // (the incident behind “A maintenance window holds containers still”): a backup that crashes
    // must not keep the database down until the next push; the daemon converges it within one
    // reconcile interval.
    let name = format!("mesh-test-window-{}", std::process::id());
    struct Removed(String);
    impl Drop for Removed {
        fn drop(&mut self) {
            let _ = std::process::Command::new("podman")
                .args(["rm", "--force", "--time", "0", &self.0])
                .output();
        }
    }
    let _removed = Removed(name.clone());
    let mut host = Daemon::new("drifty");
    host.serve_args = vec!["--reconcile".into(), "1".into()];
    host.start(&["--containers", "podman", "--podman-stop-timeout", "0"]);
    let image = std::env::var("MESH_TEST_IMAGE")
        .expect("podman is not configured: run `source scripts/podman-env.sh` first");
    let declaration = Declaration::new(
        "drifty",
        vec![Resource {
            id: "db/container/db".into(),
            module: "db".into(),
            together: None,
            after: Vec::new(),
            spec: Spec::Container(Box::new(mesh_model::declaration::ContainerSpec {
                name: name.clone(),
                image,
                command: vec!["sleep".into(), "1000".into()],
                env: Default::default(),
                mounts: Vec::new(),
                restart_on: Vec::new(),
                settle_ms: Some(500),
                health: None,
                ..mesh_model::declaration::ContainerSpec::default()
            })),
        }],
    );
    host.send(&declaration);
    let report = host.wait_for("converged", |r| {
        r.declaration == declaration.digest() && r.machine != MachineState::MidChange
    });
    assert_eq!(report.machine, MachineState::Converged, "{report:#?}");
    let started = host.dir.path().join("started");
    let step_pid = host.dir.path().join("step-pid");
    let mut window = std::process::Command::new(env!("CARGO_BIN_EXE_mesh-host"))
        .arg("--root")
        .arg(host.root())
        .arg("--state-dir")
        .arg(host.state_dir())
        .args(["--containers", "podman", "--podman-stop-timeout", "0"])
        .args([
            "window", "run", "--step", "backup", "--hold", &name, "--", "sh", "-c",
        ])
        .arg(format!(
            "echo $$ > {}; touch {}; exec sleep 1000",
            step_pid.display(),
            started.display()
        ))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    eventually("the step started", || started.exists());
    let running = |name: &str| {
        let out = std::process::Command::new("podman")
            .args([
                "container",
                "inspect",
                "--format",
                "{{.State.Running}}",
                name,
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim() == "true"
    };
    assert!(!running(&name), "held still by the window");
    window.kill().unwrap(); // SIGKILL: the window is not released
    window.wait().unwrap();
    let step = std::fs::read_to_string(&step_pid).unwrap();
    let _ = std::process::Command::new("kill")
        .args(["-KILL", step.trim()])
        .status();
    // The window's process is gone (its step killed too, so nothing is left running).
    let report = host.wait_for("the container started again", |r| {
        r.resources.get("db/container/db")
            == Some(&Outcome::Applied {
                changed: vec!["started".into()],
            })
    });
    assert!(
        with_drift(&report, "db/container/db", "running"),
        "{report:#?}"
    );
    assert!(
        report.findings.iter().any(|f| f
            .message
            .contains("the maintenance window for `backup` ended abnormally")),
        "the report says the window ended abnormally: {report:#?}"
    );
    assert!(running(&name));
}
