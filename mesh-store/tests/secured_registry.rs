//! A registry no one else can write to: the real docker-registry (Debian's CNCF
//! distribution 2.8) serving TLS only, with certificates made by the test, and htpasswd users
//! (bcrypt). Anonymous pushes and DELETEs are refused; the controller's credentials work; a
//! client trusting another CA is refused and says the certificate is not trusted; a
//! credentials file others can read is refused before anything is sent.

mod support;

use mesh_store::lock::PublishLock;
use mesh_store::manifest::holding_manifest_digest;
use mesh_store::open_store_with;
use mesh_store::store::{publish, ArchiveStore, Holding, StoreAccess, StoreError};
use mesh_test_support::pki::TestPki;
use mesh_test_support::registry::{Secured, TestRegistry};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use support::{archive, RegistryExt};

const CONTROLLER: (&str, &str) = ("controller", "controller-pass-7f3a");
const HOST: (&str, &str) = ("host", "host-pass-91bc");

/// A credentials file `USER:PASSWORD`, mode 0600.
fn credentials(dir: &Path, name: &str, (user, password): (&str, &str)) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("{user}:{password}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

fn store(
    registry: &TestRegistry,
    ca_file: Option<&Path>,
    credentials_file: Option<&Path>,
) -> Box<dyn ArchiveStore> {
    open_store_with(
        &registry.spec(),
        &StoreAccess {
            ca_file: ca_file.map(Path::to_owned),
            credentials_file: credentials_file.map(Path::to_owned),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn secured(pki: &TestPki) -> TestRegistry {
    TestRegistry::start_secured(Secured {
        pki,
        users: &[CONTROLLER, HOST],
    })
}

#[tokio::test]
async fn an_anonymous_push_or_manifest_delete_is_refused_and_the_controllers_credentials_work() {
    let pki = TestPki::new("store");
    let registry = secured(&pki);
    assert!(registry.base_url().starts_with("https://"));
    let files = tempfile::tempdir().unwrap();
    let controller_file = credentials(files.path(), "controller", CONTROLLER);
    let host_file = credentials(files.path(), "host", HOST);
    let controller = store(&registry, Some(&pki.ca_file), Some(&controller_file));
    let anonymous = store(&registry, Some(&pki.ca_file), None);

    // Anonymous: no blob, no holding manifest.
    let refused = archive("refused");
    let error = anonymous.put_blob(&refused).await.unwrap_err();
    assert!(
        matches!(error, StoreError::Refused { status: 401, .. }),
        "{error}"
    );
    assert!(
        error.to_string().contains("no credentials were given"),
        "{error}"
    );

    // The controller publishes; the host reads with its own credentials.
    let kept = archive("kept");
    let home = tempfile::tempdir().unwrap();
    {
        let lock = PublishLock::acquire(home.path()).await.unwrap();
        publish(&*controller, &lock, &kept).await.unwrap();
    }
    let host = store(&registry, Some(&pki.ca_file), Some(&host_file));
    assert_eq!(host.holding(&kept.reference).await.unwrap(), Holding::Held);
    assert_eq!(host.fetch(&kept.reference).await.unwrap().bytes, kept.bytes);
    assert!(host
        .list_held()
        .await
        .unwrap()
        .contains(&kept.reference.digest));

    // Anonymous cannot hold, read or let go.
    let error = anonymous.hold(&kept.reference).await.unwrap_err();
    assert!(matches!(error, StoreError::Refused { .. }), "{error}");
    let error = anonymous.release(&kept.reference.digest).await.unwrap_err();
    assert!(
        matches!(error, StoreError::Refused { status: 401, .. }),
        "{error}"
    );
    // The DELETE itself, sent as anyone on the path would.
    let url = format!(
        "{}/v2/mesh/archives/manifests/{}",
        registry.base_url(),
        holding_manifest_digest(&kept.reference)
    );
    let pem = std::fs::read(&pki.ca_file).unwrap();
    let raw = reqwest::Client::builder()
        .tls_certs_only(reqwest::Certificate::from_pem_bundle(&pem).unwrap())
        .build()
        .unwrap();
    assert_eq!(
        raw.delete(&url).send().await.unwrap().status().as_u16(),
        401
    );
    assert_eq!(
        controller.holding(&kept.reference).await.unwrap(),
        Holding::Held,
        "an anonymous DELETE changes nothing"
    );

    // Wrong credentials are refused, and the message names the file, never the password.
    let wrong_file = credentials(files.path(), "wrong", ("controller", "not-the-pass-5e1d"));
    let wrong = store(&registry, Some(&pki.ca_file), Some(&wrong_file));
    let error = wrong.release(&kept.reference.digest).await.unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, StoreError::Refused { .. }), "{message}");
    assert!(
        message.contains(&wrong_file.display().to_string()),
        "{message}"
    );
    assert!(!message.contains("not-the-pass-5e1d"), "{message}");

    // The controller lets go.
    assert_eq!(
        controller.release(&kept.reference.digest).await.unwrap(),
        mesh_store::store::Release::Removed
    );
    assert_eq!(
        controller.holding(&kept.reference).await.unwrap(),
        Holding::Unheld
    );
}

#[tokio::test]
async fn a_client_trusting_another_ca_is_refused_and_says_the_certificate_is_not_trusted() {
    let pki = TestPki::new("store");
    let other = TestPki::new("other");
    let registry = secured(&pki);
    let files = tempfile::tempdir().unwrap();
    let controller_file = credentials(files.path(), "controller", CONTROLLER);
    let kept = archive("kept");

    let elsewhere = store(&registry, Some(&other.ca_file), Some(&controller_file));
    let error = elsewhere.put_blob(&kept).await.unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, StoreError::Untrusted { .. }), "{message}");
    assert!(message.contains("certificate is not trusted"), "{message}");
    assert!(
        message.contains(&other.ca_file.display().to_string()),
        "{message}"
    );
    assert!(!message.contains(CONTROLLER.1), "{message}");

    // Trusting only the system's CAs is no better.
    let system = store(&registry, None, Some(&controller_file));
    let error = system.holding(&kept.reference).await.unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, StoreError::Untrusted { .. }), "{message}");
    assert!(message.contains("the system's CAs"), "{message}");

    // And nothing reached the registry.
    let trusted = store(&registry, Some(&pki.ca_file), Some(&controller_file));
    assert!(!trusted.has_blob(&kept.reference.digest).await.unwrap());
}

