//! Containers under real podman (the rule “The host touches only its own containers”). Needs podman
//! configured as `scripts/podman-env.sh` does; fails, never skips, without it.

mod common;
use common::*;
use mesh_apply::{apply, ContainerRuntimeChoice, PodmanConfig, LABEL_MADE_BY, LABEL_RESOURCE};
use mesh_model::declaration::Resource;
use mesh_model::report::{Outcome, Report};
use mesh_test_support::podman::*;
use std::fs;

const T0: u64 = 1_800_000_000;

fn sandbox() -> Sandbox {
    let mut sandbox = Sandbox::new();
    sandbox.config.containers = ContainerRuntimeChoice::Podman(podman_config());
    sandbox
}

fn run(sandbox: &Sandbox, resources: Vec<Resource>) -> Report {
    apply(&sandbox.config, &declaration(resources), T0).expect("the apply runs")
}

fn outcome<'a>(report: &'a Report, id: &str) -> &'a Outcome {
    report
        .resources
        .get(id)
        .or_else(|| report.undeclared.get(id))
        .unwrap_or_else(|| panic!("no outcome for {id} in {report:#?}"))
}

fn applied(changed: &[&str]) -> Outcome {
    Outcome::Applied {
        changed: changed.iter().map(|s| (*s).to_owned()).collect(),
    }
}

fn data_dir(module: &str, name: &str, path: &str) -> Resource {
    directory(module, name, path, 0o755)
}

#[test]
fn a_container_is_created_with_its_labels_and_an_unchanged_spec_leaves_it_running() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let name = names.name("create");
    let resources = || {
        vec![
            data_dir("app", "data", "/srv/app"),
            after(
                with_mount(container("app", "app", &name), "/srv/app", "/data"),
                "app/directory/data",
            ),
        ]
    };

    let first = run(&sandbox, resources());
    assert_eq!(outcome(&first, "app/container/app"), &applied(&["created"]));
    let made = status(&sandbox.config.root, &name).expect("the container exists");
    assert!(made.running);
    assert_eq!(made.labels[LABEL_MADE_BY], "mesh-host");
    assert_eq!(made.labels[LABEL_RESOURCE], "app/container/app");
    assert_eq!(made.labels["io.mesh.module"], "app");
    assert!(made.labels["io.mesh.spec-digest"].starts_with("sha256:"));

    let second = run(&sandbox, resources());
    assert_eq!(outcome(&second, "app/container/app"), &Outcome::Unchanged);
    let after_second = status(&sandbox.config.root, &name).unwrap();
    assert_eq!(after_second.id, made.id, "the same container");
    assert_eq!(after_second.started_at, made.started_at, "not restarted");
    assert_eq!(starts(&made.id), 1);
}

#[test]
fn a_changed_mount_source_recreates_the_container_and_names_the_field() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let name = names.name("recreate");
    let with_source = |source: &str| {
        let c = with_mount(container("media", "media", &name), source, "/media");
        vec![
            data_dir("media", "disk1", "/srv/disk1"),
            data_dir("media", "disk2", "/srv/disk2"),
            after(after(c, "media/directory/disk1"), "media/directory/disk2"),
        ]
    };
    run(&sandbox, with_source("/srv/disk1"));
    let before = status(&sandbox.config.root, &name).unwrap();

    let report = run(&sandbox, with_source("/srv/disk2"));
    assert_eq!(
        outcome(&report, "media/container/media"),
        &applied(&["mounts[/media].source"])
    );
    let now = status(&sandbox.config.root, &name).unwrap();
    assert_ne!(now.id, before.id, "recreated");
    assert!(now.running);
    assert_eq!(
        mount_sources(&name),
        [sandbox.path("/srv/disk2").display().to_string()],
        "the recreated container mounts /srv/disk2 under the root"
    );
}

#[test]
fn changed_command_and_env_keys_are_named() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let name = names.name("fields");
    let mut first = container("app", "app", &name);
    spec_mut(&mut first)
        .env
        .insert("MODE".to_owned(), "one".to_owned());
    run(&sandbox, vec![first.clone()]);

    let mut second = first;
    spec_mut(&mut second).command = vec!["sleep".to_owned(), "2000".to_owned()];
    spec_mut(&mut second)
        .env
        .insert("MODE".to_owned(), "two".to_owned());
    spec_mut(&mut second)
        .env
        .insert("EXTRA".to_owned(), "x".to_owned());
    let report = run(&sandbox, vec![second]);
    assert_eq!(
        outcome(&report, "app/container/app"),
        &applied(&["command", "env.EXTRA", "env.MODE"])
    );
    let labels = status(&sandbox.config.root, &name).unwrap().labels;
    assert!(
        !labels["io.mesh.spec"].contains("two"),
        "env values are not kept in labels: {labels:?}"
    );
}

