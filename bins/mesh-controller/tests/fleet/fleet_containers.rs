//! Containers on a fleet: a real `nats-server`, real `mesh-host serve` processes
//! running their containers under this machine's real podman, and merges from a real git
//! repository rolled out one machine first.
//!
//! A containerized module whose new build's container exits at once is reported failed on its
//! first machine with its exit code and the end of its log, the rollout stops there, and the
//! other nodes keep their old build, their old container still running; `status` names the
//! node and the reason. The same for a new build whose health command fails.
//!
//! Needs podman configured as `scripts/podman-env.sh` does; fails, never skips, without it.
//! The hosts share this machine's podman, so each runs with its own container prefix, all
//! under one prefix unique to the run; every container under it is removed when the test
//! ends, whether or not it passed.
//!
//! The controller is called as a library, in process, on the bed's bus (`Bed::library`,
//! `Bed::library`): merges, plans, status, the records and the repository registered.

use crate::support;
use serde_json::Value;
use std::process::Command;
use support::fleet::{write, Bed};
use support::Repo;

/// The nodes `app` is assigned to (the bus node holds the bus, and no container).
const NODES: [&str; 3] = ["a", "b", "c"];

/// A prefix of container names unique to this run (`mesh-fleet-<pid>-<n>-`): every container
/// whose name starts with it is removed when it is dropped.
pub(crate) struct RunPrefix(String);

impl RunPrefix {
    pub(crate) fn new() -> RunPrefix {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let prefix = RunPrefix(format!("mesh-fleet-{}-{n}-", std::process::id()));
        prefix.remove_all();
        prefix
    }

    /// The prefix `node`'s host puts before its containers' names.
    pub(crate) fn of(&self, node: &str) -> String {
        format!("{}{node}-", self.0)
    }

    /// The names of the containers podman has under this prefix.
    fn containers(&self) -> Vec<String> {
        let out = Command::new("podman")
            .args(["ps", "--all", "--format", "{{.Names}}", "--filter"])
            .arg(format!("name=^{}", self.0))
            .output()
            .expect("podman runs");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|name| name.starts_with(&self.0))
            .map(str::to_owned)
            .collect()
    }

    fn remove_all(&self) {
        for name in self.containers() {
            let _ = Command::new("podman")
                .args(["rm", "--force", "--time", "0", &name])
                .output();
        }
    }
}

impl Drop for RunPrefix {
    fn drop(&mut self) {
        self.remove_all();
    }
}

/// What podman says of a container: its id, whether it runs, its command.
#[derive(Debug, PartialEq)]
struct Seen {
    id: String,
    running: bool,
    command: String,
}

fn inspect(name: &str) -> Option<Seen> {
    let out = Command::new("podman")
        .args([
            "inspect",
            "--type",
            "container",
            "--format",
            "{{.Id}}\t{{.State.Running}}\t{{join .Config.Cmd \" \"}}",
            name,
        ])
        .output()
        .expect("podman runs");
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut fields = text.trim_end().splitn(3, '\t');
    Some(Seen {
        id: fields.next()?.to_owned(),
        running: fields.next()? == "true",
        command: fields.next().unwrap_or_default().to_owned(),
    })
}

/// The image every container runs (`scripts/podman-env.sh` imported it).
pub(crate) fn image() -> String {
    for var in [
        "CONTAINERS_CONF",
        "CONTAINERS_STORAGE_CONF",
        "MESH_PODMAN_ULIMITS",
        "MESH_TEST_IMAGE",
    ] {
        assert!(
            std::env::var_os(var).is_some(),
            "podman is not configured for the tests: `{var}` is not set. Run `source \
             scripts/podman-env.sh` in this shell first, or the test command `scripts/test`"
        );
    }
    std::env::var("MESH_TEST_IMAGE").unwrap()
}

/// The command of a container that runs until it is stopped (busybox as PID 1 ignores
/// SIGTERM unless it traps it).
const RUNS: &str = "trap 'exit 0' TERM; echo serving; sleep 100000 & wait";

/// `app`'s `module.toml`: one container `web` running `sh -c script`, with `health` when given.
/// It is judged after the default settle (2 s), so that on a busy machine a container that exits
/// at once has long exited when it is looked at.
fn app_module(script: &str, health: &str) -> String {
    format!(
        "name = \"app\"\n\n[containers.web]\nimage = \"{}\"\ncommand = [\"sh\", \"-c\", \"{}\"]\n{health}",
        image(),
        script.replace('\\', "\\\\").replace('"', "\\\"")
    )
}

const BASE: &str =
    "name = \"base\"\n\n[files.hello]\nsource = \"files/hello\"\npath = \"/etc/mesh/hello\"\n";

