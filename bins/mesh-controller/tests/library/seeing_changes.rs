//! No change takes effect unseen (the rules “A push says what it will change” and “A settings layer
//! is read before it is replaced”): settings answers and history, `plan --diff`, held moves.
//!
//! The library is called in process (`support::in_process`); the binary is run for what a
//! person reads (the settings answers, `plan --diff` and a held push, as snapshots) and for
//! `plan --diff --detailed-exitcode`'s exit codes.

use crate::support;
use mesh_controller::Verdict;
use support::{redact, Mesh};

/// The home node's media layer in the example: places, accesses and endpoints.
const HOME_MEDIA_LAYER: &str = r#"{"places": {"media": "/srv/disk1/media", "config": "/srv/disk1/media-config"}, "accesses": {"library": "read-write"}, "endpoints": {"web": "http://home.internal:8096"}}"#;

/// [`HOME_MEDIA_LAYER`] as JSON.
fn home_media_layer() -> serde_json::Value {
    serde_json::from_str(HOME_MEDIA_LAYER).unwrap()
}

/// `settings show MODULE --node NODE --history` as JSON: the layer and the layers it replaced.
fn shown_with_history(mesh: &Mesh, module: &str, node: &str) -> serde_json::Value {
    shown(mesh, module, Some(node), true)
}

/// `settings show MODULE [--node NODE] [--history] --output json`, in process.
fn shown(mesh: &Mesh, module: &str, node: Option<&str>, history: bool) -> serde_json::Value {
    let shown = mesh
        .library()
        .call(async |mesh| {
            mesh.settings_show(&crate::support::layer(module, node), history)
                .await
        })
        .unwrap();
    serde_json::to_value(shown).unwrap()
}

/// `settings set MODULE JSON [--node NODE]`, in process: it went ahead (`settings set` exits
/// 0, not 2).
fn set(mesh: &Mesh, module: &str, node: Option<&str>, json: &str) {
    let answer = mesh.library().settings_set(module, node, json).unwrap();
    assert!(!answer.refused(), "{answer:?}");
}

/// Whether `push --output json` says `node` was sent (the binary's "NODE: sent …").
fn sent(push: &serde_json::Value, node: &str) -> bool {
    push.as_array()
        .unwrap()
        .iter()
        .any(|result| result["node"] == node && result["result"] != "held")
}

