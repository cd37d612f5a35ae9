//! Log lines as a person or a log collector reads them: `mesh-host serve`
//! wrote ANSI colour codes to a standard error that was a pipe. Colour only on a terminal, and
//! never with `NO_COLOR`.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};

#[test]
fn serve_logs_without_colour_codes_when_standard_error_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("password");
    std::fs::write(&password, "secret\n").unwrap();
    // A secret file others may read is refused.
    std::fs::set_permissions(
        &password,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    // Nothing listens on port 1: the host says it cannot connect, and tries again.
    let mut host = Command::new(env!("CARGO_BIN_EXE_mesh-host"))
        .args([
            "--node",
            "box",
            "--bus",
            "nats://127.0.0.1:1",
            "--password-file",
        ])
        .arg(&password)
        .arg("--root")
        .arg(dir.path().join("root"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .args(["--containers", "none", "serve"])
        .env("MESH_LOG", "info")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mesh-host runs");
    let stderr = BufReader::new(host.stderr.take().unwrap());
    let mut seen = Vec::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        let done = line.contains("cannot connect to the bus");
        seen.push(line);
        if done {
            break;
        }
    }
    host.kill().unwrap();
    host.wait().unwrap();
    let text = seen.join("\n");
    assert!(
        text.contains("cannot connect to the bus"),
        "the host stopped before it said so:\n{text}"
    );
    assert!(
        !text.contains('\u{1b}'),
        "colour codes in a pipe:\n{text:?}"
    );
    assert!(text.contains(" WARN "), "{text}");
}
