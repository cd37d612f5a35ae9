//! Runs the real `mesh-controller` binary against a temporary mesh home.

#![allow(dead_code)]

pub mod daemon;
pub mod fleet;
pub mod in_process;
pub mod secrets;
pub use mesh_test_support::pki;
pub use mesh_test_support::wait::wait_for;
pub mod simulated;
pub mod ten_modules;

use mesh_test_support::registry::{RegistryOptions, Secured, TestRegistry};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A mesh home made with `init --example` in a temporary directory.
///
/// The example's `home` node runs a container under podman, which every test shares: its
/// in-process host names it with the home's own prefix (the digest of the home's path), so
/// homes run side by side, and a `Mesh` removes the containers its hosts made when dropped.
pub struct Mesh {
    dir: tempfile::TempDir,
    media_port: u16,
}

impl Drop for Mesh {
    fn drop(&mut self) {
        let Ok(roots) = std::fs::read_dir(self.home().join("roots")) else {
            return;
        };
        for root in roots.flatten() {
            let label = format!("label=io.mesh.host={}", root.path().display());
            let Ok(out) = Command::new("podman")
                .args(["ps", "--all", "--quiet", "--filter", &label])
                .output()
            else {
                return;
            };
            for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("podman")
                    .args(["rm", "--force", "--time", "0", id])
                    .output();
            }
        }
    }
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
            media_port: mesh_test_support::wait::free_port(),
        };
        let run = mesh.run(&["init", "--example"]);
        assert_eq!(run.code, 0, "init failed: {}", run.stderr);
        // The example's media container publishes its port (8096 by default) on the host: each
        // home's is one the system says is free, so no test binds a fixed port.
        let module = mesh.home().join("catalogue/modules/media/module.toml");
        let text = std::fs::read_to_string(&module).unwrap();
        assert!(text.contains("\nport = 8096\n"), "{text}");
        std::fs::write(
            &module,
            text.replace(
                "\nport = 8096\n",
                &format!("\nport = {}\n", mesh.media_port),
            ),
        )
        .unwrap();
        mesh
    }

    /// The host port the example's media container publishes (its `port` setting's default
    /// in this home): free when the home was made.
    pub fn media_port(&self) -> u16 {
        self.media_port
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
        self.run_env(args, &[])
    }

    /// Runs the controller with `args` and the environment variables `env` set (e.g.
    /// `FAILPOINTS`, a fail point).
    pub fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let out = Command::new(env!("CARGO_BIN_EXE_mesh-controller"))
            .arg("--home")
            .arg(self.home())
            .args(args)
            .env_remove("MESH_HOME")
            .env_remove("FAILPOINTS")
            .envs(env.iter().copied())
            .output()
            .expect("the controller runs");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8(out.stdout).expect("UTF-8 output"),
            stderr: String::from_utf8(out.stderr).expect("UTF-8 output"),
        }
    }

    /// Runs the controller with `args`, `input` on its standard input.
    pub fn run_stdin(&self, args: &[&str], input: &[u8]) -> Run {
        use std::io::Write as _;
        let mut child = Command::new(env!("CARGO_BIN_EXE_mesh-controller"))
            .arg("--home")
            .arg(self.home())
            .args(args)
            .env_remove("MESH_HOME")
            .env_remove("FAILPOINTS")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the controller starts");
        child
            .stdin
            .take()
            .expect("its standard input")
            .write_all(input)
            .expect("the controller reads its standard input");
        let out = child.wait_with_output().expect("the controller runs");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8(out.stdout).expect("UTF-8 output"),
            stderr: String::from_utf8(out.stderr).expect("UTF-8 output"),
        }
    }

    /// Starts the controller with `args` without waiting, its output discarded.
    pub fn spawn(&self, args: &[&str]) -> std::process::Child {
        Command::new(env!("CARGO_BIN_EXE_mesh-controller"))
            .arg("--home")
            .arg(self.home())
            .args(args)
            .env_remove("MESH_HOME")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the controller starts")
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

/// A real git repository of modules in a temporary directory.
pub struct Repo {
    dir: tempfile::TempDir,
}

impl Repo {
    /// A new repository on branch `main`, with nothing committed.
    pub fn new() -> Repo {
        let repo = Repo {
            dir: tempfile::tempdir().expect("a temporary directory"),
        };
        repo.git(&["init", "-q", "-b", "main"]);
        repo
    }

    /// Its directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Runs git in it, returning standard output.
    pub fn git(&self, args: &[&str]) -> String {
        git(self.path(), args)
    }

    /// Writes files (path relative to the repository, text), one `(path, text)` each.
    pub fn write(&self, files: &[(&str, &str)]) {
        for (path, text) in files {
            let path = self.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    /// Every commit, oldest first, as `(full id, "[commit-N]")` and `(12 characters,
    /// "[commit-N]")`, for [`redact`].
    pub fn commit_names(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (n, id) in self
            .git(&["rev-list", "--reverse", "HEAD"])
            .lines()
            .enumerate()
        {
            out.push((id.to_owned(), format!("[commit-{}]", n + 1)));
            out.push((id[..12].to_owned(), format!("[commit-{}]", n + 1)));
        }
        out
    }

    /// Commits everything, returning the commit id.
    pub fn commit(&self, message: &str) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", message]);
        self.git(&["rev-parse", "HEAD"])
    }
}

/// Runs git in `dir` as a test user, returning standard output, trimmed; fails the test when
/// git fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.internal",
        ])
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("UTF-8")
        .trim()
        .to_owned()
}

