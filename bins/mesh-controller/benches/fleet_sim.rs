//! A fleet simulated on a real bus: one controller — this process, through the
//! library, `runtime::merge` with `--bus` as the CLI runs it (the real `NatsFleet`, the records
//! in the bus's `mesh-records` bucket) — and N simulated hosts on a real loopback
//! `nats-server`. A merge of ten modules (three small files each, from a real git repository,
//! built into an OCI store) rolls out one machine first to all N.
//!
//! The hosts are a second process (this bench run again as `MESH_BENCH_ROLE=hosts`), so that
//! the controller's memory and CPU are its own: one task hears every declaration on
//! `mesh.declaration.*` and answers each at once with a real converged report (every resource
//! applied) on the node's report subject, and every host that was sent something repeats its
//! last report every heartbeat (the host's default, 30 s), spread evenly, as real hosts do.
//! The bus starts with the users the controller composes for the fleet, recorded as the ones
//! it confirmed: the fleet is running already, and the merge's modules grant nothing, so no
//! grants are issued in the measure (the per-node probes of a grants change are not measured).
//!
//! `cargo bench -p mesh-controller --bench fleet_sim`. Knobs (environment):
//! `MESH_BENCH_HOSTS` (default `1000,10000`), `MESH_BENCH_BUS` (`single`, the default, or
//! `single,cluster`: each size also on a loopback cluster of three servers, every stream and
//! bucket with 3 copies, and the cluster's time against the single server's printed as a
//! ratio — ), `MESH_BENCH_BUDGET_SECS` (default 1200: a merge
//! not finished by then is reported as "more than", and the run ends there), `MESH_BENCH_TMP`
//! (where the home is made; default `/dev/shm`), `MESH_BENCH_LINES` (a directory: the merge's
//! progress lines, each with when it was said, are written there as they are said, one file
//! per size). The test kit's `MESH_NATS_SERVER` picks the server, and `MESH_NATS_SYNC=server`
//! runs 2.10 and later with their own sync (every 2 minutes, as 2.9 does) instead of every
//! write synced: the header of each size says which. `MESH_LOG` (a filter, as the binaries
//! read it) logs the controller and the simulated hosts to standard error.
//!
//! Then, at each size of `MESH_BENCH_TAKEOVER` (default `1000`; empty: none), a takeover:
//! the daemon (`mesh_controller::daemon::serve`, in this process) plans merge A while its
//! first machine never answers, merge B is announced, and the time from B's announcement to
//! plan A's record saying it is superseded is printed (target ≤ 2 s).
//!
//! Printed, for each size: the merge's time; the longest time from a module's first machine's
//! report being heard to its rollout to all complete (target: within two heartbeats); the
//! controller's peak memory (VmHWM) and CPU time per host; the largest record in the bucket
//! (target ≤ 64 KiB); then the time at the largest size against the smallest (target ≤ 11× for
//! 1,000 → 10,000). Nothing is asserted: timings are read, not tested.

mod support;

use futures_util::StreamExt as _;
use mesh_bus::{subjects, Bus, NatsBus, NatsOptions};
use mesh_controller::plans::MergeOutcome;
use mesh_controller::Mesh;
use mesh_controller::MeshOptions;
use mesh_controller::Runtime;
use mesh_model::declaration::Declaration;
use mesh_test_support::nats_cluster::NatsCluster;
use mesh_test_support::nats_server::{self, NatsServer};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::modules::{git, write};
use support::simulated::converged;
use support::ten_modules::MODULES;
use support::{on_bus, scratch};

/// A host's heartbeat (mesh-host's default).
const HEARTBEAT: Duration = mesh_host::serve::DEFAULT_HEARTBEAT;

/// The largest a record should be.
const RECORD_LIMIT: usize = 64 * 1024;

