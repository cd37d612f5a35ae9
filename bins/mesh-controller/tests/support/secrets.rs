//! The test kit of secrets over the bus: the modules using them, a value's byte search, the
//! bus read with nats-py (an independent client), a node's age key made and enrolled.

use super::fleet::{host_binary, Bed};
use super::Mesh;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const DB_MODULE: &str = r#"name = "db"

[settings]
user = "app"
password = ""

[files.creds]
source = "creds"
path = "/etc/db/creds"
mode = "0600"
template = true
"#;

pub const VAULT_MODULE: &str = r#"name = "vault"

[files.token]
source = "token"
path = "/etc/vault/token"
mode = "0640"
secret = true
"#;

/// A value no fixture holds.
pub fn unique(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{what}-{}-{nanos}", std::process::id())
}

pub fn holds(bytes: &[u8], needle: &[u8]) -> bool {
    bytes.windows(needle.len()).any(|w| w == needle)
}

/// Every file under `dir` whose bytes hold `needle`.
pub fn files_holding(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    Mesh::snapshot_tree(dir)
        .into_iter()
        .filter(|(_, bytes)| holds(bytes, needle))
        .map(|(path, _)| path)
        .collect()
}

/// The virtual environment `scripts/test` makes, with nats-py in it: the test fails, never
/// skips, without it.
pub fn python() -> PathBuf {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/nats-venv/bin/python");
    let check = Command::new(&python)
        .args(["-c", "import nats, nkeys"])
        .output();
    assert!(
        check.as_ref().is_ok_and(|out| out.status.success()),
        "nats-py is not installed in {} (scripts/test installs it: `{} -m pip install \
         'nats-py[nkeys]'`): {check:?}",
        python.display(),
        python.display()
    );
    python
}

/// Every message of `streams`, read with nats-py as the controller's user: per stream, the
/// whole stream's bytes and each message's payload.
pub fn read_streams(
    bed: &Bed,
    out: &Path,
    streams: &[&str],
) -> Vec<(String, Vec<u8>, Vec<Vec<u8>>)> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/read_streams.py");
    let run = Command::new(python())
        .arg(script)
        .arg(&bed.url)
        .arg(&bed.pki.ca_file)
        .arg(bed.controller_seed_file())
        .arg(out)
        .args(streams)
        .output()
        .unwrap();
    assert!(run.status.success(), "nats-py: {run:?}");
    streams
        .iter()
        .map(|stream| {
            let whole = std::fs::read(out.join(stream)).unwrap();
            let mut messages: Vec<(u64, Vec<u8>)> =
                std::fs::read_dir(out.join(format!("{stream}.d")))
                    .map(|entries| {
                        entries
                            .map(|e| e.unwrap().path())
                            .map(|p| {
                                let seq = p.file_name().unwrap().to_str().unwrap().parse().unwrap();
                                (seq, std::fs::read(p).unwrap())
                            })
                            .collect()
                    })
                    .unwrap_or_default();
            messages.sort();
            let payloads = messages.into_iter().map(|(_, bytes)| bytes).collect();
            ((*stream).to_owned(), whole, payloads)
        })
        .collect()
}

/// `mesh-host keygen` in `node`'s state directory: its NKey and its age key.
pub fn keys_of(bed: &Bed, node: &str) -> (String, String) {
    let out = Command::new(host_binary())
        .arg("--state-dir")
        .arg(bed.state_dir(node))
        .args(["--output", "json", "keygen"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let made: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        made["public_key"].as_str().unwrap().to_owned(),
        made["age_key"].as_str().unwrap().to_owned(),
    )
}

/// `node enroll NODE NKEY --age-key AGE` through the library, the keys `node`'s host made.
pub fn enroll_age_key(bed: &Bed, node: &str) {
    let (nkey, age) = keys_of(bed, node);
    mesh_controller::bus::enroll_with_age_key(bed.library().home(), node, &nkey, &age)
        .unwrap_or_else(|error| panic!("node enroll {node} --age-key: {error}"));
}

pub fn identity(bed: &Bed, node: &str) -> mesh_secrets::Identity {
    mesh_secrets::Identity::load(&bed.state_dir(node).join("bus/age.key")).unwrap()
}

/// `settings set-secret MODULE KEY` over the bus through the library, `value` as read from
/// standard input.
pub fn set_secret(bed: &Bed, module: &str, key: &str, value: &str) {
    let answer = bed
        .library()
        .call(async |mesh| {
            mesh.settings_edit(
                &crate::support::layer(module, None),
                &mesh_controller::SettingsEdit::SetSecret {
                    key,
                    value: value.as_bytes(),
                },
                mesh_store::clock::now(),
            )
            .await
        })
        .unwrap_or_else(|error| panic!("settings set-secret {module} {key}: {error}"));
    // `settings set-secret` exits 2 when it was refused.
    assert!(
        !answer.refused(),
        "settings set-secret {module} {key} was refused"
    );
}
