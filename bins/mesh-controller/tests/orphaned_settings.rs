//! An orphaned setting is a removal: a module's new version that no longer accepts a key a
//! layer sets (or accepts it with another type) is named before it takes effect — by `check`
//! for the next merge, by the merge's preview, and by `plan NODE --diff` while a plan has yet to
//! roll it out — with the value and what the node gets instead. Real git, the embedded mesh.

mod support;

use serde_json::Value;
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

/// A mesh running `web` from a registered repository, `a`'s layer setting `port = 9090`, and
/// the repository's next commit renaming the setting `http-port` (not merged yet).
fn renamed_upstream() -> (Mesh, Repo) {
    let mesh = mesh();
    let repo = Repo::new();
    write_web(&repo, "port", "8080");
    repo.commit("web on 8080");
    mesh.expect(&["repo", "add", "cat", repo.path().to_str().unwrap()], 0);
    mesh.expect(&["merge", "cat"], 0);
    mesh.expect(
        &["settings", "set", "web", "--node", "a", r#"{"port": 9090}"#],
        0,
    );
    mesh.expect(&["push", "a", "b"], 0);
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

    // `check` reads what the next merge would deploy, and names the orphan: exit 1.
    let check = mesh.run(&["check"]);
    assert_eq!(check.code, 1, "{}", check.stderr);
    insta::assert_snapshot!("check", redacted(&repo, &check.stdout));
    let json: Value =
        serde_json::from_str(&mesh.expect(&["check", "--output", "json"], 1)).unwrap();
    let orphan = &json["orphans"][0];
    assert_eq!(orphan["from"], "head");
    assert_eq!(orphan["orphans"][0]["key"], "port");
    assert_eq!(orphan["orphans"][0]["value"], 9090);
    assert_eq!(orphan["orphans"][0]["layer"]["node"], "a");
    assert_eq!(orphan["orphans"][0]["instead"]["gets"], "nothing");

    // The merge's preview names it for `a`, and not for `b`, whose layer sets nothing.
    let preview = mesh.expect(&["merge", "cat", "--plan-only"], 0);
    insta::assert_snapshot!("preview", redacted(&repo, &preview));
    let shown = mesh.expect(
        &["plans", "show", "plan-2", "--preview", "--output", "json"],
        0,
    );
    let shown: Value = serde_json::from_str(&shown).unwrap();
    let web = &shown["tiers"][0]["modules"][0];
    assert_eq!(web["orphaned-nodes"], serde_json::json!(["a"]), "{shown:#}");
    assert_eq!(web["orphans"]["new-settings"][0]["key"], "http-port");

    // While plan-2 has yet to roll `web` out, `plan a --diff` names it too; `b` has none.
    let diff = mesh.expect(&["plan", "a", "--diff"], 0);
    insta::assert_snapshot!("plan_diff", redacted(&repo, &diff));
    let diff: Value =
        serde_json::from_str(&mesh.expect(&["plan", "a", "--diff", "--output", "json"], 0))
            .unwrap();
    assert_eq!(diff["orphans"][0]["plan"], "plan-2");
    assert_eq!(mesh.expect(&["plan", "b", "--diff"], 0), "");
}

#[test]
fn a_type_change_is_named_with_the_default_the_node_gets() {
    let mesh = mesh();
    let repo = Repo::new();
    write_web(&repo, "port", "8080");
    repo.commit("web on 8080");
    mesh.expect(&["repo", "add", "cat", repo.path().to_str().unwrap()], 0);
    mesh.expect(&["merge", "cat"], 0);
    mesh.expect(&["settings", "set", "web", r#"{"port": 9090}"#], 0);
    write_web(&repo, "port", "\"8080\"");
    repo.commit("the port is text");

    let json: Value =
        serde_json::from_str(&mesh.expect(&["check", "--output", "json"], 1)).unwrap();
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
    mesh.expect(&["settings", "set", "web", r#"{"port": 8081}"#], 0);
    mesh.expect(&["merge", "cat", "--plan-only"], 0);

    // Refused, nothing changed: a key no layer sets, and a name the new version does not take.
    let before = mesh.expect(&["settings", "show", "web", "--node", "a"], 0);
    let none = mesh.run(&["settings", "rename", "web", "size", "capacity"]);
    assert_eq!(none.code, 1);
    assert!(
        none.stderr.contains("no layer of `web` sets `size`"),
        "{}",
        none.stderr
    );
    let unknown = mesh.run(&["settings", "rename", "web", "port", "listen-port"]);
    assert_eq!(unknown.code, 1);
    assert!(
        unknown.stderr.contains("accepts no setting `listen-port`")
            && unknown.stderr.contains("checked against plan-2"),
        "{}",
        unknown.stderr
    );
    assert_eq!(
        mesh.expect(&["settings", "show", "web", "--node", "a"], 0),
        before
    );

    // Checked against plan-2, the newest version the mesh knows; both layers renamed.
    let out = mesh.expect(&["settings", "rename", "web", "port", "http-port"], 0);
    insta::assert_snapshot!("rename", redacted(&repo, &out));
    let shown = mesh.expect(
        &[
            "settings",
            "show",
            "web",
            "--node",
            "a",
            "--history",
            "--output",
            "json",
        ],
        0,
    );
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["layer"], serde_json::json!({"http-port": 9090}));
    let kept = shown["history"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(kept["layer"], serde_json::json!({"port": 9090}));
    assert!(kept["command"]
        .as_str()
        .unwrap()
        .ends_with("settings rename web port http-port"));
    // Nothing is orphaned now, and the new name, which only plan-2 accepts, waits for it.
    let check: Value =
        serde_json::from_str(&mesh.expect(&["check", "--output", "json"], 0)).unwrap();
    assert_eq!(check["orphans"], serde_json::json!([]));
    assert_eq!(check["problems"], serde_json::json!([]));
    assert_eq!(check["waiting"].as_array().unwrap().len(), 2, "{check:#}");
    assert!(check["waiting"]
        .as_array()
        .unwrap()
        .iter()
        .all(|w| w["key"] == "http-port" && w["plan"] == "plan-2"));

    // The plan rolls out, and each node keeps its value under the new name.
    mesh.expect(&["plans", "resume"], 0);
    assert_eq!(
        std::fs::read_to_string(mesh.root("a").join("etc/web.conf")).unwrap(),
        "listen 9090\n"
    );
    assert_eq!(
        std::fs::read_to_string(mesh.root("b").join("etc/web.conf")).unwrap(),
        "listen 8081\n"
    );
    assert!(mesh
        .expect(&["check"], 0)
        .ends_with("\nthe catalogue and inventory are sound\n"));
}

#[test]
fn a_merge_holds_the_node_whose_setting_it_orphans_until_the_setting_is_renamed() {
    let (mesh, repo) = renamed_upstream();
    let sent_a = std::fs::read(mesh.home().join("sent/a.json")).unwrap();

    // `a` is held, naming module, layer, key and value; `b`, whose layers set nothing, goes on.
    let merged = mesh.run(&["merge", "cat"]);
    assert!(
        merged.stdout.contains("`web`: `a` held: this version orphans settings its layers hold (`web`, node `a` layer: `port` = 9090: no longer accepted"),
        "{}",
        merged.stdout
    );
    assert!(merged.stdout.contains("sent `b`"), "{}", merged.stdout);
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
    let json: Value =
        serde_json::from_str(&mesh.run(&["status", "--output", "json"]).stdout).unwrap();
    assert_eq!(json["held"][0]["node"], "a");
    assert_eq!(json["held"][0]["orphans"][0]["key"], "port");
    assert_eq!(json["held"][0]["orphans"][0]["value"], 9090);

    // Resumed with nothing renamed: still held, still nothing sent.
    mesh.run(&["plans", "resume"]);
    assert_eq!(
        std::fs::read(mesh.home().join("sent/a.json")).unwrap(),
        sent_a
    );

    // The rename ends the hold: the next drive sends `a`, which keeps its port.
    mesh.expect(&["settings", "rename", "web", "port", "http-port"], 0);
    let resumed = mesh.expect(&["plans", "resume"], 0);
    assert!(resumed.contains("sent `a`"), "{resumed}");
    assert_eq!(
        std::fs::read_to_string(mesh.root("a").join("etc/web.conf")).unwrap(),
        "listen 9090\n"
    );
    assert_eq!(mesh.run(&["status"]).code, 0);
}

// Each home is its own test: a `Mesh` holds the suite's podman lock while it lives, so a
// second home made before the first is dropped waits on that lock for ever.

#[test]
fn drop_settings_on_a_merge_sends_the_node_with_what_the_version_gives_saying_so() {
    // Nothing is held, and `a` is said to be sent with what it dropped.
    let (mesh, _repo) = renamed_upstream();
    let merged = mesh.expect(&["merge", "cat", "--drop-settings", "web"], 0);
    assert!(
        merged.contains("`web`: `a` sent with these settings dropped, as --drop-settings web says: `web`, node `a` layer: `port` = 9090"),
        "{merged}"
    );
    assert_eq!(
        std::fs::read_to_string(mesh.root("a").join("etc/web.conf")).unwrap(),
        "listen 8080\n",
        "the new version's default"
    );
    assert_eq!(mesh.run(&["status"]).code, 0);
}

#[test]
fn drop_settings_on_plans_resume_sends_the_held_node() {
    let (mesh, _repo) = renamed_upstream();
    let sent_a = std::fs::read(mesh.home().join("sent/a.json")).unwrap();
    let merged = mesh.expect(&["merge", "cat"], 0);
    assert!(
        merged.contains("`a` held")
            && merged.contains("(`--drop-settings web` sends it without them)"),
        "{merged}"
    );
    assert_eq!(mesh.run(&["status"]).code, 3);

    // Another module's name sends nothing.
    mesh.expect(&["plans", "resume", "--drop-settings", "media"], 0);
    assert_eq!(
        std::fs::read(mesh.home().join("sent/a.json")).unwrap(),
        sent_a
    );

    let resumed = mesh.expect(&["plans", "resume", "--drop-settings", "web"], 0);
    assert!(
        resumed.contains("`web`: the held nodes are checked again (--drop-settings web)")
            && resumed.contains("`web`: `a` sent with these settings dropped, as --drop-settings web says: `web`, node `a` layer: `port` = 9090"),
        "{resumed}"
    );
    assert_eq!(mesh.run(&["status"]).code, 0);
    assert_eq!(
        std::fs::read_to_string(mesh.root("a").join("etc/web.conf")).unwrap(),
        "listen 8080\n"
    );
    // The setting stays in the layer, where nothing reads it: `check` names it until it is
    // removed (`settings set … --replace`) or renamed.
    let check = mesh.run(&["check"]);
    assert_eq!(check.code, 1);
    assert!(
        check.stdout.contains("accepts no setting `port`"),
        "{}",
        check.stdout
    );
}

#[test]
fn a_setting_is_set_ahead_of_the_version_that_needs_it_and_waits_for_its_plan() {
    let mesh = mesh();
    let repo = Repo::new();
    write_web(&repo, "port", "8080");
    repo.commit("web on 8080");
    mesh.expect(&["repo", "add", "cat", repo.path().to_str().unwrap()], 0);
    mesh.expect(&["merge", "cat"], 0);
    repo.write(&[
        (
            "modules/web/module.toml",
            "name = \"web\"\n\n[settings]\nport = 8080\nworkers = 2\ngreeting = \"hello\"\n\n[files.conf]\nsource = \"files/web.conf\"\npath = \"/etc/web.conf\"\ntemplate = true\n",
        ),
        ("modules/web/files/web.conf", "listen {{port}}\nworkers {{workers}}\n"),
    ]);
    repo.commit("web takes workers");

    // Before the new version is planned, the version the nodes run refuses the key.
    let refused = mesh.run(&["settings", "set", "web", r#"{"workers": 4}"#]);
    assert_eq!(refused.code, 1, "{}", refused.stdout);
    assert!(
        refused.stderr.contains("accepts no setting `workers`"),
        "{}",
        refused.stderr
    );

    // Planned (not rolled out), the key is checked against plan-2, kept, and waits for it.
    mesh.expect(&["merge", "cat", "--plan-only"], 0);
    let set = mesh.expect(&["settings", "set", "web", r#"{"workers": 4}"#], 0);
    assert!(
        set.contains("checked against plan-2 (at ")
            && set.contains(
                "`web`, mesh layer: `workers` waits for plan-2 (the version the nodes run does not accept it yet)"
            ),
        "{set}"
    );
    // A secret is set ahead the same way, and a layer restored from the history is checked
    // the same way.
    let secret = mesh.run_stdin(
        &["settings", "set-secret", "web", "greeting", "--node", "a"],
        b"hi",
    );
    assert_eq!(secret.code, 0, "{}", secret.stderr);
    assert!(
        secret.stdout.contains("checked against plan-2 (at ")
            && secret.stdout.contains("`greeting` waits for plan-2"),
        "{}",
        secret.stdout
    );
    mesh.expect(&["settings", "clear", "web", "--node", "a"], 0);
    let history: Value = serde_json::from_str(&mesh.expect(
        &[
            "settings",
            "show",
            "web",
            "--node",
            "a",
            "--history",
            "--output",
            "json",
        ],
        0,
    ))
    .unwrap();
    let revision = history["history"]
        .as_array()
        .unwrap()
        .iter()
        .find(|kept| !kept["layer"]["greeting"].is_null())
        .unwrap_or_else(|| panic!("the cleared layer is kept: {history:#}"))["revision"]
        .to_string();
    let restored = mesh.expect(&["settings", "restore", "web", &revision, "--node", "a"], 0);
    assert!(
        restored.contains("checked against plan-2 (at ")
            && restored.contains("`greeting` waits for plan-2"),
        "{restored}"
    );
    let shown = mesh.expect(&["settings", "show", "web"], 0);
    assert!(shown.contains("`workers` waits for plan-2"), "{shown}");
    let json: Value =
        serde_json::from_str(&mesh.expect(&["settings", "show", "web", "--output", "json"], 0))
            .unwrap();
    assert_eq!(json["waiting"][0]["key"], "workers");
    assert_eq!(json["waiting"][0]["plan"], "plan-2");

    // Waiting is no problem: check is sound and says it, and a push still composes.
    let check = mesh.expect(&["check"], 0);
    assert!(
        check.contains("`workers` waits for plan-2")
            && check.contains("the catalogue and inventory are sound"),
        "{check}"
    );
    mesh.expect(&["push", "a", "b"], 0);
    assert_eq!(
        std::fs::read_to_string(mesh.root("a").join("etc/web.conf")).unwrap(),
        "listen 8080\n"
    );

    // Rolled out, the version the nodes run takes it, and nothing waits.
    mesh.expect(&["plans", "resume"], 0);
    assert_eq!(
        std::fs::read_to_string(mesh.root("b").join("etc/web.conf")).unwrap(),
        "listen 8080\nworkers 4\n"
    );
    assert!(mesh
        .expect(&["check"], 0)
        .ends_with("\nthe catalogue and inventory are sound\n"));
    assert!(!mesh
        .expect(&["settings", "show", "web"], 0)
        .contains("waits"));
}
