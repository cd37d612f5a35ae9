//! What seeing drift costs, against baselines measured in the same run:
//!
//! - a reconcile (the drift examiner's look, [`mesh_apply::drift::Examiner::examine`]) and a
//!   no-op apply ([`mesh_apply::apply`]) of 10,000 unchanged files, each against a stat-only
//!   walk of the same files (one `lstat` each): the target is at most 2×;
//! - what watching 10,000 paths ([`mesh_host::watch::start`], one inotify watch per directory,
//!   each path its own directory) adds to the process's peak memory (VmHWM): the target is
//!   under 20 MB. Measured in two child processes of this benchmark, one that only builds the
//!   declaration and one that also watches it, so neither sees the other's peak.
//!
//! Run with `cargo bench -p mesh-host --bench drift`. It prints every ratio; it checks no bound
//! (the book records the numbers, ✔ or ✘). `cargo test --benches` runs a smoke run of 200.
//! `MESH_BENCH_PARTS=1` also prints, each round, what parts of a look cost alone: the digests
//! of the declared contents, the declaration's digest, reading the stat cache, the
//! declaration's checks.

use mesh_apply::drift::Examiner;
use mesh_apply::{apply, HostConfig, NoContainerRuntime};
use mesh_model::declaration::{
    resource_id, Declaration, DirectorySpec, FileSpec, Resource, Sealed, Spec,
};
use mesh_store::clock::now;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const FILES: usize = 10_000;
const SMOKE_FILES: usize = 200;
const DIRS: usize = 100;
const ROUNDS: usize = 5;

fn machine_path(i: usize) -> String {
    format!("/srv/bench/d{:03}/f{i:05}.conf", i % DIRS)
}

fn content(i: usize) -> String {
    format!("# file {i}\n{}", "setting = value\n".repeat(20 + i % 80))
}

fn files(n: usize) -> Declaration {
    let resources = (0..n)
        .map(|i| Resource {
            id: resource_id("bench", "file", &format!("f{i:05}")),
            module: "bench".to_owned(),
            together: None,
            after: Vec::new(),
            spec: Spec::File(FileSpec {
                path: machine_path(i),
                content: Some(content(i)),
                source: None,
                sealed: None,
                mode: 0o644,
                owner: "root".to_owned(),
                group: "root".to_owned(),
            }),
        })
        .collect();
    Declaration::new("bench", resources)
}

/// `n` declared directories, each its own watch.
fn directories(n: usize) -> Declaration {
    let resources = (0..n)
        .map(|i| Resource {
            id: resource_id("bench", "directory", &format!("d{i:05}")),
            module: "bench".to_owned(),
            together: None,
            after: Vec::new(),
            spec: Spec::Directory(DirectorySpec {
                path: format!("/srv/watched/d{i:05}"),
                mode: 0o755,
                owner: "root".to_owned(),
                group: "root".to_owned(),
            }),
        })
        .collect();
    Declaration::new("bench", resources)
}

fn under(root: &Path, machine_path: &str) -> PathBuf {
    root.join(machine_path.trim_start_matches('/'))
}

/// Baseline: one lstat of every file.
fn stat_walk(root: &Path, n: usize) -> Duration {
    let started = Instant::now();
    let mut total = 0u64;
    for i in 0..n {
        total += fs::symlink_metadata(under(root, &machine_path(i)))
            .unwrap()
            .len();
    }
    std::hint::black_box(total);
    started.elapsed()
}

fn status_kib(field: &str) -> u64 {
    fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A child's part of the memory measure: build the declaration of `n` directories (and watch
/// them when `watch`), then print VmHWM in KiB.
fn memory_child(n: usize, watch: bool) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let declaration = directories(n);
    for resource in &declaration.resources {
        if let Spec::Directory(d) = &resource.spec {
            fs::create_dir_all(under(&root, &d.path)).unwrap();
        }
    }
    let watched = mesh_host::watch::watched_directories(&root, &declaration);
    let (sender, _receiver) = tokio::sync::mpsc::unbounded_channel();
    let kept = if watch {
        let watch = mesh_host::watch::start(&watched, sender).unwrap();
        assert!(watch.watched >= n, "watched {} of {n}", watch.watched);
        Some(watch)
    } else {
        None
    };
    println!("{}", status_kib("VmHWM:"));
    drop(kept);
}

