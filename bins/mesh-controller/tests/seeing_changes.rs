//! No change takes effect unseen (the rules “A push says what it will change” and “A settings layer is read before it is replaced”): settings answers and
//! history, `plan --diff`, held moves.

mod support;

use support::{redact, Mesh};

/// The home node's media layer in the example: places, accesses and endpoints.
const HOME_MEDIA_LAYER: &str = r#"{"places": {"media": "/srv/disk1/media", "config": "/srv/disk1/media-config"}, "accesses": {"library": "read-write"}, "endpoints": {"web": "http://home.internal:8096"}}"#;

/// [`HOME_MEDIA_LAYER`] as JSON.
fn home_media_layer() -> serde_json::Value {
    serde_json::from_str(HOME_MEDIA_LAYER).unwrap()
}

/// `settings show MODULE --node NODE --history` as JSON: the layer and the layers it replaced.
fn shown_with_history(mesh: &Mesh, module: &str, node: &str) -> serde_json::Value {
    let out = mesh.expect(
        &[
            "settings",
            "show",
            module,
            "--node",
            node,
            "--history",
            "--output",
            "json",
        ],
        0,
    );
    serde_json::from_str(&out).unwrap()
}

#[test]
fn a_set_of_one_placement_is_refused_naming_every_dropped_key() {
    // The incident behind “A settings layer is read before it is replaced”: one `settings set` of a single placement silently dropped the node's
    // whole layer — placements, accesses, endpoints — and the media server ran on an empty
    // configuration directory.
    let mesh = Mesh::example();
    let before_layer = mesh.expect(&["settings", "show", "media", "--node", "home"], 0);
    let before_plan = mesh.expect(&["plan", "home", "--output", "json"], 0);
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
        mesh.expect(&["settings", "show", "media", "--node", "home"], 0),
        before_layer,
        "the layer is the same afterwards"
    );
    assert_eq!(
        mesh.expect(&["plan", "home", "--output", "json"], 0),
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
    mesh.expect(&["settings", "restore", "media", "--node", "home", "1"], 0);
    let restored = mesh.expect(
        &[
            "settings", "show", "media", "--node", "home", "--output", "json",
        ],
        0,
    );
    let restored: serde_json::Value = serde_json::from_str(&restored).unwrap();
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
    let run = mesh.run(&["settings", "set", "media", r#"{"prot": 8097}"#]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr
            .contains("`media` accepts no setting `prot`; its settings are: accesses, endpoints, places, port"),
        "{}",
        run.stderr
    );
    assert!(!mesh.home().join("settings/media/mesh.json").exists());
}

#[test]
fn clear_keeps_the_layer_in_history() {
    let mesh = Mesh::example();
    mesh.expect(&["settings", "clear", "base", "--node", "laptop"], 0);
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
    mesh.expect(&["push", "laptop"], 0);
    let run = mesh.run(&["plan", "laptop", "--diff", "--detailed-exitcode"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "");
}

#[test]
fn plan_diff_names_a_changed_containers_field_and_says_it_recreates() {
    let mesh = Mesh::example();
    mesh.expect(&["push", "home"], 0); // the container runs under podman
    let port = mesh.media_port().to_string();
    let new_port = mesh_test_support::wait::free_port().to_string();
    mesh.expect(
        &[
            "settings",
            "set",
            "media",
            &format!(r#"{{"port": {new_port}}}"#),
        ],
        0,
    );
    let run = mesh.run(&["plan", "home", "--diff", "--detailed-exitcode"]);
    assert_eq!(run.code, 2, "a difference exits 2: {}", run.stderr);
    // Digests first: a port's digits could be found inside one.
    let shown = redact(&run.stdout, &[])
        .replace(&new_port, "[new port]")
        .replace(&port, "[port]");
    insta::assert_snapshot!("diff_changed_port", shown);
    let json = mesh.expect(&["plan", "home", "--diff", "--output", "json"], 0);
    let diff: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(diff.is_object());
}

#[test]
fn push_holds_a_running_containers_moved_mount_for_that_node_only() {
    // The rule “A moved mount is held”: a push that gives a running container another host directory at a mount it
    // already has is held for that node, naming module, mount and both directories; other nodes
    // in the same push go ahead; `--move MODULE` sends it.
    let mesh = Mesh::example();
    mesh.run(&["push", "--all"]);
    let mut layer = home_media_layer();
    layer["places"]["media"] = "/mnt/disk2/media".into();
    mesh.expect(
        &[
            "settings",
            "set",
            "media",
            "--node",
            "home",
            &layer.to_string(),
        ],
        0,
    );
    mesh.expect(
        &[
            "settings",
            "set",
            "base",
            r#"{"admin-email": "ops@example.internal", "timezone": "Europe/Brussels"}"#,
        ],
        0,
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
    let status = mesh.run(&["status", "--output", "json"]);
    assert_eq!(
        status.code, 3,
        "a held push needs a person: {}",
        status.stderr
    );
    let problems = held_push_problems(&status.stdout);
    assert_eq!(problems.len(), 1, "{}", status.stdout);
    assert_eq!(problems[0]["subject"], "home", "{}", status.stdout);
    let details = problems[0]["details"].to_string();
    assert!(details.contains("/mnt/disk2/media"), "{details}");

    // This once accepted exit 3 (not converged) and never looked at the
    // container. The move is sent, applied, and the container runs with the new directory.
    let run = mesh.run(&["push", "home", "--move", "media"]);
    assert_eq!(
        run.code, 0,
        "stdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    assert!(run.stdout.contains("home: sent"), "{}", run.stdout);
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
    let status = mesh.run(&["status", "--output", "json"]);
    assert_eq!(
        held_push_problems(&status.stdout),
        Vec::<serde_json::Value>::new(),
        "the send cleared it: {}",
        status.stdout
    );
}

/// The held-push problems in `status --output json`.
fn held_push_problems(json: &str) -> Vec<serde_json::Value> {
    let status: serde_json::Value =
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
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
    // A first send to a node is never a move.
    let run = mesh.run(&["push", "home"]);
    assert_ne!(run.code, 2, "{}", run.stdout);
    assert!(!run.stdout.contains("held"), "{}", run.stdout);
}
