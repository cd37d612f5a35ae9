//! A declaration's archived files reach the host inside their archive: fetched from a real store
//! (the OCI image layout store, and a real docker-registry), checked, cached, and applied; an
//! archive that cannot be had fails only the files read from it.

use mesh_apply::{ContainerRuntimeChoice, HostConfig};
use mesh_host::{apply_received, receive, ArchiveSource};
use mesh_model::build::ArchiveRef;
use mesh_model::declaration::{resource_id, ArchivedFile, Declaration, FileSpec, Resource, Spec};
use mesh_model::module::{EntryKind, ModuleTree};
use mesh_model::report::{Outcome, Report};
use mesh_store::archive::{archive_tree, Archive};
use mesh_store::open_store;
use mesh_store::store::{ArchiveStore, StoreSpec};
use mesh_test_support::pki::TestPki;
use mesh_test_support::registry::{Secured, TestRegistry};
use std::collections::BTreeMap;
use std::path::Path;

/// The store spec of `registry`'s default repository.
fn spec_of(registry: &TestRegistry) -> StoreSpec {
    registry.base_url().parse().unwrap()
}

/// A module tree holding `files/<name>` for each `(name, text)`.
fn module_archive(files: &[(&str, &str)]) -> Archive {
    let mut tree = ModuleTree::default();
    tree.entries.insert("files".into(), EntryKind::Directory);
    for (name, text) in files {
        tree.entries.insert(
            format!("files/{name}"),
            EntryKind::File {
                bytes: text.as_bytes().to_vec(),
                executable: false,
            },
        );
    }
    archive_tree(&tree).unwrap()
}

fn archived_file(module: &str, name: &str, text: &str) -> Resource {
    Resource {
        id: resource_id(module, "file", name),
        module: module.into(),
        together: None,
        after: Vec::new(),
        spec: Spec::File(FileSpec {
            path: format!("/etc/{module}/{name}"),
            content: None,
            source: Some(ArchivedFile {
                path: format!("files/{name}"),
                sha256: mesh_model::sha256_digest(text.as_bytes()),
            }),
            sealed: None,
            mode: 0o644,
            owner: "root".into(),
            group: "root".into(),
        }),
    }
}

fn inline_file(module: &str, name: &str, text: &str) -> Resource {
    Resource {
        id: resource_id(module, "file", name),
        module: module.into(),
        together: None,
        after: Vec::new(),
        spec: Spec::File(FileSpec::inline(
            format!("/etc/{module}/{name}"),
            text,
            0o644,
            "root",
            "root",
        )),
    }
}

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

async fn apply(config: &HostConfig, source: &ArchiveSource, declaration: &Declaration) -> Report {
    let received = receive(source, "n", &declaration.canonical_json(), 1000)
        .await
        .unwrap();
    apply_received(config, &received, 1000)
}

fn word(report: &Report, id: &str) -> &'static str {
    report.resources[id].word()
}

/// `web` comes from a build in the store; `extra` from a build that is not there; `local`
/// carries its content.
fn declaration(web: &ArchiveRef, extra: &ArchiveRef) -> Declaration {
    Declaration::with_archives(
        "n",
        vec![
            archived_file("web", "site.conf", "listen 80\n"),
            archived_file("web", "motd", "welcome\n"),
            archived_file("extra", "tool.conf", "tool = on\n"),
            inline_file("local", "note", "local note\n"),
        ],
        BTreeMap::from([
            ("web".to_owned(), web.clone()),
            ("extra".to_owned(), extra.clone()),
        ]),
    )
}

