//! Merges that roll out over the bus (the multi-host bed): a real git repository, the
//! real registry as the store, several `mesh-host serve` processes each with its own root and
//! bus password, one real `nats-server`, and `mesh-controller --bus … merge`.
//!
//! A merge is built and rolled out one machine first across the hosts; a commit that breaks
//! the module on its first node stops the rollout there (the failure named, or "no report" for a
//! host that never reports) while the others keep the old build. Faults with nothing lost: the
//! bus restarted mid-rollout, the controller killed mid-rollout and `plans resume` finishing it
//! from the record, a host killed mid-apply reporting mid-change and then converging.
//!
//! The controller is called as a library, in process, on the bed's bus (`Bed::library`,
//! `Bed::library`): merges (on a thread of their own while the test restarts the bus or
//! kills a host), `plans resume` on another machine, status, plans and records. The binary is
//! run for the merge killed with SIGKILL mid-rollout (a process), and for `plans show` and
//! `status` as a person reads them; the collector is its own binary.

use crate::support;
use serde_json::Value;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use support::fleet::Bed;
use support::in_process::Library;
use support::in_process::Merged;
use support::Repo;

/// `base` writes `/etc/mesh/hello` on every node; `extra` is appended to its file's table
/// (e.g. an owner), `top` to the definition's top-level keys (e.g. a deadline).
fn base_module(hello: &str, top: &str, extra: &str) -> [(String, String); 2] {
    [
        (
            "modules/base/module.toml".into(),
            format!(
                "name = \"base\"\n{top}\n[files.hello]\nsource = \"files/hello\"\npath = \"/etc/mesh/hello\"\n{extra}"
            ),
        ),
        ("modules/base/files/hello".into(), hello.into()),
    ]
}

fn commit_base(repo: &Repo, hello: &str, top: &str, extra: &str, message: &str) -> String {
    let [a, b] = base_module(hello, top, extra);
    repo.write(&[(&a.0, &a.1), (&b.0, &b.1)]);
    repo.commit(message)
}

/// A bed of `bus` and `nodes`, every host started, the registry as the store, and the
/// repository `cat` registered with `base` saying `v1`.
fn setup(nodes: &[&str]) -> (Bed, Repo) {
    let mut bed = Bed::new(nodes);
    for node in std::iter::once("bus").chain(nodes.iter().copied()) {
        bed.start_host(node);
    }
    let repo = Repo::new();
    commit_base(&repo, "v1\n", "", "", "base v1");
    bed.library().repo_add("cat", repo.path()).unwrap();
    (bed, repo)
}

