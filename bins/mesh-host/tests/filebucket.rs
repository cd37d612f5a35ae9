//! `mesh-host drift list` and `drift show`: a hand edit the host put back is kept, listed and
//! shown as a diff to the file now; an unknown id is refused (exit 2).

use std::path::Path;
use std::process::{Command, Output};

fn host(root: &Path, state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mesh-host"))
        .arg("--root")
        .arg(root)
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .output()
        .expect("mesh-host runs")
}

fn ok(out: &Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

const DECLARATION: &str = r#"{"format":1,"node":"box","resources":[
  {"id":"web/file/conf","module":"web","spec":{"kind":"file","path":"/etc/web.conf","content":"port = 8080\nworkers = 8\n","mode":420,"owner":"root","group":"root"}}
]}"#;

#[test]
fn a_hand_edit_put_back_is_listed_and_shown_as_a_diff() {
    let dir = tempfile::tempdir().unwrap();
    let (root, state) = (dir.path().join("root"), dir.path().join("state"));
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\n").unwrap();
    let file = dir.path().join("declaration.json");
    std::fs::write(&file, DECLARATION).unwrap();
    let file = file.to_str().unwrap();

    ok(&host(&root, &state, &["apply", file]));
    assert_eq!(
        ok(&host(&root, &state, &["drift", "list"])),
        "the filebucket keeps no hand edit\n"
    );

    std::fs::write(root.join("etc/web.conf"), "port = 9090\nworkers = 8\n").unwrap();
    let applied = ok(&host(&root, &state, &["apply", file]));
    assert_eq!(
        std::fs::read_to_string(root.join("etc/web.conf")).unwrap(),
        "port = 8080\nworkers = 8\n"
    );

    let listed: serde_json::Value = serde_json::from_str(&ok(&host(
        &root,
        &state,
        &["--output", "json", "drift", "list"],
    )))
    .unwrap();
    let entries = listed.as_array().unwrap();
    assert_eq!(entries.len(), 1, "{listed}");
    assert_eq!(entries[0]["path"], "/etc/web.conf");
    let id = entries[0]["id"].as_str().unwrap();
    assert!(applied.contains(&format!("kept as {id}")), "{applied}");

    let shown = ok(&host(&root, &state, &["drift", "show", id]));
    assert!(
        shown.contains("-port = 9090\n+port = 8080\n workers = 8\n"),
        "{shown}"
    );
    assert_eq!(
        host(&root, &state, &["drift", "show", id, "--raw"]).stdout,
        b"port = 9090\nworkers = 8\n"
    );

    let unknown = host(&root, &state, &["drift", "show", "000000000000-1"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("keeps nothing with id `000000000000-1`"),
        "{}",
        String::from_utf8_lossy(&unknown.stderr)
    );
}
