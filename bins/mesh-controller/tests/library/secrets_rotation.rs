//! `secrets rotate` over git catalogues: a module's secret file committed in a registered
//! repository, merged and deployed, then the mesh key rotated. The deployed build keeps its
//! file sealed to the old key, so the old key is retired — kept beside the new one — and a
//! push that still sends that build converges with the same contents; the merge of the
//! rotation's commit deploys the file sealed to the new key, and drops the old key. And a file
//! encrypted while a rotation waits for a repository registered by URL is sealed so that the
//! rotation, finished, leaves it readable by the mesh and the operators. The embedded mesh,
//! real git.
//!
//! The library is called in process (`support::in_process`); the binary is run for a
//! rotation that commits (its commit takes its author from the process's environment, and
//! what it says of the retired key is read as a person reads it), and for one run of
//! `secrets encrypt`.

use crate::support;
use mesh_model::secret::SecretValue;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use support::{Mesh, Repo};

/// A value no fixture holds.
fn unique_value(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "-----BEGIN TOKEN-----\n{what}-{}-{nanos}\n",
        std::process::id()
    )
}

/// Who the rotation's commits are by.
const COMMITTER: [(&str, &str); 4] = [
    ("GIT_AUTHOR_NAME", "Operator"),
    ("GIT_AUTHOR_EMAIL", "operator@example.internal"),
    ("GIT_COMMITTER_NAME", "Operator"),
    ("GIT_COMMITTER_EMAIL", "operator@example.internal"),
];

/// `vault`'s definition: its secret files `token` (and `cert` when `with_cert`), on
/// `/etc/vault/`.
fn vault_toml(with_cert: bool) -> String {
    let mut text = "name = \"vault\"\n\n[files.token]\nsource = \"token\"\n\
                    path = \"/etc/vault/token\"\nmode = \"0600\"\nsecret = true\n"
        .to_owned();
    if with_cert {
        text.push_str(
            "\n[files.cert]\nsource = \"cert\"\npath = \"/etc/vault/cert\"\nmode = \"0600\"\n\
             secret = true\n",
        );
    }
    text
}

/// The example's home with `vault` assigned to `control`.
fn mesh_assigning_vault() -> Mesh {
    let mesh = Mesh::example();
    let inventory = mesh.home().join("inventory.toml");
    let text = std::fs::read_to_string(&inventory).unwrap();
    std::fs::write(
        &inventory,
        text.replace("[assignments]\n", "[assignments]\nvault = [\"control\"]\n"),
    )
    .unwrap();
    mesh
}

/// A repository holding `vault` with `token` in clear, then encrypted by the mesh and
/// committed.
fn vault_repo(mesh: &Mesh, token: &str) -> Repo {
    let repo = Repo::new();
    repo.write(&[
        ("modules/vault/module.toml", &vault_toml(false)),
        ("modules/vault/token", token),
    ]);
    let file = repo.path().join("modules/vault/token");
    mesh_controller::secrets::encrypt_file(mesh.library().home(), &file).unwrap();
    repo.commit("vault");
    repo
}

/// `merge cat`, in process: it exits 0 (its plan did not stop); what it said.
fn merge(mesh: &Mesh) -> String {
    let merged = mesh.library().merge("cat").unwrap();
    assert!(!merged.stopped, "{}{}", merged.lines, merged.json);
    merged.lines
}

fn sealed_at(path: &Path) -> SecretValue {
    SecretValue::from_file(&std::fs::read(path).unwrap()).unwrap()
}

fn mesh_key(mesh: &Mesh) -> mesh_secrets::MeshKey {
    mesh_secrets::MeshKey::load(&mesh.home().join("secrets/mesh.key")).unwrap()
}

#[test]
fn a_build_deployed_before_a_rotation_is_still_sent_with_the_retired_key_until_a_merge_drops_it() {
    let value = unique_value("deployed-before");
    let mesh = mesh_assigning_vault();
    let repo = vault_repo(&mesh, &value);
    let deployed_commit = repo.git(&["rev-parse", "HEAD"]);
    mesh.library().repo_add("cat", repo.path()).unwrap();
    merge(&mesh);
    let applied = mesh.root("control").join("etc/vault/token");
    assert_eq!(std::fs::read_to_string(&applied).unwrap(), value);
    let old = mesh_key(&mesh);

    // The rotation seals the repository's file to the new key and commits it; the deployed
    // build still holds it sealed to the old key, so the old key is retired, kept, and the
    // output says which build needs it and when it goes.
    let rotated = mesh.run_env(&["secrets", "rotate"], &COMMITTER);
    assert_eq!(rotated.code, 0, "{}{}", rotated.stdout, rotated.stderr);
    let new = mesh_key(&mesh);
    assert_ne!(new.recipient(), old.recipient());
    let retired = mesh
        .home()
        .join(format!("secrets/retired/{}.key", old.recipient()));
    assert!(
        rotated
            .stdout
            .contains("cat: 1 secret file(s) re-encrypted, committed")
            && rotated.stdout.contains(&format!(
                "the retired mesh key {} is kept (secrets/retired/{}.key)",
                old.recipient(),
                old.recipient()
            ))
            && rotated.stdout.contains(&format!(
                "the deployed build of `vault` (cat at {})",
                &deployed_commit[..12]
            ))
            && rotated.stdout.contains("merge the rotation's commit"),
        "{}",
        rotated.stdout
    );
    let mode = std::fs::metadata(&retired).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let in_repo = sealed_at(&repo.path().join("modules/vault/token"));
    assert_eq!(new.open(&in_repo).unwrap().as_slice(), value.as_bytes());
    assert!(old.open(&in_repo).is_err());
    assert_eq!(
        repo.git(&["show", "--name-only", "--format=", "HEAD"]),
        "modules/vault/token"
    );
    let deployed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(mesh.home().join("deployed/vault.json")).unwrap())
            .unwrap();
    assert_eq!(
        deployed["commit"],
        deployed_commit.as_str(),
        "not merged yet"
    );

    // A push still sends the deployed build: its file is opened with the retired key. Without
    // it, nothing opens the file and nothing is sent.
    std::fs::remove_file(&applied).unwrap();
    let aside = mesh.home().join("retired-key-aside");
    std::fs::rename(&retired, &aside).unwrap();
    let (pushed, said) = mesh.library().push_converged("control");
    assert!(!pushed, "{said}");
    assert!(
        said.contains("sealing the secret `files.token` of `vault`"),
        "{said}"
    );
    assert!(!applied.exists(), "nothing applied");
    std::fs::rename(&aside, &retired).unwrap();
    let (pushed, said) = mesh.library().push_converged("control");
    assert!(pushed, "{said}");
    assert_eq!(std::fs::read_to_string(&applied).unwrap(), value);

    // The merge of the rotation's commit deploys the file sealed to the new key: the old key
    // is dropped, said, and the file holds the same.
    let merged = merge(&mesh);
    assert!(
        merged.contains(&format!(
            "the retired mesh key {} is dropped: no build the mesh may still send needs it",
            old.recipient()
        )),
        "{merged}"
    );
    assert!(!retired.exists());
    let (pushed, said) = mesh.library().push_converged("control");
    assert!(pushed, "{said}");
    assert_eq!(std::fs::read_to_string(&applied).unwrap(), value);
}

