//! A merge's changed paths are read whole through real git (the incident behind “Changed paths name
//! their modules”: a merge of 59 files reached the controller with 50, the forge's page size, and a
//! module whose own files changed would have stayed unbuilt). `a_59_file_change_is_read_whole` in
//! mesh-plan is pure and cannot catch a reader that truncates; this runs the controller's reader
//! (`repos::changed_paths`, `git diff --name-only -z`) on a real 59-file commit.
//!
//! The controller's library is called in process (`support::in_process`).

use crate::support;
use serde_json::Value;
use support::{Mesh, Repo};

const INVENTORY: &str = r#"bus-node = "control"

[nodes.control]

[assignments]
alpha = ["control"]
zulu = ["control"]
untouched = ["control"]
"#;

fn module(name: &str) -> (String, String) {
    (
        format!("modules/{name}/module.toml"),
        format!(
            "name = \"{name}\"\n\n[files.f00]\nsource = \"files/f00\"\npath = \"/etc/{name}/f00\"\n"
        ),
    )
}

/// `plans show ID --output json`, in process.
fn plan(mesh: &Mesh, id: &str) -> Value {
    mesh.library().plan(id).unwrap()
}

/// `merge cat`, in process: it exits 0 (the plan did not stop).
fn merge(mesh: &Mesh) {
    let merged = mesh.library().merge("cat").unwrap();
    assert!(!merged.stopped, "{}{}", merged.lines, merged.json);
}

#[test]
fn a_59_file_merge_through_real_git_plans_the_module_of_its_59th_path() {
    let mesh = Mesh::example();
    std::fs::write(mesh.home().join("inventory.toml"), INVENTORY).unwrap();
    let repo = Repo::new();
    let mut files: Vec<(String, String)> = ["alpha", "zulu", "untouched"]
        .into_iter()
        .map(module)
        .collect();
    // `alpha` holds 58 files; `zulu` one, whose path git lists after all of them.
    files.extend((0..58).map(|i| (format!("modules/alpha/files/f{i:02}"), "one\n".to_owned())));
    files.push(("modules/zulu/files/f00".to_owned(), "one\n".to_owned()));
    files.push(("modules/untouched/files/f00".to_owned(), "one\n".to_owned()));
    let borrowed: Vec<(&str, &str)> = files.iter().map(|(p, t)| (&p[..], &t[..])).collect();
    repo.write(&borrowed);
    repo.commit("first");
    mesh.library().repo_add("cat", repo.path()).unwrap();
    merge(&mesh);

    // One commit changing 59 files: 58 of `alpha`, then the one of `zulu`.
    let mut changed: Vec<(String, String)> = (0..58)
        .map(|i| (format!("modules/alpha/files/f{i:02}"), "two\n".to_owned()))
        .collect();
    changed.push(("modules/zulu/files/f00".to_owned(), "two\n".to_owned()));
    let borrowed: Vec<(&str, &str)> = changed.iter().map(|(p, t)| (&p[..], &t[..])).collect();
    repo.write(&borrowed);
    repo.commit("59 files");
    let listed = repo.git(&["diff", "--name-only", "HEAD~1", "HEAD"]);
    assert_eq!(listed.lines().count(), 59, "the commit changes 59 files");
    assert_eq!(listed.lines().last(), Some("modules/zulu/files/f00"));
    // The controller's reader, called as the merge calls it.
    let read = mesh_controller::catalogue::changed_paths(repo.path(), "HEAD~1", "HEAD").unwrap();
    assert_eq!(read, listed.lines().collect::<Vec<_>>());

    merge(&mesh);
    let second = plan(&mesh, "plan-2");
    assert_eq!(second["changed-paths"], 59, "{second:#}");
    assert_eq!(
        second["plan"]["modules"],
        serde_json::json!(["alpha", "zulu"]),
        "{second:#}"
    );
    assert_eq!(second["shared-paths"], serde_json::json!([]));
    assert_eq!(
        std::fs::read_to_string(mesh.root("control").join("etc/zulu/f00")).unwrap(),
        "two\n",
        "the 59th path's module was built and rolled out"
    );
}
