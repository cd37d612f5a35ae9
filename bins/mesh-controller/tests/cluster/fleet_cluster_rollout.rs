//! A merge's one-first rollout to real `mesh-host serve` processes on a loopback cluster of
//! three nats-servers, the servers lost at a named step of the rollout — the
//! controller paused there by its fail point (`FAILPOINTS=STEP=return(hold)`, `src/fail.rs`), the
//! server killed, the controller released — never after a sleep:
//! - the server the controller is connected to killed while the first node applies: the
//!   records read back byte for byte, a second controller trying to drive meanwhile waits for
//!   the plans lease the whole time (its holder's renewals ride out the loss), and the rollout
//!   completes;
//! - the stream leader of `MESH_DECLARATIONS` killed, then started again with its store
//!   deleted while the rollout goes on: the rollout completes and the emptied server catches up;
//! - two servers of three killed (quorum lost): the merge fails naming the lost quorum with
//!   nothing half-written (every record as at the step), and `plans resume` finishes it once
//!   quorum returns.
//!
//! Every node's declarations are each stored once and applied once (its last report says the
//! file was written, not found unchanged as a second apply would), every report heard (the
//! plan done, `status` true).
//!
//! The merges held at their fail points, and the second controller waiting for the lease, are
//! the binary (processes paused, released and ended, their standard error read); the rest —
//! the repository registered, the first merge, `status`, the plans read, the `plans resume`
//! once quorum is back — calls the controller library in process on the bed's bus
//! (`Bed::library`).

use crate::support;
use mesh_bus::records::KvRecords;
use mesh_bus::subjects::DECLARATIONS_STREAM;
use mesh_bus::{NatsBus, NatsOptions};
use mesh_store::record_store::RecordStore as _;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, Read as _};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::fleet::{runtime, Bed};
use support::{wait_for, Repo};

/// How long a condition is waited for; it only bounds a failure.
const PATIENCE: Duration = Duration::from_secs(180);

const LEASE: &str = mesh_store::lease::PLANS_LEASE;
const RECORDS_STREAM: &str = "KV_mesh-records";
/// The stream of the rollouts' records (a bucket per top-level directory): the first record a
/// rollout writes after its step is there.
const ROLLOUTS_STREAM: &str = "KV_mesh-records-rollouts";

fn commit_base(repo: &Repo, hello: &str) -> String {
    repo.write(&[
        (
            "modules/base/module.toml",
            "name = \"base\"\n\n[files.hello]\nsource = \"files/hello\"\npath = \"/etc/mesh/hello\"\n",
        ),
        ("modules/base/files/hello", hello),
    ]);
    repo.commit(&format!("base {}", hello.trim()))
}

/// A bed of `bus` and `nodes` on a cluster of three, every host started, the repository `cat`
/// registered with `base` saying `v1`, and merged.
fn setup(nodes: &[&str]) -> (Bed, Repo) {
    let mut bed = Bed::on_cluster(nodes, 3);
    for node in std::iter::once("bus").chain(nodes.iter().copied()) {
        bed.start_host(node);
    }
    let repo = Repo::new();
    commit_base(&repo, "v1\n");
    bed.library().repo_add("cat", repo.path()).unwrap();
    let merged = bed.library().merge("cat").unwrap();
    // `merge` exits 0: the plan did not stop.
    assert!(!merged.stopped, "{}\n{:#}", merged.lines, merged.json);
    (bed, repo)
}

fn hello(bed: &Bed, node: &str) -> String {
    std::fs::read_to_string(bed.root(node).join("etc/mesh/hello")).unwrap_or_default()
}

/// The test's own connection options: the controller's key, another name, so that the
/// servers' client lists tell the controller's connections from the test's.
fn test_options(bed: &Bed) -> NatsOptions {
    NatsOptions {
        name: Some("the test".to_owned()),
        ..bed.controller_options()
    }
}

/// The test's own reader of the records. Its calls are tried again for [`PATIENCE`], not the
/// default 30 s: what is asserted is what the records hold after a server is killed, not how
/// soon the cluster answers: on a 2.9 cluster, listings made just after a server was killed
/// were seen to go unanswered for some 80 s (while the cluster still counted the killed server
/// current), then to answer whole.
fn test_records(bed: &Bed) -> KvRecords {
    KvRecords::open(&test_options(bed))
        .unwrap_or_else(|e| panic!("{e}"))
        .with_retry_limit(PATIENCE)
}

