//! The fleet bed: several `mesh-host serve` processes, each with its own root, state
//! directory and NKey seed, one real TLS-only `nats-server` started with the users the
//! controller composed, and `mesh-controller --bus … push`. Faults with nothing lost: the bus
//! restarted between pushes, a host killed with SIGKILL mid-apply, a host that never reports, a bus
//! node that never takes its grants.
//!
//! The bus node's server is reloaded the way `contrib/systemd/mesh-nats-users.path` does it on
//! a real machine: a watcher sees the users file its host wrote change and reloads the server.
//!
//! That a host cannot read another node's declarations or publish its reports is tested in
//! mesh-bus (`tests/nats/grants.rs`) against the same composed users; not repeated here.
//!
//! The controller is called as a library, in process, on the bed's bus
//! (`support::in_process`, `Bed::library`; `Bed::library` for what a test mesh's
//! library does too): pushes, status, the bus's users, discovery and the records. The binary is
//! run for the daemon (`serve`, stopped by a signal), for a push running while a host is killed,
//! for the plans lock's waiting (said on standard error as it waits), for what a person reads
//! (`broker consumer-reset`, the unenrolled nodes in `status`) and for `records list`.

use crate::support;
use mesh_bus::grants::permissions_in_config;
use mesh_bus::{Bus, NatsBus};
use mesh_controller::bus::BusConfig;
use mesh_controller::MeshOptions;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::fleet::{converged, runtime, write, Bed, AGENT_MODULE, BASE_MODULE};
use support::in_process::Library;
use support::{git, wait_for};

