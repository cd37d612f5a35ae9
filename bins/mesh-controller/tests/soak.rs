//! The soak (`scripts/soak`): a real fleet — one nats-server, five `mesh-host serve` running
//! containers under this machine's podman, `mesh-controller serve` — runs merges while one of
//! the controller's daemon, a host or nats-server is SIGKILLed at a random moment (not a named
//! step) and started again. After each round a checker verifies:
//! - no file is partially written: every managed file holds one of the contents a round
//!   wrote, and nothing else lies beside it;
//! - every node converges to the newest plan: its report is current and converged, its file
//!   says the newest round, its container runs the newest round;
//! - no plan is lost or driven twice: one plan per merged commit, each done or superseded;
//! - the records are consistent: every plan, sent declaration and report reads, and
//!   `records collect` reads every record.
//!
//! The test command runs its three rounds (`MESH_SOAK_ROUNDS` unset) with every other test;
//! `scripts/soak` runs it at length, with `MESH_SOAK_ROUNDS` (the script's default 50) and
//! `MESH_SOAK_SEED` (default: the clock; printed, so a run can be repeated). It prints one line
//! per round and a summary, and exits 1 on the first violation, naming it.
//!
//! The checker and the merges call the controller library in process on the bed's bus
//! (`Bed::library`); the daemon (`serve`) is the binary, killed and started again.

mod support;

use mesh_test_support::wait::try_wait_for;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};
use support::daemon::Daemon;
use support::fleet::{write, Bed};
use support::{wait_for, Repo};

/// The nodes running `app`'s container (the bus node holds the bus, and runs one too).
const NODES: [&str; 4] = ["a", "b", "c", "d"];

/// How long a round may take to converge after its kill before it is a violation.
const CONVERGE: Duration = Duration::from_secs(300);

/// The moment of a kill after the merge is announced is drawn from 0 to this.
const KILL_WITHIN_MS: u64 = 8_000;

/// A small random source (xorshift64*), seeded so that a run can be repeated: the soak's
/// choices, not cryptography.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What is killed in a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Victim {
    Controller,
    Host,
    Bus,
}

/// Every container whose name starts with the run's prefix, removed when dropped (declared
/// before the bed, so dropped after its hosts).
struct Containers(String);

impl Containers {
    fn remove_all(&self) {
        let out = Command::new("podman")
            .args(["ps", "--all", "--format", "{{.Names}}"])
            .output()
            .expect("podman runs");
        for name in String::from_utf8_lossy(&out.stdout).lines() {
            if name.starts_with(&self.0) {
                let _ = Command::new("podman")
                    .args(["rm", "--force", "--time", "0", name])
                    .output();
            }
        }
    }
}

impl Drop for Containers {
    fn drop(&mut self) {
        self.remove_all();
    }
}

fn image() -> String {
    std::env::var("MESH_TEST_IMAGE").unwrap_or_else(|_| {
        panic!("podman is not configured: run `source scripts/podman-env.sh` first (scripts/soak does)")
    })
}

/// `app`: one container that runs until stopped, knowing its round.
fn app_module(round: usize) -> String {
    format!(
        "name = \"app\"\n\n[containers.web]\nimage = \"{}\"\ncommand = [\"sh\", \"-c\", \"trap 'exit 0' TERM; sleep 100000 & wait\"]\nenv = {{ ROUND = \"{round}\" }}\n",
        image()
    )
}

const BASE: &str =
    "name = \"base\"\n\n[files.hello]\nsource = \"files/hello\"\npath = \"/etc/mesh/hello\"\n";

fn hello(round: usize) -> String {
    format!("round {round}\n")
}

fn commit_round(repo: &Repo, round: usize) -> String {
    repo.write(&[
        ("modules/base/module.toml", BASE),
        ("modules/base/files/hello", &hello(round)),
        ("modules/app/module.toml", &app_module(round)),
    ]);
    repo.commit(&format!("round {round}"))
}

/// The round `node`'s container runs (`ROUND` in its environment), if it runs.
fn container_round(prefix: &str, node: &str) -> Option<usize> {
    let out = Command::new("podman")
        .args([
            "inspect",
            "--type",
            "container",
            "--format",
            "{{.State.Running}} {{range .Config.Env}}{{.}} {{end}}",
            &format!("{prefix}{node}-mesh-app-web"),
        ])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split_whitespace();
    if words.next()? != "true" {
        return None;
    }
    words.find_map(|w| w.strip_prefix("ROUND=")?.parse().ok())
}