/// Every record but the lease (its holder's renewals move it), byte for byte.
fn snapshot(records: &KvRecords) -> BTreeMap<String, Vec<u8>> {
    records
        .keys_under("")
        .unwrap_or_else(|e| panic!("{}", chain(&e)))
        .into_iter()
        .filter(|key| key != LEASE)
        .map(|key| {
            let bytes = records
                .get(&key)
                .unwrap_or_else(|e| panic!("{key}: {}", chain(&e)))
                .unwrap_or_else(|| panic!("{key} listed but not there"));
            (key, bytes)
        })
        .collect()
}

/// An error and its sources, on one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// Fails naming every record that differs from `expected` (missing, added, changed).
fn assert_same(
    found: &BTreeMap<String, Vec<u8>>,
    expected: &BTreeMap<String, Vec<u8>>,
    what: &str,
) {
    let mut differ = Vec::new();
    for (key, bytes) in expected {
        match found.get(key) {
            None => differ.push(format!("{key}: missing")),
            Some(now) if now != bytes => differ.push(format!(
                "{key}: was\n{}\nnow\n{}",
                String::from_utf8_lossy(bytes),
                String::from_utf8_lossy(now)
            )),
            Some(_) => {}
        }
    }
    for key in found.keys().filter(|key| !expected.contains_key(*key)) {
        differ.push(format!(
            "{key}: added\n{}",
            String::from_utf8_lossy(&found[key])
        ));
    }
    assert!(differ.is_empty(), "{what}:\n{}", differ.join("\n"));
}

/// The lease record as stored.
fn lease(records: &KvRecords) -> Value {
    serde_json::from_slice(&records.get(LEASE).unwrap().unwrap()).unwrap()
}

/// `merge cat` paused at `step` (its fail point), its output collected.
struct PausedMerge {
    child: Child,
    dir: tempfile::TempDir,
    stderr: Collected,
}

impl PausedMerge {
    fn start(bed: &Bed, step: &str) -> PausedMerge {
        PausedMerge::start_command(bed, &["merge", "cat"], step)
    }

    fn start_command(bed: &Bed, args: &[&str], step: &str) -> PausedMerge {
        let dir = tempfile::Builder::new()
            .prefix("mesh-pause-")
            .tempdir()
            .unwrap();
        let mut child = bed
            .command(args)
            .env("MESH_LOG", "error")
            .env(
                mesh_controller::fail::FAILPOINTS,
                mesh_controller::fail::hold_at(step, 1),
            )
            .env(mesh_controller::fail::HOLD_DIR, dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Collected::from(child.stderr.take().unwrap());
        PausedMerge { child, dir, stderr }
    }

    /// Waits until it is paused at its step.
    fn wait_paused(&mut self) {
        let marker = self.dir.path().join(mesh_controller::fail::PAUSED_FILE);
        wait_for("the controller paused at its step", PATIENCE, || {
            if marker.exists() {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "the controller ended ({status}) before its step:\n{}",
                    self.stderr.now()
                );
            }
            Err("not yet".to_owned())
        });
    }

    fn release(&self) {
        std::fs::write(
            self.dir.path().join(mesh_controller::fail::RELEASE_FILE),
            "",
        )
        .unwrap();
    }

    /// Waits for it to end: `(exit code, stdout, stderr)`.
    fn finish(mut self) -> (Option<i32>, String, String) {
        let mut stdout = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        let status = self.child.wait().unwrap();
        (status.code(), stdout, self.stderr.all())
    }
}

impl Drop for PausedMerge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pipe read to its end on a thread of its own, line by line.
struct Collected {
    text: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Collected {
    fn from(pipe: impl std::io::Read + Send + 'static) -> Collected {
        let text = Arc::new(Mutex::new(String::new()));
        let into = Arc::clone(&text);
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines() {
                let Ok(line) = line else { return };
                let mut text = into.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
        });
        Collected {
            text,
            reader: Some(reader),
        }
    }

    /// What was read so far.
    fn now(&self) -> String {
        self.text.lock().unwrap().clone()
    }