fn main() {
    // `MESH_LOG` (as the binaries read it) says what the controller and the simulated hosts
    // log, to standard error; nothing by default.
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("MESH_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    if std::env::var("MESH_BENCH_ROLE").as_deref() == Ok("hosts") {
        hosts();
        return;
    }
    let sizes: Vec<usize> = std::env::var("MESH_BENCH_HOSTS")
        .unwrap_or_else(|_| "1000,10000".to_owned())
        .split(',')
        .filter(|n| !n.trim().is_empty())
        .map(|n| {
            n.trim()
                .parse()
                .expect("MESH_BENCH_HOSTS: numbers, comma-separated")
        })
        .collect();
    let buses: Vec<String> = std::env::var("MESH_BENCH_BUS")
        .unwrap_or_else(|_| "single".to_owned())
        .split(',')
        .map(|bus| bus.trim().to_owned())
        .collect();
    let budget = Duration::from_secs(
        std::env::var("MESH_BENCH_BUDGET_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1200),
    );
    println!(
        "fleet simulation: one controller, simulated hosts on a loopback nats-server, a merge \
         of {MODULES} modules (3 files each) to all; heartbeat {} s",
        HEARTBEAT.as_secs()
    );
    let mut times: Vec<(usize, Duration)> = Vec::new();
    'sizes: for &hosts in &sizes {
        let mut single = None;
        for kind in &buses {
            let server = match kind.as_str() {
                "single" => NatsServer::start().map(BenchBus::Single),
                "cluster" => NatsCluster::start(3).map(BenchBus::Cluster),
                other => panic!("MESH_BENCH_BUS: `single` or `cluster`, not `{other}`"),
            };
            let server = match server {
                Ok(server) => server,
                Err(error) => {
                    println!("  {hosts} hosts: nats-server ({kind}): {error}; the run ends here");
                    break 'sizes;
                }
            };
            println!("  {hosts} hosts on {}:", server.describe());
            match run(&server, hosts, budget) {
                Ok((took, to_all)) => {
                    if kind == "single" {
                        times.push((hosts, took));
                        single = Some((took, to_all));
                    } else if let Some((single_took, single_to_all)) = single {
                        println!(
                            "  {hosts} hosts: merge on the R3 cluster / on a single server: \
                             {:.2}x",
                            took.as_secs_f64() / single_took.as_secs_f64()
                        );
                        if let (Some(cluster), Some(single)) = (to_all, single_to_all) {
                            println!(
                                "  {hosts} hosts: declaration -> applied -> report heard, first \
                                 machine's report to all done (mean over modules), R3 / R1: \
                                 {:.2}x",
                                cluster.as_secs_f64() / single.as_secs_f64()
                            );
                        }
                    }
                }
                Err(why) => {
                    println!("  {hosts} hosts: {why}; the run ends here");
                    break 'sizes;
                }
            }
        }
    }
    if let (Some(&(small, a)), Some(&(large, b))) = (times.first(), times.last()) {
        if large > small {
            let ratio = b.as_secs_f64() / a.as_secs_f64();
            // The scale issue's target: at most 11 times the time for 10 times the hosts.
            let target = 11.0 * (large as f64 / small as f64) / 10.0;
            println!(
                "  time {small} -> {large} hosts: {ratio:.2}x (target <= {target:.1}x: {})",
                if ratio <= target { "met" } else { "NOT met" }
            );
        }
    }
    let takeovers: Vec<usize> = std::env::var("MESH_BENCH_TAKEOVER")
        .unwrap_or_else(|_| "1000".to_owned())
        .split(',')
        .filter(|n| !n.trim().is_empty())
        .map(|n| n.trim().parse().expect("MESH_BENCH_TAKEOVER: numbers"))
        .collect();
    for hosts in takeovers {
        let server = match NatsServer::start() {
            Ok(server) => BenchBus::Single(server),
            Err(error) => {
                println!("  takeover at {hosts} hosts: nats-server: {error}");
                break;
            }
        };
        match takeover(&server, hosts) {
            Ok(took) => println!(
                "  takeover at {hosts} hosts: merge B announced -> plan A superseded by the \
                 daemon: {:.2} s (target <= 2 s: {})",
                took.as_secs_f64(),
                if took <= Duration::from_secs(2) {
                    "met"
                } else {
                    "NOT met"
                }
            ),
            Err(why) => println!("  takeover at {hosts} hosts: {why}"),
        }
    }
    // A merge left running past its budget is not waited for.
    std::process::exit(0);
}

/// Progress lines with the time each was said, and written as they are said to the file of
/// `MESH_BENCH_LINES` when it is given (so that a merge past its budget still shows where its
/// time went).
struct Timed {
    started: Instant,
    lines: Mutex<Vec<(Duration, String)>>,
    file: Option<Mutex<LinesFile>>,
}

