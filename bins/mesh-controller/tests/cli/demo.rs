//! The demo: `mesh-controller demo` runs from nothing, in a temporary home, and each
//! step shows what it is there to show — the guards, not only the plain path. It runs with
//! podman (its container steps run: a held move and `--move`, a window) and without (those
//! steps say why they are skipped).

use std::path::Path;
use std::process::{Command, Output};

/// A port nothing listens on now, as the system chooses it: no test binds a fixed port.
fn free_port() -> u16 {
    std::net::TcpListener::bind(("0.0.0.0", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs the demo with `path` as `PATH` (`None`: this process's), its media container on
/// `port`; it must exit 0.
fn demo(path: Option<&Path>, port: u16) -> (Output, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mesh-controller"));
    command
        .args(["demo", "--port", &port.to_string()])
        .env_remove("MESH_HOME")
        .env_remove("MESH_BUS")
        .env_remove("MESH_STORE");
    if let Some(path) = path {
        command.env("PATH", path);
    }
    let out = command.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

/// The section of `text` that step `step` (`== N.`) prints.
fn section<'a>(text: &'a str, step: &str) -> &'a str {
    let at = text
        .find(step)
        .unwrap_or_else(|| panic!("no step {step}:\n{text}"));
    let rest = &text[at..];
    let end = rest[step.len()..]
        .find("\n== ")
        .map_or(rest.len(), |i| i + step.len());
    &rest[..end]
}

/// Checks each step's key line, the steps in order (a step may come again for another line).
fn check_steps(text: &str, steps: &[(&str, &str)]) {
    let mut rest: &str = text;
    for (step, key_line) in steps {
        let shown = section(rest, step);
        assert!(
            shown.contains(key_line),
            "step {step} does not show `{key_line}`:\n{shown}"
        );
        // The next key line is looked for from this step on (a step may have several).
        rest = &rest[rest.find(step).unwrap()..];
    }
}

/// What the demo shows on any machine.
const EVERY_STEP: &[(&str, &str)] = &[
    ("== 1.", "node home: backup, base, media, storage, tls"),
    ("== 3.", "laptop: sent"),
    ("== 5.", "managed by mesh"),
    ("== 6.", "unchanged"),
    (
        "== 7.",
        "refused, nothing changed: the new layer would remove 1 key",
    ),
    ("== 8.", "the layer it replaced is kept as revision 1"),
    ("== 9.", "~ media/container/media (recreated)"),
    ("== 10.", "applied    base/file/mesh-conf (content)"),
    (
        "== 11.",
        "mount `/media`: from `/srv/disk1/media` to `/srv/disk2/media`",
    ),
    ("== 12.", "home: sent"),
    ("== 13.", "`hello`: sent `control` (first)"),
    ("== 14.", "stopped at `control`"),
    ("== 15.", "stopped rollouts:"),
    ("== 16.", "applied    base/file/motd (content)"),
    ("== 17.", "push home"),
];

/// The other nodes kept the first build in the second merge: only `control` was sent it.
fn check_second_merge(text: &str) {
    let fourteen = section(text, "== 14.");
    assert!(!fourteen.contains("sent `home`"), "{fourteen}");
    assert!(!fourteen.contains("sent `laptop`"), "{fourteen}");
}

// CI runs with podman (scripts/test sets it up as this machine needs, with the test image the
// demo's example uses); this test needs it and fails, never skips, without it.
#[test]
fn the_demo_tells_the_story_step_by_step_with_its_containers_running() {
    let version = Command::new("podman").arg("--version").output();
    assert!(
        version.as_ref().is_ok_and(|out| out.status.success()),
        "podman is needed (the README's test command sets it up): {version:?}"
    );
    let (_, text) = demo(None, free_port());
    check_steps(&text, EVERY_STEP);
    check_steps(
        &text,
        &[
            ("== 3.", "applied    media/container/media (created)"),
            // The move: the container is made again with its data's new place.
            (
                "== 12.",
                "applied    media/container/media (mounts[/media].source)",
            ),
            (
                "== 17.",
                "held-still media/container/media: held still by step `demo-backup`",
            ),
            ("== 17.", "window released"),
        ],
    );
    check_second_merge(&text);
    // Everything the demo made in podman is gone with its home.
    let held = section(&text, "== 17.");
    let name = held
        .split("window `demo-backup` open: ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no held container named:\n{held}"));
    let prefix = &name[..name.find("-home-").unwrap()];
    let left = Command::new("podman")
        .args(["ps", "--all", "--format", "{{.Names}}"])
        .output()
        .unwrap();
    let left = String::from_utf8_lossy(&left.stdout);
    assert!(
        !left.lines().any(|line| line.starts_with(prefix)),
        "the demo left containers behind:\n{left}"
    );
}

/// A directory with every program of this machine but podman, for `PATH`.
fn path_without_podman(bin: &tempfile::TempDir) -> std::path::PathBuf {
    for dir in ["/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"] {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let link = bin.path().join(&name);
            if name != "podman" && !link.exists() {
                std::os::unix::fs::symlink(entry.path(), link).unwrap();
            }
        }
    }
    bin.path().to_owned()
}

#[test]
fn without_podman_the_demo_says_which_steps_it_skips_and_why() {
    let bin = tempfile::tempdir().unwrap();
    let (_, text) = demo(Some(&path_without_podman(&bin)), free_port());
    check_steps(&text, EVERY_STEP);
    check_steps(
        &text,
        &[
            ("== 3.", "podman is not installed"),
            (
                "== 10.",
                "the container cannot run on this machine (no podman): expected here",
            ),
            ("== 17.", "skipped: no podman here"),
        ],
    );
    check_second_merge(&text);
}

#[test]
fn with_a_podman_that_cannot_run_its_image_the_demo_exits_0_and_says_why() {
    // Found on main: podman present without the demo's image, and the demo exited 1 at its
    // window step. This podman answers its version and refuses every container.
    let bin = tempfile::tempdir().unwrap();
    let path = path_without_podman(&bin);
    let podman = path.join("podman");
    std::fs::write(
        &podman,
        "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'podman version 9.9.9'; exit 0; fi\n\
         echo 'Error: this podman runs no containers (a test stand-in)' >&2\nexit 125\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&podman, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (_, text) = demo(Some(&path), free_port());
    check_steps(&text, EVERY_STEP);
    check_steps(
        &text,
        &[
            (
                "== 10.",
                "the container cannot run on this machine (podman is here and could not run it",
            ),
            (
                "== 17.",
                "skipped: `home`'s media container is not running here (",
            ),
            ("== 17.", "this podman runs no containers"),
        ],
    );
}

#[test]
fn with_the_examples_port_taken_the_demo_picks_another_and_says_which() {
    let taken = std::net::TcpListener::bind(("0.0.0.0", 0)).unwrap();
    let port = taken.local_addr().unwrap().port();
    let (_, text) = demo(None, port);
    let said = format!("port {port} is taken on this machine: the media container listens on ");
    let one = section(&text, "== 1.");
    let chosen: u16 = one
        .split(&said)
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|word| word.parse().ok())
        .unwrap_or_else(|| panic!("step 1 does not say which port:\n{one}"));
    assert_ne!(chosen, port);
    check_steps(&text, EVERY_STEP);
    // Its container runs on the port chosen (this test runs with podman, as the first does).
    check_steps(
        &text,
        &[("== 3.", "applied    media/container/media (created)")],
    );
    drop(taken);
}