/// The whole story against one store: fetched and cached, applied from the cache when the
/// store no longer has it, a corrupt cache entry fetched again, a missing archive failing only
/// its own files.
async fn archived_files_reach_the_host(store: &dyn ArchiveStore, spec: &StoreSpec) {
    let web = module_archive(&[("site.conf", "listen 80\n"), ("motd", "welcome\n")]);
    let extra = module_archive(&[("tool.conf", "tool = on\n")]);
    store.put_blob(&web).await.unwrap();
    store.hold(&web.reference).await.unwrap();
    let declaration = declaration(&web.reference, &extra.reference);

    let dir = tempfile::tempdir().unwrap();
    let config = host(dir.path());
    let source = ArchiveSource::open(&config.state_dir, Some(spec)).unwrap();

    // First apply: `web` is fetched and kept; `extra` is not in the store.
    let report = apply(&config, &source, &declaration).await;
    assert_eq!(report.declaration, declaration.digest());
    assert_eq!(word(&report, "web/file/site.conf"), "applied");
    assert_eq!(word(&report, "web/file/motd"), "applied");
    assert_eq!(word(&report, "local/file/note"), "applied");
    let Outcome::Failed { reason, .. } = &report.resources["extra/file/tool.conf"] else {
        panic!("extra's file should fail: {report:#?}");
    };
    assert!(
        reason.contains(&extra.reference.digest) && reason.contains(&store.name()),
        "the reason names the archive and the store: {reason}"
    );
    assert_eq!(
        std::fs::read_to_string(config.root.join("etc/web/site.conf")).unwrap(),
        "listen 80\n"
    );
    assert!(
        !config.root.join("etc/extra").exists(),
        "nothing of extra is written"
    );
    let cached = source.cache_path(&web.reference.digest);
    assert_eq!(std::fs::read(&cached).unwrap(), web.bytes);

    // Second apply with the store no longer holding `web`: the cache serves it.
    let emptied = tempfile::tempdir().unwrap();
    let elsewhere = StoreSpec::Layout(emptied.path().join("oci"));
    let cache_only_store = ArchiveSource::open(&config.state_dir, Some(&elsewhere)).unwrap();
    let again = apply(&config, &cache_only_store, &declaration).await;
    assert_eq!(word(&again, "web/file/site.conf"), "unchanged");
    assert_eq!(word(&again, "web/file/motd"), "unchanged");
    assert_eq!(word(&again, "local/file/note"), "unchanged");

    // A corrupt cache entry is not used: it is fetched again from the store.
    std::fs::write(&cached, b"not the archive").unwrap();
    let refetched = apply(&config, &source, &declaration).await;
    assert_eq!(word(&refetched, "web/file/site.conf"), "unchanged");
    assert_eq!(std::fs::read(&cached).unwrap(), web.bytes);
}

#[tokio::test]
async fn archived_files_reach_the_host_from_an_oci_layout_store() {
    let dir = tempfile::tempdir().unwrap();
    let spec = StoreSpec::Layout(dir.path().join("oci"));
    let store = open_store(&spec).unwrap();
    archived_files_reach_the_host(store.as_ref(), &spec).await;
}

#[tokio::test]
async fn archived_files_reach_the_host_from_a_registry() {
    let registry = TestRegistry::start();
    let spec = spec_of(&registry);
    let store = open_store(&spec).unwrap();
    archived_files_reach_the_host(store.as_ref(), &spec).await;
}

#[tokio::test]
async fn an_archived_file_whose_bytes_are_not_its_digest_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let spec = StoreSpec::Layout(dir.path().join("oci"));
    let store = open_store(&spec).unwrap();
    let web = module_archive(&[("site.conf", "listen 80\n"), ("motd", "welcome\n")]);
    store.put_blob(&web).await.unwrap();
    let declaration = Declaration::with_archives(
        "n",
        vec![
            archived_file("web", "site.conf", "listen 8080\n"),
            archived_file("web", "motd", "welcome\n"),
        ],
        BTreeMap::from([("web".to_owned(), web.reference.clone())]),
    );
    let config = host(dir.path());
    let source = ArchiveSource::open(&config.state_dir, Some(&spec)).unwrap();
    let report = apply(&config, &source, &declaration).await;
    assert_eq!(word(&report, "web/file/motd"), "applied");
    let Outcome::Failed { reason, .. } = &report.resources["web/file/site.conf"] else {
        panic!("{report:#?}");
    };
    assert!(reason.contains("the declaration says sha256:"), "{reason}");
    assert!(!config.root.join("etc/web/site.conf").exists());
}

