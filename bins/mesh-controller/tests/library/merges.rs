//! Merges make plans, in the embedded default, with real git repositories: change
//! attribution, one plan per merge, builds in the store, one-machine-first rollouts that stop at
//! a failing first node, supersede, close, behind, dry-run builds.
//!
//! The library is called in process (`support::in_process`); the binary is run for what only
//! it does: the text a person reads (snapshots), where progress goes beside JSON, and a
//! controller dying at a fail point, which must be a process of its own.

use crate::support;

use mesh_controller::fail;
use mesh_controller::plans::MergeOutcome;
use mesh_controller::Verdict;
use mesh_model::plan::PlanState;
use serde_json::Value;
use support::in_process::{Library, MergeFlags, Merged};
use support::{redact, Mesh, Repo};

/// Three nodes; `site` runs everywhere, `notes` on control and laptop, `tools` (built after
/// `site`) on home.
const INVENTORY: &str = r#"bus-node = "control"

[nodes.control]
[nodes.home]
[nodes.laptop]

[assignments]
site = ["control", "home", "laptop"]
notes = ["control", "laptop"]
tools = ["home"]
"#;

fn site_module(page: &str, extra: &str) -> [(String, String); 2] {
    [
        (
            "modules/site/module.toml".into(),
            format!(
                "name = \"site\"\n\n[files.page]\nsource = \"files/index.html\"\npath = \"/srv/www/index.html\"\n{extra}"
            ),
        ),
        ("modules/site/files/index.html".into(), page.into()),
    ]
}

/// A mesh with the test inventory and a repository holding `site`, `notes` and `tools`, its
/// first commit made and registered as `cat`.
fn setup() -> (Mesh, Repo, String) {
    let mesh = Mesh::example();
    std::fs::write(mesh.home().join("inventory.toml"), INVENTORY).unwrap();
    let repo = Repo::new();
    let [a, b] = site_module("v1\n", "");
    repo.write(&[
        (&a.0, &a.1),
        (&b.0, &b.1),
        (
            "modules/notes/module.toml",
            "name = \"notes\"\n\n[files.note]\nsource = \"files/note.txt\"\npath = \"/etc/notes.txt\"\n",
        ),
        ("modules/notes/files/note.txt", "first note\n"),
        (
            "modules/tools/module.toml",
            "name = \"tools\"\ndepends = [\"site\"]\n\n[files.tool]\nsource = \"files/tool.sh\"\npath = \"/usr/local/bin/tool\"\nmode = \"0755\"\n",
        ),
        ("modules/tools/files/tool.sh", "#!/bin/sh\necho one\n"),
        ("README.md", "the catalogue\n"),
    ]);
    let first = repo.commit("first");
    mesh.library().repo_add("cat", repo.path()).unwrap();
    (mesh, repo, first)
}

/// [`setup`] with its first commit merged: every module planned, built and rolled out.
fn first_commit_merged() -> (Mesh, Repo) {
    let (mesh, repo, _) = setup();
    merge(&mesh);
    (mesh, repo)
}

/// `merge cat` in process, its plan done (`merge` exits 0).
fn merge(mesh: &Mesh) -> Merged {
    merge_with(mesh, MergeFlags::default(), false)
}

/// `merge cat` in process with `flags`, its plan `stopped` or not (`merge` exits 3 or 0).
fn merge_with(mesh: &Mesh, flags: MergeFlags<'_>, stopped: bool) -> Merged {
    let merged = mesh
        .library()
        .merge_with("cat", flags)
        .unwrap_or_else(|error| panic!("merge cat: {error}"));
    assert_eq!(merged.stopped, stopped, "{}{}", merged.lines, merged.json);
    merged
}

/// `merge cat` in process, its plan stopped (`merge` exits 3): the progress lines.
fn merge_stopping(mesh: &Mesh) -> String {
    merge_with(mesh, MergeFlags::default(), true).lines
}

/// `merge cat --plan-only` in process.
fn merge_plan_only(mesh: &Mesh) -> Merged {
    merge_with(
        mesh,
        MergeFlags {
            plan_only: true,
            ..Default::default()
        },
        false,
    )
}

/// Writes a new `site` into `repo` (its page and the module's `extra` lines), uncommitted.
fn write_site(repo: &Repo, page: &str, extra: &str) {
    let [a, b] = site_module(page, extra);
    repo.write(&[(&a.0, &a.1), (&b.0, &b.1)]);
}

/// `site`'s extra lines putting `alice` in group `audio`, which no node has until a test adds
/// it: `control`, first by name, fails the new `site` and its rollout stops there.
const ALICE_IN_AUDIO: &str = "\n[memberships.audio]\naccount = \"alice\"\ngroup = \"audio\"\n";

/// Commits a second note and merges it with `--plan-only`: plan-2 is open, `notes` not built.
fn plan_a_second_note(mesh: &Mesh, repo: &Repo) {
    repo.write(&[("modules/notes/files/note.txt", "second note\n")]);
    repo.commit("notes: second");
    merge_plan_only(mesh);
}

/// A JSON record in the controller's home (`deployed/site.json`, `store/modules/site.json`).
fn home_json(mesh: &Mesh, path: impl AsRef<std::path::Path>) -> Value {
    json(&std::fs::read_to_string(mesh.home().join(path)).unwrap())
}

/// `push --all` (through `library`) leaves every resource on every node unchanged.
fn assert_a_push_changes_nothing(library: &Library) {
    let pushed = library.push_all().unwrap();
    assert_eq!(pushed.verdict, Verdict::Converged, "{}", pushed.json);
    let push = pushed.json;
    for node in push.as_array().unwrap() {
        for (id, outcome) in node["report"]["resources"].as_object().unwrap() {
            assert_eq!(outcome["outcome"], "unchanged", "{id}");
        }
    }
}

