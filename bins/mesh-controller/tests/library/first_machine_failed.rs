//! The rule “One machine first”, when the first machine failed the module before its rollout
//! began: the embedded mesh, a real git repository and this machine's real podman.
//!
//! `web` publishes a host port this test holds (on 127.0.0.1, a port the system picked), and the
//! home's catalogue holds `web` as the repository does. A merge rolls out `base` first: the
//! node's declaration carries `web` from the home's catalogue, whose container fails on the
//! held port. Then `web`'s own rollout sends the node the same container again: a new send is
//! the controller asking again, so the host tries it at once rather than after its backoff, and
//! it fails on the held port again: the rollout stops at once with the container's reason, and
//! does not wait out its deadline for a report that will not come.
//!
//! Needs podman configured as `scripts/podman-env.sh` does; fails, never skips, without it.
//!
//! The controller's library is called in process (`support::in_process`): the merge's
//! progress lines, the plan and status are what the binary prints from them.

use crate::support;
use std::net::TcpListener;
use std::time::{Duration, Instant};
use support::{Mesh, Repo};

/// One node runs both modules, and holds the bus.
const INVENTORY: &str = r#"bus-node = "solo"

[nodes.solo]

[assignments]
base = ["solo"]
web = ["solo"]
"#;

/// `web`'s deadline: a gate that waited for it would stop only after it, saying "no report".
const DEADLINE_SECS: u64 = 120;

fn base() -> String {
    "name = \"base\"\n\n[files.hello]\nsource = \"files/hello\"\npath = \"/etc/mesh/hello\"\n"
        .to_owned()
}

/// `web`: built after `base`, one container publishing host port `port` on 127.0.0.1.
fn web(port: u16) -> String {
    format!(
        "name = \"web\"\ndepends = [\"base\"]\ndeadline-secs = {DEADLINE_SECS}\n\n\
         [settings]\nport = {port}\n\n\
         [containers.web]\nimage = \"{}\"\n\
         command = [\"sh\", \"-c\", \"trap 'exit 0' TERM; httpd -f -p 8080 -h /tmp & wait\"]\n\
         ports = [\"127.0.0.1:{{{{port}}}}:8080/tcp\"]\n",
        mesh_test_support::podman::image()
    )
}

#[test]
fn a_first_machine_whose_container_failed_before_stops_the_rollout_at_once_naming_why() {
    // This test is the other program: it holds the port `web` publishes.
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let mesh = Mesh::example();
    std::fs::write(mesh.home().join("inventory.toml"), INVENTORY).unwrap();
    std::fs::remove_dir_all(mesh.home().join("settings")).unwrap();
    let modules = mesh.home().join("catalogue/modules");
    std::fs::remove_dir_all(&modules).unwrap();
    std::fs::create_dir_all(modules.join("web")).unwrap();
    std::fs::write(modules.join("web/module.toml"), web(port)).unwrap();

    let repo = Repo::new();
    let web_toml = web(port);
    let base_toml = base();
    repo.write(&[
        ("modules/base/module.toml", base_toml.as_str()),
        ("modules/base/files/hello", "hello\n"),
        ("modules/web/module.toml", web_toml.as_str()),
    ]);
    repo.commit("base and web");
    mesh.library().repo_add("cat", repo.path()).unwrap();

    let began = Instant::now();
    let merged = mesh.library().merge("cat").unwrap();
    let took = began.elapsed();
    // It exits 3: the plan stopped.
    assert!(merged.stopped, "{}{}", merged.lines, merged.json);
    let out = merged.lines;
    assert!(
        took < Duration::from_secs(DEADLINE_SECS),
        "the merge waited {took:?}, as long as the deadline: {out}"
    );

    let plan = mesh.library().plan("plan-1").unwrap();
    assert_eq!(
        plan["plan"]["tiers"],
        serde_json::json!([["base"], ["web"]])
    );
    // `base` went ahead: its own resources took, though `web`'s container failed beside them.
    assert_eq!(
        plan["plan"]["rollouts"]["base"]["outcome"]["outcome"],
        "done"
    );
    assert_eq!(
        std::fs::read_to_string(mesh.root("solo").join("etc/mesh/hello")).unwrap(),
        "hello\n"
    );
    // `web` stopped at its first machine with the container's reason.
    let outcome = &plan["plan"]["rollouts"]["web"]["outcome"];
    assert_eq!(outcome["node"], "solo", "{plan}");
    let reason = outcome["reason"].as_str().unwrap();
    for said in [
        "web/container/web",
        &format!("host port 127.0.0.1:{port}/tcp is held by another program"),
        &format!("(pid {})", std::process::id()),
    ] {
        assert!(reason.contains(said), "{said:?} not in {reason}");
    }
    // Read from the report answering `web`'s own send, which the host tried at once (not
    // `waiting` out the backoff `base`'s send began).
    assert!(!reason.contains("as declared before"), "{reason}");
    assert!(!reason.contains("no report"), "{reason}");
    assert!(out.contains("`web`: stopped at `solo`"), "{out}");

    let status = mesh.library().status();
    assert_eq!(status.code, 3, "{:#}", status.json);
    let status = status.json;
    let stopped = &status["stopped"][0];
    assert_eq!(stopped["module"], "web", "{status}");
    assert_eq!(stopped["reason"].as_str(), Some(reason), "{status}");
    drop(held);
}
