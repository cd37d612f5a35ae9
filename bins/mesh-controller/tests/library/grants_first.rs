//! Grants before code on a push over a real nats-server with real `mesh-host serve` daemons:
//! a grant that fails is tried again within the push's timeout, as a rollout does, and the
//! push then converges — no node sent before its grants are in force. (That a grant still
//! failing at the timeout fails the push, nothing else sent, is `fleet.rs`'s.)
//!
//! The controller's library is called in process on the fleet's bus (`Bed::library`): the
//! pushes and `status`. Nothing here stays a run of the controller binary: `push --all` as a
//! person runs it is run by the fleet tests.

use crate::support;
use std::time::Duration;
use support::fleet::{converged, write, Bed, AGENT_MODULE};

#[test]
fn a_push_tries_a_failed_grant_again_within_its_timeout_and_converges() {
    let mut bed = Bed::new(&["a"]);
    for node in ["bus", "a"] {
        bed.start_host(node);
    }
    let pushed = bed
        .library()
        .push_all_within(Duration::from_secs(60))
        .unwrap();
    assert_eq!(pushed.code(), 0, "{}{:#}", pushed.lines, pushed.json);
    // `agent` is granted a second bucket: the bus's users change.
    write(
        &bed.home.path().join("catalogue/modules/agent/module.toml"),
        &AGENT_MODULE.replace(
            r#"buckets = ["agent_state"]"#,
            r#"buckets = ["agent_cache", "agent_state"]"#,
        ),
    );
    write(
        &bed.home
            .path()
            .join("catalogue/modules/agent/files/agent.conf"),
        "interval = 5\ncache = agent_cache\n",
    );
    // The bus machine takes its new users only after the controller stopped waiting for them
    // (30 s): the first grant of `a` fails, for real.
    let limit = mesh_controller::bus::GRANTS_CONFIRM_LIMIT;
    bed.delay_reloads(limit + Duration::from_secs(5));
    let reloaded_before = bed.reloaded_at_ms();

    // `push --all --timeout 120 --output json`: its progress lines are what it says on
    // standard error, its results what it prints, and it exits 0 when they converged.
    let pushed = bed
        .library()
        .push_all_within(Duration::from_secs(120))
        .unwrap();
    let stderr = &pushed.lines;
    let stdout = format!("{:#}", pushed.json);
    assert_eq!(pushed.code(), 0, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("grants for a not issued") && stderr.contains("trying again in 10 s"),
        "the first grant failed and was tried again: {stderr}"
    );
    let results: Vec<serde_json::Value> = serde_json::from_value(pushed.json.clone()).unwrap();
    assert!(results.iter().all(converged), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(bed.root("a").join("etc/agent.conf")).unwrap(),
        "interval = 5\ncache = agent_cache\n"
    );
    // `a` was sent only once the bus had its users in force.
    let reloaded_at_s = bed.reloaded_at_ms() / 1000;
    assert!(bed.reloaded_at_ms() > reloaded_before, "the bus reloaded");
    let a = results.iter().find(|r| r["node"] == "a").unwrap();
    let a_started = a["report"]["started-at"].as_u64().unwrap();
    assert!(
        a_started >= reloaded_at_s,
        "`a` was sent (started at {a_started}) before the bus reloaded its users ({reloaded_at_s})"
    );
    // Nothing is left to say: the grants problem of the failed attempt is not recorded.
    let status = bed.library().status();
    assert_eq!(status.code, 0, "{:#}", status.json);
    let status = status.json;
    assert_eq!(status["problems"], serde_json::json!([]), "{status:#}");
}
