//! A newer merge takes over an older open plan ("A newer merge takes over an older plan"), and the
//! takeover survives a crash: the new plan — holding the older plan's unfinished modules — and the
//! older plan's superseded mark become durable in that order, each write with a fail point. The
//! controller dies (SIGABRT, nothing finished: a fail point, never a kill after a sleep) at each.
//! At that instant either the older plan is open or the new plan holds its modules; the next drive
//! finishes the takeover, and no module of the older plan is lost.
//!
//! The controller dies at its fail points as a process (the binary); everything else — the
//! repository registered, the first plan, the plans read, the drive that finishes the takeover —
//! is called through the controller library in process (`Mesh::library`, `Bed::library`), beside
//! the daemon (`serve`, a process stopped by a signal).

use crate::support;
use mesh_controller::fail;

use serde_json::Value;
use support::daemon::Daemon;
use support::{Mesh, Repo};

const INVENTORY: &str = r#"bus-node = "control"

[nodes.control]
[nodes.home]

[assignments]
site = ["control", "home"]
notes = ["control", "home"]
"#;

fn module(name: &str, path: &str, text: &str) -> [(String, String); 2] {
    [
        (
            format!("modules/{name}/module.toml"),
            format!(
                "name = \"{name}\"\n\n[files.text]\nsource = \"files/text\"\npath = \"{path}\"\n"
            ),
        ),
        (format!("modules/{name}/files/text"), text.to_owned()),
    ]
}

fn write(repo: &Repo, files: &[(String, String)]) {
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(path, text)| (path.as_str(), text.as_str()))
        .collect();
    repo.write(&files);
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A mesh whose repository's first commit is planned and not built (`plan-1`, open: `site` and
/// `notes`), and a second commit changing only `site`, not yet merged; its id.
fn an_open_plan_and_a_newer_commit() -> (Mesh, Repo, String) {
    let mesh = Mesh::example();
    std::fs::write(mesh.home().join("inventory.toml"), INVENTORY).unwrap();
    let repo = Repo::new();
    write(&repo, &module("site", "/srv/www/index.html", "v1\n"));
    write(&repo, &module("notes", "/etc/notes.txt", "first note\n"));
    repo.commit("first");
    let library = mesh.library();
    library.repo_add("cat", repo.path()).unwrap();
    let planned = library.merge_plan_only("cat").unwrap();
    // `merge --plan-only` exits 0.
    assert!(!planned.stopped, "{}", planned.lines);
    write(&repo, &module("site", "/srv/www/index.html", "v2\n"));
    let second = repo.commit("site: v2");
    (mesh, repo, second)
}

/// The plans, by id.
fn plans(mesh: &Mesh) -> std::collections::BTreeMap<String, Value> {
    by_id(mesh.library().plans())
}

/// Plans (`plans --output json`) by id.
fn by_id(listed: Value) -> std::collections::BTreeMap<String, Value> {
    listed
        .as_array()
        .unwrap()
        .iter()
        .map(|plan| (plan["id"].as_str().unwrap().to_owned(), plan.clone()))
        .collect()
}

