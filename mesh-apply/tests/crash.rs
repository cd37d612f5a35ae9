//! Crash safety: a host killed with SIGKILL at random points during applies of many
//! files never leaves a partial file at a declared path, leaves a state directory the next apply
//! reads, and the next apply converges (and says the machine was mid-change). A together group
//! killed in the middle of its commit is wholly old or wholly new once the next apply's first
//! step — putting back a group left mid-commit — has run (the rule “Resources declared together
//! apply all-or-nothing”).
//!
//! This binary runs without the test harness: run plainly it is the test; with
//! `MESH_CRASH_CHILD=<variant>` it is the host being killed, applying one declaration.

mod common;

use common::*;
use mesh_apply::{apply, HostConfig};
use mesh_model::declaration::{Declaration, Resource};
use mesh_model::report::{MachineState, Outcome};
use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD: &str = "MESH_CRASH_CHILD";
const ITERATIONS: usize = 50;
const FILES: usize = 64;
const ORIGINAL: &str = "the file that was there before the mesh\n";

fn path(i: usize) -> String {
    format!("/srv/crash/d{:02}/f{i:03}", i % 6)
}

fn content(variant: &str, i: usize) -> String {
    // Big enough that a write is more than one syscall's worth of bytes.
    let line = format!("{variant} file {i}: {}\n", "x".repeat(60));
    line.repeat(40 + i % 17)
}

fn declaration_for(variant: &str) -> Declaration {
    let resources: Vec<Resource> = match variant {
        "empty" => Vec::new(),
        _ => (0..FILES)
            .map(|i| {
                let mode = if variant == "a" { 0o644 } else { 0o600 };
                let mut file = file_as(
                    "crash",
                    &format!("f{i:03}"),
                    &path(i),
                    &content(variant, i),
                    mode,
                    "root",
                    "root",
                );
                if i < 4 {
                    file.together = Some("pair".to_owned());
                }
                file
            })
            .collect(),
    };
    declaration(resources)
}

fn config_from_env() -> HostConfig {
    HostConfig {
        root: PathBuf::from(std::env::var("MESH_CRASH_ROOT").unwrap()),
        state_dir: PathBuf::from(std::env::var("MESH_CRASH_STATE").unwrap()),
        ..HostConfig::default()
    }
}

fn child(variant: &str) {
    // The fail point the parent set in `FAILPOINTS`, if any.
    let _fail_points = fail::FailScenario::setup();
    let now: u64 = std::env::var("MESH_CRASH_NOW").unwrap().parse().unwrap();
    apply(&config_from_env(), &declaration_for(variant), now).expect("the child's apply runs");
}

/// The together group `pair` (files 0 to 3) as it is on the machine.
fn pair(sandbox: &Sandbox) -> Vec<Option<String>> {
    (0..4)
        .map(|i| fs::read_to_string(sandbox.path(&path(i))).ok())
        .collect()
}

/// The group `pair` as `variant` declares it.
fn pair_of(variant: &str) -> Vec<Option<String>> {
    (0..4).map(|i| Some(content(variant, i))).collect()
}

/// Every declared path holds nothing or one of the whole contents it may hold.
fn check_no_partial_file(sandbox: &Sandbox, iteration: usize) {
    for i in 0..FILES {
        let full = sandbox.path(&path(i));
        match fs::read_to_string(&full) {
            Ok(text) => {
                let whole = text == content("a", i)
                    || text == content("b", i)
                    || (i == 0 && text == ORIGINAL);
                assert!(
                    whole,
                    "iteration {iteration}: `{}` holds a partial file ({} bytes)",
                    path(i),
                    text.len()
                );
            }
            Err(e) => assert_eq!(
                e.kind(),
                std::io::ErrorKind::NotFound,
                "iteration {iteration}"
            ),
        }
    }
}

fn spawn(sandbox: &Sandbox, variant: &str, now: u64) -> std::process::Child {
    spawn_with(sandbox, variant, now, &[])
}

fn spawn_with(
    sandbox: &Sandbox,
    variant: &str,
    now: u64,
    env: &[(&str, String)],
) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env(CHILD, variant)
        .env("MESH_CRASH_ROOT", &sandbox.config.root)
        .env("MESH_CRASH_STATE", &sandbox.config.state_dir)
        .env("MESH_CRASH_NOW", now.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the test binary re-runs itself")
}

