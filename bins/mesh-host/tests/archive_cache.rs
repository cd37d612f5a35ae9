//! The host's archive cache is pruned after every apply: it keeps what the declaration just
//! applied names and the three most recently used others, removes the rest, never touches what
//! it did not make, and never fails an apply (the cache grew forever before: every daily build
//! stayed on every host).

use mesh_apply::{ContainerRuntimeChoice, HostConfig};
use mesh_host::archives::{list_cache, KEEP_UNNAMED};
use mesh_host::{apply_received, receive, ArchiveSource};
use mesh_model::build::ArchiveRef;
use mesh_model::declaration::{resource_id, ArchivedFile, Declaration, FileSpec, Resource, Spec};
use mesh_model::module::{EntryKind, ModuleTree};
use mesh_model::report::{MachineState, Report};
use mesh_store::archive::{archive_tree, Archive};
use mesh_store::open_store;
use mesh_store::store::StoreSpec;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// A module archive holding `files/site.conf` with `text`.
fn module_archive(text: &str) -> Archive {
    let mut tree = ModuleTree::default();
    tree.entries.insert("files".into(), EntryKind::Directory);
    tree.entries.insert(
        "files/site.conf".into(),
        EntryKind::File {
            bytes: text.as_bytes().to_vec(),
            executable: false,
        },
    );
    archive_tree(&tree).unwrap()
}

/// A declaration naming, per `(module, text, archive)`, the archive and its one file.
fn declaration(modules: &[(&str, &str, &Archive)]) -> Declaration {
    let resources = modules
        .iter()
        .map(|(module, text, _)| Resource {
            id: resource_id(module, "file", "site.conf"),
            module: (*module).into(),
            together: None,
            after: Vec::new(),
            spec: Spec::File(FileSpec {
                path: format!("/etc/{module}/site.conf"),
                content: None,
                source: Some(ArchivedFile {
                    path: "files/site.conf".into(),
                    sha256: mesh_model::sha256_digest(text.as_bytes()),
                }),
                sealed: None,
                mode: 0o644,
                owner: "mesh".into(),
                group: "mesh".into(),
            }),
        })
        .collect();
    let archives: BTreeMap<String, ArchiveRef> = modules
        .iter()
        .map(|(module, _, archive)| ((*module).to_owned(), archive.reference.clone()))
        .collect();
    Declaration::with_archives("n", resources, archives)
}

/// A store (an OCI image layout in a temporary directory) holding one build of `web` per text.
struct Fixture {
    dir: tempfile::TempDir,
    spec: StoreSpec,
    config: HostConfig,
    builds: Vec<(String, Archive)>,
}

impl Fixture {
    async fn new(texts: &[&str]) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let spec = StoreSpec::Layout(dir.path().join("oci"));
        let store = open_store(&spec).unwrap();
        let mut builds = Vec::new();
        for text in texts {
            let archive = module_archive(text);
            store.put_blob(&archive).await.unwrap();
            store.hold(&archive.reference).await.unwrap();
            builds.push(((*text).to_owned(), archive));
        }
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        // Files are given to `mesh`: whoever runs the tests (so they also run as another user
        // than root, where a read-only cache is read-only).
        let (uid, gid) = {
            use std::os::unix::fs::MetadataExt as _;
            let probe = std::fs::metadata(dir.path()).unwrap();
            (probe.uid(), probe.gid())
        };
        std::fs::write(
            root.join("etc/passwd"),
            format!("mesh:x:{uid}:{gid}:mesh:/:/bin/sh\n"),
        )
        .unwrap();
        std::fs::write(root.join("etc/group"), format!("mesh:x:{gid}:\n")).unwrap();
        let config = HostConfig {
            root,
            state_dir: dir.path().join("state"),
            containers: ContainerRuntimeChoice::Unsupported,
            ..HostConfig::default()
        };
        Fixture {
            dir,
            spec,
            config,
            builds,
        }
    }

    fn cache(&self) -> PathBuf {
        self.config.state_dir.join("archives")
    }

    fn build(&self, i: usize) -> (&str, &Archive) {
        let (text, archive) = &self.builds[i];
        (text, archive)
    }

    /// The declaration naming build `i` of `web`.
    fn web(&self, i: usize) -> Declaration {
        let (text, archive) = self.build(i);
        declaration(&[("web", text, archive)])
    }

    /// Applies `declaration` as a host given the store does.
    async fn apply(&self, declaration: &Declaration) -> Report {
        self.apply_from(
            &ArchiveSource::open(&self.config.state_dir, Some(&self.spec)).unwrap(),
            declaration,
        )
        .await
    }

    async fn apply_from(&self, source: &ArchiveSource, declaration: &Declaration) -> Report {
        // Entries are ordered by when they were used; two applies never share an instant.
        std::thread::sleep(std::time::Duration::from_millis(5));
        let received = receive(source, "n", &declaration.canonical_json(), 1000)
            .await
            .unwrap();
        apply_received(&self.config, &received, 1000)
    }

    /// The digests the cache holds, most recently used first (as `mesh-host archives` lists them).
    fn cached(&self) -> Vec<String> {
        list_cache(&self.config.state_dir)
            .unwrap()
            .archives
            .into_iter()
            .map(|entry| entry.digest)
            .collect()
    }

    fn digest(&self, i: usize) -> String {
        self.builds[i].1.reference.digest.clone()
    }

    fn digests(&self, builds: &[usize]) -> Vec<String> {
        builds.iter().map(|&i| self.digest(i)).collect()
    }
}

