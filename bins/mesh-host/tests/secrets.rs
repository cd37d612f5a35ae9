//! A template of secrets is rendered by its host alone, with its own age key: a file sealed to
//! another node's key, or corrupted, is a failed resource naming module and key, and nothing
//! of it is written (the rule “A secret is readable only where it is used”).

use mesh_apply::{ContainerRuntimeChoice, HostConfig};
use mesh_host::{apply_received, receive, ArchiveSource};
use mesh_model::declaration::{resource_id, Declaration, FileSpec, Resource, Spec};
use mesh_model::report::{Outcome, Report};
use mesh_model::secret::{SealedPiece, SecretValue};
use std::path::Path;

const VALUE: &str = "hunter2-of-node-a";

fn host(dir: &Path) -> HostConfig {
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    HostConfig {
        root,
        state_dir: dir.join("state"),
        containers: ContainerRuntimeChoice::Unsupported,
        ..HostConfig::default()
    }
}

/// A declaration for `n` holding `/etc/creds` = `app:<secret>` and a plain `/etc/motd`.
fn declaration(secret: SecretValue) -> Declaration {
    let sealed = Resource {
        id: resource_id("db", "file", "creds"),
        module: "db".into(),
        together: None,
        after: Vec::new(),
        spec: Spec::File(FileSpec {
            path: "/etc/creds".into(),
            content: None,
            source: None,
            sealed: Some(vec![
                SealedPiece::Text("app:".into()),
                SealedPiece::Secret {
                    key: "password".into(),
                    value: secret,
                },
                SealedPiece::Text("\n".into()),
            ]),
            mode: 0o600,
            owner: "root".into(),
            group: "root".into(),
        }),
    };
    let plain = Resource {
        id: resource_id("base", "file", "motd"),
        module: "base".into(),
        together: None,
        after: Vec::new(),
        spec: Spec::File(FileSpec::inline("/etc/motd", "hi\n", 0o644, "root", "root")),
    };
    Declaration::new("n", vec![sealed, plain])
}

async fn apply(config: &HostConfig, declaration: &Declaration) -> Report {
    let source = ArchiveSource::cache_only(&config.state_dir);
    let received = receive(&source, "n", &declaration.canonical_json(), 1000)
        .await
        .unwrap();
    apply_received(config, &received, 1000)
}

fn failure(report: &Report) -> String {
    match &report.resources["db/file/creds"] {
        Outcome::Failed { reason, .. } => reason.clone(),
        other => panic!("not failed: {other:?}"),
    }
}

#[tokio::test]
async fn a_host_renders_a_secret_sealed_to_its_own_key_and_no_other_host_can() {
    let mesh = mesh_secrets::MeshKey::generate();
    let sealed = mesh.seal(&[], VALUE.as_bytes()).unwrap();
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (host(a_dir.path()), host(b_dir.path()));
    let (a_key, made) = mesh_host::sealed::age_keygen(&a.state_dir).unwrap();
    assert!(made);
    assert_eq!(
        mesh_host::sealed::age_keygen(&a.state_dir).unwrap(),
        (a_key.clone(), false),
        "kept, never replaced"
    );
    mesh_host::sealed::age_keygen(&b.state_dir).unwrap();
    let to_a = declaration(mesh.reseal(&sealed, &a_key).unwrap());

    let report = apply(&a, &to_a).await;
    assert_eq!(report.resources["db/file/creds"].word(), "applied");
    let creds = a.root.join("etc/creds");
    assert_eq!(
        std::fs::read_to_string(&creds).unwrap(),
        format!("app:{VALUE}\n")
    );
    // Applied again: nothing to change.
    let again = apply(&a, &to_a).await;
    assert_eq!(again.resources["db/file/creds"].word(), "unchanged");

    // Node B, with its own key, cannot read what was sealed to A: failed, naming module and
    // key, and nothing of it written; the plain file is applied all the same.
    let report = apply(&b, &to_a).await;
    let reason = failure(&report);
    assert!(
        reason.contains("the secret `password` of `db` cannot be opened with this host's key"),
        "{reason}"
    );
    assert!(!reason.contains(VALUE));
    assert!(!b.root.join("etc/creds").exists());
    assert_eq!(report.resources["base/file/motd"].word(), "applied");
    let text = serde_json::to_string(&report).unwrap();
    assert!(!text.contains(VALUE), "{text}");
}

#[tokio::test]
async fn a_corrupted_secret_fails_its_file_and_leaves_what_is_there() {
    let mesh = mesh_secrets::MeshKey::generate();
    let dir = tempfile::tempdir().unwrap();
    let config = host(dir.path());
    let (key, _) = mesh_host::sealed::age_keygen(&config.state_dir).unwrap();
    let good = mesh
        .reseal(&mesh.seal(&[], VALUE.as_bytes()).unwrap(), &key)
        .unwrap();
    apply(&config, &declaration(good.clone())).await;
    let creds = config.root.join("etc/creds");
    let before = std::fs::read(&creds).unwrap();
    let mut corrupted = good;
    corrupted.ciphertext.replace_range(60..64, "AAAA");
    let report = apply(&config, &declaration(corrupted)).await;
    let reason = failure(&report);
    assert!(reason.contains("`password` of `db`"), "{reason}");
    assert_eq!(std::fs::read(&creds).unwrap(), before, "nothing changed");
}

#[tokio::test]
async fn a_host_without_an_age_key_says_how_to_make_one() {
    let mesh = mesh_secrets::MeshKey::generate();
    let dir = tempfile::tempdir().unwrap();
    let config = host(dir.path());
    let stranger = mesh_secrets::Identity::generate().recipient();
    let sealed = mesh
        .reseal(&mesh.seal(&[], b"x").unwrap(), &stranger)
        .unwrap();
    let report = apply(&config, &declaration(sealed)).await;
    let reason = failure(&report);
    assert!(
        reason.contains("the secret `password` of `db`") && reason.contains("mesh-host keygen"),
        "{reason}"
    );
    assert!(!config.root.join("etc/creds").exists());
}