fn host_killed_at_random_points_never_leaves_a_partial_file_and_the_next_apply_converges() {
    let sandbox = Sandbox::new();
    sandbox.write(&path(0), ORIGINAL, 0o640);
    let mut now = 1_800_000_000;

    // How long one whole apply takes here, so kills land inside applies.
    let started = Instant::now();
    let status = spawn(&sandbox, "a", now).wait().unwrap();
    assert!(status.success());
    let whole = started.elapsed();
    let seed = whole.as_nanos() as u64;
    let mut rng = Rng(seed);
    // Killed at a step chosen, not at random: in the middle of the group's commit (two of its
    // four files committed). The group comes back wholly old.
    let release = sandbox.config.state_dir.with_file_name("release-pause");
    now += 1;
    let mut host = spawn_with(
        &sandbox,
        "b",
        now,
        &[(
            "FAILPOINTS",
            mesh_apply::progress::pause_at("commit", "crash/file/f002", &release),
        )],
    );
    wait_until_paused(&mut host, &release, "the commit of f002");
    host.kill().expect("SIGKILL");
    host.wait().unwrap();
    assert_eq!(
        pair(&sandbox)[..2],
        pair_of("b")[..2],
        "the kill landed mid-commit"
    );
    assert_eq!(pair(&sandbox)[2..], pair_of("a")[2..]);
    assert_eq!(
        mesh_apply::put_back_interrupted_group(&sandbox.config).unwrap(),
        Some("crash/pair".to_owned())
    );
    assert_eq!(
        pair(&sandbox),
        pair_of("a"),
        "the group is wholly old again"
    );

    let variants = ["b", "a", "empty", "a", "b"];
    let mut killed_mid_change = 0;
    let mut groups_put_back = 0;
    for iteration in 0..ITERATIONS {
        now += 1;
        let variant = variants[iteration % variants.len()];
        let delay = Duration::from_nanos(rng.next() % (whole.as_nanos() as u64 + 1));
        let before = pair(&sandbox);
        let mut host = spawn(&sandbox, variant, now);
        std::thread::sleep(delay);
        host.kill().expect("SIGKILL");
        host.wait().unwrap();
        check_no_partial_file(&sandbox, iteration);
        // What the next apply does first: a group left mid-commit is put back whole.
        if mesh_apply::put_back_interrupted_group(&sandbox.config)
            .unwrap_or_else(|e| panic!("iteration {iteration} (seed {seed}): {e}"))
            .is_some()
        {
            groups_put_back += 1;
        }
        // Releasing an undeclared group is not a group commit: only applies are checked.
        if variant != "empty" {
            let after = pair(&sandbox);
            assert!(
                after == before || after == pair_of(variant),
                "iteration {iteration} (seed {seed}): together group `pair` is neither wholly \
                 old nor wholly new: {:?}",
                after
                    .iter()
                    .map(|c| c.as_deref().map(|t| t.split(':').next().unwrap_or("")))
                    .collect::<Vec<_>>()
            );
        }
        // The state directory is always readable.
        if mesh_apply::is_mid_change(&sandbox.config.state_dir)
            .unwrap_or_else(|e| panic!("iteration {iteration} (seed {seed}): {e}"))
        {
            killed_mid_change += 1;
        }
    }
    assert!(
        killed_mid_change > 0,
        "no kill landed inside an apply (seed {seed})"
    );

    // The next apply converges, and says the machine was mid-change if it was.
    let was_mid_change = mesh_apply::is_mid_change(&sandbox.config.state_dir).unwrap();
    let report = apply(&sandbox.config, &declaration_for("b"), now + 1).expect("the apply runs");
    assert_eq!(report.resumed_from_mid_change, was_mid_change);
    assert_eq!(report.machine, MachineState::Converged, "{report:#?}");
    for i in 0..FILES {
        assert_eq!(sandbox.read(&path(i)), content("b", i));
        assert_eq!(sandbox.mode(&path(i)), 0o600);
    }
    let mut leftovers = BTreeSet::new();
    for dir in fs::read_dir(sandbox.path("/srv/crash")).unwrap().flatten() {
        for entry in fs::read_dir(dir.path()).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                leftovers.insert(entry.path());
            }
        }
    }
    assert!(leftovers.is_empty(), "temp files left: {leftovers:?}");

    // And what the mesh found survived every crash: undeclaring gives it back.
    let report = apply(&sandbox.config, &declaration_for("empty"), now + 2).unwrap();
    assert!(report
        .undeclared
        .values()
        .all(|o| matches!(o, Outcome::Removed { .. })));
    assert_eq!(sandbox.read(&path(0)), ORIGINAL);
    assert_eq!(sandbox.mode(&path(0)), 0o640);
    for i in 1..FILES {
        assert!(!sandbox.exists(&path(i)));
    }
    assert!(
        !sandbox.exists("/srv/crash/d01"),
        "directories the mesh made are gone"
    );
    println!(
        "{ITERATIONS} kills (one apply takes {whole:?}; {killed_mid_change} left the machine mid-change, \
         {groups_put_back} a together group mid-commit)"
    );
}

fn main() {
    if let Ok(variant) = std::env::var(CHILD) {
        child(&variant);
        return;
    }
    mesh_test_support::harness::run(&[(
        "host_killed_at_random_points_never_leaves_a_partial_file_and_the_next_apply_converges",
        host_killed_at_random_points_never_leaves_a_partial_file_and_the_next_apply_converges,
    )]);
}