    /// Everything, once the pipe is closed (its process ended).
    fn all(&mut self) -> String {
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        self.now()
    }
}

/// Waits until `node` applied `expected` and the bus holds its report of what it was sent
/// (`status` reads the latest report from the reports stream).
fn wait_applied(bed: &Bed, node: &str, expected: &str) {
    wait_for(&format!("{node} applied {expected:?}"), PATIENCE, || {
        if hello(bed, node) != expected {
            return Err(format!("its file says {:?}", hello(bed, node)));
        }
        let status = bed.try_library()?.try_status()?.json;
        let current = status["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|n| n["node"] == node && n["current"] == true);
        if current {
            Ok(())
        } else {
            Err(format!("status: {status}"))
        }
    });
}

/// The server index holding the controller's own connection (`mesh-controller`, the fleet's:
/// its sends and the reports it hears).
fn controller_server(bed: &Bed) -> usize {
    wait_for("the controller's connection on a server", PATIENCE, || {
        let mut bus = bed.server.lock().unwrap();
        let cluster = bus.cluster();
        (0..cluster.len())
            .find(|&index| {
                cluster
                    .client_names(index)
                    .iter()
                    .any(|name| name == "mesh-controller")
            })
            .ok_or_else(|| "no server lists it".to_owned())
    })
}

/// The server index leading `stream`, once it has a running leader.
fn leader_of(bed: &Bed, stream: &str) -> usize {
    let rt = runtime();
    let options = test_options(bed);
    wait_for(
        &format!("{stream} led by a running server"),
        PATIENCE,
        || {
            let leader = rt.block_on(support::fleet::stream_leader(&options, stream))?;
            let mut bus = bed.server.lock().unwrap();
            let cluster = bus.cluster();
            cluster
                .index_of(&leader)
                .filter(|&index| cluster.server(index).is_running())
                .ok_or_else(|| format!("led by {leader}, not running"))
        },
    )
}

/// Every declaration the declarations stream holds, by node: its payloads in order.
fn declarations_stored(bed: &Bed) -> BTreeMap<String, Vec<Vec<u8>>> {
    let rt = runtime();
    rt.block_on(async {
        let bus = NatsBus::connect(&test_options(bed)).await.unwrap();
        let mut stream = bus
            .jetstream()
            .get_stream(DECLARATIONS_STREAM)
            .await
            .unwrap();
        let state = stream.info().await.unwrap().state.clone();
        let mut stored: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
        for sequence in state.first_sequence..=state.last_sequence {
            // A sequence past a subject's limit is gone.
            if let Ok(message) = stream.get_raw_message(sequence).await {
                let node = message
                    .subject
                    .rsplit('.')
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                stored
                    .entry(node)
                    .or_default()
                    .push(message.payload.to_vec());
            }
        }
        stored
    })
}

/// No declaration stored twice for a node, and each node's last report says `base`'s file was
/// written by its last apply (a declaration applied a second time reports it unchanged); every
/// node current (`status` true, exit 0).
/// `status --output json` once it exits 0. It reads each node's last report from the reports
/// stream, the one source; the rollout heard the report on its subscription. A report
/// published while the stream's leader was being elected again (its server killed) reaches the
/// subscription but not the stream, and the host's heartbeat (1 s here) publishes it again:
/// this waits for the stream to hold it, and the caller checks what it says.
fn status_once_current(bed: &Bed) -> Value {
    wait_for("status showing every node current", PATIENCE, || {
        let status = bed.try_library()?.try_status()?;
        if status.code == 0 {
            Ok(status.json)
        } else {
            Err(format!("exit {}\n{}", status.code, status.document))
        }
    })
}

fn applied_once_and_heard(bed: &Bed, nodes: &[&str]) {
    for (node, payloads) in declarations_stored(bed) {
        let distinct: BTreeSet<&Vec<u8>> = payloads.iter().collect();
        assert_eq!(
            distinct.len(),
            payloads.len(),
            "a declaration of {node} was stored twice"
        );
    }
    let status = status_once_current(bed);
    for node in nodes {
        let shown = status["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node"] == *node)
            .unwrap_or_else(|| panic!("no {node}: {status}"));
        assert_eq!(shown["current"], true, "{shown}");
        assert_eq!(shown["report"]["machine"], "converged", "{shown}");
        assert_eq!(
            shown["report"]["resources"]["base/file/hello"],
            serde_json::json!({"outcome": "applied", "changed": ["content"]}),
            "{node}: {shown}"
        );
    }
}