#[test]
fn a_set_of_one_placement_is_refused_naming_every_dropped_key() {
    // The incident behind “A settings layer is read before it is replaced”: one `settings set` of a
    // single placement silently dropped the node's whole layer — placements, accesses, endpoints —
    // and the media server ran on an empty configuration directory.
    let mesh = Mesh::example();
    let before_layer = shown(&mesh, "media", Some("home"), false);
    let before_plan = mesh.library().plan_node("home").unwrap();
    let run = mesh.run(&[
        "settings",
        "set",
        "media",
        "--node",
        "home",
        r#"{"places": {"media": "/mnt/new/media"}}"#,
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    insta::assert_snapshot!("set_dropping_keys_refused", run.stdout);
    assert_eq!(
        shown(&mesh, "media", Some("home"), false),
        before_layer,
        "the layer is the same afterwards"
    );
    assert_eq!(
        mesh.library().plan_node("home").unwrap(),
        before_plan,
        "the node's plan is the same afterwards"
    );
    let history = shown_with_history(&mesh, "media", "home");
    assert_eq!(
        history["history"],
        serde_json::json!([]),
        "a refused set keeps nothing"
    );
}

#[test]
fn replace_removes_the_key_and_history_keeps_the_layer_it_replaced() {
    let mesh = Mesh::example();
    let out = mesh.expect(
        &[
            "settings",
            "set",
            "media",
            "--node",
            "home",
            "--replace",
            r#"{"places": {"media": "/srv/disk1/media", "config": "/srv/disk1/media-config"}, "accesses": {"library": "read-write"}}"#,
        ],
        0,
    );
    insta::assert_snapshot!("set_with_replace", out);
    let shown = shown_with_history(&mesh, "media", "home");
    assert_eq!(shown["layer"].get("endpoints"), None);
    let kept = &shown["history"][0];
    assert_eq!(kept["revision"], 1);
    assert_eq!(kept["layer"], home_media_layer());
    assert!(kept["command"]
        .as_str()
        .unwrap()
        .starts_with("mesh-controller --home"));

    // The undo is one command.
    let answer = mesh
        .library()
        .call(async |mesh| {
            mesh.settings_edit(
                &crate::support::layer("media", Some("home")),
                &mesh_controller::SettingsEdit::Restore { revision: 1 },
                mesh_store::clock::now(),
            )
            .await
        })
        .unwrap();
    assert!(!answer.refused(), "{answer:?}");
    let restored = self::shown(&mesh, "media", Some("home"), false);
    assert_eq!(restored["layer"], home_media_layer());
}

#[test]
fn a_set_that_only_adds_or_changes_goes_ahead() {
    let mesh = Mesh::example();
    let out = mesh.expect(
        &[
            "settings",
            "set",
            "media",
            r#"{"port": 8097, "accesses": {"library": "read-only"}}"#,
        ],
        0,
    );
    insta::assert_snapshot!("set_adding_keys", out);
}

#[test]
fn unknown_keys_are_refused_with_the_modules_keys_listed() {
    let mesh = Mesh::example();
    let Err(error) = mesh
        .library()
        .settings_set("media", None, r#"{"prot": 8097}"#)
    else {
        panic!("`media` accepts no `prot`");
    };
    assert!(
        error.contains("`media` accepts no setting `prot`; its settings are: accesses, endpoints, places, port"),
        "{error}"
    );
    assert!(!mesh.home().join("settings/media/mesh.json").exists());
}

#[test]
fn clear_keeps_the_layer_in_history() {
    let mesh = Mesh::example();
    mesh.library()
        .call(async |mesh| {
            mesh.settings_edit(
                &crate::support::layer("base", Some("laptop")),
                &mesh_controller::SettingsEdit::Clear,
                mesh_store::clock::now(),
            )
            .await
        })
        .unwrap();
    let shown = shown_with_history(&mesh, "base", "laptop");
    assert_eq!(shown["layer"], serde_json::Value::Null);
    assert_eq!(
        shown["history"][0]["layer"]["motd"],
        "alice's laptop — managed by mesh."
    );
}

#[test]
fn plan_diff_of_an_unchanged_node_is_empty() {
    let mesh = Mesh::example();
    let pushed = mesh.library().push(&["laptop"]).unwrap();
    assert_eq!(pushed.verdict, Verdict::Converged, "{}", pushed.json);
    let run = mesh.run(&["plan", "laptop", "--diff", "--detailed-exitcode"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "");
}

#[test]
fn plan_diff_names_a_changed_containers_field_and_says_it_recreates() {
    let mesh = Mesh::example();
    // The container runs under podman.
    let pushed = mesh.library().push(&["home"]).unwrap();
    assert_eq!(pushed.verdict, Verdict::Converged, "{}", pushed.json);
    let port = mesh.media_port().to_string();
    let new_port = mesh_test_support::wait::free_port().to_string();
    set(&mesh, "media", None, &format!(r#"{{"port": {new_port}}}"#));
    let run = mesh.run(&["plan", "home", "--diff", "--detailed-exitcode"]);
    assert_eq!(run.code, 2, "a difference exits 2: {}", run.stderr);
    // Digests first: a port's digits could be found inside one.
    let shown = redact(&run.stdout, &[])
        .replace(&new_port, "[new port]")
        .replace(&port, "[port]");
    insta::assert_snapshot!("diff_changed_port", shown);
    let (diff, _) = mesh.library().plan_diff("home").unwrap();
    assert!(diff.is_object());
}

#[test]
fn push_holds_a_running_containers_moved_mount_for_that_node_only() {
    // The rule “A moved mount is held”: a push that gives a running container another host
    // directory at a mount it already has is held for that node, naming module, mount and both
    // directories; other nodes in the same push go ahead; `--move MODULE` sends it.
    let mesh = Mesh::example();
    let _ = mesh.library().push_all();
    let mut layer = home_media_layer();
    layer["places"]["media"] = "/mnt/disk2/media".into();
    set(&mesh, "media", Some("home"), &layer.to_string());
    set(
        &mesh,
        "base",
        None,
        r#"{"admin-email": "ops@example.internal", "timezone": "Europe/Brussels"}"#,
    );
    let sent_home_before = std::fs::read(mesh.home().join("sent/home.json")).unwrap();

    let run = mesh.run(&["push", "--all"]);
    assert_eq!(run.code, 2, "held exits non-zero: {}", run.stderr);
    let held = run
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("home:"))
        .take_while(|l| !l.starts_with("laptop:"))
        .collect::<Vec<_>>()
        .join("\n");
    insta::assert_snapshot!("push_held_move", held);
    assert!(run.stdout.contains("laptop: sent"), "{}", run.stdout);
    assert!(run.stdout.contains("control: sent"), "{}", run.stdout);
    assert_eq!(
        std::fs::read(mesh.home().join("sent/home.json")).unwrap(),
        sent_home_before,
        "home was not sent"
    );
    let laptop_conf =
        std::fs::read_to_string(mesh.root("laptop").join("etc/mesh/base.conf")).unwrap();
    assert!(
        laptop_conf.contains("Europe/Brussels"),
        "the others went ahead"
    );
    let home_conf = std::fs::read_to_string(mesh.root("home").join("etc/mesh/base.conf")).unwrap();
    assert!(
        !home_conf.contains("Europe/Brussels"),
        "home kept what it ran"
    );

    // The rule “Nothing fails silently”: the held push is a problem `status` shows until a send to
    // that node, not only the push's output and exit code.
    let status = mesh.library().status();
    assert_eq!(
        status.code, 3,
        "a held push needs a person: {}",
        status.json
    );
    let problems = held_push_problems(&status.json);
    assert_eq!(problems.len(), 1, "{}", status.json);
    assert_eq!(problems[0]["subject"], "home", "{}", status.json);
    let details = problems[0]["details"].to_string();
    assert!(details.contains("/mnt/disk2/media"), "{details}");

    // This once accepted exit 3 (not converged) and never looked at the
    // container. The move is sent, applied, and the container runs with the new directory.
    let run = mesh.library().push_moving(&["home"], &["media"]).unwrap();
    assert_eq!(run.verdict, Verdict::Converged, "{}{}", run.json, run.lines);
    assert!(sent(&run.json, "home"), "{}", run.json);
    let moved_to = mesh.root("home").join("mnt/disk2/media");
    assert!(moved_to.is_dir());
    let mounts = container_mounts(&mesh, "home");
    let sources: Vec<&str> = mounts
        .iter()
        .filter(|(_, destination)| destination == "/media")
        .map(|(source, _)| source.as_str())
        .collect();
    assert_eq!(
        sources,
        [moved_to.to_str().unwrap()],
        "the container's /media is the new directory: {mounts:?}"
    );
    let status = mesh.library().status();
    assert_eq!(
        held_push_problems(&status.json),
        Vec::<serde_json::Value>::new(),
        "the send cleared it: {}",
        status.json
    );
}

/// The held-push problems in `status --output json`.
fn held_push_problems(status: &serde_json::Value) -> Vec<serde_json::Value> {
    status["problems"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p["kind"] == "held-push")
        .collect()
}

/// Every mount (source, destination) of the containers `node`'s host made, read from podman.
fn container_mounts(mesh: &Mesh, node: &str) -> Vec<(String, String)> {
    let label = format!("label=io.mesh.host={}", mesh.root(node).display());
    let ids = std::process::Command::new("podman")
        .args(["ps", "--quiet", "--filter", &label])
        .output()
        .expect("podman runs");
    assert!(ids.status.success(), "{ids:?}");
    let ids = String::from_utf8(ids.stdout).unwrap();
    let ids: Vec<&str> = ids.split_whitespace().collect();
    assert_eq!(ids.len(), 1, "one running container on {node}: {ids:?}");
    let out = std::process::Command::new("podman")
        .args([
            "inspect",
            "--format",
            "{{range .Mounts}}{{.Source}} {{.Destination}}\n{{end}}",
            ids[0],
        ])
        .output()
        .expect("podman runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(source, destination)| (source.to_owned(), destination.to_owned()))
        .collect()
}

#[test]
fn a_first_send_is_not_held() {
    let mesh = Mesh::example();
    // A first send to a node is never a move: not held (`push` exits 2 when one is).
    let run = mesh.library().push(&["home"]).unwrap();
    assert_ne!(run.verdict, Verdict::Held, "{}", run.json);
    assert!(sent(&run.json, "home"), "{}", run.json);
}
