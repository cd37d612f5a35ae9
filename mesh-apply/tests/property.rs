//! Property: random sequences of declare/undeclare over a root that already holds files,
//! directories and memberships always return the root to exactly what it held before the mesh
//! came, once everything is undeclared.
//!
//! Hand-rolled and seeded (splitmix64): a failing case prints its seed; `MESH_PROPERTY_SEED=<n>`
//! replays one, `MESH_PROPERTY_CASES=<n>` runs more than the default 64.

mod common;

use common::*;
use mesh_apply::apply;
use mesh_model::declaration::Resource;
use mesh_model::report::{MachineState, Outcome};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

/// Everything under the root that a person could notice: type, mode, owner, and bytes.
/// shadow-utils' own backups and lock (`etc/*-`, `etc/.pwd.lock`) are its business, not ours.
fn snapshot(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for entry in fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            let name = path.strip_prefix(root).unwrap().display().to_string();
            if name.starts_with("etc/") && (name.ends_with('-') || name.ends_with(".pwd.lock")) {
                continue;
            }
            let meta = fs::symlink_metadata(&path).unwrap();
            let head = format!("{:o} {}:{}", meta.mode(), meta.uid(), meta.gid());
            if meta.is_dir() {
                out.insert(name, format!("dir {head}"));
                walk(root, &path, out);
            } else {
                let bytes = fs::read(&path).unwrap();
                out.insert(
                    name,
                    format!("file {head} {}", String::from_utf8_lossy(&bytes)),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn prepare(sandbox: &Sandbox) {
    sandbox.write("/etc/app.conf", "theirs\n", 0o600);
    std::os::unix::fs::chown(sandbox.path("/etc/app.conf"), Some(1000), Some(29)).unwrap();
    sandbox.write("/srv/data/user.db", "their rows\n", 0o640);
    set_mode(&sandbox.path("/srv/data"), 0o775);
    fs::create_dir_all(sandbox.path("/srv/empty")).unwrap();
    set_mode(&sandbox.path("/srv/empty"), 0o700);
}

/// One random declaration from a fixed universe of resources.
fn random_declaration(rng: &mut Rng) -> Vec<Resource> {
    let contents = ["one\n", "two\n", "", "theirs\n"];
    let modes = [0o644, 0o600, 0o640];
    let owners = [("root", "root"), ("alice", "audio"), ("bob", "wheel")];
    let files = [
        ("app", "/etc/app.conf"),
        ("new", "/etc/new.conf"),
        ("in-data", "/srv/data/mesh.conf"),
        ("deep", "/opt/tool/bin/run.sh"),
        ("in-made", "/srv/made/inner.txt"),
    ];
    let directories = [
        ("data", "/srv/data"),
        ("empty", "/srv/empty"),
        ("made", "/srv/made"),
        ("tool", "/opt/tool"),
    ];
    let memberships = [
        ("alice", "docker"),
        ("alice", "wheel"),
        ("bob", "docker"),
        ("bob", "wheel"),
    ];
    let mut resources = Vec::new();
    for (name, path) in files {
        if rng.chance(50) {
            let (owner, group) = if rng.chance(10) {
                ("nobody-here", "root")
            } else {
                *rng.pick(&owners)
            };
            let content = *rng.pick(&contents);
            let mut file = file_as("m", name, path, content, *rng.pick(&modes), owner, group);
            if rng.chance(30) {
                file.together = Some("g".to_owned());
            }
            resources.push(file);
        }
    }
    for (name, path) in directories {
        if rng.chance(50) {
            let mut dir = directory("m", name, path, *rng.pick(&[0o755, 0o700, 0o750]));
            if rng.chance(20) {
                dir.together = Some("g".to_owned());
            }
            resources.push(dir);
        }
    }
    for (account, group) in memberships {
        if rng.chance(50) {
            let mut m = membership("m", account, group);
            if rng.chance(20) {
                m.together = Some("g".to_owned());
            }
            resources.push(m);
        }
    }
    resources
}

fn check(seed: u64) {
    let sandbox = Sandbox::new();
    prepare(&sandbox);
    let before = snapshot(&sandbox.config.root);
    let mut rng = Rng(seed);
    let mut now = 1_800_000_000;
    let steps = 1 + rng.below(6);
    for _ in 0..steps {
        let resources = random_declaration(&mut rng);
        let report = apply(&sandbox.config, &declaration(resources.clone()), now)
            .unwrap_or_else(|e| panic!("seed {seed}: apply refused: {e}"));
        if std::env::var_os("MESH_PROPERTY_VERBOSE").is_some() {
            let ids: Vec<_> = resources.iter().map(|r| (&r.id, &r.together)).collect();
            eprintln!(
                "declared {ids:?}\nresources {:?}\nundeclared {:?}",
                report.resources, report.undeclared
            );
        }
        now += 100_000; // past any backoff
    }
    let report = apply(&sandbox.config, &declaration(Vec::new()), now)
        .unwrap_or_else(|e| panic!("seed {seed}: apply refused: {e}"));
    assert_eq!(
        report.machine,
        MachineState::Converged,
        "seed {seed}: {report:#?}"
    );
    assert!(
        report
            .undeclared
            .values()
            .all(|o| matches!(o, Outcome::Removed { .. })),
        "seed {seed}: {report:#?}"
    );
    let after = snapshot(&sandbox.config.root);
    assert_eq!(
        before, after,
        "seed {seed}: the root is not as the mesh found it"
    );
}

#[test]
fn undeclaring_everything_returns_the_root_to_what_it_held_before_the_mesh() {
    if let Ok(seed) = std::env::var("MESH_PROPERTY_SEED") {
        check(seed.parse().expect("MESH_PROPERTY_SEED is a number"));
        return;
    }
    let cases = std::env::var("MESH_PROPERTY_CASES").map_or(64, |n| n.parse().expect("a count"));
    for seed in 0..cases {
        check(seed);
    }
}