impl Timed {
    fn new(hosts: usize) -> Timed {
        let file = std::env::var("MESH_BENCH_LINES").ok().map(|dir| {
            let dir = Path::new(&dir);
            std::fs::create_dir_all(dir).unwrap();
            let path = dir.join(format!("fleet_sim-{hosts}.txt"));
            println!("  {hosts} hosts: progress lines in {}", path.display());
            Mutex::new(LinesFile {
                file: std::fs::File::create(&path).unwrap(),
                sends: BTreeMap::new(),
            })
        });
        Timed {
            started: Instant::now(),
            lines: Mutex::new(Vec::new()),
            file,
        }
    }
}

impl mesh_controller::Progress for Timed {
    fn line(&self, text: &str) {
        let at = self.started.elapsed();
        if let Some(file) = &self.file {
            file.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .write(at, text);
        }
        self.lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((at, text.to_owned()));
    }
}

/// The merge's progress lines with when each was said (seconds from the merge's start), in
/// `MESH_BENCH_LINES/fleet_sim-<hosts>.txt`: where a merge's time goes. Of the lines naming
/// one node's send, the first and every thousandth of each module are kept.
struct LinesFile {
    file: std::fs::File,
    /// Per module, how many sends were said.
    sends: BTreeMap<String, usize>,
}

impl LinesFile {
    fn write(&mut self, at: Duration, line: &str) {
        let text = match line
            .trim_start()
            .strip_prefix('`')
            .and_then(|rest| rest.split_once("`: sent `"))
        {
            Some((module, _)) => {
                let count = self.sends.entry(module.to_owned()).or_default();
                *count += 1;
                if *count != 1 && !count.is_multiple_of(1000) {
                    return;
                }
                format!("{:9.3} [send {count}] {line}\n", at.as_secs_f64())
            }
            None => format!("{:9.3} {line}\n", at.as_secs_f64()),
        };
        let _ = self.file.write_all(text.as_bytes());
    }
}

/// What one size measured.
struct Measured {
    took: Duration,
    outcome: Result<String, String>,
    cpu: Duration,
    lines: Vec<(Duration, String)>,
}

/// The bus a run is measured on.
enum BenchBus {
    /// One server: every stream and bucket with one copy.
    Single(NatsServer),
    /// A loopback cluster of three: every stream and bucket with three copies (the server
    /// reports a cluster).
    Cluster(NatsCluster),
}

impl BenchBus {
    /// Every server's URL, comma-separated.
    fn url(&self) -> String {
        match self {
            BenchBus::Single(server) => server.url(),
            BenchBus::Cluster(cluster) => cluster.urls(),
        }
    }

    /// Gives every server `users`.
    fn reload(&self, users: &str) {
        match self {
            BenchBus::Single(server) => server.reload(users).unwrap(),
            BenchBus::Cluster(cluster) => {
                for index in 0..cluster.len() {
                    cluster.server(index).reload(users).unwrap();
                }
            }
        }
    }

    fn describe(&self) -> String {
        let version = match self {
            BenchBus::Single(server) => server.version(),
            BenchBus::Cluster(cluster) => cluster.server(0).version(),
        };
        let sync = if nats_server::syncs_every_write(version) {
            "every write synced"
        } else {
            "the server's own sync, every 2 minutes"
        };
        match self {
            BenchBus::Single(_) => format!("a single nats-server {version} (R1; {sync})"),
            BenchBus::Cluster(cluster) => {
                format!(
                    "a loopback cluster of {} nats-server {version} (R3; {sync})",
                    cluster.len()
                )
            }
        }
    }
}

