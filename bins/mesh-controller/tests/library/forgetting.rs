//! A forgotten module keeps nothing (the rules “What the mesh keeps, for a reason” and “An archive
//! is published with a manifest that holds it”): nothing but tests ever called `forget_module`, so
//! a module whose directory a merge deleted kept its five most recent builds in the store forever.
//! The merge forgets it, says so in its answer and its plan, and the next sweep of the real
//! collector lets its archives go — on the OCI layout store and on a real registry.
//!
//! The controller's library is called in process on the store given (`support::in_process`);
//! the collector is its own binary, run as a person runs it.

use crate::support;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use support::{Mesh, Registry, Repo};

const INVENTORY: &str = r#"bus-node = "control"

[nodes.control]
[nodes.home]
[nodes.laptop]

[assignments]
site = ["control"]
"#;

/// `target/<profile>/mesh-collector`, beside the controller (the test command builds it).
fn collector_binary() -> PathBuf {
    let path =
        PathBuf::from(env!("CARGO_BIN_EXE_mesh-controller")).with_file_name("mesh-collector");
    assert!(
        path.is_file(),
        "{} is not built: run `cargo build -p mesh-collector` first (scripts/test does)",
        path.display()
    );
    path
}

/// Runs the collector on the mesh's home and store, returning its JSON answer and exit code.
fn collector(mesh: &Mesh, store: &str, args: &[&str]) -> (i32, Value) {
    let out = Command::new(collector_binary())
        .arg("--home")
        .arg(mesh.home())
        .args(["--store", store, "--output", "json"])
        .args(args)
        .output()
        .unwrap();
    let answer = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), answer)
}

/// The mesh of this home opened in process with `store`, as `--store STORE` opens it.
fn library(mesh: &Mesh, store: &str) -> support::in_process::Library {
    mesh.library_with(mesh_controller::MeshOptions {
        store: Some(store.parse().expect("a store")),
        ..Default::default()
    })
    .unwrap()
}

/// `--store STORE merge cat`, in process: it exits 0 (the plan did not stop); what
/// `--output json` prints.
fn merge(mesh: &Mesh, store: &str) -> Value {
    let merged = library(mesh, store).merge("cat").unwrap();
    assert!(!merged.stopped, "{}{}", merged.lines, merged.json);
    merged.json
}

/// A mesh whose repository `cat` holds `site` (assigned) and `old`, both merged once.
fn merged(store: &str) -> (Mesh, Repo) {
    let mesh = Mesh::example();
    std::fs::write(mesh.home().join("inventory.toml"), INVENTORY).unwrap();
    let repo = Repo::new();
    repo.write(&[
        (
            "modules/site/module.toml",
            "name = \"site\"\n\n[files.page]\nsource = \"files/index.html\"\npath = \"/srv/www/index.html\"\n",
        ),
        ("modules/site/files/index.html", "v1\n"),
        (
            "modules/old/module.toml",
            "name = \"old\"\n\n[files.note]\nsource = \"files/note\"\npath = \"/etc/old\"\n",
        ),
        ("modules/old/files/note", "old\n"),
    ]);
    repo.commit("first");
    mesh.library().repo_add("cat", repo.path()).unwrap();
    merge(&mesh, store);
    (mesh, repo)
}

fn module_record(mesh: &Mesh, module: &str) -> Value {
    let path = mesh.home().join(format!("store/modules/{module}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Deletes `old`'s directory, merges, and checks the merge forgot it and said so; returns
/// the digest of `old`'s archive and of `site`'s.
fn delete_old_and_merge(mesh: &Mesh, repo: &Repo, store: &str) -> (String, String) {
    let old = module_record(mesh, "old")["current"]["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let site = module_record(mesh, "site")["current"]["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    // Kept while the mesh holds it.
    let (code, answer) = collector(mesh, store, &["sweep"]);
    assert_eq!(code, 0, "{answer}");
    assert!(kept(&answer).contains(&old), "{answer}");

    std::fs::remove_dir_all(repo.path().join("modules/old")).unwrap();
    repo.commit("old: gone");
    let answer = merge(mesh, store);
    assert_eq!(answer["forgotten"], serde_json::json!(["old"]), "{answer}");
    let plan: Value = serde_json::from_str(
        &std::fs::read_to_string(mesh.home().join("plans/plan-2.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(plan["forgotten"], serde_json::json!(["old"]), "{plan}");
    assert_eq!(module_record(mesh, "old")["held"], false);
    assert_eq!(module_record(mesh, "site")["held"], true);
    assert!(
        !mesh.home().join("deployed/old.json").exists(),
        "nothing composes from an archive the sweep lets go"
    );
    // Sends still compose: the forgotten module is no longer read from the store.
    let pushed = library(mesh, store).push_all().unwrap();
    assert_eq!(
        pushed.verdict,
        mesh_controller::Verdict::Converged,
        "{}{}",
        pushed.lines,
        pushed.json
    );
    (old, site)
}

fn kept(answer: &Value) -> Vec<String> {
    answer["sweep"]["kept"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["archive"]["digest"].as_str().unwrap().to_owned())
        .collect()
}

fn released(answer: &Value) -> Vec<(String, String)> {
    answer["sweep"]["released"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["digest"].as_str().unwrap().to_owned(),
                r["state"].to_string(),
            )
        })
        .collect()
}

#[test]
fn a_module_a_merge_deleted_is_forgotten_and_collected_from_the_layout() {
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("oci");
    let store = format!("oci:{}", layout.display());
    let (mesh, repo) = merged(&store);
    let (old, site) = delete_old_and_merge(&mesh, &repo, &store);

    let (code, answer) = collector(&mesh, &store, &["collect"]);
    assert_eq!(code, 0, "{answer}");
    assert!(!kept(&answer).contains(&old), "{answer}");
    assert!(kept(&answer).contains(&site), "{answer}");
    assert!(
        released(&answer).iter().any(|(digest, _)| *digest == old),
        "{answer}"
    );
    assert_eq!(answer["collection"]["for_real"], true, "{answer}");
    let blob = |digest: &str| {
        layout
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:"))
    };
    assert!(
        !blob(&old).exists(),
        "the forgotten module's archive is gone"
    );
    assert!(blob(&site).exists(), "the held module's archive stays");
}

#[test]
fn a_module_a_merge_deleted_is_forgotten_and_let_go_on_a_registry() {
    let registry = Registry::start();
    let store = registry.url();
    let (mesh, repo) = merged(&store);
    let (old, site) = delete_old_and_merge(&mesh, &repo, &store);

    let (code, answer) = collector(&mesh, &store, &["sweep"]);
    assert_eq!(code, 0, "{answer}");
    assert!(!kept(&answer).contains(&old), "{answer}");
    assert!(kept(&answer).contains(&site), "{answer}");
    assert!(
        released(&answer)
            .iter()
            .any(|(digest, state)| *digest == old && state.contains("released")),
        "{answer}"
    );
    // Its holding manifest is gone: the registry's collection deletes it.
    let tags = registry.get("/v2/mesh/archives/tags/list").unwrap();
    assert!(!tags.contains(old.trim_start_matches("sha256:")), "{tags}");
    assert!(tags.contains(site.trim_start_matches("sha256:")), "{tags}");
}
