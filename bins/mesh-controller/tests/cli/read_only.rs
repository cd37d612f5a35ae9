//! A command that only reads writes nothing: `status`, `plan`, `plans`, `settings show`,
//! `runtimes` and `records list|get|export`, run in an empty directory (with a bus named, as an
//! operator trying the bus from a new shell does), make no home, key or password there, say
//! there is no home, and exit 1. An error says its cause once.
//
// Found running `mesh-controller --bus URL status` in an empty directory: it made
// `./mesh-home/bus/passwords/controller` before failing to connect, and said "Connection refused"
// three times over.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Every path under `dir`, relative to it.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(next) = todo.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            found.push(path.strip_prefix(dir).unwrap().to_path_buf());
            if path.is_dir() {
                todo.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Runs the controller in `dir` with `args`, no `MESH_*` variable from the test's own
/// environment: its exit code and standard error.
fn controller_in(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mesh-controller"));
    for (variable, _) in std::env::vars() {
        if variable.starts_with("MESH_") && variable != "MESH_NATS_SERVER" {
            command.env_remove(variable);
        }
    }
    let output = command.current_dir(dir).args(args).output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_command_that_only_reads_makes_nothing_in_an_empty_directory() {
    // Nothing listens on this port: the bus is named, never reached.
    let bus = format!("nats://127.0.0.1:{}", mesh_test_support::wait::free_port());
    let commands: [&[&str]; 10] = [
        &["status"],
        &["plan", "web"],
        &["plans"],
        &["plans", "show", "plan-1"],
        &["settings", "show", "web"],
        &["runtimes"],
        &["records", "list"],
        &["records", "get", "inventory.toml"],
        &["records", "export", "backup.mesh"],
        &["status", "--output", "json"],
    ];
    for command in commands {
        for with_bus in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let args: Vec<&str> = if with_bus {
                ["--bus", bus.as_str()]
                    .into_iter()
                    .chain(command.iter().copied())
                    .collect()
            } else {
                command.to_vec()
            };
            let (code, stderr) = controller_in(dir.path(), &args);
            assert_eq!(code, Some(1), "{args:?}: {stderr}");
            assert!(
                stderr.contains("there is no mesh home at mesh-home"),
                "{args:?}: {stderr}"
            );
            assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
            assert_eq!(walk(dir.path()), Vec::<PathBuf>::new(), "{args:?} wrote");
        }
    }
}

#[test]
fn a_home_without_the_controllers_password_gets_none_from_a_command_that_only_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = controller_in(dir.path(), &["init"]);
    assert_eq!(code, Some(0), "{stderr}");
    let before = walk(dir.path());
    let bus = format!("nats://127.0.0.1:{}", mesh_test_support::wait::free_port());
    let (code, stderr) = controller_in(dir.path(), &["--bus", &bus, "status"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("a command that only reads makes none"),
        "{stderr}"
    );
    assert_eq!(walk(dir.path()), before, "status wrote in the home");
}

#[test]
fn a_bus_that_refuses_the_connection_is_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = controller_in(dir.path(), &["init"]);
    assert_eq!(code, Some(0), "{stderr}");
    let passwords = dir.path().join("mesh-home/bus/passwords");
    std::fs::create_dir_all(&passwords).unwrap();
    let password = passwords.join("controller");
    std::fs::write(&password, "not-checked-3f1b\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o600)).unwrap();
    let before = walk(dir.path());
    let bus = format!("nats://127.0.0.1:{}", mesh_test_support::wait::free_port());
    let (code, stderr) = controller_in(dir.path(), &["--bus", &bus, "status"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(
        stderr.matches("Connection refused").count(),
        1,
        "the cause said more than once: {stderr}"
    );
    assert_eq!(walk(dir.path()), before, "status wrote in the home");
}

/// The mesh's exit-code table on the controller: a wrong command line is a usage error (64),
/// never clap's 2 (which means "refused" here) nor `status`'s verdicts; help is 0.
#[test]
fn a_wrong_command_line_exits_64_and_help_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["status", "--bogus"][..],
        &["--bogus"],
        &["frobnicate"],
        &["push", "--timeout", "soon"],
    ] {
        let (code, stderr) = controller_in(dir.path(), args);
        assert_eq!(code, Some(64), "{args:?}: {stderr}");
    }
    for args in [&["--help"][..], &["status", "--help"], &["--version"]] {
        let (code, stderr) = controller_in(dir.path(), args);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
    }
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "a wrong command line made something"
    );
}