#[test]
fn a_host_that_reads_archives_from_its_cache_alone_says_what_it_lacks() {
    let dir = tempfile::tempdir().unwrap();
    let web = module_archive(&[("site.conf", "listen 80\n")]);
    let declaration = Declaration::with_archives(
        "n",
        vec![
            archived_file("web", "site.conf", "listen 80\n"),
            inline_file("local", "note", "hi\n"),
        ],
        BTreeMap::from([("web".to_owned(), web.reference.clone())]),
    );
    let config = host(dir.path());
    let report = mesh_host::handle_declaration(&config, "n", &declaration.canonical_json(), 1000);
    assert_eq!(report.declaration, declaration.digest());
    assert_eq!(word(&report, "local/file/note"), "applied");
    let Outcome::Failed { reason, .. } = &report.resources["web/file/site.conf"] else {
        panic!("{report:#?}");
    };
    assert!(reason.contains("no store"), "{reason}");
}

/// `mesh-host apply` against a registry serving TLS with htpasswd users: the host
/// fetches with its own credentials, verified against the fleet's CA; a credentials file
/// others may read is refused before anything is fetched, naming the file and not the
/// password.
#[tokio::test]
async fn the_host_fetches_from_a_secured_registry_with_its_own_credentials() {
    use std::os::unix::fs::PermissionsExt as _;
    let pki = TestPki::new("host");
    let registry = TestRegistry::start_secured(Secured {
        pki: &pki,
        users: &[("controller", "c-pass-4d1e"), ("host-n", "h-pass-77ab")],
    });
    let dir = tempfile::tempdir().unwrap();
    let credentials = |name: &str, line: &str, mode: u32| {
        let path = dir.path().join(name);
        std::fs::write(&path, line).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    };
    let controller = credentials("controller", "controller:c-pass-4d1e\n", 0o600);
    let host_credentials = credentials("host", "host-n:h-pass-77ab\n", 0o600);
    let store = mesh_store::open_store_with(
        &spec_of(&registry),
        &mesh_store::store::StoreAccess {
            ca_file: Some(pki.ca_file.clone()),
            credentials_file: Some(controller),
        },
    )
    .unwrap();
    let web = module_archive(&[("site.conf", "listen 80\n"), ("motd", "welcome\n")]);
    store.put_blob(&web).await.unwrap();
    store.hold(&web.reference).await.unwrap();
    let declaration = Declaration::with_archives(
        "n",
        vec![archived_file("web", "site.conf", "listen 80\n")],
        BTreeMap::from([("web".to_owned(), web.reference.clone())]),
    );
    let file = dir.path().join("declaration.json");
    std::fs::write(&file, declaration.canonical_json()).unwrap();
    let config = host(dir.path());
    let run = |credentials: &Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_mesh-host"))
            .arg("--root")
            .arg(&config.root)
            .arg("--state-dir")
            .arg(&config.state_dir)
            .arg("--store")
            .arg(spec_of(&registry).to_string())
            .arg("--store-ca")
            .arg(&pki.ca_file)
            .arg("--store-credentials")
            .arg(credentials)
            .arg("--containers")
            .arg("none")
            .arg("apply")
            .arg(&file)
            .output()
            .unwrap()
    };

    let open = credentials("open", "host-n:h-pass-77ab\n", 0o644);
    let refused = run(&open);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("readable by others"), "{stderr}");
    assert!(stderr.contains(&open.display().to_string()), "{stderr}");
    assert!(!stderr.contains("h-pass-77ab"), "{stderr}");
    assert!(!config.root.join("etc/web").exists(), "nothing applied");

    let applied = run(&host_credentials);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(config.root.join("etc/web/site.conf")).unwrap(),
        "listen 80\n"
    );
}
