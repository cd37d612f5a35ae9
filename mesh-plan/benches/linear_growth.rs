//! Planning a merge (attribution, tiers, supersede) over a catalogue of 1,000 and 5,000 modules
//! (four dependency edges each: 20,000 at 5,000), and the rollout state machine driving 1,000
//! and 5,000 nodes, in one run (time at 5,000 at most 6× time at 1,000).
//!
//! Run with `cargo bench -p mesh-plan --bench linear_growth`; with `MESH_BENCH_PARTS=1` it also
//! times attribution, supersede and tiers on their own.

use mesh_model::module::{OnFailure, Upgrade};
use mesh_model::plan::{Plan, PlanState};
use mesh_plan::attribution::DependencyGraph;
use mesh_plan::rollout::{NodeReport, RolloutNode, Verdict};
use mesh_plan::{attribute, step, supersede, Event, RolloutSpec, RolloutState};
use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Each measurement is the best of at least this many runs...
const ROUNDS: usize = 10;
/// ...and of as many more as fit in this time (the machine is shared: the best run is the one
/// least disturbed).
const BUDGET: Duration = Duration::from_millis(400);
const EDGES_PER_MODULE: usize = 4;

/// A deterministic pseudo-random sequence (no dependency needed).
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

struct Catalogue {
    graph: DependencyGraph,
    /// Dependency edges after repeats are removed (a little under four a module).
    edges: usize,
    known: BTreeSet<String>,
    changed_paths: Vec<String>,
    older: Vec<Plan>,
}

fn catalogue(modules: usize) -> Catalogue {
    let mut random = Lcg(7);
    let name = |i: usize| format!("module-{i:05}");
    let mut graph = BTreeMap::new();
    for i in 0..modules {
        let mut depends: Vec<String> = (0..EDGES_PER_MODULE.min(i))
            .map(|_| name(random.below(i)))
            .collect();
        depends.sort();
        depends.dedup();
        graph.insert(name(i), depends);
    }
    let known = graph.keys().cloned().collect();
    let edges = graph.values().map(Vec::len).sum();
    // Indexed once when the catalogue is loaded, as the controller keeps it.
    let graph = DependencyGraph::new(&graph);
    // A merge touching one module in fifty, three files each.
    let changed_paths = (0..modules)
        .step_by(50)
        .flat_map(|i| {
            let module = name(i);
            (0..3).map(move |f| format!("modules/{module}/files/f{f}"))
        })
        .collect();
    // Older open plans of the same repository, each naming one module in a hundred.
    let older = (0..5)
        .map(|p| Plan {
            id: format!("plan-{p}"),
            repository: "catalogue".into(),
            branch: "main".into(),
            commit: format!("c{p}"),
            made_at: p as u64,
            modules: (p..modules).step_by(100).map(name).collect(),
            tiers: Vec::new(),
            rollouts: BTreeMap::new(),
            state: PlanState::Building,
        })
        .collect();
    Catalogue {
        graph,
        edges,
        known,
        changed_paths,
        older,
    }
}

fn plan_merge(c: &Catalogue) -> usize {
    let attribution = attribute(&c.changed_paths, "modules", &c.known);
    let changed = attribution.changed_modules(&c.known);
    let newer = Plan {
        id: "plan-new".into(),
        repository: "catalogue".into(),
        branch: "main".into(),
        commit: "new".into(),
        made_at: 100,
        modules: changed.into_iter().collect(),
        tiers: Vec::new(),
        rollouts: BTreeMap::new(),
        state: PlanState::Building,
    };
    let folded = supersede(&newer, &c.older);
    let tiers = c.graph.tiers(&folded.modules).expect("no cycle");
    tiers.tiers.len()
}

fn rollout_spec(nodes: usize) -> RolloutSpec {
    RolloutSpec {
        module: "agent".into(),
        upgrade: Upgrade::OneFirst,
        on_failure: OnFailure::Stop,
        deadline_secs: 600,
        max_parallel: None,
        nodes: (0..nodes)
            .map(|n| {
                (
                    format!("node-{n:05}"),
                    RolloutNode {
                        running: true,
                        declaration: format!("sha256:{n}"),
                    },
                )
            })
            .collect(),
        bus_first: None,
    }
}

