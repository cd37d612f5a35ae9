//! The rollout's guards over the bus with the daemon: a real `mesh-controller serve` plans each
//! merge announced on a real nats-server and rolls it out to real `mesh-host serve` daemons
//! (real podman for the containers), read from real git.
//!
//! - The rule “A moved mount is held”: a merge moving a running container's data holds that
//!   node while the others go on; the plan rests open, `status` names the hold, and `merge
//!   --move MODULE` sends it (the in-process scenario of `executor.rs`).
//! - `upgrade = "together"`: every node is sent at once, none first (`merges.rs`'s).
//! - "An orphaned setting is a removal": a merge whose version no longer accepts a key a node's
//!   layer sets holds that node, naming it; once `settings rename` maps the key, the daemon
//!   sends it by itself (the in-process scenario of `orphaned_settings.rs`).
//!
//! A newer merge taking over an older plan over the bus with the daemon is `takeover.rs`'s.
//! Needs podman configured as `scripts/podman-env.sh` does; fails, never skips, without it.
//!
//! The controller is called as a library, in process, on the bed's bus (`Bed::library`,
//! `Bed::library`): the merges announced, the repository registered, settings set and
//! renamed, pushes, `merge --move`, status and the inventory. The binary is run for the daemon
//! (`serve`, `support::daemon`).

use crate::support;
use serde_json::Value;
use support::daemon::{plans, start_serve, wait_for_plan_done};
use support::fleet::Bed;
use support::in_process::MergeFlags;
use support::Repo;

/// The plan `id`, as `plans --output json` lists it.
fn plan(bed: &Bed, id: &str) -> Value {
    plans(bed)
        .into_iter()
        .find(|p| p["id"] == id)
        .unwrap_or_else(|| panic!("no {id}: {:?}", plans(bed)))
}

/// Announces the merge of the repository's head to the daemon (`merge cat --announce`):
/// announced, not "already announced", the merge of `cat`.
fn announce(bed: &Bed) {
    let announced = bed.library().merge_announce("cat").unwrap();
    assert!(
        announced.repository == "cat" && !announced.already_announced,
        "{announced:?}"
    );
}

/// `status --output json` once it holds a node (`held` not empty), and the exit code `status`
/// ends with then.
fn held(bed: &Bed, what: &str) -> (u8, Value) {
    support::wait_for(what, std::time::Duration::from_secs(120), || {
        let status = bed.try_library()?.try_status()?;
        match status.json["held"].as_array() {
            Some(held) if !held.is_empty() => Ok((status.code, status.json)),
            _ => Err(format!("{:#}", status.json)),
        }
    })
}

/// `status --output json`, expected to exit `code`.
fn status_of(bed: &Bed, code: u8) -> Value {
    let status = bed.library().status();
    assert_eq!(status.code, code, "{:#}", status.json);
    status.json
}

/// `settings set MODULE --node NODE JSON`, on the bus: it went ahead (`settings set` exits 0).
fn set(bed: &Bed, module: &str, node: &str, json: &str) {
    let answer = bed
        .library()
        .settings_set(module, Some(node), json)
        .unwrap();
    assert!(!answer.refused(), "{answer:?}");
}

/// `push NODE [--move MODULE] --timeout 60`: every node converged (`push` exits 0).
fn push(bed: &Bed, node: &str, moves: &[&str]) {
    let pushed = bed
        .library()
        .push_within(&[node], moves, std::time::Duration::from_secs(60))
        .unwrap();
    assert_eq!(pushed.code(), 0, "{}\n{:#}", pushed.lines, pushed.json);
}

/// `keep` runs a container whose `/data` is the place `data`.
fn keep_module(default: &str, note: &str) -> String {
    format!(
        "name = \"keep\"\n\n[places.data]\ndefault = \"{default}\"\n\n[files.note]\nsource = \
         \"files/note.txt\"\npath = \"/etc/keep.txt\"\n\n[containers.db]\nimage = \"{}\"\n\
         command = [\"sleep\", \"3600\"]\nmounts = [{{ place = \"data\", at = \"/data\" }}]\n\
         # {note}\n",
        mesh_test_support::podman::image()
    )
}

/// Removes the test's containers, whatever made them.
struct Removed(Vec<String>);

impl Drop for Removed {
    fn drop(&mut self) {
        for name in &self.0 {
            mesh_test_support::podman::remove(name);
        }
    }
}

