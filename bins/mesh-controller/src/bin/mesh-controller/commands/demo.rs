//! `demo`: the whole embedded mesh in a temporary home, explained for a newcomer.

use crate::render;
use anyhow::{Context, Result};
use mesh_controller::catalogue;
use mesh_controller::plans;
use mesh_controller::settings;
use mesh_controller::status;
use mesh_controller::Home;
use mesh_controller::InProcessFleet;
use mesh_controller::Mesh;
use mesh_controller::MeshOptions;
use mesh_controller::Runtime;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Runs init, plan, push and status in a temporary home, explaining each step.
///
/// On a machine where podman cannot run the demo's image, the container steps say so and
/// why; where the example's port is taken, the media container listens on a free one, and
/// the demo says which.
#[derive(clap::Args)]
pub struct Args {
    /// The port the example's media container listens on (default 8096, the example's; when
    /// it is taken, a free one, said).
    #[arg(long, value_name = "PORT")]
    port: Option<u16>,
}

/// The port the example's media module listens on by default.
const EXAMPLE_PORT: u16 = 8096;

/// `wanted` when nothing listens there, else a port the system says is free (and never one of
/// `not`), with the words that say so.
fn free_port(wanted: u16, not: &[u16]) -> Result<(u16, Option<String>)> {
    let free = |port: u16| std::net::TcpListener::bind(("0.0.0.0", port)).is_ok();
    if free(wanted) && !not.contains(&wanted) {
        return Ok((wanted, None));
    }
    loop {
        let port = std::net::TcpListener::bind(("0.0.0.0", 0))
            .and_then(|listener| listener.local_addr())
            .context("asking the system for a free port")?
            .port();
        if !not.contains(&port) {
            return Ok((
                port,
                Some(format!(
                    "port {wanted} is taken on this machine: the media container listens on \
                     {port} instead"
                )),
            ));
        }
    }
}

