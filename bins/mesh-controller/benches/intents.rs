//! What keeping every node's intent costs, over a home of N nodes (the embedded default's
//! records, in `MESH_BENCH_TMP`), each node assigned one module of 30 templated files, sent its
//! declaration and reporting it current:
//!
//! 1. `status` with intents against `status` without them, in the same run: the intents made
//!    current first ([`mesh_controller::status::keep_current`], which finds the fingerprint of
//!    their inputs unchanged and composes nothing) then [`mesh_controller::status::overview`],
//!    against the overview of the same home with no intent kept (target ≤ 1.2×).
//! 2. A mesh-wide settings change, which changes every node's intent: the layer set, then the
//!    intents made current (every node composed again and its record written), against
//!    composing those N declarations once, on as many threads as the intents use, and taking
//!    their digests (target ≤ 2×).
//!
//! `cargo bench -p mesh-controller --bench intents`. Knobs (environment): `MESH_BENCH_NODES`
//! (default 10000), `MESH_BENCH_TMP` (default `/dev/shm`). It prints each time and the ratios;
//! nothing is asserted but that the intents name every node and what each change made pending.

mod support;

use mesh_controller::Home;
use mesh_model::declaration::{Declaration, Outgoing};
use mesh_model::report::{MachineState, Outcome, Report, REPORT_FORMAT};
use std::time::Instant;
use support::{inventory, node_name, scratch};

const ROUNDS: usize = 3;