fn names(repo: &Repo) -> Vec<(&str, &str)> {
    // Leaked for the test's life: a handful of short strings.
    repo.commit_names()
        .into_iter()
        .map(|(id, name)| -> (&str, &str) { (id.leak(), name.leak()) })
        .collect()
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn plan(mesh: &Mesh, id: &str) -> Value {
    mesh.library().plan(id).unwrap()
}

/// `plans --output json`.
fn plans(mesh: &Mesh) -> Value {
    mesh.library().plans()
}

/// `status --output json` and the exit code it is judged to.
fn status_json(mesh: &Mesh, code: u8) -> Value {
    let status = mesh.library().status();
    assert_eq!(status.code, code, "{}", status.json);
    status.json
}

fn modules_of(plan: &Value) -> Vec<String> {
    plan["plan"]["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_owned())
        .collect()
}

fn read(mesh: &Mesh, node: &str, path: &str) -> String {
    std::fs::read_to_string(mesh.root(node).join(path))
        .unwrap_or_else(|e| panic!("{node}:{path}: {e}"))
}

/// What `status` says is behind; it exits 4 (in progress) while anything is, else 0.
fn behind(mesh: &Mesh) -> Vec<(String, String, String)> {
    let run = mesh.library().status();
    let status = run.json;
    let pending = !status["behind"].as_array().unwrap().is_empty();
    assert_eq!(run.code, if pending { 4 } else { 0 }, "{status}");
    status["behind"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["module"].as_str().unwrap().to_owned(),
                b["waiting"].as_str().unwrap().to_owned(),
                b["plan"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn the_first_merge_plans_every_module_in_tiers_and_rolls_them_out() {
    let (mesh, repo, first) = setup();
    let out = mesh.expect(&["merge", "cat"], 0);
    insta::assert_snapshot!("first_merge", redact(&out, &names(&repo)));
    let plan = plan(&mesh, "plan-1");
    assert_eq!(plan["plan"]["state"]["state"], "done");
    assert_eq!(
        plan["plan"]["tiers"],
        serde_json::json!([["notes", "site"], ["tools"]])
    );
    for node in ["control", "home", "laptop"] {
        assert_eq!(read(&mesh, node, "srv/www/index.html"), "v1\n");
    }
    assert_eq!(read(&mesh, "laptop", "etc/notes.txt"), "first note\n");
    assert!(!mesh.root("home").join("etc/notes.txt").exists());
    assert_eq!(
        read(&mesh, "home", "usr/local/bin/tool"),
        "#!/bin/sh\necho one\n"
    );
    // Every build is in the store, recorded, and deployed.
    for module in ["site", "notes", "tools"] {
        let record = home_json(&mesh, format!("store/modules/{module}.json"));
        let deployed = home_json(&mesh, format!("deployed/{module}.json"));
        assert_eq!(record["current"], deployed["archive"], "{module}");
        assert_eq!(deployed["commit"], first.as_str());
    }
    // A push after the rollout composes from what is deployed: nothing changes.
    assert_a_push_changes_nothing(&mesh.library());
}

/// The incident behind “Changed paths name their modules”: a merge's changed modules were read
/// wrong in both directions.
#[test]
fn two_commits_changing_one_module_plan_one_module_each() {
    let (mesh, repo) = first_commit_merged();

    repo.write(&[("modules/notes/files/note.txt", "second note\n")]);
    repo.commit("notes: second");
    merge(&mesh);
    let second = plan(&mesh, "plan-2");
    assert_eq!(modules_of(&second), ["notes"]);
    assert_eq!(second["plan"]["state"]["state"], "done");
    assert_eq!(read(&mesh, "laptop", "etc/notes.txt"), "second note\n");
    assert_eq!(read(&mesh, "control", "etc/notes.txt"), "second note\n");

    repo.write(&[("modules/tools/files/tool.sh", "#!/bin/sh\necho two\n")]);
    repo.commit("tools: two");
    merge(&mesh);
    let third = plan(&mesh, "plan-3");
    assert_eq!(modules_of(&third), ["tools"]);
    assert_eq!(
        read(&mesh, "home", "usr/local/bin/tool"),
        "#!/bin/sh\necho two\n"
    );

    // A change to `site` plans it and what depends on it, in tiers.
    write_site(&repo, "v2\n", "");
    repo.commit("site: v2");
    merge(&mesh);
    let fourth = plan(&mesh, "plan-4");
    assert_eq!(
        fourth["plan"]["tiers"],
        serde_json::json!([["site"], ["tools"]])
    );
    // `tools` rebuilt byte-identical: not redeployed (the rule “A byte-identical build is not
    // redeployed”), nothing sent for it.
    assert_eq!(fourth["work"]["tools"]["not-redeployed"], true);
    assert_eq!(fourth["plan"]["rollouts"]["tools"]["sent"], 0);
    assert_eq!(read(&mesh, "home", "srv/www/index.html"), "v2\n");
}

/// The incident behind “A merge heard twice makes one plan”: a merge announced twice would have
/// made a second plan.
#[test]
fn a_merge_heard_twice_makes_one_plan() {
    let (mesh, _repo, first) = setup();
    merge(&mesh);
    let again = merge_with(
        &mesh,
        MergeFlags {
            commit: Some(&first),
            ..Default::default()
        },
        false,
    );
    // What `merge` says as "plan-1 was already made for `cat` main".
    match &again.outcome {
        MergeOutcome::AlreadyPlanned {
            plan,
            driven: false,
        } => {
            assert_eq!(
                (
                    plan.id.as_str(),
                    plan.repository.as_str(),
                    plan.branch.as_str()
                ),
                ("plan-1", "cat", "main"),
                "{}",
                again.json
            );
        }
        other => panic!("plan-1 was already made: {other:?}"),
    }
    let plans = plans(&mesh);
    assert_eq!(plans.as_array().unwrap().len(), 1);
}

#[test]
fn a_root_file_means_every_module_and_identical_builds_are_not_redeployed() {
    let (mesh, repo) = first_commit_merged();
    let sent_before = Mesh::snapshot_tree(&mesh.home().join("sent"));
    repo.write(&[("README.md", "the catalogue, described\n")]);
    repo.commit("readme");
    merge(&mesh);
    let plan = plan(&mesh, "plan-2");
    assert_eq!(modules_of(&plan), ["notes", "site", "tools"]);
    assert_eq!(plan["shared-paths"], serde_json::json!(["README.md"]));
    for module in ["notes", "site", "tools"] {
        assert_eq!(plan["work"][module]["not-redeployed"], true, "{module}");
    }
    assert_eq!(Mesh::snapshot_tree(&mesh.home().join("sent")), sent_before);
}

/// The rule “One machine first”: a change that breaks its first machine stops there; the others
/// keep what they ran. The new `site` needs `alice` in group `audio`, which `control` (first by
/// name) does not have; `home` and `laptop` have it, and are never sent the new build.
#[test]
fn a_commit_breaking_a_module_on_its_first_node_stops_the_rollout_there() {
    let (mesh, repo) = first_commit_merged();
    for node in ["home", "laptop"] {
        let etc = mesh.root(node).join("etc");
        for (file, line) in [("group", "audio:x:63:\n"), ("gshadow", "audio:*::\n")] {
            let mut text = std::fs::read_to_string(etc.join(file)).unwrap();
            text.push_str(line);
            std::fs::write(etc.join(file), text).unwrap();
        }
    }
    write_site(&repo, "v2\n", ALICE_IN_AUDIO);
    let broken = repo.commit("site: v2, alice plays audio");
    let out = merge_stopping(&mesh);
    assert!(out.contains("`site`: sent `control` (first)"), "{out}");
    assert!(!out.contains("sent `home`"), "{out}");

    // The other nodes keep the old build.
    assert_eq!(read(&mesh, "home", "srv/www/index.html"), "v1\n");
    assert_eq!(read(&mesh, "laptop", "srv/www/index.html"), "v1\n");
    assert!(!read(&mesh, "laptop", "etc/group").contains("audio:x:63:alice"));

    let plan = plan(&mesh, "plan-2");
    assert_eq!(plan["plan"]["state"]["state"], "stopped");
    assert_eq!(plan["plan"]["state"]["node"], "control");
    assert_eq!(plan["plan"]["rollouts"]["site"]["first"], "control");
    // `tools` (tier 1) was not rolled out after a stopped tier.
    assert_eq!(plan["plan"]["rollouts"]["tools"]["outcome"], Value::Null);
    // The deployed build is still the old one, and it stays the store's current build (the one
    // the keep set keeps because the mesh runs it); the new build is recorded beside it.
    let deployed = home_json(&mesh, "deployed/site.json");
    assert_ne!(deployed["commit"], broken.as_str());
    let record = home_json(&mesh, "store/modules/site.json");
    assert_eq!(record["current"], deployed["archive"]);
    assert_eq!(record["builds"].as_array().unwrap().len(), 2);
    assert_eq!(record["builds"][1]["commit"], broken.as_str());

    let status = mesh.expect(&["status"], 3);
    insta::assert_snapshot!(
        "status_after_a_stopped_rollout",
        redact(&status, &names(&repo))
    );
    let status = status_json(&mesh, 3);
    assert_eq!(status["stopped"][0]["node"], "control");
    assert_eq!(status["stopped"][0]["module"], "site");
    let reason = status["stopped"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("site/membership/audio"), "{reason}");
    assert!(reason.contains("audio"), "{reason}");
    // A stopped plan is not open: nothing is behind.
    assert!(status["behind"].as_array().unwrap().is_empty());
}

#[test]
fn a_module_that_does_not_validate_fails_its_build_and_stops_the_plan_naming_the_problems() {
    let (mesh, repo) = first_commit_merged();
    repo.write(&[(
        "modules/notes/module.toml",
        "name = \"notes\"\n\n[files.note]\nsource = \"files/missing.txt\"\npath = \"/etc/notes.txt\"\n",
    )]);
    repo.commit("notes: broken");
    let out = merge_stopping(&mesh);
    assert!(out.contains("the build of `notes` failed"), "{out}");
    assert!(out.contains("files/missing.txt"), "{out}");
    assert_eq!(read(&mesh, "laptop", "etc/notes.txt"), "first note\n");
}

#[test]
fn a_dependency_cycle_among_the_affected_modules_is_named_and_makes_no_plan() {
    let (mesh, repo) = first_commit_merged();
    repo.write(&[
        (
            "modules/notes/module.toml",
            "name = \"notes\"\ndepends = [\"tools\"]\n\n[files.note]\nsource = \"files/note.txt\"\npath = \"/etc/notes.txt\"\n",
        ),
        (
            "modules/site/module.toml",
            "name = \"site\"\ndepends = [\"notes\"]\n\n[files.page]\nsource = \"files/index.html\"\npath = \"/srv/www/index.html\"\n",
        ),
    ]);
    repo.commit("a cycle");
    let Err(error) = mesh.library().merge("cat") else {
        panic!("a cycle makes no plan");
    };
    assert!(error.contains("dependency cycle"), "{error}");
    for module in ["notes", "site", "tools"] {
        assert!(error.contains(module), "{error}");
    }
    let plans = plans(&mesh);
    assert_eq!(plans.as_array().unwrap().len(), 1);
}

/// The rule “Behind means an open plan has not done it yet”: behind is only what the open plans
/// have yet to do; `build --behind` and `push --behind` take their lists from there.
#[test]
fn behind_lists_exactly_what_the_open_plans_have_not_finished() {
    let (mesh, repo) = first_commit_merged();
    assert!(behind(&mesh).is_empty());

    plan_a_second_note(&mesh, &repo);
    assert_eq!(
        behind(&mesh),
        [("notes".into(), "build".into(), "plan-2".into())]
    );
    let status = mesh.expect(&["status"], 4);
    insta::assert_snapshot!("status_with_an_open_plan", redact(&status, &names(&repo)));

    let built = mesh.library().build_behind().unwrap();
    assert!(!built.stopped, "{}", built.lines);
    assert_eq!(
        behind(&mesh),
        [("notes".into(), "roll-out".into(), "plan-2".into())]
    );
    assert_eq!(read(&mesh, "laptop", "etc/notes.txt"), "first note\n");

    let pushed = mesh.library().push_behind().unwrap();
    assert!(!pushed.stopped, "{}", pushed.lines);
    assert_eq!(pushed.verdict, Verdict::Converged, "{}", pushed.json);
    assert!(behind(&mesh).is_empty());
    assert_eq!(read(&mesh, "laptop", "etc/notes.txt"), "second note\n");
    assert_eq!(plan(&mesh, "plan-2")["plan"]["state"]["state"], "done");
}

/// The rule “A newer merge takes over an older plan”: a newer merge's plan takes over the older
/// open plan's unbuilt modules; the older plan ends superseded and is never driven.
#[test]
fn a_newer_merge_supersedes_an_open_plan_and_folds_in_its_unbuilt_modules() {
    let (mesh, repo) = first_commit_merged();
    plan_a_second_note(&mesh, &repo);

    repo.write(&[("modules/tools/files/tool.sh", "#!/bin/sh\necho two\n")]);
    repo.commit("tools: two");
    let run = mesh.run(&["merge", "cat", "--output", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // Progress goes to standard error when standard output carries JSON.
    assert!(
        run.stderr
            .contains("plan-2: superseded by plan-3 (it had not built: notes"),
        "{}",
        run.stderr
    );
    let outcome = json(&run.stdout);
    assert_eq!(outcome["result"], "planned");
    assert_eq!(outcome["superseded"], serde_json::json!(["plan-2"]));
    let older = plan(&mesh, "plan-2");
    assert_eq!(
        older["plan"]["state"],
        serde_json::json!({"state": "superseded", "by": "plan-3"})
    );
    let newer = plan(&mesh, "plan-3");
    assert_eq!(modules_of(&newer), ["notes", "tools"]);
    assert_eq!(newer["folded"], serde_json::json!({"notes": "plan-2"}));
    assert_eq!(newer["plan"]["state"]["state"], "done");
    assert_eq!(read(&mesh, "laptop", "etc/notes.txt"), "second note\n");
    assert_eq!(
        read(&mesh, "home", "usr/local/bin/tool"),
        "#!/bin/sh\necho two\n"
    );
    // The superseded plan built nothing and is never resumed.
    assert_eq!(older["work"]["notes"]["build"], Value::Null);
    let Err(error) = mesh.library().plans_resume(Some("plan-2")) else {
        panic!("a superseded plan is never resumed");
    };
    assert!(error.contains("not open (it is superseded)"), "{error}");
    let list = mesh.expect(&["plans"], 0);
    insta::assert_snapshot!("plans_list", redact(&list, &names(&repo)));
}

#[test]
fn a_closed_plan_ends_and_is_never_resumed() {
    let (mesh, repo) = first_commit_merged();
    plan_a_second_note(&mesh, &repo);
    let closed = mesh
        .library()
        .plans_close("plan-2", "notes wait for Monday")
        .unwrap();
    // What `plans close` says as "plan-2: closed: notes wait for Monday".
    assert_eq!(closed.id, "plan-2");
    assert_eq!(
        closed.state,
        PlanState::Closed {
            note: "notes wait for Monday".into()
        }
    );
    assert!(behind(&mesh).is_empty());
    let Err(error) = mesh.library().plans_resume(Some("plan-2")) else {
        panic!("a closed plan is never resumed");
    };
    assert!(error.contains("not open (it is closed)"), "{error}");
    // What `plans resume` says as "no open plans".
    let resumed = mesh.library().plans_resume(None).unwrap();
    assert!(resumed.plans.is_empty(), "{:?}", resumed.plans);
    // Nor does the next merge resume it: it plans only what changed since.
    repo.write(&[("modules/tools/files/tool.sh", "#!/bin/sh\necho two\n")]);
    repo.commit("tools: two");
    merge(&mesh);
    assert_eq!(modules_of(&plan(&mesh, "plan-3")), ["tools"]);
    assert_eq!(read(&mesh, "laptop", "etc/notes.txt"), "first note\n");
    let Err(again) = mesh.library().plans_close("plan-2", "") else {
        panic!("a closed plan is not closed again");
    };
    assert!(again.contains("not open (it is closed)"), "{again}");
}

/// The rule “A merge heard twice makes one plan”: a dry-run build is set aside — no record, nothing
/// published, nothing a push could send.
#[test]
fn a_dry_run_build_records_nothing() {
    let (mesh, repo) = first_commit_merged();
    plan_a_second_note(&mesh, &repo);
    let home_before = Mesh::snapshot_tree(mesh.home());
    let dry = mesh.library().build(&["notes"], true).unwrap();
    assert_eq!(dry[0]["build"]["dry-run"], true);
    assert_eq!(
        Mesh::snapshot_tree(mesh.home()),
        home_before,
        "nothing changed"
    );
    assert_eq!(
        behind(&mesh),
        [("notes".into(), "build".into(), "plan-2".into())]
    );
    // The real build of the same tree has the same digest, and is recorded for the plan.
    let real = mesh.library().build(&["notes"], false).unwrap();
    assert_eq!(real[0]["build"]["archive"], dry[0]["build"]["archive"]);
    assert_eq!(real[0]["plan"], "plan-2");
    let record = home_json(&mesh, "store/modules/notes.json");
    let builds = record["builds"].as_array().unwrap();
    assert_eq!(
        builds.last().unwrap()["archive"],
        real[0]["build"]["archive"]
    );
    // Not rolled out yet: the store's current build stays the one the mesh runs.
    let deployed = home_json(&mesh, "deployed/notes.json");
    assert_eq!(record["current"], deployed["archive"]);
    assert_ne!(deployed["archive"], real[0]["build"]["archive"]);
}

/// A controller that stops with a plan open resumes it: `plans resume` drives it on.
#[test]
fn plans_resume_drives_an_open_plan_to_the_end() {
    let (mesh, repo, _) = setup();
    merge_plan_only(&mesh);
    assert_eq!(behind(&mesh).len(), 3);
    let resumed = mesh.library().plans_resume(None).unwrap();
    assert!(!resumed.stopped, "{}", resumed.lines);
    // What `plans resume` says as "plan-1: done (3 module(s): notes, site, tools)".
    let driven: Vec<(&str, &PlanState, &[String])> = resumed
        .plans
        .iter()
        .map(|p| (p.id.as_str(), &p.state, p.modules.as_slice()))
        .collect();
    assert_eq!(
        driven,
        [(
            "plan-1",
            &PlanState::Done,
            &["notes".to_owned(), "site".into(), "tools".into()][..]
        )]
    );
    assert_eq!(read(&mesh, "home", "srv/www/index.html"), "v1\n");
    let shown = mesh.expect(&["plans", "show", "plan-1"], 0);
    insta::assert_snapshot!("plan_show", redact(&shown, &names(&repo)));
}

/// The rule “One machine first”: with `on-failure = "revert"` the first node is sent back what it
/// ran before.
#[test]
fn a_failed_first_node_is_sent_back_what_it_ran_when_the_module_says_revert() {
    let (mesh, repo) = first_commit_merged();
    let before = std::fs::read(mesh.home().join("sent/control.json")).unwrap();
    repo.write(&[
        (
            "modules/site/module.toml",
            "name = \"site\"\non-failure = \"revert\"\n\n[files.page]\nsource = \"files/index.html\"\npath = \"/srv/www/index.html\"\n\n[memberships.audio]\naccount = \"alice\"\ngroup = \"audio\"\n",
        ),
        ("modules/site/files/index.html", "v2\n"),
    ]);
    repo.commit("site: v2, alice plays audio, revert on failure");
    let out = merge_stopping(&mesh);
    assert!(
        out.contains("`site`: sent `control` back what it ran before"),
        "{out}"
    );
    // control runs the old build again: its page is back, and what it was sent is the old
    // declaration.
    assert_eq!(read(&mesh, "control", "srv/www/index.html"), "v1\n");
    assert_eq!(
        std::fs::read(mesh.home().join("sent/control.json")).unwrap(),
        before
    );
    assert_eq!(read(&mesh, "home", "srv/www/index.html"), "v1\n");
}

/// With `on-failure = "revert"` a node after the first that fails (`max-parallel = 1`) is sent
/// back what it ran before too, never left on the build that failed it.
#[test]
fn a_failed_node_after_the_first_is_sent_back_what_it_ran_when_the_module_says_revert() {
    let (mesh, repo) = first_commit_merged();
    // `control`, the first, has the group; `home`, the second, has not.
    let group = mesh.root("control").join("etc/group");
    let mut groups = std::fs::read_to_string(&group).unwrap_or_default();
    groups.push_str("audio:x:63:\n");
    std::fs::write(&group, groups).unwrap();
    let before = std::fs::read(mesh.home().join("sent/home.json")).unwrap();
    repo.write(&[
        (
            "modules/site/module.toml",
            "name = \"site\"\non-failure = \"revert\"\nmax-parallel = 1\n\n[files.page]\nsource = \"files/index.html\"\npath = \"/srv/www/index.html\"\n\n[memberships.audio]\naccount = \"alice\"\ngroup = \"audio\"\n",
        ),
        ("modules/site/files/index.html", "v2\n"),
    ]);
    repo.commit("site: v2, alice plays audio, one at a time, revert on failure");
    let out = merge_stopping(&mesh);
    assert!(out.contains("stopped at `home`"), "{out}");
    assert!(
        out.contains("`site`: sent `home` back what it ran before"),
        "{out}"
    );
    assert_eq!(read(&mesh, "control", "srv/www/index.html"), "v2\n");
    assert_eq!(read(&mesh, "home", "srv/www/index.html"), "v1\n");
    assert_eq!(
        std::fs::read(mesh.home().join("sent/home.json")).unwrap(),
        before
    );
}

/// `plans retry`: a rollout stopped at its first machine (a group it lacks), its cause fixed,
/// is retried and completes — the stopped node sent again, then the rest — with no new commit;
/// a plan that is not stopped, or that a newer plan came after, is refused, nothing sent.
#[test]
fn a_stopped_plan_is_retried_once_its_cause_is_fixed_and_completes() {
    let (mesh, repo) = first_commit_merged();
    repo.write(&[
        (
            "modules/site/module.toml",
            "name = \"site\"\n\n[files.page]\nsource = \"files/index.html\"\npath = \"/srv/www/index.html\"\n\n[memberships.audio]\naccount = \"alice\"\ngroup = \"audio\"\n",
        ),
        ("modules/site/files/index.html", "v2\n"),
    ]);
    repo.commit("site: v2, alice plays audio");
    let out = merge_stopping(&mesh);
    assert!(out.contains("stopped at `control`"), "{out}");
    assert_eq!(read(&mesh, "home", "srv/www/index.html"), "v1\n");
    // Merging the same commit again plans nothing: only a retry sends it again.
    let Err(refused) = mesh.library().plans_retry("plan-1") else {
        panic!("plan-1, done, is not retried");
    };
    assert!(
        refused.contains("plan `plan-1` is not stopped"),
        "{refused}"
    );

    // The cause fixed: every node has the group.
    for node in ["control", "home", "laptop"] {
        let group = mesh.root(node).join("etc/group");
        let mut groups = std::fs::read_to_string(&group).unwrap_or_default();
        groups.push_str("audio:x:63:\n");
        std::fs::write(&group, groups).unwrap();
    }
    let retried = mesh.library().plans_retry("plan-2").unwrap();
    assert!(!retried.stopped, "{}", retried.lines);
    assert!(
        retried
            .lines
            .contains("plan-2: retried: `site` begun again where it stopped"),
        "{}",
        retried.lines
    );
    assert_eq!(retried.plans[0].state, PlanState::Done, "{}", retried.lines);
    for node in ["control", "home", "laptop"] {
        assert_eq!(read(&mesh, node, "srv/www/index.html"), "v2\n", "{node}");
    }
    // Done, it is no longer stopped: retried again, refused.
    let Err(refused) = mesh.library().plans_retry("plan-2") else {
        panic!("plan-2 is not retried");
    };
    assert!(refused.contains("is not stopped (it is done)"), "{refused}");
}

/// A push that would take a node back to an older build than it runs — the first machine of a
/// stopped rollout, left on its build — is held naming both builds; the other nodes go ahead,
/// and allowing the module's downgrade sends it.
#[test]
fn a_push_that_would_take_a_node_back_to_an_older_build_is_held_until_allowed() {
    let (mesh, repo) = first_commit_merged();
    repo.write(&[
        (
            "modules/site/module.toml",
            "name = \"site\"\n\n[files.page]\nsource = \"files/index.html\"\npath = \"/srv/www/index.html\"\n\n[memberships.audio]\naccount = \"alice\"\ngroup = \"audio\"\n",
        ),
        ("modules/site/files/index.html", "v2\n"),
    ]);
    repo.commit("site: v2, alice plays audio");
    let out = merge_stopping(&mesh);
    assert!(out.contains("stopped at `control`"), "{out}");
    // `control` runs the stopped rollout's build: its page is v2.
    assert_eq!(read(&mesh, "control", "srv/www/index.html"), "v2\n");

    let pushed = mesh.library().push_all().unwrap();
    assert_eq!(
        pushed.verdict,
        Verdict::Held,
        "{}{}",
        pushed.lines,
        pushed.json
    );
    let results: Value = pushed.json.clone();
    let control = results
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["node"] == "control")
        .unwrap();
    assert_eq!(control["result"], "held", "{results:#}");
    let downgrade = &control["downgrades"][0];
    assert_eq!(downgrade["module"], "site", "{results:#}");
    assert_eq!(downgrade["runs-plan"], "plan-2", "{results:#}");
    assert_ne!(downgrade["runs"], downgrade["would-send"], "{results:#}");
    // Nothing was sent to it; the others went ahead.
    assert_eq!(read(&mesh, "control", "srv/www/index.html"), "v2\n");
    for node in ["home", "laptop"] {
        let result = results
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["node"] == node)
            .unwrap();
        assert_eq!(result["result"], "reported", "{results:#}");
    }
    // `status` names the held push as a problem, both builds with it.
    let status = mesh.library().status();
    let said = status.document.clone();
    assert!(
        said.contains("would take a module back to an older build"),
        "{said}"
    );

    let pushed = mesh.library().push_all_downgrading(&["site"]).unwrap();
    assert_eq!(
        pushed.verdict,
        Verdict::Converged,
        "{}{}",
        pushed.lines,
        pushed.json
    );
    assert_eq!(read(&mesh, "control", "srv/www/index.html"), "v1\n");
}

/// A stopped plan a newer plan of its repository and branch came after is not retried: it would
/// roll its older commit over the newer one.
#[test]
fn a_stopped_plan_a_newer_plan_came_after_is_not_retried() {
    let (mesh, repo) = first_commit_merged();
    repo.write(&[
        (
            "modules/site/module.toml",
            "name = \"site\"\n\n[files.page]\nsource = \"files/index.html\"\npath = \"/srv/www/index.html\"\n\n[memberships.audio]\naccount = \"alice\"\ngroup = \"audio\"\n",
        ),
        ("modules/site/files/index.html", "v2\n"),
    ]);
    repo.commit("site: v2, alice plays audio");
    merge_stopping(&mesh);
    write_site(&repo, "v3\n", "");
    repo.commit("site: v3, no audio");
    merge(&mesh);
    let Err(refused) = mesh.library().plans_retry("plan-2") else {
        panic!("plan-2 is not retried");
    };
    assert!(
        refused.contains("`plan-3`, made after it for `cat` main, holds a newer commit"),
        "{refused}"
    );
    assert_eq!(read(&mesh, "control", "srv/www/index.html"), "v3\n");
}

/// `upgrade = "together"` sends every node at once: no node goes first.
#[test]
fn a_together_module_is_sent_to_every_node_at_once() {
    let (mesh, repo) = first_commit_merged();
    repo.write(&[
        (
            "modules/site/module.toml",
            "name = \"site\"\nupgrade = \"together\"\n\n[files.page]\nsource = \"files/index.html\"\npath = \"/srv/www/index.html\"\n",
        ),
        ("modules/site/files/index.html", "v2\n"),
    ]);
    repo.commit("site: v2, together");
    let out = merge(&mesh).lines;
    assert!(
        out.contains("`site`: grants for control, home, laptop"),
        "{out}"
    );
    assert!(!out.contains("(first)"), "{out}");
    for node in ["control", "home", "laptop"] {
        assert_eq!(read(&mesh, node, "srv/www/index.html"), "v2\n");
    }
    assert_eq!(
        plan(&mesh, "plan-2")["plan"]["rollouts"]["site"]["first"],
        Value::Null
    );
}

/// The rule “One machine first”: a controller replaced mid-rollout resumes from the plan's record.
/// The controller dies (SIGABRT, nothing finished) at each named step of a merge in turn — a fail
/// point, never a kill after a sleep; `plans resume` and the merge heard again finish it: every
/// node runs the new build, the plan is done, and one plan was made for the commit.
#[test]
fn a_controller_killed_mid_merge_resumes_where_it_was() {
    let steps = [
        "plan-saved",
        "built:site",
        "sent:site:control",
        "heard:site:control",
        "sent:site:home",
        "sent:site:laptop",
        "heard:site:laptop",
        "deployed:site",
    ];
    for step in steps {
        let (mesh, repo) = first_commit_merged();
        write_site(&repo, "v2\n", "");
        let commit = repo.commit("site: v2");
        let died = mesh.run_env(
            &["merge", "cat"],
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
        let resumed = mesh
            .library()
            .plans_resume(None)
            .unwrap_or_else(|error| panic!("after dying at `{step}`: {error}"));
        assert!(
            !resumed.stopped,
            "after dying at `{step}`: {}",
            resumed.lines
        );
        merge(&mesh);
        for node in ["control", "home", "laptop"] {
            assert_eq!(
                read(&mesh, node, "srv/www/index.html"),
                "v2\n",
                "{node}, after dying at `{step}`"
            );
        }
        let plans = plans(&mesh);
        let for_commit: Vec<&Value> = plans
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["commit"] == commit.as_str())
            .collect();
        assert_eq!(for_commit.len(), 1, "died at `{step}`: {plans}");
        assert_eq!(for_commit[0]["state"]["state"], "done", "{plans}");
        let deployed = home_json(&mesh, "deployed/site.json");
        assert_eq!(deployed["commit"], commit.as_str());
    }
}

/// A module that stops holds back only what is built from it: the plan's other modules go on,
/// and the plan ends stopped once nothing else is left to do.
#[test]
fn a_stopped_module_holds_back_its_dependents_and_the_others_go_on() {
    let (mesh, repo) = first_commit_merged();
    let [a, b] = site_module("v2\n", ALICE_IN_AUDIO);
    repo.write(&[
        (&a.0, &a.1),
        (&b.0, &b.1),
        ("modules/notes/files/note.txt", "second note\n"),
        ("modules/tools/files/tool.sh", "#!/bin/sh\necho two\n"),
    ]);
    repo.commit("site breaks on control; notes and tools change");
    let out = merge_stopping(&mesh);
    assert!(
        out.contains("plan-2: `tools` is built from `site`, which stopped: left as it is"),
        "{out}"
    );
    let plan = plan(&mesh, "plan-2");
    assert_eq!(
        plan["plan"]["rollouts"]["notes"]["outcome"]["outcome"],
        "done"
    );
    assert_eq!(read(&mesh, "laptop", "etc/notes.txt"), "second note\n");
    assert_eq!(plan["work"]["tools"]["build"], Value::Null);
    assert_eq!(
        read(&mesh, "home", "usr/local/bin/tool"),
        "#!/bin/sh\necho one\n"
    );
    assert_eq!(plan["plan"]["state"]["state"], "stopped");
    assert_eq!(plan["plan"]["state"]["node"], "control");
    assert_eq!(plan["held"], serde_json::json!(["site", "tools"]));
    let shown = mesh.expect(&["plans", "show", "plan-2"], 0);
    assert!(
        shown.contains("tools: not built; held back: it is built from a module that stopped"),
        "{shown}"
    );
}

/// A stopped rollout stays in `status` until a later plan finishes the module or a person
/// closes a later plan that took it in; a push sends what the mesh runs (the deployed builds) —
/// to the node the rollout left on its newer build, once its downgrade is allowed.
#[test]
fn a_stopped_rollout_stays_in_status_until_a_person_settles_it() {
    let (mesh, repo) = first_commit_merged();
    write_site(&repo, "v2\n", ALICE_IN_AUDIO);
    repo.commit("site breaks on control");
    merge_stopping(&mesh);
    // `status` exits 3 while a stopped rollout needs a person, 0 once it is settled.
    let stopped = |mesh: &Mesh| {
        mesh.library().status().json["stopped"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(stopped(&mesh), 1);
    write_site(&repo, "v3\n", "");
    repo.commit("site: v3, no audio");
    merge_plan_only(&mesh);
    assert_eq!(stopped(&mesh), 1, "an open plan has not settled it");
    mesh.library()
        .plans_close("plan-3", "v3 next week")
        .unwrap();
    assert_eq!(stopped(&mesh), 0);
    // control still holds the failed new build; a push would take it back to what the mesh
    // runs, older: held, until the downgrade is allowed.
    assert_eq!(read(&mesh, "control", "srv/www/index.html"), "v2\n");
    let pushed = mesh.library().push(&["control"]).unwrap();
    assert_eq!(pushed.verdict, Verdict::Held, "{}", pushed.json);
    assert_eq!(read(&mesh, "control", "srv/www/index.html"), "v2\n");
    let pushed = mesh
        .library()
        .push_downgrading(&["control"], &["site"])
        .unwrap();
    assert_eq!(pushed.verdict, Verdict::Converged, "{}", pushed.json);
    assert_eq!(read(&mesh, "control", "srv/www/index.html"), "v1\n");
}

/// The controller takes the same `--store` as the collector; every build a merge makes
/// is published there, held by its manifest, and sends compose from it.
#[test]
fn a_merge_publishes_to_a_registry_store_and_sends_compose_from_it() {
    let registry = support::Registry::start();
    let (mesh, repo, _) = setup();
    let store = registry.url();
    let on_registry = || {
        mesh.library_with(mesh_controller::MeshOptions {
            store: Some(store.parse().unwrap()),
            ..Default::default()
        })
        .unwrap()
    };
    let merged = on_registry().merge("cat").unwrap();
    assert!(!merged.stopped, "{}", merged.lines);
    let tags = registry.get("/v2/mesh/archives/tags/list").unwrap();
    for module in ["notes", "site", "tools"] {
        let record = home_json(&mesh, format!("deployed/{module}.json"));
        let hex = record["archive"]["digest"]
            .as_str()
            .unwrap()
            .trim_start_matches("sha256:")
            .to_owned();
        assert!(tags.contains(&hex), "{module} is held by a tag: {tags}");
    }
    assert!(
        !mesh.home().join("store/oci").exists(),
        "nothing went to the default store"
    );
    // Sends compose the deployed modules from the registry: nothing changes.
    assert_a_push_changes_nothing(&on_registry());
    // Without the registry the deployed builds cannot be read, and the push says so.
    let Err(error) = mesh.library().push_all() else {
        panic!("the deployed builds are not in the home's store");
    };
    assert!(error.contains("could not be read from oci:"), "{error}");
    drop(repo);
}

/// With a fleet's bus named, the controller's records are the bus's: a bus that cannot be
/// reached fails the merge before anything is planned, built or sent, and the home is left as
/// it was (tests/fleet_merges.rs runs the fleet itself).
#[test]
fn a_merge_naming_a_bus_that_cannot_be_reached_changes_nothing() {
    let (mesh, _repo, _) = setup();
    let Err(error) = mesh.library_with(mesh_controller::MeshOptions {
        bus: Some(mesh_controller::bus::BusConfig::new("nats://127.0.0.1:1")),
        ..Default::default()
    }) else {
        panic!("no bus answers on nats://127.0.0.1:1");
    };
    assert!(
        error.contains("opening the controller's records on nats://127.0.0.1:1"),
        "{error}"
    );
    assert!(!mesh.home().join("sent").exists());
    assert!(!mesh.home().join("plans/plan-1.json").exists());
    assert!(!mesh.root("control").join("srv/www/index.html").exists());
    // Without the bus the home is as it was: the merge plans and rolls out in process.
    merge(&mesh);
}

/// The rule “No symbolic links to move data”: no symbolic links. A link committed to git (mode
/// 120000) is read as a link, straight from git's objects, and the module's build fails naming it.
#[test]
fn a_symbolic_link_in_git_fails_the_modules_build_naming_it() {
    let (mesh, repo) = first_commit_merged();
    std::os::unix::fs::symlink(
        "/srv/media/previews",
        repo.path().join("modules/notes/files/previews"),
    )
    .unwrap();
    repo.commit("notes: a link to the previews");
    let out = merge_stopping(&mesh);
    assert!(out.contains("the build of `notes` failed"), "{out}");
    assert!(out.contains("files/previews"), "{out}");
    let status = status_json(&mesh, 3);
    assert_eq!(status["stopped"][0]["module"], "notes");
    assert_eq!(status["stopped"][0]["node"], "");
}

/// A repository whose modules live elsewhere than `modules/` says so when it is added.
#[test]
fn a_repository_may_keep_its_modules_in_another_directory() {
    let mesh = Mesh::example();
    std::fs::write(mesh.home().join("inventory.toml"), INVENTORY).unwrap();
    let repo = Repo::new();
    repo.write(&[
        (
            "mesh/catalogue/notes/module.toml",
            "name = \"notes\"\n\n[files.note]\nsource = \"files/note.txt\"\npath = \"/etc/notes.txt\"\n",
        ),
        ("mesh/catalogue/notes/files/note.txt", "elsewhere\n"),
        ("modules/README.md", "not the modules\n"),
    ]);
    repo.commit("first");
    mesh.library()
        .repo_add_with(
            "cat",
            repo.path(),
            &mesh_controller::catalogue::AddOptions {
                modules_dir: "mesh/catalogue/".into(),
                ..Default::default()
            },
        )
        .unwrap();
    merge(&mesh);
    assert_eq!(modules_of(&plan(&mesh, "plan-1")), ["notes"]);
    assert_eq!(read(&mesh, "laptop", "etc/notes.txt"), "elsewhere\n");
    repo.write(&[("mesh/catalogue/notes/files/note.txt", "still elsewhere\n")]);
    repo.commit("notes");
    merge(&mesh);
    assert_eq!(modules_of(&plan(&mesh, "plan-2")), ["notes"]);
    assert_eq!(read(&mesh, "control", "etc/notes.txt"), "still elsewhere\n");
}

/// The rule “Grants before code”: a module whose grants change the bus's users is sent
/// to the node holding the bus first — before its own first node — and the rest wait for it.
#[test]
fn the_bus_node_goes_first_when_a_modules_grants_change_the_bus_users() {
    let (mesh, repo) = first_commit_merged();
    repo.write(&[(
        "modules/tools/module.toml",
        "name = \"tools\"\ndepends = [\"site\"]\n\n[grants]\nbuckets = [\"tools-state\"]\n\n[files.tool]\nsource = \"files/tool.sh\"\npath = \"/usr/local/bin/tool\"\nmode = \"0755\"\n",
    )]);
    repo.commit("tools: a state bucket");
    let out = merge(&mesh).lines;
    let order: Vec<&str> = out.lines().filter(|l| l.starts_with("  `tools`")).collect();
    assert_eq!(order.len(), 6, "{out}");
    assert!(
        order[0].contains("its grants change the bus's users: `control`"),
        "{out}"
    );
    assert!(order[1].contains("grants for control"), "{out}");
    assert!(
        order[2].contains("sent `control` (holding the bus, first)"),
        "{out}"
    );
    assert!(order[3].contains("grants for home"), "{out}");
    assert!(order[4].contains("sent `home` (first)"), "{out}");
    assert!(order[5].contains("done on 1 node(s)"), "{out}");
    // A change that leaves the grants alone does not send the bus node.
    repo.write(&[("modules/tools/files/tool.sh", "#!/bin/sh\necho two\n")]);
    repo.commit("tools: two");
    let out = merge(&mesh).lines;
    assert!(!out.contains("holding the bus"), "{out}");
}

/// Records written in the format before records stopped growing with the fleet — a
/// plan record holding every node's rollout inside it, and `sent/<node>.json` holding the whole
/// declaration — are migrated on first use, saying so, and read the same after.
#[test]
fn records_in_the_old_format_are_migrated_on_first_use_saying_so() {
    let mesh = Mesh::example();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1-home");
    for file in [
        "inventory.toml",
        "plans/plan-1.json",
        "sent/control.json",
        "sent/home.json",
    ] {
        let to = mesh.home().join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(fixture.join(file), &to).unwrap();
    }
    let old_sent: Value =
        json(&std::fs::read_to_string(mesh.home().join("sent/home.json")).unwrap());
    let old_digest = mesh_model::declaration::Declaration::from_json(
        &std::fs::read(mesh.home().join("sent/home.json")).unwrap(),
    )
    .unwrap()
    .digest();
    assert_eq!(
        old_sent["format"], 2,
        "the fixture holds a whole declaration"
    );

    // The fixture's nodes were sent declarations and reported none: in progress, exit 4.
    let library = mesh.library();
    let run = library.status();
    let notes = library.migrations().join("\n");
    assert_eq!(run.code, 4, "{notes}");
    assert!(
        notes.contains("plan-1.json: migrated from format 1"),
        "{notes}"
    );
    assert!(notes.contains("sent/home.json"), "{notes}");
    let status = run.json;
    let home = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == "home")
        .unwrap();
    assert_eq!(home["sent"], old_digest.as_str(), "{home}");

    let plan = home_json(&mesh, "plans/plan-1.json");
    assert_eq!(plan["format"], 2);
    assert_eq!(plan["plan"]["rollouts"]["site"]["sent"], 2, "{plan}");
    assert!(plan["work"]["site"]["rollout"].is_object(), "{plan}");
    let node = home_json(&mesh, "rollouts/plan-1/site/control.json");
    assert_eq!(node["progress"]["progress"], "applied", "{node}");
    let pointer = home_json(&mesh, "sent/home.json");
    assert_eq!(pointer["declaration"], old_digest.as_str());
    assert!(mesh
        .home()
        .join(format!(
            "declarations/{}.json",
            old_digest.strip_prefix("sha256:").unwrap()
        ))
        .is_file());

    // Said once: the records are in the new format now.
    let library = mesh.library();
    let again = library.status();
    let notes = library.migrations().join("\n");
    assert_eq!(again.code, 4, "{notes}");
    assert!(!notes.contains("migrated"), "{notes}");
    self::plan(&mesh, "plan-1");
}

/// `site`'s extra lines: a job that `exits`, and a service that comes after it.
fn site_job(exits: u8) -> String {
    format!(
        "\n[jobs.migrate]\nimage = \"localhost/mesh-busybox:latest\"\n\
         command = [\"sh\", \"-c\", \"echo 'schema v2: column media.id missing'; exit {exits}\"]\n\
         \n[containers.web]\nimage = \"localhost/mesh-busybox:latest\"\n\
         command = [\"sleep\", \"1000\"]\nafter = [\"job/migrate\"]\n"
    )
}

#[test]
fn a_job_failing_on_the_first_node_gates_its_service_and_stops_the_rollout_with_its_log() {
    let (mesh, repo) = first_commit_merged();
    write_site(&repo, "v2\n", &site_job(1));
    repo.commit("site: v2, migrated first");
    let out = merge_stopping(&mesh);
    assert!(out.contains("`site`: sent `control` (first)"), "{out}");
    assert!(!out.contains("sent `home`"), "{out}");
    assert_eq!(read(&mesh, "home", "srv/www/index.html"), "v1\n");

    // The first machine says why: the job's exit code and log tail; its service waits.
    let status = status_json(&mesh, 3);
    assert_eq!(status["stopped"][0]["node"], "control");
    assert_eq!(status["stopped"][0]["module"], "site");
    let reason = status["stopped"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("site/job/migrate"), "{reason}");
    assert!(reason.contains("exited with code 1"), "{reason}");
    assert!(
        reason.contains("schema v2: column media.id missing"),
        "{reason}"
    );
    let control = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|node| node["node"] == "control")
        .unwrap();
    let web = &control["report"]["resources"]["site/container/web"];
    assert_eq!(web["outcome"], "skipped", "{control}");
    assert_eq!(web["gated-by"], "site/job/migrate", "{control}");
}
