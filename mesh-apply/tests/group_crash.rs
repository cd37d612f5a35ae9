//! A together group holding a container, killed in the middle of its commit (the rule “Resources
//! declared together apply all-or-nothing”, point 2; the incident behind “Resources declared
//! together apply all-or-nothing”), under real podman: after each kill and the next apply's first
//! step (putting back a group left mid-commit), the group is wholly old or wholly new — never a
//! file of one declaration beside the container of the other — and the next apply converges.
//!
//! The host is killed at named steps only (fail points, `FAILPOINTS`): before each member's
//! commit, and inside podman's replacement of the container (the old one stopped, kept as
//! `<name>.mesh-old`, its replacement made), and once the group is whole before the old
//! container is let go. Nothing here waits on a clock.
//!
//! Also here: a container that `restart_on`s a file, the host killed once the file is
//! committed and before the restart (in a together group: once the group is whole, at the
//! `let-go` of a container it replaced and at the `restart` step; a lone file and container: at
//! the `restart` step), is restarted by the next apply, which reports it `restarted`.
//!
//! This binary runs without the test harness: run plainly it is the tests; with
//! `MESH_GROUP_CRASH_CHILD=<variant>` it is the host being killed, applying one declaration.
//! Needs podman configured as `scripts/podman-env.sh` does; fails, never skips, without it.

mod common;
use common::*;
use mesh_apply::{
    apply, ContainerRuntimeChoice, HostConfig, RunSpec, LABEL_MADE_BY, LABEL_SPEC_DIGEST, MADE_BY,
};
use mesh_model::declaration::{Declaration, Resource, Spec};
use mesh_model::report::{MachineState, Outcome};
use mesh_test_support::podman::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

const CHILD: &str = "MESH_GROUP_CRASH_CHILD";
const CONF: &str = "/etc/app.conf";
const DATA: &str = "/srv/app-data";
const FILE_ID: &str = "app/file/conf";
const DIRECTORY_ID: &str = "app/directory/data";
const MEMBERSHIP_ID: &str = "app/membership/alice-wheel";
const CONTAINER_ID: &str = "app/container/app";
const WORKER_ID: &str = "app/container/worker";
/// A container of the restart test's group, replaced by its `b` (sorted before `app`: its
/// `let-go` comes before `app`'s restart).
const AIDE_ID: &str = "app/container/aide";

fn conf(variant: &str) -> String {
    format!("the configuration of declaration {variant}\n")
}

fn app(variant: &str, name: &str) -> Resource {
    let mut app = together(container("app", "app", name), "release");
    spec_mut(&mut app)
        .env
        .insert("MODE".to_owned(), variant.to_owned());
    app
}

/// Declaration `a`: the group is a file and a container. Declaration `b` changes the file and
/// the container's spec (so it is replaced) and adds a membership, a directory and a second
/// container (`<name>-worker`, created) to the group.
fn declaration_for(variant: &str, name: &str) -> Declaration {
    let mut resources = vec![
        together(file("app", "conf", CONF, &conf(variant)), "release"),
        app(variant, name),
    ];
    if variant == "b" {
        resources.push(together(directory("app", "data", DATA, 0o750), "release"));
        resources.push(together(membership("app", "alice", "wheel"), "release"));
        resources.push(together(
            container("app", "worker", &worker(name)),
            "release",
        ));
    }
    declaration(resources)
}

fn worker(name: &str) -> String {
    format!("{name}-worker")
}

fn config(root: PathBuf, state_dir: PathBuf) -> HostConfig {
    HostConfig {
        root,
        state_dir,
        containers: ContainerRuntimeChoice::Podman(podman_config()),
        ..HostConfig::default()
    }
}