#[test]
fn push_over_the_bus_converges_every_host_with_the_bus_node_first() {
    let mut bed = Bed::new(&["a", "b"]);
    for node in ["bus", "a", "b"] {
        bed.start_host(node);
    }
    let results = bed.push_all(60, 0);
    assert_eq!(results.len(), 3, "{results:?}");
    for (node, result) in &results {
        assert!(converged(result), "{node}: {result}");
        let hello = std::fs::read_to_string(bed.root(node).join("etc/mesh/hello")).unwrap();
        assert_eq!(hello, "hello, fleet\n");
    }
    assert_eq!(
        std::fs::read_to_string(bed.root("a").join("etc/agent.conf")).unwrap(),
        "interval = 5\n"
    );
    assert!(!bed.root("b").join("etc/agent.conf").exists());
    // The bus node holds the users the controller composed: `a` may use its module's bucket.
    let users = std::fs::read_to_string(bed.root("bus").join("etc/nats/mesh-users.conf")).unwrap();
    assert_eq!(users, bed.library().users_text().unwrap());
    assert!(users.contains("$KV.agent_state.>"), "{users}");
    // Grants before code: the bus node's report came before any other node was sent.
    let bus_finished = results["bus"]["report"]["finished-at"].as_u64().unwrap();
    for node in ["a", "b"] {
        let started = results[node]["report"]["started-at"].as_u64().unwrap();
        assert!(
            started >= bus_finished,
            "{node} started before the bus node finished"
        );
    }
    let confirmed: serde_json::Value =
        serde_json::from_str(&bed.record("bus/authorization.json").unwrap()).unwrap();
    assert_eq!(
        confirmed["users"],
        mesh_model::sha256_digest(users.as_bytes()),
        "{confirmed}"
    );

    // Nothing changed: every node converged on the same declaration, and its apply of the
    // send found every resource unchanged. (The push may take a heartbeat that repeats the
    // first apply's report of the same declaration as the node's answer, so the apply of this
    // send is the node's latest report, waited for on `status`.)
    let again = bed.push_all(60, 0);
    for (node, result) in &again {
        assert!(converged(result), "{node}: {result}");
        assert_eq!(
            result["declaration"], results[node]["declaration"],
            "{node}"
        );
    }
    wait_for(
        "every node's latest apply unchanged",
        Duration::from_secs(30),
        || {
            let status = bed.try_library()?.try_status()?.json;
            let all_unchanged = status["nodes"].as_array().unwrap().iter().all(|node| {
                node["report"]["resources"]
                    .as_object()
                    .is_some_and(|r| r.values().all(|o| o["outcome"] == "unchanged"))
            });
            if all_unchanged {
                Ok(())
            } else {
                Err(format!("{status:#}"))
            }
        },
    );

    // The bus node's users file is the bus's, not a module's: its diff stays empty (what
    // `plan bus --diff --detailed-exitcode` exits 0 on, printing nothing).
    let (diff, empty) = bed.library().plan_diff("bus").unwrap();
    assert!(empty, "{diff:#}");

    // Discovery: every host answers with its node and modules.
    let (runtimes, code) = bed
        .library()
        .call(async |mesh| {
            mesh_controller::bus::runtimes(mesh.home(), mesh.bus().expect("the bed's bus")).await
        })
        .map(|found| (serde_json::to_value(&found).unwrap(), found.exit_code()))
        .unwrap();
    assert_eq!(code, 0, "{runtimes:#}");
    let modules_of = |node: &str| {
        runtimes["runtimes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["node"] == node)
            .unwrap_or_else(|| panic!("{node} not found: {runtimes}"))["modules"]
            .clone()
    };
    assert_eq!(modules_of("a"), serde_json::json!(["agent", "base"]));
    assert_eq!(modules_of("b"), serde_json::json!(["base"]));
    assert_eq!(runtimes["nodes_not_heard"], serde_json::json!([]));

    // The controller's seed opens the bus and stays on this machine, for it alone (never a
    // record); a node's seed stays on its host: the records hold its public key, no password.
    use std::os::unix::fs::PermissionsExt;
    let path = bed.controller_seed_file();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{}", path.display());
    assert!(bed.record("bus/nkey.seed").is_none());
    assert!(bed.record("bus/passwords/controller").is_none());
    for node in ["bus", "a", "b"] {
        let seed = mesh_bus::keys::read_seed_file(&bed.seed_file(node)).unwrap();
        let kept = bed.record(&format!("bus/nkeys/{node}")).unwrap();
        assert_eq!(
            Some(kept.trim().to_owned()),
            mesh_bus::keys::public_key_of_seed(&seed),
            "{node}"
        );
        assert!(bed.record(&format!("bus/passwords/{node}")).is_none());
    }
    // SIGTERM stops a host cleanly.
    for (node, child) in bed.hosts.iter_mut() {
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        assert_eq!(child.wait().unwrap().code(), Some(0), "{node}");
    }
}

#[test]
fn a_node_joining_is_let_onto_the_bus_by_the_bus_node_before_it_is_sent_anything() {
    // The rule “Grants before code”: the list of users changed, so the bus node is sent first.
    let mut bed = Bed::new(&["a"]);
    for node in ["bus", "a"] {
        bed.start_host(node);
    }
    bed.push_all(60, 0);
    let inventory = bed.record("inventory.toml").unwrap();
    bed.put_inventory(&format!(
        "{}\n[nodes.d]\n",
        inventory.replace("base = [", "base = [\"d\", ")
    ));
    write(
        &bed.root("d").join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\n",
    );
    write(&bed.root("d").join("etc/group"), "root:x:0:\n");
    // `d` makes its seed and is enrolled now; the bus does not know its key yet, so its host
    // is refused and keeps trying.
    bed.enroll("d");
    let users = bed.library().users_text().unwrap();
    assert!(users.contains("node-d"), "{users}");
    bed.start_host("d");

    let results = bed.push_all(60, 0);
    let bus_users = &results["bus"]["report"]["resources"]["mesh-bus/file/users"];
    assert_eq!(bus_users["outcome"], "applied", "{}", results["bus"]);
    assert!(converged(&results["d"]), "{}", results["d"]);
    assert_eq!(
        std::fs::read_to_string(bed.root("d").join("etc/mesh/hello")).unwrap(),
        "hello, fleet\n"
    );
    assert_eq!(
        std::fs::read_to_string(bed.root("bus").join("etc/nats/mesh-users.conf")).unwrap(),
        users
    );
    let bus_finished = results["bus"]["report"]["finished-at"].as_u64().unwrap();
    let d_started = results["d"]["report"]["started-at"].as_u64().unwrap();
    assert!(d_started >= bus_finished);
}

#[test]
fn a_permissions_only_change_is_in_force_on_the_bus_before_another_node_is_sent() {
    // The rule “Grants before code”: `agent` is newly granted a bucket its new code uses. The bus's
    // users are the same, so that each node can log in proves nothing: the bus node is sent the
    // users first, and `a` only once the server has `a`'s new permission in force — here a reload 3
    // s late.
    let mut bed = Bed::new(&["a"]);
    for node in ["bus", "a"] {
        bed.start_host(node);
    }
    bed.push_all(60, 0);
    let before = bed.library().users_text().unwrap();
    write(
        &bed.home.path().join("catalogue/modules/agent/module.toml"),
        &AGENT_MODULE.replace(
            r#"buckets = ["agent_state"]"#,
            r#"buckets = ["agent_cache", "agent_state"]"#,
        ),
    );
    // And its code that uses the bucket.
    write(
        &bed.home
            .path()
            .join("catalogue/modules/agent/files/agent.conf"),
        "interval = 5\ncache = agent_cache\n",
    );
    let users = bed.library().users_text().unwrap();
    assert_ne!(users, before);
    assert_eq!(
        permissions_in_config(&users).keys().collect::<Vec<_>>(),
        permissions_in_config(&before).keys().collect::<Vec<_>>(),
        "the same users"
    );
    bed.delay_reloads(Duration::from_secs(3));
    let reloaded_before = bed.reloaded_at_ms();

    let results = bed.push_all(30, 0);
    let bus_users = &results["bus"]["report"]["resources"]["mesh-bus/file/users"];
    assert_eq!(bus_users["outcome"], "applied", "{}", results["bus"]);
    assert!(converged(&results["a"]), "{}", results["a"]);
    assert_eq!(
        std::fs::read_to_string(bed.root("a").join("etc/agent.conf")).unwrap(),
        "interval = 5\ncache = agent_cache\n"
    );
    let reloaded_at_ms = bed.reloaded_at_ms();
    assert!(
        reloaded_at_ms > reloaded_before,
        "the push finished before the bus reloaded its new users"
    );
    let reloaded_at_s = reloaded_at_ms / 1000;
    let a_started = results["a"]["report"]["started-at"].as_u64().unwrap();
    assert!(
        a_started >= reloaded_at_s,
        "`a` was sent (started at {a_started}) before the bus reloaded its users ({reloaded_at_s})"
    );
    let confirmed: serde_json::Value =
        serde_json::from_str(&bed.record("bus/authorization.json").unwrap()).unwrap();
    assert_eq!(
        confirmed["users"],
        mesh_model::sha256_digest(users.as_bytes()),
        "{confirmed}"
    );
    // `a` may use its new bucket at once.
    runtime().block_on(async {
        let a = NatsBus::connect(&bed.node_options("a")).await.unwrap();
        let cache = a.jetstream().get_key_value("agent_cache").await.unwrap();
        cache.put("state", "kept".into()).await.unwrap();
    });
}

#[test]
fn hosts_ride_out_a_bus_restart_and_the_next_push_converges() {
    let mut bed = Bed::new(&["a", "b"]);
    for node in ["bus", "a", "b"] {
        bed.start_host(node);
    }
    bed.push_all(60, 0);
    bed.server.lock().unwrap().restart().unwrap();
    write(
        &bed.home.path().join("catalogue/modules/base/files/hello"),
        "hello again\n",
    );
    let results = bed.push_all(30, 0);
    for (node, result) in &results {
        assert!(converged(result), "{node}: {result}");
        assert_eq!(
            std::fs::read_to_string(bed.root(node).join("etc/mesh/hello")).unwrap(),
            "hello again\n"
        );
    }
    // Their discovery answers came back with the connection: each host's runtime is listed
    // (what `runtimes` prints as "mesh-host on NODE: …"), and `runtimes` exits 0.
    let (found, code) = bed
        .library()
        .call(async |mesh| {
            mesh_controller::bus::runtimes(mesh.home(), mesh.bus().expect("the bed's bus")).await
        })
        .map(|found| (serde_json::to_value(&found).unwrap(), found.exit_code()))
        .unwrap();
    assert_eq!(code, 0, "{found:#}");
    for node in ["bus", "a", "b"] {
        assert!(host_answered(&found, node), "{found:#}");
    }
}

#[test]
fn a_host_that_never_reports_is_named_while_the_others_converge() {
    let mut bed = Bed::new(&["a", "b", "c"]);
    for node in ["bus", "a", "b"] {
        bed.start_host(node);
    }
    // The three hosts are up before the push (a busy machine may take a while to start them):
    // the push's timeout is then c's alone to run out, not theirs.
    support::wait_for(
        "the hosts of bus, a and b answering",
        Duration::from_secs(60),
        || {
            let (found, _) = bed
                .try_library()?
                .call(async |mesh| {
                    mesh_controller::bus::runtimes(mesh.home(), mesh.bus().expect("the bed's bus"))
                        .await
                })
                .map(|found| (serde_json::to_value(&found).unwrap(), found.exit_code()))?;
            if ["bus", "a", "b"]
                .iter()
                .all(|node| host_answered(&found, node))
            {
                Ok(())
            } else {
                Err(format!("{found:#}"))
            }
        },
    );
    let results = bed.push_all(10, 3);
    assert_eq!(results["c"]["result"], "no-report", "{:?}", results["c"]);
    assert_eq!(results["c"]["reason"], "no report within 10s");
    for node in ["bus", "a", "b"] {
        assert!(converged(&results[node]), "{node}: {}", results[node]);
    }
    // Its declaration waits for it on the bus: started later, it converges on its own.
    bed.start_host("c");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !bed.root("c").join("etc/mesh/hello").exists() {
        assert!(Instant::now() < deadline, "c never applied what was sent");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (found, code) = bed
        .library()
        .call(async |mesh| {
            mesh_controller::bus::runtimes(mesh.home(), mesh.bus().expect("the bed's bus")).await
        })
        .map(|found| (serde_json::to_value(&found).unwrap(), found.exit_code()))
        .unwrap();
    assert_eq!(code, 0, "{found:#}");
    assert!(host_answered(&found, "c"), "{found:#}");
}

/// Whether `runtimes --output json` lists `node`'s host (what `runtimes` prints as
/// "mesh-host on NODE: …").
fn host_answered(found: &serde_json::Value, node: &str) -> bool {
    found["runtimes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["service"] == "mesh-host" && r["node"] == node)
}

/// A bed whose node `a` runs module `owned`: a file owned by `alice`, who is not an account on
/// `a` yet, so it fails at the push and waits its backoff (1 s); the hosts of `bus` and `a` run.
fn owned_by_alice_on_a() -> Bed {
    let mut bed = Bed::new(&["a"]);
    let home = bed.home.path().to_owned();
    write(
        &home.join("catalogue/modules/owned/module.toml"),
        "name = \"owned\"\n\n[files.note]\nsource = \"files/note\"\npath = \"/etc/note\"\nowner = \"alice\"\n",
    );
    write(
        &home.join("catalogue/modules/owned/files/note"),
        "for alice\n",
    );
    let inventory = bed.record("inventory.toml").unwrap();
    bed.put_inventory(&format!("{inventory}owned = [\"a\"]\n"));
    bed.start_host("bus");
    bed.start_host_with("a", &["--first-retry", "1"]);
    bed
}

#[test]
fn a_failed_resource_is_applied_again_when_its_backoff_elapses_and_heartbeats_repeat_it() {
    let bed = owned_by_alice_on_a();
    // `alice` is not an account on `a` yet: the file fails, and waits its backoff. (The push
    // returns once every node reported; the timeout only bounds a busy machine's wait.)
    let results = bed.push_all(60, 3);
    assert_eq!(
        results["a"]["report"]["machine"], "partial",
        "{}",
        results["a"]
    );
    let digest = results["a"]["declaration"].as_str().unwrap().to_owned();

    let rt = runtime();
    let bus = bed.controller_bus(&rt);
    let mut reports = rt.block_on(bus.subscribe("mesh.report.a")).unwrap();
    write(
        &bed.root("a").join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:0:Alice:/home/alice:/bin/sh\n",
    );
    // Nothing is sent again: the host tries the file again on its own when the backoff elapses,
    // and its heartbeats then repeat the converged report.
    let converged_reports = rt.block_on(async {
        let mut converged = 0;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while converged < 3 {
            let message = tokio::time::timeout_at(deadline, reports.next())
                .await
                .expect("a converged report and its heartbeats within 15 s")
                .unwrap();
            let report = mesh_model::report::Report::from_json(&message.payload).unwrap();
            if report.declaration == digest
                && report.machine == mesh_model::report::MachineState::Converged
            {
                converged += 1;
            }
        }
        converged
    });
    assert_eq!(converged_reports, 3);
    assert_eq!(
        std::fs::read_to_string(bed.root("a").join("etc/note")).unwrap(),
        "for alice\n"
    );
}

/// The declaration `node` was last sent, as the records hold it (bytes).
fn sent_declaration(bed: &Bed, node: &str) -> String {
    let sent: serde_json::Value =
        serde_json::from_str(&bed.record(&format!("sent/{node}.json")).unwrap()).unwrap();
    let digest = sent["declaration"].as_str().unwrap();
    bed.record(&mesh_controller::declaration_key(digest))
        .unwrap()
}

/// The bus's users travel as an archive in the store, named by the bus node's
/// declaration — which is so the same size with 2 nodes as with 202 (the users file grows some
/// hundreds of bytes a node: megabytes at 10,000, over the bus's 1 MiB max_payload) — and
/// still land on the bus node whole; no record holds them.
#[test]
fn the_bus_nodes_declaration_does_not_grow_with_the_bus_users() {
    let mut bed = Bed::new(&["a"]);
    bed.start_host("bus");
    bed.start_host("a");
    let pushed = bed
        .library()
        .push_within(&["bus", "a"], &[], Duration::from_secs(30))
        .unwrap();
    assert_eq!(pushed.code(), 0, "{:#}", pushed.json);
    let results = pushed.json.as_array().unwrap();
    let out = &pushed.json;
    assert!(results.iter().all(converged), "{out}");
    let few = sent_declaration(&bed, "bus");
    let users_few =
        std::fs::read_to_string(bed.root("bus").join("etc/nats/mesh-users.conf")).unwrap();
    assert_eq!(users_few, bed.library().users_text().unwrap());
    assert!(!few.contains("password"), "{few}");

    // 200 more nodes, not running: each one more user of the bus.
    let mut inventory = bed.record("inventory.toml").unwrap();
    for index in 0..200 {
        inventory.push_str(&format!("\n[nodes.idle-{index:03}]\nrunning = false\n"));
    }
    bed.put_inventory(&inventory);
    let pushed = bed
        .library()
        .push_within(&["bus", "a"], &[], Duration::from_secs(60))
        .unwrap();
    assert_eq!(pushed.code(), 0, "{:#}", pushed.json);
    let results = pushed.json.as_array().unwrap();
    let out = &pushed.json;
    assert!(results.iter().all(converged), "{out}");
    let many = sent_declaration(&bed, "bus");
    assert_ne!(many, few, "the bus node was sent the new users");
    // Only the archive's size may take a digit or two more.
    assert!(
        many.len() <= few.len() + 4,
        "the bus node's declaration grew with its users:\n{few}\n{many}"
    );
    // The users file landed on the bus node whole, and the bus took it: `a` was let on.
    let users_many =
        std::fs::read_to_string(bed.root("bus").join("etc/nats/mesh-users.conf")).unwrap();
    assert_eq!(users_many, bed.library().users_text().unwrap());
    assert!(users_many.contains("idle-199"), "{users_many}");
    assert!(users_many.len() > users_few.len() + 200 * 100);
    // No record holds the users' text: not the declaration, not the confirmed users.
    let records = bed.records();
    use mesh_store::record_store::RecordStore as _;
    let idle_user = mesh_bus::subjects::node_user("idle-199");
    for key in records.keys_under("").unwrap() {
        if key.starts_with("bus/passwords/") {
            continue;
        }
        let value = records.get(&key).unwrap().unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&value).contains(&idle_user),
            "{key} holds the bus's users"
        );
    }
    // The store keeps the archive the bus node was sent: it is the current build of `mesh-bus`.
    let kept: serde_json::Value =
        serde_json::from_str(&bed.record("store/modules/mesh-bus.json").unwrap()).unwrap();
    let many: serde_json::Value = serde_json::from_str(&many).unwrap();
    assert_eq!(kept["current"], many["archives"]["mesh-bus"], "{kept}");
}

/// A record larger than a bucket's value — an inventory of thousands of nodes — is
/// kept in chunks: read back whole, and no value in the bucket above 64 KiB.
#[test]
fn an_inventory_larger_than_a_bucket_value_is_kept_in_chunks_and_read_back_whole() {
    let bed = Bed::new(&["a"]);
    let mut inventory = bed.record("inventory.toml").unwrap();
    for index in 0..3000 {
        inventory.push_str(&format!("\n[nodes.idle-{index:04}]\nrunning = false\n"));
    }
    assert!(inventory.len() > 100 * 1024);
    bed.put_inventory(&inventory);
    assert_eq!(bed.record("inventory.toml").unwrap(), inventory);
    let records = bed.records();
    use mesh_store::record_store::RecordStore as _;
    let keys = records.keys_under("").unwrap();
    assert!(
        keys.iter()
            .any(|key| key.starts_with("chunked/inventory.toml/")),
        "{keys:?}"
    );
    for key in &keys {
        let size = records.get(key).unwrap().unwrap_or_default().len();
        assert!(size <= 64 * 1024, "{key}: {size} bytes");
    }
    // The controller reads it as an inventory: `broker users` names every node.
    assert!(bed.library().users_text().unwrap().contains("idle-2999"));
}

#[test]
fn a_grant_that_fails_fails_the_send() {
    // The bus node's host is not running: its users file is never written, so no other node
    // may be sent code (the rule “Grants before code”).
    let mut bed = Bed::new(&["a"]);
    bed.start_host("a");
    // An error: `push` says it and exits 1.
    let Err(stderr) = bed.library().push_all_within(Duration::from_secs(2)) else {
        panic!("the push went on without the bus node's grants");
    };
    assert!(stderr.contains("grants not issued"), "{stderr}");
    assert!(stderr.contains("nothing else was sent"), "{stderr}");
    // The controller records every send as it makes it: `a` was never sent anything.
    assert!(bed.record("sent/a.json").is_none(), "a was sent nothing");
    assert!(!bed.root("a").join("etc/mesh/hello").exists());
    assert!(bed.record("bus/authorization.json").is_none());
    // The rule “Nothing fails silently”: the failure is `status`'s until a send to `a`, not only a
    // line on stderr.
    let out = bed.library().status();
    assert_eq!(out.code, 3, "{:#}", out.json);
    let status = out.json;
    let grants: Vec<&serde_json::Value> = status["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "grants")
        .collect();
    assert_eq!(grants.len(), 1, "{status:#}");
    assert_eq!(grants[0]["subject"], "a", "{status:#}");
    assert!(
        grants[0]["what"]
            .as_str()
            .unwrap()
            .contains("grants not issued"),
        "{status:#}"
    );
}

#[test]
fn a_host_killed_mid_apply_reports_mid_change_then_converges() {
    let mut bed = Bed::new(&["a"]);
    for node in ["bus", "a"] {
        bed.start_host(node);
    }
    bed.push_all(60, 0);
    // A large declaration for `a`: many files, so its apply takes a while.
    let mut module = String::from("name = \"bulk\"\n");
    for i in 0..1500 {
        module.push_str(&format!(
            "\n[files.f{i}]\nsource = \"files/f{i}\"\npath = \"/srv/bulk/f{i}\"\n"
        ));
        write(
            &bed.home
                .path()
                .join(format!("catalogue/modules/bulk/files/f{i}")),
            &format!("{i}\n").repeat(40),
        );
    }
    write(
        &bed.home.path().join("catalogue/modules/bulk/module.toml"),
        &module,
    );
    let inventory = bed.record("inventory.toml").unwrap();
    bed.put_inventory(&format!("{inventory}bulk = [\"a\"]\n"));

    let rt = runtime();
    let bus = bed.controller_bus(&rt);
    let mut reports = rt.block_on(bus.subscribe("mesh.report.a")).unwrap();
    let push = bed
        .command(&["push", "a", "--timeout", "60", "--output", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let state = bed.state_dir("a");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !mesh_apply::is_mid_change(&state).unwrap() {
        assert!(Instant::now() < deadline, "a never started the apply");
        std::thread::sleep(Duration::from_millis(1));
    }
    bed.hosts.get_mut("a").unwrap().kill().unwrap(); // SIGKILL
    bed.hosts.get_mut("a").unwrap().wait().unwrap();
    assert!(mesh_apply::is_mid_change(&state).unwrap());
    bed.start_host("a");

    let out = push.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
    assert!(converged(&results[0]), "{}", results[0]);
    assert_eq!(results[0]["report"]["resumed-from-mid-change"], true);
    let digest = results[0]["declaration"].as_str().unwrap().to_owned();
    // What `a` said after its restart: mid-change first, then converged, both of the new
    // declaration (heartbeats of older ones may come between).
    let machines: Vec<String> = rt.block_on(async {
        let mut seen = Vec::new();
        while let Ok(Some(message)) =
            tokio::time::timeout(Duration::from_millis(200), reports.next()).await
        {
            let report = mesh_model::report::Report::from_json(&message.payload).unwrap();
            if report.declaration == digest {
                seen.push(mesh_host::machine_word(report.machine).to_owned());
            }
        }
        seen
    });
    let first_mid = machines.iter().position(|m| m == "mid-change");
    let first_converged = machines.iter().position(|m| m == "converged");
    assert!(
        matches!((first_mid, first_converged), (Some(m), Some(c)) if m < c),
        "{machines:?}"
    );
    for i in [0, 777, 1499] {
        assert_eq!(
            std::fs::read_to_string(bed.root("a").join(format!("srv/bulk/f{i}"))).unwrap(),
            format!("{i}\n").repeat(40)
        );
    }
}

#[test]
fn consumer_reset_refuses_a_work_queue_and_resets_a_history_consumer() {
    let bed = Bed::new(&[]);
    let rt = runtime();
    let bus = bed.controller_bus(&rt);
    rt.block_on(async {
        let js = bus.jetstream();
        js.create_stream(async_nats::jetstream::stream::Config {
            name: "WORK".into(),
            subjects: vec!["work.>".into()],
            retention: async_nats::jetstream::stream::RetentionPolicy::WorkQueue,
            ..Default::default()
        })
        .await
        .unwrap();
        js.get_stream("WORK")
            .await
            .unwrap()
            .create_consumer(async_nats::jetstream::consumer::pull::Config {
                durable_name: Some("worker".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        mesh_bus::jetstream::ensure_streams(&js).await.unwrap();
        mesh_bus::jetstream::MergeListener::open(&js, "controller")
            .await
            .unwrap();
        mesh_bus::jetstream::publish_merge(&js, "catalogue", "main", "abc")
            .await
            .unwrap();
    });
    // Refused (`broker consumer-reset` exits 2 saying why): a work queue's pending messages are
    // work to do.
    let refused = bed
        .library()
        .call(async |mesh| {
            let bus = mesh.bus().expect("the bed's bus");
            mesh_controller::bus::consumer_reset(mesh.home(), bus, "WORK", "worker").await
        })
        .unwrap()
        .unwrap_err();
    assert!(refused.contains("a work queue"), "{refused}");
    // The reset as a person reads it, run end to end.
    let text = bed.expect(
        &["broker", "consumer-reset", "MESH_EVENTS", "controller"],
        0,
    );
    assert!(text.contains("1 pending before"), "{text}");
    assert!(text.contains(", 0 now"), "{text}");
}

#[test]
fn the_controller_daemon_answers_discovery_and_rolls_out_a_merge_announced_twice_once() {
    // The rules “Discovery waits for everyone who said they are there” and “A merge heard twice
    // makes one plan”.
    let mut bed = Bed::new(&[]);
    bed.start_host("bus");
    let repo = tempfile::tempdir().unwrap();
    write(&repo.path().join("modules/base/module.toml"), BASE_MODULE);
    write(&repo.path().join("modules/base/files/hello"), "hello\n");
    git(repo.path(), &["init", "-q", "-b", "main"]);
    git(repo.path(), &["add", "."]);
    git(repo.path(), &["commit", "-qm", "base"]);
    let commit = git(repo.path(), &["rev-parse", "HEAD"]);
    bed.library().repo_add("cat", repo.path()).unwrap();

    // Killed if the test fails before it stops the daemon itself.
    struct Daemon(std::process::Child);
    impl Drop for Daemon {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut serve = Daemon(
        bed.command(&["serve"])
            .env("MESH_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let rt = runtime();
    let bus = bed.controller_bus(&rt);
    // The daemon is there once it answers discovery.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        // Exit 0 once every node is heard serving what it is assigned, 3 before it is heard,
        // 2 while it is heard and not yet sent `base`.
        let (found, code) = bed
            .library()
            .call(async |mesh| {
                mesh_controller::bus::runtimes(mesh.home(), mesh.bus().expect("the bed's bus"))
                    .await
            })
            .map(|found| (serde_json::to_value(&found).unwrap(), found.exit_code()))
            .unwrap();
        assert!(matches!(code, 0 | 2 | 3), "{found:#}");
        if found["runtimes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["service"] == "mesh-controller")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the controller never answered: {found}"
        );
    }
    support::fleet::wait_for_merge_consumer(&rt, &bus);
    rt.block_on(async {
        let js = bus.jetstream();
        for _ in 0..2 {
            mesh_bus::jetstream::publish_merge(&js, "cat", "main", &commit)
                .await
                .unwrap();
        }
    });
    let plans =
        || -> Vec<serde_json::Value> { serde_json::from_value(bed.library().plans()).unwrap() };
    // Planned, built and rolled out to the bus node's host, by the daemon alone.
    let deadline = Instant::now() + Duration::from_secs(30);
    while plans()
        .first()
        .is_none_or(|plan| plan["state"]["state"] != "done")
    {
        assert!(
            Instant::now() < deadline,
            "the merge was never rolled out: {:?}",
            plans()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        std::fs::read_to_string(bed.root("bus").join("etc/mesh/hello")).unwrap(),
        "hello\n"
    );
    // The second announcement made no plan: once the daemon's merge consumer has nothing
    // pending and nothing unacknowledged, every announcement stored was handled (the second,
    // the same message id, was not stored at all).
    let handled = rt.block_on(async {
        let js = bus.jetstream();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let mut consumer: async_nats::jetstream::consumer::PullConsumer = js
                .get_consumer_from_stream(
                    mesh_controller::bus::MERGE_CONSUMER,
                    mesh_bus::subjects::EVENTS_STREAM,
                )
                .await
                .unwrap();
            let info = consumer.info().await.unwrap();
            if info.num_pending == 0 && info.num_ack_pending == 0 {
                return info.delivered.stream_sequence;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the daemon never acknowledged every merge: {info:?}"
            );
            // Only paces the wait on the condition above.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    assert!(handled >= 1, "the merge was delivered");
    let made = plans();
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(made[0]["commit"], commit.as_str());

    let status = Command::new("kill")
        .args(["-TERM", &serve.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(serve.0.wait().unwrap().code(), Some(0));
}

/// The records move to the bus once: a second import is refused, the home is marked moved so
/// no command reads its old records without `--bus`, and by hand only a sound inventory is
/// put; nothing else is changed on a refusal.
#[test]
fn records_move_to_the_bus_once_and_the_home_left_behind_is_not_read() {
    let bed = Bed::new(&[]);
    let before = bed.record("inventory.toml").unwrap();

    // An error (`records import` exits 1 saying it).
    let stderr = {
        let library = bed.library();
        let bus = library.mesh().bus().expect("the bed's bus");
        mesh_controller::records::import(bed.home.path(), library.home(), bus.url())
            .map(|imported| serde_json::to_value(imported).unwrap())
            .map_err(|e| crate::support::in_process::said(&e))
    }
    .unwrap_err();
    assert!(stderr.contains("records of"), "{stderr}");

    // The home opened without the bus: `status` on it is an error (exit 1).
    let local = Library::open(bed.home.path(), MeshOptions::default()).unwrap();
    let Err(stderr) = local.try_status() else {
        panic!("status read the home's old records");
    };
    assert!(
        stderr.contains("were moved to a bus") && stderr.contains(&bed.url),
        "{stderr}"
    );

    // `records list`, run end to end (its one run in the tests).
    let listed = bed.expect(&["records", "list", "--output", "json"], 0);
    let listed: Vec<String> = serde_json::from_str(&listed).unwrap();
    for expected in ["bus", "inventory.toml"] {
        assert!(listed.contains(&expected.to_owned()), "{listed:?}");
    }

    let broken = bed.home.path().join("broken.toml");
    write(&broken, "bus-node = [\n");
    // Each an error: `records put` exits 1 saying it.
    let library = bed.library();
    let stderr =
        mesh_controller::records::put_by_hand(library.home(), "inventory.toml", &broken, None)
            .map_err(|e| crate::support::in_process::said(&e))
            .unwrap_err();
    assert!(
        stderr.contains("is not an inventory; nothing was changed"),
        "{stderr}"
    );
    mesh_controller::records::put_by_hand(library.home(), "plans/plan-1.json", &broken, None)
        .map_err(|e| crate::support::in_process::said(&e))
        .unwrap_err();
    assert_eq!(bed.record("inventory.toml").unwrap(), before);
    assert!(bed.record("plans/plan-1.json").is_none());
}

/// On a fleet the plans lock is a lease on the bus: a controller on another machine that keeps
/// renewing it keeps this one waiting, and one that stopped being heard has it taken over.
#[test]
fn the_plans_lease_on_the_bus_waits_for_a_live_holder_and_takes_over_a_silent_one() {
    use mesh_store::record_store::RecordStore as _;
    let bed = Bed::new(&[]);
    let records = bed.records();
    let lease = |beat: u64| {
        serde_json::to_vec(&serde_json::json!({
            "format": 1,
            "holder": {
                "host": "ctl-elsewhere.example",
                "pid": 1,
                "start-time": 0,
                "doing": "merge cat",
                "token": "theirs",
            },
            "beat": beat,
        }))
        .unwrap()
    };
    records.put("locks/plans", &lease(1)).unwrap();
    let mut resume = bed
        .command(&["plans", "resume"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The holder on the other machine renews its lease for a while: this controller waits.
    for beat in 2..=8 {
        std::thread::sleep(Duration::from_secs(1));
        records.put("locks/plans", &lease(beat)).unwrap();
        assert!(
            resume.try_wait().unwrap().is_none(),
            "plans resume went on while the lease was held"
        );
    }
    // Then it is not heard from again: the lease is taken over once its beat stood still.
    let out = resume.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr
            .matches(
                "waiting for the plans lock, held by merge cat (pid 1 on ctl-elsewhere.example)"
            )
            .count(),
        1,
        "{stderr}"
    );
    let after: serde_json::Value =
        serde_json::from_slice(&records.get("locks/plans").unwrap().unwrap()).unwrap();
    assert_eq!(after["holder"], serde_json::Value::Null, "{after}");
    assert!(after["beat"].as_u64().unwrap() > 8, "{after}");
}

/// The node's entry in `status --output json` (with `--silent-after SECS`), and the exit code
/// `status` ends with.
fn status_of(bed: &Bed, node: &str, silent_after: u64) -> (u8, serde_json::Value) {
    let out = bed
        .library()
        .status_with(&mesh_controller::status::StatusOptions {
            silent_after_secs: silent_after,
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let status = out.json;
    let entry = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == node)
        .cloned()
        .unwrap();
    (out.code, entry)
}

/// The rule “Every report is heard, from one source”: the controller hears every report a host
/// publishes, not only those a push waits for. A resource that failed at the push and took later on
/// its own (its backoff elapsed) shows converged in `status` with no other push (exit 3 while it
/// failed, 0 once every node converged); a host that stops is named silent since it was last heard
/// — the threshold shortened by `--silent-after`, never by sleeping.
#[test]
fn status_hears_a_failure_fixed_after_the_push_and_names_a_silent_host() {
    let mut bed = owned_by_alice_on_a();
    // The push returns once every node reported; the timeout only bounds a busy machine's wait.
    let results = bed.push_all(60, 3);
    assert_eq!(
        results["a"]["report"]["machine"], "partial",
        "{}",
        results["a"]
    );
    let (code, a) = status_of(&bed, "a", 90);
    assert_eq!(a["report"]["machine"], "partial", "{a}");
    assert_eq!(code, 3, "a failed resource needs attention: {a}");

    // `alice` is made; nothing is sent: the host applies the file again on its own.
    write(
        &bed.root("a").join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:0:Alice:/home/alice:/bin/sh\n",
    );
    let (code, a) = wait_for("status hears a converge", Duration::from_secs(30), || {
        let (code, a) = status_of(&bed, "a", 90);
        if a["report"]["machine"] == "converged" {
            Ok((code, a))
        } else {
            Err(a.to_string())
        }
    });
    assert_eq!(a["current"], true, "{a}");
    assert_eq!(code, 0, "every node converged and current: {a}");

    // Stopped, `a` is heard no more: silent since its last heartbeat.
    let host = bed.hosts.get_mut("a").unwrap();
    host.kill().unwrap();
    host.wait().unwrap();
    let (code, a) = wait_for("a called silent", Duration::from_secs(30), || {
        let (code, a) = status_of(&bed, "a", 2);
        if a["silent_since"].is_null() {
            Err(a.to_string())
        } else {
            Ok((code, a))
        }
    });
    assert_eq!(code, 3, "a silent node needs attention: {a}");
    assert_eq!(a["silent_since"], a["heard_at"], "{a}");
    // What `status --silent-after 2` prints as "a: silent since …".
    let (_, a) = status_of(&bed, "a", 2);
    assert!(!a["silent_since"].is_null(), "{a}");
}

/// The rule “Secrets never leave their owner”: a fleet no one else can join. Over TLS with NKeys: a
/// host signing with its own seed cannot be another node; a key no one enrolled is refused; the
/// users file the bus node holds has no secret in it (parsed); the records bucket holds no node
/// secret; a plain client and a client trusting another CA are refused, each error saying which; a
/// seed others may read is refused at start, never echoed.
#[test]
fn a_fleet_no_one_else_can_join() {
    let mut bed = Bed::new(&["a"]);
    for node in ["bus", "a"] {
        bed.start_host(node);
    }
    let results = bed.push_all(60, 0);
    assert!(results.values().all(converged), "{results:?}");
    let seed_of = |node: &str| mesh_bus::keys::read_seed_file(&bed.seed_file(node)).unwrap();
    let seeds: Vec<(String, String)> = ["bus", "a"]
        .iter()
        .map(|node| (node.to_string(), seed_of(node).trim().to_owned()))
        .chain(std::iter::once((
            "controller".to_owned(),
            mesh_bus::keys::read_seed_file(&bed.controller_seed_file())
                .unwrap()
                .trim()
                .to_owned(),
        )))
        .collect();

    // `a` signing with its own seed, claiming to be `bus`: the server knows it by its key, so
    // it has `a`'s permissions and hears nothing of `bus`'s.
    let rt = runtime();
    rt.block_on(async {
        let mut claiming = bed.node_options("a");
        let bus_options =
            mesh_bus::NatsOptions::for_node_nkey(bed.url.clone(), "bus", seed_of("a"))
                .with_tls(bed.bus_tls());
        claiming.inbox_prefix = bus_options.inbox_prefix.clone();
        claiming.name = bus_options.name.clone();
        claiming.refusals_expected = true;
        let as_bus = NatsBus::connect(&claiming).await.unwrap();
        let mut refusals = as_bus.refusals();
        let _declarations = as_bus
            .subscribe(&mesh_bus::subjects::declaration("bus"))
            .await;
        as_bus.flush().await.unwrap();
        let refused = tokio::time::timeout(Duration::from_secs(10), refusals.recv())
            .await
            .expect("the server refused nothing")
            .unwrap();
        assert!(
            format!("{refused:?}").contains("mesh.declaration.bus"),
            "{refused:?}"
        );
        // A key no one enrolled is not let in at all.
        let stranger = mesh_bus::keys::derived_user_seed("someone else", "fleet test");
        let error = NatsBus::connect(
            &mesh_bus::NatsOptions::for_node_nkey(bed.url.clone(), "a", stranger)
                .with_tls(bed.bus_tls()),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(error.contains("authorization violation"), "{error}");
    });

    // The users file the bus node was sent, parsed: every user by an NKey public key, no
    // password, no seed.
    let users = std::fs::read_to_string(bed.root("bus").join("etc/nats/mesh-users.conf")).unwrap();
    let mut nkeys = Vec::new();
    for line in users.lines().map(str::trim) {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key.trim() {
            "nkey" => nkeys.push(value.trim().trim_matches('"').to_owned()),
            "password" | "user" | "token" | "auth_token" => {
                panic!("a secret-bearing entry in the users file: {line}")
            }
            _ => {}
        }
    }
    // The controller, both nodes and the probe user.
    assert_eq!(nkeys.len(), 4, "{users}");
    assert!(
        nkeys.iter().all(|k| mesh_bus::keys::is_user_public_key(k)),
        "{nkeys:?}"
    );
    for (who, seed) in &seeds {
        assert!(
            !users.contains(seed.as_str()),
            "{who}'s seed is in the users file"
        );
    }
    let status = bed.library().status().json;
    assert_eq!(status["on-passwords"], serde_json::json!([]), "{status}");

    // The records bucket: no password record, and no seed in any record.
    use mesh_store::record_store::RecordStore as _;
    let records = bed.records();
    let keys = records.keys_under("").unwrap();
    assert!(keys.iter().any(|k| k == "bus/nkeys/a"), "{keys:?}");
    for key in &keys {
        assert!(!key.starts_with("bus/passwords/"), "{key}");
        assert_ne!(key, "bus/nkey.seed");
        let value = records.get(key).unwrap().unwrap_or_default();
        let text = String::from_utf8_lossy(&value);
        for (who, seed) in &seeds {
            assert!(
                !text.contains(seed.as_str()),
                "{who}'s seed is in record {key}"
            );
        }
    }

    // A plain client to the TLS-only server, and one trusting another CA: refused, each
    // saying which.
    // Each an error: `status` on it exits 1 saying it.
    let status_on = |bus: BusConfig| -> Result<_, String> {
        let options = MeshOptions {
            bus: Some(bus),
            ..Default::default()
        };
        Library::open(bed.home.path(), options)?.try_status()
    };
    let plain_url = bed.url.replace("tls://", "nats://");
    let Err(said) = status_on(BusConfig::new(plain_url.clone())) else {
        panic!("a plain client read the fleet's status");
    };
    assert!(said.contains(&plain_url), "{said}");
    assert!(
        said.contains("the server requires TLS and no CA file was given"),
        "{said}"
    );
    let other = support::pki::TestPki::new("another");
    let Err(said) = status_on(BusConfig::new(bed.url.clone()).with_ca_file(&other.ca_file)) else {
        panic!("a client trusting another CA read the fleet's status");
    };
    assert!(
        said.contains("its certificate is not trusted")
            && said.contains(&other.ca_file.display().to_string()),
        "{said}"
    );

    // The controller's seed readable by others: refused at start, naming the file, not what
    // it holds.
    use std::os::unix::fs::PermissionsExt as _;
    let seed_file = bed.controller_seed_file();
    std::fs::set_permissions(&seed_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let Err(said) = bed.try_library().and_then(|library| library.try_status()) else {
        panic!("the controller signed with a seed others may read");
    };
    assert!(
        said.contains("readable by others") && said.contains(&seed_file.display().to_string()),
        "{said}"
    );
    let controller_seed = &seeds.last().unwrap().1;
    assert!(!said.contains(controller_seed.as_str()), "{said}");
    std::fs::set_permissions(&seed_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let settled = bed.library().status();
    assert_eq!(settled.code, 0, "{:#}", settled.json);

    // A node added and not yet enrolled is on a password: `status` names it (text and JSON)
    // until it is enrolled.
    let inventory = bed.record("inventory.toml").unwrap();
    bed.put_inventory(&format!("{inventory}\n[nodes.late]\n"));
    // The section as a person reads it, with how to enroll, run end to end.
    let text = bed.run(&["status"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("on bus passwords, not yet enrolled with an NKey")
            && text.contains("`node enroll NODE PUBLIC-KEY`): late\n"),
        "{text}"
    );
    let status = bed.library().status().json;
    assert_eq!(
        status["on-passwords"],
        serde_json::json!(["late"]),
        "{status}"
    );
    bed.enroll("late");
    let status = bed.library().status().json;
    assert_eq!(status["on-passwords"], serde_json::json!([]), "{status}");
}