#[test]
fn a_foreign_container_of_the_same_name_is_reported_and_left_alone() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let name = names.name("foreign");
    let foreign = run_foreign(&name);

    let report = run(&sandbox, vec![container("app", "app", &name)]);
    match outcome(&report, "app/container/app") {
        Outcome::Failed { reason, .. } => {
            assert!(reason.contains(&format!("`{name}`")), "{reason}");
            assert!(reason.contains("the mesh did not make"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let after = status(&sandbox.config.root, &name).unwrap();
    assert_eq!(after.id, foreign, "untouched");
    assert!(after.running);

    // Undeclaring it does not remove it either: the mesh never made it.
    let report = run(&sandbox, vec![]);
    assert!(report.undeclared.is_empty(), "{report:#?}");
    assert_eq!(status(&sandbox.config.root, &name).unwrap().id, foreign);
}

#[test]
fn restart_on_restarts_once_when_its_file_changes_and_not_when_it_does_not() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let name = names.name("restart-on");
    let resources = |content: &str| {
        vec![
            file("web", "conf", "/etc/web.conf", content),
            restarting_on(container("web", "web", &name), "web/file/conf"),
        ]
    };
    run(&sandbox, resources("listen 80\n"));
    let made = status(&sandbox.config.root, &name).unwrap();
    assert_eq!(starts(&made.id), 1);

    let unchanged = run(&sandbox, resources("listen 80\n"));
    assert_eq!(
        outcome(&unchanged, "web/container/web"),
        &Outcome::Unchanged
    );
    assert_eq!(
        starts(&made.id),
        1,
        "no restart when the file did not change"
    );

    let changed = run(&sandbox, resources("listen 8080\n"));
    assert_eq!(outcome(&changed, "web/file/conf"), &applied(&["content"]));
    assert_eq!(
        outcome(&changed, "web/container/web"),
        &applied(&["restarted"])
    );
    let restarted = status(&sandbox.config.root, &name).unwrap();
    assert_eq!(restarted.id, made.id, "restarted, not recreated");
    assert_ne!(restarted.started_at, made.started_at);
    assert_eq!(starts(&made.id), 2, "restarted exactly once");

    run(&sandbox, resources("listen 8080\n"));
    assert_eq!(starts(&made.id), 2, "and not again");
}

#[test]
fn undeclaring_removes_the_container_the_mesh_made_and_never_its_mounts_data() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let name = names.name("undeclare");
    let dir = data_dir("app", "data", "/srv/app");
    let c = after(
        with_mount(container("app", "app", &name), "/srv/app", "/data"),
        "app/directory/data",
    );
    run(&sandbox, vec![dir.clone(), c]);
    sandbox.write("/srv/app/library.db", "precious", 0o644);

    let report = run(&sandbox, vec![dir]);
    match outcome(&report, "app/container/app") {
        Outcome::Removed { detail } => assert!(detail.contains("removed container"), "{detail}"),
        other => panic!("{other:?}"),
    }
    assert!(status(&sandbox.config.root, &name).is_none(), "removed");
    assert_eq!(sandbox.read("/srv/app/library.db"), "precious");

    // Undeclaring the directory too keeps it: it holds data the mesh did not put there.
    run(&sandbox, vec![]);
    assert_eq!(sandbox.read("/srv/app/library.db"), "precious");
}

#[test]
fn a_mount_source_that_is_a_symbolic_link_or_missing_is_refused() {
    // The rule “No symbolic links to move data”: a place is a real directory, never a link.
    let sandbox = sandbox();
    let mut names = Containers::new();
    let linked = names.name("link");
    let missing = names.name("missing");
    fs::create_dir_all(sandbox.path("/srv/real")).unwrap();
    std::os::unix::fs::symlink(sandbox.path("/srv/real"), sandbox.path("/srv/link")).unwrap();

    let report = run(
        &sandbox,
        vec![
            with_mount(container("a", "linked", &linked), "/srv/link", "/data"),
            with_mount(container("b", "missing", &missing), "/srv/nothing", "/data"),
        ],
    );
    match outcome(&report, "a/container/linked") {
        Outcome::Failed { reason, .. } => assert!(reason.contains("symbolic link"), "{reason}"),
        other => panic!("{other:?}"),
    }
    match outcome(&report, "b/container/missing") {
        Outcome::Failed { reason, .. } => assert!(reason.contains("does not exist"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(status(&sandbox.config.root, &linked).is_none());
    assert!(status(&sandbox.config.root, &missing).is_none());
}

#[test]
fn without_podman_a_container_fails_saying_podman_is_not_installed() {
    let mut sandbox = Sandbox::new();
    sandbox.config.containers = ContainerRuntimeChoice::Podman(PodmanConfig {
        program: "/nonexistent/podman".into(),
        ..PodmanConfig::default()
    });
    let report = run(
        &sandbox,
        vec![
            file("web", "conf", "/etc/web.conf", "x"),
            container("web", "web", "mesh-test-no-podman"),
        ],
    );
    assert_eq!(outcome(&report, "web/file/conf"), &applied(&["created"]));
    match outcome(&report, "web/container/web") {
        Outcome::Failed { reason, .. } => assert_eq!(reason, "podman is not installed"),
        other => panic!("{other:?}"),
    }
}

// Two hosts on one machine (the embedded default's nodes, tests) collided
// on container names — one module with a container on nodes `a` and `b` stopped at `b` with
// "the container named `mesh-app-app` was made by the mesh of another host". Each host's names
// now carry the prefix it is given.
#[test]
fn two_hosts_on_one_machine_run_the_same_container_under_their_own_prefixes() {
    let (mut a, mut b) = (sandbox(), sandbox());
    let (prefix_a, prefix_b) = (RunPrefix::new(), RunPrefix::new());
    a.config.container_prefix = prefix_a.0.clone();
    b.config.container_prefix = prefix_b.0.clone();
    let declared = "mesh-app-app";
    for host in [&a, &b] {
        let report = run(host, vec![container("app", "app", declared)]);
        assert_eq!(
            outcome(&report, "app/container/app"),
            &applied(&["created"]),
            "{report:#?}"
        );
    }
    for (host, prefix) in [(&a, &prefix_a), (&b, &prefix_b)] {
        let machine_name = format!("{}{declared}", prefix.0);
        assert_eq!(prefix.containers(), std::slice::from_ref(&machine_name));
        let status = status(&host.config.root, &machine_name).unwrap();
        assert!(status.running);
        assert_eq!(
            status.labels[mesh_apply::LABEL_HOST],
            host.config.root.display().to_string()
        );
    }
    // Applied again, each is unchanged; undeclared, each host removes only its own.
    let report = run(&a, vec![container("app", "app", declared)]);
    assert_eq!(outcome(&report, "app/container/app"), &Outcome::Unchanged);
    let report = run(&a, vec![]);
    assert!(matches!(
        outcome(&report, "app/container/app"),
        Outcome::Removed { .. }
    ));
    assert!(prefix_a.containers().is_empty());
    assert_eq!(prefix_b.containers().len(), 1);
}

#[test]
fn a_container_another_host_made_under_the_same_name_is_reported_and_left_alone() {
    // Several sandboxed hosts share one podman (the embedded mode, tests): each touches only
    // what it made under its own root.
    let (one, other) = (sandbox(), sandbox());
    let mut names = Containers::new();
    let name = names.name("other-host");
    run(&one, vec![container("app", "app", &name)]);
    let made = status(&one.config.root, &name).unwrap();

    let report = run(&other, vec![container("app", "app", &name)]);
    match outcome(&report, "app/container/app") {
        Outcome::Failed { reason, .. } => {
            assert!(reason.contains("another host"), "{reason}");
            assert!(
                reason.contains(&one.config.root.display().to_string()),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    let after = status(&one.config.root, &name).unwrap();
    assert_eq!(after.id, made.id);
    assert!(after.running);
}

#[test]
fn restart_on_a_file_in_a_together_group_waits_for_the_whole_group() {
    // The rule “Resources declared together apply all-or-nothing”: a container restarted for a
    // group is restarted only once the group is whole.
    let sandbox = sandbox();
    let mut names = Containers::new();
    let name = names.name("restart-group");
    let resources = |content: &str, key_owner: &str| {
        vec![
            together(file("tls", "cert", "/etc/tls/cert.pem", content), "keypair"),
            together(
                file_as(
                    "tls",
                    "key",
                    "/etc/tls/key.pem",
                    content,
                    0o600,
                    key_owner,
                    "root",
                ),
                "keypair",
            ),
            restarting_on(container("tls", "proxy", &name), "tls/file/cert"),
        ]
    };
    run(&sandbox, resources("one", "root"));
    let made = status(&sandbox.config.root, &name).unwrap();

    // The group breaks (an owner that does not exist): nothing in it changes, no restart.
    let broken = run(&sandbox, resources("two", "nobody-here"));
    assert!(matches!(
        outcome(&broken, "tls/file/cert"),
        Outcome::Failed { .. }
    ));
    assert_eq!(sandbox.read("/etc/tls/cert.pem"), "one");
    assert_eq!(
        outcome(&broken, "tls/container/proxy"),
        &Outcome::Skipped {
            gated_by: "tls/file/cert".to_owned()
        }
    );
    assert_eq!(starts(&made.id), 1);

    // Whole again (its backoff elapsed): one restart, after both files are in place.
    let whole = apply(
        &sandbox.config,
        &declaration(resources("two", "root")),
        T0 + 3600,
    )
    .unwrap();
    assert_eq!(outcome(&whole, "tls/file/cert"), &applied(&["content"]));
    assert_eq!(
        outcome(&whole, "tls/container/proxy"),
        &applied(&["restarted"])
    );
    assert_eq!(sandbox.read("/etc/tls/key.pem"), "two");
    assert_eq!(starts(&made.id), 2);
}

#[test]
fn a_restart_that_failed_is_owed_and_made_by_a_later_apply_though_its_file_is_unchanged() {
    // The rule “Resources declared together apply all-or-nothing”: the restart a changed
    // `restart_on` file asks for is owed until it is made; a restart judged failed is retried, not
    // forgotten once the file is in place.
    let sandbox = sandbox();
    let mut names = Containers::new();
    let name = names.name("restart-owed");
    fs::create_dir_all(sandbox.path("/srv")).unwrap();
    fs::write(sandbox.path("/srv/ready"), "").unwrap();
    let resources = |content: &str| {
        let mut app = with_mount(
            restarting_on(container("app", "app", &name), "app/file/conf"),
            "/srv",
            "/data",
        );
        spec_mut(&mut app).health = Some(mesh_model::declaration::HealthCheck {
            command: ["sh", "-c", "test -e /data/ready"]
                .map(str::to_owned)
                .to_vec(),
            within_ms: 1000,
        });
        vec![
            data_dir("app", "data", "/srv"),
            file("app", "conf", "/srv/app.conf", content),
            app,
        ]
    };
    let made = run(&sandbox, resources("one"));
    assert_eq!(
        outcome(&made, "app/container/app"),
        &applied(&["created"]),
        "{made:#?}"
    );
    let id = status(&sandbox.config.root, &name).unwrap().id;

    // The file changes; the restart is made but judged unhealthy (`ready` gone).
    fs::remove_file(sandbox.path("/srv/ready")).unwrap();
    let failed = apply(&sandbox.config, &declaration(resources("two")), T0 + 1).unwrap();
    assert_eq!(outcome(&failed, "app/file/conf"), &applied(&["content"]));
    let reason = failed_reason(outcome(&failed, "app/container/app"));
    assert!(reason.contains("sh -c test -e /data/ready"), "{reason}");
    assert_eq!(starts(&id), 2);

    // Healthy again, its backoff elapsed: the file is unchanged, the restart still owed.
    fs::write(sandbox.path("/srv/ready"), "").unwrap();
    let retried = apply(&sandbox.config, &declaration(resources("two")), T0 + 3600).unwrap();
    assert_eq!(outcome(&retried, "app/file/conf"), &Outcome::Unchanged);
    assert_eq!(
        outcome(&retried, "app/container/app"),
        &applied(&["restarted"]),
        "{retried:#?}"
    );
    assert_eq!(status(&sandbox.config.root, &name).unwrap().id, id);
    assert_eq!(starts(&id), 3);

    // Paid: no restart after that.
    let after = apply(&sandbox.config, &declaration(resources("two")), T0 + 3601).unwrap();
    assert_eq!(outcome(&after, "app/container/app"), &Outcome::Unchanged);
    assert_eq!(starts(&id), 3);
}

// ---- judged alive (the rule “A container is applied only when it runs”) ----

/// `container(..)` running `command` instead of `sleep`.
fn running(module: &str, name: &str, machine_name: &str, command: &[&str]) -> Resource {
    let mut resource = container(module, name, machine_name);
    spec_mut(&mut resource).command = command.iter().map(|s| (*s).to_owned()).collect();
    resource
}

fn failed_reason(outcome: &Outcome) -> &str {
    match outcome {
        Outcome::Failed { reason, .. } => reason,
        other => panic!("not failed: {other:?}"),
    }
}

#[test]
fn a_container_whose_command_exits_at_once_is_failed_with_its_exit_code_and_log_tail() {
    // Port 8096 taken, httpd exited at once, and the push said `applied (created)`.
    let sandbox = sandbox();
    let mut names = Containers::new();
    let name = names.name("exits");
    let resources = vec![running(
        "media",
        "media",
        &name,
        &[
            "sh",
            "-c",
            "echo starting; echo 'bind: Address already in use' >&2; exit 3",
        ],
    )];
    let report = run(&sandbox, resources);
    let reason = failed_reason(outcome(&report, "media/container/media"));
    assert!(reason.contains("exited with code 3"), "{reason}");
    assert!(reason.contains("starting"), "{reason}");
    assert!(reason.contains("bind: Address already in use"), "{reason}");
    assert_eq!(report.machine, mesh_model::report::MachineState::Partial);
}

#[test]
fn a_container_whose_health_command_fails_is_failed_and_one_that_passes_is_applied() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let sick = names.name("sick");
    let well = names.name("well");
    let health = |command: &[&str]| mesh_model::declaration::HealthCheck {
        command: command.iter().map(|s| (*s).to_owned()).collect(),
        within_ms: 1000,
    };
    let mut unhealthy = container("app", "sick", &sick);
    spec_mut(&mut unhealthy).health = Some(health(&["sh", "-c", "echo not ready; exit 1"]));
    let mut healthy = container("app", "well", &well);
    spec_mut(&mut healthy).health = Some(health(&["true"]));
    let report = run(&sandbox, vec![unhealthy, healthy]);
    let reason = failed_reason(outcome(&report, "app/container/sick"));
    assert!(
        reason.contains("health command `sh -c echo not ready; exit 1`"),
        "{reason}"
    );
    assert!(reason.contains("not ready"), "{reason}");
    assert_eq!(
        outcome(&report, "app/container/well"),
        &applied(&["created"])
    );
}

/// Issue 41: after a container's health check failed, the host's retry reported it `unchanged`
/// and the node converged, its port dead — "not judged again" was applied to a container that
/// had never passed its judgement. Each apply here is a fresh engine reading the state
/// directory, as a host started again does.
#[test]
fn a_container_whose_judgement_failed_is_judged_again_by_every_retry_until_it_passes() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let name = names.name("judged-again");
    fs::create_dir_all(sandbox.path("/srv")).unwrap();
    let resources = || {
        let mut app = with_mount(container("app", "app", &name), "/srv", "/data");
        spec_mut(&mut app).health = Some(mesh_model::declaration::HealthCheck {
            command: ["sh", "-c", "test -e /data/ready"]
                .map(str::to_owned)
                .to_vec(),
            within_ms: 500,
        });
        vec![data_dir("app", "data", "/srv"), app]
    };
    let judged = |report: &Report, attempt: u32| match outcome(report, "app/container/app") {
        Outcome::Failed {
            reason, attempts, ..
        } => {
            assert!(reason.contains("sh -c test -e /data/ready"), "{reason}");
            assert_eq!(*attempts, attempt, "{report:#?}");
            assert_eq!(report.machine, mesh_model::report::MachineState::Partial);
        }
        other => panic!("attempt {attempt}: not failed: {other:?}"),
    };
    let first = apply(&sandbox.config, &declaration(resources()), T0).unwrap();
    judged(&first, 1);
    let id = status(&sandbox.config.root, &name).unwrap().id;

    // Within its backoff it waits, naming why; each retry after its backoff judges it again
    // and it fails again, with the judgement's reason — never `unchanged`, never converged.
    let waiting = apply(&sandbox.config, &declaration(resources()), T0 + 1).unwrap();
    assert!(
        matches!(
            outcome(&waiting, "app/container/app"),
            Outcome::Waiting { last_reason, .. } if last_reason.contains("test -e /data/ready")
        ),
        "{waiting:#?}"
    );
    for (attempt, at) in [(2, T0 + 100), (3, T0 + 200)] {
        let retried = apply(&sandbox.config, &declaration(resources()), at).unwrap();
        judged(&retried, attempt);
    }
    // Judged again, not made again: the container was left as it was.
    assert_eq!(status(&sandbox.config.root, &name).unwrap().id, id);
    assert_eq!(starts(&id), 1);

    // Ready: the next retry judges it again, it passes, and the machine converges.
    fs::write(sandbox.path("/srv/ready"), "").unwrap();
    let passed = apply(&sandbox.config, &declaration(resources()), T0 + 400).unwrap();
    assert_eq!(
        outcome(&passed, "app/container/app"),
        &Outcome::Unchanged,
        "{passed:#?}"
    );
    assert_eq!(passed.machine, mesh_model::report::MachineState::Converged);
    assert_eq!(starts(&id), 1);
}

/// A container made and then failed its judgement is the mesh's own all the same: undeclared
/// while it fails, it is removed, never left running unrecorded.
#[test]
fn a_container_that_never_passed_its_judgement_is_removed_once_undeclared() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let name = names.name("never-passed");
    let mut sick = container("app", "sick", &name);
    spec_mut(&mut sick).health = Some(mesh_model::declaration::HealthCheck {
        command: ["sh", "-c", "exit 1"].map(str::to_owned).to_vec(),
        within_ms: 300,
    });
    let report = run(&sandbox, vec![sick]);
    failed_reason(outcome(&report, "app/container/sick"));
    assert!(status(&sandbox.config.root, &name).is_some());
    let undeclared = apply(&sandbox.config, &declaration(Vec::new()), T0 + 10).unwrap();
    assert!(
        matches!(
            outcome(&undeclared, "app/container/sick"),
            Outcome::Removed { .. }
        ),
        "{undeclared:#?}"
    );
    assert!(status(&sandbox.config.root, &name).is_none());
}

#[test]
fn a_container_that_dies_and_exits_again_when_started_is_failed_with_its_new_exit() {
    // The rule “A container is applied only when it runs”: a container killed later is started by
    // the next apply and judged again.
    let sandbox = sandbox();
    let mut names = Containers::new();
    let name = names.name("dies");
    let resources = || {
        vec![
            data_dir("app", "flag", "/srv"),
            after(
                with_mount(
                    running(
                        "app",
                        "app",
                        &name,
                        // Runs until the flag file exists; from then on exits 7 at once.
                        &[
                            "sh",
                            "-c",
                            "while [ ! -e /flag/stop ]; do sleep 1; done; echo stopping; exit 7",
                        ],
                    ),
                    "/srv",
                    "/flag",
                ),
                "app/directory/flag",
            ),
        ]
    };
    let first = run(&sandbox, resources());
    assert_eq!(
        outcome(&first, "app/container/app"),
        &applied(&["created"]),
        "{first:#?}"
    );
    fs::write(sandbox.path("/srv/stop"), "").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while status(&sandbox.config.root, &name).is_some_and(|s| s.running) {
        assert!(
            std::time::Instant::now() < deadline,
            "the container never exited"
        );
        // Only paces the looks at the condition above; the deadline bounds a failure.
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let second = run(&sandbox, resources());
    let reason = failed_reason(outcome(&second, "app/container/app"));
    assert!(reason.contains("exited with code 7"), "{reason}");
    assert!(reason.contains("stopping"), "{reason}");
}

/// Real accounts whose adding always fails: a group member that breaks at its commit.
struct AddingFails(mesh_apply::ShadowUtils);

impl mesh_apply::Accounts for AddingFails {
    fn read(&self) -> Result<mesh_apply::AccountDatabase, mesh_apply::AccountsError> {
        self.0.read()
    }
    fn add_membership(&self, account: &str, group: &str) -> Result<(), mesh_apply::AccountsError> {
        Err(mesh_apply::AccountsError::Command {
            command: format!("gpasswd -a {account} {group}"),
            status: "exit status: 1".to_owned(),
            stderr: "injected".to_owned(),
        })
    }
    fn remove_membership(
        &self,
        account: &str,
        group: &str,
    ) -> Result<(), mesh_apply::AccountsError> {
        self.0.remove_membership(account, group)
    }
}

// The rule “Resources declared together apply all-or-nothing”: a committed container could not be
// put back — a recreate removed the old container before making the new one — so a together group
// holding a container was not all-or-nothing. The old one is now kept, stopped and renamed, until
// the group is whole. Here the membership fails (before the container commits: it is left as it
// was); a container put back after its commit is the next test's.
#[test]
fn a_together_group_whose_other_member_fails_gives_its_container_back() {
    let sandbox = sandbox();
    let prefix = RunPrefix::new();
    let name = format!("{}group", prefix.0);
    let app = |mode: &str| {
        let mut app = together(container("app", "app", &name), "release");
        spec_mut(&mut app).env.insert("MODE".into(), mode.into());
        app
    };
    let member = || {
        together(
            after(membership("app", "alice", "wheel"), "app/container/app"),
            "release",
        )
    };
    run(&sandbox, vec![app("one")]);
    let before = status(&sandbox.config.root, &name).unwrap();
    assert!(before.running);

    // The membership fails at its commit, after the container was replaced: all of it back.
    let accounts = AddingFails(mesh_apply::ShadowUtils::new(&sandbox.config.root));
    let podman = mesh_apply::Podman::new(podman_config(), &sandbox.config.root);
    let seams = mesh_apply::Seams {
        accounts: &accounts,
        containers: &podman,
        progress: &mesh_apply::NoProgress,
    };
    let broken = mesh_apply::apply_with(
        &sandbox.config,
        &declaration(vec![app("two"), member()]),
        T0 + 1,
        &seams,
    )
    .unwrap();
    match outcome(&broken, "app/container/app") {
        Outcome::Failed { reason, .. } => assert!(
            reason.contains("together group") && reason.contains("alice-wheel"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    let after_failure = status(&sandbox.config.root, &name).unwrap();
    assert_eq!(after_failure.id, before.id, "the old container, given back");
    assert!(after_failure.running, "and started again");
    assert_eq!(
        prefix.containers(),
        std::slice::from_ref(&name),
        "nothing kept aside"
    );
    assert!(broken.findings.is_empty(), "{:?}", broken.findings);
    assert!(
        !sandbox.config.state_dir.join("group-commit.json").exists(),
        "the group's record goes once it is put back"
    );

    // Whole: the new container replaces it, the old one is let go.
    // (Its backoff elapsed.)
    let whole = apply(
        &sandbox.config,
        &declaration(vec![app("two"), member()]),
        T0 + 3600,
    )
    .unwrap();
    assert_eq!(
        outcome(&whole, "app/container/app"),
        &applied(&["env.MODE"]),
        "{whole:#?}"
    );
    let replaced = status(&sandbox.config.root, &name).unwrap();
    assert_ne!(replaced.id, before.id);
    assert!(replaced.running);
    assert_eq!(prefix.containers(), std::slice::from_ref(&name));
    assert!(whole
        .findings
        .iter()
        .all(|f| !f.message.contains("kept as")));
}

// The rule “Resources declared together apply all-or-nothing”: the test above fails the group at
// its membership, which commits before any container (members commit directories, files,
// memberships, containers) — so it never put back a committed container. Here the group is two
// containers and no file: the first one commits (replaced, or started), the second fails at its
// commit (it exits at once), and the first is put back as it was — the old container itself,
// running; or stopped again — and the one the commit made is removed.
#[test]
fn a_together_group_of_containers_failing_at_its_second_puts_the_first_back() {
    let sandbox = sandbox();
    let prefix = RunPrefix::new();
    let name = format!("{}first", prefix.0);
    let second = format!("{}second", prefix.0);
    let app = |mode: &str| {
        let mut app = together(container("app", "app", &name), "release");
        spec_mut(&mut app).env.insert("MODE".into(), mode.into());
        app
    };
    let breaks = || {
        together(
            running("app", "second", &second, &["sh", "-c", "exit 3"]),
            "release",
        )
    };
    run(&sandbox, vec![app("one")]);
    let before = status(&sandbox.config.root, &name).unwrap();
    assert!(before.running);

    // Replaced at its commit, then the second fails: the old one comes back, running.
    let broken = run(&sandbox, vec![app("two"), breaks()]);
    let reason = failed_reason(outcome(&broken, "app/container/app"));
    assert!(
        reason.contains("together group") && reason.contains("app/container/second"),
        "{reason}"
    );
    assert!(
        failed_reason(outcome(&broken, "app/container/second")).contains("exited with code 3"),
        "{broken:#?}"
    );
    let after_failure = status(&sandbox.config.root, &name).unwrap();
    assert_eq!(after_failure.id, before.id, "the old container, given back");
    assert!(after_failure.running, "and started again");
    assert_eq!(
        after_failure.labels.get(mesh_apply::LABEL_SPEC_DIGEST),
        before.labels.get(mesh_apply::LABEL_SPEC_DIGEST),
        "with its old spec"
    );
    assert_eq!(
        prefix.containers(),
        std::slice::from_ref(&name),
        "nothing kept aside, the second one removed"
    );
    assert!(!sandbox.config.state_dir.join("group-commit.json").exists());

    // There as declared but stopped: the commit starts it, the second fails, it is stopped
    // again.
    let podman = mesh_apply::Podman::new(podman_config(), &sandbox.config.root);
    podman.stop(&name).unwrap();
    let stopped = status(&sandbox.config.root, &name).unwrap();
    assert!(!stopped.running);
    let broken = apply(
        &sandbox.config,
        &declaration(vec![app("one"), breaks()]),
        T0 + 3600,
    )
    .unwrap();
    assert!(
        matches!(
            outcome(&broken, "app/container/app"),
            Outcome::Failed { .. }
        ),
        "{broken:#?}"
    );
    let after_failure = status(&sandbox.config.root, &name).unwrap();
    assert_eq!(after_failure.id, before.id, "the same container");
    assert_ne!(
        after_failure.started_at, stopped.started_at,
        "the commit had started it: {broken:#?}"
    );
    assert!(!after_failure.running, "stopped again, as it was");
    assert_eq!(prefix.containers(), std::slice::from_ref(&name));
}

/// Real accounts whose removing always fails: a member that cannot be put back.
struct RemovingFails(mesh_apply::ShadowUtils);

impl mesh_apply::Accounts for RemovingFails {
    fn read(&self) -> Result<mesh_apply::AccountDatabase, mesh_apply::AccountsError> {
        self.0.read()
    }
    fn add_membership(&self, account: &str, group: &str) -> Result<(), mesh_apply::AccountsError> {
        self.0.add_membership(account, group)
    }
    fn remove_membership(
        &self,
        account: &str,
        group: &str,
    ) -> Result<(), mesh_apply::AccountsError> {
        Err(mesh_apply::AccountsError::Command {
            command: format!("gpasswd -d {account} {group}"),
            status: "exit status: 1".to_owned(),
            stderr: "injected".to_owned(),
        })
    }
}

// The rule “Resources declared together apply all-or-nothing”: a group whose failed commit could
// not be put back whole dropped its record, so nothing would ever put the rest back. The record
// stays, and the next apply's first step puts the group back.
#[test]
fn a_together_group_that_cannot_be_put_back_keeps_its_record_for_the_next_apply() {
    let sandbox = sandbox();
    let prefix = RunPrefix::new();
    let second = format!("{}second", prefix.0);
    let group = || {
        declaration(vec![
            together(membership("app", "alice", "wheel"), "release"),
            together(
                running("app", "second", &second, &["sh", "-c", "exit 3"]),
                "release",
            ),
        ])
    };
    let accounts = RemovingFails(mesh_apply::ShadowUtils::new(&sandbox.config.root));
    let podman = mesh_apply::Podman::new(podman_config(), &sandbox.config.root);
    let seams = mesh_apply::Seams {
        accounts: &accounts,
        containers: &podman,
        progress: &mesh_apply::NoProgress,
    };
    let broken = mesh_apply::apply_with(&sandbox.config, &group(), T0, &seams).unwrap();
    let reason = failed_reason(outcome(&broken, "app/membership/alice-wheel"));
    assert!(
        reason.contains("putting back failed") && reason.contains("next apply puts the group back"),
        "{reason}"
    );
    assert!(sandbox.groups_of("alice").contains(&"wheel".to_owned()));
    assert!(sandbox.config.state_dir.join("group-commit.json").exists());
    assert!(prefix.containers().is_empty(), "the second one removed");

    // The next apply's first step (real accounts now).
    assert_eq!(
        mesh_apply::put_back_interrupted_group(&sandbox.config).unwrap(),
        Some("app/release".to_owned())
    );
    assert!(!sandbox.groups_of("alice").contains(&"wheel".to_owned()));
    assert!(!sandbox.config.state_dir.join("group-commit.json").exists());
}