/// What opening a store with `access` is refused with.
fn refused_at_start(spec: &mesh_store::store::StoreSpec, access: &StoreAccess) -> String {
    match open_store_with(spec, access) {
        Ok(store) => panic!("{} opened", store.name()),
        Err(error) => error.to_string(),
    }
}

#[test]
fn a_credentials_file_others_can_read_is_refused_at_start() {
    let files = tempfile::tempdir().unwrap();
    let path = credentials(files.path(), "controller", CONTROLLER);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let spec = "https://127.0.0.1:1/mesh/archives".parse().unwrap();
    let access = StoreAccess {
        ca_file: None,
        credentials_file: Some(path.clone()),
    };
    let message = refused_at_start(&spec, &access);
    assert!(
        message.contains("readable by others (mode 0644)"),
        "{message}"
    );
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(!message.contains(CONTROLLER.1), "{message}");

    // A file that is not USER:PASSWORD says so, without what it holds.
    std::fs::write(&path, "just-a-secret-8d2c\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let message = refused_at_start(&spec, &access);
    assert!(message.contains("USER:PASSWORD"), "{message}");
    assert!(!message.contains("just-a-secret-8d2c"), "{message}");

    // A CA file that holds no certificate is refused too.
    let not_a_ca = files.path().join("ca.pem");
    std::fs::write(&not_a_ca, "hello").unwrap();
    let message = refused_at_start(
        &spec,
        &StoreAccess {
            ca_file: Some(not_a_ca),
            credentials_file: None,
        },
    );
    assert!(message.contains("holds no PEM certificate"), "{message}");
}

/// The book's CA recipe (`contrib/tls/mesh-certs`, with `openssl`) gives the registry a
/// certificate it serves with, and the controller and a host, trusting only the recipe's CA,
/// publish and fetch over it: from an empty directory to a TLS registry, as an operator does.
#[tokio::test]
async fn the_books_ca_recipe_serves_the_registry() {
    let pki = TestPki::from_recipe();
    let registry = secured(&pki);
    assert!(registry.base_url().starts_with("https://"));
    let files = tempfile::tempdir().unwrap();
    let controller_file = credentials(files.path(), "controller", CONTROLLER);
    let host_file = credentials(files.path(), "host", HOST);
    let controller = store(&registry, Some(&pki.ca_file), Some(&controller_file));
    let kept = archive("recipe");
    let home = tempfile::tempdir().unwrap();
    {
        let lock = PublishLock::acquire(home.path()).await.unwrap();
        publish(&*controller, &lock, &kept).await.unwrap();
    }
    let host = store(&registry, Some(&pki.ca_file), Some(&host_file));
    assert_eq!(host.fetch(&kept.reference).await.unwrap().bytes, kept.bytes);

    // A client trusting another run's CA (another fleet's) is refused.
    let other = TestPki::from_recipe();
    let stranger = store(&registry, Some(&other.ca_file), Some(&host_file));
    let error = stranger.fetch(&kept.reference).await.unwrap_err();
    assert!(error.to_string().contains("not trusted"), "{error}");
}
