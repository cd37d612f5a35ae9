//! The ten modules the merge benches roll out (the tests' own, [`super::ten_modules`]), and
//! the real git repository that holds them.

use super::ten_modules::module_files;
use std::path::Path;
use std::process::Command;

/// A git repository at `repo` of the ten modules at `v1`, committed on `main`.
pub fn repository(repo: &Path) {
    for (path, text) in module_files("v1") {
        write(&repo.join(path), &text);
    }
    git(repo, &["init", "-q", "-b", "main"]);
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", "ten modules"]);
}

/// Writes `text` at `path`, making its directories.
pub fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Runs git in `dir`, as a bench's committer; panics when it fails.
pub fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=Bench",
            "-c",
            "user.email=bench@example.internal",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}
