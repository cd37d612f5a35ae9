//! A module's files reach a host inside its archive, in the embedded default
//! with a real git repository and the OCI layout store: the declaration sent names the archive
//! and carries no content for the module's plain files; the host fetches the archive, checks it,
//! keeps it in its cache and applies from it.
//!
//! The controller's library is called in process (`support::in_process`).

use crate::support;
use serde_json::Value;
use std::path::{Path, PathBuf};
use support::{Mesh, Repo};

const INVENTORY: &str = r#"bus-node = "control"

[nodes.control]
[nodes.home]
[nodes.laptop]

[assignments]
site = ["control", "home"]
"#;

fn site_files(page: &str) -> [(&'static str, String); 3] {
    [
        (
            "modules/site/module.toml",
            "name = \"site\"\n\n[settings]\nwho = \"world\"\n\n\
             [files.page]\nsource = \"files/index.html\"\npath = \"/srv/www/index.html\"\n\n\
             [files.hello]\nsource = \"files/hello\"\npath = \"/srv/www/hello\"\ntemplate = true\n"
                .to_owned(),
        ),
        ("modules/site/files/index.html", page.to_owned()),
        ("modules/site/files/hello", "hello {{ who }}\n".to_owned()),
    ]
}

fn commit_site(repo: &Repo, page: &str, message: &str) -> String {
    let files = site_files(page);
    let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
    repo.write(&files);
    repo.commit(message)
}

fn setup() -> (Mesh, Repo) {
    let mesh = Mesh::example();
    std::fs::write(mesh.home().join("inventory.toml"), INVENTORY).unwrap();
    let repo = Repo::new();
    commit_site(&repo, "v1\n", "first");
    mesh.library().repo_add("cat", repo.path()).unwrap();
    (mesh, repo)
}

/// `merge cat`, in process: it exits 0 (the plan did not stop).
fn merge(mesh: &Mesh) {
    let merged = mesh.library().merge("cat").unwrap();
    assert!(!merged.stopped, "{}{}", merged.lines, merged.json);
}

fn json_file(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn hex(digest: &str) -> &str {
    digest.trim_start_matches("sha256:")
}

/// Runs `mesh-host apply` as the embedded host of `node` would apply, with `--store`.
fn host_apply(mesh: &Mesh, node: &str, store: &str) -> (i32, Value) {
    let host = PathBuf::from(env!("CARGO_BIN_EXE_mesh-controller")).with_file_name("mesh-host");
    let out = std::process::Command::new(&host)
        .arg("--root")
        .arg(mesh.root(node))
        .arg("--state-dir")
        .arg(mesh.home().join("state").join(node))
        .args(["--store", store, "--output", "json", "--containers", "none"])
        .arg("apply")
        .arg(
            mesh.home()
                .join("declarations")
                .join(format!("{}.json", hex(&sent_digest(mesh, node)))),
        )
        .output()
        .unwrap_or_else(|e| panic!("running {} (cargo build -p mesh-host): {e}", host.display()));
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report)
}

fn outcomes(report: &Value) -> Vec<(String, String)> {
    report["resources"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(id, o)| (id.clone(), o["outcome"].as_str().unwrap().to_owned()))
        .collect()
}

#[test]
fn a_merged_modules_files_reach_the_host_inside_its_archive() {
    let (mesh, repo) = setup();
    merge(&mesh);
    let deployed = json_file(&mesh.home().join("deployed/site.json"));
    let digest = deployed["archive"]["digest"].as_str().unwrap().to_owned();

    // The declaration sent names the archive; the plain file carries no content, the template
    // carries its rendered content.
    // What was sent is kept once by its digest; the node's record names it.
    let pointer = json_file(&mesh.home().join("sent/control.json"));
    let pointed = pointer["declaration"].as_str().unwrap();
    let sent = json_file(&mesh.home().join(format!(
        "declarations/{}.json",
        pointed.strip_prefix("sha256:").unwrap()
    )));
    assert_eq!(sent["format"], 2);
    assert_eq!(sent["archives"]["site"], deployed["archive"]);
    let resources = sent["resources"].as_array().unwrap();
    let page = resources
        .iter()
        .find(|r| r["id"] == "site/file/page")
        .unwrap();
    assert!(page["spec"].get("content").is_none(), "{page}");
    assert_eq!(page["spec"]["source"]["path"], "files/index.html");
    let hello = resources
        .iter()
        .find(|r| r["id"] == "site/file/hello")
        .unwrap();
    assert_eq!(hello["spec"]["content"], "hello world\n");

    // The files are on the host's root, and the archive in its cache.
    for node in ["control", "home"] {
        assert_eq!(
            std::fs::read_to_string(mesh.root(node).join("srv/www/index.html")).unwrap(),
            "v1\n"
        );
        let cached = mesh
            .home()
            .join("state")
            .join(node)
            .join("archives")
            .join(hex(&digest));
        assert!(cached.is_file(), "{node} caches the archive");
    }

    // A second apply uses the cache: the archive is gone from the store, nothing changes.
    let blob = mesh
        .home()
        .join("store/oci/blobs/sha256")
        .join(hex(&digest));
    let bytes = std::fs::read(&blob).unwrap();
    std::fs::remove_file(&blob).unwrap();
    let store = format!("oci:{}", mesh.home().join("store/oci").display());
    let (code, report) = host_apply(&mesh, "control", &store);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["declaration"], sent_digest(&mesh, "control"));
    assert!(
        outcomes(&report).iter().all(|(_, o)| o == "unchanged"),
        "{report}"
    );

    // A corrupt cache entry is fetched again from the store.
    let cached = mesh
        .home()
        .join("state/control/archives")
        .join(hex(&digest));
    std::fs::write(&cached, b"not the archive").unwrap();
    std::fs::write(&blob, &bytes).unwrap();
    let (code, report) = host_apply(&mesh, "control", &store);
    assert_eq!(code, 0, "{report}");
    assert_eq!(std::fs::read(&cached).unwrap(), bytes);

    // An archive neither cached nor in the store fails only the files read from it.
    std::fs::remove_file(&blob).unwrap();
    std::fs::remove_file(&cached).unwrap();
    std::fs::remove_file(mesh.root("control").join("srv/www/index.html")).unwrap();
    let (code, report) = host_apply(&mesh, "control", &store);
    assert_eq!(code, 3, "{report}");
    let page = &report["resources"]["site/file/page"];
    assert_eq!(page["outcome"], "failed", "{report}");
    let reason = page["reason"].as_str().unwrap();
    assert!(
        reason.contains(&digest) && reason.contains(&store),
        "the reason names the archive and the store: {reason}"
    );
    assert_eq!(
        report["resources"]["site/file/hello"]["outcome"],
        "unchanged"
    );
    assert!(!mesh.root("control").join("srv/www/index.html").exists());
    std::fs::write(&blob, &bytes).unwrap();

    // `plan --diff` sees an archived file's content change, with its digests.
    let before = std::fs::read(mesh.home().join("sent/control.json")).unwrap();
    commit_site(&repo, "v2\n", "second");
    merge(&mesh);
    assert_eq!(
        std::fs::read_to_string(mesh.root("control").join("srv/www/index.html")).unwrap(),
        "v2\n"
    );
    std::fs::write(mesh.home().join("sent/control.json"), before).unwrap();
    let (diff, _) = mesh.library().plan_diff("control").unwrap();
    // "~ site/file/page", its "content  \"v1\" -> \"v2\"".
    let page = diff["changed"]
        .as_array()
        .unwrap()
        .iter()
        .find(|change| change["id"] == "site/file/page")
        .unwrap_or_else(|| panic!("{diff:#}"));
    let v1 = mesh_model::sha256_digest(b"v1\n");
    let v2 = mesh_model::sha256_digest(b"v2\n");
    assert!(
        page["fields"]
            .as_array()
            .unwrap()
            .iter()
            .any(|field| field["field"] == "content"
                && field["old"] == v1.as_str()
                && field["new"] == v2.as_str()),
        "{diff:#}"
    );
    let diff = diff.to_string();
    assert!(!diff.contains("site/file/hello"), "{diff}");
}

/// The digest `sent/<node>.json` names.
fn sent_digest(mesh: &Mesh, node: &str) -> String {
    json_file(&mesh.home().join("sent").join(format!("{node}.json")))["declaration"]
        .as_str()
        .unwrap()
        .to_owned()
}
