//! Compose, tested on fixtures: every kind of resource from layered settings, and each
//! problem named.

use super::*;
use crate::fixture;
use mesh_model::declaration::{HealthCheck, DEFAULT_HEALTH_WITHIN_MS};

/// Composes `node` from a fixture and snapshots the declaration (or the error).
fn check(fixture_text: &str, node: &str) -> String {
    let (catalogue, inventory) = fixture::mesh(fixture_text);
    match compose(&catalogue, &inventory, node) {
        Ok(declaration) => format!(
            "digest: {}\n{}",
            declaration.digest(),
            serde_json::to_string_pretty(&declaration).unwrap()
        ),
        Err(error) => format!("error: {error}\n{error:#?}"),
    }
}

pub(crate) const MESH: &str = r#"
    //- modules/base/module.toml
    name = "base"
    [settings]
    greeting = "hello"
    [files.motd]
    source = "motd"
    path = "/etc/motd"
    template = true
    //- modules/base/motd
    {{ greeting }} from the mesh
    //- modules/media/module.toml
    name = "media"
    depends = ["base"]
    [settings]
    port = 8096
    user = "media"
    endpoints = { api = "http://localhost:8096", web = "http://localhost:80" }
    [places.config]
    default = "/srv/media/config"
    [places.previews]
    default = "/srv/media/previews"
    mode = "0750"
    owner = "{{ user }}"
    [files.config]
    source = "files/config.toml"
    path = "{{ places.config }}/config.toml"
    template = true
    [files.logo]
    source = "files/logo.txt"
    path = "/srv/media/logo.txt"
    [containers.server]
    image = "localhost/mesh-busybox:latest"
    command = ["httpd", "-f", "-p", "{{ port }}"]
    env = { API = "{{ endpoints.api }}" }
    mounts = [{ place = "config", at = "/config" }, { place = "previews", at = "/previews", read-only = true }]
    restart-on = ["config"]
    [memberships.video]
    account = "{{ user }}"
    group = "video"
    [together]
    serve = ["file/config", "container/server"]
    //- modules/media/files/config.toml
    port = {{ port }}
    api = "{{ endpoints.api }}"
    //- modules/media/files/logo.txt
    {{ not a template }}
    //- inventory.toml
    bus-node = "control"
    [nodes.control]
    [nodes.home]
    [assignments]
    base = ["control", "home"]
    media = ["home"]
    //- settings/base/mesh.json
    {"greeting": "hi"}
    //- settings/media/mesh.json
    {"port": 9000, "endpoints": {"web": "http://media.lan"}}
    //- settings/media/nodes/home.json
    {"places": {"previews": "/data/previews"}, "endpoints": {"api": "http://home:9000"}}
"#;

#[test]
fn a_required_setting_no_layer_sets_refuses_the_node_naming_module_and_key() {
    const DB: &str = r#"
        //- modules/db/module.toml
        name = "db"
        required = ["password", "user"]
        [settings]
        user = "app"
        password = ""
        [files.creds]
        source = "creds"
        path = "/etc/db/creds"
        mode = "0600"
        template = true
        //- modules/db/creds
        {{ user }}:{{ password }}
        //- inventory.toml
        bus-node = "a"
        [nodes.a]
        [nodes.b]
        [assignments]
        db = ["a", "b"]
        //- settings/db/mesh.json
        {"user": "app"}
        //- settings/db/nodes/b.json
        {"password": "set on b"}
    "#;
    let (catalogue, inventory) = fixture::mesh(DB);
    let unset = unset_required(&catalogue, &inventory, "a");
    assert_eq!(
        unset,
        [Unset {
            module: "db".into(),
            key: "password".into()
        }]
    );
    assert_eq!(unset[0].to_string(), "`password` of `db`");
    assert!(unset_required(&catalogue, &inventory, "b").is_empty());
    let refused = compose(&catalogue, &inventory, "a").unwrap_err();
    assert_eq!(
        refused.to_string(),
        "cannot compose `a`: module `db`: the setting `password` is required, and no layer \
         sets it here"
    );
    let b = compose(&catalogue, &inventory, "b").unwrap();
    assert!(
        serde_json::to_string(&b).unwrap().contains("app:set on b"),
        "{b:?}"
    );
}

#[test]
fn composes_every_kind_of_resource_from_layered_settings() {
    insta::assert_snapshot!(check(MESH, "home"));
}

