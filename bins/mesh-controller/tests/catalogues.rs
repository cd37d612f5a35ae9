//! A command says which catalogue it read: `check` reads the home's `catalogue/modules`
//! overlaid with the deployed builds (what the nodes run) and each registered repository's
//! head (what its next merge deploys), names each, and validates both. Real git, the embedded
//! mesh.

mod support;

use serde_json::Value;
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
    mesh.expect(&["repo", "add", "cat", repo.path().to_str().unwrap()], 0);
    let head = repo.git(&["rev-parse", "HEAD"]);

    let check = mesh.run(&["check"]);
    assert_eq!(check.code, 1, "{}", check.stdout);
    let lines: Vec<&str> = check.stdout.lines().collect();
    assert_eq!(
        lines[0], "read the home's catalogue/modules",
        "{}",
        check.stdout
    );
    assert_eq!(
        lines[1],
        format!(
            "read `cat` main at {}, what its next merge deploys (base)",
            &head[..12]
        )
    );
    assert!(
        check
            .stdout
            .contains(&format!("in `cat` main at {}: modules/base", &head[..12]))
            && check.stdout.contains("motd-missing"),
        "{}",
        check.stdout
    );
    let json: Value =
        serde_json::from_str(&mesh.expect(&["check", "--output", "json"], 1)).unwrap();
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
    let check = mesh.expect(&["check"], 0);
    assert!(
        check.ends_with("the catalogue and inventory are sound\n"),
        "{check}"
    );
    mesh.expect(&["merge", "cat"], 0);
    let check = mesh.expect(&["check"], 0);
    assert!(
        check.starts_with(&format!(
            "read the home's catalogue/modules overlaid with the deployed builds of `base` (cat at {})\n",
            &mended[..12]
        )),
        "{check}"
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
    mesh.expect(&["repo", "add", "cat", repo.path().to_str().unwrap()], 0);
    mesh.expect(&["merge", "cat"], 0);
    let head = repo.git(&["rev-parse", "HEAD"]);
    let read = format!(
        "read the home's catalogue/modules overlaid with the deployed builds of `base` (cat at {})\n",
        &head[..12]
    );

    let diff = mesh.run(&["plan", "laptop", "--diff"]);
    assert_eq!(diff.code, 0, "{}", diff.stderr);
    assert_eq!(diff.stderr, read);
    assert_eq!(diff.stdout, "", "an unchanged node's diff is empty");
    let json: Value =
        serde_json::from_str(&mesh.expect(&["plan", "laptop", "--diff", "--output", "json"], 0))
            .unwrap();
    assert_eq!(json["read"]["home-catalogue"], "catalogue/modules");
    assert_eq!(json["read"]["deployed"][0]["module"], "base");
    assert_eq!(json["read"]["deployed"][0]["repository"], "cat");
    assert_eq!(json["read"]["deployed"][0]["commit"], head.as_str());

    let push = mesh.run(&["push", "laptop"]);
    assert_eq!(push.code, 0, "{}", push.stderr);
    assert_eq!(push.stderr, read);
}
