//! The command line, against an OCI layout store and a real docker-registry.

use mesh_model::build::Build;
use mesh_model::module::{EntryKind, ModuleTree};
use mesh_store::archive::{archive_tree, Archive};
use mesh_store::layout::OciLayoutStore;
use mesh_store::lock::PublishLock;
use mesh_store::record_store::{DirRecords, RecordStore};
use mesh_store::records::{forget_module, record_build};
use mesh_store::store::{publish, ArchiveStore};
use mesh_test_support::registry::{RegistryOptions, ShellRegistry};
use std::path::Path;
use std::process::Command;

fn archive(seed: &str) -> Archive {
    let mut tree = ModuleTree::default();
    tree.entries.insert(
        "module.toml".to_owned(),
        EntryKind::File {
            bytes: format!("name = \"m\"\n# {seed}\n").into_bytes(),
            executable: false,
        },
    );
    archive_tree(&tree).unwrap()
}

fn build(module: &str, archive: &Archive, at: u64) -> Build {
    Build {
        module: module.to_owned(),
        repository: "catalogue".to_owned(),
        commit: format!("c{at}"),
        archive: archive.reference.clone(),
        at,
        dry_run: false,
    }
}

/// A home whose records keep `web`'s builds 1..=6 (five of them) and a forgotten `old`; a
/// bare kept archive (published before archives were held) and a ghost (recorded, gone).
fn mesh(home: &Path, layout: &Path, with_ghost: bool) {
    mesh_recorded_in(home, layout, with_ghost, &DirRecords::new(home));
}

/// [`mesh`], its records kept in `records`.
fn mesh_recorded_in(home: &Path, layout: &Path, with_ghost: bool, records: &dyn RecordStore) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = OciLayoutStore::new(layout);
        let lock = PublishLock::acquire(home).await.unwrap();
        for i in 1..=6 {
            let a = archive(&format!("web-{i}"));
            if i == 6 {
                store.put_blob(&a).await.unwrap();
            } else {
                publish(&store, &lock, &a).await.unwrap();
            }
            record_build(records, &lock, &build("web", &a, i)).unwrap();
        }
        let old = archive("old");
        publish(&store, &lock, &old).await.unwrap();
        record_build(records, &lock, &build("old", &old, 1)).unwrap();
        forget_module(records, "old").unwrap();
        if with_ghost {
            record_build(records, &lock, &build("api", &archive("ghost"), 9)).unwrap();
        }
    });
}

fn collector(home: &Path, store: &str, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_mesh-collector"))
        .arg("--home")
        .arg(home)
        .arg("--store")
        .arg(store)
        .args(args)
        .output()
        .unwrap();
    let redact = |bytes: &[u8]| {
        String::from_utf8_lossy(bytes).replace(&home.display().to_string(), "[HOME]")
    };
    (
        output.status.code().unwrap_or(-1),
        redact(&output.stdout),
        redact(&output.stderr),
    )
}

fn check(home: &Path, store: &str, args: &[&str], expect_code: i32) -> String {
    let (code, stdout, stderr) = collector(home, store, args);
    assert_eq!(code, expect_code, "stdout:\n{stdout}\nstderr:\n{stderr}");
    stdout
}

#[test]
fn sweep_then_collect_on_the_layout() {
    let home = tempfile::tempdir().unwrap();
    let layout = home.path().join("store").join("oci");
    mesh(home.path(), &layout, false);
    let store = format!("oci:{}", layout.display());

    // A dry run changes nothing and says the bare archive is not held yet: exit 3.
    insta::assert_snapshot!(
        "sweep_dry_run",
        check(home.path(), &store, &["sweep", "--dry-run"], 3)
    );
    insta::assert_snapshot!("sweep", check(home.path(), &store, &["sweep"], 0));
    insta::assert_snapshot!("collect", check(home.path(), &store, &["collect"], 0));
    // Again: nothing left to let go or delete.
    let again = check(home.path(), &store, &["collect"], 0);
    assert!(
        again.contains("kept 5, held 5 of 5, missing 0, released 0"),
        "{again}"
    );
    assert!(again.contains("deleted 0 blob(s)"), "{again}");
}

