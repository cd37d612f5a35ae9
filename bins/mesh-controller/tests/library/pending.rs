//! Pending changes are seen: a node whose intent — what it should run now — differs from what
//! it was sent is *pending*, named by `status` with what differs and the command that sends it,
//! and `status` exits non-zero (3: nothing will send it) until it is sent. Each cause: a module
//! assigned and never sent, a setting set and not pushed, a node added and never sent, a
//! secrets rotation. The embedded mesh (the book's example without its container), in process.

use crate::support;
use serde_json::Value;
use support::Mesh;

/// The book's example without `media` (its container needs podman): every module files and
/// directories.
fn mesh() -> Mesh {
    let mesh = Mesh::example();
    edit_inventory(&mesh, |text| text.replace("media = [\"home\"]\n", ""));
    mesh
}

/// Rewrites the home's `inventory.toml` with `edit`.
fn edit_inventory(mesh: &Mesh, edit: impl FnOnce(&str) -> String) {
    let path = mesh.home().join("inventory.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let edited = edit(&text);
    assert_ne!(edited, text, "the edit changed the inventory");
    std::fs::write(&path, edited).unwrap();
}

/// Every node pushed; `status` then exits 0 with nothing pending.
fn push_all_settled(mesh: &Mesh) {
    let pushed = mesh.library().push_all().unwrap();
    assert_eq!(pushed.code(), 0, "{}\n{:#}", pushed.lines, pushed.json);
    settled(mesh);
}

/// `status` exits 0: nothing pending, every node's intent its sent digest.
#[track_caller]
fn settled(mesh: &Mesh) {
    let status = mesh.library().status();
    assert_eq!(status.code, 0, "{:#}", status.json);
    assert!(status.json.get("pending").is_none(), "{:#}", status.json);
    for node in status.json["nodes"].as_array().unwrap() {
        assert_eq!(node["intent"], node["sent"], "{node:#}");
    }
}

/// `status`'s pending node `node` (exit 3: nothing will send it), its differences by `why`.
#[track_caller]
fn pending(mesh: &Mesh, node: &str) -> Vec<Value> {
    let status = mesh.library().status();
    assert_eq!(status.code, 3, "{:#}", status.json);
    let pending = status.json["pending"]
        .as_array()
        .unwrap_or_else(|| panic!("no node is pending: {:#}", status.json));
    let found = pending
        .iter()
        .find(|p| p["node"] == node)
        .unwrap_or_else(|| panic!("`{node}` is not pending: {:#}", status.json));
    assert_eq!(found["command"], format!("push {node}"), "{found:#}");
    let listed = status.json["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == node)
        .unwrap();
    assert_eq!(found["intent"], listed["intent"], "{listed:#}");
    assert_ne!(listed["intent"], listed["sent"], "{listed:#}");
    found["differences"].as_array().unwrap().clone()
}

#[test]
fn a_setting_set_and_not_pushed_is_pending_until_the_node_is_pushed() {
    let mesh = mesh();
    push_all_settled(&mesh);
    let answer = mesh
        .library()
        .settings_set("base", Some("home"), r#"{"motd": "a new day"}"#)
        .unwrap();
    assert!(!answer.refused(), "{answer:?}");
    assert_eq!(
        pending(&mesh, "home"),
        [serde_json::json!({"why": "settings", "module": "base"})]
    );
    let pushed = mesh.library().push(&["home"]).unwrap();
    assert_eq!(pushed.code(), 0, "{}", pushed.lines);
    settled(&mesh);
}

#[test]
fn a_module_assigned_and_never_sent_is_pending_until_the_node_is_pushed() {
    let mesh = mesh();
    push_all_settled(&mesh);
    edit_inventory(&mesh, |text| {
        text.replace(
            "operator = [\"laptop\"]",
            "operator = [\"laptop\", \"home\"]",
        )
    });
    assert_eq!(
        pending(&mesh, "home"),
        [serde_json::json!({"why": "module-not-sent", "module": "operator"})]
    );
    let pushed = mesh.library().push(&["home"]).unwrap();
    assert_eq!(pushed.code(), 0, "{}", pushed.lines);
    settled(&mesh);
}

#[test]
fn a_node_added_and_never_sent_is_pending_until_it_is_pushed() {
    let mesh = mesh();
    push_all_settled(&mesh);
    edit_inventory(&mesh, |text| {
        text.replace("[nodes.laptop]\n", "[nodes.laptop]\n[nodes.spare]\n")
            .replace(
                "base = [\"control\", \"home\", \"laptop\"]",
                "base = [\"control\", \"home\", \"laptop\", \"spare\"]",
            )
    });
    assert_eq!(
        pending(&mesh, "spare"),
        [serde_json::json!({"why": "never-sent"})]
    );
    let pushed = mesh.library().push(&["spare"]).unwrap();
    assert_eq!(pushed.code(), 0, "{}", pushed.lines);
    settled(&mesh);
}

#[test]
fn a_secrets_rotation_makes_every_node_using_a_secret_pending_until_it_is_pushed() {
    let mesh = mesh();
    let answer = mesh
        .library()
        .call(async |mesh| {
            mesh.settings_edit(
                &crate::support::layer("base", Some("control")),
                &mesh_controller::SettingsEdit::SetSecret {
                    key: "admin-email",
                    value: b"root@control.internal",
                },
                mesh_store::clock::now(),
            )
            .await
        })
        .unwrap();
    assert!(!answer.refused(), "{answer:?}");
    push_all_settled(&mesh);
    let library = mesh.library();
    library.block_on(library.mesh().rotate_secrets()).unwrap();
    // `control`'s layer of `base` holds a secret; `tls`'s key file in the home's catalogue is a
    // secret of `control` and `home`: every one was sealed anew, under the newer key.
    assert_eq!(
        pending(&mesh, "control"),
        [
            serde_json::json!({"why": "secrets", "module": "base"}),
            serde_json::json!({"why": "secrets", "module": "tls"}),
        ]
    );
    assert_eq!(
        pending(&mesh, "home"),
        [serde_json::json!({"why": "secrets", "module": "tls"})]
    );
    let status = mesh.library().status();
    let pending_nodes: Vec<&Value> = status.json["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["node"])
        .collect();
    assert_eq!(
        pending_nodes,
        ["control", "home"],
        "not `laptop`, which uses none"
    );
    let pushed = mesh.library().push(&["control", "home"]).unwrap();
    assert_eq!(pushed.code(), 0, "{}", pushed.lines);
    settled(&mesh);
}

#[test]
fn intents_forgotten_by_a_path_that_changed_their_inputs_are_composed_again_by_status() {
    // A layer written straight to the records, as no command writes it: the fingerprint of
    // the intents' inputs tells status, which composes them again.
    let mesh = mesh();
    push_all_settled(&mesh);
    let home = mesh_controller::Home::new(mesh.home());
    let kept = home.intents().fingerprint().unwrap().expect("kept");
    home.put_json(
        "settings/base/nodes/laptop.json",
        &serde_json::json!({"motd": "written behind the mesh's back"}),
    )
    .unwrap();
    assert_ne!(
        mesh_controller::status::fingerprint(&home).unwrap(),
        kept.fingerprint
    );
    assert_eq!(
        pending(&mesh, "laptop"),
        [serde_json::json!({"why": "settings", "module": "base"})]
    );
}
