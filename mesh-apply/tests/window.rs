//! Maintenance windows against real podman (the rule “A maintenance window holds containers still”:
//! an apply during a backup recreated what the backup had stopped).

mod common;
use common::*;
use mesh_apply::window::{self, OpenWindow, ProcessIdentity, WindowError, WindowState, LAPSE_SECS};
use mesh_apply::{apply, ContainerRuntimeChoice, Podman};
use mesh_model::declaration::Resource;
use mesh_model::report::{Outcome, Report};
use mesh_test_support::podman::*;
use std::process::Command;

const T0: u64 = 1_800_000_000;

fn sandbox() -> Sandbox {
    let mut sandbox = Sandbox::new();
    sandbox.config.containers = ContainerRuntimeChoice::Podman(podman_config());
    sandbox
}

fn run(sandbox: &Sandbox, resources: Vec<Resource>, now: u64) -> Report {
    apply(&sandbox.config, &declaration(resources), now).expect("the apply runs")
}

fn podman(sandbox: &Sandbox) -> Podman {
    Podman::new(podman_config(), &sandbox.config.root)
}

fn held_still(step: &str) -> Outcome {
    Outcome::HeldStill {
        step: step.to_owned(),
    }
}

/// A sandbox where an apply at `T0` made and started one container, `db/container/db`, named
/// for `what`; the names remove it when the test ends.
fn a_running_db(what: &str) -> (Sandbox, Containers, String) {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let name = names.name(what);
    run(&sandbox, vec![container("db", "db", &name)], T0);
    (sandbox, names, name)
}

/// Opens a window for `step` at `T0`, holding `containers` for `process`.
fn open_window(
    sandbox: &Sandbox,
    step: &str,
    containers: &[String],
    process: ProcessIdentity,
) -> Result<OpenWindow, WindowError> {
    window::open(
        &sandbox.config.state_dir,
        step,
        containers,
        process,
        T0,
        &podman(sandbox),
    )
}

/// A `backup` window over the container `name`, held by this test's process, opened at `T0`.
fn backup_window_held_by_this_process(sandbox: &Sandbox, name: &str) -> OpenWindow {
    open_window(
        sandbox,
        "backup",
        &[name.to_owned()],
        ProcessIdentity::current().unwrap(),
    )
    .unwrap()
}

fn started() -> Outcome {
    Outcome::Applied {
        changed: vec!["started".to_owned()],
    }
}

#[test]
fn an_apply_inside_a_window_leaves_the_held_container_stopped_and_the_apply_after_starts_it() {
    // The incident behind “A maintenance window holds containers still”.
    let sandbox = sandbox();
    let mut names = Containers::new();
    let name = names.name("window-held");
    let resources = || {
        vec![
            file("db", "conf", "/etc/db.conf", "x"),
            restarting_on(container("db", "db", &name), "db/file/conf"),
        ]
    };
    run(&sandbox, resources(), T0);
    let made = status(&sandbox.config.root, &name).unwrap();

    let opened = open_window(
        &sandbox,
        "nightly-backup",
        std::slice::from_ref(&name),
        ProcessIdentity::current().unwrap(),
    )
    .unwrap();
    assert!(!status(&sandbox.config.root, &name).unwrap().running);

    // Even a change of the file it restarts on does not touch it.
    let during = run(
        &sandbox,
        vec![
            file("db", "conf", "/etc/db.conf", "changed during the backup"),
            restarting_on(container("db", "db", &name), "db/file/conf"),
        ],
        T0 + 60,
    );
    assert_eq!(
        during.resources["db/container/db"],
        held_still("nightly-backup")
    );
    assert_eq!(during.windows.len(), 1);
    assert_eq!(during.windows[0].step, "nightly-backup");
    assert_eq!(during.windows[0].containers, std::slice::from_ref(&name));
    assert_eq!(during.windows[0].opened_at, T0);
    let still = status(&sandbox.config.root, &name).unwrap();
    assert!(!still.running, "left stopped");
    assert_eq!(still.id, made.id, "not recreated");

    // The window ends without starting it (as if its step's process had been cut short): the
    // first apply after it converges the container.
    std::fs::remove_file(opened.path()).unwrap();
    let after = run(&sandbox, resources(), T0 + 120);
    assert_eq!(after.resources["db/container/db"], started());
    assert!(after.windows.is_empty());
    let running = status(&sandbox.config.root, &name).unwrap();
    assert!(running.running);
    assert_eq!(running.id, made.id);
}

