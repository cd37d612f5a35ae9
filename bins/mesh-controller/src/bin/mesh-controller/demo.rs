//! `demo`: the whole embedded mesh in a temporary home, explained for a newcomer.

use crate::{init, render};
use anyhow::{Context, Result};
use mesh_controller::home::Home;
use mesh_controller::in_process::InProcessFleet;
use mesh_controller::{builds, executor, plans, push, settings, status};
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
    let store = mesh_store::store::open_store(&mesh_store::store::default_store_spec(home.root()))
        .context("opening the demo's store")?;
    let runtime = tokio::runtime::Runtime::new()?;
    // Whether this machine runs containers (the container steps need podman).
    let podman = std::process::Command::new("podman")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    let progress = Print;
    let merge = || -> Result<plans::MergeOutcome> {
        let ctx = plans::Ctx {
            home: &home,
            store: store.as_ref(),
            progress: &progress,
            bus: None,
            moves: BTreeSet::new(),
            fleet: None,
        };
        Ok(runtime.block_on(plans::merge(&ctx, "demo", None, false))?)
    };
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
    let catalogue = || -> Result<push::Checked> {
        Ok(runtime.block_on(builds::effective_catalogue(&home, store.as_ref()))?)
    };
    let checked = catalogue()?;
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
    let push_all = |checked: &push::Checked| {
        runtime.block_on(async {
            let mut fleet =
                InProcessFleet::start(mesh_store::store::default_store_spec(home.root())).await?;
            executor::push(
                &home,
                &mut fleet,
                checked,
                &nodes,
                &BTreeSet::new(),
                Duration::from_secs(120),
            )
            .await
        })
    };
    let first = push_all(&checked)?;
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
    let second = push_all(&checked)?;
    print!("{}", render::push(&second));

    // The guards: what makes the mesh safe to point at machines one cares about.
    let on = settings::On {
        home: &home,
        catalogue: &checked.0,
        command: "mesh-controller settings set base …",
    };
    step(
        "7. A settings change that would drop a key is refused; nothing changes",
        r#"settings set base '{"timezone": "Europe/Brussels"}'"#,
    );
    let refused = settings::set(
        &on,
        "base",
        None,
        r#"{"timezone": "Europe/Brussels"}"#,
        false,
        mesh_host::now(),
    )?;
    print!("{}", render::settings_answer(&refused));
    println!("  (with --replace it would go ahead, the layer it replaces kept in the history)");
    step(
        "8. The same change keeping every key goes ahead; the layer it replaced is kept",
        r#"settings set base '{"admin-email": "ops@example.internal", "timezone": "Europe/Brussels"}'"#,
    );
    let set = settings::set(
        &on,
        "base",
        None,
        r#"{"admin-email": "ops@example.internal", "timezone": "Europe/Brussels"}"#,
        false,
        mesh_host::now(),
    )?;
    print!("{}", render::settings_answer(&set));
    settings::set(
        &on,
        "media",
        None,
        r#"{"port": 8097}"#,
        false,
        mesh_host::now(),
    )?;
    step(
        "9. Before anything is sent: what `home` would be sent, field by field \
         (its container would be recreated: its port changed)",
        "plan home --diff",
    );
    let checked = catalogue()?;
    let composed = push::compose_node(&home, &checked, "home")?;
    print!(
        "{}",
        mesh_plan::diff(home.sent("home")?.as_ref(), &composed).render_text()
    );
    step("10. Send it", "push --all");
    let sent = push_all(&checked)?;
    print!("{}", render::push(&sent));
    let container_failed = sent.iter().any(|result| match &result.result {
        push::NodeResult::Reported { report, .. } => {
            report.resources.iter().any(|(id, outcome)| {
                id.contains("/container/")
                    && matches!(outcome, mesh_model::report::Outcome::Failed { .. })
            })
        }
        _ => false,
    });
    if container_failed {
        println!(
            "  (the container cannot run on this machine ({}): expected here, and a real \
             host reports it exactly so; the other resources took)",
            if podman {
                "podman is here, the demo's image `localhost/mesh-busybox` is not"
            } else {
                "no podman"
            }
        );
    }

    step(
        "11. A catalogue in git: a merge is planned, built into the store and rolled out one \
         machine first",
        "repo add demo REPO; merge demo",
    );
    let repo = dir.path().join("catalogue-repo");
    if let Err(why) = make_repo(&repo, "hello\n", None) {
        println!("  skipped: {why}");
    } else {
        mesh_controller::repos::add(&home, "demo", &repo, None, "modules")?;
        let mut file = home.inventory()?.file;
        file.assignments
            .insert("hello".to_owned(), nodes.iter().cloned().collect());
        home.write_inventory(&file)?;
        let merged = merge()?;
        print!("{}", render::merge(&merged));

        step(
            "12. A second merge whose first machine fails stops there: the other nodes keep \
             what they ran",
            "merge demo",
        );
        make_repo(&repo, "hello again\n", Some("nobody-here"))
            .map_err(|why| anyhow::anyhow!(why))?;
        let merged = merge()?;
        print!("{}", render::merge(&merged));
        step(
            "13. `status` names the node and the reason (and exits 3: it needs a person)",
            "status",
        );
        print!(
            "{}",
            render::status(&status::overview(
                &home,
                mesh_host::now(),
                push::SILENT_AFTER_SECS
            )?)
        );
    }

    let motd = home.node_root("laptop", &inventory).join("etc/motd");
    step(
        "14. Drift: a managed file changed by hand is put back by the next apply, and the \
         report says so",
        "push laptop",
    );
    std::fs::write(&motd, "changed by hand\n")
        .with_context(|| format!("writing {}", motd.display()))?;
    let checked = catalogue()?;
    let laptop = runtime.block_on(async {
        let mut fleet =
            InProcessFleet::start(mesh_store::store::default_store_spec(home.root())).await?;
        executor::push(
            &home,
            &mut fleet,
            &checked,
            &["laptop".to_owned()],
            &BTreeSet::new(),
            Duration::from_secs(120),
        )
        .await
    })?;
    print!("{}", render::push(&laptop));
    println!(
        "  ({} holds the module's text again; `mesh-host serve` on a real host watches its \
         files and does this by itself, reporting the drift)",
        motd.display()
    );
    println!(
        "\n== 15. Maintenance windows hold containers still while a step runs: \
         `mesh-host window run --help`{}",
        if podman {
            ""
        } else {
            " (skipped here: no podman)"
        }
    );

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