fn plan_state(bed: &Bed, id: &str) -> Value {
    bed.library().plan(id).unwrap()["plan"]["state"].clone()
}

#[test]
fn a_rollout_completes_while_the_controllers_server_and_then_the_declarations_leader_are_killed() {
    let nodes = ["a", "b", "bus"];
    let (bed, repo) = setup(&["a", "b"]);
    for node in nodes {
        assert_eq!(hello(&bed, node), "v1\n", "{node}");
    }

    // The server the controller is connected to, killed while the first node (`a`, first by
    // name) applies.
    commit_base(&repo, "v2\n");
    let mut merge = PausedMerge::start(&bed, "sent:base:a");
    merge.wait_paused();
    wait_applied(&bed, "a", "v2\n");
    let records = test_records(&bed);
    let before = snapshot(&records);
    let holder = lease(&records)["holder"].clone();
    assert_eq!(holder["pid"], merge.child.id(), "{holder}");
    let killed = controller_server(&bed);
    bed.server.lock().unwrap().cluster().kill(killed);
    assert_eq!(
        snapshot(&records),
        before,
        "the records read back byte for byte"
    );

    // A second controller tries to drive meanwhile: it waits for the lease, whose holder's
    // renewals go on across the loss, for longer than a lease not renewed is kept.
    let mut second = bed
        .command(&["plans", "resume"])
        .env("MESH_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut second_stderr = Collected::from(second.stderr.take().unwrap());
    let mut second_stdout = Collected::from(second.stdout.take().unwrap());
    wait_for(
        "the second controller waiting for the lease",
        PATIENCE,
        || {
            let said = second_stderr.now();
            if said.contains("waiting for the plans lock, held by merge cat") {
                Ok(())
            } else {
                Err(said)
            }
        },
    );
    let beat = lease(&records)["beat"].as_u64().unwrap();
    let renewals = mesh_store::lease::STALE.as_secs() / mesh_store::lease::RENEW.as_secs() + 1;
    wait_for("the lease renewed past its staleness", PATIENCE, || {
        let now = lease(&records);
        assert_eq!(now["holder"], holder, "the lease changed hands: {now}");
        if now["beat"].as_u64().unwrap() >= beat + renewals {
            Ok(())
        } else {
            Err(now.to_string())
        }
    });
    assert!(
        second.try_wait().unwrap().is_none(),
        "the second controller did not wait: {}",
        second_stderr.now()
    );
    assert_eq!(second_stdout.now(), "");

    merge.release();
    let (code, stdout, stderr) = merge.finish();
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    for node in nodes {
        assert_eq!(hello(&bed, node), "v2\n", "{node}");
    }
    // The second controller had the lease only once the first let it go: nothing left to drive.
    let status = second.wait().unwrap();
    let said = second_stdout.all();
    assert!(status.success(), "{said}{}", second_stderr.all());
    assert_eq!(said, "no open plans\n");
    assert_eq!(plan_state(&bed, "plan-2")["state"], "done");
    applied_once_and_heard(&bed, &nodes);
    {
        let mut bus = bed.server.lock().unwrap();
        let cluster = bus.cluster();
        cluster.start_again(killed).unwrap();
        cluster.wait_until_formed().unwrap();
    }

    // The leader of the declarations stream, killed while the first node applies, then started
    // again with its store deleted while the rollout goes on.
    commit_base(&repo, "v3\n");
    let mut merge = PausedMerge::start(&bed, "sent:base:a");
    merge.wait_paused();
    wait_applied(&bed, "a", "v3\n");
    let before_second = snapshot(&records);
    let leader = leader_of(&bed, DECLARATIONS_STREAM);
    bed.server.lock().unwrap().cluster().kill(leader);
    assert_same(
        &snapshot(&records),
        &before_second,
        "the records read back byte for byte",
    );
    bed.server
        .lock()
        .unwrap()
        .cluster()
        .start_empty(leader)
        .unwrap();
    merge.release();
    let (code, stdout, stderr) = merge.finish();
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    for node in nodes {
        assert_eq!(hello(&bed, node), "v3\n", "{node}");
    }
    assert_eq!(plan_state(&bed, "plan-3")["state"], "done");
    applied_once_and_heard(&bed, &nodes);

    // The emptied server caught up: it holds what the others hold.
    for stream in [DECLARATIONS_STREAM, RECORDS_STREAM] {
        let other = (leader + 1) % 3;
        wait_for(
            &format!("the emptied server holding {stream} as the others"),
            PATIENCE,
            || {
                let mut bus = bed.server.lock().unwrap();
                let cluster = bus.cluster();
                let theirs = cluster.stream_state(other, stream);
                let its = cluster.stream_state(leader, stream);
                if its.is_some() && its == theirs {
                    Ok(())
                } else {
                    Err(format!("{its:?} against {theirs:?}"))
                }
            },
        );
    }
    // No record lost: every one there before either kill is there still — but the records
    // of the rollouts of a plan that ended, which its fold removes.
    let after: BTreeSet<String> = records.keys_under("").unwrap().into_iter().collect();
    let folded = |key: &str| {
        key.strip_prefix("rollouts/")
            .and_then(|rest| rest.split('/').next())
            .is_some_and(|plan| bed.library().plan(plan).unwrap()["nodes-folded"] == true)
    };
    for key in before.keys().chain(before_second.keys()) {
        assert!(after.contains(key) || folded(key), "{key} was lost");
    }
}

#[test]
fn with_one_server_of_three_left_a_rollout_fails_naming_the_lost_quorum_and_plans_resume_finishes_it(
) {
    let nodes = ["a", "bus"];
    let (bed, repo) = setup(&["a"]);
    commit_base(&repo, "v2\n");
    // The records' calls are tried again for 10 s, not the default 30, while the bus gives
    // no answer: the failure comes sooner, and says the limit it was given.
    let mut merge = PausedMerge::start_command(
        &bed,
        &["--bus-retry-limit", "10", "merge", "cat"],
        "sent:base:a",
    );
    merge.wait_paused();
    wait_applied(&bed, "a", "v2\n");
    let records = test_records(&bed);
    let before = snapshot(&records);

    // Two of three servers lost — the rollouts' records' leader and one more, so the one left
    // is a follower of the stream the rollout writes next, and takes no write (a leader that
    // had not yet seen its quorum lost would hold the write in doubt, and store it when quorum
    // returns): the rollout's next record cannot be stored. It fails naming the lost quorum,
    // and the bus node is not sent the new build.
    let leader = leader_of(&bed, ROLLOUTS_STREAM);
    let second = (leader + 1) % 3;
    {
        let mut bus = bed.server.lock().unwrap();
        let cluster = bus.cluster();
        cluster.kill(leader);
        cluster.kill(second);
    }
    merge.release();
    let (code, stdout, stderr) = merge.finish();
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("lost its quorum"), "{stderr}");
    assert!(stderr.contains("10s"), "the limit given: {stderr}");
    assert!(!stderr.contains("30s"), "not the default: {stderr}");
    assert_eq!(hello(&bed, "bus"), "v1\n");

    // Quorum back: nothing of the failed rollout's writes was stored (every record as at the
    // step, byte for byte), and `plans resume` finishes it.
    {
        let mut bus = bed.server.lock().unwrap();
        let cluster = bus.cluster();
        cluster.start_again(second).unwrap();
        cluster.wait_until_formed().unwrap();
    }
    let records = wait_for("the records answering again", PATIENCE, || {
        let records = KvRecords::open(&test_options(&bed)).map_err(|e| e.to_string())?;
        records.keys_under("").map_err(|e| e.to_string())?;
        Ok(records)
    });
    assert_same(&snapshot(&records), &before, "nothing half-written");
    let resumed = bed.library().plans_resume(None).unwrap();
    // `plans resume` exits 0: no plan stopped.
    assert!(!resumed.stopped, "{}\n{:#?}", resumed.lines, resumed.plans);
    for node in nodes {
        assert_eq!(hello(&bed, node), "v2\n", "{node}");
    }
    assert_eq!(plan_state(&bed, "plan-2")["state"], "done");
    let status = status_once_current(&bed);
    for node in nodes {
        let shown = status["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node"] == node)
            .unwrap();
        assert_eq!(shown["current"], true, "{shown}");
    }
}