/// One merge to `hosts` simulated hosts on `server`: its time and the mean time from a
/// module's first machine's report to its rollout to all done, or why there is none.
fn run(
    server: &BenchBus,
    hosts: usize,
    budget: Duration,
) -> Result<(Duration, Option<Duration>), String> {
    let url = server.url();
    let dir = tempfile::Builder::new()
        .prefix("mesh-bench-fleet-")
        .tempdir_in(scratch())
        .unwrap();
    let set_up = Instant::now();
    let (home, bus) = on_bus::ten_modules_on_bus(dir.path(), hosts, server.url(), |users| {
        server.reload(users)
    });
    let password_file = dir.path().join("home/bus/passwords/controller");
    let mut simulator = simulated_hosts(&url, &password_file, hosts, None);
    println!(
        "  {hosts} hosts: set up in {:.1} s (users, records on the bus, repository)",
        set_up.elapsed().as_secs_f64()
    );

    let (done, finished) = std::sync::mpsc::channel();
    let root = dir.path().to_owned();
    std::thread::spawn(move || {
        // The records are on the bus (opened there); the store is the one the home was set up
        // with.
        let mesh = Mesh::open(
            home.root(),
            MeshOptions {
                bus: Some(bus),
                store: Some(mesh_store::store::default_store_spec(&root)),
                ..MeshOptions::default()
            },
        )
        .unwrap();
        let tokio = tokio::runtime::Runtime::new().unwrap();
        let progress = Arc::new(Timed::new(hosts));
        let runtime = Runtime::new(Arc::new(mesh), Arc::clone(&progress) as _);
        let cpu_before = cpu_time();
        let started = Instant::now();
        let outcome = tokio.block_on(runtime.merge("cat", &Default::default()));
        let took = started.elapsed();
        let cpu = cpu_time().saturating_sub(cpu_before);
        let outcome = match outcome {
            Ok(MergeOutcome::Planned { plan, .. }) => Ok(format!("{:?}", plan.state)),
            Ok(other) => Err(format!("not planned: {other:?}")),
            Err(error) => Err(error.chain_line()),
        };
        let lines = std::mem::take(&mut *progress.lines.lock().unwrap());
        let _ = done.send(Measured {
            took,
            outcome,
            cpu,
            lines,
        });
    });
    let measured = match finished.recv_timeout(budget) {
        Ok(measured) => measured,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            let _ = simulator.kill();
            let _ = simulator.wait();
            return Err(format!(
                "the merge did not finish within {} s",
                budget.as_secs()
            ));
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            let _ = simulator.kill();
            let _ = simulator.wait();
            return Err("the merge panicked (above)".to_owned());
        }
    };
    let _ = simulator.kill();
    let _ = simulator.wait();

    let state = match &measured.outcome {
        Ok(state) => format!("plan {state}"),
        Err(error) => format!("FAILED: {error}"),
    };
    // The scale issue's target: a merge of ten modules to 10,000 hosts in at most 30 s.
    let target = if hosts == 10_000 {
        format!(
            " (target <= 30 s at 10,000: {})",
            if measured.took.as_secs() <= 30 {
                "met"
            } else {
                "NOT met"
            }
        )
    } else {
        String::new()
    };
    println!(
        "  {hosts} hosts: merge {:.2} s ({state}){target}",
        measured.took.as_secs_f64()
    );
    if measured
        .lines
        .iter()
        .any(|(_, line)| line.contains("goes first"))
    {
        println!("  {hosts} hosts: (the bus's users changed: the bus node went first and grants were issued)");
    }
    let to_all = first_report_to_all(&measured.lines);
    match to_all.clone() {
        Some((worst, module, mean)) => println!(
            "  {hosts} hosts: first machine's report -> rollout to all done: longest {:.2} s \
             (`{module}`), mean {:.2} s (target <= 2 heartbeats = {} s: {})",
            worst.as_secs_f64(),
            mean.as_secs_f64(),
            2 * HEARTBEAT.as_secs(),
            if worst <= 2 * HEARTBEAT {
                "met"
            } else {
                "NOT met"
            }
        ),
        None => println!("  {hosts} hosts: no module's rollout finished"),
    }
    let peak = peak_memory_kib();
    // The scale issue's targets: under 512 MiB at 10,000 hosts, under 2 GiB at 100,000.
    let limit_mib: u64 = if hosts > 10_000 { 2048 } else { 512 };
    println!(
        "  {hosts} hosts: controller peak memory (VmHWM, this process so far) {:.0} MiB \
         (target < {limit_mib} MiB: {}); CPU {:.2} s = {:.2} ms per host",
        peak as f64 / 1024.0,
        if peak < limit_mib * 1024 {
            "met"
        } else {
            "NOT met"
        },
        measured.cpu.as_secs_f64(),
        measured.cpu.as_secs_f64() * 1000.0 / hosts as f64
    );
    let (count, largest, key) = largest_record(&url, &password_file);
    println!(
        "  {hosts} hosts: {count} records in the bucket; the largest `{key}`, {largest} bytes \
         (target <= {RECORD_LIMIT}: {})",
        if largest <= RECORD_LIMIT {
            "met"
        } else {
            "NOT met"
        }
    );
    match measured.outcome {
        Ok(_) => Ok((measured.took, to_all.map(|(_, _, mean)| mean))),
        Err(_) => Err("the merge failed".to_owned()),
    }
}

