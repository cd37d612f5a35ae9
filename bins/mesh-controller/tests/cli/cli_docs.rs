//! Completions and manual pages: each of the three binaries makes them from its own
//! command line, a real `bash` reads the completion script without a syntax error and real
//! `groff` formats every page without a warning. The test command keeps them for the book.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The three binaries, built beside this test's `mesh-controller` (the test command builds
/// `mesh-host` and `mesh-collector` first).
fn binaries() -> Vec<(&'static str, PathBuf)> {
    let controller = PathBuf::from(env!("CARGO_BIN_EXE_mesh-controller"));
    let mut found = vec![("mesh-controller", controller.clone())];
    for name in ["mesh-host", "mesh-collector"] {
        let path = controller.with_file_name(name);
        assert!(
            path.exists(),
            "{} is not built: run `cargo build -p mesh-host -p mesh-collector` first",
            path.display()
        );
        found.push((name, path));
    }
    found
}

fn run(binary: &Path, args: &[&str]) -> String {
    let out = Command::new(binary).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{} {args:?}: {}",
        binary.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_binary_makes_completions_bash_reads_and_man_pages_groff_formats() {
    let dir = tempfile::tempdir().unwrap();
    for (name, binary) in binaries() {
        let script = run(&binary, &["completions", "bash"]);
        let file = dir.path().join(format!("{name}.bash"));
        std::fs::write(&file, &script).unwrap();
        let checked = Command::new("bash").arg("-n").arg(&file).output().unwrap();
        assert!(
            checked.status.success(),
            "{name}'s bash completions: {}",
            String::from_utf8_lossy(&checked.stderr)
        );
        assert!(
            script.contains(&format!("complete -F _{}", name.replace('-', "__"))),
            "{name}"
        );
        for shell in ["zsh", "fish", "elvish", "powershell"] {
            assert!(
                !run(&binary, &["completions", shell]).is_empty(),
                "{name} {shell}"
            );
        }

        let pages = dir.path().join(name);
        let listed = run(&binary, &["man", "--dir", pages.to_str().unwrap()]);
        let top = pages.join(format!("{name}.1"));
        assert!(listed.lines().any(|l| Path::new(l) == top), "{listed}");
        let title = format!(".TH {name} 1");
        assert!(
            std::fs::read_to_string(&top).unwrap().contains(&title),
            "{name}"
        );
        assert!(run(&binary, &["man"]).contains(&title), "{name}");
        for page in listed.lines() {
            let formatted = Command::new("groff")
                .args(["-k", "-man", "-Tutf8", "-ww", "-z"])
                .arg(page)
                .output()
                .unwrap();
            assert!(
                formatted.status.success() && formatted.stderr.is_empty(),
                "{page}: {}",
                String::from_utf8_lossy(&formatted.stderr)
            );
        }
    }
    // The controller's pages include one per subcommand, e.g. the enrollment a person follows.
    let pages = dir.path().join("mesh-controller");
    assert!(pages.join("mesh-controller-push.1").exists());
    assert!(pages.join("mesh-controller-plans-resume.1").exists());
}

#[test]
fn completions_and_man_need_no_mesh_home() {
    let dir = tempfile::tempdir().unwrap();
    for (name, binary) in binaries() {
        let out = Command::new(&binary)
            .args(["completions", "bash"])
            .current_dir(dir.path())
            .env("MESH_HOME", dir.path().join("no-such-home"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {out:?}");
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing was made"
    );
}
