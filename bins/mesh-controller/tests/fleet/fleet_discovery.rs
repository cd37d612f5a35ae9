//! `mesh-controller runtimes` end to end (the rule “Discovery waits for everyone who said they are
//! there”): real `nats-server`, real `mesh-host serve` processes, and in the place of one host a
//! stand-in on that node's own credentials that says it is there (PING) and says what it serves
//! (INFO) late or never.
//!
//! What is checked: a heard host lacking a module the inventory assigns it has it named
//! missing, and one serving a module assigned elsewhere has it named running elsewhere — so
//! the check can fail — while nothing of the kind is said of an unheard runtime's modules; a
//! runtime answering past the old fixed window is waited for, and its answer is what it is
//! compared by.
//!
//! The runtimes are found, and pushed to, through the controller library in process on the
//! bed's bus (`support::in_process`, `Bed::library`); the binary is run for the text `runtimes`
//! prints (its snapshot), the command's end-to-end run.
//!
//! That `discover` itself waits for a late INFO and names a runtime that never answers one is
//! tested in mesh-bus (`tests/nats/discovery.rs`); here it is the controller's command.

use crate::support;
use mesh_bus::{Bus, NatsBus};
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;
use support::fleet::{converged, Bed};

/// A runtime standing in for `node`'s host: connected as that node, it answers `$SRV.PING` at
/// once with the node's identity, as `mesh-host serve` does, and `$SRV.INFO` with `modules`
/// after `info_delay` — never, if `None`. It answers until dropped.
struct StandIn {
    /// Its instance id.
    id: String,
    _runtime: tokio::runtime::Runtime,
}

fn stand_in(bed: &Bed, node: &str, modules: &[&str], info_delay: Option<Duration>) -> StandIn {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let id = format!("standin{node}");
    let service = mesh_bus::discovery::HOST_SERVICE;
    let metadata = json!({"node": node, "modules": modules.join(",")});
    let ping_answer = json!({
        "type": "io.nats.micro.v1.ping_response",
        "name": service, "id": id, "version": "0.1.0", "metadata": metadata,
    })
    .to_string();
    let info_answer = json!({
        "type": "io.nats.micro.v1.info_response",
        "name": service, "id": id, "version": "0.1.0",
        "description": format!("a stand-in for {node}"), "metadata": metadata, "endpoints": [],
    })
    .to_string();
    let (bus, mut pings, mut infos) = runtime.block_on(async {
        // The bus node's server may be reloading the users it was just sent, which refuses
        // logins for a moment: try again until it lets the node in (the deadline only bounds
        // a failure).
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let bus = loop {
            match NatsBus::connect(&bed.node_options(node)).await {
                Ok(bus) => break bus,
                Err(error) if std::time::Instant::now() > deadline => panic!("{error}"),
                // Only paces the wait on the login above.
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        // Each subscribe returns once the server has it.
        let pings = bus.subscribe("$SRV.PING").await.unwrap();
        let infos = bus
            .subscribe(&format!("$SRV.INFO.{service}.{id}"))
            .await
            .unwrap();
        (bus, pings, infos)
    });
    runtime.spawn(async move {
        let bus = std::sync::Arc::new(bus);
        loop {
            tokio::select! {
                Some(ping) = pings.next() => {
                    bus.respond(&ping, ping_answer.clone().into_bytes()).await.unwrap();
                }
                Some(info) = infos.next() => {
                    let Some(delay) = info_delay else { continue };
                    let (bus, answer) = (bus.clone(), info_answer.clone());
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        bus.respond(&info, answer.into_bytes()).await.unwrap();
                    });
                }
                else => break,
            }
        }
    });
    StandIn {
        id,
        _runtime: runtime,
    }
}

