//! Runs the real `mesh-controller` binary against a temporary mesh home.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A mesh home made with `init --example` in a temporary directory.
pub struct Mesh {
    dir: tempfile::TempDir,
}

/// What a command printed and how it ended.
pub struct Run {
    /// The exit code.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Mesh {
    /// A new home from the book's example.
    pub fn example() -> Mesh {
        let mesh = Mesh {
            dir: tempfile::tempdir().expect("a temporary directory"),
        };
        let run = mesh.run(&["init", "--example"]);
        assert_eq!(run.code, 0, "init failed: {}", run.stderr);
        mesh
    }

    /// The home directory.
    pub fn home(&self) -> &Path {
        self.dir.path()
    }

    /// A node's sandbox root.
    pub fn root(&self, node: &str) -> PathBuf {
        self.home().join("roots").join(node)
    }

    /// Runs the controller with `args`.
    pub fn run(&self, args: &[&str]) -> Run {
        let out = Command::new(env!("CARGO_BIN_EXE_mesh-controller"))
            .arg("--home")
            .arg(self.home())
            .args(args)
            .env_remove("MESH_HOME")
            .output()
            .expect("the controller runs");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8(out.stdout).expect("UTF-8 output"),
            stderr: String::from_utf8(out.stderr).expect("UTF-8 output"),
        }
    }

    /// Runs and expects exit `code`, returning standard output.
    pub fn expect(&self, args: &[&str], code: i32) -> String {
        let run = self.run(args);
        assert_eq!(
            run.code,
            code,
            "`{}` exited {} (expected {code})\nstdout:\n{}\nstderr:\n{}",
            args.join(" "),
            run.code,
            run.stdout,
            run.stderr
        );
        run.stdout
    }

    /// Every file under `dir` with its bytes, for "nothing changed" comparisons.
    pub fn snapshot_tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        fn walk(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            let mut entries: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
            entries.sort();
            for path in entries {
                if path.is_dir() {
                    out.push((path.clone(), Vec::new()));
                    walk(&path, out);
                } else {
                    let bytes = std::fs::read(&path).unwrap_or_default();
                    out.push((path, bytes));
                }
            }
        }
        walk(dir, &mut out);
        out
    }
}
