//! `mesh-host forget`: everything the mesh holds on a machine is given back — what it made is
//! removed (a container too), what it found is given back as it was, a directory holding data
//! it did not put there is kept — and without `--yes` nothing changes. Real podman, configured
//! as `scripts/podman-env.sh` does; fails, never skips, without it.

use mesh_model::declaration::Declaration;
use mesh_test_support::podman::*;
use std::path::Path;
use std::process::{Command, Output};

fn host(root: &Path, state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mesh-host"))
        .arg("--root")
        .arg(root)
        .arg("--state-dir")
        .arg(state)
        .args(["--podman-stop-timeout", "0"])
        .args(args)
        .output()
        .expect("mesh-host runs")
}

fn succeeded(out: &Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

const FILES: &str = r#"{"format":1,"node":"box","resources":[
  {"id":"motd/file/motd","module":"motd","spec":{"kind":"file","path":"/etc/motd","content":"from the mesh\n","mode":420,"owner":"root","group":"root"}},
  {"id":"web/directory/data","module":"web","spec":{"kind":"directory","path":"/srv/data","mode":493,"owner":"root","group":"root"}},
  {"id":"web/file/conf","module":"web","spec":{"kind":"file","path":"/etc/web.conf","content":"port = 8080\n","mode":420,"owner":"root","group":"root"}}
]}"#;

#[test]
fn forget_gives_back_what_the_mesh_holds_and_keeps_data_and_what_it_found() {
    podman_config();
    let prefix = RunPrefix::new();
    let dir = tempfile::tempdir().unwrap();
    let (root, state) = (dir.path().join("root"), dir.path().join("state"));
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\n").unwrap();
    std::fs::write(root.join("etc/motd"), "the machine's own\n").unwrap();
    let mut declaration = Declaration::from_json(FILES.as_bytes()).unwrap();
    declaration.resources.push(container("web", "web", "web"));
    declaration.resources.sort_by(|a, b| a.id.cmp(&b.id));
    let file = dir.path().join("declaration.json");
    std::fs::write(&file, declaration.canonical_json()).unwrap();
    let prefixed = ["--container-prefix", prefix.0.as_str()];

    let mut apply = prefixed.to_vec();
    apply.extend(["apply", file.to_str().unwrap()]);
    succeeded(&host(&root, &state, &apply));
    assert_eq!(prefix.containers(), vec![format!("{}web", prefix.0)]);
    std::fs::write(root.join("srv/data/made-by-the-service"), "data\n").unwrap();

    // Without --yes: a list, and nothing changes.
    let listed = succeeded(&host(&root, &state, &["forget"]));
    assert!(listed.contains("the 4 resources"), "{listed}");
    assert!(listed.contains("found  file /etc/motd"), "{listed}");
    assert!(
        listed.contains(&format!("made   container {}web", prefix.0)),
        "{listed}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("etc/web.conf")).unwrap(),
        "port = 8080\n"
    );
    assert_eq!(prefix.containers().len(), 1);

    // With --yes, and without the prefix the containers were made with: the state names them.
    let report = succeeded(&host(&root, &state, &["forget", "--yes"]));
    assert!(prefix.containers().is_empty(), "{report}");
    assert!(!root.join("etc/web.conf").exists(), "{report}");
    assert_eq!(
        std::fs::read_to_string(root.join("etc/motd")).unwrap(),
        "the machine's own\n",
        "what was found is given back"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("srv/data/made-by-the-service")).unwrap(),
        "data\n",
        "data stays"
    );
    assert_eq!(
        succeeded(&host(&root, &state, &["forget"])),
        "the mesh holds nothing on this machine: nothing to forget\n"
    );
}
