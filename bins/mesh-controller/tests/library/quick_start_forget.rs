//! Throwing a quick-start home away, as the quick start says: once a push runs the example's
//! media container on `home`, `mesh-host forget --yes` on each node's root and state directory
//! leaves no container labelled for the home's roots, and keeps the data the service wrote in
//! its places. Without `--yes` it lists and changes nothing. Real podman (configured as
//! `scripts/podman-env.sh` does); fails, never skips, without it.

use crate::support;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::Mesh;

fn host_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mesh-controller")).with_file_name("mesh-host")
}

/// `mesh-host --root ROOT --state-dir STATE ARGS…` for `node` of `mesh`, as the quick start
/// writes it.
fn host(mesh: &Mesh, node: &str, args: &[&str]) -> Output {
    Command::new(host_binary())
        .arg("--root")
        .arg(mesh.root(node))
        .arg("--state-dir")
        .arg(mesh.home().join("state").join(node))
        .args(["--podman-stop-timeout", "0"])
        .args(args)
        .output()
        .expect("mesh-host runs")
}

fn succeeded(out: &Output, what: &str) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}:\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The containers, running or not, labelled as made by the host of `root`.
fn containers_of(root: &Path) -> Vec<String> {
    let label = format!("label=io.mesh.host={}", root.display());
    let out = Command::new("podman")
        .args(["ps", "--all", "--format", "{{.Names}}", "--filter", &label])
        .output()
        .expect("podman runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn forget_on_each_node_of_a_quick_start_home_leaves_no_container_and_keeps_the_data() {
    let mesh = Mesh::example();
    mesh.expect(&["push", "home"], 0);
    let home_root = mesh.root("home");
    let made = containers_of(&home_root);
    assert!(!made.is_empty(), "the push ran the media container");
    // What the service wrote in its place: data the mesh did not put there.
    let media = home_root.join("srv/disk1/media");
    assert!(media.is_dir(), "the media place was made");
    std::fs::write(media.join("film.mkv"), "the service's data\n").unwrap();

    let nodes: Vec<String> = std::fs::read_dir(mesh.home().join("roots"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(nodes.contains(&"home".to_owned()), "{nodes:?}");

    // Without --yes: a list, and nothing changes.
    let listed = succeeded(&host(&mesh, "home", &["forget"]), "forget, listing");
    assert!(
        made.iter().any(|name| listed.contains(name.as_str())),
        "the list names the container ({made:?}):\n{listed}"
    );
    assert_eq!(containers_of(&home_root), made, "a list changes nothing");

    for node in &nodes {
        succeeded(
            &host(&mesh, node, &["forget", "--yes"]),
            &format!("forget --yes on {node}"),
        );
    }
    for node in &nodes {
        assert_eq!(
            containers_of(&mesh.root(node)),
            Vec::<String>::new(),
            "{node}'s host left containers behind"
        );
    }
    assert_eq!(
        std::fs::read_to_string(media.join("film.mkv")).unwrap(),
        "the service's data\n",
        "the data in the media place is kept"
    );
}
