//! A `git revert` is the recovery it looks like: a commit whose container fails its health check
//! stops its rollout at the first machine, which is left running that build with its service
//! down; the revert's build is byte-identical to the deployed one, and is sent all the same to
//! the machine that runs something else. `status` never reads settled in between.
//!
//! A real nats-server, real `mesh-host serve` daemons running their containers under this
//! machine's podman (`scripts/podman-env.sh`), a real git repository, and a real
//! `mesh-controller serve` fed by a webhook signed by `openssl` and posted by `curl`. The first
//! two merges are made through the library in process; status is read through it too, as the
//! command reads it (`Bed::library`).

use crate::fleet_containers::{image, RunPrefix};
use crate::support;
use crate::webhooks::{deliver, Forge, SECRET};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt as _;
use std::process::Command;
use std::time::Duration;
use support::daemon::start_serve;
use support::fleet::{write, Bed};
use support::Repo;

/// The nodes `app` is assigned to (the bus node runs no container).
const NODES: [&str; 2] = ["a", "b"];

/// `app`'s `module.toml`: busybox's httpd serving `ok` on `<listen>:{{port}}`, healthy when
/// `127.0.0.1:{{port}}` answers.
fn app_module(listen: &str) -> String {
    let serve = format!(
        "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p {listen}:{{{{port}}}} -h /www"
    );
    format!(
        "name = \"app\"\n\n[settings]\nport = 8080\n\n[containers.web]\nimage = \"{}\"\n\
         command = [\"sh\", \"-c\", \"{serve}\"]\n\
         health = {{ command = [\"sh\", \"-c\", \"wget -q -O /dev/null http://127.0.0.1:{{{{port}}}}/\"], within = \"10s\" }}\n",
        image()
    )
}

