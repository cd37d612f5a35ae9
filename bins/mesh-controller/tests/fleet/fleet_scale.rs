//! A fleet at scale: 21 real `mesh-host serve` processes (`bus` and 20 more) on one
//! real `nats-server`, ten modules of three files each from a real git repository, the real
//! registry as the store. A first merge and a second one roll out one machine first and
//! finish; the second's controller is killed mid-rollout at a named step (the fail point
//! `FAILPOINTS=sent:<module>:<node>=return`, not after a sleep) and `plans resume` from a second,
//! fresh home — holding only the catalogue checkout and the controller's password — finishes
//! it. Then every record in the bus's records bucket is read: none may exceed 64 KiB (the bus
//! takes at most 1 MiB in one message; records must not grow with the fleet).
//!
//! The controller is called as a library in process on the bed's bus (`Bed::library`): the
//! repository registered, the first merge, the plans read, the resume from the fresh home. The
//! merge killed at its fail point is the binary: the process dies there.

use crate::support;
use mesh_controller::fail;

use mesh_store::record_store::RecordStore as _;
use serde_json::Value;
use std::process::{Output, Stdio};
use support::fleet::Bed;
use support::ten_modules::{module_files, names as modules};
use support::Repo;

/// The hosts besides `bus`: `a` (which `Bed` gives the `agent` module) and `n01`…`n19`.
fn nodes() -> Vec<String> {
    std::iter::once("a".to_owned())
        .chain((1..20).map(|i| format!("n{i:02}")))
        .collect()
}

/// The largest a record may be: far under the bus's 1 MiB `max_payload`, whatever the fleet.
const RECORD_LIMIT: usize = 64 * 1024;

/// Writes every module's three files saying `version`, and commits.
fn commit_modules(repo: &Repo, version: &str) -> String {
    let files = module_files(version);
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    repo.write(&files);
    repo.commit(&format!("ten modules, {version}"))
}

