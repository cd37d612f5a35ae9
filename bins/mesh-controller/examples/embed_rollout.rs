//! Embedding the mesh: a Rust program that drives a merge's one-machine-first rollout in
//! process, through the `mesh_controller` library — no binary, no copied code.
//!
//! It makes a mesh home and a git repository of one module in a temporary directory, opens the
//! mesh (`Mesh::open`: its home, its store and the fleet it sends through — here the embedded
//! default), registers the repository, and hears a merge through the mesh's `Runtime`: the plan
//! is built into the home's OCI layout store and its drive, a task the runtime owns, rolls it
//! out to two nodes, one first, each applying under its own sandbox root. Then it reads status.
//!
//! `cargo run -p mesh-controller --example embed_rollout` (needs `git`).

use anyhow::{Context, Result};

use mesh_controller::catalogue;
use mesh_controller::plans::MergeOutcome;
use mesh_controller::MergeOptions;
use mesh_controller::Mesh;
use mesh_controller::MeshOptions;
use mesh_controller::Runtime;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

/// Progress printed as it comes.
struct Printed;

impl mesh_controller::Progress for Printed {
    fn line(&self, text: &str) {
        println!("{text}");
    }
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::create_dir_all(path.parent().context("a file has a directory")?)?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn git(repo: &Path, args: &[&str]) -> Result<()> {
    let status = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args([
            "-c",
            "user.name=example",
            "-c",
            "user.email=example@localhost",
        ])
        .args(args)
        .status()
        .context("running git")?;
    anyhow::ensure!(status.success(), "git {} failed", args.join(" "));
    Ok(())
}

fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let home_dir = dir.path().join("home");
    write(
        &home_dir.join("inventory.toml"),
        "bus-node = \"web1\"\n\n[nodes.web1]\n[nodes.web2]\n\n[assignments]\nhello = [\"web1\", \"web2\"]\n",
    )?;
    for node in ["web1", "web2"] {
        let etc = home_dir.join("roots").join(node).join("etc");
        write(&etc.join("passwd"), "root:x:0:0:root:/root:/bin/sh\n")?;
        write(&etc.join("group"), "root:x:0:\n")?;
    }
    let repo = dir.path().join("catalogue");
    write(
        &repo.join("modules/hello/module.toml"),
        "name = \"hello\"\n\n[files.greeting]\nsource = \"files/greeting.txt\"\npath = \"/etc/greeting\"\n",
    )?;
    write(&repo.join("modules/hello/files/greeting.txt"), "hello\n")?;
    git(&repo, &["init", "-q", "-b", "main"])?;
    git(&repo, &["add", "."])?;
    git(&repo, &["commit", "-q", "-m", "hello"])?;

    // No bus: the embedded default, one host agent per node in this process. With
    // `bus: Some(..)` the same calls go to a fleet's hosts; `Mesh::with_fleet` brings your own
    // `fleet::Fleet`.
    let mesh = Arc::new(Mesh::open(&home_dir, MeshOptions::default())?);
    let home = mesh.home();
    catalogue::add(home, "catalogue", &repo, None, "modules")?;
    let runtime = Runtime::new(Arc::clone(&mesh), Arc::new(Printed));
    let tokio = tokio::runtime::Runtime::new()?;
    // The registered branch's head, built and rolled out; no running container's data may move.
    let outcome = tokio.block_on(runtime.merge("catalogue", &MergeOptions::default()))?;
    if let MergeOutcome::Planned { plan, .. } = &outcome {
        println!("{}: {}", plan.id, mesh_plan::plans::state_word(&plan.state));
    }
    let overview = mesh.status()?;
    for node in &overview.nodes {
        let machine = node.machine_word().unwrap_or("no report");
        println!("{}: {machine}", node.node);
    }
    let greeting = home_dir.join("roots/web2/etc/greeting");
    print!(
        "{}: {}",
        greeting.display(),
        std::fs::read_to_string(&greeting)?
    );
    Ok(())
}