// On a fleet the records are the controller's, in the bus's bucket: the collector reads them
// there, and keeps exactly what it keeps from the same records under a home.
#[test]
fn on_a_fleet_the_records_are_read_from_the_bus() {
    let home = tempfile::tempdir().unwrap();
    let layout = home.path().join("store").join("oci");
    let server =
        mesh_test_support::nats_server::NatsServer::start().unwrap_or_else(|e| panic!("{e}"));
    let records = mesh_bus::records::KvRecords::open(&mesh_bus::NatsOptions::new(server.url()))
        .unwrap_or_else(|e| panic!("{e}"));
    mesh_recorded_in(home.path(), &layout, false, &records);
    assert!(
        !home.path().join("store/modules").exists(),
        "the records went to the bus, not the home"
    );
    let store = format!("oci:{}", layout.display());
    let url = server.url();
    // The test server has no users: the controller's password is not checked.
    std::fs::create_dir_all(home.path().join("bus/passwords")).unwrap();
    let password_file = home.path().join("bus/passwords/controller");
    std::fs::write(&password_file, "unchecked-7c2e\n").unwrap();
    // A password file others may read is refused before the bus is reached.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&password_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, _, stderr) = collector(home.path(), &store, &["--bus", &url, "sweep", "--dry-run"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("readable by others (mode 0644)"),
        "{stderr}"
    );
    assert!(!stderr.contains("unchecked-7c2e"), "{stderr}");
    std::fs::set_permissions(&password_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    // Without --bus this home holds no records: nothing would be kept.
    let local = check(home.path(), &store, &["sweep", "--dry-run"], 0);
    assert!(local.contains("kept 0"), "{local}");
    let on_bus = check(
        home.path(),
        &store,
        &["--bus", &url, "sweep", "--dry-run"],
        3,
    );
    assert!(on_bus.contains("kept 5"), "{on_bus}");

    // A controller on another machine holds the plans lock (it may be publishing a build):
    // the collector waits until it is released.
    let lease = |holder: serde_json::Value, beat: u64| {
        let record = serde_json::json!({"format": 1, "holder": holder, "beat": beat});
        records
            .put("locks/plans", &serde_json::to_vec(&record).unwrap())
            .unwrap();
    };
    let holder = serde_json::json!({
        "host": "ctl.example", "pid": 1, "start-time": 0, "doing": "merge cat", "token": "t",
    });
    lease(holder.clone(), 1);
    // Stopping always stops: a collector waiting for the lock stops on SIGTERM at once,
    // having taken nothing.
    let mut stopped = Command::new(env!("CARGO_BIN_EXE_mesh-collector"))
        .arg("--home")
        .arg(home.path())
        .args(["--store", &store, "--bus", &url, "sweep", "--dry-run"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = std::io::BufReader::new(stopped.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("waiting for the plans lock") {
        line.clear();
        assert_ne!(
            std::io::BufRead::read_line(&mut said, &mut line).unwrap(),
            0,
            "the collector ended without waiting for the lock"
        );
    }
    let sent = Command::new("kill")
        .args(["-TERM", &stopped.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = mesh_test_support::wait::wait_for(
        "the collector to stop on SIGTERM",
        std::time::Duration::from_secs(60),
        || {
            stopped
                .try_wait()
                .unwrap()
                .ok_or_else(|| "still running".to_owned())
        },
    );
    assert!(!status.success(), "{status:?}");
    let held: serde_json::Value =
        serde_json::from_slice(&records.get("locks/plans").unwrap().unwrap()).unwrap();
    assert_eq!(held["holder"]["doing"], "merge cat", "{held}");

    let mut waiting = Command::new(env!("CARGO_BIN_EXE_mesh-collector"))
        .arg("--home")
        .arg(home.path())
        .args(["--store", &store, "--bus", &url, "sweep", "--dry-run"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    lease(holder, 2);
    assert!(
        waiting.try_wait().unwrap().is_none(),
        "the collector swept while a controller held the plans lock"
    );
    lease(serde_json::Value::Null, 3);
    let out = waiting.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("waiting for the plans lock, held by merge cat (pid 1 on ctl.example)"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("kept 5"));
    let after: serde_json::Value =
        serde_json::from_slice(&records.get("locks/plans").unwrap().unwrap()).unwrap();
    assert_eq!(
        after["holder"],
        serde_json::Value::Null,
        "released after the run: {after}"
    );

    // A bus that cannot be reached is an error, and nothing is let go.
    drop(records);
    drop(server);
    let index = std::fs::read(layout.join("index.json")).unwrap();
    let (code, _, stderr) = collector(home.path(), &store, &["--bus", &url, "sweep"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("opening the controller's records"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(layout.join("index.json")).unwrap(), index);
}

#[test]
fn collect_refuses_to_run_for_real_while_a_kept_archive_is_missing() {
    let home = tempfile::tempdir().unwrap();
    let layout = home.path().join("store").join("oci");
    mesh(home.path(), &layout, true);
    // The default store: oci:<home>/store/oci.
    let output = Command::new(env!("CARGO_BIN_EXE_mesh-collector"))
        .arg("--home")
        .arg(home.path())
        .args(["--output", "json", "collect"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        answer["summary"],
        "kept 6, held 5 of 6, missing 1, released 2"
    );
    assert_eq!(answer["collection"]["for_real"], false);
    assert!(answer["collection"]["refused"]
        .as_str()
        .unwrap()
        .contains("held 5 of 6"));
    assert_eq!(answer["exit_code"], 3);
    // Nothing was deleted: the forgotten module's blob is still there.
    let blobs = std::fs::read_dir(layout.join("blobs").join("sha256"))
        .unwrap()
        .count();
    let deleted_would = answer["collection"]["deleted"].as_array().unwrap().len();
    assert!(deleted_would > 0);
    assert!(blobs > 6);
}

#[test]
fn a_store_that_is_not_a_store_is_a_clear_error() {
    let home = tempfile::tempdir().unwrap();
    let (code, _, stderr) = collector(home.path(), "ftp://x", &["sweep"]);
    assert_eq!(code, 1);
    insta::assert_snapshot!(stderr, @"error: `ftp://x` is not a store: unknown scheme (use oci:PATH or http://HOST:PORT[/REPOSITORY])");
}

#[test]
fn a_registry_that_is_not_there_fails_the_sweep_and_lets_nothing_go() {
    let home = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (code, stdout, _) = collector(home.path(), &format!("http://127.0.0.1:{port}"), &["sweep"]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("failures (nothing was let go)"), "{stdout}");
    assert!(stdout.contains("cannot list held archives"), "{stdout}");
}

#[test]
fn help_explains_the_commands() {
    let output = Command::new(env!("CARGO_BIN_EXE_mesh-collector"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(output.status.success());
    insta::assert_snapshot!(String::from_utf8_lossy(&output.stdout));
}

#[test]
fn sweep_and_collect_a_real_registry_from_the_command_line() {
    let registry = ShellRegistry::start(RegistryOptions {
        delete_enabled: true,
        blob_descriptor_cache: false,
    });
    let home = tempfile::tempdir().unwrap();
    let store = format!("http://127.0.0.1:{}", registry.port);
    let kept = archive("kept");
    let forgotten = archive("forgotten");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let remote = mesh_store::open_store(&store.parse().unwrap()).unwrap();
    runtime.block_on(async {
        let lock = PublishLock::acquire(home.path()).await.unwrap();
        for (module, a) in [("web", &kept), ("old", &forgotten)] {
            publish(&*remote, &lock, a).await.unwrap();
            record_build(&DirRecords::new(home.path()), &lock, &build(module, a, 1)).unwrap();
        }
    });
    forget_module(&DirRecords::new(home.path()), "old").unwrap();

    let swept = check(home.path(), &store, &["sweep"], 0);
    assert!(
        swept.contains("kept 1, held 1 of 1, missing 0, released 1"),
        "{swept}"
    );
    // A real collection of a registry needs the way to stop and start it.
    let (code, _, stderr) = collector(home.path(), &store, &["collect"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("--registry-config"), "{stderr}");

    let collected = check(
        home.path(),
        &store,
        &[
            "collect",
            "--registry-config",
            &registry.config(),
            "--registry-stop",
            &registry.stop_command(),
            "--registry-start",
            &registry.start_command(),
        ],
        0,
    );
    assert!(collected.contains("collection for real"), "{collected}");
    assert!(
        collected.contains(&forgotten.reference.digest),
        "the forgotten module's archive is deleted: {collected}"
    );
    runtime.block_on(async {
        assert_eq!(remote.fetch(&kept.reference).await.unwrap(), kept);
        assert!(!remote.has_blob(&forgotten.reference.digest).await.unwrap());
    });
}

/// The rule “Nothing fails silently”: the collector's answer ("held N of M", a missing archive)
/// was printed and nowhere else. It is a problem of the store in the records the controller's
/// `status` reads, until a run leaves every kept archive held; a dry run asked for records
/// nothing.
#[test]
fn a_missing_archive_is_a_problem_status_shows_until_a_run_holds_every_kept_archive() {
    use mesh_store::problems::{read_problems, ProblemKind};
    let home = tempfile::tempdir().unwrap();
    let layout = home.path().join("store").join("oci");
    mesh(home.path(), &layout, true);
    let store = format!("oci:{}", layout.display());
    let records = DirRecords::new(home.path());

    check(home.path(), &store, &["collect", "--dry-run"], 3);
    assert!(
        read_problems(&records).unwrap().is_empty(),
        "a dry run asked for"
    );

    check(home.path(), &store, &["collect"], 3);
    let problems = read_problems(&records).unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    let problem = &problems[0];
    assert_eq!(problem.kind, ProblemKind::Collection);
    assert_eq!(problem.subject, store);
    assert!(
        problem.what.contains("held 5 of 6, missing 1"),
        "{}",
        problem.what
    );
    let ghost = archive("ghost").reference.digest;
    assert!(
        problem
            .details
            .iter()
            .any(|d| d.contains(&ghost) && d.contains("missing")),
        "{:?}",
        problem.details
    );
    assert!(problem.details.iter().any(|d| d.contains("ran dry")));

    // The module whose archive is gone is forgotten: every kept archive is held, and the
    // problem is resolved.
    forget_module(&records, "api").unwrap();
    check(home.path(), &store, &["collect"], 0);
    assert!(read_problems(&records).unwrap().is_empty());
}

// Every binary reaches the secure bus: on a bus that verifies clients (mutual TLS), the collector
// proves itself with `--bus-cert` and `--bus-key`, its options given before the subcommand, after
// it, or through the `MESH_*` variables alone.
#[test]
fn the_collector_reaches_a_mutual_tls_bus_with_its_options_anywhere_or_in_the_environment() {
    use mesh_test_support::nats_server::{NatsServer, ServerTls};
    let home = tempfile::tempdir().unwrap();
    let layout = home.path().join("store").join("oci");
    let pki = mesh_test_support::pki::TestPki::new("collector");
    let server = NatsServer::start_with_tls(
        "",
        &ServerTls {
            cert_file: pki.server_cert.clone(),
            key_file: pki.server_key.clone(),
            client_ca_file: Some(pki.ca_file.clone()),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let tls = mesh_bus::BusTls {
        ca_file: Some(pki.ca_file.clone()),
        client_certificate: Some(mesh_bus::ClientCertificate {
            cert_file: pki.client_cert.clone(),
            key_file: pki.client_key.clone(),
        }),
    };
    let records =
        mesh_bus::records::KvRecords::open(&mesh_bus::NatsOptions::new(server.url()).with_tls(tls))
            .unwrap_or_else(|e| panic!("{e}"));
    mesh_recorded_in(home.path(), &layout, false, &records);
    // The test server has no users: the controller's password is not checked.
    std::fs::create_dir_all(home.path().join("bus/passwords")).unwrap();
    let password_file = home.path().join("bus/passwords/controller");
    std::fs::write(&password_file, "unchecked-5d1a\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&password_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let url = server.url();
    let home_arg = home.path().display().to_string();
    let store = format!("oci:{}", layout.display());
    let ca = pki.ca_file.display().to_string();
    let cert = pki.client_cert.display().to_string();
    let key = pki.client_key.display().to_string();
    let options: Vec<&str> = vec![
        "--home",
        &home_arg,
        "--store",
        &store,
        "--bus",
        &url,
        "--bus-ca",
        &ca,
        "--bus-cert",
        &cert,
        "--bus-key",
        &key,
        "--bus-retry-limit",
        "5",
    ];
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mesh-collector"));
        for variable in [
            "MESH_HOME",
            "MESH_STORE",
            "MESH_BUS",
            "MESH_BUS_CA",
            "MESH_BUS_CERT",
            "MESH_BUS_KEY",
            "MESH_BUS_RETRY_LIMIT",
            "MESH_BUS_PASSWORD_FILE",
            "MESH_BUS_SEED",
        ] {
            command.env_remove(variable);
        }
        let output = command
            .args(args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let kept_on_the_bus = |(code, stdout, stderr): (Option<i32>, String, String), how: &str| {
        assert_eq!(code, Some(3), "{how}:\n{stdout}\n{stderr}");
        assert!(stdout.contains("kept 5"), "{how}:\n{stdout}\n{stderr}");
    };
    let before: Vec<&str> = options
        .iter()
        .copied()
        .chain(["sweep", "--dry-run"])
        .collect();
    kept_on_the_bus(run(&before, &[]), "options before the subcommand");
    let after: Vec<&str> = ["sweep", "--dry-run"]
        .into_iter()
        .chain(options.iter().copied())
        .collect();
    kept_on_the_bus(run(&after, &[]), "options after the subcommand");
    let environment = [
        ("MESH_HOME", home_arg.as_str()),
        ("MESH_STORE", store.as_str()),
        ("MESH_BUS", url.as_str()),
        ("MESH_BUS_CA", ca.as_str()),
        ("MESH_BUS_CERT", cert.as_str()),
        ("MESH_BUS_KEY", key.as_str()),
        ("MESH_BUS_RETRY_LIMIT", "5"),
    ];
    kept_on_the_bus(
        run(&["sweep", "--dry-run"], &environment),
        "MESH_* variables",
    );
    // The bus verifies clients: without the certificate the collector is refused, and says so.
    let (code, stdout, stderr) = run(&["sweep", "--dry-run"], &environment[..4]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("opening the controller's records"),
        "{stderr}"
    );
}

/// The exit codes of the mesh's table: a wrong command line is a usage error (64), not clap's
/// 2, which means "refused" here; help is 0; a run without a home to read is a usage error too,
/// and nothing is read or written.
#[test]
fn a_wrong_command_line_exits_64_and_help_exits_0() {
    let run = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_mesh-collector"))
            .args(args)
            .env_remove("MESH_HOME")
            .env_remove("MESH_STORE")
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    for args in [
        &["sweep", "--bogus"][..],
        &["--bogus"],
        &["frobnicate"],
        &[],
    ] {
        let (code, stderr) = run(args);
        assert_eq!(code, Some(64), "{args:?}: {stderr}");
    }
    let (code, stderr) = run(&["sweep"]);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(
        stderr.contains("--home DIR (or MESH_HOME) is needed"),
        "{stderr}"
    );
    for args in [&["--help"][..], &["sweep", "--help"], &["--version"]] {
        assert_eq!(run(args).0, Some(0), "{args:?}");
    }
}