fn child(variant: &str) {
    // The fail point the parent set in `FAILPOINTS`.
    let _fail_points = fail::FailScenario::setup();
    let env = |key: &str| std::env::var(key).unwrap();
    let config = config(
        PathBuf::from(env("MESH_GROUP_CRASH_ROOT")),
        PathBuf::from(env("MESH_GROUP_CRASH_STATE")),
    );
    let now: u64 = env("MESH_GROUP_CRASH_NOW").parse().unwrap();
    let name = env("MESH_GROUP_CRASH_NAME");
    let declaration = match variant.split_once('-') {
        Some((shape, variant)) => restarting_declaration(shape, variant, &name),
        None => declaration_for(variant, &name),
    };
    apply(&config, &declaration, now).expect("the child's apply runs");
}

/// The restart test's declaration: the file and a container (`name`) restarting on it, its spec
/// the same in `a` and `b`; shape `group`: both in together group `release` with a container
/// `<name>-aide` whose spec `b` changes (replaced), shape `lone`: the two alone.
fn restarting_declaration(shape: &str, variant: &str, name: &str) -> Declaration {
    let mut app = container("app", "app", name);
    spec_mut(&mut app).restart_on.push(FILE_ID.to_owned());
    let conf = file("app", "conf", CONF, &conf(variant));
    match shape {
        "group" => {
            let mut aide = container("app", "aide", &format!("{name}-aide"));
            spec_mut(&mut aide)
                .env
                .insert("MODE".to_owned(), variant.to_owned());
            declaration(vec![
                together(conf, "release"),
                together(aide, "release"),
                together(app, "release"),
            ])
        }
        "lone" => declaration(vec![conf, app]),
        other => panic!("no shape `{other}`"),
    }
}

/// The together group `release` as it is on the machine.
#[derive(Debug, PartialEq, Eq)]
struct Group {
    conf: Option<String>,
    /// The spec digest of the container under its real name, and whether it runs.
    container: Option<(String, bool)>,
    /// Whether the second container is there (only `b` declares it), and runs.
    worker: Option<bool>,
    alice_in_wheel: bool,
    data_dir: bool,
}

fn spec_digest(variant: &str, name: &str) -> String {
    match &app(variant, name).spec {
        Spec::Container(spec) => RunSpec::of(spec).label().1,
        other => panic!("not a container: {other:?}"),
    }
}

/// The group as declaration `variant` declares it.
fn group_of(variant: &str, name: &str) -> Group {
    Group {
        conf: Some(conf(variant)),
        container: Some((spec_digest(variant, name), true)),
        worker: (variant == "b").then_some(true),
        alice_in_wheel: variant == "b",
        data_dir: variant == "b",
    }
}

fn group(sandbox: &Sandbox, name: &str) -> Group {
    Group {
        conf: std::fs::read_to_string(sandbox.path(CONF)).ok(),
        container: status(&sandbox.config.root, name).map(|s| {
            assert_eq!(
                s.labels.get(LABEL_MADE_BY).map(String::as_str),
                Some(MADE_BY)
            );
            (
                s.labels.get(LABEL_SPEC_DIGEST).cloned().unwrap_or_default(),
                s.running,
            )
        }),
        worker: status(&sandbox.config.root, &worker(name)).map(|s| s.running),
        alice_in_wheel: sandbox.groups_of("alice").iter().any(|g| g == "wheel"),
        data_dir: sandbox.exists(DATA),
    }
}

/// The `.mesh-old` (and `.mesh-new`) files beside the group's file.
fn file_leftovers(sandbox: &Sandbox) -> Vec<String> {
    std::fs::read_dir(sandbox.path("/etc"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".mesh-"))
        .collect()
}

/// A host process killed when dropped (a failing test leaves no host waiting at a fail point).
struct Host(Child);

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A sandbox whose host runs containers under podman, this run's container prefix, and the
/// name of the group's container under it.
fn podman_sandbox() -> (Sandbox, RunPrefix, String) {
    let mut sandbox = Sandbox::new();
    sandbox.config = config(
        sandbox.config.root.clone(),
        sandbox.config.state_dir.clone(),
    );
    let prefix = RunPrefix::new();
    let name = format!("{}app", prefix.0);
    (sandbox, prefix, name)
}

