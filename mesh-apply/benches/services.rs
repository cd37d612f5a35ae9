//! What accounts and jobs add to a no-op apply of containers: 200 containers, each running as
//! an account of its own (fixed ids) after a job of its own, against the same 200 containers
//! alone, in one run.
//!
//! Accounts are real (shadow-utils under a sandbox root, as a host makes them). Containers and
//! jobs are answered by a stand-in runtime that spawns one process (`true`) for each container
//! it is asked about — what podman's no-op costs at the least (the real runtime spawns one
//! `podman container inspect` per container, ~100 ms on a small machine), so the ratio here is
//! an upper bound of the real one. A job already run asks its runtime nothing. The engine's own
//! cost (a runtime answering at once) is printed beside it.
//!
//! Run with `cargo bench -p mesh-apply --bench services`. Prints the ratios and fails (exit 1)
//! when the no-op with accounts and jobs is past 1.5× the containers alone.

use mesh_apply::{
    apply_with, ContainerRuntime, DeclaredContainer, HostConfig, JobRun, NoProgress, Seams,
    ShadowUtils,
};
use mesh_model::declaration::{
    resource_id, AccountSpec, ContainerSpec, Declaration, JobSpec, Resource, Spec,
};
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

/// Containers (and accounts, and jobs) in a measured run; a smoke run (`cargo test --benches`)
/// takes [`SMOKE`] and checks no bound.
const CONTAINERS: usize = 200;
const SMOKE: usize = 10;
const ROUNDS: usize = 15;
const FIRST_UID: u32 = 20_000;

/// Every container runs as declared; a job exits 0. With `spawn`, each container asked about
/// costs one process, as podman's inspect does at the least.
struct StandIn {
    spawn: bool,
}

impl ContainerRuntime for StandIn {
    fn check(&self, _declared: &DeclaredContainer<'_>) -> Result<(), String> {
        Ok(())
    }

    fn apply(
        &self,
        _declared: &DeclaredContainer<'_>,
        _restart: bool,
    ) -> Result<Vec<String>, String> {
        if self.spawn {
            let status = std::process::Command::new("true")
                .status()
                .map_err(|e| e.to_string())?;
            assert!(status.success());
        }
        Ok(Vec::new())
    }

    fn remove(&self, name: &str) -> Result<String, String> {
        Ok(format!("removed `{name}`"))
    }

    fn stop(&self, _name: &str) -> Result<(), String> {
        Ok(())
    }

    fn start(&self, _name: &str) -> Result<(), String> {
        Ok(())
    }

    fn run_job(
        &self,
        _declared: &DeclaredContainer<'_>,
        _timeout_secs: u64,
    ) -> Result<JobRun, String> {
        Ok(JobRun {
            exit_code: 0,
            log: "done".to_owned(),
        })
    }
}

fn resource(kind: &str, name: &str, after: Vec<String>, spec: Spec) -> Resource {
    Resource {
        id: resource_id("svc", kind, name),
        module: "svc".to_owned(),
        together: None,
        after,
        spec,
    }
}

fn container(i: usize, served: bool) -> Resource {
    let (user, after) = if served {
        let uid = FIRST_UID + i as u32;
        (
            Some(format!("{uid}:{uid}")),
            vec![
                resource_id("svc", "account", &format!("a{i:03}")),
                resource_id("svc", "job", &format!("j{i:03}")),
            ],
        )
    } else {
        (None, Vec::new())
    };
    resource(
        "container",
        &format!("c{i:03}"),
        after,
        Spec::Container(Box::new(ContainerSpec {
            name: format!("mesh-svc-c{i:03}"),
            image: "localhost/mesh-busybox:latest".to_owned(),
            command: vec!["sleep".to_owned(), "1000".to_owned()],
            user,
            ..ContainerSpec::default()
        })),
    )
}

