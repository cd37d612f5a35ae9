//! A command says which catalogue it read: `check` reads the home's `catalogue/modules`
//! overlaid with the deployed builds (what the nodes run) and each registered repository's
//! head (what its next merge deploys), names each, and validates both. Real git, the embedded
//! mesh.
//!
//! The library is called in process (`support::in_process`); the binary is run for what it
//! says it read as a person reads it (`check` once a build is deployed) and for the streams
//! `plan` and `push` say it on (standard error, standard output keeping the declaration).

use crate::support;
use support::{Mesh, Repo};

/// `base` as the home's catalogue has it, from the repository's `modules/base`.
fn base_files(mesh: &Mesh) -> Vec<(String, String)> {
    let home = mesh.home().join("catalogue/modules/base");
    ["module.toml", "files/motd", "files/mesh.conf"]
        .iter()
        .map(|file| {
            (
                format!("modules/base/{file}"),
                std::fs::read_to_string(home.join(file)).unwrap(),
            )
        })
        .collect()
}

fn write(repo: &Repo, files: &[(String, String)]) {
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    repo.write(&files);
}

#[test]
fn check_names_a_module_broken_in_the_repositorys_head_that_is_sound_in_the_homes_copy() {
    let mesh = Mesh::example();
    let repo = Repo::new();
    let mut files = base_files(&mesh);
    // The head's `base` names a file it does not hold; the home's copy is sound.
    files[0].1 = files[0].1.replace("files/motd", "files/motd-missing");
    write(&repo, &files);
    repo.commit("base's motd from a file that is not there");
    mesh.library().repo_add("cat", repo.path()).unwrap();
    let head = repo.git(&["rev-parse", "HEAD"]);

    // `check` exits 1; it says it read the home's catalogue, then `cat`'s head and what its
    // next merge deploys, and each of the head's problems "in" it.
    let check = mesh.library().check().unwrap();
    assert!(!check.sound(), "{check:?}");
    assert_eq!(
        check.running.to_string(),
        "the home's catalogue/modules",
        "{check:?}"
    );
    assert_eq!(check.heads.len(), 1, "{check:?}");
    let cat = &check.heads[0];
    assert_eq!(cat.to_string(), format!("`cat` main at {}", &head[..12]));
    assert_eq!(cat.modules, ["base"], "{check:?}");
    let problems: Vec<String> = cat.problems.iter().map(ToString::to_string).collect();
    assert!(
        problems
            .iter()
            .any(|problem| problem.starts_with("modules/base") && problem.contains("motd-missing")),
        "{problems:#?}"
    );
    let json = serde_json::to_value(&check).unwrap();
    assert_eq!(json["running"]["home-catalogue"], "catalogue/modules");
    assert_eq!(json["heads"][0]["repository"], "cat");
    assert_eq!(json["heads"][0]["commit"], head.as_str());
    assert_eq!(
        json["problems"],
        serde_json::json!([]),
        "the home's copy is sound"
    );
    assert!(
        !json["heads"][0]["problems"].as_array().unwrap().is_empty(),
        "{json:#}"
    );

    // Mended at the head: sound; merged, the nodes run its build, and check says so.
    write(&repo, &base_files(&mesh));
    let mended = repo.commit("base mended");
    // "the catalogue and inventory are sound", and it exits 0.
    let check = mesh.library().check().unwrap();
    assert!(check.sound(), "{check:?}");
    let merged = mesh.library().merge("cat").unwrap();
    assert!(!merged.stopped, "{}{}", merged.lines, merged.json);
    let check = mesh.expect(&["check"], 0);
    assert!(
        check.starts_with(&format!(
            "read the home's catalogue/modules overlaid with the deployed builds of `base` (cat at {})\n",
            &mended[..12]
        )),
        "{check}"
    );
}