/// Progress lines printed as they come, indented under the step.
struct Print;

impl mesh_controller::Progress for Print {
    fn line(&self, text: &str) {
        println!("  {text}");
    }
}

/// Writes the demo's catalogue repository (a module `hello` with one file, and with `broken`
/// a membership of an account no node has) and commits it; `Err` says why git could not.
fn make_repo(
    repo: &std::path::Path,
    greeting: &str,
    broken: Option<&str>,
) -> std::result::Result<(), String> {
    let module = repo.join("modules/hello");
    std::fs::create_dir_all(module.join("files")).map_err(|e| e.to_string())?;
    let mut toml = String::from(
        "name = \"hello\"\n\n[files.greeting]\nsource = \"files/greeting.txt\"\npath = \"/etc/hello.txt\"\n",
    );
    if let Some(account) = broken {
        toml.push_str(&format!(
            "\n[memberships.video]\naccount = \"{account}\"\ngroup = \"video\"\n"
        ));
    }
    std::fs::write(module.join("module.toml"), toml).map_err(|e| e.to_string())?;
    std::fs::write(module.join("files/greeting.txt"), greeting).map_err(|e| e.to_string())?;
    let git = |args: &[&str]| -> std::result::Result<(), String> {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(repo)
            .args([
                "-c",
                "user.name=mesh demo",
                "-c",
                "user.email=demo@mesh.invalid",
            ])
            .args(args)
            .output()
            .map_err(|e| format!("git cannot be run ({e}); the merge steps need it"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "git {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    };
    if !repo.join(".git").exists() {
        git(&["init", "-q", "-b", "main"])?;
    }
    git(&["add", "-A"])?;
    git(&["commit", "-q", "-m", "the demo's catalogue"])
}