fn assert_converged_without_notes(report: &Report) {
    assert_eq!(report.machine, MachineState::Converged, "{report:#?}");
    assert!(report.findings.is_empty(), "{report:#?}");
}

const TEXTS: [&str; 7] = [
    "build a\n",
    "build b\n",
    "build c\n",
    "build d\n",
    "build e\n",
    "tools e\n",
    "build f\n",
];
const A: usize = 0;
const B: usize = 1;
const C: usize = 2;
const D: usize = 3;
const E: usize = 4;
const TOOLS: usize = 5;
const F: usize = 6;

#[tokio::test]
async fn the_cache_keeps_what_the_declaration_names_and_the_three_most_recently_used_others() {
    assert_eq!(KEEP_UNNAMED, 3);
    let fixture = Fixture::new(&TEXTS).await;
    for (i, kept) in [
        (A, vec![A]),
        (B, vec![B, A]),
        (C, vec![C, B, A]),
        (D, vec![D, C, B, A]),
    ] {
        let report = fixture.apply(&fixture.web(i)).await;
        assert_converged_without_notes(&report);
        assert_eq!(fixture.cached(), fixture.digests(&kept), "after build {i}");
    }

    // The last declaration names two archives: both kept, with the three most recent others.
    let (e_text, e) = fixture.build(E);
    let (tools_text, tools) = fixture.build(TOOLS);
    let last = declaration(&[("web", e_text, e), ("tools", tools_text, tools)]);
    let report = fixture.apply(&last).await;
    assert_converged_without_notes(&report);
    let mut cached = fixture.cached();
    cached[..2].sort();
    let mut named = fixture.digests(&[E, TOOLS]);
    named.sort();
    assert_eq!(cached[..2], named[..]);
    assert_eq!(cached[2..], fixture.digests(&[D, C, B])[..], "A is removed");
    assert!(!fixture.cache().join(&fixture.digest(A)[7..]).exists());

    // What `mesh-host archives` lists: sizes, and which the last declaration names.
    let listing = list_cache(&fixture.config.state_dir).unwrap();
    assert_eq!(listing.last_applied.unwrap().declaration, last.digest());
    for entry in &listing.archives {
        let expected: Vec<String> = if entry.digest == fixture.digest(E) {
            vec!["web".into()]
        } else if entry.digest == fixture.digest(TOOLS) {
            vec!["tools".into()]
        } else {
            Vec::new()
        };
        assert_eq!(entry.named_by, expected, "{}", entry.digest);
        let build = fixture
            .builds
            .iter()
            .find(|(_, a)| a.reference.digest == entry.digest);
        assert_eq!(entry.size, build.unwrap().1.reference.size);
    }

    // A revert to B needs no fetch (the store given has nothing), and makes B the most
    // recently used: the next prune removes C, the least recently used, not B.
    let empty = tempfile::tempdir().unwrap();
    let no_store = ArchiveSource::open(
        &fixture.config.state_dir,
        Some(&StoreSpec::Layout(empty.path().join("oci"))),
    )
    .unwrap();
    let report = fixture.apply_from(&no_store, &fixture.web(B)).await;
    assert_converged_without_notes(&report);
    assert_eq!(
        std::fs::read_to_string(fixture.config.root.join("etc/web/site.conf")).unwrap(),
        "build b\n"
    );
    let report = fixture.apply(&fixture.web(A)).await;
    assert_converged_without_notes(&report);
    let cached = fixture.cached();
    assert_eq!(cached[0], fixture.digest(A));
    assert_eq!(cached[1], fixture.digest(B), "B was used last before A");
    assert_eq!(cached.len(), 1 + KEEP_UNNAMED, "{cached:?}");
    assert!(
        !cached.contains(&fixture.digest(C)),
        "C is removed: {cached:?}"
    );
}

