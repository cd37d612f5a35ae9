//! An orphaned setting is a removal: a module's new version that no longer accepts a key a
//! layer sets (or accepts it with another type) is named before it takes effect — by `check`
//! for the next merge, by the merge's preview, and by `plan NODE --diff` while a plan has yet to
//! roll it out — with the value and what the node gets instead. Real git, the embedded mesh.
//!
//! The library is called in process (`support::in_process`); the binary is run for the text a
//! person reads: `check`, the merge's preview, `plan --diff`, `settings rename` and `status`.

use crate::support;
use mesh_controller::Verdict;
use serde_json::Value;
use support::in_process::{MergeFlags, Merged};
use support::{redact, Mesh, Repo};

/// Two nodes run `web`; `a` sets its port.
const INVENTORY: &str = r#"bus-node = "a"

[nodes.a]
[nodes.b]

[assignments]
web = ["a", "b"]
"#;

/// The example's home with the test inventory, and none of the example's layers (they set
/// nodes this inventory does not have).
fn mesh() -> Mesh {
    let mesh = Mesh::example();
    std::fs::write(mesh.home().join("inventory.toml"), INVENTORY).unwrap();
    std::fs::remove_dir_all(mesh.home().join("settings")).unwrap();
    mesh
}

/// `web` with its port setting named `key`, of default `default`, rendered into its config.
fn web(key: &str, default: &str) -> [(String, String); 2] {
    [
        (
            "modules/web/module.toml".into(),
            format!(
                "name = \"web\"\n\n[settings]\n{key} = {default}\n\n[files.conf]\nsource = \"files/web.conf\"\npath = \"/etc/web.conf\"\ntemplate = true\n"
            ),
        ),
        (
            "modules/web/files/web.conf".into(),
            format!("listen {{{{{key}}}}}\n"),
        ),
    ]
}

fn write_web(repo: &Repo, key: &str, default: &str) {
    let [a, b] = web(key, default);
    repo.write(&[(&a.0, &a.1), (&b.0, &b.1)]);
}

/// `repo add cat PATH`, then `merge cat`, in process: the plan done (`merge` exits 0).
fn add_and_merge(mesh: &Mesh, repo: &Repo) {
    mesh.library().repo_add("cat", repo.path()).unwrap();
    merge(mesh, MergeFlags::default());
}

/// `merge cat` with `flags`, in process: the plan not stopped (`merge` exits 0).
fn merge(mesh: &Mesh, flags: MergeFlags<'_>) -> Merged {
    let merged = mesh
        .library()
        .merge_with("cat", flags)
        .unwrap_or_else(|error| panic!("merge cat: {error}"));
    assert!(!merged.stopped, "{}{}", merged.lines, merged.json);
    merged
}

/// `merge cat --plan-only`, in process.
fn merge_plan_only(mesh: &Mesh) -> Merged {
    merge(
        mesh,
        MergeFlags {
            plan_only: true,
            ..Default::default()
        },
    )
}

/// `push NODE…` in process: every node converged (`push` exits 0).
fn push(mesh: &Mesh, nodes: &[&str]) {
    let pushed = mesh.library().push(nodes).unwrap();
    assert_eq!(pushed.verdict, Verdict::Converged, "{}", pushed.json);
}

/// `plans resume` (with `--drop-settings`) in process: no plan stopped (it exits 0); the
/// progress lines.
fn resume(mesh: &Mesh, drop_settings: &[&str]) -> String {
    let resumed = mesh
        .library()
        .plans_resume_with(None, &[], drop_settings)
        .unwrap();
    assert!(!resumed.stopped, "{}", resumed.lines);
    resumed.lines
}

/// The exit code `status` is judged to.
fn status_code(mesh: &Mesh) -> u8 {
    mesh.library().status().code
}

/// `check --output json` in process, and whether it is sound (`check` exits 0, else 1).
fn check(mesh: &Mesh) -> (Value, bool) {
    let check = mesh.library().check().unwrap();
    (serde_json::to_value(&check).unwrap(), check.sound())
}

