//! Nodes that were not running are behind until they are sent the module: a rollout passes
//! over a node whose inventory says it does not run, the plan ends done, and the node stays in
//! view — `status` lists it behind on the module and `push --behind` sends it once it runs.
//! A real `mesh-controller serve` plans the merge over a real nats-server, rolled out to real
//! `mesh-host serve` daemons, read from real git.
//!
//! The controller's library is called in process on the fleet's bus (`Bed::library`); the
//! binary is run for the daemon (`serve`) and for what a person reads: `status` listing the
//! nodes behind, and `push --behind` with nothing to do.

use crate::support;
use serde_json::Value;
use support::daemon::{commit_base, start_serve, wait_for_plan_done};
use support::fleet::Bed;
use support::Repo;

/// `b` is in the inventory as not running; `base` goes to both nodes.
const B_STOPPED: &str = "bus-node = \"bus\"\n\n[nodes.bus]\n[nodes.b]\nrunning = false\n\n\
                         [assignments]\nbase = [\"bus\", \"b\"]\n";

/// `b` runs again.
const B_RUNNING: &str =
    "bus-node = \"bus\"\n\n[nodes.bus]\n[nodes.b]\n\n[assignments]\nbase = [\"bus\", \"b\"]\n";

/// `status --output json`, in process on the bus: its exit code and document.
fn status(bed: &Bed) -> (Option<i32>, Value) {
    let status = bed.library().status();
    (Some(i32::from(status.code)), status.json)
}

/// `push --behind --output json`, in process on the bus: it exits 0 (nothing stopped, every
/// node sent converged); the document.
fn push_behind(bed: &Bed) -> Value {
    let pushed = bed.library().push_behind().unwrap();
    assert!(
        !pushed.stopped && pushed.verdict == mesh_controller::Verdict::Converged,
        "{}{:#}",
        pushed.lines,
        pushed.json
    );
    pushed.json
}

#[test]
fn a_node_not_running_during_a_rollout_is_behind_until_push_behind_sends_it() {
    let mut bed = Bed::new(&["b"]);
    bed.put_inventory(B_STOPPED);
    // `b`'s host is stopped while the merge rolls out.
    bed.start_host("bus");
    let repo = Repo::new();
    let first = commit_base(&repo, "hello\n");
    bed.library().repo_add("cat", repo.path()).unwrap();
    let (daemon, _) = start_serve(&bed, &[], |_| true);
    let rt = support::fleet::runtime();
    let bus = bed.controller_bus(&rt);
    support::fleet::wait_for_merge_consumer(&rt, &bus);

    // The daemon plans and rolls out the merge: done on `bus`, `b` passed over.
    bed.library().merge_announce("cat").unwrap();
    let plans = wait_for_plan_done(&bed, &first);
    assert_eq!(plans.len(), 1, "{plans:?}");
    assert_eq!(
        std::fs::read_to_string(bed.root("bus").join("etc/mesh/hello")).unwrap(),
        "hello\n"
    );
    assert!(bed.record("sent/b.json").is_none(), "b was sent nothing");

    // `b` is not out of view: behind on `base`, by the plan that passed it over.
    let (code, document) = status(&bed);
    assert_eq!(
        document["nodes-behind"],
        serde_json::json!([{"node": "b", "module": "base", "plan": "plan-1", "running": false}]),
        "{document:#}"
    );
    assert_eq!(code, Some(4), "something is under way: {document:#}");
    let text = bed.run(&["status"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("nodes behind"), "{text}");
    assert!(
        text.lines()
            .any(|line| line.split_whitespace().collect::<Vec<_>>()
                == ["b", "base", "plan-1", "(still", "not", "running)"]),
        "{text}"
    );

    // While the inventory says it does not run, `push --behind` sends it nothing and says so.
    let said = push_behind(&bed);
    // "b: still not running: behind on `base` since plan-1".
    assert_eq!(
        said["not-running"],
        serde_json::json!([{"node": "b", "module": "base", "plan": "plan-1", "running": false}]),
        "{said:#}"
    );
    assert!(bed.record("sent/b.json").is_none(), "b was sent nothing");

    // `b` runs again: `push --behind` sends it what the mesh runs, and it converges.
    bed.put_inventory(B_RUNNING);
    bed.start_host("b");
    let (_, document) = status(&bed);
    assert_eq!(document["nodes-behind"][0]["running"], true, "{document:#}");
    let pushed = push_behind(&bed);
    // (The bus node too when the bus's users changed: grants before code.)
    let sent = pushed["nodes"].as_array().unwrap();
    assert!(sent.iter().any(|n| n["node"] == "b"), "{pushed:#}");
    assert!(sent.iter().all(support::fleet::converged), "{pushed:#}");
    assert_eq!(pushed["not-running"], serde_json::json!([]), "{pushed:#}");
    assert_eq!(
        std::fs::read_to_string(bed.root("b").join("etc/mesh/hello")).unwrap(),
        "hello\n"
    );

    // Sent, it is behind no more: status settles.
    let (code, document) = status(&bed);
    assert!(document.get("nodes-behind").is_none(), "{document:#}");
    assert_eq!(code, Some(0), "{document:#}");
    let said = bed.expect(&["push", "--behind"], 0);
    assert_eq!(said.trim(), "no open plans", "{said}");
    let mut said = push_behind(&bed);
    // It names the catalogue it read (the rule 'A command says which catalogue it read').
    let read = said.as_object_mut().unwrap().remove("read");
    assert_eq!(
        read.as_ref().map(|read| &read["deployed"][0]["module"]),
        Some(&serde_json::json!("base")),
        "{read:?}"
    );
    assert_eq!(
        said,
        serde_json::json!({"plans": [], "nodes": [], "not-running": []}),
        "{said:#}"
    );
    drop(daemon);
}
