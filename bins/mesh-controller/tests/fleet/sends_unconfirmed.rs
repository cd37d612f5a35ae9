//! A send is written before it is made. A push killed between writing a node's send and
//! publishing it (the fail point `sending:<node>`), or between publishing it and recording it
//! sent (`published:<node>`) — a real `mesh-controller push` process, ended by its fail point —
//! leaves `status` reading the node right once the node reports: sent, unconfirmed, while it
//! runs what it had; current once its report names what was written, with no push after.
//!
//! Before, a push killed between its publish and its record (1 of 19 `kill -9` 0–40 ms into
//! `push --all`) left hosts running declarations the controller had no record of sending, and
//! `status` said "in progress" until the next push.

use crate::support;
use mesh_controller::fail;

use serde_json::Value;
use std::time::Duration;
use support::fleet::{write, Bed};
use support::wait_for;

/// `node` as `status --output json` shows it, and `status`'s exit code, once `node` was heard
/// after `after` (seconds since the epoch): its next report.
fn after_its_next_report(bed: &Bed, node: &str, after: u64) -> Result<(Value, u8), String> {
    let said = bed.try_library()?.try_status()?;
    let found = said.json["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|n| n["node"] == node))
        .cloned()
        .ok_or_else(|| format!("status lists no `{node}`: {}", said.document))?;
    match found["heard_at"].as_u64() {
        Some(at) if at > after => Ok((found, said.code)),
        _ => Err(format!("`{node}` not heard since {after}: {found:#}")),
    }
}

/// Runs `push a` dying at `step`, and checks it died there.
fn push_dying_at(bed: &Bed, step: &str) {
    let died = bed
        .command(&["push", "a"])
        .env(fail::FAILPOINTS, fail::die_at(step, 1))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&died.stderr);
    assert_eq!(
        died.status.code(),
        None,
        "the push was to die at `{step}`: {stderr}"
    );
    assert!(stderr.contains(&format!("dying at `{step}`")), "{stderr}");
}

#[test]
fn a_push_killed_between_writing_a_send_and_recording_it_leaves_status_reading_the_node_right() {
    let mut bed = Bed::new(&["a"]);
    for node in ["bus", "a"] {
        bed.start_host(node);
    }
    bed.push_all(60, 0);
    let before = bed.library().status();
    let old = before.json["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == "a")
        .unwrap()["sent"]
        .clone();
    // A change of `agent`, which `a` alone runs: what `a` should run differs, nothing else.
    write(
        &bed.home
            .path()
            .join("catalogue/modules/agent/files/agent.conf"),
        "agent again\n",
    );

    // Killed once the send is written, before it is published: `a` never hears it. Its next
    // report names what it had; `status` says the send is unconfirmed, in progress (exit 4).
    let killed_at = mesh_store::clock::now();
    push_dying_at(&bed, "sending:a");
    let (a, code) = wait_for(
        "`a`'s next report after the push died",
        Duration::from_secs(30),
        || after_its_next_report(&bed, "a", killed_at),
    );
    let new = a["unconfirmed"].clone();
    assert!(new.is_string() && new != old, "{a:#}");
    assert_eq!(a["sent"], old, "{a:#}");
    assert_eq!(a["report"]["declaration"], old, "{a:#}");
    assert_eq!(code, 4, "a send unconfirmed is in progress: {a:#}");
    assert_eq!(
        std::fs::read_to_string(bed.root("a").join("etc/agent.conf")).unwrap(),
        "interval = 5\n"
    );

    // Killed once the bus took it, before it was recorded sent: `a` applies it, and its report
    // of it makes it current — `status` exits 0 with no push after.
    let killed_at = mesh_store::clock::now();
    push_dying_at(&bed, "published:a");
    let (a, _) = wait_for(
        "`a` reporting the declaration the dead push published",
        Duration::from_secs(60),
        || {
            let (a, code) = after_its_next_report(&bed, "a", killed_at)?;
            if a["report"]["declaration"] == new && a["report"]["machine"] == "converged" {
                Ok((a, code))
            } else {
                Err(format!("{a:#}"))
            }
        },
    );
    assert_eq!(a["sent"], new, "{a:#}");
    assert_eq!(a["current"], true, "{a:#}");
    assert!(a.get("unconfirmed").is_none(), "{a:#}");
    assert_eq!(
        std::fs::read_to_string(bed.root("a").join("etc/agent.conf")).unwrap(),
        "agent again\n"
    );
    let status = bed.library().status();
    assert_eq!(status.code, 0, "{}", status.document);
}
