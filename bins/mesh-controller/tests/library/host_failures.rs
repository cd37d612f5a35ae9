//! A host that cannot write its state directory (full, read-only, an I/O error), seen from the
//! controller: real `mesh-host serve` daemons on a real nats-server, the controller's library
//! in process and its binary's `status`. The directory is made full by the host's fail point
//! (`mesh_host::STATE_DIR_FULL`: every state write fails with the system's "No space left on
//! device" while a file the test holds exists), the daemon running on; removing the file frees
//! the space. Every wait is on a condition.

use crate::support;
use serde_json::Value;
use std::time::Duration;
use support::fleet::{write, Bed};
use support::wait_for;

/// `status --output json`, in process: its exit code and `a`'s attention entry (null if none).
fn status_of_a(bed: &Bed) -> (u8, Value, Value) {
    let status = bed.library().status();
    let a = status.json["attention"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|n| n["node"] == "a").cloned())
        .unwrap_or(Value::Null);
    (status.code, status.json, a)
}

/// Issue 41: with the host's state directory full the apply was refused, but the host logged
/// nothing, reported `partial, nothing declared` without the system's reason, `status` exited
/// 0, a hand edit meanwhile was said put back when it was not, the host never tried again once
/// the space came back — and a declaration arriving while it was full made the host exit.
#[test]
fn a_host_whose_state_directory_is_full_says_so_stays_up_and_converges_once_freed() {
    let mut bed = Bed::new(&["a"]);
    bed.start_host("bus");
    let full = bed.home.path().join("a-state-dir-full");
    let failpoints = format!("{}=return({})", mesh_host::STATE_DIR_FULL, full.display());
    bed.start_host_env("a", &["--first-retry", "1"], &[("FAILPOINTS", &failpoints)]);
    let pushed = bed.push_all(60, 0);
    assert!(support::fleet::converged(&pushed["a"]), "{pushed:?}");
    let hello = bed.root("a").join("etc/mesh/hello");
    assert_eq!(std::fs::read_to_string(&hello).unwrap(), "hello, fleet\n");

    // The state directory is full. A hand edit is seen, and cannot be put back: `status` says
    // the host cannot apply, with the system's reason, and the drift left as found.
    std::fs::write(&full, b"").unwrap();
    std::fs::write(&hello, "edited by hand\n").unwrap();
    let (code, whole, a) = wait_for(
        "a's failure and the drift left as found in status (the host's fail point needs \
         target/debug/mesh-host built with its `fail-points` feature, as building the \
         mesh-host tests builds it: `cargo build -p mesh-host --tests`)",
        Duration::from_secs(60),
        || match status_of_a(&bed) {
            (code, whole, a)
                if a["host-failure"].is_string() && a["drift"][0]["action"] == "left" =>
            {
                Ok((code, whole, a))
            }
            (_, whole, _) => Err(format!("{whole:#}")),
        },
    );
    assert_eq!(code, 3, "{whole:#}");
    let reason = a["host-failure"].as_str().unwrap();
    assert!(reason.contains("no space left on device"), "{a:#}");
    assert_eq!(std::fs::read_to_string(&hello).unwrap(), "edited by hand\n");

    // A declaration arriving while it is full: the host stays up, says it cannot store it, and
    // `status` (the binary) exits 3 naming the node and the reason.
    write(
        &bed.home.path().join("catalogue/modules/base/files/hello"),
        "hello again, fleet\n",
    );
    let pushed = bed.push_all(60, 3);
    let failure = pushed["a"]["report"]["host-failure"]
        .as_str()
        .unwrap_or_else(|| panic!("{:#}", pushed["a"]));
    assert!(
        failure.contains("no space left on device") && failure.contains("declaration"),
        "{failure}"
    );
    let out = bed.run(&["status"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(
        said.lines()
            .any(|line| line.contains("a") && line.contains("no space left on device")),
        "{said}"
    );
    let host = bed.hosts.get_mut("a").unwrap();
    assert!(host.try_wait().unwrap().is_none(), "the host exited");

    // Space freed: the host stores and applies the declaration by itself, with no push, and
    // puts the hand edit back.
    std::fs::remove_file(&full).unwrap();
    let a = wait_for(
        "a converged on the new declaration with no push",
        Duration::from_secs(120),
        || match status_of_a(&bed) {
            (_, whole, a) if a["host-failure"].is_null() && converged_a(&whole) => Ok(a),
            (_, whole, _) => Err(format!("{whole:#}")),
        },
    );
    assert_eq!(
        std::fs::read_to_string(&hello).unwrap(),
        "hello again, fleet\n",
        "{a:#}"
    );
}

/// Whether `a` reports the declaration it was last sent, converged.
fn converged_a(whole: &Value) -> bool {
    whole["nodes"].as_array().is_some_and(|nodes| {
        nodes.iter().any(|n| {
            n["node"] == "a" && n["current"] == true && n["report"]["machine"] == "converged"
        })
    })
}
