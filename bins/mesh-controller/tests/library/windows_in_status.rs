//! A maintenance window on a serving host, seen from the controller: real `mesh-host serve`
//! daemons on a real nats-server, real podman and a real `mesh-host window run`. A window
//! opened with no apply inside it is in `status` (its step and the container it holds, exit
//! 3); a push during it leaves the container held still; once it closes the host converges it
//! by itself, and `status` settles with no push. Every wait is on `status` (a condition).
//! Needs podman configured as `scripts/podman-env.sh` does; fails, never skips, without it.
//!
//! The controller's library is called in process on the fleet's bus (`Bed::library`): the
//! pushes and `status`, whose text is read as the values it is printed from (the window's step
//! and its holder; the binary's own snapshot of `status` renders a window). What stays a run of
//! a binary: the host's `mesh-host window run`, which is the host's program.

use crate::support;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::fleet::{write, Bed};
use support::wait_for;

fn keep_module(env: &str) -> String {
    format!(
        "name = \"keep\"\n\n[containers.db]\nimage = \"{}\"\ncommand = [\"sleep\", \"3600\"]\n{env}",
        mesh_test_support::podman::image()
    )
}

/// `status --output json`, in process on the bus: the exit code its overview is judged to, the
/// document and `a`'s attention entry (if any).
fn status(bed: &Bed) -> (Option<i32>, Value, Value) {
    let status = bed.library().status();
    let (code, status) = (status.code, status.json);
    let a = status["attention"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|n| n["node"] == "a").cloned())
        .unwrap_or(Value::Null);
    (Some(i32::from(code)), status, a)
}

/// `push --all --timeout 60 --output json`, in process on the bus: it ends with `code`; each
/// node's result by node.
fn push_all(bed: &Bed, code: u8) -> std::collections::BTreeMap<String, Value> {
    let pushed = bed
        .library()
        .push_all_within(Duration::from_secs(60))
        .unwrap();
    assert_eq!(pushed.code(), code, "{}{:#}", pushed.lines, pushed.json);
    pushed.by_node()
}

/// Removes the test's container, whatever made it.
struct Removed(String);

impl Drop for Removed {
    fn drop(&mut self) {
        mesh_test_support::podman::remove(&self.0);
    }
}

#[test]
fn a_window_on_a_serving_host_is_in_status_and_what_it_held_converges_after_with_no_push() {
    mesh_test_support::podman::podman_config();
    let mut bed = Bed::new(&["a"]);
    bed.put_inventory(
        "bus-node = \"bus\"\n\n[nodes.bus]\n[nodes.a]\n\n[assignments]\nkeep = [\"a\"]\n",
    );
    let prefix = format!("t{}-a-", std::process::id());
    let container = format!("{prefix}mesh-keep-db");
    let _removed = Removed(container.clone());
    let module = bed.home.path().join("catalogue/modules/keep/module.toml");
    write(&module, &keep_module(""));
    bed.start_host("bus");
    bed.start_host_with(
        "a",
        &["--container-prefix", &prefix, "--podman-stop-timeout", "0"],
    );
    let pushed = push_all(&bed, 0);
    assert!(support::fleet::converged(&pushed["a"]), "{pushed:?}");

    // A backup holds the container on `a`: `status` names the window, its step and the
    // container, though nothing was applied during it.
    let started = bed.home.path().join("window-started");
    let mut window = Command::new(support::fleet::host_binary())
        .arg("--root")
        .arg(bed.root("a"))
        .arg("--state-dir")
        .arg(bed.state_dir("a"))
        .args(["--podman-stop-timeout", "0"])
        .args([
            "window", "run", "--step", "backup", "--hold", &container, "--",
        ])
        .args([
            "sh",
            "-c",
            &format!("touch {}; exec sleep 1000", started.display()),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let holder = window.id();
    let (code, whole) = wait_for(
        "the window in status",
        Duration::from_secs(60),
        || match status(&bed) {
            (code, whole, a) if a["windows"][0]["step"] == "backup" => {
                assert_eq!(
                    a["windows"][0]["containers"][0],
                    container.as_str(),
                    "{a:#}"
                );
                assert_eq!(a["windows"][0]["holder"], holder, "{a:#}");
                Ok((code, whole))
            }
            (_, whole, _) => Err(format!("{whole:#}")),
        },
    );
    assert_eq!(
        code,
        Some(4),
        "a window open within its lapse is work under way, not a page: {whole:#}"
    );
    let reasons = whole["verdict"]["in-progress"].as_array().unwrap();
    assert!(
        reasons
            .iter()
            .any(|r| r["kind"] == "window" && r["node"] == "a"),
        "{whole:#}"
    );
    // What `status` prints of it: the window's step, and "held open by pid N" from its holder.
    let (_, _, a) = status(&bed);
    let open = &a["windows"][0];
    assert_eq!(open["step"], "backup", "{a:#}");
    assert_eq!(open["holder"], holder, "{a:#}");
    wait_for("the step started", Duration::from_secs(60), || {
        if started.exists() {
            Ok(())
        } else {
            Err("not yet".to_owned())
        }
    });

    // A push during the window changes the container: held still, the push says so.
    write(&module, &keep_module("env = { VERSION = \"2\" }\n"));
    let held = push_all(&bed, 3);
    assert_eq!(
        held["a"]["report"]["resources"]["keep/container/db"]["outcome"], "held-still",
        "{:#}",
        held["a"]
    );

    // The window closes: `a` applies again by itself, and `status` settles with no push.
    let term = Command::new("kill")
        .args(["-TERM", &window.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    assert_eq!(window.wait().unwrap().code(), Some(128 + 15));
    let whole = wait_for(
        "status to settle after the window",
        Duration::from_secs(60),
        || match status(&bed) {
            (Some(0), whole, _) => Ok(whole),
            (code, whole, _) => Err(format!("exit {code:?}: {whole:#}")),
        },
    );
    let a = whole["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == "a")
        .unwrap();
    assert_eq!(a["report"]["machine"], "converged", "{a:#}");
    let env = Command::new("podman")
        .args([
            "container",
            "inspect",
            "--format",
            "{{.Config.Env}}",
            &container,
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&env.stdout).contains("VERSION=2"),
        "{env:?}"
    );
}