#[test]
fn a_file_encrypted_while_a_rotation_waits_for_a_repository_is_readable_once_it_is_done() {
    let token = unique_value("during-token");
    let cert = unique_value("during-cert");
    let mesh = mesh_assigning_vault();
    let operator = mesh_secrets::Identity::generate();
    let recipient = operator.recipient().to_string();
    mesh_controller::secrets::change_recipients(mesh.library().home(), &recipient, true).unwrap();
    let upstream = vault_repo(&mesh, &token);
    let url = format!("file://{}", upstream.path().display());
    mesh.library()
        .repo_add_with(
            "cat",
            Path::new(&url),
            &mesh_controller::catalogue::AddOptions {
                branch: Some("main".to_owned()),
                modules_dir: "modules".to_owned(),
                ..Default::default()
            },
        )
        .unwrap();
    let old = mesh_key(&mesh);

    // Registered by URL, its head holds a file sealed to the old key: the rotation waits (it
    // exits 1 while a repository is not done). Neither it nor the rotation that finishes
    // commits: the home's catalogue is no git working tree, the repository no clone of ours.
    let library = mesh.library();
    let waiting = library.block_on(library.mesh().rotate_secrets()).unwrap();
    let said = serde_json::to_string(&waiting).unwrap();
    assert!(
        waiting
            .pending
            .iter()
            .any(|pending| pending.repository == "cat")
            && said.contains("modules/vault/token"),
        "{said}"
    );
    assert!(mesh.home().join("secrets/mesh.key.next").exists());

    // Meanwhile, in the repository: the token encrypted again, and a new file encrypted.
    let token_file = upstream.path().join("modules/vault/token");
    let cert_file = upstream.path().join("modules/vault/cert");
    upstream.write(&[
        ("modules/vault/module.toml", &vault_toml(true)),
        ("modules/vault/cert", &cert),
    ]);
    let again = mesh.expect(&["secrets", "encrypt", token_file.to_str().unwrap()], 0);
    assert!(again.contains("encrypted again"), "{again}");
    mesh_controller::secrets::encrypt_file(mesh.library().home(), &cert_file).unwrap();
    upstream.commit("vault's files encrypted during the rotation");

    // The rotation, run again, finds nothing sealed to the old key, and is done: what was
    // encrypted meanwhile opens with the new mesh key and the operator's key.
    let done = library.block_on(library.mesh().rotate_secrets()).unwrap();
    assert!(done.pending.is_empty(), "{done:?}");
    assert!(!mesh.home().join("secrets/mesh.key.next").exists());
    let new = mesh_key(&mesh);
    assert_ne!(new.recipient(), old.recipient());
    for (file, value) in [(&token_file, &token), (&cert_file, &cert)] {
        let sealed = sealed_at(file);
        assert_eq!(new.open(&sealed).unwrap().as_slice(), value.as_bytes());
        assert_eq!(operator.open(&sealed).unwrap().as_slice(), value.as_bytes());
        assert_eq!(sealed.digest, new.digest(value.as_bytes()));
    }
    // No build needed the old key: dropped at once.
    let said = mesh_controller::secrets::said(done.retired.as_ref().expect("it is done"));
    assert!(
        said.iter().any(|line| line.contains(&format!(
            "the retired mesh key {} is dropped",
            old.recipient()
        ))),
        "{said:#?}"
    );

    // Merged and sent: both files hold their values on the host.
    merge(&mesh);
    let root = mesh.root("control");
    assert_eq!(
        std::fs::read_to_string(root.join("etc/vault/token")).unwrap(),
        token
    );
    assert_eq!(
        std::fs::read_to_string(root.join("etc/vault/cert")).unwrap(),
        cert
    );
}
