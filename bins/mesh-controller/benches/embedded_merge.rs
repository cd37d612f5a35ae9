//! The embedded default at scale: a first merge of ten modules over N nodes against
//! ten `push --all` of the same N nodes, measured in the same run, through the library.
//!
//! Both go through the same [`Fleet`]: simulated hosts in this process that apply nothing and
//! answer each declaration at once with a real converged report naming every resource, so
//! what is measured is the controller's own work (composing, deciding, the records, the
//! rollout's state machine) — not the hosts' applies, which are the same for both. Each side
//! has a home of its own: the pushes' catalogue is the home's, the merge's a real git
//! repository whose ten modules (three small files each) are built into the home's OCI store.
//!
//! `cargo bench -p mesh-controller --bench embedded_merge`. Knobs (environment):
//! `MESH_BENCH_NODES` (default `1000,4000`), `MESH_BENCH_BUDGET_SECS` (default 900: a merge
//! not finished by then is reported as "more than", and the run ends there), `MESH_BENCH_TMP`
//! (where the homes are made; default `/dev/shm`).
//!
//! Printed: each time, and each ratio against its target (merge ≤ 1.5× ten pushes; 1,000 →
//! 4,000 nodes grows ≤ 4.5×). Nothing is asserted: timings are read, not tested.

mod support;

use mesh_controller::plans::MergeOutcome;
use mesh_controller::GivenFleet;
use mesh_controller::Home;
use mesh_controller::Mesh;
use mesh_controller::MeshOptions;
use mesh_controller::Runtime;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::modules::{self, write};
use support::simulated::Simulated;
use support::ten_modules::{self, module_files, MODULES};
use support::{inventory, node_name, scratch};

/// A home of `nodes` nodes, each assigned the ten modules; the modules in its catalogue when
/// `catalogue` says so.
fn home(dir: &Path, nodes: usize, catalogue: bool) -> Home {
    write(
        &dir.join("inventory.toml"),
        &inventory(nodes, &ten_modules::names()),
    );
    std::fs::create_dir_all(dir.join("catalogue/modules")).unwrap();
    if catalogue {
        for (path, text) in module_files("v1") {
            write(&dir.join("catalogue").join(path), &text);
        }
    }
    Home::new(dir)
}

fn given(fleet: Simulated) -> GivenFleet {
    Arc::new(tokio::sync::Mutex::new(Box::new(fleet)))
}

/// Ten `push --all` of `nodes` nodes: the time of all ten.
fn ten_pushes(runtime: &tokio::runtime::Runtime, nodes: usize) -> Duration {
    let dir = tempfile::Builder::new()
        .prefix("mesh-bench-push-")
        .tempdir_in(scratch())
        .unwrap();
    let home = home(dir.path(), nodes, true);
    let store = mesh_store::open_store(&mesh_store::store::default_store_spec(dir.path())).unwrap();
    let names: Vec<String> = (0..nodes).map(node_name).collect();
    let mut fleet = Simulated::default();
    let started = Instant::now();
    runtime.block_on(async {
        let checked = mesh_controller::catalogue::effective_catalogue(&home, store.as_ref())
            .await
            .unwrap();
        for _ in 0..MODULES {
            let results = mesh_controller::push(
                &home,
                &mut fleet,
                &checked,
                &names,
                &BTreeSet::new(),
                Duration::from_secs(600),
            )
            .await
            .unwrap();
            let reported = results
                .iter()
                .filter(|r| matches!(r.result, mesh_controller::NodeResult::Reported { .. }))
                .count();
            assert_eq!(reported, nodes, "every node reported");
        }
    });
    started.elapsed()
}

/// A first merge of the ten modules over `nodes` nodes: its time, or why there is none — it
/// did not finish within `budget` (its thread is left running: the run ends) or it failed.
fn first_merge(nodes: usize, budget: Duration) -> Result<Duration, String> {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let dir = tempfile::Builder::new()
            .prefix("mesh-bench-merge-")
            .tempdir_in(scratch())
            .unwrap();
        let repo = dir.path().join("repo");
        modules::repository(&repo);
        let root = dir.path().join("home");
        let home = home(&root, nodes, false);
        mesh_controller::catalogue::add(&home, "cat", &repo, None, "modules").unwrap();
        let mesh = Mesh::open(&root, MeshOptions::default())
            .unwrap()
            .with_fleet(given(Simulated::default()));
        let tokio = tokio::runtime::Runtime::new().unwrap();
        let runtime = Runtime::new(Arc::new(mesh), Arc::new(mesh_controller::Quiet));
        let started = Instant::now();
        let outcome = tokio
            .block_on(runtime.merge("cat", &Default::default()))
            .unwrap();
        let took = started.elapsed();
        let MergeOutcome::Planned { plan, .. } = outcome else {
            panic!("the first merge plans")
        };
        assert_eq!(plan.state, mesh_model::plan::PlanState::Done, "{plan:?}");
        let _ = done.send(took);
    });
    finished.recv_timeout(budget).map_err(|e| match e {
        std::sync::mpsc::RecvTimeoutError::Timeout => {
            format!("not finished after {} s", budget.as_secs())
        }
        std::sync::mpsc::RecvTimeoutError::Disconnected => "failed (its panic is above)".to_owned(),
    })
}

fn main() {
    let sizes: Vec<usize> = std::env::var("MESH_BENCH_NODES")
        .unwrap_or_else(|_| "1000,4000".to_owned())
        .split(',')
        .map(|n| {
            n.trim()
                .parse()
                .expect("MESH_BENCH_NODES: numbers, comma-separated")
        })
        .collect();
    let budget = Duration::from_secs(
        std::env::var("MESH_BENCH_BUDGET_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(900),
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    println!(
        "embedded: a first merge of {MODULES} modules (3 files each) vs ten `push --all`, \
         simulated hosts answering at once"
    );
    let mut merges: Vec<(usize, Duration)> = Vec::new();
    for &nodes in &sizes {
        let pushes = ten_pushes(&runtime, nodes);
        println!(
            "  {nodes} nodes: ten pushes {:.2} s ({:.3} ms per node and push)",
            pushes.as_secs_f64(),
            pushes.as_secs_f64() * 1000.0 / (nodes * MODULES) as f64
        );
        match first_merge(nodes, budget) {
            Ok(merge) => {
                let ratio = merge.as_secs_f64() / pushes.as_secs_f64();
                println!(
                    "  {nodes} nodes: first merge {:.2} s = {ratio:.2}x ten pushes (target <= 1.5x: {})",
                    merge.as_secs_f64(),
                    if ratio <= 1.5 { "met" } else { "NOT met" }
                );
                merges.push((nodes, merge));
            }
            Err(why) => {
                let ratio = budget.as_secs_f64() / pushes.as_secs_f64();
                println!(
                    "  {nodes} nodes: first merge {why} (more than {ratio:.1}x ten pushes when \
                     not finished; target <= 1.5x: NOT met); the run ends here"
                );
                break;
            }
        }
    }
    for pair in merges.windows(2) {
        let ((small, a), (large, b)) = (pair[0], pair[1]);
        let growth = b.as_secs_f64() / a.as_secs_f64();
        let target = 4.5 * (large as f64 / small as f64) / 4.0;
        println!(
            "  growth {small} -> {large} nodes: {growth:.2}x (target <= {target:.1}x: {})",
            if growth <= target { "met" } else { "NOT met" }
        );
    }
    // A merge left running past its budget is not waited for.
    std::process::exit(0);
}