#[test]
fn a_window_whose_process_was_killed_is_treated_as_closed() {
    let (sandbox, _names, name) = a_running_db("window-killed");

    let mut holder = Command::new("sleep").arg("1000").spawn().unwrap();
    let identity = ProcessIdentity::of(holder.id()).unwrap().unwrap();
    open_window(&sandbox, "backup", std::slice::from_ref(&name), identity).unwrap();
    let during = run(&sandbox, vec![container("db", "db", &name)], T0 + 1);
    assert_eq!(during.resources["db/container/db"], held_still("backup"));

    // SIGKILL: the process cannot release its window.
    holder.kill().unwrap();
    holder.wait().unwrap();
    let listed = window::list(&sandbox.config.state_dir, T0 + 2).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].state, WindowState::ProcessGone);

    let after = run(&sandbox, vec![container("db", "db", &name)], T0 + 2);
    assert_eq!(after.resources["db/container/db"], started());
    assert!(after.windows.is_empty());
    assert!(
        after.findings.iter().any(|f| f
            .message
            .contains("the maintenance window for `backup` ended abnormally: its process")
            && f.message.contains("is gone without releasing it")
            && f.message.contains(&name)),
        "the report says the window ended abnormally: {:#?}",
        after.findings
    );
    assert!(status(&sandbox.config.root, &name).unwrap().running);
    assert!(
        window::list(&sandbox.config.state_dir, T0 + 3)
            .unwrap()
            .is_empty(),
        "the closed window's record is gone"
    );
}

#[test]
fn a_window_older_than_six_hours_is_treated_as_closed() {
    let (sandbox, _names, name) = a_running_db("window-lapsed");
    let opened = backup_window_held_by_this_process(&sandbox, &name);

    let last_held = run(
        &sandbox,
        vec![container("db", "db", &name)],
        T0 + LAPSE_SECS - 1,
    );
    assert_eq!(last_held.resources["db/container/db"], held_still("backup"));

    let lapsed = run(
        &sandbox,
        vec![container("db", "db", &name)],
        T0 + LAPSE_SECS,
    );
    assert_eq!(lapsed.resources["db/container/db"], started());
    assert!(lapsed.windows.is_empty());
    assert!(
        lapsed.findings.iter().any(|f| f.message.contains(
            "the maintenance window for `backup` ended abnormally: it lapsed 6 h after it opened"
        )),
        "the report says the window lapsed: {:#?}",
        lapsed.findings
    );
    assert!(
        !last_held
            .findings
            .iter()
            .any(|f| f.message.contains("ended abnormally")),
        "{:#?}",
        last_held.findings
    );
    assert!(status(&sandbox.config.root, &name).unwrap().running);
    // Releasing it late is harmless.
    opened.release(&podman(&sandbox)).unwrap();
}

#[test]
fn an_undeclared_container_held_by_a_window_is_removed_only_after_it() {
    let (sandbox, _names, name) = a_running_db("window-undeclared");
    let opened = backup_window_held_by_this_process(&sandbox, &name);

    let during = run(&sandbox, vec![], T0 + 1);
    assert_eq!(during.undeclared["db/container/db"], held_still("backup"));
    assert!(status(&sandbox.config.root, &name).is_some());

    opened.release(&podman(&sandbox)).unwrap();
    let after = run(&sandbox, vec![], T0 + 2);
    assert!(matches!(
        after.undeclared["db/container/db"],
        Outcome::Removed { .. }
    ));
    assert!(status(&sandbox.config.root, &name).is_none());
}

#[test]
fn a_window_cannot_hold_a_container_the_mesh_did_not_make_and_leaves_nothing() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let ours = names.name("window-ours");
    let foreign = names.name("window-foreign");
    run(&sandbox, vec![container("db", "db", &ours)], T0);
    run_foreign(&foreign);

    let error = open_window(
        &sandbox,
        "backup",
        &[ours.clone(), foreign.clone()],
        ProcessIdentity::current().unwrap(),
    )
    .unwrap_err();
    assert!(error.to_string().contains(&foreign), "{error}");
    assert!(
        status(&sandbox.config.root, &ours).unwrap().running,
        "started again"
    );
    assert!(
        status(&sandbox.config.root, &foreign).unwrap().running,
        "untouched"
    );
    assert!(window::list(&sandbox.config.state_dir, T0)
        .unwrap()
        .is_empty());
}