/// Every module's files on every node say `version`.
fn assert_everywhere(bed: &Bed, version: &str) {
    for node in std::iter::once("bus".to_owned()).chain(nodes()) {
        for module in modules() {
            for file in ["one", "two", "three"] {
                let path = bed.root(&node).join(format!("etc/{module}/{file}"));
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{node}: {}: {e}", path.display()));
                assert_eq!(text, format!("{module} {file} {version}\n"), "{node}");
            }
        }
    }
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A finished plan: done, every module rolled out one machine first — a first node named, and
/// every node of the module sent it and applied it, folded into the plan's summary once it ended.
fn assert_done_one_first(bed: &Bed, id: &str) {
    let record = bed.library().plan(id).unwrap();
    assert_eq!(record["plan"]["state"]["state"], "done", "{id}: {record:#}");
    let all = 1 + nodes().len();
    let records = bed.records();
    for module in modules() {
        let rollout = &record["plan"]["rollouts"][&module];
        let first = rollout["first"]
            .as_str()
            .unwrap_or_else(|| panic!("{id}: `{module}` names no first node: {rollout:#}"));
        assert_eq!(rollout["sent"], all, "{id}: `{module}`: {rollout:#}");
        assert_eq!(rollout["applied"], all, "{id}: `{module}`: {rollout:#}");
        // The plan ended: its nodes' records are folded into its summary and gone.
        assert_eq!(
            support::fleet::rollout_part(&records, id, &module, first),
            None,
            "{id}: `{module}`"
        );
        let summary = &record["work"][&module]["summary"];
        assert_eq!(
            summary["nodes"]["applied"], all,
            "{id}: `{module}`: {summary:#}"
        );
    }
    assert_eq!(record["nodes-folded"], true, "{id}: {record:#}");
    assert!(
        records
            .keys_under(&format!("rollouts/{id}"))
            .unwrap()
            .is_empty(),
        "{id}"
    );
}

#[test]
fn twenty_hosts_and_ten_modules_merge_twice_survive_a_killed_controller_and_keep_records_small() {
    let node_names = nodes();
    let names: Vec<&str> = node_names.iter().map(String::as_str).collect();
    let mut bed = Bed::new(&names);
    // Every host is started at once; none is waited for: each reads the last declaration sent
    // to it from the declarations stream whenever it comes up.
    for node in std::iter::once("bus").chain(names.iter().copied()) {
        bed.start_host(node);
    }
    let repo = Repo::new();
    commit_modules(&repo, "v1");
    bed.library().repo_add("cat", repo.path()).unwrap();
    let everyone = std::iter::once("\"bus\"".to_owned())
        .chain(node_names.iter().map(|n| format!("\"{n}\"")))
        .collect::<Vec<_>>()
        .join(", ");
    let mut inventory = bed.record("inventory.toml").unwrap();
    for module in modules() {
        inventory.push_str(&format!("{module} = [{everyone}]\n"));
    }
    bed.put_inventory(&inventory);

    // The first merge: every module, one machine first, to every node.
    let merged = bed.library().merge("cat").unwrap();
    // `merge` exits 0: the plan did not stop.
    assert!(!merged.stopped, "{}\n{:#}", merged.lines, merged.json);
    assert_everywhere(&bed, "v1");
    assert_done_one_first(&bed, "plan-1");

    // The second merge, killed mid-rollout: `m04` was just sent to `n07`, a node after its
    // first (`a`, first by name).
    let second = commit_modules(&repo, "v2");
    let step = "sent:m04:n07";
    let killed = bed
        .command(&["merge", "cat"])
        .env("MESH_LOG", "error")
        .env(fail::FAILPOINTS, fail::die_at(step, 1))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(killed.status.code(), None, "{}", text(&killed));
    assert!(
        String::from_utf8_lossy(&killed.stderr).contains(&format!("dying at `{step}`")),
        "{}",
        text(&killed)
    );
    let open = bed.library().plan("plan-2").unwrap();
    assert_ne!(open["plan"]["state"]["state"], "done", "{open:#}");
    // `n07` was sent its part of `m04`'s rollout before the kill, and the step that sent it
    // was not saved: the rollout's record of the nodes running at its start, written before
    // any send, still says what it ran before (a revert after the resume sends that back),
    // while what the controller records it was sent is the new declaration.
    let part = support::fleet::rollout_part(&bed.records(), "plan-2", "m04", "n07")
        .unwrap_or_else(|| panic!("no record of `m04` on `n07`: {open:#}"));
    // What it ran before `m04`'s rollout: what `m03`'s, done before it, sent it.
    let ran = support::fleet::rollout_part(&bed.records(), "plan-2", "m03", "n07")
        .unwrap_or_else(|| panic!("no record of `m03` on `n07`: {open:#}"));
    assert_eq!(ran["progress"]["progress"], "applied", "{ran:#}");
    let sent = json(&bed.record("sent/n07.json").unwrap());
    assert_eq!(part["named-by"], "running", "{part:#}");
    assert_eq!(part["before"], ran["declaration"], "{part:#}\n{ran:#}");
    assert_ne!(sent["declaration"], ran["declaration"], "{sent:#}");

    // It resumes on "another machine": a home holding only the operator's catalogue checkout,
    // and the controller's seed to open the bus. Everything else is read from the bus.
    let elsewhere = tempfile::Builder::new()
        .prefix("mesh-elsewhere-")
        .tempdir()
        .unwrap();
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(bed.home.path().join("catalogue"))
        .arg(elsewhere.path())
        .status()
        .unwrap();
    assert!(copied.success());
    // `plans resume` there, given the bus, the controller's seed (`--bus-seed`) and the store.
    let mut options = bed.mesh_options();
    options.bus = options
        .bus
        .map(|bus| bus.with_seed_file(bed.controller_seed_file()));
    let resumed = support::in_process::Library::open(elsewhere.path(), options)
        .and_then(|library| library.plans_resume(None))
        .unwrap_or_else(|error| panic!("plans resume: {error}"));
    // `plans resume` exits 0: no plan stopped.
    assert!(!resumed.stopped, "{}\n{:#?}", resumed.lines, resumed.plans);
    assert_everywhere(&bed, "v2");
    assert_done_one_first(&bed, "plan-2");
    for record in ["inventory.toml", "sent", "reports", "plans"] {
        assert!(
            !elsewhere.path().join(record).exists()
                || support::fleet::json_records(elsewhere.path().join(record)).is_empty(),
            "{record} was written on the other machine, not on the bus"
        );
    }
    let plans = bed.library().plans();
    let for_second = plans
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["commit"] == second.as_str())
        .count();
    assert_eq!(for_second, 1, "the second merge made one plan: {plans:#}");

    // No record in the bucket grows with the fleet.
    let records = bed.records();
    let keys = records.keys_under("").unwrap();
    assert!(!keys.is_empty());
    let mut sizes: Vec<(usize, String)> = keys
        .iter()
        .map(|key| {
            let bytes = records.get(key).unwrap().unwrap_or_default();
            (bytes.len(), key.clone())
        })
        .collect();
    sizes.sort();
    let (largest, key) = sizes.last().cloned().unwrap();
    let total: usize = sizes.iter().map(|(size, _)| size).sum();
    println!(
        "{} records, {total} bytes in all; the largest: `{key}`, {largest} bytes (limit {RECORD_LIMIT})",
        sizes.len()
    );
    let over: Vec<String> = sizes
        .iter()
        .filter(|(size, _)| *size > RECORD_LIMIT)
        .map(|(size, key)| format!("{key}: {size} bytes"))
        .collect();
    assert!(
        over.is_empty(),
        "records over {RECORD_LIMIT} bytes:\n{}",
        over.join("\n")
    );
}