/// A newer merge taking over at `hosts` hosts: `mesh-controller serve` (the library's daemon,
/// in this process) plans merge A of the ten modules, whose first machine never answers; merge
/// B changing one module is announced, and the time from its announcement to plan A's record
/// on the bus saying it is superseded is returned.
fn takeover(server: &BenchBus, hosts: usize) -> Result<Duration, String> {
    let url = server.url();
    let dir = tempfile::Builder::new()
        .prefix("mesh-bench-takeover-")
        .tempdir_in(scratch())
        .unwrap();
    let (home, bus) = on_bus::ten_modules_on_bus(dir.path(), hosts, server.url(), |users| {
        server.reload(users)
    });
    let password_file = dir.path().join("home/bus/passwords/controller");
    // `n00000`, first by name, never answers: plan A waits on it.
    let first = "n00000";
    let mut simulator = simulated_hosts(&url, &password_file, hosts, Some(first));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let root = dir.path().to_owned();
    let daemon = std::thread::spawn(move || {
        let mesh = Mesh::open(
            home.root(),
            MeshOptions {
                bus: Some(bus),
                store: Some(mesh_store::store::default_store_spec(&root)),
                ..MeshOptions::default()
            },
        )
        .unwrap();
        let tokio = tokio::runtime::Runtime::new().unwrap();
        let runtime = Runtime::new(Arc::new(mesh), Arc::new(mesh_controller::Quiet));
        tokio.block_on(mesh_controller::daemon::serve(
            &runtime,
            &mesh_controller::daemon::ServeOptions::default(),
            async {
                let _ = stopped.await;
            },
        ))
    });
    let password = std::fs::read_to_string(&password_file).unwrap();
    let options = NatsOptions::for_controller(url.clone(), password.trim());
    let records = mesh_bus::records::KvRecords::open(&options).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let js = rt.block_on(async { NatsBus::connect(&options).await.unwrap().jetstream() });
    let wait = |what: &str, limit: Duration, done: &dyn Fn() -> bool| -> Result<(), String> {
        let until = Instant::now() + limit;
        while !done() {
            if Instant::now() > until {
                return Err(format!(
                    "{what} did not happen within {} s",
                    limit.as_secs()
                ));
            }
            // Only paces the looks at a record on the bus (a millisecond's get each).
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    };
    let consumer = || {
        rt.block_on(async {
            match js.get_stream(subjects::EVENTS_STREAM).await {
                Ok(stream) => stream
                    .consumer_info(mesh_controller::bus::MERGE_CONSUMER)
                    .await
                    .is_ok(),
                Err(_) => false,
            }
        })
    };
    let announce = |commit: &str| {
        rt.block_on(mesh_bus::jetstream::publish_merge(
            &js, "cat", "main", commit,
        ))
        .map(|_| ())
        .map_err(|e| e.to_string())
    };
    use mesh_store::record_store::RecordStore as _;
    let record = |key: &str| records.get(key).ok().flatten();
    let repo = dir.path().join("repo");
    let head = || {
        let out = Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(["rev-parse", "HEAD"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let measured = (|| {
        wait(
            "the daemon's merge consumer",
            Duration::from_secs(60),
            &consumer,
        )?;
        announce(&head())?;
        wait(
            "plan A's send to its first machine",
            Duration::from_secs(600),
            &|| record(&format!("sent/{first}.json")).is_some(),
        )?;
        let waiting = record("plans/plan-1.json")
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
            .map(|plan| plan["plan"]["state"]["state"].clone());
        if waiting != Some(serde_json::json!("rolling-out")) {
            return Err(format!(
                "plan A is {waiting:?}, not waiting on its first machine"
            ));
        }
        write(&repo.join("modules/m00/files/one"), "m00 one v2\n");
        git(&repo, &["commit", "-q", "-am", "m00: v2"]);
        let b = head();
        let announced = Instant::now();
        announce(&b)?;
        wait("plan A's supersede", Duration::from_secs(120), &|| {
            record("plans/plan-1.json").is_some_and(|bytes| {
                serde_json::from_slice::<serde_json::Value>(&bytes).is_ok_and(|plan| {
                    plan["plan"]["state"]
                        == serde_json::json!({"state": "superseded", "by": "plan-2"})
                })
            })
        })?;
        Ok(announced.elapsed())
    })();
    let _ = stop.send(());
    let _ = daemon.join();
    let _ = simulator.kill();
    let _ = simulator.wait();
    measured
}

/// Per module, from the first send after its first node's (so after that node's report was
/// heard) to its "done" line: the longest (with its module) and the mean.
fn first_report_to_all(lines: &[(Duration, String)]) -> Option<(Duration, String, Duration)> {
    let mut spans: BTreeMap<String, Duration> = BTreeMap::new();
    for module in (0..MODULES).map(|m| format!("m{m:02}")) {
        let prefix = format!("`{module}`: ");
        let mine: Vec<&(Duration, String)> = lines
            .iter()
            .filter(|(_, line)| line.trim_start().starts_with(&prefix))
            .collect();
        let first = mine
            .iter()
            .position(|(_, line)| line.contains(": sent `") && line.contains("(first)"));
        let done = mine.iter().find(|(_, line)| line.contains(": done on "));
        let (Some(first), Some((done_at, _))) = (first, done) else {
            continue;
        };
        let after = mine[first + 1..]
            .iter()
            .find(|(_, line)| line.contains(": sent `"))
            .map_or(*done_at, |(at, _)| *at);
        spans.insert(module, done_at.saturating_sub(after));
    }
    let (module, worst) = spans.iter().max_by_key(|(_, span)| **span)?;
    let mean = spans.values().sum::<Duration>() / spans.len() as u32;
    Some((*worst, module.clone(), mean))
}

/// The simulated hosts (this bench run again as `MESH_BENCH_ROLE=hosts`) on the bus at `url`,
/// returned once they said they are ready; `silent`, a node that takes its declarations and
/// never reports.
fn simulated_hosts(
    url: &str,
    password_file: &Path,
    hosts: usize,
    silent: Option<&str>,
) -> std::process::Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .env("MESH_BENCH_ROLE", "hosts")
        .env("MESH_BENCH_URL", url)
        .env("MESH_BENCH_PASSWORD_FILE", password_file)
        .env("MESH_BENCH_HOSTS", hosts.to_string());
    if let Some(node) = silent {
        command.env("MESH_BENCH_SILENT", node);
    }
    let mut simulator = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufReader::new(simulator.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(ready.trim(), "ready", "the simulated hosts did not start");
    simulator
}

/// The controller's records: how many, and the largest with its key.
fn largest_record(url: &str, password_file: &Path) -> (usize, usize, String) {
    let password = std::fs::read_to_string(password_file).unwrap();
    let records =
        mesh_bus::records::KvRecords::open(&NatsOptions::for_controller(url, password.trim()))
            .unwrap();
    use mesh_store::record_store::RecordStore as _;
    let keys = records.keys_under("").unwrap();
    let found: Mutex<(usize, String)> = Mutex::new((0, String::new()));
    std::thread::scope(|scope| {
        for chunk in keys.chunks(keys.len().div_ceil(4).max(1)) {
            let (records, found) = (&records, &found);
            scope.spawn(move || {
                for key in chunk {
                    let size = records.get(key).unwrap().map_or(0, |b| b.len());
                    let mut found = found.lock().unwrap();
                    if size > found.0 {
                        *found = (size, key.clone());
                    }
                }
            });
        }
    });
    let (size, key) = found.into_inner().unwrap();
    (keys.len(), size, key)
}

/// The CPU time (user and system) of this process so far.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the command's closing parenthesis: state is field 3; utime 14, stime 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

/// VmHWM of this process, in KiB.
fn peak_memory_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The simulated hosts (`MESH_BENCH_ROLE=hosts`): every declaration heard is answered at once
/// with a converged report of every resource on its node's subject; every host sent something
/// repeats its last report every [`HEARTBEAT`], spread evenly.
fn hosts() {
    let url = std::env::var("MESH_BENCH_URL").unwrap();
    let password =
        std::fs::read_to_string(std::env::var("MESH_BENCH_PASSWORD_FILE").unwrap()).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut options = NatsOptions::for_controller(url, password.trim());
        options.name = Some("simulated hosts".to_owned());
        let bus = NatsBus::connect(&options).await.unwrap();
        // The declarations are read from their stream through a pull consumer, at the hosts'
        // own pace, as real hosts read theirs: a plain subscription holds at most
        // `mesh_bus::SUBSCRIPTION_CAPACITY` messages, and at 100,000 hosts the declarations it
        // dropped were hosts that never answered; an ordered (push) consumer is paced by flow
        // control, and at 100,000 hosts one stalled for good (async-nats answers a flow-control
        // request only as it arrives, not the server's "stalled" heartbeat that repeats it, so
        // a request the client could not keep leaves the server waiting for ever).
        let js = bus.jetstream();
        mesh_bus::jetstream::ensure_streams(&js).await.unwrap();
        let stream = js.get_stream(subjects::DECLARATIONS_STREAM).await.unwrap();
        let consumer = stream
            .create_consumer(async_nats::jetstream::consumer::pull::Config {
                durable_name: Some("simulated-hosts".to_owned()),
                description: Some("simulated hosts".to_owned()),
                filter_subject: subjects::ALL_DECLARATIONS.to_owned(),
                deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::New,
                ack_policy: async_nats::jetstream::consumer::AckPolicy::None,
                ..Default::default()
            })
            .await
            .unwrap();
        let mut declarations = consumer.messages().await.unwrap();
        bus.round_trip().await.unwrap();
        println!("ready");
        std::io::stdout().flush().unwrap();
        // The heartbeats publish on a connection of their own.
        let beat_bus = NatsBus::connect(&options).await.unwrap();
        let last: Mutex<BTreeMap<String, Vec<u8>>> = Mutex::default();
        let beats = async {
            // Each tick repeats the next slice of the hosts' last reports, so that every host
            // beats once per heartbeat.
            let tick = Duration::from_millis(100);
            let ticks_per_beat = (HEARTBEAT.as_millis() / tick.as_millis()).max(1) as usize;
            let mut interval = tokio::time::interval(tick);
            let mut next = 0usize;
            loop {
                interval.tick().await;
                let batch: Vec<(String, Vec<u8>)> = {
                    let last = last.lock().unwrap();
                    let per_tick = last.len().div_ceil(ticks_per_beat);
                    if last.is_empty() {
                        continue;
                    }
                    // Round and round the hosts: a slice that runs past the last host goes on
                    // from the first, so that none is passed over (a slice cut at the end and
                    // the next begun past the first hosts left a host silent for many beats,
                    // and a first machine whose answer the controller missed was never heard
                    // again at 100,000 hosts).
                    let start = next % last.len();
                    next = (start + per_tick) % last.len();
                    last.iter()
                        .chain(last.iter())
                        .skip(start)
                        .take(per_tick.min(last.len()))
                        .map(|(n, r)| (n.clone(), r.clone()))
                        .collect()
                };
                for (node, report) in batch {
                    let _ = beat_bus.publish(&subjects::report(&node), report).await;
                }
            }
        };
        // Hosts that never answer (a takeover's first machine, stopped).
        let silent: BTreeSet<String> = std::env::var("MESH_BENCH_SILENT")
            .unwrap_or_default()
            .split(',')
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect();
        let heard = async {
            while let Some(message) = declarations.next().await {
                // A pull that missed its heartbeats is said and pulled again by the client.
                let message = match message {
                    Ok(message) => message,
                    Err(error) => {
                        eprintln!("simulated hosts: reading the declarations: {error}");
                        continue;
                    }
                };
                let Ok(declaration) = Declaration::from_json(&message.payload) else {
                    continue;
                };
                if silent.contains(&declaration.node) {
                    continue;
                }
                let report = serde_json::to_vec(&converged(&declaration)).unwrap();
                bus.publish(&subjects::report(&declaration.node), report.clone())
                    .await
                    .unwrap();
                last.lock()
                    .unwrap()
                    .insert(declaration.node.clone(), report);
            }
        };
        tokio::select! {
            () = beats => {}
            () = heard => {}
        }
    });
}