#[test]
fn a_containers_settle_and_health_and_a_modules_drift_policy_reach_the_declaration() {
    // The rules “Drift is seen, and reported even when corrected” and “A container is applied
    // only when it runs”: what the host needs to judge a container and to treat drift.
    let mesh = MESH
        .replace(
            "restart-on = [\"config\"]",
            "restart-on = [\"config\"]\n        settle = \"500ms\"\n        \
             health = { command = [\"wget\", \"-q\", \"http://127.0.0.1:{{ port }}/\"] }",
        )
        .replace(
            "depends = [\"base\"]",
            "depends = [\"base\"]\n        drift = \"report\"",
        );
    let (catalogue, inventory) = fixture::mesh(&mesh);
    let home = compose(&catalogue, &inventory, "home").unwrap();
    let server = home.resource("media/container/server").unwrap();
    let Spec::Container(spec) = &server.spec else {
        panic!("not a container: {server:?}");
    };
    assert_eq!(spec.settle_ms, Some(500));
    assert_eq!(
        spec.health,
        Some(HealthCheck {
            command: vec!["wget".into(), "-q".into(), "http://127.0.0.1:9000/".into()],
            within_ms: DEFAULT_HEALTH_WITHIN_MS,
        })
    );
    assert_eq!(home.drift_policy("media"), DriftPolicy::Report);
    assert_eq!(home.drift_policy("base"), DriftPolicy::Correct);
    assert_eq!(
        home.drift.keys().collect::<Vec<_>>(),
        ["media"],
        "a correcting module is not named"
    );
    // Without them, the declaration's bytes are what they were.
    let (catalogue, inventory) = fixture::mesh(MESH);
    let plain = compose(&catalogue, &inventory, "home").unwrap();
    let json = String::from_utf8(plain.canonical_json()).unwrap();
    assert!(!json.contains("settle") && !json.contains("health") && !json.contains("drift"));
}

#[test]
fn a_nodes_drift_policy_overrides_its_modules() {
    // The rule “Drift is seen, and reported even when corrected”: `drift` on a module,
    // overridable per node in the inventory.
    let mesh = MESH
        .replace(
            "depends = [\"base\"]",
            "depends = [\"base\"]\n        drift = \"report\"",
        )
        .replace(
            "[nodes.home]",
            "[nodes.home]\n        drift = { media = \"correct\", base = \"report\" }",
        );
    let (catalogue, inventory) = fixture::mesh(&mesh);
    assert_eq!(inventory.validate(&catalogue), Vec::new());
    let home = compose(&catalogue, &inventory, "home").unwrap();
    assert_eq!(home.drift_policy("media"), DriftPolicy::Correct);
    assert_eq!(home.drift_policy("base"), DriftPolicy::Report);
    let control = compose(&catalogue, &inventory, "control").unwrap();
    assert_eq!(control.drift_policy("base"), DriftPolicy::Correct);
}

#[test]
fn a_drift_policy_for_a_module_a_node_does_not_run_is_refused_naming_node_and_module() {
    let mesh = MESH.replace(
        "[nodes.control]",
        "[nodes.control]\n        drift = { media = \"report\", nothing = \"report\" }",
    );
    let (catalogue, inventory) = fixture::mesh(&mesh);
    let said: Vec<String> = inventory
        .validate(&catalogue)
        .iter()
        .map(ToString::to_string)
        .collect();
    insta::assert_snapshot!(said.join("\n"));
}

#[test]
fn a_node_gets_only_its_modules() {
    insta::assert_snapshot!(check(MESH, "control"));
}

#[test]
fn same_inputs_give_the_same_bytes_and_digest() {
    let (catalogue, inventory) = fixture::mesh(MESH);
    let first = compose(&catalogue, &inventory, "home").unwrap();
    for _ in 0..5 {
        let (catalogue, inventory) = fixture::mesh(MESH);
        let again = compose(&catalogue, &inventory, "home").unwrap();
        assert_eq!(first.canonical_json(), again.canonical_json());
        assert_eq!(first.digest(), again.digest());
    }
}

#[test]
fn changing_one_setting_changes_only_the_resources_that_use_it() {
    let (catalogue, mut inventory) = fixture::mesh(MESH);
    let before = compose(&catalogue, &inventory, "home").unwrap();
    inventory.layers.set(
        "media",
        LayerScope::Mesh,
        serde_json::json!({"port": 9001, "endpoints": {"web": "http://media.lan"}}),
    );
    let after = compose(&catalogue, &inventory, "home").unwrap();
    let changed: Vec<&str> = after
        .resources
        .iter()
        .filter(|r| before.resource(&r.id) != Some(*r))
        .map(|r| r.id.as_str())
        .collect();
    assert_eq!(changed, ["media/container/server", "media/file/config"]);
    assert_ne!(before.digest(), after.digest());
}