/// Runs the demo, printing each step and its output.
pub fn exec(args: Args) -> Result<ExitCode> {
    let dir = DemoHome::make().context("making a temporary home")?;
    let mesh = std::sync::Arc::new(
        Mesh::open(dir.path(), MeshOptions::default()).context("opening the demo's store")?,
    );
    let home = mesh.home().clone();
    let runtime = tokio::runtime::Runtime::new()?;
    // Whether this machine runs containers (the container steps need podman).
    let podman = std::process::Command::new("podman")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    let drives = Runtime::new(std::sync::Arc::clone(&mesh), std::sync::Arc::new(Print));
    let merge = || -> Result<plans::MergeOutcome> {
        Ok(runtime.block_on(drives.merge("demo", &Default::default()))?)
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
    mesh_controller::init(&home, true)?;
    let inventory = home.inventory()?;
    let catalogue = || -> Result<mesh_controller::Checked> {
        Ok(runtime.block_on(catalogue::effective_catalogue(&home, mesh.store()))?)
    };
    let checked = catalogue()?;
    for node in inventory.file.nodes.keys() {
        let modules: Vec<&str> = inventory.modules_of(node).into_iter().collect();
        println!("  node {node}: {}", modules.join(", "));
    }
    // The media container listens on the host's network: a port taken there would fail it.
    let (port, taken) = free_port(args.port.unwrap_or(EXAMPLE_PORT), &[])?;
    let on = settings::On {
        home: &home,
        catalogue: &checked.0,
        command: "mesh-controller settings set …",
    };
    if port != EXAMPLE_PORT {
        settings::set(
            &on,
            "media",
            None,
            &format!(r#"{{"port": {port}}}"#),
            false,
            mesh_store::clock::now(),
        )?;
        match &taken {
            Some(taken) => println!("  ({taken}: `settings set media '{{\"port\": {port}}}'`)"),
            None => println!("  (the media container listens on {port}, as --port says)"),
        }
    }

    step(
        "2. What `home` should hold: its declaration, composed from modules and settings",
        "plan home",
    );
    print!(
        "{}",
        render::declaration(&mesh_controller::compose_node(&home, &checked, "home")?)
    );

    step(
        "3. Send every node its declaration; each host applies it under its sandbox root",
        "push --all",
    );
    let nodes: Vec<String> = inventory.file.nodes.keys().cloned().collect();
    let push_to = |checked: &mesh_controller::Checked, to: &[String], moves: &BTreeSet<String>| {
        runtime.block_on(async {
            let mut fleet =
                InProcessFleet::start(&home, mesh_store::store::default_store_spec(home.root()))
                    .await?;
            mesh_controller::push(
                &home,
                &mut fleet,
                checked,
                to,
                moves,
                Duration::from_secs(120),
            )
            .await
        })
    };
    let push_all = |checked: &mesh_controller::Checked| push_to(checked, &nodes, &BTreeSet::new());
    let first = push_all(&checked)?;
    print!("{}", render::push(&first));
    println!("  (a resource that did not take is reported with its reason; nothing is hidden)");

    step("4. What each node last reported", "status");
    print!(
        "{}",
        render::nodes(&mesh_controller::node_statuses(
            &home,
            mesh_store::clock::now(),
            mesh_controller::SILENT_AFTER_SECS
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
        mesh_store::clock::now(),
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
        mesh_store::clock::now(),
    )?;
    print!("{}", render::settings_answer(&set));
    let (next_port, taken) = free_port(port + 1, &[port])?;
    settings::set(
        &on,
        "media",
        None,
        &format!(r#"{{"port": {next_port}}}"#),
        false,
        mesh_store::clock::now(),
    )?;
    if let Some(taken) = taken {
        println!("  ({taken})");
    }
    step(
        "9. Before anything is sent: what `home` would be sent, field by field \
         (its container would be recreated: its port changed)",
        "plan home --diff",
    );
    let checked = catalogue()?;
    let composed = mesh_controller::compose_node(&home, &checked, "home")?;
    print!(
        "{}",
        mesh_plan::diff(home.sent().get("home")?.as_ref(), &composed).render_text()
    );
    step("10. Send it", "push --all");
    let sent = push_all(&checked)?;
    print!("{}", render::push(&sent));
    // A container, or the job it runs after, that did not take (failed, waiting to retry, or
    // skipped behind its job).
    let container_failed = sent.iter().any(|result| match &result.result {
        mesh_controller::NodeResult::Reported { report, .. } => {
            report.resources.iter().any(|(id, outcome)| {
                (id.contains("/container/") || id.contains("/job/")) && !outcome.took()
            })
        }
        _ => false,
    });
    if container_failed {
        println!(
            "  (the container cannot run on this machine ({}): expected here, and a real \
             host reports it exactly so — the job before it failed, and the container waits \
             behind it; the other resources took)",
            if podman {
                "podman is here and could not run it: its reason is above"
            } else {
                "no podman"
            }
        );
    }

    let home_only = ["home".to_owned()];
    step(
        "11. A change that would move a running container's data is held: `home` is sent \
         nothing until a person says the data moved",
        r#"settings set media --node home '{"places": {"media": "/srv/disk2/media", …}}'; push home"#,
    );
    let media_home = r#"{"places": {"media": "/srv/disk2/media", "config": "/srv/disk1/media-config"}, "accesses": {"library": "read-write"}, "endpoints": {"web": "http://home.internal:8096"}}"#;
    settings::set(
        &on,
        "media",
        Some("home"),
        media_home,
        false,
        mesh_store::clock::now(),
    )?;
    let checked = catalogue()?;
    let held = push_to(&checked, &home_only, &BTreeSet::new())?;
    print!("{}", render::push(&held));
    step(
        "12. `--move media` says so (the data was copied, or the container may start on an \
         empty directory): the push goes ahead",
        "push home --move media",
    );
    let moved = push_to(&checked, &home_only, &BTreeSet::from(["media".to_owned()]))?;
    print!("{}", render::push(&moved));

    step(
        "13. A catalogue in git: a merge is planned, built into the store and rolled out one \
         machine first",
        "repo add demo REPO; merge demo",
    );
    let repo = dir.path().join("catalogue-repo");
    if let Err(why) = make_repo(&repo, "hello\n", None) {
        println!("  skipped: {why}");
    } else {
        mesh_controller::catalogue::add(&home, "demo", &repo, None, "modules")?;
        let mut file = home.inventory()?.file;
        file.assignments
            .insert("hello".to_owned(), nodes.iter().cloned().collect());
        home.write_inventory(&file)?;
        let merged = merge()?;
        print!("{}", render::merge(&merged));

        step(
            "14. A second merge whose first machine fails stops there: the other nodes keep \
             what they ran",
            "merge demo",
        );
        make_repo(&repo, "hello again\n", Some("nobody-here"))
            .map_err(|why| anyhow::anyhow!(why))?;
        let merged = merge()?;
        print!("{}", render::merge(&merged));
        step(
            "15. `status` names the node and the reason (and exits 3: it needs a person)",
            "status",
        );
        print!(
            "{}",
            render::status(&status::overview(
                &home,
                mesh_store::clock::now(),
                mesh_controller::SILENT_AFTER_SECS
            )?)
        );
    }

    let motd = home.node_root("laptop", &inventory).join("etc/motd");
    step(
        "16. Drift: a managed file changed by hand is put back by the next apply, and the \
         report says so",
        "push laptop",
    );
    std::fs::write(&motd, "changed by hand\n")
        .with_context(|| format!("writing {}", motd.display()))?;
    let checked = catalogue()?;
    let laptop = runtime.block_on(async {
        let mut fleet =
            InProcessFleet::start(&home, mesh_store::store::default_store_spec(home.root()))
                .await?;
        mesh_controller::push(
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
    step(
        "17. A maintenance window (on the host: `mesh-host window run --step demo-backup \
         --hold CONTAINER -- STEP`) holds a container still while its step runs: an apply \
         meanwhile leaves it alone and says so",
        "push home",
    );
    window_step(&home, &inventory, podman, || {
        let checked = catalogue()?;
        let during = push_to(&checked, &home_only, &BTreeSet::new())?;
        print!("{}", render::push(&during));
        Ok(())
    })?;

    // The hosts' containers live in podman, outside the temporary home: every host lets go of
    // what it made (an empty declaration) before the home is removed.
    for node in &nodes {
        let config = mesh_apply::HostConfig {
            root: home.node_root(node, &inventory),
            state_dir: home.node_state_dir(node),
            container_prefix: mesh_controller::container_prefix(&home, node),
            ..mesh_apply::HostConfig::default()
        };
        let empty = mesh_model::declaration::Declaration::new(node.clone(), Vec::new());
        if let Err(error) = mesh_apply::apply(&config, &empty, mesh_store::clock::now()) {
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

/// The window step: with podman, `home`'s media container is held still (as `mesh-host window
/// run` holds it) while `during` runs, then let go; without podman, one line says why not.
fn window_step(
    home: &Home,
    inventory: &mesh_model::inventory::Inventory,
    podman: bool,
    during: impl FnOnce() -> Result<()>,
) -> Result<()> {
    use mesh_apply::window::{self, ProcessIdentity};
    if !podman {
        println!(
            "  skipped: no podman here (a window holds running containers; on a real host \
             `mesh-host window run` does this around a backup or a migration)"
        );
        return Ok(());
    }
    let config = mesh_apply::HostConfig {
        root: home.node_root("home", inventory),
        state_dir: home.node_state_dir("home"),
        container_prefix: mesh_controller::container_prefix(home, "home"),
        ..mesh_apply::HostConfig::default()
    };
    let mesh_apply::ContainerRuntimeChoice::Podman(podman_config) = &config.containers else {
        println!("  skipped: this host runs no containers");
        return Ok(());
    };
    let runtime = mesh_apply::Podman::new(podman_config.clone(), &config.root);
    let sent = home
        .sent()
        .get("home")?
        .context("`home` was sent nothing")?;
    let Some((id, media)) = sent
        .resources
        .iter()
        .find_map(|resource| match &resource.spec {
            mesh_model::declaration::Spec::Container(spec) if resource.module == "media" => Some((
                resource.id.clone(),
                format!("{}{}", config.container_prefix, spec.name),
            )),
            _ => None,
        })
    else {
        println!("  skipped: `home` runs no media container");
        return Ok(());
    };
    // A window holds a running container: podman may be here and not run the demo's image.
    let report = home.reports().get("home")?;
    let outcome = report.as_ref().and_then(|r| r.resources.get(&id).cloned());
    // A container skipped behind its job is not running for the job's reason.
    let outcome = match outcome {
        Some(mesh_model::report::Outcome::Skipped { gated_by }) => report
            .as_ref()
            .and_then(|r| r.resources.get(&gated_by).cloned())
            .filter(|gate| !gate.took())
            .or(Some(mesh_model::report::Outcome::Skipped { gated_by })),
        other => other,
    };
    if let Some(outcome) = outcome.filter(|o| !o.took()) {
        let why = match &outcome {
            mesh_model::report::Outcome::Failed { reason, .. }
            | mesh_model::report::Outcome::Waiting {
                last_reason: reason,
                ..
            }
            | mesh_model::report::Outcome::Stuck {
                last_reason: reason,
                ..
            } => reason.clone(),
            other => other.word().to_owned(),
        };
        println!(
            "  skipped: `home`'s media container is not running here ({why}); a window holds \
             a running container"
        );
        return Ok(());
    }
    let opened = window::open(
        &config.state_dir,
        "demo-backup",
        std::slice::from_ref(&media),
        ProcessIdentity::current().context("reading this process's start time")?,
        mesh_store::clock::now(),
        &runtime,
    )
    .with_context(|| format!("opening a window holding {media}"))?;
    println!("  window `demo-backup` open: {media} is stopped while the step runs");
    let result = during();
    let released = opened
        .release(&runtime)
        .with_context(|| format!("releasing the window holding {media}"));
    result?;
    released?;
    println!("  window released: {media} runs again; the next apply finds it as declared");
    Ok(())
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

/// The demo's home: a directory of its own under the system's temporary directory (mode 0700,
/// made only where nothing was), removed with everything in it when the demo ends.
struct DemoHome(PathBuf);

impl DemoHome {
    fn make() -> std::io::Result<DemoHome> {
        use std::os::unix::fs::DirBuilderExt as _;
        let base = std::env::temp_dir();
        let mut builder = std::fs::DirBuilder::new();
        builder.mode(0o700);
        let mut n = 0u32;
        loop {
            let path = base.join(format!("mesh-demo-{}-{n}", std::process::id()));
            match builder.create(&path) {
                Ok(()) => return Ok(DemoHome(path)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
                Err(e) => return Err(e),
            }
        }
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for DemoHome {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