/// What `127.0.0.1:port` answers over HTTP (`None`: nothing).
pub(crate) fn answer(port: u16) -> Option<String> {
    let out = Command::new("curl")
        .args(["--silent", "--max-time", "5"])
        .arg(format!("http://127.0.0.1:{port}/"))
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The command of `app`'s container in the declaration last sent to `node`.
pub(crate) fn sent_command(bed: &Bed, node: &str) -> String {
    let sent: Value =
        serde_json::from_str(&bed.record(&format!("sent/{node}.json")).unwrap()).unwrap();
    let digest = sent["declaration"].as_str().unwrap();
    let key = format!(
        "declarations/{}.json",
        digest.strip_prefix("sha256:").unwrap()
    );
    let declaration: Value = serde_json::from_str(
        &bed.record(&key)
            .unwrap_or_else(|| panic!("{key}, which sent/{node}.json names, is not kept")),
    )
    .unwrap();
    declaration["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "app/container/web")
        .map(|r| r["spec"]["command"].to_string())
        .unwrap_or_else(|| panic!("no `app` container in {declaration:#}"))
}

/// The build of `app` a plan made.
fn plan_build(bed: &Bed, plan: &str) -> String {
    let record = bed
        .library()
        .plan(plan)
        .unwrap_or_else(|error| panic!("{error}"));
    record["work"]["app"]["build"]["archive"]["digest"]
        .as_str()
        .unwrap_or_else(|| panic!("{plan} built no `app`: {record:#}"))
        .to_owned()
}

/// The deployed build of `app`.
fn deployed_build(bed: &Bed) -> String {
    let deployed: Value = serde_json::from_str(&bed.record("deployed/app.json").unwrap()).unwrap();
    deployed["archive"]["digest"].as_str().unwrap().to_owned()
}

#[test]
fn a_revert_of_a_commit_stopped_at_its_first_machine_sends_it_the_deployed_build_again() {
    // Declared before the bed, so dropped after it: the hosts are killed first, then every
    // container they made is removed.
    let prefixes = RunPrefix::new();
    let mut bed = Bed::new(&NODES);
    let ports: Vec<u16> = NODES
        .iter()
        .map(|_| mesh_test_support::wait::free_port())
        .collect();
    let inventory = bed.record("inventory.toml").unwrap();
    bed.put_inventory(&format!("{inventory}app = [\"a\", \"b\"]\n"));
    let good = app_module("127.0.0.1");
    // The home's catalogue holds `app` too, as an operator's checkout does.
    write(
        &bed.home.path().join("catalogue/modules/app/module.toml"),
        &good,
    );
    for (node, port) in NODES.iter().zip(&ports) {
        let answer = bed
            .library()
            .settings_set("app", Some(node), &format!("{{\"port\": {port}}}"))
            .unwrap();
        assert!(!answer.refused(), "{answer:?}");
    }
    for node in std::iter::once("bus").chain(NODES) {
        let prefix = prefixes.of(node);
        bed.start_host_with(
            node,
            &["--container-prefix", &prefix, "--podman-stop-timeout", "0"],
        );
    }
    bed.push_all(120, 0);

    let repo = Repo::new();
    repo.write(&[("modules/app/module.toml", &good)]);
    repo.commit("app: serves ok");
    let scratch = tempfile::tempdir().unwrap();
    let secret_file = scratch.path().join("cat.secret");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    std::fs::set_permissions(&secret_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    bed.library()
        .repo_add_with(
            "cat",
            repo.path(),
            &mesh_controller::catalogue::AddOptions {
                modules_dir: "modules".to_owned(),
                hook_secret_file: Some(secret_file),
                ..Default::default()
            },
        )
        .unwrap();

    // The first merge: every node runs the service, and everything is settled.
    bed.library().merge_expecting("cat", 0);
    for port in &ports {
        assert_eq!(answer(*port).as_deref(), Some("ok"), "port {port}");
    }
    let deployed = deployed_build(&bed);
    let status = bed.library().status();
    assert_eq!(status.code, 0, "{:#}", status.json);

    // A commit that moves the listener off the address its health command asks: `a`, the
    // first machine, fails its judgement and the rollout stops there; `b` keeps the old build.
    repo.write(&[("modules/app/module.toml", &app_module("127.0.0.2"))]);
    let bad = repo.commit("app: listens elsewhere");
    let out = bed.library().merge_expecting("cat", 3);
    assert!(out.contains("`app`: sent `a` (first)"), "{out}");
    assert_eq!(answer(ports[0]), None, "`a`'s service is down");
    assert_eq!(
        answer(ports[1]).as_deref(),
        Some("ok"),
        "`b` keeps its build"
    );
    assert_eq!(
        deployed_build(&bed),
        deployed,
        "the old build stays deployed"
    );
    assert!(sent_command(&bed, "a").contains("127.0.0.2:"));
    let bad_build = plan_build(&bed, "plan-2");
    assert_ne!(bad_build, deployed);
    // `a` runs a build other than the deployed one: named, with both builds, and nothing will
    // send it (exit 3).
    let status = bed.library().status();
    assert_eq!(status.code, 3, "{:#}", status.json);
    let pending = status.json["pending"]
        .as_array()
        .unwrap_or_else(|| panic!("nothing pending: {:#}", status.json));
    assert_eq!(pending.len(), 1, "{pending:#?}");
    assert_eq!(pending[0]["node"], "a");
    assert_eq!(
        pending[0]["differences"],
        serde_json::json!([{
            "why": "build", "module": "app", "sent": bad_build, "deployed": deployed
        }])
    );

    // The daemon, fed by a signed webhook.
    let (_daemon, lines) = start_serve(&bed, &["--hooks", "127.0.0.1:0"], |lines| lines.len() == 1);
    let hooks = lines[0]
        .strip_prefix("serving the webhooks on ")
        .and_then(|url| url.strip_suffix("hooks/NAME"))
        .unwrap_or_else(|| panic!("{lines:?}"))
        .to_owned();
    let rt = support::fleet::runtime();
    let bus = bed.controller_bus(&rt);
    support::fleet::wait_for_merge_consumer(&rt, &bus);

    // `git revert`, and its push announced: the build is byte-identical to the deployed one.
    repo.git(&["revert", "--no-edit", "HEAD"]);
    let revert = repo.git(&["rev-parse", "HEAD"]);
    let (code, said) = deliver(
        scratch.path(),
        &format!("{hooks}hooks/cat"),
        Forge::GitHub,
        "main",
        &bad,
        &revert,
    );
    assert_eq!(code, 202, "{said}");

    // Every status read until `a` runs the deployed build and answers is not settled; the
    // first settled one is read only after that.
    let mut unsettled = 0;
    support::wait_for(
        "`a` sent the deployed build again, answering, and status settled",
        Duration::from_secs(180),
        || {
            let status = bed.library().status();
            let recovered = sent_command(&bed, "a").contains("127.0.0.1:")
                && answer(ports[0]).as_deref() == Some("ok");
            if status.code == 0 {
                assert!(
                    recovered,
                    "status settled before `a` was sent the deployed build and answered: {:#}",
                    status.json
                );
                return Ok(());
            }
            unsettled += 1;
            Err(format!("status exits {}: {:#}", status.code, status.json))
        },
    );
    assert!(
        unsettled > 0,
        "status was never read unsettled after the revert"
    );
    let plans = support::daemon::plans(&bed);
    let plan = plans
        .iter()
        .find(|p| p["commit"] == revert.as_str())
        .unwrap_or_else(|| panic!("no plan of the revert: {plans:#?}"));
    assert_eq!(plan["state"]["state"], "done", "{plan:#}");
    let record = bed
        .library()
        .plan(plan["id"].as_str().unwrap())
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(
        record["plan"]["rollouts"]["app"]["first"], "a",
        "{record:#}"
    );
    assert_ne!(
        record["work"]["app"]["not-redeployed"], true,
        "the revert was rolled out: {record:#}"
    );
    assert_eq!(deployed_build(&bed), deployed);
    assert_eq!(answer(ports[1]).as_deref(), Some("ok"));
}