/// `app`'s definition: 30 files, each templated from a mesh-wide setting.
fn app_module() -> String {
    let mut text = String::from("name = \"app\"\n\n[settings]\ngreeting = \"hello\"\n");
    for f in 0..30 {
        text.push_str(&format!(
            "\n[files.f{f:02}]\nsource = \"files/f\"\npath = \"/etc/app/f{f:02}\"\ntemplate = true\n"
        ));
    }
    text
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let measured = std::env::args().any(|a| a == "--bench");
    let nodes: usize = std::env::var("MESH_BENCH_NODES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(if measured { 10_000 } else { 50 });
    let dir = tempfile::Builder::new()
        .prefix("mesh-bench-intents-")
        .tempdir_in(scratch())
        .unwrap();
    let root = dir.path().join("home");
    let set_up = Instant::now();
    support::modules::write(
        &root.join("inventory.toml"),
        &inventory(nodes, &["app".to_owned()]),
    );
    support::modules::write(
        &root.join("catalogue/modules/app/module.toml"),
        &app_module(),
    );
    support::modules::write(
        &root.join("catalogue/modules/app/files/f"),
        "{{greeting}}, from the mesh\n",
    );
    let home = Home::new(&root);
    let store = mesh_store::open_store_with(
        &mesh_store::store::default_store_spec(&root),
        &mesh_store::store::StoreAccess::default(),
    )
    .unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let checked = home.catalogue().unwrap();
    let names: Vec<String> = (0..nodes).map(node_name).collect();
    // Every node sent its declaration, and reporting it applied.
    let declarations: Vec<Outgoing> = names
        .iter()
        .map(|node| Outgoing::new(mesh_controller::compose_node(&home, &checked, node).unwrap()))
        .collect();
    home.sent()
        .record_many(&declarations.iter().collect::<Vec<_>>())
        .unwrap();
    let now = mesh_store::clock::now();
    for declaration in &declarations {
        home.reports()
            .record(&Report {
                format: REPORT_FORMAT,
                node: declaration.node().to_owned(),
                declaration: declaration.digest().to_owned(),
                machine: MachineState::Converged,
                resources: (0..30)
                    .map(|r| (format!("app/file/f{r:02}"), Outcome::Unchanged))
                    .collect(),
                undeclared: Default::default(),
                findings: Vec::new(),
                windows: Vec::new(),
                resumed_from_mid_change: false,
                drift: Vec::new(),
                host_failure: None,
                send: None,
                published_at: None,
                started_at: now,
                finished_at: now,
            })
            .unwrap();
    }
    drop(declarations);
    println!(
        "intents over {nodes} nodes of 30 files each: set up in {:.1} s",
        set_up.elapsed().as_secs_f64()
    );

    // 1. status with intents and without.
    let intents_dir = root.join("intents");
    let mut ratios = Vec::new();
    for round in 0..ROUNDS {
        let _ = std::fs::remove_dir_all(&intents_dir);
        let started = Instant::now();
        let overview = mesh_controller::status::overview(&home, now, 90).unwrap();
        let without = started.elapsed();
        assert!(overview.nodes.iter().all(|n| n.intent.is_none()));
        runtime
            .block_on(mesh_controller::status::keep_current(&home, store.as_ref()))
            .unwrap();
        let started = Instant::now();
        let kept = runtime
            .block_on(mesh_controller::status::keep_current(&home, store.as_ref()))
            .unwrap();
        let overview = mesh_controller::status::overview(&home, now, 90).unwrap();
        let with = started.elapsed();
        assert_eq!(kept, mesh_controller::status::Kept::Current);
        assert!(overview
            .nodes
            .iter()
            .all(|n| n.intent == n.sent && n.intent.is_some()));
        assert!(overview.pending.is_empty());
        let ratio = with.as_secs_f64() / without.as_secs_f64();
        println!(
            "  round {round}: status without intents {without:.2?}; with {with:.2?} = {ratio:.2}x"
        );
        ratios.push(ratio);
    }
    println!(
        "status with intents / without (median): {:.2}x (target 1.2x)",
        median(&mut ratios)
    );

    // 2. A mesh-wide settings change: every intent composed again and written, against
    // composing those declarations once.
    let mut ratios = Vec::new();
    for round in 0..ROUNDS {
        let greeting = format!("good day {round}");
        let started = Instant::now();
        let on = mesh_controller::settings::On {
            home: &home,
            catalogue: &checked.0,
            command: "mesh-controller settings set app",
        };
        let answer = mesh_controller::settings::set(
            &on,
            "app",
            None,
            &serde_json::json!({ "greeting": greeting }).to_string(),
            false,
            now,
        )
        .unwrap();
        assert!(!answer.refused(), "{answer:?}");
        let kept = runtime
            .block_on(mesh_controller::status::keep_current(&home, store.as_ref()))
            .unwrap();
        let refresh = started.elapsed();
        assert_eq!(
            kept,
            mesh_controller::status::Kept::Recomposed {
                nodes,
                changed: nodes
            }
        );
        let started = Instant::now();
        let digests = compose_all(&home, &names);
        let compose = started.elapsed();
        assert_eq!(digests, nodes);
        let ratio = refresh.as_secs_f64() / compose.as_secs_f64();
        println!(
            "  round {round}: settings set + intents made current {refresh:.2?}; composing \
             every declaration once {compose:.2?} = {ratio:.2}x"
        );
        ratios.push(ratio);
    }
    let overview = mesh_controller::status::overview(&home, now, 90).unwrap();
    assert_eq!(overview.pending.len(), nodes, "every node pending");
    println!(
        "a mesh-wide settings change's intents / composing once (median): {:.2}x (target 2.0x)",
        median(&mut ratios)
    );
}

/// Every node's declaration composed once over the catalogue the nodes run and its digest
/// taken, on as many threads as the intents use (the machine's cores, at most 4); how many.
fn compose_all(home: &Home, names: &[String]) -> usize {
    let (catalogue, _) = home.catalogue().unwrap();
    let inventory = home.inventory().unwrap();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let one = |node: &String| -> Declaration {
        mesh_plan::compose(&catalogue, &inventory, node).unwrap()
    };
    let one = &one;
    std::thread::scope(|scope| {
        let parts: Vec<_> = names
            .chunks(names.len().div_ceil(threads))
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .filter(|n| one(n).digest().starts_with("sha256:"))
                        .count()
                })
            })
            .collect();
        parts.into_iter().map(|p| p.join().unwrap()).sum()
    })
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