fn drive_rollout(spec: &RolloutSpec) -> usize {
    let mut state = RolloutState::new();
    let mut actions = 0;
    let mut now = 1_000;
    let report = |node: &str, declaration: &str, made_at| {
        Event::Report(NodeReport {
            node: node.to_owned(),
            declaration: declaration.to_owned(),
            made_at,
            send: None,
            verdict: Verdict::Applied,
        })
    };
    let mut nodes = spec.nodes.iter();
    let (first, first_node) = nodes.next().unwrap();
    actions += step(spec, &mut state, Event::Start, now).len();
    actions += step(
        spec,
        &mut state,
        Event::GrantsIssued {
            nodes: vec![first.clone()],
        },
        now,
    )
    .len();
    now += 5;
    actions += step(
        spec,
        &mut state,
        report(first, &first_node.declaration, now),
        now,
    )
    .len();
    let rest: Vec<String> = nodes.clone().map(|(n, _)| n.clone()).collect();
    actions += step(spec, &mut state, Event::GrantsIssued { nodes: rest }, now).len();
    for (i, (node, info)) in nodes.enumerate() {
        now += 1;
        actions += step(spec, &mut state, report(node, &info.declaration, now), now).len();
        // Ticks come with time, not with nodes: ten in every run.
        if i % (spec.nodes.len() / 10).max(1) == 0 {
            actions += step(spec, &mut state, Event::Tick, now).len();
        }
    }
    assert!(state.outcome.is_some());
    actions
}

fn best(run: impl FnMut() -> usize) -> Duration {
    best_of_batches(1, run)
}

/// The best time of one run, measured over samples of `batch` runs each, so that samples at
/// both sizes last about as long and meet the same disturbances (the 1,000 case runs five
/// times a sample, the 5,000 case once).
fn best_of_batches(batch: u32, mut run: impl FnMut() -> usize) -> Duration {
    let mut best = Duration::MAX;
    let began = Instant::now();
    let mut rounds = 0;
    while rounds < ROUNDS || began.elapsed() < BUDGET {
        let start = Instant::now();
        for _ in 0..batch {
            black_box(run());
        }
        best = best.min(start.elapsed() / batch);
        rounds += 1;
    }
    best
}

fn report(what: &str, small: Duration, large: Duration) {
    let ratio = large.as_secs_f64() / small.as_secs_f64();
    println!(
        "{what}: 1,000 {:>8.2} ms, 5,000 {:>8.2} ms, ratio {ratio:.2} (target <= 6.00) {}",
        small.as_secs_f64() * 1e3,
        large.as_secs_f64() * 1e3,
        if ratio <= 6.0 { "ok" } else { "OVER" }
    );
}

fn main() {
    let (small, large) = (catalogue(1_000), catalogue(5_000));
    println!(
        "planning a merge: 1,000 modules with {} dependency edges, 5,000 with {}",
        small.edges, large.edges
    );
    report(
        "planning a merge (attribute, supersede, tiers)",
        best_of_batches(5, || plan_merge(&small)),
        best_of_batches(1, || plan_merge(&large)),
    );
    if std::env::var_os("MESH_BENCH_PARTS").is_some() {
        for c in [&small, &large] {
            let a = best(|| {
                attribute(&c.changed_paths, "modules", &c.known)
                    .modules
                    .len()
            });
            let changed: BTreeSet<String> = c.known.iter().step_by(50).cloned().collect();
            let t = best(|| c.graph.tiers(&changed).unwrap().tiers.len());
            let r = c.graph.tiers(&changed).unwrap();
            let attribution = attribute(&c.changed_paths, "modules", &c.known);
            let newer = Plan {
                id: "plan-new".into(),
                repository: "catalogue".into(),
                branch: "main".into(),
                commit: "new".into(),
                made_at: 100,
                modules: attribution.changed_modules(&c.known).into_iter().collect(),
                tiers: Vec::new(),
                rollouts: BTreeMap::new(),
                state: PlanState::Building,
            };
            let sup = best(|| supersede(&newer, &c.older).modules.len());
            let folded = supersede(&newer, &c.older).modules;
            let tf = best(|| c.graph.tiers(&folded).unwrap().tiers.len());
            println!(
                "  parts: supersede {sup:?}, tiers of the folded {tf:?} ({})",
                folded.len()
            );
            println!(
                "  parts: attribute {a:?}, tiers {t:?} ({} tiers, {} affected)",
                r.tiers.len(),
                r.affected().len()
            );
        }
    }
    let (small, large) = (rollout_spec(1_000), rollout_spec(5_000));
    report(
        "rollout state machine (nodes)",
        best_of_batches(5, || drive_rollout(&small)),
        best_of_batches(1, || drive_rollout(&large)),
    );
}
