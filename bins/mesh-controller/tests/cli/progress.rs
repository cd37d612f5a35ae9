//! Progress on a terminal: a rollout draws a bar on standard error when it is a
//! terminal — a real one, made by `script` (util-linux) — and prints plain lines otherwise,
//! never a bar in what a script reads.

use std::path::Path;
use std::process::Command;

/// A mesh home from the example, without its container module, with a repository `demo` whose
/// module `hello` (one file) is assigned to every node.
fn bed(dir: &Path) -> std::path::PathBuf {
    let home = dir.join("home");
    let controller = env!("CARGO_BIN_EXE_mesh-controller");
    let run = |args: &[&str]| {
        let out = Command::new(controller)
            .arg("--home")
            .arg(&home)
            .args(args)
            .env_remove("MESH_BUS")
            .env_remove("MESH_STORE")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    };
    run(&["init", "--example"]);
    let repo = dir.join("repo");
    std::fs::create_dir_all(repo.join("modules/hello/files")).unwrap();
    std::fs::write(
        repo.join("modules/hello/module.toml"),
        "name = \"hello\"\n[files.g]\nsource = \"files/g\"\npath = \"/etc/g\"\n",
    )
    .unwrap();
    std::fs::write(repo.join("modules/hello/files/g"), "hi\n").unwrap();
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t.invalid",
            "commit",
            "-qm",
            "hello",
        ],
    ] {
        assert!(Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(args)
            .status()
            .unwrap()
            .success());
    }
    run(&["repo", "add", "demo", repo.to_str().unwrap()]);
    let inventory = home.join("inventory.toml");
    // No container: this test leaves nothing in the machine's podman.
    let text = std::fs::read_to_string(&inventory)
        .unwrap()
        .replace(
            "[assignments]\n",
            "[assignments]\nhello = [\"control\", \"home\", \"laptop\"]\n",
        )
        .replace("media = [\"home\"]\n", "");
    std::fs::write(&inventory, text).unwrap();
    home
}

#[test]
fn a_rollout_draws_a_bar_on_a_terminal_and_plain_lines_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let home = bed(dir.path());
    let controller = env!("CARGO_BIN_EXE_mesh-controller");
    let merge = format!("{controller} --home {} merge demo", home.display());
    // On a terminal: the bar, counting nodes applied of all.
    let out = Command::new("script")
        .args(["-qec", &merge, "/dev/null"])
        .env_remove("MESH_BUS")
        .env_remove("MESH_STORE")
        .output()
        .unwrap();
    let terminal = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{terminal}");
    assert!(terminal.contains("plan-1 `hello` ["), "{terminal}");
    assert!(terminal.contains("3/3 applied"), "{terminal}");
    assert!(terminal.contains("done on 3 node(s)"), "{terminal}");
    // A push to the fleet counts the nodes heard of all the same way.
    let push = format!("{controller} --home {} push --all", home.display());
    let out = Command::new("script")
        .args(["-qec", &push, "/dev/null"])
        .env_remove("MESH_BUS")
        .env_remove("MESH_STORE")
        .output()
        .unwrap();
    let terminal = String::from_utf8_lossy(&out.stdout);
    assert!(terminal.contains("push: nodes ["), "{terminal}");
    assert!(terminal.contains("3/3 applied"), "{terminal}");

    // Not a terminal: the lines alone, no bar and no escape codes.
    std::fs::write(dir.path().join("repo/modules/hello/files/g"), "hi again\n").unwrap();
    assert!(Command::new("git")
        .arg("-C")
        .arg(dir.path().join("repo"))
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t.invalid",
            "commit",
            "-qam",
            "again"
        ])
        .status()
        .unwrap()
        .success());
    let out = Command::new(controller)
        .arg("--home")
        .arg(&home)
        .args(["merge", "demo"])
        .env_remove("MESH_BUS")
        .env_remove("MESH_STORE")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("done on 3 node(s)"), "{stdout}");
    for text in [&stdout, &stderr] {
        assert!(!text.contains("applied ("), "{text}");
        assert!(!text.contains('\u{1b}'), "an escape code: {text:?}");
    }
}
