//! `demo`: the whole embedded mesh in a temporary home, explained for a newcomer.

use crate::{init, render};
use anyhow::{Context, Result};
use mesh_controller::home::Home;
use mesh_controller::in_process::InProcessFleet;
use mesh_controller::{executor, push};
use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Duration;

/// Runs the demo, printing each step and its output.
pub fn run() -> Result<ExitCode> {
    let dir = tempfile::Builder::new()
        .prefix("mesh-demo-")
        .tempdir()
        .context("making a temporary home")?;
    let home = Home::new(dir.path());
    let step = |title: &str, command: &str| {
        println!(
            "\n== {title}\n$ mesh-controller --home {} {command}",
            dir.path().display()
        );
    };

    step(
        "1. A new mesh from the book's example: six modules, three nodes, settings layers",
        "init --example",
    );
    init::init(&home, true)?;
    let inventory = home.inventory()?;
    let checked = home.catalogue()?;
    for node in inventory.file.nodes.keys() {
        let modules: Vec<&str> = inventory.modules_of(node).into_iter().collect();
        println!("  node {node}: {}", modules.join(", "));
    }

    step(
        "2. What `home` should hold: its declaration, composed from modules and settings",
        "plan home",
    );
    print!(
        "{}",
        render::declaration(&push::compose_node(&home, &checked, "home")?)
    );

    step(
        "3. Send every node its declaration; each host applies it under its sandbox root",
        "push --all",
    );
    let nodes: Vec<String> = inventory.file.nodes.keys().cloned().collect();
    let runtime = tokio::runtime::Runtime::new()?;
    let push_all = || {
        runtime.block_on(async {
            let mut fleet =
                InProcessFleet::start(mesh_store::store::default_store_spec(home.root())).await?;
            executor::push(
                &home,
                &mut fleet,
                &checked,
                &nodes,
                &BTreeSet::new(),
                Duration::from_secs(120),
            )
            .await
        })
    };
    let first = push_all()?;
    print!("{}", render::push(&first));
    println!("  (a resource that did not take is reported with its reason; nothing is hidden)");

    step("4. What each node last reported", "status");
    print!(
        "{}",
        render::nodes(&push::status(
            &home,
            mesh_host::now(),
            push::SILENT_AFTER_SECS
        )?)
    );

    let motd = home.node_root("laptop", &inventory).join("etc/motd");
    println!("\n== 5. The files are really there: {}", motd.display());
    print!(
        "{}",
        std::fs::read_to_string(&motd).with_context(|| format!("reading {}", motd.display()))?
    );

    step(
        "6. Push again: nothing changed, so every resource that took is `unchanged`",
        "push --all",
    );
    let second = push_all()?;
    print!("{}", render::push(&second));
    // The hosts' containers live in podman, outside the temporary home: every host lets go of
    // what it made (an empty declaration) before the home is removed.
    for node in &nodes {
        let config = mesh_apply::HostConfig {
            root: home.node_root(node, &inventory),
            state_dir: home.node_state_dir(node),
            ..mesh_apply::HostConfig::default()
        };
        let empty = mesh_model::declaration::Declaration::new(node.clone(), Vec::new());
        if let Err(error) = mesh_apply::apply(&config, &empty, mesh_host::now()) {
            eprintln!("warning: `{node}` could not let go of what it made: {error}");
        }
    }
    println!(
        "\nThe demo's home was {}; it is removed now. Make your own with \
         `mesh-controller --home DIR init --example`.",
        dir.path().display()
    );
    Ok(ExitCode::SUCCESS)
}
