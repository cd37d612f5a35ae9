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

/// Every file under `dir` whose bytes hold `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if std::fs::read(&path)
                .unwrap_or_default()
                .windows(needle.len())
                .any(|w| w == needle)
            {
                out.push(path);
            }
        }
    }
    out
}

#[tokio::test]
async fn drift_of_a_file_rendered_from_a_secret_is_said_without_its_content_and_never_kept() {
    let mesh = mesh_secrets::MeshKey::generate();
    let dir = tempfile::tempdir().unwrap();
    let config = host(dir.path());
    let (key, _) = mesh_host::sealed::age_keygen(&config.state_dir).unwrap();
    let secret = mesh
        .reseal(&mesh.seal(&[], VALUE.as_bytes()).unwrap(), &key)
        .unwrap();
    let digest = secret.digest.clone();
    let declaration = declaration(secret);
    let report = apply(&config, &declaration).await;
    assert_eq!(report.resources["db/file/creds"].word(), "applied");
    let creds = config.root.join("etc/creds");

    // Unchanged: no drift.
    let mut examiner = mesh_apply::drift::Examiner::open(&config.state_dir);
    let none = examiner.examine(
        &config,
        &declaration,
        &report,
        &mesh_apply::NoContainerRuntime,
        2000,
        true,
    );
    assert_eq!(none, Vec::new());

    // Changed by hand: said, by the secret's keyed digest, with neither what was there nor
    // what is there now, nor a digest of either.
    let edit = "app:typed-by-hand\n";
    std::fs::write(&creds, edit).unwrap();
    let drift = examiner.examine(
        &config,
        &declaration,
        &report,
        &mesh_apply::NoContainerRuntime,
        2001,
        true,
    );
    assert_eq!(drift.len(), 1, "{drift:?}");
    assert_eq!(drift[0].resource, "db/file/creds");
    assert_eq!(drift[0].field, "content");
    let said = serde_json::to_string(&drift).unwrap();
    assert!(said.contains(&format!("<secret {digest}>")), "{said}");
    assert!(said.contains("not shown"), "{said}");
    for hidden in [
        VALUE.to_owned(),
        "typed-by-hand".to_owned(),
        mesh_model::sha256_digest(format!("app:{VALUE}\n").as_bytes()),
        mesh_model::sha256_digest(edit.as_bytes()),
    ] {
        assert!(!said.contains(&hidden), "{said}");
    }

    // Put right at the next apply, and the hand edit kept nowhere: no filebucket.
    let report = apply(&config, &declaration).await;
    assert_eq!(report.resources["db/file/creds"].word(), "applied");
    assert_eq!(
        std::fs::read_to_string(&creds).unwrap(),
        format!("app:{VALUE}\n")
    );
    assert_eq!(
        files_holding(dir.path(), b"typed-by-hand"),
        Vec::<std::path::PathBuf>::new()
    );
    assert_eq!(files_holding(dir.path(), VALUE.as_bytes()), vec![creds]);
    let report_text = serde_json::to_string(&report).unwrap();
    assert!(!report_text.contains("typed-by-hand") && !report_text.contains(VALUE));
}

/// Receives and applies `declaration` at `now`: the report, and how many of its templates of
/// secrets were rendered (their secrets opened) for it.
async fn apply_counting(
    config: &HostConfig,
    declaration: &Declaration,
    now: u64,
) -> (Report, usize) {
    let source = ArchiveSource::cache_only(&config.state_dir);
    let received = receive(&source, "n", &declaration.canonical_json(), now)
        .await
        .unwrap();
    let report = apply_received(config, &received, now);
    (report, received.contents.templates_rendered())
}

fn word(report: &Report) -> &'static str {
    report.resources["db/file/creds"].word()
}

#[tokio::test]
async fn a_file_rendered_before_from_the_same_secrets_is_compared_without_opening_them() {
    let mesh = mesh_secrets::MeshKey::generate();
    let dir = tempfile::tempdir().unwrap();
    let config = host(dir.path());
    let (key, _) = mesh_host::sealed::age_keygen(&config.state_dir).unwrap();
    let sealed = mesh.seal(&[], VALUE.as_bytes()).unwrap();
    let to_host = declaration(mesh.reseal(&sealed, &key).unwrap());
    let creds = config.root.join("etc/creds");
    let real_now = mesh_store::clock::now();

    // Written: rendered once. Then, with no stamp kept (the file was written within the
    // stat cache's racy margin of `now`), compared by the digest of its bytes: not opened.
    let (report, rendered) = apply_counting(&config, &to_host, real_now).await;
    assert_eq!((word(&report), rendered), ("applied", 1));
    let (report, rendered) = apply_counting(&config, &to_host, real_now).await;
    assert_eq!((word(&report), rendered), ("unchanged", 0), "{report:?}");
    // Later, its stamp kept, then compared by its stamp: not opened either.
    for _ in 0..2 {
        let (report, rendered) = apply_counting(&config, &to_host, real_now + 10).await;
        assert_eq!((word(&report), rendered), ("unchanged", 0), "{report:?}");
    }

    // A hand edit of the same size: rendered again and put back.
    let edit = format!("app:{}\n", "x".repeat(VALUE.len()));
    std::fs::write(&creds, &edit).unwrap();
    let (report, rendered) = apply_counting(&config, &to_host, real_now + 20).await;
    assert_eq!((word(&report), rendered), ("applied", 1), "{report:?}");
    assert_eq!(
        std::fs::read_to_string(&creds).unwrap(),
        format!("app:{VALUE}\n")
    );
    let (report, rendered) = apply_counting(&config, &to_host, real_now + 30).await;
    assert_eq!((word(&report), rendered), ("unchanged", 0), "{report:?}");

    // The same value sealed again (another ciphertext, the same keyed digest): opened, and
    // the file found as it is.
    let resealed = declaration(mesh.reseal(&sealed, &key).unwrap());
    let (report, rendered) = apply_counting(&config, &resealed, real_now + 40).await;
    assert_eq!((word(&report), rendered), ("unchanged", 1), "{report:?}");

    // A changed secret: rendered, and written.
    let changed = declaration(
        mesh.reseal(&mesh.seal(&[], b"a-new-password").unwrap(), &key)
            .unwrap(),
    );
    let (report, rendered) = apply_counting(&config, &changed, real_now + 50).await;
    assert_eq!((word(&report), rendered), ("applied", 1), "{report:?}");
    assert_eq!(
        std::fs::read_to_string(&creds).unwrap(),
        "app:a-new-password\n"
    );
    // Sent back the declaration it had before: its secrets were rendered to other bytes
    // since, so opened again and written.
    let (report, rendered) = apply_counting(&config, &resealed, real_now + 60).await;
    assert_eq!((word(&report), rendered), ("applied", 1), "{report:?}");
    assert_eq!(
        std::fs::read_to_string(&creds).unwrap(),
        format!("app:{VALUE}\n")
    );

    // The host's key replaced (not enrolled again): what it was sent is not taken as known;
    // it is opened, cannot be, and fails naming module and key, the file left as it is.
    std::fs::remove_file(config.state_dir.join(mesh_host::sealed::AGE_KEY_FILE)).unwrap();
    mesh_host::sealed::age_keygen(&config.state_dir).unwrap();
    let (report, rendered) = apply_counting(&config, &resealed, real_now + 70).await;
    assert_eq!(rendered, 1);
    assert!(
        failure(&report).contains("`password` of `db`"),
        "{report:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&creds).unwrap(),
        format!("app:{VALUE}\n")
    );
}