/// Replaces what changes from run to run — times, digests, durations, the given words (temp
/// paths, commit ids) — so output can be a snapshot.
pub fn redact(text: &str, words: &[(&str, &str)]) -> String {
    let mut text = text.to_owned();
    for (word, name) in words {
        text = text.replace(word, name);
    }
    let mut out = String::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let rest: String = chars[i..chars.len().min(i + 20)].iter().collect();
        // 2026-11-29T16:00:00Z
        let is_time = rest.len() == 20
            && rest.chars().enumerate().all(|(k, c)| match k {
                4 | 7 => c == '-',
                10 => c == 'T',
                13 | 16 => c == ':',
                19 => c == 'Z',
                _ => c.is_ascii_digit(),
            });
        if is_time {
            out.push_str("[time]");
            i += 20;
            continue;
        }
        if rest.starts_with("sha256:") {
            let mut j = i + 7;
            while j < chars.len() && chars[j].is_ascii_hexdigit() {
                j += 1;
            }
            out.push_str("sha256:[digest]");
            i = j;
            continue;
        }
        if rest.starts_with("for ") && (i == 0 || chars[i - 1] == ' ') {
            let mut j = i + 4;
            while j < chars.len() && chars[j].is_ascii_digit() {
                j += 1;
            }
            if j > i + 4 && chars[j..].starts_with(&[' ', 's']) {
                out.push_str("for [n] s");
                i = j + 2;
                continue;
            }
        }
        if rest.starts_with('(') {
            // "(379 bytes)"
            let mut j = i + 1;
            while j < chars.len() && chars[j].is_ascii_digit() {
                j += 1;
            }
            let tail: String = chars[j..chars.len().min(j + 7)].iter().collect();
            if j > i + 1 && tail == " bytes)" {
                out.push_str("([n] bytes)");
                i = j + 7;
                continue;
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// The test kit's `docker-registry` as the controller's tests use it: plain, or secured with its
/// own [`pki::TestPki`] and htpasswd users — the controller's (push, delete) and the hosts'
/// (pull; distribution cannot make it read-only, see the book's store page), each given to the
/// mesh as a credentials file (`USER:PASSWORD`, 0600). Stopped when dropped.
pub struct Registry {
    registry: TestRegistry,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// When secured: its CA and the credentials files.
    pub secured: Option<SecuredRegistry>,
}

/// A secured registry's CA and credentials files.
pub struct SecuredRegistry {
    /// The certificates (the CA a client trusts is `pki.ca_file`).
    pub pki: pki::TestPki,
    /// The controller's credentials file (and the collector's).
    pub controller_credentials: PathBuf,
    /// The hosts' credentials file.
    pub host_credentials: PathBuf,
    /// Holds the credentials files.
    _files: tempfile::TempDir,
}

/// Who a secured registry's flags are for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StoreUser {
    /// The controller (and the collector): push and delete.
    Controller,
    /// A host: pull.
    Host,
}

impl Registry {
    /// Starts one over plain HTTP, anyone let in, and waits until it answers `/v2/`.
    pub fn start() -> Registry {
        let registry = TestRegistry::start_with(PLAIN, None);
        Registry {
            port: registry.port,
            registry,
            secured: None,
        }
    }

    /// Makes the registry answer 500 to what it cannot store: a regular file stands where its
    /// storage's first directory goes. Only before anything was stored (it would hide it).
    pub fn break_storage(&self) {
        let docker = self.registry.dir().join("storage/docker");
        assert!(!docker.exists(), "the registry stored something already");
        std::fs::write(docker, "not a directory\n").unwrap();
    }

    /// Undoes [`Registry::break_storage`]: the registry stores again.
    pub fn mend_storage(&self) {
        std::fs::remove_file(self.registry.dir().join("storage/docker")).unwrap();
    }

    /// Starts one serving TLS only with htpasswd users, and waits until it answers `/v2/`
    /// (401 to the anonymous).
    pub fn start_secured() -> Registry {
        use std::os::unix::fs::PermissionsExt as _;
        let pki = pki::TestPki::new("store");
        let files = tempfile::tempdir().expect("a temporary directory");
        let tag = std::process::id();
        let users: Vec<(String, String)> = ["mesh-controller", "mesh-host"]
            .iter()
            .map(|user| (user.to_string(), format!("{user}-{tag}")))
            .collect();
        let credentials: Vec<PathBuf> = users
            .iter()
            .map(|(user, password)| {
                let file = files.path().join(format!("{user}.credentials"));
                std::fs::write(&file, format!("{user}:{password}\n")).unwrap();
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
                file
            })
            .collect();
        let pairs: Vec<(&str, &str)> = users
            .iter()
            .map(|(user, password)| (user.as_str(), password.as_str()))
            .collect();
        let registry = TestRegistry::start_with(
            PLAIN,
            Some(Secured {
                pki: &pki,
                users: &pairs,
            }),
        );
        Registry {
            port: registry.port,
            registry,
            secured: Some(SecuredRegistry {
                pki,
                controller_credentials: credentials[0].clone(),
                host_credentials: credentials[1].clone(),
                _files: files,
            }),
        }
    }

    /// `http://127.0.0.1:PORT` (`https://` when secured).
    pub fn url(&self) -> String {
        self.registry.base_url()
    }

    /// The flags that give `user` this store: `--store URL` and, when secured, its CA and
    /// `user`'s credentials.
    pub fn flags(&self, user: StoreUser) -> Vec<String> {
        let mut flags = vec!["--store".to_owned(), self.url()];
        if let Some(secured) = &self.secured {
            flags.extend([
                "--store-ca".to_owned(),
                secured.pki.ca_file.display().to_string(),
                "--store-credentials".to_owned(),
                secured.credentials(user).display().to_string(),
            ]);
        }
        flags
    }

    /// A GET as the controller: the whole response (status line, headers, body), if it
    /// answered.
    pub fn get(&self, path: &str) -> Option<String> {
        self.get_as(Some(StoreUser::Controller), path)
    }

    /// A GET as `user` (`None`: anonymous), over TLS when secured (trusting its CA only).
    pub fn get_as(&self, user: Option<StoreUser>, path: &str) -> Option<String> {
        let credentials = match (&self.secured, user) {
            (Some(secured), Some(user)) => {
                Some(std::fs::read_to_string(secured.credentials(user)).unwrap())
            }
            _ => None,
        };
        self.registry
            .get_as(credentials.as_deref().map(str::trim), path)
    }
}

impl SecuredRegistry {
    fn credentials(&self, user: StoreUser) -> &Path {
        match user {
            StoreUser::Controller => &self.controller_credentials,
            StoreUser::Host => &self.host_credentials,
        }
    }
}

/// The controller's tests' registry: deletion on, no blob-descriptor cache (as a registry
/// installed by its package runs).
const PLAIN: RegistryOptions = RegistryOptions {
    delete_enabled: true,
    blob_descriptor_cache: false,
};

/// The layer of `module` (`node`'s, or the mesh layer) a test's settings call names, asked by a
/// command the history keeps.
pub fn layer<'a>(module: &'a str, node: Option<&'a str>) -> mesh_controller::SettingsOptions<'a> {
    mesh_controller::SettingsOptions {
        module,
        node,
        command: "mesh-controller settings (a test)",
    }
}
