//! `mesh-host apply FILE.json`: a hand-run apply, and bad input refused with nothing changed.

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

fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        let mut paths: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
        paths.sort();
        for path in paths {
            if path.is_dir() {
                out.push((path.display().to_string(), Vec::new()));
                out.extend(tree(&path));
            } else {
                out.push((path.display().to_string(), std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

const GOOD: &str = r#"{"format":1,"node":"box","resources":[
  {"id":"demo/directory/etc","module":"demo","spec":{"kind":"directory","path":"/etc/demo","mode":493,"owner":"root","group":"root"}},
  {"id":"demo/file/conf","module":"demo","after":["demo/directory/etc"],"spec":{"kind":"file","path":"/etc/demo/demo.conf","content":"hello\n","mode":420,"owner":"root","group":"root"}}
]}"#;

#[test]
fn a_hand_run_apply_writes_under_the_root_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let (root, state) = (dir.path().join("root"), dir.path().join("state"));
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\n").unwrap();
    let file = dir.path().join("declaration.json");
    std::fs::write(&file, GOOD).unwrap();
    let out = host(&root, &state, &["apply", file.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(root.join("etc/demo/demo.conf")).unwrap(),
        "hello\n"
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("box: converged (2 applied)"), "{text}");

    let out = host(
        &root,
        &state,
        &["--output", "json", "apply", file.to_str().unwrap()],
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["resources"]["demo/file/conf"]["outcome"],
        "unchanged"
    );
}

#[test]
fn a_malformed_declaration_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (root, state) = (dir.path().join("root"), dir.path().join("state"));
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/motd"), "the machine's own\n").unwrap();
    let before = tree(dir.path());
    let cases = [
        ("not-json", "{ this is not json", "is not valid JSON"),
        (
            "wrong-format",
            r#"{"format":99,"node":"box","resources":[]}"#,
            "has format 99, this build reads up to format 3",
        ),
        (
            "relative-path",
            r#"{"format":1,"node":"box","resources":[{"id":"m/file/x","module":"m","spec":{"kind":"file","path":"etc/motd","content":"x","mode":420,"owner":"root","group":"root"}}]}"#,
            "`etc/motd` is not an absolute path",
        ),
        (
            "climbing-path",
            r#"{"format":1,"node":"box","resources":[{"id":"m/file/x","module":"m","spec":{"kind":"file","path":"/etc/../../outside","content":"x","mode":420,"owner":"root","group":"root"}}]}"#,
            "has a `.` or `..` segment",
        ),
        (
            "unknown-kind",
            r#"{"format":1,"node":"box","resources":[{"id":"m/package/x","module":"m","spec":{"kind":"package","name":"x"}}]}"#,
            "is not valid JSON for its format",
        ),
    ];
    for (name, text, expected) in cases {
        let file = dir.path().join(format!("{name}.json"));
        std::fs::write(&file, text).unwrap();
        let before_with_file = tree(dir.path());
        let out = host(&root, &state, &["apply", file.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains("refused, nothing applied"),
            "{name}: {stderr}"
        );
        assert!(stderr.contains(expected), "{name}: {stderr}");
        assert_eq!(
            tree(dir.path()),
            before_with_file,
            "{name} changed something"
        );
        std::fs::remove_file(&file).unwrap();
    }
    assert_eq!(tree(dir.path()), before);
}

/// Issue 41: a state directory out of space refused the apply with "cannot write the host state
/// at …", without the system's reason. The directory is made full by the host's fail point.
#[test]
fn a_hand_run_apply_whose_state_directory_is_full_says_so_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (root, state) = (dir.path().join("root"), dir.path().join("state"));
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\n").unwrap();
    let file = dir.path().join("declaration.json");
    std::fs::write(&file, GOOD).unwrap();
    let full = dir.path().join("full");
    std::fs::write(&full, "").unwrap();
    let before = tree(&root);
    let out = Command::new(env!("CARGO_BIN_EXE_mesh-host"))
        .arg("--root")
        .arg(&root)
        .arg("--state-dir")
        .arg(&state)
        .args(["apply", file.to_str().unwrap()])
        .env(
            "FAILPOINTS",
            format!("{}=return({})", mesh_host::STATE_DIR_FULL, full.display()),
        )
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("the host cannot apply: cannot write the host state at")
            && said.contains("no space left on device"),
        "{said}"
    );
    assert_eq!(tree(&root), before, "nothing under the root changed");
}

/// The exit codes of the mesh's table: a wrong command line is a usage error (64), not clap's
/// 2, which means "refused" here; `serve` without its node or bus is one too; help is 0.
#[test]
fn a_wrong_command_line_exits_64_and_help_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let (root, state) = (dir.path().join("root"), dir.path().join("state"));
    for args in [
        &["apply"][..],
        &["apply", "--bogus", "x"],
        &["--bogus"],
        &["frobnicate"],
    ] {
        let out = host(&root, &state, args);
        assert_eq!(
            out.status.code(),
            Some(64),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let serve = Command::new(env!("CARGO_BIN_EXE_mesh-host"))
        .args(["--state-dir"])
        .arg(&state)
        .arg("serve")
        .env_remove("MESH_NODE")
        .env_remove("MESH_BUS")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&serve.stderr);
    assert_eq!(serve.status.code(), Some(64), "{said}");
    assert!(said.contains("serve needs --node NODE"), "{said}");
    for args in [&["--help"][..], &["apply", "--help"], &["--version"]] {
        assert_eq!(host(&root, &state, args).status.code(), Some(0), "{args:?}");
    }
    assert!(
        !root.exists() && !state.exists(),
        "a usage error made a directory"
    );
}
