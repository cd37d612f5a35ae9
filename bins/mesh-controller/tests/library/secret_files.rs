//! A module's secret file (`secret = true`): `secrets encrypt FILE` puts it in the catalogue
//! sealed before it is committed, `check` refuses one in clear or looser than 0640 naming
//! module and file, and only the host it is sent to writes its value. The embedded mesh, real
//! git.
//!
//! The library is called in process (`support::in_process`); the binary is run for the
//! rotation, whose commits take their author from the process's environment.

use crate::support;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use support::{git, Mesh};

/// A value no fixture holds, so a byte search finds only what this test put there.
fn unique_value() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "-----BEGIN TOKEN-----\nsecret-file-{}-{nanos}\n",
        std::process::id()
    )
}

/// Every file under `dir` whose bytes hold `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    Mesh::snapshot_tree(dir)
        .into_iter()
        .filter(|(_, bytes)| bytes.windows(needle.len()).any(|w| w == needle))
        .map(|(path, _)| path.display().to_string())
        .collect()
}

/// The example's home with a module `vault` on `control` whose file `token` is secret, and
/// its catalogue a git repository.
fn mesh_with_vault(mode: &str, token: &str) -> Mesh {
    let mesh = Mesh::example();
    let module = mesh.home().join("catalogue/modules/vault");
    std::fs::create_dir_all(&module).unwrap();
    std::fs::write(
        module.join("module.toml"),
        format!(
            "name = \"vault\"\n\n[files.token]\nsource = \"token\"\npath = \"/etc/vault/token\"\n\
             mode = \"{mode}\"\nsecret = true\n"
        ),
    )
    .unwrap();
    std::fs::write(module.join("token"), token).unwrap();
    let inventory = mesh.home().join("inventory.toml");
    let text = std::fs::read_to_string(&inventory).unwrap();
    std::fs::write(
        &inventory,
        text.replace("[assignments]\n", "[assignments]\nvault = [\"control\"]\n"),
    )
    .unwrap();
    git(
        &mesh.home().join("catalogue"),
        &["init", "-q", "-b", "main"],
    );
    mesh
}

/// `secrets encrypt FILE`, in process: what `--output json` prints, or the error as the binary
/// says it (it exits 1 then).
fn encrypt(mesh: &Mesh, file: &Path) -> Result<mesh_controller::secrets::Encrypted, String> {
    mesh_controller::secrets::encrypt_file(mesh.library().home(), file)
        .map_err(|e| support::in_process::said(&e))
}

/// The problems `check` prints, each as a line of its text (it exits 1 unless sound).
fn check(mesh: &Mesh) -> (bool, String) {
    let check = mesh.library().check().unwrap();
    let problems: String = check
        .problems
        .iter()
        .map(|problem| format!("{problem}\n"))
        .collect();
    (check.sound(), problems)
}