fn child_peak_kib(n: usize, watch: bool) -> u64 {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .env("MESH_BENCH_MEMORY_CHILD", format!("{n}:{watch}"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if let Ok(child) = std::env::var("MESH_BENCH_MEMORY_CHILD") {
        let (n, watch) = child.split_once(':').unwrap();
        memory_child(n.parse().unwrap(), watch == "true");
        return;
    }
    let measured = std::env::args().any(|a| a == "--bench");
    let (n, rounds) = if measured {
        (FILES, ROUNDS)
    } else {
        (SMOKE_FILES, 1)
    };
    // Sealed as the host keeps a declaration it received: its digests are computed once.
    let declaration = Sealed::new(files(n));
    let mut lines = Vec::new();
    let (mut examine_ratios, mut noop_ratios) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let dir = tempfile::tempdir_in(
            std::env::var_os("MESH_BENCH_TMP").unwrap_or_else(|| std::env::temp_dir().into()),
        )
        .unwrap();
        let config = HostConfig {
            root: dir.path().join("root"),
            state_dir: dir.path().join("state"),
            containers: mesh_apply::ContainerRuntimeChoice::Unsupported,
            ..HostConfig::default()
        };
        for d in 0..DIRS {
            fs::create_dir_all(config.root.join(format!("srv/bench/d{d:03}"))).unwrap();
        }
        apply(&config, &declaration, now()).unwrap();
        // The host's clock three seconds on: every stamp is past the racy margin, as it is on a
        // daemon seconds after its apply (stamps::RACY_NS).
        let later = now() + 3;
        let report = apply(&config, &declaration, later).unwrap();
        assert_eq!(report.tally().get("unchanged"), Some(&n));
        let mut examiner = Examiner::open(&config.state_dir);
        let warm = examiner.examine(
            &config,
            &declaration,
            &report,
            &NoContainerRuntime,
            later,
            false,
        );
        assert!(warm.is_empty());

        if std::env::var_os("MESH_BENCH_PARTS").is_some() {
            let t = Instant::now();
            for r in &declaration.resources {
                if let Spec::File(f) = &r.spec {
                    std::hint::black_box(f.content_digest());
                }
            }
            let digests = t.elapsed();
            let t = Instant::now();
            std::hint::black_box(declaration.digest());
            let whole = t.elapsed();
            let t = Instant::now();
            std::hint::black_box(mesh_apply::stamps::StatCache::open(&config.state_dir));
            let cache = t.elapsed();
            let t = Instant::now();
            std::hint::black_box(declaration.problems());
            let problems = t.elapsed();
            println!("  parts: content digests {digests:.2?}, declaration digest {whole:.2?}, cache open {cache:.2?}, problems {problems:.2?}");
        }
        let walk = stat_walk(&config.root, n);
        let started = Instant::now();
        let drift = examiner.examine(
            &config,
            &declaration,
            &report,
            &NoContainerRuntime,
            later,
            false,
        );
        let examine = started.elapsed();
        assert!(drift.is_empty());
        assert_eq!(
            examiner.hashed, 0,
            "a reconcile of unchanged files reads none"
        );
        let walk2 = stat_walk(&config.root, n);
        let started = Instant::now();
        let again = apply(&config, &declaration, later).unwrap();
        let noop = started.elapsed();
        assert_eq!(again.tally().get("unchanged"), Some(&n));
        let walk = walk.min(walk2);
        let examine_ratio = examine.as_secs_f64() / walk.as_secs_f64();
        let noop_ratio = noop.as_secs_f64() / walk.as_secs_f64();
        lines.push(format!(
            "round {round}: stat walk {walk:.2?}; reconcile {examine:.2?} = {examine_ratio:.2}x; \
             no-op apply {noop:.2?} = {noop_ratio:.2}x"
        ));
        examine_ratios.push(examine_ratio);
        noop_ratios.push(noop_ratio);
    }
    println!("mesh-host drift, {n} unchanged files in {DIRS} directories, {rounds} rounds");
    for line in lines {
        println!("  {line}");
    }
    println!(
        "reconcile / stat walk (median):   {:.2}x (target 2.0x)",
        median(examine_ratios)
    );
    println!(
        "no-op apply / stat walk (median): {:.2}x (target 2.0x)",
        median(noop_ratios)
    );
    let without = child_peak_kib(n, false);
    let with = child_peak_kib(n, true);
    println!(
        "watching {n} directories: VmHWM {:.1} MiB against {:.1} MiB without, +{:.2} MiB (target < 20 MB; \
         inotify's own memory is the kernel's)",
        with as f64 / 1024.0,
        without as f64 / 1024.0,
        with.saturating_sub(without) as f64 / 1024.0
    );
}