#[tokio::test]
async fn pruning_leaves_unknown_files_directories_and_symbolic_links_alone() {
    let fixture = Fixture::new(&TEXTS).await;
    fixture.apply(&fixture.web(A)).await;
    let cache = fixture.cache();
    // Beside the host's entries: a file of another's, a directory and a partial file named
    // like entries, and links named like entries — one to an archive kept outside the cache,
    // one to the cache's own entry for A (which pruning is about to remove).
    let outside = fixture.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let kept_elsewhere = outside.join("archive");
    std::fs::write(&kept_elsewhere, &fixture.build(B).1.bytes).unwrap();
    std::fs::write(cache.join("README"), "the operator's note\n").unwrap();
    let hex = |c: char| std::iter::repeat_n(c, 64).collect::<String>();
    std::fs::create_dir(cache.join(hex('a'))).unwrap();
    std::fs::write(cache.join(format!("{}.partial", hex('b'))), "half").unwrap();
    std::os::unix::fs::symlink(&kept_elsewhere, cache.join(hex('c'))).unwrap();
    let a_entry = cache.join(&fixture.digest(A)[7..]);
    let a_copy = outside.join("a-copy");
    std::fs::copy(&a_entry, &a_copy).unwrap();
    std::os::unix::fs::symlink(&a_copy, cache.join(hex('d'))).unwrap();

    for i in [B, C, D, E, F] {
        let report = fixture.apply(&fixture.web(i)).await;
        assert_converged_without_notes(&report);
    }
    assert_eq!(
        fixture.cached(),
        fixture.digests(&[F, E, D, C]),
        "A and B are removed"
    );
    assert!(!a_entry.exists());
    assert_eq!(
        std::fs::read_to_string(cache.join("README")).unwrap(),
        "the operator's note\n"
    );
    assert!(cache.join(hex('a')).is_dir());
    assert!(cache.join(format!("{}.partial", hex('b'))).is_file());
    for (link, target) in [(hex('c'), &kept_elsewhere), (hex('d'), &a_copy)] {
        let metadata = std::fs::symlink_metadata(cache.join(&link)).unwrap();
        assert!(metadata.file_type().is_symlink(), "{link} is left a link");
        assert_eq!(std::fs::read_link(cache.join(&link)).unwrap(), *target);
        assert!(target.is_file(), "what {link} names is left alone");
    }
}

#[tokio::test]
async fn a_cache_that_is_not_a_directory_does_not_fail_the_apply_and_the_report_says_so() {
    let fixture = Fixture::new(&TEXTS).await;
    std::fs::create_dir_all(&fixture.config.state_dir).unwrap();
    std::fs::write(fixture.cache(), "not a directory").unwrap();
    let report = fixture.apply(&fixture.web(A)).await;
    assert_eq!(report.machine, MachineState::Converged, "{report:#?}");
    assert_eq!(
        std::fs::read_to_string(fixture.config.root.join("etc/web/site.conf")).unwrap(),
        "build a\n"
    );
    let [finding] = &report.findings[..] else {
        panic!("one note about the cache: {report:#?}");
    };
    assert_eq!(finding.resource, "");
    assert!(
        finding.message.contains("could not be pruned")
            && finding
                .message
                .contains(&fixture.cache().display().to_string()),
        "{}",
        finding.message
    );
    assert_eq!(
        std::fs::read_to_string(fixture.cache()).unwrap(),
        "not a directory"
    );
}

/// Makes a directory unwritable for anyone, root too, until dropped: the immutable attribute
/// (`chattr +i`, which needs root) or, for a user who cannot set it, mode 0555 (which binds
/// that user).
struct Unwritable(std::path::PathBuf);

impl Unwritable {
    fn new(dir: &std::path::Path) -> Unwritable {
        use std::os::unix::fs::PermissionsExt as _;
        let immutable = std::process::Command::new("chattr")
            .arg("+i")
            .arg(dir)
            .output()
            .is_ok_and(|out| out.status.success());
        if !immutable {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555)).unwrap();
        }
        let unwritable = Unwritable(dir.to_path_buf());
        assert!(
            std::fs::write(dir.join("probe"), "").is_err(),
            "{} is still writable (chattr +i did not take: install e2fsprogs)",
            dir.display()
        );
        unwritable
    }
}

impl Drop for Unwritable {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt as _;
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .output();
        let _ = std::fs::set_permissions(&self.0, std::fs::Permissions::from_mode(0o755));
    }
}

