//! A secret is readable only where it is used: `settings set-secret` reads the value from
//! standard input and keeps ciphertext only, everything a person reads shows the keyed digest,
//! and `secrets recipients` and `secrets rotate` seal every secret at rest again. The embedded
//! mesh.
//!
//! The library is called in process (`support::in_process`); the binary is run for what a
//! person reads (`settings show` and `plan` in text, which must show a secret by its digest
//! alone) and for one run of `secrets recipients add`.

use crate::support;
use mesh_controller::Verdict;
use mesh_model::secret::SecretValue;
use mesh_plan::SettingsDecision;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use support::Mesh;

/// A value no fixture holds, so a byte search finds only what this test put there.
fn unique_value() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("hunter2-{}-{nanos}", std::process::id())
}

/// Every file under `dir` whose bytes hold `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    Mesh::snapshot_tree(dir)
        .into_iter()
        .filter(|(_, bytes)| bytes.windows(needle.len()).any(|w| w == needle))
        .map(|(path, _)| path.display().to_string())
        .collect()
}

/// The secret a node layer's `key` holds, as the record keeps it.
fn secret_in_layer(mesh: &Mesh, module: &str, node: &str, key: &str) -> SecretValue {
    let path = mesh
        .home()
        .join(format!("settings/{module}/nodes/{node}.json"));
    let layer: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    SecretValue::from_json(&layer[key])
        .expect("a secret")
        .expect("a well-formed secret")
}

fn mesh_key(mesh: &Mesh) -> mesh_secrets::MeshKey {
    mesh_secrets::MeshKey::load(&mesh.home().join("secrets/mesh.key")).unwrap()
}

/// `settings set-secret MODULE KEY --node NODE`, the value as read from standard input, in
/// process: the answer, or the error as the binary says it (it exits 1 then).
fn set_secret(
    mesh: &Mesh,
    module: &str,
    node: &str,
    key: &str,
    value: &[u8],
) -> Result<mesh_controller::settings::Answer, String> {
    mesh.library().call(async |mesh| {
        mesh.settings_edit(
            &crate::support::layer(module, Some(node)),
            &mesh_controller::SettingsEdit::SetSecret { key, value },
            mesh_store::clock::now(),
        )
        .await
    })
}

/// What `settings set-secret --output json` prints.
fn answered(answer: &mesh_controller::settings::Answer) -> String {
    serde_json::to_string(answer).unwrap()
}