#[test]
fn every_problem_names_node_module_and_key() {
    let broken = r#"
        //- modules/app/module.toml
        name = "app"
        [settings]
        port = 1
        [places.data]
        default = "/srv/app"
        [files.bin]
        source = "bin"
        path = "/opt/app/bin"
        [files.conf]
        source = "conf"
        path = "{{ port }}/conf"
        //- modules/app/bin
        placeholder, replaced with bytes below
        //- modules/app/conf
        x
        //- inventory.toml
        bus-node = "n1"
        [nodes.n1]
        [assignments]
        app = ["n1"]
        ghost = ["n1"]
        //- settings/app/nodes/n1.json
        {"places": {"data": 7}}
    "#;
    let (mut catalogue, inventory) = fixture::mesh(broken);
    let module = catalogue.modules.get_mut("app").unwrap();
    module.tree.entries.insert(
        "bin".into(),
        EntryKind::File {
            bytes: vec![0xff, 0xfe, 0x00],
            executable: true,
        },
    );
    let error = compose(&catalogue, &inventory, "n1").unwrap_err();
    insta::assert_snapshot!(format!("{error}\n{error:#?}"));
    assert_eq!(
        compose(&catalogue, &inventory, "nobody")
            .unwrap_err()
            .to_string(),
        "`nobody` is not a node of the mesh"
    );
}

#[test]
fn a_built_modules_plain_files_are_named_in_its_archive_not_carried() {
    let text = r#"
        //- modules/a/module.toml
        name = "a"
        [settings]
        who = "world"
        [files.note]
        source = "files/note"
        path = "/etc/a/note"
        [files.hello]
        source = "hello"
        path = "/etc/a/hello"
        template = true
        //- modules/a/files/note
        plain text
        //- modules/a/hello
        hello {{ who }}
        //- modules/b/module.toml
        name = "b"
        [files.plain]
        source = "plain"
        path = "/etc/b/plain"
        //- modules/b/plain
        b's own
        //- inventory.toml
        bus-node = "n"
        [nodes.n]
        [assignments]
        a = ["n"]
        b = ["n"]
    "#;
    let (mut catalogue, inventory) = fixture::mesh(text);
    let plain = compose(&catalogue, &inventory, "n").unwrap();
    assert_eq!(plain.format, mesh_model::declaration::DECLARATION_FORMAT);
    catalogue.modules.get_mut("a").unwrap().archive = Some(mesh_model::build::ArchiveRef {
        digest: mesh_model::sha256_digest(b"the archive of a"),
        size: 321,
    });
    let declaration = compose(&catalogue, &inventory, "n").unwrap();
    assert_eq!(
        declaration.format,
        mesh_model::declaration::DECLARATION_FORMAT_ARCHIVES
    );
    assert!(declaration.problems().is_empty());
    let back = Declaration::from_json(&declaration.canonical_json()).unwrap();
    assert_eq!(back, declaration);
    // `a`'s plain file names its place in the archive; its template and `b`'s file (no
    // build) carry their content.
    insta::assert_snapshot!(serde_json::to_string_pretty(&declaration).unwrap());
}

#[test]
fn a_directory_inside_another_comes_after_it() {
    let nested = r#"
        //- modules/a/module.toml
        name = "a"
        [places.root]
        default = "/srv/a"
        [directories.cache]
        path = "/srv/a/cache/deep"
        [files.note]
        source = "note"
        path = "/srv/a/cache/deep/note.txt"
        //- modules/a/note
        hi
        //- inventory.toml
        bus-node = "n"
        [nodes.n]
        [assignments]
        a = ["n"]
    "#;
    let (catalogue, inventory) = fixture::mesh(nested);
    let declaration = compose(&catalogue, &inventory, "n").unwrap();
    let edges: Vec<(&str, &[String])> = declaration
        .resources
        .iter()
        .map(|r| (r.id.as_str(), r.after.as_slice()))
        .collect();
    assert_eq!(
        edges,
        [
            ("a/directory/cache", &["a/directory/root".to_owned()][..]),
            ("a/directory/root", &[][..]),
            ("a/file/note", &["a/directory/cache".to_owned()][..]),
        ]
    );
}