#[test]
fn a_secret_file_in_clear_is_refused_until_encrypted_and_then_only_its_host_writes_it() {
    let value = unique_value();
    let mesh = mesh_with_vault("0600", &value);
    let file = mesh.home().join("catalogue/modules/vault/token");

    // In clear: refused by name, never quoted, nothing composed.
    let (sound, problems) = check(&mesh);
    assert!(!sound, "{problems}");
    assert!(
        problems.contains("vault") && problems.contains("files.token.source"),
        "{problems}"
    );
    assert!(problems.contains("secrets encrypt token"), "{problems}");
    let plan = mesh.library().plan_node("control");
    let plan = match plan {
        Ok(declaration) => panic!("nothing is composed: {declaration}"),
        Err(error) => error,
    };
    for out in [&problems, &plan] {
        assert!(!out.contains("secret-file-"), "{out}");
    }

    // Encrypted in place: the file holds ciphertext the mesh key opens, and the digest.
    let encrypted = encrypt(&mesh, &file).unwrap();
    let sealed =
        mesh_model::secret::SecretValue::from_file(&std::fs::read(&file).unwrap()).unwrap();
    let key = mesh_secrets::MeshKey::load(&mesh.home().join("secrets/mesh.key")).unwrap();
    assert_eq!(key.open(&sealed).unwrap().as_slice(), value.as_bytes());
    assert_eq!(sealed.digest, key.digest(value.as_bytes()));
    // "encrypted <secret …>": encrypted, not again, shown by its digest.
    assert!(!encrypted.again, "{encrypted:?}");
    assert_eq!(
        encrypted.secret,
        format!("<secret {}>", sealed.digest),
        "{encrypted:?}"
    );
    let encrypted = serde_json::to_string(&encrypted).unwrap();
    assert!(!encrypted.contains("secret-file-"), "{encrypted}");
    let catalogue = mesh.home().join("catalogue");
    git(&catalogue, &["add", "-A"]);
    git(&catalogue, &["commit", "-q", "-m", "vault"]);

    // Encrypted again (to the keys of now): the same digest, another ciphertext.
    let again = encrypt(&mesh, &file).unwrap();
    assert!(again.again, "encrypted again: {again:?}");
    let resealed =
        mesh_model::secret::SecretValue::from_file(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(resealed.digest, sealed.digest);
    assert_ne!(resealed.ciphertext, sealed.ciphertext);
    git(&catalogue, &["commit", "-q", "-am", "vault again"]);

    let checked = mesh.library().check().unwrap();
    assert!(checked.sound(), "{checked:?}");
    let checked = serde_json::to_string(&checked).unwrap();
    assert!(!checked.contains("secret-file-"), "{checked}");
    let plan = mesh.library().plan_node("control").unwrap().to_string();
    assert!(
        plan.contains(&format!("<secret {}>", sealed.digest)),
        "{plan}"
    );
    let (pushed, said) = mesh.library().push_converged("control");
    assert!(pushed, "{said}");
    let applied = mesh.root("control").join("etc/vault/token");
    assert_eq!(std::fs::read_to_string(&applied).unwrap(), value);
    let mode = std::fs::metadata(&applied).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    // The applied file alone holds the value: not the catalogue, not its git history (its
    // objects read back whole, so compression hides nothing), not the records.
    assert_eq!(
        files_holding(mesh.home(), value.as_bytes()),
        vec![applied.display().to_string()]
    );
    let history = git(&catalogue, &["log", "-p", "--all", "--binary"]);
    assert!(history.contains("$secret"), "{history}");
    let objects = std::process::Command::new("git")
        .arg("-C")
        .arg(&catalogue)
        .args(["cat-file", "--batch-all-objects", "--batch"])
        .output()
        .unwrap();
    assert!(objects.status.success() && objects.stdout.len() > 1000);
    let needle = b"secret-file-";
    assert!(!history.contains("secret-file-"));
    assert!(!objects.stdout.windows(needle.len()).any(|w| w == needle));
}

#[test]
fn a_secret_file_looser_than_0640_is_refused_at_check_naming_module_and_file() {
    let mesh = mesh_with_vault("0644", &unique_value());
    let file = mesh.home().join("catalogue/modules/vault/token");
    encrypt(&mesh, &file).unwrap();
    let (sound, problems) = check(&mesh);
    assert!(!sound, "{problems}");
    assert!(
        problems.contains(
            "module `vault`: `files.token.mode`: the file uses a secret, so its mode must be \
             0640 or tighter, not 0644"
        ),
        "{problems}"
    );
    let (pushed, said) = mesh.library().push_converged("control");
    assert!(!pushed, "{said}");
    assert!(!mesh.root("control").join("etc/vault/token").exists());
}

#[test]
fn the_examples_tls_key_is_encrypted_by_init_and_written_by_its_host_alone() {
    let mesh = Mesh::example();
    let key_file = mesh.home().join("catalogue/modules/tls/files/key.pem");
    let text = std::fs::read(&key_file).unwrap();
    let sealed = mesh_model::secret::SecretValue::from_file(&text).expect("encrypted by init");
    let key = mesh_secrets::MeshKey::load(&mesh.home().join("secrets/mesh.key")).unwrap();
    let value = key.open(&sealed).unwrap().to_vec();
    assert!(value.starts_with(b"-----BEGIN PRIVATE KEY-----\n"));
    let (pushed, said) = mesh.library().push_converged("control");
    assert!(pushed, "{said}");
    let applied = mesh.root("control").join("etc/mesh/tls/server.key");
    assert_eq!(std::fs::read(&applied).unwrap(), value);
    // What was sent is recorded by the digest its host reports it by: "control (bus):
    // converged", its report of the last send.
    // `home` and `laptop` were never sent what they should run (exit 3); `control` is current.
    let status = mesh.library().status();
    assert_eq!(status.code, 3, "{:#}", status.json);
    let pending: Vec<&serde_json::Value> = status.json["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["node"])
        .collect();
    assert_eq!(pending, ["home", "laptop"], "{:#}", status.json);
    let control = status.json["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|node| node["node"] == "control")
        .unwrap_or_else(|| panic!("{:#}", status.json));
    assert_eq!(control["bus_node"], true, "{control:#}");
    assert_eq!(control["report"]["machine"], "converged", "{control:#}");
    assert_eq!(control["current"], true, "{control:#}");
    assert_eq!(
        files_holding(mesh.home(), &value),
        vec![applied.display().to_string()]
    );
    let empty = tempfile::NamedTempFile::new().unwrap();
    let refused = encrypt(&mesh, empty.path()).unwrap_err();
    assert!(refused.contains("is empty"), "{refused}");
}

#[test]
fn a_rotation_encrypts_the_catalogues_secret_files_again_and_commits_them_alone() {
    let value = unique_value();
    let mesh = mesh_with_vault("0600", &value);
    let catalogue = mesh.home().join("catalogue");
    let file = catalogue.join("modules/vault/token");
    encrypt(&mesh, &file).unwrap();
    git(&catalogue, &["add", "-A"]);
    git(&catalogue, &["commit", "-q", "-m", "vault"]);
    // Something else not committed: the rotation commits its files alone.
    std::fs::write(catalogue.join("notes"), "work in progress\n").unwrap();
    let old = mesh_secrets::MeshKey::load(&mesh.home().join("secrets/mesh.key")).unwrap();

    let identity = [
        ("GIT_AUTHOR_NAME", "Operator"),
        ("GIT_AUTHOR_EMAIL", "operator@example.internal"),
        ("GIT_COMMITTER_NAME", "Operator"),
        ("GIT_COMMITTER_EMAIL", "operator@example.internal"),
    ];
    let rotated = mesh.run_env(&["secrets", "rotate"], &identity);
    assert_eq!(rotated.code, 0, "{}{}", rotated.stdout, rotated.stderr);
    assert!(
        rotated
            .stdout
            .contains("catalogue: 2 secret file(s) re-encrypted, committed")
            && rotated.stdout.contains("modules/vault/token")
            && rotated.stdout.contains("modules/tls/files/key.pem"),
        "{}",
        rotated.stdout
    );
    let new = mesh_secrets::MeshKey::load(&mesh.home().join("secrets/mesh.key")).unwrap();
    assert_ne!(new.recipient(), old.recipient());
    let sealed =
        mesh_model::secret::SecretValue::from_file(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(new.open(&sealed).unwrap().as_slice(), value.as_bytes());
    assert!(old.open(&sealed).is_err(), "the old key opens nothing");
    // Committed, those files alone (the example's TLS key and the token); the other change
    // is left as it was.
    assert_eq!(
        git(&catalogue, &["show", "--name-only", "--format=", "HEAD"]),
        "modules/tls/files/key.pem\nmodules/vault/token"
    );
    assert_eq!(git(&catalogue, &["status", "--porcelain"]), "?? notes");
    assert!(files_holding(mesh.home(), value.as_bytes()).is_empty());
}