/// Runs the child host applying `variant`, made to wait at `step` for `resource`; returns once it
/// waits there.
fn host_waiting_at(
    sandbox: &Sandbox,
    name: &str,
    variant: &str,
    now: u64,
    (step, resource): (&str, &str),
    release: &Path,
) -> Host {
    let mut host = Host(
        Command::new(std::env::current_exe().unwrap())
            .env(CHILD, variant)
            .env("MESH_GROUP_CRASH_ROOT", &sandbox.config.root)
            .env("MESH_GROUP_CRASH_STATE", &sandbox.config.state_dir)
            .env("MESH_GROUP_CRASH_NOW", now.to_string())
            .env("MESH_GROUP_CRASH_NAME", name)
            .env(
                "FAILPOINTS",
                mesh_apply::progress::pause_at(step, resource, release),
            )
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("the test binary re-runs itself"),
    );
    wait_until_paused(&mut host.0, release, &format!("`{step}` for `{resource}`"));
    host
}

/// The containers the group's commit leaves when nothing is kept aside.
fn containers_of(variant: &str, name: &str) -> Vec<String> {
    let mut names = vec![name.to_owned()];
    if variant == "b" {
        names.push(worker(name));
    }
    names.sort();
    names
}

fn containers_now(prefix: &RunPrefix) -> Vec<String> {
    let mut names = prefix.containers();
    names.sort();
    names
}

fn converge(sandbox: &Sandbox, prefix: &RunPrefix, name: &str, variant: &str, now: u64) {
    let report = apply(&sandbox.config, &declaration_for(variant, name), now).unwrap();
    assert_eq!(report.machine, MachineState::Converged, "{report:#?}");
    assert_eq!(group(sandbox, name), group_of(variant, name));
    assert_eq!(
        containers_now(prefix),
        containers_of(variant, name),
        "nothing kept aside after applying {variant}"
    );
    assert_eq!(file_leftovers(sandbox), Vec::<String>::new());
}

fn a_together_group_with_a_container_killed_mid_commit_is_wholly_old_or_wholly_new() {
    let (sandbox, prefix, name) = podman_sandbox();
    let mut now = 1_800_000_000;
    converge(&sandbox, &prefix, &name, "a", now);

    // Every place in the commit of `b` the host can stop at, in no particular order: each
    // member's commit, the container's replacement inside podman, and the group whole.
    let steps = [
        ("commit", FILE_ID),
        ("commit", DIRECTORY_ID),
        ("commit", MEMBERSHIP_ID),
        ("commit", CONTAINER_ID),
        ("stopped", CONTAINER_ID),
        ("kept", CONTAINER_ID),
        ("created", CONTAINER_ID),
        ("commit", WORKER_ID),
        ("created", WORKER_ID),
        ("let-go", CONTAINER_ID),
    ];
    for (n, step) in steps.into_iter().enumerate() {
        let at = format!("`{}` for `{}`", step.0, step.1);
        let old_id = status(&sandbox.config.root, &name).unwrap().id;
        now += 1;
        let release = sandbox
            .config
            .state_dir
            .with_file_name(format!("release-{n}"));
        let host = host_waiting_at(&sandbox, &name, "b", now, step, &release);
        drop(host); // SIGKILL, then reaped.

        // The next apply's first step: a group left mid-commit is put back whole.
        let put_back = mesh_apply::put_back_interrupted_group(&sandbox.config)
            .unwrap_or_else(|e| panic!("killed at {at}: {e}"));
        let found = group(&sandbox, &name);
        let old = group_of("a", &name);
        let new = group_of("b", &name);
        assert!(
            found == old || found == new,
            "killed at {at}: together group `app/release` is neither wholly old nor wholly \
             new: {found:#?}"
        );
        if step.0 == "let-go" {
            // The group was whole: its record was gone, nothing is put back.
            assert_eq!(put_back, None, "killed at {at}");
            assert_eq!(found, new, "killed at {at}");
        } else {
            assert_eq!(put_back.as_deref(), Some("app/release"), "killed at {at}");
            assert_eq!(found, old, "killed at {at}");
            let given_back = status(&sandbox.config.root, &name).unwrap();
            assert_eq!(
                given_back.id, old_id,
                "killed at {at}: the old container itself"
            );
            assert_eq!(
                containers_now(&prefix),
                containers_of("a", &name),
                "killed at {at}: nothing kept aside, nothing made left"
            );
            assert_eq!(
                file_leftovers(&sandbox),
                Vec::<String>::new(),
                "killed at {at}"
            );
        }

        // The next apply converges (removing what a whole group kept aside), and so does
        // going back to `a` for the next kill.
        converge(&sandbox, &prefix, &name, "b", now + 1);
        now += 2;
        converge(&sandbox, &prefix, &name, "a", now);
    }
}

