//! Set before first use: a module an open plan adds is known before its first rollout, so its
//! settings — its secret above all — are set before the first send, and that send renders
//! them (never the default, an empty password). Real git, the embedded mesh.

use crate::support;
use support::in_process::MergeFlags;
use support::{Mesh, Repo};

/// `web` on two nodes; `db` to be added on `a` by the repository's next commit.
const INVENTORY: &str = r#"bus-node = "a"

[nodes.a]
[nodes.b]

[assignments]
web = ["a", "b"]
"#;

const WEB: &str = "name = \"web\"\n\n[settings]\nport = 8080\n\n[files.conf]\nsource = \
                   \"files/web.conf\"\npath = \"/etc/web.conf\"\ntemplate = true\n";

const DB: &str = "name = \"db\"\n\n[settings]\nuser = \"app\"\npassword = \"\"\n\n[files.creds]\n\
                  source = \"files/creds\"\npath = \"/etc/db/creds\"\nmode = \"0600\"\n\
                  template = true\n";

#[test]
fn a_secret_of_a_module_an_open_plan_adds_is_set_before_its_first_send_and_reaches_its_file() {
    let mesh = Mesh::example();
    std::fs::write(mesh.home().join("inventory.toml"), INVENTORY).unwrap();
    std::fs::remove_dir_all(mesh.home().join("settings")).unwrap();
    let repo = Repo::new();
    repo.write(&[
        ("modules/web/module.toml", WEB),
        ("modules/web/files/web.conf", "listen {{port}}\n"),
    ]);
    repo.commit("web");
    mesh.library().repo_add("cat", repo.path()).unwrap();
    let merged = mesh
        .library()
        .merge_with("cat", MergeFlags::default())
        .unwrap();
    assert!(!merged.stopped, "{}", merged.lines);

    // Before any plan adds it, `db` is no module of the mesh: refused, nothing set.
    let refused = mesh
        .library()
        .call(async |mesh| {
            mesh.settings_edit(
                &crate::support::layer("db", Some("a")),
                &mesh_controller::SettingsEdit::SetSecret {
                    key: "password",
                    value: b"s3cret-before",
                },
                mesh_store::clock::now(),
            )
            .await
        })
        .unwrap_err();
    assert!(
        refused.contains("`db` is not a module of the catalogue"),
        "{refused}"
    );

    // The next commit adds `db`, assigned to `a`; planned, not rolled out.
    repo.write(&[
        ("modules/db/module.toml", DB),
        ("modules/db/files/creds", "{{user}}:{{password}}\n"),
    ]);
    repo.commit("db");
    let inventory = format!("{INVENTORY}db = [\"a\"]\n");
    std::fs::write(mesh.home().join("inventory.toml"), inventory).unwrap();
    let planned = mesh
        .library()
        .merge_with(
            "cat",
            MergeFlags {
                plan_only: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(!planned.stopped, "{}", planned.lines);

    // Its secret is set now, checked against the plan that adds it, and waits for it.
    let secret = mesh
        .library()
        .call(async |mesh| {
            mesh.settings_edit(
                &crate::support::layer("db", Some("a")),
                &mesh_controller::SettingsEdit::SetSecret {
                    key: "password",
                    value: b"s3cret-first",
                },
                mesh_store::clock::now(),
            )
            .await
        })
        .unwrap();
    assert!(!secret.refused(), "{secret:?}");
    let waiting: String = secret.waiting.iter().map(|w| format!("{w}\n")).collect();
    assert!(
        secret
            .checked_against
            .as_deref()
            .is_some_and(|from| from.starts_with("plan-2 (at "))
            && waiting.starts_with("`db`, ")
            && waiting.contains(
                ": `password` waits for plan-2 (it adds the module: its first send takes the \
                 setting)"
            ),
        "{secret:?}"
    );
    // A key the new module does not accept is refused all the same, nothing changed.
    let refused = mesh
        .library()
        .settings_set("db", None, r#"{"pasword": "typo"}"#)
        .unwrap_err();
    assert!(
        refused.contains("accepts no setting `pasword`"),
        "{refused}"
    );
    let shown = mesh
        .library()
        .call(async |mesh| {
            mesh.settings_show(&crate::support::layer("db", Some("a")), false)
                .await
        })
        .unwrap();
    assert_eq!(shown.waiting.len(), 1, "{:?}", shown.waiting);
    let json = serde_json::to_value(&shown.waiting).unwrap();
    assert_eq!(json[0]["adds-module"], true, "{json:#}");

    // The layer of a module the nodes do not run yet is no problem of the mesh: it waits.
    let check = mesh.library().check().unwrap();
    assert!(
        !check.problems.iter().any(|p| p
            .to_string()
            .contains("settings for a module that is not in the catalogue")),
        "{:?}",
        check.problems
    );
    assert!(
        check
            .waiting
            .iter()
            .any(|w| w.module == "db" && w.key == "password"),
        "{:?}",
        check.waiting
    );

    // The first send renders it.
    let resumed = mesh.library().plans_resume(None).unwrap();
    assert!(!resumed.stopped, "{}", resumed.lines);
    assert_eq!(
        std::fs::read_to_string(mesh.root("a").join("etc/db/creds")).unwrap(),
        "app:s3cret-first\n"
    );
    let shown = mesh
        .library()
        .call(async |mesh| {
            mesh.settings_show(&crate::support::layer("db", Some("a")), false)
                .await
        })
        .unwrap();
    assert!(shown.waiting.is_empty(), "{:?}", shown.waiting);
}

/// `db` requiring its password; `b`'s layer sets it, `a`'s does not.
const DB_REQUIRED: &str =
    "name = \"db\"\nrequired = [\"password\"]\n\n[settings]\nuser = \"app\"\n\
                           password = \"\"\n\n[files.creds]\nsource = \"files/creds\"\npath = \
                           \"/etc/db/creds\"\nmode = \"0600\"\ntemplate = true\n";

#[test]
fn a_required_setting_unset_holds_the_first_send_to_its_node_until_a_layer_sets_it() {
    let mesh = Mesh::example();
    std::fs::write(mesh.home().join("inventory.toml"), INVENTORY).unwrap();
    std::fs::remove_dir_all(mesh.home().join("settings")).unwrap();
    let repo = Repo::new();
    repo.write(&[
        ("modules/web/module.toml", WEB),
        ("modules/web/files/web.conf", "listen {{port}}\n"),
    ]);
    repo.commit("web");
    mesh.library().repo_add("cat", repo.path()).unwrap();
    let merged = mesh
        .library()
        .merge_with("cat", MergeFlags::default())
        .unwrap();
    assert!(!merged.stopped, "{}", merged.lines);

    repo.write(&[
        ("modules/db/module.toml", DB_REQUIRED),
        ("modules/db/files/creds", "{{user}}:{{password}}\n"),
    ]);
    repo.commit("db, its password required");
    let inventory = format!("{INVENTORY}db = [\"a\", \"b\"]\n");
    std::fs::write(mesh.home().join("inventory.toml"), inventory).unwrap();
    let planned = mesh
        .library()
        .merge_with(
            "cat",
            MergeFlags {
                plan_only: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(!planned.stopped, "{}", planned.lines);
    mesh.library()
        .call(async |mesh| {
            mesh.settings_edit(
                &crate::support::layer("db", Some("b")),
                &mesh_controller::SettingsEdit::SetSecret {
                    key: "password",
                    value: b"b-secret",
                },
                mesh_store::clock::now(),
            )
            .await
        })
        .unwrap();

    // `check` names the key unset on `a`, and only there.
    let check = mesh.library().check().unwrap();
    let said: Vec<String> = check.problems.iter().map(ToString::to_string).collect();
    assert!(
        said.iter().any(|p| p.contains("nodes.a")
            && p.contains("module `db` (plan-2's version): the setting `password` is required")),
        "{said:#?}"
    );
    assert!(!said.iter().any(|p| p.contains("nodes.b")), "{said:#?}");

    // The rollout holds `a`, never sending it the placeholder, and goes on with `b`.
    let resumed = mesh.library().plans_resume(None).unwrap();
    assert!(!resumed.stopped, "{}", resumed.lines);
    assert!(
        resumed.lines.contains(
            "`db`: `a` held: `password` of `db` is required and no layer sets it; the others go on"
        ),
        "{}",
        resumed.lines
    );
    assert!(!mesh.root("a").join("etc/db/creds").exists());
    assert_eq!(
        std::fs::read_to_string(mesh.root("b").join("etc/db/creds")).unwrap(),
        "app:b-secret\n"
    );
    let status = mesh.library().status();
    assert_eq!(status.code, 3, "held needs a person: {}", status.document);
    let held = &status.json["held"][0];
    assert_eq!(held["node"], "a", "{:#}", status.json);
    assert_eq!(held["module"], "db", "{:#}", status.json);
    assert_eq!(held["unset"][0]["key"], "password", "{:#}", status.json);
    let waits = status.json["open-plans"][0]["waits-on"].as_str().unwrap();
    assert!(
        waits.contains("1 node(s) held, a setting required is set by no layer (`password` of `db`"),
        "{waits}"
    );
    // Set: the next drive sends it.
    mesh.library()
        .call(async |mesh| {
            mesh.settings_edit(
                &crate::support::layer("db", Some("a")),
                &mesh_controller::SettingsEdit::SetSecret {
                    key: "password",
                    value: b"a-secret",
                },
                mesh_store::clock::now(),
            )
            .await
        })
        .unwrap();
    let resumed = mesh.library().plans_resume(None).unwrap();
    assert!(!resumed.stopped, "{}", resumed.lines);
    assert_eq!(
        std::fs::read_to_string(mesh.root("a").join("etc/db/creds")).unwrap(),
        "app:a-secret\n"
    );
    let status = mesh.library().status();
    assert!(
        status.json["held"].as_array().unwrap().is_empty(),
        "{:#}",
        status.json
    );

    // Its layer cleared, a push of `a` is refused, naming node, module and key, and changes
    // nothing.
    mesh.library()
        .call(async |mesh| {
            mesh.settings_edit(
                &crate::support::layer("db", Some("a")),
                &mesh_controller::SettingsEdit::Clear,
                mesh_store::clock::now(),
            )
            .await
        })
        .unwrap();
    let Err(refused) = mesh.library().push(&["a"]) else {
        panic!("a push of `a` with its required setting unset is refused");
    };
    assert!(
        refused.contains(
            "cannot compose `a`: module `db`: the setting `password` is required, and no layer \
             sets it here"
        ),
        "{refused}"
    );
    assert_eq!(
        std::fs::read_to_string(mesh.root("a").join("etc/db/creds")).unwrap(),
        "app:a-secret\n"
    );
}