/// A mesh running `web` from a registered repository, `a`'s layer setting `port = 9090`, and
/// the repository's next commit renaming the setting `http-port` (not merged yet).
fn renamed_upstream() -> (Mesh, Repo) {
    let mesh = mesh();
    let repo = Repo::new();
    write_web(&repo, "port", "8080");
    repo.commit("web on 8080");
    add_and_merge(&mesh, &repo);
    let set = mesh
        .library()
        .settings_set("web", Some("a"), r#"{"port": 9090}"#)
        .unwrap();
    assert!(!set.refused());
    push(&mesh, &["a", "b"]);
    assert_eq!(
        std::fs::read_to_string(mesh.root("a").join("etc/web.conf")).unwrap(),
        "listen 9090\n"
    );
    write_web(&repo, "http-port", "8080");
    repo.commit("the port setting is http-port");
    (mesh, repo)
}

fn names(repo: &Repo) -> Vec<(String, String)> {
    repo.commit_names()
}

fn redacted(repo: &Repo, text: &str) -> String {
    let names = names(repo);
    let words: Vec<(&str, &str)> = names
        .iter()
        .map(|(id, name)| (id.as_str(), name.as_str()))
        .collect();
    redact(text, &words)
}

#[test]
fn a_renamed_setting_is_named_by_check_the_preview_and_plan_diff() {
    let (mesh, repo) = renamed_upstream();

    // `check` reads what the next merge would deploy, and names the orphan: exit 3.
    let check = mesh.run(&["check"]);
    assert_eq!(check.code, 3, "{}", check.stderr);
    insta::assert_snapshot!("check", redacted(&repo, &check.stdout));
    let (json, sound) = self::check(&mesh);
    assert!(!sound, "{json:#}");
    let orphan = &json["orphans"][0];
    assert_eq!(orphan["from"], "head");
    assert_eq!(orphan["orphans"][0]["key"], "port");
    assert_eq!(orphan["orphans"][0]["value"], 9090);
    assert_eq!(orphan["orphans"][0]["layer"]["node"], "a");
    assert_eq!(orphan["orphans"][0]["instead"]["gets"], "nothing");

    // The merge's preview names it for `a`, and not for `b`, whose layer sets nothing.
    let preview = mesh.expect(&["merge", "cat", "--plan-only"], 0);
    insta::assert_snapshot!("preview", redacted(&repo, &preview));
    let shown = mesh.library().plan_preview("plan-2").unwrap();
    let web = &shown["tiers"][0]["modules"][0];
    assert_eq!(web["orphaned-nodes"], serde_json::json!(["a"]), "{shown:#}");
    assert_eq!(web["orphans"]["new-settings"][0]["key"], "http-port");

    // While plan-2 has yet to roll `web` out, `plan a --diff` names it too; `b` has none.
    let diff = mesh.expect(&["plan", "a", "--diff"], 0);
    insta::assert_snapshot!("plan_diff", redacted(&repo, &diff));
    let (diff, _) = mesh.library().plan_diff("a").unwrap();
    assert_eq!(diff["orphans"][0]["plan"], "plan-2");
    // What `plan b --diff` prints as nothing at all.
    let (diff, unchanged) = mesh.library().plan_diff("b").unwrap();
    assert!(unchanged, "{diff:#}");
}

#[test]
fn a_type_change_is_named_with_the_default_the_node_gets() {
    let mesh = mesh();
    let repo = Repo::new();
    write_web(&repo, "port", "8080");
    repo.commit("web on 8080");
    add_and_merge(&mesh, &repo);
    let set = mesh
        .library()
        .settings_set("web", None, r#"{"port": 9090}"#)
        .unwrap();
    assert!(!set.refused());
    write_web(&repo, "port", "\"8080\"");
    repo.commit("the port is text");

    let (json, sound) = check(&mesh);
    assert!(!sound, "{json:#}");
    let orphan = &json["orphans"][0]["orphans"][0];
    assert_eq!(orphan["layer"]["scope"], "mesh");
    assert_eq!(orphan["why"], "other-type");
    assert_eq!(orphan["accepts"], "string");
    assert_eq!(orphan["found"], "number");
    assert_eq!(orphan["instead"]["value"], "8080");
    let preview = mesh.expect(&["merge", "cat", "--plan-only"], 0);
    assert!(
        preview.contains("orphaned settings on a, b (dropped by this version):")
            && preview.contains(
                "`port` = 9090: now accepted as text, not a number; the default \"8080\" instead"
            ),
        "{preview}"
    );
}

#[test]
fn settings_rename_keeps_the_value_under_the_new_name_in_every_layer_and_in_history() {
    let (mesh, repo) = renamed_upstream();
    let set = mesh
        .library()
        .settings_set("web", None, r#"{"port": 8081}"#)
        .unwrap();
    assert!(!set.refused());
    merge_plan_only(&mesh);

    // Refused, nothing changed: a key no layer sets, and a name the new version does not take.
    let shown = |mesh: &Mesh| {
        let shown = mesh.library().call(async |mesh| {
            mesh.settings_show(&crate::support::layer("web", Some("a")), false)
                .await
        });
        serde_json::to_value(shown.unwrap()).unwrap()
    };
    let before = shown(&mesh);
    let Err(none) = mesh.library().settings_rename("web", "size", "capacity") else {
        panic!("no layer sets `size`");
    };
    assert!(none.contains("no layer of `web` sets `size`"), "{none}");
    let Err(unknown) = mesh.library().settings_rename("web", "port", "listen-port") else {
        panic!("plan-2's `web` accepts no `listen-port`");
    };
    assert!(
        unknown.contains("accepts no setting `listen-port`")
            && unknown.contains("checked against plan-2"),
        "{unknown}"
    );
    assert_eq!(shown(&mesh), before);

    // Checked against plan-2, the newest version the mesh knows; both layers renamed.
    let out = mesh.expect(&["settings", "rename", "web", "port", "http-port"], 0);
    insta::assert_snapshot!("rename", redacted(&repo, &out));
    let shown = mesh
        .library()
        .call(async |mesh| {
            mesh.settings_show(&crate::support::layer("web", Some("a")), true)
                .await
        })
        .unwrap();
    let shown = serde_json::to_value(shown).unwrap();
    assert_eq!(shown["layer"], serde_json::json!({"http-port": 9090}));
    let kept = shown["history"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(kept["layer"], serde_json::json!({"port": 9090}));
    assert!(kept["command"]
        .as_str()
        .unwrap()
        .ends_with("settings rename web port http-port"));
    // Nothing is orphaned now, and the new name, which only plan-2 accepts, waits for it.
    let (check, sound) = self::check(&mesh);
    assert!(sound, "{check:#}");
    assert_eq!(check["orphans"], serde_json::json!([]));
    assert_eq!(check["problems"], serde_json::json!([]));
    assert_eq!(check["waiting"].as_array().unwrap().len(), 2, "{check:#}");
    assert!(check["waiting"]
        .as_array()
        .unwrap()
        .iter()
        .all(|w| w["key"] == "http-port" && w["plan"] == "plan-2"));

    // The plan rolls out, and each node keeps its value under the new name.
    resume(&mesh, &[]);
    assert_eq!(
        std::fs::read_to_string(mesh.root("a").join("etc/web.conf")).unwrap(),
        "listen 9090\n"
    );
    assert_eq!(
        std::fs::read_to_string(mesh.root("b").join("etc/web.conf")).unwrap(),
        "listen 8081\n"
    );
    // What `check` says as "the catalogue and inventory are sound".
    let (check, sound) = self::check(&mesh);
    assert!(sound, "{check:#}");
}

#[test]
fn a_merge_holds_the_node_whose_setting_it_orphans_until_the_setting_is_renamed() {
    let (mesh, repo) = renamed_upstream();
    let sent_a = std::fs::read(mesh.home().join("sent/a.json")).unwrap();

    // `a` is held, naming module, layer, key and value; `b`, whose layers set nothing, goes on.
    let merged = mesh.library().merge("cat").unwrap().lines;
    assert!(
        merged.contains("`web`: `a` held: this version orphans settings its layers hold (`web`, node `a` layer: `port` = 9090: no longer accepted"),
        "{merged}"
    );
    assert!(merged.contains("sent `b`"), "{merged}");
    assert_eq!(
        std::fs::read(mesh.home().join("sent/a.json")).unwrap(),
        sent_a,
        "nothing is sent to `a`"
    );
    assert_eq!(
        std::fs::read_to_string(mesh.root("a").join("etc/web.conf")).unwrap(),
        "listen 9090\n"
    );
    let status = mesh.run(&["status"]);
    assert_eq!(status.code, 3, "{}", status.stdout);
    insta::assert_snapshot!("status_held", redacted(&repo, &status.stdout));
    let json = mesh.library().status().json;
    assert_eq!(json["held"][0]["node"], "a");
    assert_eq!(json["held"][0]["orphans"][0]["key"], "port");
    assert_eq!(json["held"][0]["orphans"][0]["value"], 9090);

    // Resumed with nothing renamed: still held, still nothing sent.
    let _ = mesh.library().plans_resume(None);
    assert_eq!(
        std::fs::read(mesh.home().join("sent/a.json")).unwrap(),
        sent_a
    );

    // The rename ends the hold: the next drive sends `a`, which keeps its port.
    mesh.library()
        .settings_rename("web", "port", "http-port")
        .unwrap();
    let resumed = resume(&mesh, &[]);
    assert!(resumed.contains("sent `a`"), "{resumed}");
    assert_eq!(
        std::fs::read_to_string(mesh.root("a").join("etc/web.conf")).unwrap(),
        "listen 9090\n"
    );
    assert_eq!(status_code(&mesh), 0);
}

// Each home is its own test: a `Mesh` holds the suite's podman lock while it lives, so a
// second home made before the first is dropped waits on that lock for ever.

#[test]
fn drop_settings_on_a_merge_sends_the_node_with_what_the_version_gives_saying_so() {
    // Nothing is held, and `a` is said to be sent with what it dropped.
    let (mesh, _repo) = renamed_upstream();
    let merged = merge(
        &mesh,
        MergeFlags {
            drop_settings: &["web"],
            ..Default::default()
        },
    )
    .lines;
    assert!(
        merged.contains("`web`: `a` sent with these settings dropped, as allowed for `web`: `web`, node `a` layer: `port` = 9090"),
        "{merged}"
    );
    assert_eq!(
        std::fs::read_to_string(mesh.root("a").join("etc/web.conf")).unwrap(),
        "listen 8080\n",
        "the new version's default"
    );
    assert_eq!(status_code(&mesh), 0);
}

#[test]
fn drop_settings_on_plans_resume_sends_the_held_node() {
    let (mesh, _repo) = renamed_upstream();
    let sent_a = std::fs::read(mesh.home().join("sent/a.json")).unwrap();
    let merged = merge(&mesh, MergeFlags::default()).lines;
    assert!(
        merged.contains("`a` held")
            && merged.contains("(allowing `web`'s settings to drop sends it without them)"),
        "{merged}"
    );
    assert_eq!(status_code(&mesh), 3);

    // Another module's name sends nothing.
    resume(&mesh, &["media"]);
    assert_eq!(
        std::fs::read(mesh.home().join("sent/a.json")).unwrap(),
        sent_a
    );

    let resumed = resume(&mesh, &["web"]);
    assert!(
        resumed.contains("`web`: the held nodes are checked again (their orphaned settings allowed to drop)")
            && resumed.contains("`web`: `a` sent with these settings dropped, as allowed for `web`: `web`, node `a` layer: `port` = 9090"),
        "{resumed}"
    );
    assert_eq!(status_code(&mesh), 0);
    assert_eq!(
        std::fs::read_to_string(mesh.root("a").join("etc/web.conf")).unwrap(),
        "listen 8080\n"
    );
    // The setting stays in the layer, where nothing reads it: `check` names it until it is
    // removed (`settings set … --replace`) or renamed.
    let check = mesh.library().check().unwrap();
    assert!(!check.sound());
    let problems: Vec<String> = check.problems.iter().map(ToString::to_string).collect();
    assert!(
        problems
            .iter()
            .any(|problem| problem.contains("accepts no setting `port`")),
        "{problems:#?}"
    );
}

#[test]
fn a_setting_is_set_ahead_of_the_version_that_needs_it_and_waits_for_its_plan() {
    let mesh = mesh();
    let repo = Repo::new();
    write_web(&repo, "port", "8080");
    repo.commit("web on 8080");
    add_and_merge(&mesh, &repo);
    repo.write(&[
        (
            "modules/web/module.toml",
            "name = \"web\"\n\n[settings]\nport = 8080\nworkers = 2\ngreeting = \"hello\"\n\n[files.conf]\nsource = \"files/web.conf\"\npath = \"/etc/web.conf\"\ntemplate = true\n",
        ),
        ("modules/web/files/web.conf", "listen {{port}}\nworkers {{workers}}\n"),
    ]);
    repo.commit("web takes workers");

    // Before the new version is planned, the version the nodes run refuses the key.
    let Err(refused) = mesh
        .library()
        .settings_set("web", None, r#"{"workers": 4}"#)
    else {
        panic!("the version the nodes run accepts no `workers`");
    };
    assert!(
        refused.contains("accepts no setting `workers`"),
        "{refused}"
    );

    // Planned (not rolled out), the key is checked against plan-2, kept, and waits for it.
    merge_plan_only(&mesh);
    let set = mesh
        .library()
        .settings_set("web", None, r#"{"workers": 4}"#)
        .unwrap();
    assert!(!set.refused());
    // What `settings set` says as "checked against plan-2 (at …" and each key waiting.
    let waiting = |answer: &mesh_controller::settings::Answer| -> String {
        answer.waiting.iter().map(|w| format!("{w}\n")).collect()
    };
    assert!(
        set.checked_against
            .as_deref()
            .is_some_and(|from| from.starts_with("plan-2 (at "))
            && waiting(&set).contains(
                "`web`, mesh layer: `workers` waits for plan-2 (the version the nodes run does not accept it yet)"
            ),
        "{set:?}"
    );
    // A secret is set ahead the same way, and a layer restored from the history is checked
    // the same way.
    let secret = mesh
        .library()
        .call(async |mesh| {
            mesh.settings_edit(
                &crate::support::layer("web", Some("a")),
                &mesh_controller::SettingsEdit::SetSecret {
                    key: "greeting",
                    value: b"hi",
                },
                mesh_store::clock::now(),
            )
            .await
        })
        .unwrap();
    assert!(
        secret
            .checked_against
            .as_deref()
            .is_some_and(|from| from.starts_with("plan-2 (at "))
            && waiting(&secret).contains("`greeting` waits for plan-2"),
        "{secret:?}"
    );
    mesh.library()
        .call(async |mesh| {
            mesh.settings_edit(
                &crate::support::layer("web", Some("a")),
                &mesh_controller::SettingsEdit::Clear,
                mesh_store::clock::now(),
            )
            .await
        })
        .unwrap();
    let history = mesh
        .library()
        .call(async |mesh| {
            mesh.settings_show(&crate::support::layer("web", Some("a")), true)
                .await
        })
        .unwrap();
    let history = serde_json::to_value(history).unwrap();
    let revision = history["history"]
        .as_array()
        .unwrap()
        .iter()
        .find(|kept| !kept["layer"]["greeting"].is_null())
        .unwrap_or_else(|| panic!("the cleared layer is kept: {history:#}"))["revision"]
        .as_u64()
        .unwrap();
    let restored = mesh
        .library()
        .call(async |mesh| {
            mesh.settings_edit(
                &crate::support::layer("web", Some("a")),
                &mesh_controller::SettingsEdit::Restore { revision },
                mesh_store::clock::now(),
            )
            .await
        })
        .unwrap();
    assert!(
        restored
            .checked_against
            .as_deref()
            .is_some_and(|from| from.starts_with("plan-2 (at "))
            && waiting(&restored).contains("`greeting` waits for plan-2"),
        "{restored:?}"
    );
    // What `settings show web` says of each key waiting.
    let shown = mesh
        .library()
        .call(async |mesh| {
            mesh.settings_show(&crate::support::layer("web", None), false)
                .await
        })
        .unwrap();
    let said: String = shown.waiting.iter().map(|w| format!("{w}\n")).collect();
    assert!(said.contains("`workers` waits for plan-2"), "{said}");
    let json = serde_json::to_value(&shown).unwrap();
    assert_eq!(json["waiting"][0]["key"], "workers");
    assert_eq!(json["waiting"][0]["plan"], "plan-2");

    // Waiting is no problem: check is sound and says it, and a push still composes.
    let check = mesh.library().check().unwrap();
    let said: String = check.waiting.iter().map(|w| format!("{w}\n")).collect();
    assert!(
        said.contains("`workers` waits for plan-2") && check.sound(),
        "{said}{check:?}"
    );
    push(&mesh, &["a", "b"]);
    assert_eq!(
        std::fs::read_to_string(mesh.root("a").join("etc/web.conf")).unwrap(),
        "listen 8080\n"
    );

    // Rolled out, the version the nodes run takes it, and nothing waits.
    resume(&mesh, &[]);
    assert_eq!(
        std::fs::read_to_string(mesh.root("b").join("etc/web.conf")).unwrap(),
        "listen 8080\nworkers 4\n"
    );
    let (check, sound) = self::check(&mesh);
    assert!(sound, "{check:#}");
    let shown = mesh
        .library()
        .call(async |mesh| {
            mesh.settings_show(&crate::support::layer("web", None), false)
                .await
        })
        .unwrap();
    assert!(shown.waiting.is_empty(), "{:?}", shown.waiting);
}
