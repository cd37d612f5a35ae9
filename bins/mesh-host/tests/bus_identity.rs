//! A host proves itself to the bus with a key whose secret never leaves it (the rule
//! “Secrets never leave their owner”): `mesh-host keygen` makes the seed, mode 0600, under the
//! state directory and prints the public key; `serve` signs with it over TLS, verifying the server
//! against the fleet's CA, against a real nats-server whose users file holds public keys only. A
//! seed readable by others is refused at start; so is a host trusting another CA, or given no CA
//! for the TLS-only server.

use mesh_test_support::pki;

use mesh_bus::grants::{users_config, BusUsers, NodeUser, UserCredential};
use mesh_bus::{subjects, Bus, BusTls, NatsBus, NatsOptions};
use mesh_test_support::nats_server::{NatsServer, ServerTls};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

fn host(state_dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mesh-host"));
    command.arg("--state-dir").arg(state_dir);
    command
}

/// Kills the host when the test ends, however it ends.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_host_signs_with_the_seed_keygen_made_and_a_seed_others_can_read_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();

    // keygen: a seed of mode 0600, its public key printed; again, the same key, kept.
    let first = host(&state)
        .args(["--output", "json", "keygen"])
        .output()
        .unwrap();
    assert!(first.status.success(), "{first:?}");
    let made: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    let public_key = made["public_key"].as_str().unwrap().to_owned();
    assert!(mesh_bus::keys::is_user_public_key(&public_key), "{made}");
    assert_eq!(made["made"], true);
    let seed_file = state.join(mesh_host::NKEY_SEED_FILE);
    let mode = std::fs::metadata(&seed_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let seed = std::fs::read_to_string(&seed_file).unwrap();
    assert!(
        !String::from_utf8_lossy(&first.stdout).contains(seed.trim()),
        "the seed is never printed"
    );
    let again = host(&state).arg("keygen").output().unwrap();
    assert!(again.status.success(), "{again:?}");
    assert_eq!(String::from_utf8_lossy(&again.stdout).trim(), public_key);
    assert!(String::from_utf8_lossy(&again.stderr).contains("already there, kept"));

    // The bus: TLS only, users by public key (the controller's made the same way).
    let pki = pki::TestPki::new("host");
    let controller_seed = dir.path().join("controller.seed");
    let controller_key = mesh_bus::keys::make_seed_file(&controller_seed).unwrap();
    let users = users_config(&BusUsers {
        controller: UserCredential::Nkey(controller_key.public_key.clone()),
        nodes: vec![NodeUser {
            node: "home".into(),
            credential: UserCredential::Nkey(public_key.clone()),
            buckets: vec![],
            subjects: vec![],
        }],
    })
    .unwrap();
    assert!(!users.contains(seed.trim()));
    let server = NatsServer::start_with_tls(
        &users,
        &ServerTls {
            cert_file: pki.server_cert.clone(),
            key_file: pki.server_key.clone(),
            client_ca_file: None,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let controller = NatsBus::connect(
        &NatsOptions::for_controller_nkey(
            server.url(),
            mesh_bus::keys::read_seed_file(&controller_seed).unwrap(),
        )
        .with_tls(BusTls::with_ca(&pki.ca_file)),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let js = controller.jetstream();
    mesh_bus::jetstream::ensure_streams(&js).await.unwrap();
    let mut reports = controller
        .subscribe(&subjects::report("home"))
        .await
        .unwrap();

    let serve = |seed_mode: u32| {
        std::fs::set_permissions(&seed_file, std::fs::Permissions::from_mode(seed_mode)).unwrap();
        let mut command = host(&state);
        command
            .arg("--node")
            .arg("home")
            .arg("--bus")
            .arg(server.url())
            .arg("--bus-ca")
            .arg(&pki.ca_file)
            .arg("--root")
            .arg(&root)
            .args(["--containers", "none", "serve", "--heartbeat", "1"])
            .env("MESH_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        command
    };

    // A password file others may read: refused before anything is sent, as the seed is.
    let password_file = dir.path().join("bus-password");
    std::fs::write(&password_file, "pw-6b1f\n").unwrap();
    std::fs::set_permissions(&password_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let refused = serve(0o600)
        .env("MESH_BUS_PASSWORD_FILE", &password_file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("readable by others (mode 0644)"),
        "{stderr}"
    );
    assert!(!stderr.contains("pw-6b1f"), "{stderr}");

    // A seed others may read: refused before anything is sent.
    let refused = serve(0o644).output().unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("readable by others"), "{stderr}");
    assert!(!stderr.contains(seed.trim()), "{stderr}");

    // A host trusting another CA, and one given no CA for the TLS-only server: refused at
    // start, each saying which (trying again would change nothing).
    let other = pki::TestPki::new("another");
    std::fs::set_permissions(&seed_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let refused = host(&state)
        .args(["--node", "home", "--bus", &server.url(), "--bus-ca"])
        .arg(&other.ca_file)
        .arg("--root")
        .arg(&root)
        .args(["--containers", "none", "serve"])
        .env("MESH_LOG", "error")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("its certificate is not trusted")
            && stderr.contains(&other.ca_file.display().to_string()),
        "{stderr}"
    );
    let plain_url = server.url().replace("tls://", "nats://");
    let refused = host(&state)
        .args(["--node", "home", "--bus", &plain_url, "--root"])
        .arg(&root)
        .args(["--containers", "none", "serve"])
        .env("MESH_LOG", "error")
        .env_remove("MESH_BUS_CA")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the server requires TLS and no CA file was given"),
        "{stderr}"
    );

    // 0600: the host connects as home, signing with its seed, and reports.
    let _running = Running(serve(0o600).stderr(Stdio::inherit()).spawn().unwrap());
    // The controller sends home a declaration (empty: nothing to apply); home reports on it.
    let declaration = mesh_model::declaration::Declaration::new("home", vec![]);
    js.publish(
        subjects::declaration("home"),
        declaration.canonical_json().into(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    let report = tokio::time::timeout(Duration::from_secs(60), reports.next())
        .await
        .expect("home reported within a minute")
        .expect("the subscription is open");
    assert_eq!(report.subject, "mesh.report.home");
    let report: serde_json::Value = serde_json::from_slice(&report.payload).unwrap();
    assert_eq!(report["declaration"], declaration.digest(), "{report}");
}