/// Assigns `agent` to `nodes` in the inventory on the bus (nothing is pushed).
fn assign_agent(bed: &Bed, nodes: &[&str]) {
    let inventory = bed.record("inventory.toml").unwrap();
    let assigned = nodes
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let inventory: String = inventory
        .lines()
        .map(|line| {
            if line.starts_with("agent = ") {
                format!("agent = [{assigned}]\n")
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    bed.put_inventory(&inventory);
}

/// `runtimes --output json` through the library, checking the exit code `runtimes` ends with.
fn runtimes_json(bed: &Bed, code: u8) -> Value {
    let (found, ended) = bed
        .library()
        .call(async |mesh| {
            mesh_controller::bus::runtimes(mesh.home(), mesh.bus().expect("the bed's bus")).await
        })
        .map(|found| (serde_json::to_value(&found).unwrap(), found.exit_code()))
        .unwrap_or_else(|error| panic!("runtimes: {error}"));
    assert_eq!(ended, code, "{found}");
    found
}

/// The runtime heard on `node`, if one was.
fn heard_on<'a>(found: &'a Value, node: &str) -> Option<&'a Value> {
    found["runtimes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["service"] == "mesh-host" && r["node"] == node)
}

/// `text` with what differs from run to run — times, sizes, instance ids — replaced.
fn redact(text: &str, ids: &[&str]) -> String {
    let mut out = String::new();
    for word in text.split_inclusive(' ') {
        if word.trim_end().chars().all(|c| c.is_ascii_digit()) && !word.trim_end().is_empty() {
            out.push_str(if word.ends_with(' ') { "N " } else { "N" });
        } else {
            out.push_str(word);
        }
    }
    ids.iter().fold(out, |out, id| out.replace(id, "ID"))
}

fn signal(bed: &Bed, node: &str, signal: &str) {
    let pid = bed.hosts[node].id().to_string();
    let status = Command::new("kill").args([signal, &pid]).status().unwrap();
    assert!(status.success(), "kill {signal} {pid}");
}

// The incident behind “Discovery waits for everyone who said they are there”: the console said a
// late runtime's modules were missing, or ran elsewhere.
#[test]
fn a_heard_host_lacking_a_module_is_named_and_nothing_is_said_of_an_unheard_ones_modules() {
    let mut bed = Bed::new(&["a", "b"]);
    // `agent` goes to `b` too, so that once it is assigned to `a` alone, `b` runs it elsewhere.
    assign_agent(&bed, &["a", "b"]);
    for node in ["bus", "a", "b"] {
        bed.start_host(node);
    }
    for (node, result) in bed.push_all(60, 0) {
        assert!(converged(&result), "{node}: {result}");
    }
    let found = runtimes_json(&bed, 0);
    assert_eq!(found["missing"], json!([]), "{found}");
    assert_eq!(found["running_elsewhere"], json!([]), "{found}");

    // The inventory changes and nothing is pushed: `bus` is assigned `agent` and does not
    // serve it; `b` serves it and is no longer assigned it.
    assign_agent(&bed, &["a", "bus"]);
    let found = runtimes_json(&bed, 3);
    assert_eq!(
        found["missing"],
        json!([{"node": "bus", "modules": ["agent"]}]),
        "{found}"
    );
    assert_eq!(
        found["running_elsewhere"],
        json!([{"module": "agent", "node": "b", "assigned_to": ["a", "bus"]}]),
        "{found}"
    );
    // What `runtimes` prints as `missing on bus: agent` and `running elsewhere: agent on b
    // (assigned to a, bus)`.
    let missing = &found["missing"][0];
    assert_eq!(missing["node"], "bus", "{found}");
    assert!(
        missing["modules"]
            .as_array()
            .unwrap()
            .contains(&json!("agent")),
        "{found}"
    );
    let elsewhere = &found["running_elsewhere"][0];
    assert_eq!(
        (
            &elsewhere["module"],
            &elsewhere["node"],
            &elsewhere["assigned_to"]
        ),
        (&json!("agent"), &json!("b"), &json!(["a", "bus"])),
        "{found}"
    );

    // `a`'s host stops answering (its connection stays) and a stand-in says `a` is there,
    // and never what it serves.
    signal(&bed, "a", "-STOP");
    let quiet = stand_in(&bed, "a", &["agent", "base"], None);
    let found = runtimes_json(&bed, 3);
    assert_eq!(
        found["not_heard"].as_array().unwrap().len(),
        1,
        "only the stand-in is not heard: {found}"
    );
    assert_eq!(found["not_heard"][0]["node"], "a", "{found}");
    assert_eq!(found["not_heard"][0]["id"], quiet.id.as_str(), "{found}");
    assert!(heard_on(&found, "a").is_none(), "{found}");
    assert_eq!(found["nodes_not_heard"], json!([]), "{found}");
    // Nothing of `a`'s: neither its `base` and `agent` missing, nor `agent` (assigned to `a`)
    // running elsewhere on `b`. What is known of the others still is.
    assert_eq!(
        found["missing"],
        json!([{"node": "bus", "modules": ["agent"]}]),
        "{found}"
    );
    assert_eq!(found["running_elsewhere"], json!([]), "{found}");
    assert_eq!(
        heard_on(&found, "b").unwrap()["modules"],
        json!(["agent", "base"])
    );
    assert_eq!(
        heard_on(&found, "bus").unwrap()["modules"],
        json!(["base", "mesh-bus"])
    );
    assert!(
        found["waited_ms"].as_u64().unwrap() >= 5000,
        "waited up to the limit for `a`: {found}"
    );
    // The text `runtimes` prints, from the binary: its end-to-end run.
    let text = bed.expect(&["runtimes"], 3);
    let b_id = heard_on(&found, "b").unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let bus_id = heard_on(&found, "bus").unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    insta::assert_snapshot!(
        "runtimes_with_an_unheard_host",
        redact(&text, &[&quiet.id, &b_id, &bus_id])
    );
    drop(quiet);
    signal(&bed, "a", "-CONT");
}

// The incident behind “Discovery waits for everyone who said they are there”: the laptop's answer
// came last, past the old fixed window of 750 ms.
#[test]
fn a_host_answering_what_it_serves_after_a_second_is_heard_and_compared_by_its_answer() {
    let mut bed = Bed::new(&["a"]);
    bed.start_host("bus");
    let pushed = bed
        .library()
        .push_within(&["bus"], &[], Duration::from_secs(20))
        .unwrap();
    assert_eq!(pushed.code(), 0, "{}\n{:#}", pushed.lines, pushed.json);
    // `a`'s host is not started: a stand-in on its credentials answers INFO after 1.2 s,
    // serving `base` and not `agent`, which the inventory assigns it.
    let slow = stand_in(&bed, "a", &["base"], Some(Duration::from_millis(1200)));
    let found = runtimes_json(&bed, 3);
    let a = heard_on(&found, "a").unwrap_or_else(|| panic!("a was not heard: {found}"));
    assert_eq!(a["id"], slow.id.as_str());
    assert_eq!(a["modules"], json!(["base"]));
    assert!(a["answer_ms"].as_u64().unwrap() >= 1200, "{found}");
    assert_eq!(found["not_heard"], json!([]), "{found}");
    assert_eq!(found["nodes_not_heard"], json!([]), "{found}");
    assert_eq!(
        found["missing"],
        json!([{"node": "a", "modules": ["agent"]}]),
        "{found}"
    );
    // Everyone heard: discovery did not wait to its limit.
    assert!(found["waited_ms"].as_u64().unwrap() < 5000, "{found}");
}
