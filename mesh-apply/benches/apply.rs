//! The host engine's cost against plain baselines, with 10,000 file resources.
//!
//! - a no-op apply (everything already as declared) against reading and hashing the same files;
//! - a first apply against writing the same files with write + fsync + rename;
//! - the process's peak memory (VmHWM).
//!
//! Run with `cargo bench -p mesh-apply`. Prints the ratios and fails (exit 1) when one is past its
//! bound: no-op ≤ 1.5×, first ≤ 2×, peak < 100 MB.

use mesh_apply::{apply, HostConfig};
use mesh_model::declaration::{resource_id, Declaration, FileSpec, Resource, Spec};
use sha2::{Digest as _, Sha256};
use std::fs;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// The files a measured run applies (`cargo bench`); `cargo test --benches` runs a smoke test
/// of [`SMOKE_FILES`] instead, and checks no bound.
const FILES: usize = 10_000;
const SMOKE_FILES: usize = 200;
const DIRS: usize = 100;
const ROUNDS: usize = 3;

fn machine_path(i: usize) -> String {
    format!("/srv/bench/d{:03}/f{i:05}.conf", i % DIRS)
}

fn content(i: usize) -> String {
    format!("# file {i}\n{}", "setting = value\n".repeat(20 + i % 80))
}

fn declaration(files: usize) -> Declaration {
    let resources = (0..files)
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

fn make_dirs(root: &Path) {
    for d in 0..DIRS {
        fs::create_dir_all(root.join(format!("srv/bench/d{d:03}"))).unwrap();
    }
}

fn under(root: &Path, machine_path: &str) -> std::path::PathBuf {
    root.join(machine_path.trim_start_matches('/'))
}

/// Baseline: write every file with write + fsync + rename.
fn write_baseline(root: &Path, files: usize) -> Duration {
    let started = Instant::now();
    for i in 0..files {
        let target = under(root, &machine_path(i));
        let temp = target.with_extension("tmp");
        let mut file = fs::File::create(&temp).unwrap();
        file.write_all(content(i).as_bytes()).unwrap();
        file.sync_all().unwrap();
        fs::rename(&temp, &target).unwrap();
    }
    started.elapsed()
}

/// Baseline: read and hash every file.
fn read_baseline(root: &Path, files: usize) -> Duration {
    let started = Instant::now();
    let mut all = Sha256::new();
    for i in 0..files {
        let bytes = fs::read(under(root, &machine_path(i))).unwrap();
        all.update(Sha256::digest(&bytes));
    }
    std::hint::black_box(all.finalize());
    started.elapsed()
}

fn peak_memory_kib() -> u64 {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // `cargo bench` passes `--bench`; anything else (`cargo test --benches`) is a smoke run.
    let measured = std::env::args().any(|a| a == "--bench");
    let (files, rounds) = if measured {
        (FILES, ROUNDS)
    } else {
        (SMOKE_FILES, 1)
    };
    let declaration = declaration(files);
    if std::env::var_os("MESH_BENCH_PROFILE_NOOP").is_some() {
        // For `perf record`: one first apply, then many no-op applies.
        let dir = tempfile::tempdir().unwrap();
        let config = HostConfig {
            root: dir.path().join("root"),
            state_dir: dir.path().join("state"),
            ..HostConfig::default()
        };
        make_dirs(&config.root);
        apply(&config, &declaration, 1_800_000_000).unwrap();
        for _ in 0..20 {
            let t = Instant::now();
            std::hint::black_box(declaration.digest());
            let digest = t.elapsed();
            let t = Instant::now();
            std::hint::black_box(declaration.problems());
            let problems = t.elapsed();
            let t = Instant::now();
            let bytes = fs::read(config.state_dir.join("state.json")).unwrap();
            let state: mesh_apply::state::StateFile = serde_json::from_slice(&bytes).unwrap();
            std::hint::black_box(state);
            let state = t.elapsed();
            let read = read_baseline(&config.root, files);
            let t = Instant::now();
            apply(&config, &declaration, 1_800_000_060).unwrap();
            let noop = t.elapsed();
            println!(
                "digest {digest:.2?} problems {problems:.2?} state {state:.2?} read+hash {read:.2?} no-op {noop:.2?}"
            );
        }
        return;
    }
    let mut first_ratios = Vec::new();
    let mut noop_ratios = Vec::new();
    let mut lines = Vec::new();
    for round in 0..rounds {
        let dir = tempfile::tempdir().unwrap();
        let baseline_root = dir.path().join("baseline");
        let config = HostConfig {
            root: dir.path().join("root"),
            state_dir: dir.path().join("state"),
            ..HostConfig::default()
        };
        make_dirs(&baseline_root);
        make_dirs(&config.root);

        // Which of the two writes first alternates, so neither always meets the other's
        // writeback.
        let first_apply = || {
            let started = Instant::now();
            let report = apply(&config, &declaration, 1_800_000_000).unwrap();
            assert_eq!(report.tally().get("applied"), Some(&files));
            started.elapsed()
        };
        let (write, first) = if round % 2 == 0 {
            let write = write_baseline(&baseline_root, files);
            (write, first_apply())
        } else {
            let first = first_apply();
            (write_baseline(&baseline_root, files), first)
        };

        let read = read_baseline(&config.root, files);
        let started = Instant::now();
        let report = apply(&config, &declaration, 1_800_000_060).unwrap();
        let noop = started.elapsed();
        assert_eq!(report.tally().get("unchanged"), Some(&files));

        let first_ratio = first.as_secs_f64() / write.as_secs_f64();
        let noop_ratio = noop.as_secs_f64() / read.as_secs_f64();
        lines.push(format!(
            "round {round}: first apply {first:.2?} vs write+fsync+rename {write:.2?} = {first_ratio:.2}x; \
             no-op apply {noop:.2?} vs read+hash {read:.2?} = {noop_ratio:.2}x"
        ));
        first_ratios.push(first_ratio);
        noop_ratios.push(noop_ratio);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let first = median(&mut first_ratios);
    let noop = median(&mut noop_ratios);
    let peak_mib = peak_memory_kib() as f64 / 1024.0;
    println!("mesh-apply, {files} file resources, {rounds} rounds");
    for line in lines {
        println!("  {line}");
    }
    println!("first apply / write+fsync+rename (median): {first:.2}x (bound 2.0x)");
    println!("no-op apply / read+hash (median):          {noop:.2}x (bound 1.5x)");
    println!("peak memory (VmHWM):                       {peak_mib:.1} MiB (bound 100 MB)");
    if !measured {
        println!("(a smoke run: no bound is checked; `cargo bench -p mesh-apply` measures)");
        return;
    }
    let ok = first <= 2.0 && noop <= 1.5 && peak_mib * 1.048_576 < 100.0;
    if !ok {
        println!("FAILED: a bound is exceeded");
        std::process::exit(1);
    }
}