#[test]
fn a_merge_moving_a_running_containers_data_is_held_by_the_daemon_until_merge_move() {
    mesh_test_support::podman::podman_config();
    let mut bed = Bed::new(&["a"]);
    bed.put_inventory(
        "bus-node = \"bus\"\n\n[nodes.bus]\n[nodes.a]\n\n[assignments]\nkeep = [\"bus\", \"a\"]\n",
    );
    // Each host names its containers with a prefix of its own: tests share one podman.
    let prefix = |node: &str| format!("t{}-{node}-", std::process::id());
    let _removed = Removed(
        ["bus", "a"]
            .iter()
            .map(|node| format!("{}mesh-keep-db", prefix(node)))
            .collect(),
    );
    for node in ["bus", "a"] {
        let prefix = prefix(node);
        bed.start_host_with(
            node,
            &["--container-prefix", &prefix, "--podman-stop-timeout", "0"],
        );
    }
    let repo = Repo::new();
    repo.write(&[
        ("modules/keep/module.toml", &keep_module("/srv/data", "v1")),
        ("modules/keep/files/note.txt", "v1\n"),
    ]);
    let first = repo.commit("keep: first");
    bed.library().repo_add("cat", repo.path()).unwrap();
    let (_daemon, _) = start_serve(&bed, &[], |_| true);
    let rt = support::fleet::runtime();
    let bus = bed.controller_bus(&rt);
    support::fleet::wait_for_merge_consumer(&rt, &bus);
    announce(&bed);
    wait_for_plan_done(&bed, &first);
    let a_container = format!("{}mesh-keep-db", prefix("a"));
    let sources = mesh_test_support::podman::mount_sources(&a_container);
    assert!(
        sources.iter().any(|s| s.ends_with("/srv/data")),
        "{sources:?}"
    );
    // `bus` is given the place in its own layer (and moved there by hand): a change of the
    // default then moves only `a`'s data.
    set(
        &bed,
        "keep",
        "bus",
        r#"{"places": {"data": "/srv/bus-data"}}"#,
    );
    push(&bed, "bus", &["keep"]);

    // The place's default moves: `a`'s running container would get another directory at
    // `/data`. The daemon holds `a`, `bus` goes on, and the plan rests open.
    repo.write(&[
        ("modules/keep/module.toml", &keep_module("/srv/data2", "v2")),
        ("modules/keep/files/note.txt", "v2\n"),
    ]);
    repo.commit("keep: data moves to /srv/data2");
    announce(&bed);
    let (code, status) = held(&bed, "the daemon to hold `a` for the move");
    assert_eq!(code, 3, "a hold needs a person: {status:#}");
    let held = &status["held"][0];
    assert_eq!(
        (&held["plan"], &held["module"], &held["node"]),
        (
            &Value::from("plan-2"),
            &Value::from("keep"),
            &Value::from("a")
        ),
        "{status:#}"
    );
    assert_eq!(held["moves"][0]["at"], "/data", "{status:#}");
    assert!(
        held["moves"][0]["to"]
            .as_str()
            .unwrap()
            .ends_with("/srv/data2"),
        "{status:#}"
    );
    // `bus` goes on: its apply may end after the hold is shown (the hold is known before the
    // rest are sent), so it is waited for.
    support::wait_for(
        "`bus` to go on",
        std::time::Duration::from_secs(120),
        || match std::fs::read_to_string(bed.root("bus").join("etc/keep.txt")) {
            Ok(text) if text == "v2\n" => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    assert_eq!(
        std::fs::read_to_string(bed.root("a").join("etc/keep.txt")).unwrap(),
        "v1\n",
        "`a` was sent nothing"
    );
    assert_eq!(plan(&bed, "plan-2")["state"]["state"], "rolling-out");

    // `merge --move keep` drives the plan the daemon left open: `a` is sent, its container
    // recreated at the new directory, and the plan is done.
    let merged = bed
        .library()
        .merge_with(
            "cat",
            MergeFlags {
                moves: &["keep"],
                ..Default::default()
            },
        )
        .unwrap();
    assert!(!merged.stopped, "{}\n{:#}", merged.lines, merged.json);
    assert_eq!(plan(&bed, "plan-2")["state"]["state"], "done");
    assert_eq!(
        std::fs::read_to_string(bed.root("a").join("etc/keep.txt")).unwrap(),
        "v2\n"
    );
    let sources = mesh_test_support::podman::mount_sources(&a_container);
    assert!(
        sources.iter().any(|s| s.ends_with("/srv/data2")),
        "{sources:?}"
    );
    let status = status_of(&bed, 0);
    assert_eq!(status["held"], serde_json::json!([]), "{status:#}");
}

#[test]
fn a_together_module_is_sent_to_every_node_at_once_by_the_daemon() {
    let mut bed = Bed::new(&["a"]);
    bed.put_inventory(
        "bus-node = \"bus\"\n\n[nodes.bus]\n[nodes.a]\n\n[assignments]\nsite = [\"bus\", \"a\"]\n",
    );
    for node in ["bus", "a"] {
        bed.start_host(node);
    }
    let site = |upgrade: &str, text: &str| {
        [
            (
                "modules/site/module.toml".to_owned(),
                format!(
                    "name = \"site\"\n{upgrade}\n[files.page]\nsource = \"files/index.html\"\n\
                     path = \"/srv/www/index.html\"\n"
                ),
            ),
            ("modules/site/files/index.html".to_owned(), text.to_owned()),
        ]
    };
    let repo = Repo::new();
    let write = |files: [(String, String); 2]| {
        let files: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, t)| (p.as_str(), t.as_str()))
            .collect();
        repo.write(&files);
    };
    write(site("", "v1\n"));
    let first = repo.commit("site: v1");
    bed.library().repo_add("cat", repo.path()).unwrap();
    let (_daemon, _) = start_serve(&bed, &[], |_| true);
    let rt = support::fleet::runtime();
    let bus = bed.controller_bus(&rt);
    support::fleet::wait_for_merge_consumer(&rt, &bus);
    announce(&bed);
    wait_for_plan_done(&bed, &first);
    // One machine first.
    let rollout = &plan(&bed, "plan-1")["rollouts"]["site"];
    assert!(rollout["first"].is_string(), "{rollout}");

    write(site("upgrade = \"together\"\n", "v2\n"));
    let second = repo.commit("site: v2, together");
    announce(&bed);
    wait_for_plan_done(&bed, &second);
    let rollout = &plan(&bed, "plan-2")["rollouts"]["site"];
    assert_eq!(
        rollout["first"],
        Value::Null,
        "no node goes first: {rollout}"
    );
    assert_eq!(rollout["sent"], 2, "{rollout}");
    assert_eq!(rollout["applied"], 2, "{rollout}");
    for node in ["bus", "a"] {
        assert_eq!(
            std::fs::read_to_string(bed.root(node).join("srv/www/index.html")).unwrap(),
            "v2\n",
            "{node}"
        );
    }
}