fn commit_app(repo: &Repo, module: &str, message: &str) -> String {
    repo.write(&[("modules/app/module.toml", module)]);
    repo.commit(message)
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// `plans show ID --output json`.
fn plan_record(bed: &Bed, id: &str) -> Value {
    bed.library()
        .plan(id)
        .unwrap_or_else(|error| panic!("{error}"))
}

/// The stopped rollout of `app` in `plan`, as `status` lists it (exit 3: it needs a person).
fn stopped_in_status(bed: &Bed, plan: &str) -> Value {
    let status = bed.library().status();
    assert_eq!(status.code, 3, "{:#}", status.json);
    let status = status.json;
    status["stopped"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["plan"] == plan && s["module"] == "app")
        .cloned()
        .unwrap_or_else(|| panic!("status lists no stopped rollout of `app` in {plan}: {status}"))
}

/// Every node but the first keeps its old build: its container is the one it had, running.
fn others_keep(prefixes: &RunPrefix, before: &[(String, Seen)], what: &str) {
    for (node, old) in before.iter().filter(|(node, _)| node != "a") {
        let name = format!("{}mesh-app-web", prefixes.of(node));
        let now = inspect(&name).unwrap_or_else(|| panic!("{node}: {name} is gone ({what})"));
        assert_eq!(&now, old, "{node} keeps its old container ({what})");
    }
}

#[test]
fn a_new_build_whose_container_exits_or_is_unhealthy_stops_the_rollout_at_its_first_machine() {
    // Declared before the bed, so dropped after it: the hosts are killed first, then every
    // container they made is removed.
    let prefixes = RunPrefix::new();
    let mut bed = Bed::new(&NODES);
    let inventory = bed.record("inventory.toml").unwrap();
    bed.put_inventory(&format!("{inventory}app = [\"a\", \"b\", \"c\"]\n"));
    let v1 = app_module(RUNS, "");
    // The home's catalogue holds `app` too, as an operator's checkout does.
    write(
        &bed.home.path().join("catalogue/modules/app/module.toml"),
        &v1,
    );
    for node in std::iter::once("bus").chain(NODES) {
        let prefix = prefixes.of(node);
        bed.start_host_with(
            node,
            &["--container-prefix", &prefix, "--podman-stop-timeout", "0"],
        );
    }
    let repo = Repo::new();
    repo.write(&[
        ("modules/base/module.toml", BASE),
        ("modules/base/files/hello", "v1\n"),
    ]);
    let first = commit_app(&repo, &v1, "app v1");
    bed.library().repo_add("cat", repo.path()).unwrap();

    // The first merge: every node runs the container.
    bed.library().merge_expecting("cat", 0);
    let before: Vec<(String, Seen)> = NODES
        .iter()
        .map(|node| {
            let name = format!("{}mesh-app-web", prefixes.of(node));
            let seen = inspect(&name).unwrap_or_else(|| panic!("{node}: no container {name}"));
            assert!(seen.running, "{node}: {seen:?}");
            assert!(seen.command.contains("serving"), "{node}: {seen:?}");
            ((*node).to_owned(), seen)
        })
        .collect();
    let deployed = json(&bed.record("deployed/app.json").unwrap());
    assert_eq!(deployed["commit"], first.as_str());

    // A build whose container exits at once: failed on `a`, its first machine, with the exit
    // code and the end of its log; nobody else is sent it.
    commit_app(
        &repo,
        &app_module(
            "echo starting; echo 'bind: Address already in use' >&2; exit 3",
            "",
        ),
        "app v2: exits at once",
    );
    let out = bed.library().merge_expecting("cat", 3);
    assert!(out.contains("`app`: sent `a` (first)"), "{out}");
    assert!(
        !out.contains("`app`: sent `b`") && !out.contains("`app`: sent `c`"),
        "{out}"
    );
    let plan = plan_record(&bed, "plan-2");
    assert_eq!(plan["plan"]["state"]["state"], "stopped", "{plan}");
    let outcome = &plan["plan"]["rollouts"]["app"]["outcome"];
    assert_eq!(outcome["node"], "a", "{outcome}");
    let stopped = stopped_in_status(&bed, "plan-2");
    assert_eq!(stopped["node"], "a", "{stopped}");
    let reason = stopped["reason"].as_str().unwrap();
    assert_eq!(Some(reason), outcome["reason"].as_str(), "{outcome}");
    for said in [
        "app/container/web",
        "exited with code 3",
        "starting",
        "bind: Address already in use",
    ] {
        assert!(reason.contains(said), "{said:?} not in {reason}");
    }
    let on_a = inspect(&format!("{}mesh-app-web", prefixes.of("a"))).expect("a's container");
    assert!(!on_a.running, "{on_a:?}");
    others_keep(&prefixes, &before, "after the container that exits");
    let deployed = json(&bed.record("deployed/app.json").unwrap());
    assert_eq!(
        deployed["commit"],
        first.as_str(),
        "the old build stays deployed"
    );

    // A build whose container runs but whose health command fails: the same, the command and
    // what it printed said.
    commit_app(
        &repo,
        &app_module(
            RUNS,
            "health = { command = [\"sh\", \"-c\", \"echo not ready; exit 1\"], within = \"1s\" }\n",
        ),
        "app v3: never healthy",
    );
    let out = bed.library().merge_expecting("cat", 3);
    assert!(out.contains("`app`: sent `a` (first)"), "{out}");
    assert!(
        !out.contains("`app`: sent `b`") && !out.contains("`app`: sent `c`"),
        "{out}"
    );
    let plan = plan_record(&bed, "plan-3");
    assert_eq!(plan["plan"]["state"]["state"], "stopped", "{plan}");
    let stopped = stopped_in_status(&bed, "plan-3");
    assert_eq!(stopped["node"], "a", "{stopped}");
    let reason = stopped["reason"].as_str().unwrap();
    for said in [
        "app/container/web",
        "health command `sh -c echo not ready; exit 1`",
        "not ready",
    ] {
        assert!(reason.contains(said), "{said:?} not in {reason}");
    }
    others_keep(&prefixes, &before, "after the unhealthy container");

    // Every container the hosts made is under the run's prefix (and so removed at the end).
    let made = prefixes.containers();
    assert_eq!(made.len(), NODES.len(), "{made:?}");
    assert!(
        made.iter().all(|name| name.ends_with("-mesh-app-web")),
        "{made:?}"
    );
}

/// The rule “One machine first” on a fleet, when the first machine failed the module before its
/// rollout began: `app` publishes a host port this test holds (on 127.0.0.1), and the home's
/// catalogue holds `app` as the repository does. The merge's first tier, `base`, sends `a` a
/// declaration carrying `app`, whose container fails on the held port; `app`'s own rollout then
/// sends `a` the same container: a new send, which its host tries at once rather than after its
/// backoff, and which fails on the held port again: the rollout stops at once with the
/// container's reason, not after its deadline for a report that would say nothing new.
#[test]
fn a_first_machine_whose_container_failed_before_stops_the_rollout_at_once() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let prefixes = RunPrefix::new();
    let mut bed = Bed::new(&["a"]);
    let inventory = bed.record("inventory.toml").unwrap();
    bed.put_inventory(&format!("{inventory}app = [\"a\"]\n"));
    let app = format!(
        "name = \"app\"\ndepends = [\"base\"]\ndeadline-secs = 120\n\n[containers.web]\nimage = \"{}\"\ncommand = [\"sh\", \"-c\", \"{}\"]\nports = [\"127.0.0.1:{port}:8080/tcp\"]\n",
        image(),
        RUNS.replace('\\', "\\\\").replace('"', "\\\"")
    );
    write(
        &bed.home.path().join("catalogue/modules/app/module.toml"),
        &app,
    );
    for node in ["bus", "a"] {
        let prefix = prefixes.of(node);
        bed.start_host_with(
            node,
            &["--container-prefix", &prefix, "--podman-stop-timeout", "0"],
        );
    }
    let repo = Repo::new();
    repo.write(&[
        ("modules/base/module.toml", BASE),
        ("modules/base/files/hello", "v2\n"),
        ("modules/app/module.toml", &app),
    ]);
    repo.commit("base v2, app");
    bed.library().repo_add("cat", repo.path()).unwrap();

    let began = std::time::Instant::now();
    let out = bed.library().merge_expecting("cat", 3);
    assert!(
        began.elapsed() < std::time::Duration::from_secs(120),
        "the merge waited out the deadline: {out}"
    );
    let plan = plan_record(&bed, "plan-1");
    assert_eq!(
        plan["plan"]["tiers"],
        serde_json::json!([["base"], ["app"]])
    );
    assert_eq!(
        plan["plan"]["rollouts"]["base"]["outcome"]["outcome"],
        "done"
    );
    let outcome = &plan["plan"]["rollouts"]["app"]["outcome"];
    assert_eq!(outcome["node"], "a", "{plan}");
    let reason = outcome["reason"].as_str().unwrap();
    for said in [
        "app/container/web",
        &format!("host port 127.0.0.1:{port}/tcp is held by another program"),
    ] {
        assert!(reason.contains(said), "{said:?} not in {reason}");
    }
    // Tried at once for `app`'s own send, not `waiting` out the backoff `base`'s send began.
    assert!(!reason.contains("as declared before"), "{reason}");
    let stopped = stopped_in_status(&bed, "plan-1");
    assert_eq!(stopped["reason"].as_str(), Some(reason), "{stopped}");
    drop(held);
}