// This test returned early when run as root (as CI runs), since root could
// write the 0555 cache anyway; the cache is now unwritable for root too.
#[tokio::test]
async fn a_read_only_cache_does_not_fail_the_apply() {
    let fixture = Fixture::new(&TEXTS).await;
    for i in [A, B, C, D] {
        fixture.apply(&fixture.web(i)).await;
    }
    let cache = fixture.cache();
    let unwritable = Unwritable::new(&cache);
    let report = fixture.apply(&fixture.web(E)).await;
    let cache_now = fixture.cached();
    drop(unwritable);

    assert_eq!(report.machine, MachineState::Converged, "{report:#?}");
    assert_eq!(
        std::fs::read_to_string(fixture.config.root.join("etc/web/site.conf")).unwrap(),
        "build e\n"
    );
    assert_eq!(
        cache_now,
        fixture.digests(&[D, C, B, A]),
        "nothing removed, E not kept"
    );
    let [finding] = &report.findings[..] else {
        panic!("one note about the cache: {report:#?}");
    };
    assert!(
        finding.message.contains("cannot remove"),
        "{}",
        finding.message
    );
}

#[tokio::test]
async fn a_cache_directory_that_is_a_link_is_not_pruned_and_the_report_says_so() {
    let fixture = Fixture::new(&TEXTS).await;
    let elsewhere = fixture.dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::create_dir_all(&fixture.config.state_dir).unwrap();
    std::os::unix::fs::symlink(&elsewhere, fixture.cache()).unwrap();
    for i in [A, B, C, D] {
        fixture.apply(&fixture.web(i)).await;
    }
    let report = fixture.apply(&fixture.web(E)).await;
    assert_eq!(report.machine, MachineState::Converged, "{report:#?}");
    assert!(
        report.findings[0].message.contains("symbolic link"),
        "{report:#?}"
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 5);
}

/// `mesh-host apply FILE --store …` prunes too, and `mesh-host archives` lists the cache.
#[tokio::test]
async fn a_hand_run_apply_prunes_and_archives_lists_the_cache() {
    let fixture = Fixture::new(&TEXTS).await;
    for i in [A, B, C, D] {
        fixture.apply(&fixture.web(i)).await;
    }
    let file = fixture.dir.path().join("declaration.json");
    std::fs::write(&file, fixture.web(E).canonical_json()).unwrap();
    let Fixture { config, spec, .. } = &fixture;
    let StoreSpec::Layout(layout) = spec else {
        unreachable!()
    };
    let host = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_mesh-host"))
            .arg("--root")
            .arg(&config.root)
            .arg("--state-dir")
            .arg(&config.state_dir)
            .args(args)
            .output()
            .unwrap()
    };
    let store = format!("oci:{}", layout.display());
    let out = host(&["--store", &store, "apply", file.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(fixture.cached(), fixture.digests(&[E, D, C, B]));

    let out = host(&["archives", "--output", "json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let archives = listing["archives"].as_array().unwrap();
    assert_eq!(archives.len(), 4);
    assert_eq!(archives[0]["digest"], fixture.digest(E));
    assert_eq!(archives[0]["named-by"], serde_json::json!(["web"]));
    assert_eq!(archives[1]["named-by"], serde_json::json!([]));
    assert_eq!(archives[0]["size"], fixture.build(E).1.reference.size);
    assert_eq!(
        listing["last-applied"]["declaration"],
        fixture.web(E).digest()
    );

    let out = host(&["archives"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].ends_with("archives: 4 archive(s), ") || lines[0].contains("4 archive(s)"),
        "{text}"
    );
    assert!(
        lines[2].contains(&fixture.digest(E)) && lines[2].ends_with("named (web)"),
        "{text}"
    );
    assert!(
        lines[3].contains(&fixture.digest(D)) && lines[3].ends_with(" -"),
        "{text}"
    );
}

// The rule “Nothing fails silently”: a prune problem after an apply of a declaration with no
// resources was only logged, so `status` never showed it.
#[tokio::test]
async fn a_cache_that_cannot_be_pruned_is_noted_in_a_report_with_no_resources() {
    let fixture = Fixture::new(&TEXTS).await;
    std::fs::create_dir_all(&fixture.config.state_dir).unwrap();
    std::fs::write(fixture.cache(), "not a directory").unwrap();
    let empty = Declaration::new(fixture.web(A).node.clone(), Vec::new());
    let report = fixture.apply(&empty).await;
    assert_eq!(report.machine, MachineState::Converged, "{report:#?}");
    assert!(report.resources.is_empty(), "{report:#?}");
    let [finding] = &report.findings[..] else {
        panic!("one note about the cache: {report:#?}");
    };
    assert!(
        finding.message.contains("could not be pruned"),
        "{}",
        finding.message
    );
    // The rollout gate reads it as applied, not as a refused declaration.
    assert_eq!(
        mesh_plan::merge::module_report(&report, "web").verdict,
        mesh_plan::rollout::Verdict::Applied
    );
}