/// Whether the fleet converged to `round`: `status` exits 0 with every node current and
/// converged, every file says the round, every container runs it. Otherwise what is not.
fn converged(bed: &Bed, prefix: &str, round: usize) -> Result<(), String> {
    let said = bed.try_library()?.try_status()?;
    if said.code != 0 {
        return Err(format!("status exits {}: {}", said.code, said.document));
    }
    let status = said.json;
    for node in status["nodes"].as_array().ok_or("status lists no nodes")? {
        if node["current"] != true || node["report"]["machine"] != "converged" {
            return Err(format!("{} is not current and converged", node["node"]));
        }
    }
    for node in std::iter::once("bus").chain(NODES) {
        let said =
            std::fs::read_to_string(bed.root(node).join("etc/mesh/hello")).unwrap_or_default();
        if said != hello(round) {
            return Err(format!("{node}'s file says {said:?}"));
        }
    }
    for node in NODES {
        match container_round(prefix, node) {
            Some(r) if r == round => {}
            other => return Err(format!("{node}'s container runs round {other:?}")),
        }
    }
    Ok(())
}

/// The checks after a round that converged (see the module's documentation); the first
/// violation.
fn check(bed: &Bed, rounds: &BTreeMap<String, usize>, round: usize) -> Result<(), String> {
    // No file partially written.
    for node in std::iter::once("bus").chain(NODES) {
        let dir = bed.root(node).join("etc/mesh");
        let names: Vec<String> = std::fs::read_dir(&dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        if names != ["hello"] {
            return Err(format!(
                "{} holds {names:?}, not only `hello`",
                dir.display()
            ));
        }
        let said = std::fs::read_to_string(dir.join("hello")).unwrap_or_default();
        if !(1..=round).any(|r| said == hello(r)) {
            return Err(format!("{node}'s file is partial: {said:?}"));
        }
    }
    // No plan lost or driven twice.
    let plans = bed.try_library()?.plans();
    let mut of_commit: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for plan in plans.as_array().ok_or("plans is not a list")? {
        let id = plan["id"].as_str().unwrap_or_default().to_owned();
        let state = &plan["state"]["state"];
        if state != "done" && state != "superseded" {
            return Err(format!("{id} is {state} after the round converged"));
        }
        of_commit
            .entry(plan["commit"].as_str().unwrap_or_default().to_owned())
            .or_default()
            .push(id);
    }
    for (commit, r) in rounds {
        match of_commit.get(commit).map(Vec::as_slice) {
            Some([_]) => {}
            Some(ids) => return Err(format!("round {r}'s commit has plans {ids:?}")),
            None if *r == round => return Err(format!("round {r}'s plan is lost")),
            // An older round's commit, merged again by nothing, may have no plan of its own
            // only if a newer merge took it over before it was planned: never here, since
            // each round converges before the next is merged.
            None => return Err(format!("round {r}'s plan is lost")),
        }
    }
    if let Some(extra) = of_commit.keys().find(|c| !rounds.contains_key(*c)) {
        return Err(format!("a plan of a commit never merged: {extra}"));
    }
    // The records read: every node's sent record and plans (above), and collection reads
    // every record.
    for node in std::iter::once("bus").chain(NODES) {
        let key = format!("sent/{node}.json");
        mesh_controller::records::get(bed.library().home(), &key)
            .map_err(|e| crate::support::in_process::said(&e))
            .unwrap_or_else(|error| panic!("records get {key}: {error}"));
    }
    // `records collect` (its default grace, 10 minutes).
    mesh_controller::records::collect(
        bed.try_library()?.home(),
        mesh_store::clock::now(),
        std::time::Duration::from_secs(10 * 60),
        mesh_controller::plans::KEEP_PLANS,
    )
    .map_err(|e| crate::support::in_process::said(&e))
    .map_err(|error| format!("records collect: {error}"))?;
    Ok(())
}

/// The soak as a test a runner can list without running it (`--list`: `cargo nextest run
/// --test soak` asks that first; a `main` that ran the soak on every start ran it then).
fn main() {
    mesh_test_support::harness::run(&[("soak", soak)]);
}

fn soak() {
    // Everything the run made (the bed, its servers and hosts, the containers) is dropped when
    // `run` returns, before the exit code is given.
    if let Err(violation) = run() {
        println!("VIOLATION: {violation}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let rounds: usize = std::env::var("MESH_SOAK_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3);
    let seed: u64 = std::env::var("MESH_SOAK_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("soak: {rounds} rounds, MESH_SOAK_SEED={seed}");
    let mut rng = Rng(seed);

    let prefix = format!("mesh-soak-{}-", std::process::id());
    let containers = Containers(prefix.clone());
    containers.remove_all();
    let mut bed = Bed::new(&NODES);
    let inventory = bed.record("inventory.toml").unwrap();
    bed.put_inventory(&format!("{inventory}app = [\"a\", \"b\", \"c\", \"d\"]\n"));
    write(
        &bed.home.path().join("catalogue/modules/app/module.toml"),
        &app_module(0),
    );
    let host_flags = |node: &str| -> Vec<String> {
        vec![
            "--container-prefix".to_owned(),
            format!("{prefix}{node}-"),
            "--podman-stop-timeout".to_owned(),
            "0".to_owned(),
        ]
    };
    let start_host = |bed: &mut Bed, node: &str| {
        let flags = host_flags(node);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        bed.start_host_with(node, &flags);
    };
    for node in std::iter::once("bus").chain(NODES) {
        start_host(&mut bed, node);
    }
    let repo = Repo::new();
    let mut merged: BTreeMap<String, usize> = BTreeMap::new();
    merged.insert(commit_round(&repo, 1), 1);
    bed.library().repo_add("cat", repo.path()).unwrap();
    let mut daemon = Daemon::logged(&bed, &["--heartbeat", "1"]);
    {
        let rt = support::fleet::runtime();
        let bus = bed.controller_bus(&rt);
        support::fleet::wait_for_merge_consumer(&rt, &bus);
    }
    bed.library().merge_announce("cat").unwrap();
    wait_for("round 1 converged", CONVERGE, || {
        converged(&bed, &prefix, 1)
    });
    check(&bed, &merged, 1).map_err(|violation| format!("before the first kill: {violation}"))?;

    let mut kills: BTreeMap<Victim, usize> = BTreeMap::new();
    let started = Instant::now();
    for round in 2..=rounds + 1 {
        let commit = commit_round(&repo, round);
        merged.insert(commit, round);
        bed.library().merge_announce("cat").unwrap();
        let delay = Duration::from_millis(rng.below(KILL_WITHIN_MS));
        // Time itself is what this is about: the kill lands at a random moment of the rollout
        // (drawn above, printed with the round), never at a named step. Nothing is asserted
        // after it but through the wait on the fleet's convergence below.
        std::thread::sleep(delay);
        let victim = match rng.below(3) {
            0 => Victim::Controller,
            1 => Victim::Host,
            _ => Victim::Bus,
        };
        let what = match victim {
            Victim::Controller => {
                daemon.kill();
                daemon = Daemon::logged(&bed, &["--heartbeat", "1"]);
                "the controller's daemon".to_owned()
            }
            Victim::Host => {
                let node = if rng.below(5) == 0 {
                    "bus"
                } else {
                    NODES[rng.below(NODES.len() as u64) as usize]
                };
                // start_host_with kills the running one (SIGKILL) and starts another.
                start_host(&mut bed, node);
                format!("host `{node}`")
            }
            Victim::Bus => {
                bed.server.lock().unwrap().restart().unwrap();
                "nats-server".to_owned()
            }
        };
        *kills.entry(victim).or_default() += 1;
        let round_started = Instant::now();
        // A status call spawns the controller: look every half second.
        let outcome = try_wait_for(CONVERGE, Duration::from_millis(500), || {
            converged(&bed, &prefix, round)
        })
        .map_err(|seen| format!("not converged within {CONVERGE:?}: {seen}"));
        match outcome.and_then(|()| check(&bed, &merged, round)) {
            Ok(()) => println!(
                "round {}: killed {what} after {} ms; converged and checked in {:.1} s",
                round - 1,
                delay.as_millis(),
                round_started.elapsed().as_secs_f64()
            ),
            Err(violation) => {
                return Err(format!(
                    "round {}: killed {what} after {} ms: {violation}\n\
                     the daemon's last lines:\n{}\n(MESH_SOAK_SEED={seed})",
                    round - 1,
                    delay.as_millis(),
                    daemon.tail(20)
                ));
            }
        }
    }
    println!(
        "soak: {rounds} rounds in {:.0} s, kills: controller {}, host {}, nats-server {}; \
         0 violations (MESH_SOAK_SEED={seed})",
        started.elapsed().as_secs_f64(),
        kills.get(&Victim::Controller).unwrap_or(&0),
        kills.get(&Victim::Host).unwrap_or(&0),
        kills.get(&Victim::Bus).unwrap_or(&0),
    );
    drop(daemon);
    drop(bed);
    drop(containers);
    Ok(())
}