fn hello(bed: &Bed, node: &str) -> String {
    std::fs::read_to_string(bed.root(node).join("etc/mesh/hello"))
        .unwrap_or_else(|e| panic!("{node}: {e}"))
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// `plans show ID --output json`.
fn plan(bed: &Bed, id: &str) -> Value {
    bed.library()
        .plan(id)
        .unwrap_or_else(|error| panic!("{error}"))
}

/// `merge cat` started through the library on a thread of its own, while the test goes on
/// with the bed: its progress lines once it ends, and whether the plan stopped.
fn merge_meanwhile(bed: &Bed) -> std::thread::JoinHandle<Result<Merged, String>> {
    let home = bed.home.path().to_owned();
    let options = bed.mesh_options();
    std::thread::spawn(move || Library::open(&home, options)?.merge("cat"))
}

/// `status --output json`, and the exit code `status` ends with.
fn status(bed: &Bed) -> (Value, u8) {
    let status = bed
        .library()
        .try_status()
        .unwrap_or_else(|error| panic!("{error}"));
    (status.json, status.code)
}

/// The position of the first progress line holding `needle`.
fn line_of(out: &str, needle: &str) -> usize {
    out.lines()
        .position(|line| line.contains(needle))
        .unwrap_or_else(|| panic!("no line holds {needle:?}:\n{out}"))
}

/// Starts `merge cat` without waiting for it: a process, killed in the middle.
fn spawn_merge(bed: &Bed) -> Child {
    bed.command(&["merge", "cat"])
        .env("MESH_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until `node`'s record of plan `id`'s rollout of `module` says it was sent.
fn wait_until_sent(bed: &Bed, id: &str, module: &str, node: &str) {
    let records = bed.records();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(record) = support::fleet::rollout_part(&records, id, module, node) {
            if matches!(
                record["progress"]["progress"].as_str(),
                Some("sent" | "applied")
            ) {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{id} never recorded `{module}` sent to {node}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `node`'s last report as `status` reads it: on a fleet, from the bus's reports stream, the
/// one source (the rule “Every report is heard, from one source”).
fn last_report(bed: &Bed, node: &str) -> Value {
    let (status, _) = status(bed);
    status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == node)
        .map(|n| n["report"].clone())
        .unwrap_or_else(|| panic!("no node {node}: {status}"))
}

/// SIGKILL for a host, which stays down until started again.
fn kill_host(bed: &mut Bed, node: &str) {
    let host = bed.hosts.get_mut(node).unwrap();
    host.kill().unwrap();
    host.wait().unwrap();
}

#[test]
fn a_merge_rolls_out_one_machine_first_over_the_bus_and_a_broken_first_node_stops_it() {
    let (mut bed, repo) = setup(&["a", "b", "c"]);
    let first = repo.git(&["rev-parse", "HEAD"]);

    // The first merge: built into the registry, the bus node first (its users are new to the
    // bus), then everyone else once the bus confirmed them.
    let out = bed.library().merge_expecting("cat", 0);
    let why = line_of(
        &out,
        "`base`: the bus's users differ from the ones it confirmed",
    );
    assert!(out
        .lines()
        .nth(why)
        .unwrap()
        .ends_with("`bus`, holding the bus, goes first"));
    let bus_sent = line_of(&out, "`base`: sent `bus` (first)");
    let bus_grants = line_of(&out, "`base`: grants for bus (the bus's users changed");
    let confirmed = line_of(&out, "(the bus confirmed its new users)");
    assert!(
        why < bus_grants && bus_grants < bus_sent && bus_sent < confirmed,
        "{out}"
    );
    for node in ["a", "b", "c"] {
        assert!(
            line_of(&out, &format!("sent `{node}`")) > confirmed,
            "{out}"
        );
    }
    for node in ["bus", "a", "b", "c"] {
        assert_eq!(hello(&bed, node), "v1\n", "{node}");
    }
    assert_eq!(
        std::fs::read_to_string(bed.root("bus").join("etc/nats/mesh-users.conf")).unwrap(),
        bed.library().users_text().unwrap()
    );
    let done = plan(&bed, "plan-1");
    assert_eq!(done["plan"]["state"]["state"], "done", "{done}");
    assert_eq!(done["plan"]["rollouts"]["base"]["first"], "bus");
    let deployed = json(&bed.record("deployed/base.json").unwrap());
    assert_eq!(deployed["commit"], first.as_str());
    let digest = deployed["archive"]["digest"].as_str().unwrap();
    let tags = bed.registry.get("/v2/mesh/archives/tags/list").unwrap();
    assert!(
        tags.contains(digest.trim_start_matches("sha256:")),
        "{tags}"
    );
    // The anonymous are refused the registry; the collector, signing as the
    // controller with its seed over TLS and using the controller's registry credentials,
    // holds every kept archive.
    let anonymous = bed
        .registry
        .get_as(None, "/v2/mesh/archives/tags/list")
        .unwrap();
    assert!(anonymous.starts_with("HTTP/1.1 401"), "{anonymous}");
    let collector = support::fleet::controller_binary().with_file_name("mesh-collector");
    let swept = std::process::Command::new(&collector)
        .arg("--home")
        .arg(bed.home.path())
        .args(["--bus", &bed.url, "--bus-ca"])
        .arg(&bed.pki.ca_file)
        .args(bed.controller_store_flags())
        .args(["--output", "json", "sweep", "--dry-run"])
        .env_remove("MESH_BUS_PASSWORD_FILE")
        .output()
        .unwrap();
    assert_eq!(swept.status.code(), Some(0), "{swept:?}");
    let answer: Value = serde_json::from_slice(&swept.stdout).unwrap();
    assert!(
        answer
            .to_string()
            .contains(digest.trim_start_matches("sha256:")),
        "{answer}"
    );

    // A commit whose file `a` (first by name now that the users are as confirmed) cannot own:
    // the rollout stops there, naming the failure, and nobody else is sent the new build.
    commit_base(
        &repo,
        "v2\n",
        "",
        "owner = \"alice\"\n",
        "base v2, owned by alice",
    );
    let out = bed.library().merge_expecting("cat", 3);
    line_of(&out, "`base`: sent `a` (first)");
    assert!(
        !out.contains("sent `b`") && !out.contains("sent `bus`"),
        "{out}"
    );
    for node in ["bus", "b", "c"] {
        assert_eq!(hello(&bed, node), "v1\n", "{node} keeps the old build");
    }
    let stopped = plan(&bed, "plan-2");
    assert_eq!(stopped["plan"]["state"]["state"], "stopped", "{stopped}");
    let outcome = &stopped["plan"]["rollouts"]["base"]["outcome"];
    assert_eq!(outcome["node"], "a", "{outcome}");
    let reason = outcome["reason"].as_str().unwrap();
    assert!(
        reason.contains("base/file/hello") && reason.contains("alice"),
        "{reason}"
    );
    // A stopped rollout needs a person: status exits 3.
    let (stopped, code) = status(&bed);
    assert_eq!(code, 3, "{stopped}");
    assert_eq!(stopped["stopped"][0]["node"], "a", "{stopped}");

    // A host that never reports: the rollout stops at it with "no report" within the module's
    // deadline, and the others keep the old build.
    kill_host(&mut bed, "a");
    commit_base(&repo, "v3\n", "deadline-secs = 3\n", "", "base v3");
    let started = Instant::now();
    bed.library().merge_expecting("cat", 3);
    assert!(started.elapsed() < Duration::from_secs(30));
    let stopped = plan(&bed, "plan-3");
    let outcome = &stopped["plan"]["rollouts"]["base"]["outcome"];
    assert_eq!(outcome["node"], "a", "{outcome}");
    assert!(
        outcome["reason"]
            .as_str()
            .unwrap()
            .starts_with("no report of the new declaration applied within 3 s"),
        "{outcome}"
    );
    for node in ["bus", "b", "c"] {
        assert_eq!(hello(&bed, node), "v1\n", "{node} keeps the old build");
    }
}

#[test]
fn a_rollout_rides_out_a_bus_restart_and_a_killed_controller_resumes_from_the_record_on_another_machine(
) {
    let (mut bed, repo) = setup(&["a", "b"]);
    bed.library().merge_expecting("cat", 0);

    // The bus restarted while the rollout waits on its first node: the rollout completes.
    kill_host(&mut bed, "a");
    commit_base(&repo, "v2\n", "", "", "base v2");
    let merging = merge_meanwhile(&bed);
    wait_until_sent(&bed, "plan-2", "base", "a");
    bed.server.lock().unwrap().restart().unwrap();
    bed.start_host("a");
    let merged = merging.join().unwrap().unwrap();
    assert!(!merged.stopped, "{}\n{:#}", merged.lines, merged.json);
    for node in ["bus", "a", "b"] {
        assert_eq!(hello(&bed, node), "v2\n", "{node}");
    }
    assert_eq!(plan(&bed, "plan-2")["plan"]["state"]["state"], "done");

    // The controller killed while its first node applies: `plans resume` finishes the
    // rollout from the record, and the merge is not planned again.
    kill_host(&mut bed, "a");
    let third = commit_base(&repo, "v3\n", "", "", "base v3");
    let mut killed = spawn_merge(&bed);
    wait_until_sent(&bed, "plan-3", "base", "a");
    killed.kill().unwrap(); // SIGKILL
    assert_eq!(killed.wait().unwrap().code(), None);
    for node in ["bus", "b"] {
        assert_eq!(
            hello(&bed, node),
            "v2\n",
            "{node} was not sent before the kill"
        );
    }
    bed.start_host("a");
    // It resumes on "another machine": a home holding only the operator's catalogue checkout,
    // and the controller's seed to open the bus. Everything else is read from the bus.
    let elsewhere = tempfile::Builder::new()
        .prefix("mesh-elsewhere-")
        .tempdir()
        .unwrap();
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(bed.home.path().join("catalogue"))
        .arg(elsewhere.path())
        .status()
        .unwrap();
    assert!(copied.success());
    // `plans resume` there, given the bus, the controller's seed (`--bus-seed`) and the store.
    let mut options = bed.mesh_options();
    options.bus = options
        .bus
        .map(|bus| bus.with_seed_file(bed.controller_seed_file()));
    let resumed = Library::open(elsewhere.path(), options)
        .and_then(|library| library.plans_resume(None))
        .unwrap_or_else(|error| panic!("plans resume: {error}"));
    // `plans resume` exits 0: no plan stopped.
    assert!(!resumed.stopped, "{}\n{:#?}", resumed.lines, resumed.plans);
    for node in ["bus", "a", "b"] {
        assert_eq!(hello(&bed, node), "v3\n", "{node}");
    }
    for record in ["inventory.toml", "sent", "reports", "store/modules"] {
        assert!(
            !elsewhere.path().join(record).exists(),
            "{record} was written on the other machine, not on the bus"
        );
    }
    assert!(support::fleet::json_records(elsewhere.path().join("plans")).is_empty());
    let record = plan(&bed, "plan-3");
    assert_eq!(record["plan"]["state"]["state"], "done", "{record}");
    assert_eq!(record["plan"]["rollouts"]["base"]["first"], "a");
    bed.library().merge_expecting("cat", 0);
    let plans = bed.library().plans();
    let for_third = plans
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["commit"] == third.as_str())
        .count();
    assert_eq!(for_third, 1, "{plans}");
}

#[test]
fn a_host_killed_mid_apply_reports_mid_change_and_the_rollout_goes_on_once_it_converges() {
    let (mut bed, repo) = setup(&["a", "b"]);
    bed.library().merge_expecting("cat", 0);
    // A new module of many files on `a` and `b`: its apply takes a while.
    let mut module = String::from("name = \"bulk\"\n");
    let mut files = Vec::new();
    for i in 0..1500 {
        module.push_str(&format!(
            "\n[files.f{i}]\nsource = \"files/f{i}\"\npath = \"/srv/bulk/f{i}\"\n"
        ));
        files.push((
            format!("modules/bulk/files/f{i}"),
            format!("{i}\n").repeat(40),
        ));
    }
    files.push(("modules/bulk/module.toml".into(), module));
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    repo.write(&files);
    repo.commit("bulk");
    let text_before = bed.record("inventory.toml").unwrap();
    bed.put_inventory(&format!("{text_before}bulk = [\"a\", \"b\"]\n"));

    let merging = merge_meanwhile(&bed);
    let state = bed.state_dir("a");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !mesh_apply::is_mid_change(&state).unwrap() {
        assert!(Instant::now() < deadline, "a never started the apply");
        std::thread::sleep(Duration::from_millis(1));
    }
    kill_host(&mut bed, "a");
    assert!(mesh_apply::is_mid_change(&state).unwrap());
    assert!(
        !bed.root("b").join("srv/bulk").exists(),
        "b is not sent before its first node applied"
    );
    bed.start_host("a");

    let merged = merging.join().unwrap().unwrap();
    assert!(!merged.stopped, "{}\n{:#}", merged.lines, merged.json);
    let stdout = merged.lines;
    let mid = line_of(
        &stdout,
        "`bulk`: `a` reported it mid-change, not yet applied",
    );
    let rest = line_of(&stdout, "`bulk`: sent `b`");
    assert!(mid < rest, "{stdout}");
    for node in ["a", "b"] {
        for i in [0, 777, 1499] {
            assert_eq!(
                std::fs::read_to_string(bed.root(node).join(format!("srv/bulk/f{i}"))).unwrap(),
                format!("{i}\n").repeat(40),
                "{node}"
            );
        }
    }
    let record = plan(&bed, "plan-2");
    assert_eq!(record["plan"]["state"]["state"], "done", "{record}");
    let report = last_report(&bed, "a");
    assert_eq!(report["machine"], "converged", "{report}");
}

/// The rule “One machine first” over the bus: with `on-failure = "revert"`, a first node that fails
/// the new build is sent back the declaration it ran before and converges on it again; no other
/// node is sent the new build, and the plan and `status` name the revert.
#[test]
fn a_failed_first_node_is_sent_back_what_it_ran_over_the_bus_when_the_module_says_revert() {
    let (bed, repo) = setup(&["a", "b"]);
    let revert = "on-failure = \"revert\"\n";
    commit_base(&repo, "v1\n", revert, "", "base v1, revert on failure");
    bed.library().merge_expecting("cat", 0);
    let nodes = ["bus", "a", "b"];
    for node in nodes {
        assert_eq!(hello(&bed, node), "v1\n", "{node}");
    }
    let sent_v1: Vec<String> = nodes
        .iter()
        .map(|node| bed.record(&format!("sent/{node}.json")).unwrap())
        .collect();
    let (settled, code) = status(&bed);
    assert_eq!(code, 0, "{settled}");
    let v1_of_a = settled["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == "a")
        .unwrap()["sent"]
        .as_str()
        .unwrap()
        .to_owned();

    // v2 changes the file and gives `alice`, an account no node has, a membership: `a` (first
    // by name) writes the new file and fails the membership.
    commit_base(
        &repo,
        "v2\n",
        revert,
        "\n[memberships.audio]\naccount = \"alice\"\ngroup = \"audio\"\n",
        "base v2, alice plays audio",
    );
    let out = bed.library().merge_expecting("cat", 3);
    let sent = line_of(&out, "`base`: sent `a` (first)");
    let stopped = line_of(&out, "`base`: stopped at `a`: base/membership/audio");
    // Grants before code: the revert is granted before it is sent.
    let granted = line_of(&out, "`base`: grants for `a` before it is sent back");
    let back = line_of(
        &out,
        &format!(
            "`base`: sent `a` back what it ran before ({})",
            &v1_of_a[..19]
        ),
    );
    assert!(
        sent < stopped && stopped < granted && granted < back,
        "{out}"
    );
    assert!(
        !out.contains("sent `b`") && !out.contains("sent `bus`"),
        "{out}"
    );

    // `a` runs the old build again: its file was written back and its report is of the old
    // declaration, converged. The others were sent nothing: what they were last sent is their
    // v1 declaration.
    for node in nodes {
        assert_eq!(hello(&bed, node), "v1\n", "{node}");
    }
    for (node, v1) in nodes.iter().zip(&sent_v1) {
        assert_eq!(
            bed.record(&format!("sent/{node}.json")).as_ref(),
            Some(v1),
            "{node}"
        );
    }
    let report = last_report(&bed, "a");
    assert_eq!(report["declaration"], v1_of_a.as_str(), "{report}");
    assert_eq!(report["machine"], "converged", "{report}");
    assert_eq!(
        report["resources"]["base/file/hello"],
        serde_json::json!({"outcome": "applied", "changed": ["content"]}),
        "{report}"
    );

    // The plan stopped at `a`, sent nobody else, and names the revert; so does `status`.
    let record = plan(&bed, "plan-2");
    assert_eq!(record["plan"]["state"]["state"], "stopped", "{record}");
    assert_eq!(record["plan"]["state"]["node"], "a", "{record}");
    let rollout = &record["plan"]["rollouts"]["base"];
    assert_eq!(rollout["first"], "a", "{rollout}");
    assert_eq!(rollout["sent"], 1, "{rollout}");
    // The plan stopped, the newest of its branch: it may be retried (`plans retry`), so `a`'s
    // record of it is kept, not folded, saying where it stood.
    let part = support::fleet::rollout_part(&bed.records(), "plan-2", "base", "a")
        .unwrap_or_else(|| panic!("`a`'s record of plan-2 is kept: {record}"));
    assert_eq!(part["progress"]["progress"], "sent", "{part}");
    assert!(record["work"]["base"]["summary"].is_null(), "{record}");
    assert_eq!(rollout["outcome"]["node"], "a", "{rollout}");
    assert_eq!(
        record["work"]["base"]["reverted"],
        serde_json::json!({ "a": v1_of_a }),
        "{record}"
    );
    let (status, code) = status(&bed);
    assert_eq!(code, 3, "{status}");
    let stopped = &status["stopped"][0];
    assert_eq!(stopped["node"], "a", "{status}");
    assert_eq!(stopped["reverted"], v1_of_a.as_str(), "{status}");
    let node_a = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == "a")
        .unwrap();
    assert_eq!(node_a["current"], true, "{node_a}");
    let shown = bed.expect(&["plans", "show", "plan-2"], 0);
    assert!(
        shown.contains(&format!(
            "; `a` sent back what it ran before ({})\n",
            &v1_of_a[..19]
        )),
        "{shown}"
    );
    let shown = bed.expect(&["status"], 3);
    assert!(
        shown.contains(&format!(
            "    `a` was sent back what it ran before ({})\n",
            &v1_of_a[..19]
        )),
        "{shown}"
    );
}
