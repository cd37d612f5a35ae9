//! init → plan → push → status against sandbox roots, read back from disk.

use crate::support;
use support::Mesh;

#[test]
fn plan_prints_a_nodes_declaration_and_its_json_parses_back() {
    let mesh = Mesh::example();
    insta::assert_snapshot!("plan_laptop", mesh.expect(&["plan", "laptop"], 0));
    // `laptop` uses no secret: its JSON is the declaration itself, and reads back as one.
    let json = mesh.expect(&["plan", "laptop", "--output", "json"], 0);
    let declaration =
        mesh_model::declaration::Declaration::from_json(json.as_bytes()).expect("valid JSON");
    assert_eq!(declaration.node, "laptop");
    // `home` uses the example's TLS key, a secret file: its JSON is the declaration with every
    // secret shown as its keyed digest, never its ciphertext or value — JSON a script reads,
    // not a declaration to send.
    let json = mesh.expect(&["plan", "home", "--output", "json"], 0);
    let shown: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(shown["node"], "home");
    assert!(json.contains("media/container/media"), "{json}");
    assert!(json.contains("<secret sha256:"), "{json}");
    assert!(
        mesh_model::declaration::Declaration::from_json(json.as_bytes()).is_err(),
        "a declaration with its secrets shown as digests must not read as one to send"
    );
}

#[test]
fn push_applies_under_the_sandbox_roots_and_status_reports_it() {
    let mesh = Mesh::example();
    let out = mesh.expect(&["push", "control", "laptop"], 0);
    assert!(out.contains("laptop: sent"), "{out}");
    assert!(out.contains("converged"), "{out}");

    let motd = std::fs::read_to_string(mesh.root("laptop").join("etc/motd")).unwrap();
    assert_eq!(motd, "alice's laptop — managed by mesh.\n");
    let conf = std::fs::read_to_string(mesh.root("control").join("etc/mesh/base.conf")).unwrap();
    assert!(
        conf.contains("admin-email = ops@example.internal"),
        "{conf}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(mesh.root("control").join("etc/mesh/base.conf"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o640);
    let group = std::fs::read_to_string(mesh.root("laptop").join("etc/group")).unwrap();
    assert!(
        group
            .lines()
            .any(|l| l.starts_with("video:") && l.ends_with("alice")),
        "{group}"
    );

    // `home` was never sent what it should run: pending, and nothing will send it (exit 3).
    let status = mesh.expect(&["status"], 3);
    // `home`'s intent counts its secrets by their keyed digests, keyed by this home's own key.
    let intent = status
        .split_once("home: intent ")
        .and_then(|(_, rest)| rest.split(',').next())
        .unwrap_or_else(|| panic!("{status}"))
        .to_owned();
    insta::assert_snapshot!(
        "status_after_push",
        status.replace(&intent, "sha256:[intent]")
    );
    let json = mesh.expect(&["status", "--output", "json"], 3);
    let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(parsed["nodes"][1]["node"], "home");
    assert_eq!(parsed["nodes"][1]["sent"], serde_json::Value::Null);
    assert_eq!(parsed["pending"][0]["node"], "home");
    assert_eq!(parsed["pending"][0]["command"], "push home");
    for node in [0, 2] {
        assert_eq!(
            parsed["nodes"][node]["intent"],
            parsed["nodes"][node]["sent"]
        );
    }
    assert_eq!(parsed["nodes"][2]["report"]["machine"], "converged");
}

#[test]
fn a_second_push_reports_every_resource_unchanged() {
    let mesh = Mesh::example();
    mesh.expect(&["push", "control", "laptop"], 0);
    let json = mesh.expect(&["push", "control", "laptop", "--output", "json"], 0);
    let results: serde_json::Value = serde_json::from_str(&json).unwrap();
    for node in results.as_array().unwrap() {
        let resources = node["report"]["resources"].as_object().unwrap();
        assert!(!resources.is_empty());
        for (id, outcome) in resources {
            assert_eq!(outcome["outcome"], "unchanged", "{id} in {node}");
        }
    }
}

#[test]
fn push_with_no_node_is_refused_unless_all() {
    // The rule “A push to every node is asked for by name”: a push names its machines or says
    // --all.
    let mesh = Mesh::example();
    let run = mesh.run(&["push"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("--all"), "{}", run.stderr);
    assert!(!mesh.home().join("sent").exists(), "nothing was sent");
}

#[test]
fn push_to_an_unknown_node_names_it_and_sends_nothing() {
    let mesh = Mesh::example();
    let run = mesh.run(&["push", "laptop", "nas"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("`nas` is not a node"), "{}", run.stderr);
    assert!(!mesh.home().join("sent").exists(), "nothing was sent");
}

#[test]
fn a_broken_catalogue_is_refused_with_every_problem_and_nothing_is_sent() {
    let mesh = Mesh::example();
    let modules = mesh.home().join("catalogue/modules");
    std::fs::remove_file(modules.join("base/files/motd")).unwrap();
    std::fs::write(
        modules.join("media/module.toml"),
        std::fs::read_to_string(modules.join("media/module.toml"))
            .unwrap()
            .replace("place = \"config\"", "place = \"cache\""),
    )
    .unwrap();
    let check = mesh.run(&["check"]);
    assert_eq!(check.code, 3, "problems found need a person");
    insta::assert_snapshot!("check_broken_catalogue", check.stdout);
    let run = mesh.run(&["push", "--all"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("4 problem(s); nothing was sent"),
        "{}",
        run.stderr
    );
    assert!(!mesh.home().join("sent").exists());
}

#[test]
fn two_modules_publishing_one_host_port_on_a_node_are_refused_at_check_naming_both() {
    // The example's media container publishes its port on 127.0.0.1.
    let mesh = Mesh::example();
    let port = mesh.media_port();
    let modules = mesh.home().join("catalogue/modules");
    std::fs::create_dir_all(modules.join("radio")).unwrap();
    std::fs::write(
        modules.join("radio/module.toml"),
        format!(
            "name = \"radio\"\n[containers.radio]\nimage = \"localhost/mesh-busybox:latest\"\n\
             ports = [\"127.0.0.1:{port}:80\"]\n"
        ),
    )
    .unwrap();
    let inventory = mesh.home().join("inventory.toml");
    std::fs::write(
        &inventory,
        std::fs::read_to_string(&inventory).unwrap().replace(
            "media = [\"home\"]",
            "media = [\"home\"]\nradio = [\"home\", \"laptop\"]",
        ),
    )
    .unwrap();
    let check = mesh.run(&["check"]);
    assert_eq!(check.code, 3, "{}", check.stdout);
    assert!(
        check.stdout.contains(&format!(
            "inventory.toml: `nodes.home`: `media/container/media` and `radio/container/radio` \
             both publish host port 127.0.0.1:{port}/tcp"
        )),
        "{}",
        check.stdout
    );
    assert!(check.stdout.contains("1 problem(s)"), "{}", check.stdout);
}

#[test]
fn init_refuses_an_existing_home() {
    let mesh = Mesh::example();
    let run = mesh.run(&["init", "--example"]);
    assert_eq!(run.code, 2, "refused: nothing changed");
    assert!(
        run.stderr.contains("already holds a mesh"),
        "{}",
        run.stderr
    );
}