#[test]
fn a_secret_set_from_standard_input_is_kept_and_shown_only_as_its_keyed_digest() {
    let mesh = Mesh::example();
    let value = unique_value();
    let run = set_secret(&mesh, "tls", "home", "host", value.as_bytes()).unwrap();
    let run = answered(&run);
    let secret = secret_in_layer(&mesh, "tls", "home", "host");
    let key = mesh_key(&mesh);
    assert_eq!(key.open(&secret).unwrap().as_slice(), value.as_bytes());
    assert_eq!(secret.digest, key.digest(value.as_bytes()));
    let shown = format!("<secret {}>", secret.digest);
    assert!(run.contains(&shown), "{run}");
    let mode = std::fs::metadata(mesh.home().join("secrets/mesh.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // The same value again: a new ciphertext, the same digest, nothing changed.
    let again = set_secret(&mesh, "tls", "home", "host", value.as_bytes()).unwrap();
    assert_eq!(
        again.change.decision,
        SettingsDecision::Unchanged,
        "{}",
        answered(&again)
    );

    // Another value: changed, shown as the two digests.
    let other = unique_value();
    let changed = set_secret(&mesh, "tls", "home", "host", other.as_bytes()).unwrap();
    let new_secret = secret_in_layer(&mesh, "tls", "home", "host");
    assert_ne!(new_secret.digest, secret.digest);
    let new_shown = format!("<secret {}>", new_secret.digest);
    assert!(
        changed
            .change
            .changed
            .iter()
            .any(|key| key.old == shown.as_str() && key.new == new_shown.as_str()),
        "{}",
        answered(&changed)
    );
    let changed = answered(&changed);

    // What a person reads: the layer, its history, in text and JSON.
    let mut read = String::new();
    for args in [
        &["settings", "show", "tls", "--node", "home"][..],
        &["settings", "show", "tls", "--node", "home", "--history"],
    ] {
        read.push_str(&mesh.expect(args, 0));
    }
    let json = mesh
        .library()
        .call(async |mesh| {
            mesh.settings_show(&crate::support::layer("tls", Some("home")), true)
                .await
        })
        .unwrap();
    read.push_str(&serde_json::to_string_pretty(&json).unwrap());
    read.push_str(&run);
    read.push_str(&changed);
    for needle in [&value, &other, &secret.ciphertext, &new_secret.ciphertext] {
        assert!(!read.contains(needle.as_str()), "{read}");
    }
    assert!(read.contains(&shown), "{read}");
    assert!(read.contains(&new_secret.digest), "{read}");

    // Nowhere in the home, the layer's history included.
    for needle in [&value, &other] {
        assert_eq!(
            files_holding(mesh.home(), needle.as_bytes()),
            Vec::<String>::new()
        );
    }
}

#[test]
fn a_mesh_key_others_may_read_is_refused_and_nothing_changes() {
    let mesh = Mesh::example();
    let set = |value: &[u8]| set_secret(&mesh, "tls", "home", "host", value);
    set(unique_value().as_bytes()).unwrap();
    let key_file = mesh.home().join("secrets/mesh.key");
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = Mesh::snapshot_tree(mesh.home());
    let refused = set(unique_value().as_bytes()).unwrap_err();
    assert!(
        refused.contains(&key_file.display().to_string()) && refused.contains("mode 0644"),
        "{refused}"
    );
    assert_eq!(Mesh::snapshot_tree(mesh.home()), before);
    // An empty value, or a key the module does not accept, changes nothing either.
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(set(b"").is_err());
    let run = set_secret(&mesh, "tls", "home", "nope", b"x").unwrap_err();
    assert!(run.contains("`nope`"), "{run}");
    assert_eq!(Mesh::snapshot_tree(mesh.home()), before);
}

#[test]
fn a_secret_longer_than_64_kib_is_refused_naming_module_and_key_and_nothing_changes() {
    let mesh = Mesh::example();
    let limit = mesh_controller::settings::SECRET_LIMIT;
    assert_eq!(limit, 64 * 1024);
    let before = Mesh::snapshot_tree(mesh.home());
    let refused = set_secret(&mesh, "tls", "home", "host", &vec![b'x'; limit + 1]).unwrap_err();
    assert!(
        refused.contains("tls, node home")
            && refused.contains("`host`")
            && refused.contains("at most 64 KiB")
            && refused.contains("nothing changed"),
        "{refused}"
    );
    assert_eq!(Mesh::snapshot_tree(mesh.home()), before);
    // One of exactly 64 KiB is kept.
    set_secret(&mesh, "tls", "home", "host", &vec![b'x'; limit]).unwrap();
    assert_ne!(Mesh::snapshot_tree(mesh.home()), before);
}

#[test]
fn an_operators_key_opens_every_secret_and_a_rotation_leaves_every_layer_readable() {
    let mesh = Mesh::example();
    let value = unique_value();
    set_secret(&mesh, "tls", "home", "host", value.as_bytes()).unwrap();
    // A second set keeps the first in the history.
    set_secret(&mesh, "tls", "home", "host", unique_value().as_bytes()).unwrap();
    let operator = mesh_secrets::Identity::generate();
    let operator_key = operator.recipient().to_string();
    let added = mesh.expect(&["secrets", "recipients", "add", &operator_key], 0);
    // The layer and the one history record holding a secret.
    assert!(added.contains("2 secret value(s)"), "{added}");
    let secret = secret_in_layer(&mesh, "tls", "home", "host");
    assert!(
        operator.open(&secret).is_ok(),
        "the operator's key opens it"
    );
    let refused =
        mesh_controller::secrets::change_recipients(mesh.library().home(), &operator_key, true);
    assert!(refused.is_err(), "{refused:?}");

    let old_key = mesh_key(&mesh);
    let plain = old_key.open(&secret).unwrap();
    let library = mesh.library();
    let rotated = library.block_on(library.mesh().rotate_secrets()).unwrap();
    assert!(rotated.pending.is_empty(), "{rotated:?}");
    assert_eq!(rotated.resealed, 2, "{rotated:?}");
    let new_key = mesh_key(&mesh);
    assert_ne!(new_key.recipient(), old_key.recipient());
    assert!(!mesh.home().join("secrets/mesh.key.next").exists());
    let after = secret_in_layer(&mesh, "tls", "home", "host");
    assert_eq!(new_key.open(&after).unwrap(), plain, "the same value");
    assert!(
        old_key.open(&after).is_err(),
        "the old key no longer opens it"
    );
    assert!(
        operator.open(&after).is_ok(),
        "nor is the operator left out"
    );
    assert_eq!(after.digest, new_key.digest(&plain));
    // Every history record too.
    let history = mesh.home().join("history/settings/tls");
    for (path, bytes) in Mesh::snapshot_tree(&history) {
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let record: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        for (key, secret) in mesh_model::secret::secrets_in(&record["layer"]) {
            assert!(
                new_key.open(&secret).is_ok(),
                "{} {key} still sealed to the old key",
                path.display()
            );
        }
    }
    let removed =
        mesh_controller::secrets::change_recipients(mesh.library().home(), &operator_key, false)
            .unwrap();
    assert_eq!(removed.recipients.len(), 0, "{removed:?}");
    let after = secret_in_layer(&mesh, "tls", "home", "host");
    assert!(operator.open(&after).is_err());
}

/// The example's home with a module `db` on `control` whose credentials file uses a secret.
fn mesh_with_db() -> Mesh {
    let mesh = Mesh::example();
    let module = mesh.home().join("catalogue/modules/db");
    std::fs::create_dir_all(&module).unwrap();
    std::fs::write(
        module.join("module.toml"),
        r#"name = "db"

[settings]
user = "app"
password = ""

[files.creds]
source = "creds"
path = "/etc/db/creds"
mode = "0600"
template = true
"#,
    )
    .unwrap();
    std::fs::write(module.join("creds"), "{{ user }}:{{ password }}\n").unwrap();
    let inventory = mesh.home().join("inventory.toml");
    let text = std::fs::read_to_string(&inventory).unwrap();
    std::fs::write(
        &inventory,
        text.replace("[assignments]\n", "[assignments]\ndb = [\"control\"]\n"),
    )
    .unwrap();
    mesh
}

#[test]
fn plan_and_its_diff_show_a_secret_by_its_digest_and_a_changed_one_as_changed() {
    let mesh = mesh_with_db();
    let set = |value: &str| {
        set_secret(&mesh, "db", "control", "password", value.as_bytes()).unwrap();
    };
    let push = || {
        let push = mesh.library().push(&["control"]).unwrap();
        assert_eq!(
            push.verdict,
            Verdict::Converged,
            "{}{}",
            push.lines,
            push.json
        );
    };
    let value = unique_value();
    set(&value);
    let secret = secret_in_layer(&mesh, "db", "control", "password");
    let shown = format!("<secret {}>", secret.digest);
    let plan = mesh.expect(&["plan", "control"], 0);
    let plan_json = mesh.library().plan_node("control").unwrap().to_string();
    for out in [&plan, &plan_json] {
        assert!(out.contains(&shown), "{out}");
        assert!(!out.contains(&value), "{out}");
        assert!(!out.contains(&secret.ciphertext), "{out}");
    }

    // Sent: sealed again to the embedded host's own key, rendered by it alone.
    push();
    let applied = mesh.root("control").join("etc/db/creds");
    assert_eq!(
        std::fs::read_to_string(&applied).unwrap(),
        format!("app:{value}\n")
    );
    let mode = std::fs::metadata(&applied).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(
        files_holding(mesh.home(), value.as_bytes()),
        vec![applied.display().to_string()],
        "the applied file alone holds the value"
    );
    let (unchanged, _) = mesh.library().plan_diff("control").unwrap();
    let unchanged = unchanged.to_string();
    assert!(!unchanged.contains("db/file/creds"), "{unchanged}");

    let other = unique_value();
    set(&other);
    let changed = secret_in_layer(&mesh, "db", "control", "password");
    let (diff, _) = mesh.library().plan_diff("control").unwrap();
    // "~ db/file/creds": a resource changed.
    assert!(
        diff["changed"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["id"] == "db/file/creds"),
        "{diff:#}"
    );
    let diff = diff.to_string();
    assert!(diff.contains(&shown), "{diff}");
    assert!(
        diff.contains(&format!("<secret {}>", changed.digest)),
        "{diff}"
    );
    assert!(
        !diff.contains(&other) && !diff.contains(&changed.ciphertext),
        "{diff}"
    );
    push();
    assert_eq!(
        std::fs::read_to_string(&applied).unwrap(),
        format!("app:{other}\n")
    );
    // The old value is nowhere: not kept aside as a hand edit, not in the state directory.
    assert_eq!(
        files_holding(mesh.home(), value.as_bytes()),
        Vec::<String>::new()
    );
    assert_eq!(
        files_holding(mesh.home(), other.as_bytes()),
        vec![applied.display().to_string()]
    );
}

#[test]
fn a_file_rendered_from_a_secret_looser_than_0640_is_refused_at_check() {
    let mesh = Mesh::example();
    set_secret(&mesh, "tls", "control", "host", unique_value().as_bytes()).unwrap();
    let check = mesh.library().check().unwrap();
    // `check` exits 1 and prints each problem.
    assert!(!check.sound(), "{check:?}");
    let problems: Vec<String> = check.problems.iter().map(ToString::to_string).collect();
    assert!(
        problems.iter().any(|problem| problem.contains(
            "module `tls`: `files.cert.mode`: the file uses a secret, so its mode must be 0640 \
             or tighter, not 0644"
        )),
        "{problems:#?}"
    );
}
