//! `plan --all --diff --detailed-exitcode` and `status` over pending changes, as a person runs
//! them: each cause of a pending node — a setting set and not pushed, a module assigned and
//! never sent, a node added and never sent, a secrets rotation — makes `status` name the node
//! (exit 3) and `plan --all --diff` list it resource by resource (exit 2); after `push --all`
//! both are quiet again (exit 0). The book's example without its container module, the binary
//! run on it.

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs the controller on `home` with `args` (and `input` on standard input).
pub(crate) fn run(home: &Path, args: &[&str], input: &[u8]) -> Output {
    use std::io::Write as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_mesh-controller"))
        .arg("--home")
        .arg(home)
        .args(args)
        .env_remove("MESH_BUS")
        .env_remove("MESH_STORE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// Runs it and checks its exit code; standard output.
#[track_caller]
pub(crate) fn expect(home: &Path, args: &[&str], code: i32) -> String {
    let out = run(home, args, b"");
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Rewrites the home's inventory with `edit`.
pub(crate) fn edit_inventory(home: &Path, edit: impl FnOnce(&str) -> String) {
    let path = home.join("inventory.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let edited = edit(&text);
    assert_ne!(edited, text);
    std::fs::write(&path, edited).unwrap();
}

/// `text` with every `sha256:` digest (whole or shortened) as `sha256:[digest]`.
fn redacted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("sha256:") {
        out.push_str(&rest[..at + "sha256:".len()]);
        rest = &rest[at + "sha256:".len()..];
        let hex = rest
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(rest.len());
        out.push_str("[digest]");
        rest = &rest[hex..];
    }
    out.push_str(rest);
    out
}

#[test]
fn plan_all_diff_lists_every_pending_node_and_status_names_each_until_they_are_pushed() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    expect(&home, &["init", "--example"], 0);
    edit_inventory(&home, |text| text.replace("media = [\"home\"]\n", ""));
    let set = run(
        &home,
        &[
            "settings",
            "set-secret",
            "base",
            "admin-email",
            "--node",
            "control",
        ],
        b"root@control.internal",
    );
    assert!(set.status.success(), "{set:?}");
    expect(&home, &["push", "--all"], 0);
    expect(&home, &["status"], 0);
    let quiet = expect(
        &home,
        &["plan", "--all", "--diff", "--detailed-exitcode"],
        0,
    );
    assert_eq!(quiet, "", "nothing differs");

    // A setting set and not pushed; a module assigned and never sent; a node added and never
    // sent; every secret sealed anew under a newer key.
    expect(
        &home,
        &[
            "settings",
            "set",
            "base",
            "--node",
            "home",
            r#"{"motd": "a new day"}"#,
        ],
        0,
    );
    edit_inventory(&home, |text| {
        text.replace(
            "operator = [\"laptop\"]",
            "operator = [\"laptop\", \"control\"]",
        )
        .replace("[nodes.laptop]\n", "[nodes.laptop]\n[nodes.spare]\n")
        .replace(
            "base = [\"control\", \"home\", \"laptop\"]",
            "base = [\"control\", \"home\", \"laptop\", \"spare\"]",
        )
    });
    expect(&home, &["secrets", "rotate"], 0);

    let status = expect(&home, &["status"], 3);
    let pending = &status[status
        .find("pending (")
        .unwrap_or_else(|| panic!("{status}"))..];
    insta::assert_snapshot!("status_pending", redacted(pending));
    let diff = expect(
        &home,
        &["plan", "--all", "--diff", "--detailed-exitcode"],
        2,
    );
    for node in ["control: ", "home: ", "spare: "] {
        assert!(
            diff.lines().any(|line| line.starts_with(node)),
            "{node} in {diff}"
        );
    }
    assert!(!diff.contains("laptop:"), "{diff}");
    insta::assert_snapshot!("plan_all_diff", redacted(&diff));
    let json: serde_json::Value = serde_json::from_str(&expect(
        &home,
        &["plan", "--all", "--diff", "--output", "json"],
        0,
    ))
    .unwrap();
    let nodes: Vec<&str> = json["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, ["control", "home", "spare"]);

    expect(&home, &["push", "--all"], 0);
    expect(&home, &["status"], 0);
    let quiet = expect(
        &home,
        &["plan", "--all", "--diff", "--detailed-exitcode"],
        0,
    );
    assert_eq!(quiet, "", "nothing differs after the push");
}