/// `containers` containers; with `served`, each after an account and a job of its own.
fn declaration(containers: usize, served: bool) -> Declaration {
    let mut resources: Vec<Resource> = (0..containers).map(|i| container(i, served)).collect();
    if served {
        for i in 0..containers {
            let uid = FIRST_UID + i as u32;
            resources.push(resource(
                "account",
                &format!("a{i:03}"),
                Vec::new(),
                Spec::Account(AccountSpec {
                    name: format!("a{i:03}"),
                    uid: Some(uid),
                    gid: Some(uid),
                    home: None,
                    shell: None,
                }),
            ));
            resources.push(resource(
                "job",
                &format!("j{i:03}"),
                vec![resource_id("svc", "account", &format!("a{i:03}"))],
                Spec::Job(Box::new(JobSpec {
                    run: ContainerSpec {
                        name: format!("mesh-svc-job-j{i:03}"),
                        image: "localhost/mesh-busybox:latest".to_owned(),
                        command: vec!["sh".to_owned(), "-c".to_owned(), format!("echo {i}")],
                        user: Some(format!("{uid}:{uid}")),
                        ..ContainerSpec::default()
                    },
                    rerun_on: Vec::new(),
                    timeout_secs: None,
                })),
            ));
        }
    }
    Declaration::new("bench", resources)
}

/// A host under `dir` whose root has the account files shadow-utils needs.
fn host(dir: &Path) -> HostConfig {
    let root = dir.join("root");
    fs::create_dir_all(root.join("etc")).unwrap();
    for (name, content) in [
        ("passwd", "root:x:0:0:root:/root:/bin/sh\n"),
        ("group", "root:x:0:\n"),
        ("gshadow", "root:*::\n"),
        ("shadow", "root:*:19000:0:99999:7:::\n"),
    ] {
        fs::write(root.join("etc").join(name), content).unwrap();
    }
    HostConfig {
        root,
        state_dir: dir.join("state"),
        ..HostConfig::default()
    }
}

/// One apply of `declaration` on `config`, how long it took, and its outcomes' tally.
fn timed(config: &HostConfig, declaration: &Declaration, runtime: &StandIn, now: u64) -> Duration {
    let accounts = ShadowUtils::new(&config.root);
    let seams = Seams {
        accounts: &accounts,
        containers: runtime,
        progress: &NoProgress,
    };
    let started = Instant::now();
    let report = apply_with(config, declaration, now, &seams).expect("the apply runs");
    let took = started.elapsed();
    let all = declaration.resources.len();
    let done = report.tally().get("unchanged").copied().unwrap_or(0)
        + report.tally().get("applied").copied().unwrap_or(0);
    assert_eq!(done, all, "every resource takes: {:?}", report.tally());
    took
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let measured = std::env::args().any(|a| a == "--bench");
    let (containers, rounds) = if measured {
        (CONTAINERS, ROUNDS)
    } else {
        (SMOKE, 1)
    };
    let alone = declaration(containers, false);
    let served = declaration(containers, true);
    let mut ratios = Vec::new();
    for spawn in [true, false] {
        let runtime = StandIn { spawn };
        let dir = tempfile::tempdir().unwrap();
        let (alone_host, served_host) = (host(&dir.path().join("a")), host(&dir.path().join("s")));
        // The first applies make the accounts and run the jobs; what follows changes nothing.
        timed(&alone_host, &alone, &runtime, 1_800_000_000);
        timed(&served_host, &served, &runtime, 1_800_000_000);
        let mut alone_times = Vec::new();
        let mut served_times = Vec::new();
        for round in 0..rounds {
            let now = 1_800_000_060 + round as u64;
            // Which goes first alternates.
            if round % 2 == 0 {
                alone_times.push(timed(&alone_host, &alone, &runtime, now));
                served_times.push(timed(&served_host, &served, &runtime, now));
            } else {
                served_times.push(timed(&served_host, &served, &runtime, now));
                alone_times.push(timed(&alone_host, &alone, &runtime, now));
            }
        }
        let (a, s) = (median(alone_times), median(served_times));
        let ratio = s.as_secs_f64() / a.as_secs_f64();
        println!(
            "{}: no-op apply of {containers} containers, accounts and jobs {s:.2?} vs the \
             containers alone {a:.2?} = {ratio:.2}x (median of {rounds})",
            if spawn {
                "runtime spawning a process per container"
            } else {
                "runtime answering at once (the engine's own cost)"
            }
        );
        ratios.push(ratio);
    }
    if !measured {
        println!("(a smoke run: no bound is checked; `cargo bench -p mesh-apply --bench services` measures)");
        return;
    }
    if ratios[0] > 1.5 {
        println!("FAILED: {:.2}x is past the bound of 1.5x", ratios[0]);
        std::process::exit(1);
    }
}