fn modules(plan: &Value) -> Vec<&str> {
    plan["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect()
}

#[test]
fn a_controller_killed_at_each_takeover_write_loses_no_module_of_the_older_plan() {
    for step in ["plan-saved", "superseded:plan-1"] {
        let (mesh, _repo, second) = an_open_plan_and_a_newer_commit();
        let died = mesh.run_env(
            &["merge", "cat", "--plan-only"],
            &[(fail::FAILPOINTS, &fail::die_at(step, 1))],
        );
        assert_eq!(
            died.code, -1,
            "the controller was to die at `{step}`: {}{}",
            died.stdout, died.stderr
        );
        assert!(
            died.stderr.contains(&format!("dying at `{step}`")),
            "{}",
            died.stderr
        );

        // As the kill left them: plan-1 open, or plan-2 holding every module plan-1 had not
        // finished — never plan-1 superseded by a plan that is not there.
        let at_kill = plans(&mesh);
        let older = &at_kill["plan-1"];
        let older_open = matches!(older["state"]["state"].as_str(), Some("building"));
        if !older_open {
            assert_eq!(older["state"]["state"], "superseded", "{at_kill:#?}");
            assert_eq!(older["state"]["by"], "plan-2", "{at_kill:#?}");
        }
        let newer = at_kill.get("plan-2");
        if let Some(newer) = newer {
            assert_eq!(newer["commit"], second.as_str());
            for module in ["site", "notes"] {
                assert!(
                    modules(newer).contains(&module),
                    "died at `{step}`: plan-2 holds `{module}`: {at_kill:#?}"
                );
            }
        }
        assert!(
            older_open || newer.is_some(),
            "died at `{step}`: plan-1's modules are nowhere: {at_kill:#?}"
        );

        // The next drive finishes the takeover before it drives anything: plan-1 is superseded
        // by plan-2, which builds and rolls out both modules.
        let driven = mesh.library().plans_resume(None).unwrap();
        // `plans resume` exits 0: no plan stopped.
        assert!(!driven.stopped, "{}", driven.lines);
        let resumed = driven.lines;
        let after = plans(&mesh);
        assert_eq!(
            after["plan-1"]["state"],
            serde_json::json!({"state": "superseded", "by": "plan-2"}),
            "died at `{step}`: {resumed}"
        );
        assert_eq!(after["plan-2"]["state"]["state"], "done", "{resumed}");
        assert_eq!(after.len(), 2, "{after:#?}");
        if step == "plan-saved" {
            assert!(
                resumed.contains("plan-1: superseded by plan-2 (its supersede was interrupted"),
                "{resumed}"
            );
        }
        for (module, path, text) in [
            ("site", "srv/www/index.html", "v2\n"),
            ("notes", "etc/notes.txt", "first note\n"),
        ] {
            let deployed = json(
                &std::fs::read_to_string(mesh.home().join(format!("deployed/{module}.json")))
                    .unwrap(),
            );
            assert_eq!(deployed["plan"], "plan-2", "died at `{step}`: {resumed}");
            for node in ["control", "home"] {
                assert_eq!(
                    std::fs::read_to_string(mesh.root(node).join(path)).unwrap(),
                    text,
                    "`{module}` on {node}, died at `{step}`"
                );
            }
        }
    }
}

/// `site` goes to `away` alone, so `away` is its first machine; `notes` is built from `site`,
/// a tier later, and goes to the bus node.
const AWAY_INVENTORY: &str = r#"bus-node = "bus"

[nodes.bus]
[nodes.away]

[assignments]
site = ["away"]
notes = ["bus"]
"#;

#[test]
fn a_newer_merge_heard_by_the_daemon_takes_over_a_plan_waiting_on_its_first_machine() {
    use std::time::{Duration, Instant};
    let mut bed = support::fleet::Bed::new(&["away"]);
    bed.put_inventory(AWAY_INVENTORY);
    // `away`'s host is stopped: the first machine of `site` never reports.
    bed.start_host("bus");
    let repo = Repo::new();
    write(&repo, &module("site", "/srv/site.txt", "v1\n"));
    write(&repo, &module("notes", "/etc/notes.txt", "first note\n"));
    repo.write(&[(
        "modules/notes/module.toml",
        "name = \"notes\"\ndepends = [\"site\"]\n\n[files.text]\nsource = \"files/text\"\npath = \"/etc/notes.txt\"\n",
    )]);
    let first = repo.commit("first");
    bed.library().repo_add("cat", repo.path()).unwrap();

    let daemon = Daemon::logged(&bed, &[]);
    let rt = support::fleet::runtime();
    let bus = bed.controller_bus(&rt);
    support::fleet::wait_for_merge_consumer(&rt, &bus);
    let announce = |commit: &str| {
        rt.block_on(async {
            mesh_bus::jetstream::publish_merge(&bus.jetstream(), "cat", "main", commit)
                .await
                .unwrap()
        })
    };
    let plans_of = |bed: &support::fleet::Bed| -> std::collections::BTreeMap<String, Value> {
        by_id(bed.library().plans())
    };

    // Plan A: `site` built and sent to its first machine, which never reports; `notes`, a tier
    // later, is not built.
    announce(&first);
    support::wait_for(
        "plan-1 to wait on its first machine",
        Duration::from_secs(120),
        || match bed.record("sent/away.json") {
            Some(_) => Ok(()),
            None => Err(format!("{:?}\n{}", plans_of(&bed), daemon.log())),
        },
    );
    let waiting = plans_of(&bed);
    assert_eq!(
        waiting["plan-1"]["state"]["state"], "rolling-out",
        "{waiting:#?}"
    );

    // Merge B is heard: A is superseded by B within seconds, not after A's deadline (600 s).
    write(&repo, &module("site", "/srv/site.txt", "v2\n"));
    let second = repo.commit("site: v2");
    announce(&second);
    let announced = Instant::now();
    let taken_over = support::wait_for(
        "plan-1 to be superseded by plan-2",
        Duration::from_secs(60),
        || {
            let now = plans_of(&bed);
            match now.get("plan-1") {
                Some(a)
                    if a["state"] == serde_json::json!({"state": "superseded", "by": "plan-2"}) =>
                {
                    Ok(announced.elapsed())
                }
                _ => Err(format!("{now:#?}\n{}", daemon.log())),
            }
        },
    );
    println!("plan-1 superseded by plan-2 {taken_over:?} after merge B was announced");
    assert!(
        taken_over < Duration::from_secs(10),
        "the takeover took {taken_over:?}"
    );
    let after = plans_of(&bed);
    let newer = &after["plan-2"];
    assert_eq!(newer["commit"], second.as_str());
    for module in ["site", "notes"] {
        assert!(
            modules(newer).contains(&module),
            "plan-2 holds `{module}`: {after:#?}"
        );
    }

    // B rolls out once its first machine is there, A's unbuilt module with it.
    bed.start_host("away");
    support::wait_for("plan-2 to roll out", Duration::from_secs(120), || {
        let now = plans_of(&bed);
        match now["plan-2"]["state"]["state"].as_str() {
            Some("done") => Ok(()),
            state => Err(format!("plan-2 is {state:?}: {now:#?}\n{}", daemon.log())),
        }
    });
    assert_eq!(
        std::fs::read_to_string(bed.root("away").join("srv/site.txt")).unwrap(),
        "v2\n"
    );
    assert_eq!(
        std::fs::read_to_string(bed.root("bus").join("etc/notes.txt")).unwrap(),
        "first note\n"
    );
    let deployed = json(&bed.record("deployed/notes.json").unwrap());
    assert_eq!(deployed["plan"], "plan-2");
    daemon.stop();
}