/// `web` with its port setting named `key` (default 8080), rendered into its config.
fn web_files(key: &str) -> [(String, String); 2] {
    [
        (
            "modules/web/module.toml".to_owned(),
            format!(
                "name = \"web\"\n\n[settings]\n{key} = 8080\n\n[files.conf]\nsource = \
                 \"files/web.conf\"\npath = \"/etc/web.conf\"\ntemplate = true\n"
            ),
        ),
        (
            "modules/web/files/web.conf".to_owned(),
            format!("listen {{{{{key}}}}}\n"),
        ),
    ]
}

#[test]
fn a_merge_orphaning_a_setting_is_held_by_the_daemon_until_the_setting_is_renamed() {
    // "An orphaned setting is a removal", over the bus with the daemon as `orphaned_settings.rs`
    // has it in process: `a`'s layer sets `port`, the next commit renames it `http-port`.
    let mut bed = Bed::new(&["a"]);
    bed.put_inventory(
        "bus-node = \"bus\"\n\n[nodes.bus]\n[nodes.a]\n\n[assignments]\nweb = [\"bus\", \"a\"]\n",
    );
    for node in ["bus", "a"] {
        bed.start_host(node);
    }
    let repo = Repo::new();
    let write = |files: [(String, String); 2]| {
        let files: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, t)| (p.as_str(), t.as_str()))
            .collect();
        repo.write(&files);
    };
    write(web_files("port"));
    let first = repo.commit("web on 8080");
    bed.library().repo_add("cat", repo.path()).unwrap();
    let (_daemon, _) = start_serve(&bed, &[], |_| true);
    let rt = support::fleet::runtime();
    let bus = bed.controller_bus(&rt);
    support::fleet::wait_for_merge_consumer(&rt, &bus);
    announce(&bed);
    wait_for_plan_done(&bed, &first);
    set(&bed, "web", "a", r#"{"port": 9090}"#);
    push(&bed, "a", &[]);
    let conf = |node: &str| std::fs::read_to_string(bed.root(node).join("etc/web.conf")).unwrap();
    assert_eq!(conf("a"), "listen 9090\n");

    // The daemon holds `a`, naming module, layer, key and value; `bus` goes on.
    write(web_files("http-port"));
    let renamed = repo.commit("the port setting is http-port");
    announce(&bed);
    let (code, status) = held(&bed, "the daemon to hold `a` for its orphaned setting");
    assert_eq!(code, 3, "a hold needs a person: {status:#}");
    let held = &status["held"][0];
    assert_eq!(
        (&held["plan"], &held["node"]),
        (&Value::from("plan-2"), &Value::from("a")),
        "{status:#}"
    );
    let orphan = &held["orphans"][0];
    assert_eq!(
        (
            &orphan["module"],
            &orphan["layer"]["node"],
            &orphan["key"],
            &orphan["value"]
        ),
        (
            &Value::from("web"),
            &Value::from("a"),
            &Value::from("port"),
            &Value::from(9090)
        ),
        "{status:#}"
    );
    // `bus` goes on (its apply may end after the hold is shown).
    support::wait_for(
        "`bus` to go on",
        std::time::Duration::from_secs(120),
        || match conf("bus") {
            text if text == "listen 8080\n" => Ok(()),
            other => Err(other),
        },
    );
    assert_eq!(conf("a"), "listen 9090\n", "`a` was sent nothing");
    assert_eq!(plan(&bed, "plan-2")["state"]["state"], "rolling-out");

    // Renamed, the daemon drives the plan again by itself (no merge, no command) and sends
    // `a`, which keeps its port.
    bed.library()
        .settings_rename("web", "port", "http-port")
        .unwrap();
    wait_for_plan_done(&bed, &renamed);
    assert_eq!(conf("a"), "listen 9090\n");
    let status = status_of(&bed, 0);
    assert_eq!(status["held"], serde_json::json!([]), "{status:#}");
}