fn a_restart_owed_when_the_host_was_killed_is_made_by_the_next_apply() {
    for (shape, steps) in [
        (
            "group",
            &[("let-go", AIDE_ID), ("restart", CONTAINER_ID)][..],
        ),
        ("lone", &[("restart", CONTAINER_ID)][..]),
    ] {
        let (sandbox, _prefix, name) = podman_sandbox();
        let mut now = 1_800_000_000;
        let apply_variant = |variant: &str, now: u64| {
            let report = apply(
                &sandbox.config,
                &restarting_declaration(shape, variant, &name),
                now,
            )
            .unwrap();
            assert_eq!(report.machine, MachineState::Converged, "{report:#?}");
            report
        };
        apply_variant("a", now);
        for (n, &(step, resource)) in steps.iter().enumerate() {
            let at = format!("{shape}: killed at `{step}` for `{resource}`");
            let before = status(&sandbox.config.root, &name).unwrap();
            let started = starts(&before.id);
            now += 1;
            let release = sandbox
                .config
                .state_dir
                .with_file_name(format!("release-{n}"));
            let host = host_waiting_at(
                &sandbox,
                &name,
                &format!("{shape}-b"),
                now,
                (step, resource),
                &release,
            );
            drop(host); // SIGKILL, then reaped.
            assert_eq!(
                std::fs::read_to_string(sandbox.path(CONF)).ok(),
                Some(conf("b")),
                "{at}: the file is committed"
            );
            assert_eq!(starts(&before.id), started, "{at}: not restarted yet");

            now += 1;
            let report = apply_variant("b", now);
            assert_eq!(
                report.resources.get(FILE_ID),
                Some(&Outcome::Unchanged),
                "{at}"
            );
            assert_eq!(
                report.resources.get(CONTAINER_ID),
                Some(&Outcome::Applied {
                    changed: vec!["restarted".to_owned()]
                }),
                "{at}: {report:#?}"
            );
            let after = status(&sandbox.config.root, &name).unwrap();
            assert_eq!(after.id, before.id, "{at}: restarted, not recreated");
            assert_ne!(after.started_at, before.started_at, "{at}");
            assert_eq!(starts(&before.id), started + 1, "{at}: restarted once");

            // The restart owed is paid: the next apply leaves the container running.
            now += 1;
            let report = apply_variant("b", now);
            assert_eq!(
                report.resources.get(CONTAINER_ID),
                Some(&Outcome::Unchanged),
                "{at}"
            );
            assert_eq!(starts(&before.id), started + 1, "{at}: not restarted again");

            now += 1;
            apply_variant("a", now);
        }
    }
}

fn main() {
    if let Ok(variant) = std::env::var(CHILD) {
        child(&variant);
        return;
    }
    mesh_test_support::harness::run(&[
        (
            "a_together_group_with_a_container_killed_mid_commit_is_wholly_old_or_wholly_new",
            a_together_group_with_a_container_killed_mid_commit_is_wholly_old_or_wholly_new,
        ),
        (
            "a_restart_owed_when_the_host_was_killed_is_made_by_the_next_apply",
            a_restart_owed_when_the_host_was_killed_is_made_by_the_next_apply,
        ),
    ]);
}