/// A repository registered by URL is fetched before `check` reads its head: a commit pushed
/// after the last merge is what `check` validates (what the next merge would deploy), and says
/// so; when the fetch fails, `check` says it read the commit last fetched, and why.
#[test]
fn check_fetches_a_repository_registered_by_url_before_reading_its_head() {
    let mesh = Mesh::example();
    let repo = Repo::new();
    write(&repo, &base_files(&mesh));
    let first = repo.commit("base");
    let url = format!("file://{}", repo.path().display());
    mesh.library()
        .repo_add_with(
            "cat",
            std::path::Path::new(&url),
            &mesh_controller::catalogue::AddOptions {
                branch: Some("main".to_owned()),
                modules_dir: "modules".to_owned(),
                ..Default::default()
            },
        )
        .unwrap();
    let check = mesh.library().check().unwrap();
    assert_eq!(check.heads[0].commit, first, "{check:?}");

    // A commit pushed since: `check` reads it, not the clone's last fetch, and names where
    // from.
    let mut files = base_files(&mesh);
    files[0].1 = files[0].1.replace("files/motd", "files/motd-missing");
    write(&repo, &files);
    let broken = repo.commit("base's motd from a file that is not there");
    let check = mesh.library().check().unwrap();
    let cat = &check.heads[0];
    assert_eq!(cat.commit, broken, "{check:?}");
    assert_eq!(
        cat.to_string(),
        format!("`cat` main at {} (fetched from {url})", &broken[..12])
    );
    assert!(!check.sound(), "the head fetched is broken: {check:?}");
    let json = serde_json::to_value(&check).unwrap();
    assert_eq!(json["heads"][0]["read"], "fetched", "{json:#}");
    assert_eq!(json["heads"][0]["url"], url.as_str(), "{json:#}");

    // The repository gone: `check` reads the commit last fetched and says the fetch failed.
    let moved = tempfile::tempdir().unwrap();
    std::fs::rename(repo.path(), moved.path().join("gone")).unwrap();
    let check = mesh.library().check().unwrap();
    std::fs::rename(moved.path().join("gone"), repo.path()).unwrap();
    let cat = &check.heads[0];
    assert_eq!(cat.commit, broken, "{check:?}");
    let said = cat.to_string();
    assert!(
        said.starts_with(&format!(
            "`cat` main at {} (the commit last fetched: fetching {url} failed: ",
            &broken[..12]
        )),
        "{said}"
    );
    let json = serde_json::to_value(&check).unwrap();
    assert_eq!(json["heads"][0]["read"], "last-fetched", "{json:#}");
    assert!(
        json["heads"][0]["why"]
            .as_str()
            .is_some_and(|why| !why.is_empty()),
        "{json:#}"
    );
}

/// `plan` and `push` compose from what the nodes run and say so: on standard error (standard
/// output keeps only the declaration, the diff or the reports), and under `read` in the JSON of
/// `plan --diff` — the home's catalogue, then each deployed build with its repository and
/// commit once a merge deployed one.
#[test]
fn plan_and_push_name_the_catalogue_they_read() {
    let mesh = Mesh::example();
    let plan = mesh.run(&["plan", "laptop"]);
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    assert_eq!(plan.stderr, "read the home's catalogue/modules\n");
    assert!(!plan.stdout.contains("read "), "{}", plan.stdout);

    let repo = Repo::new();
    write(&repo, &base_files(&mesh));
    repo.commit("base as the home has it");
    mesh.library().repo_add("cat", repo.path()).unwrap();
    let merged = mesh.library().merge("cat").unwrap();
    assert!(!merged.stopped, "{}{}", merged.lines, merged.json);
    let head = repo.git(&["rev-parse", "HEAD"]);
    let read = format!(
        "read the home's catalogue/modules overlaid with the deployed builds of `base` (cat at {})\n",
        &head[..12]
    );

    // `plan --diff` says it read the same (on standard error, as `plan` does), and prints
    // nothing for an unchanged node.
    assert_eq!(format!("read {}\n", mesh.library().read().unwrap()), read);
    let (json, empty) = mesh.library().plan_diff("laptop").unwrap();
    assert!(empty, "an unchanged node's diff is empty: {json:#}");
    assert_eq!(json["read"]["home-catalogue"], "catalogue/modules");
    assert_eq!(json["read"]["deployed"][0]["module"], "base");
    assert_eq!(json["read"]["deployed"][0]["repository"], "cat");
    assert_eq!(json["read"]["deployed"][0]["commit"], head.as_str());

    let push = mesh.run(&["push", "laptop"]);
    assert_eq!(push.code, 0, "{}", push.stderr);
    assert_eq!(push.stderr, read);
}
