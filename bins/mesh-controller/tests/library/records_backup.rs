//! Backup and restore: `records export FILE` writes every record to a versioned archive, and
//! `records import FILE` restores it into an empty home or bucket, every record byte for byte —
//! on the embedded default (files under the home) and on a real nats-server's records bucket
//! (a record over 60 KiB kept there in chunks). A secret is in the archive as ciphertext; a
//! home or bucket that is not empty, and an archive cut off, are refused and nothing is written.
//!
//! The controller is called as a library, in process (`Mesh::library`, `Bed::library`,
//! `Library`, on the bed's bus or on a home); the binary is run for one export and one
//! import, end to end, as a person reads them.

use crate::support;

use mesh_controller::records;
use mesh_controller::MeshOptions;
use mesh_store::chunked::ChunkedRecords;
use mesh_store::record_store::RecordStore;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use support::fleet::Bed;
use support::in_process::Library;
use support::Mesh;

/// A value no fixture holds, so a byte search finds only what this test put there.
fn unique_value(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{what}-{}-{nanos}", std::process::id())
}

/// What stays on the controller's machine, never a record (relative to the home).
const NOT_RECORDS: [&str; 7] = [
    "catalogue/",
    "roots/",
    "state/",
    "secrets/mesh.key",
    "secrets/recipients",
    "bus/passwords/controller",
    "bus/nkey.seed",
];

/// Every record file under an embedded home, relative path → bytes: every file but what stays
/// on the machine, locks and temporary files (their names start with `.`).
fn record_files(home: &Path) -> BTreeMap<String, Vec<u8>> {
    Mesh::snapshot_tree(home)
        .into_iter()
        .filter(|(path, _)| path.is_file())
        .map(|(path, bytes)| {
            let key = path.strip_prefix(home).unwrap().display().to_string();
            (key, bytes)
        })
        .filter(|(key, _)| {
            !NOT_RECORDS.iter().any(|kept| key.starts_with(kept))
                && !key.split('/').any(|name| name.starts_with('.'))
        })
        .collect()
}

/// The controller run on the home at `home` (no bus).
fn controller(home: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mesh-controller"))
        .arg("--home")
        .arg(home)
        .args(args)
        .env_remove("MESH_HOME")
        .env_remove("MESH_BUS")
        .output()
        .unwrap()
}

/// The mesh at `home` (no bus) opened in process.
fn home(home: &Path) -> Library {
    Library::open(home, MeshOptions::default()).unwrap()
}

fn holds(bytes: &[u8], needle: &str) -> bool {
    bytes
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

#[test]
fn the_embedded_homes_records_come_back_byte_for_byte() {
    let mesh = Mesh::example();
    let secret = unique_value("hunter2");
    let library = mesh.library();
    let set = library
        .call(async |mesh| {
            mesh.settings_edit(
                &crate::support::layer("tls", Some("home")),
                &mesh_controller::SettingsEdit::SetSecret {
                    key: "host",
                    value: secret.as_bytes(),
                },
                mesh_store::clock::now(),
            )
            .await
        })
        .unwrap();
    assert!(!set.refused(), "{set:?}");
    let set = library
        .settings_set("backup", Some("home"), r#"{"keep": 9}"#)
        .unwrap();
    assert!(!set.refused(), "{set:?}");
    let before = record_files(mesh.home());
    assert!(before.contains_key("inventory.toml"), "{:?}", before.keys());
    assert!(
        before
            .keys()
            .any(|key| key.starts_with("history/settings/")),
        "{:?}",
        before.keys()
    );

    // Exported and restored as a person reads it, each run end to end.
    let work = tempfile::tempdir().unwrap();
    let archive = work.path().join("mesh.records");
    let said = mesh.expect(&["records", "export", archive.to_str().unwrap()], 0);
    assert!(
        said.contains(&format!("wrote {} records", before.len())),
        "{said}"
    );
    let mode = std::fs::metadata(&archive).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let bytes = std::fs::read(&archive).unwrap();
    assert!(
        !holds(&bytes, &secret),
        "the secret's value is in the archive"
    );
    assert!(bytes.starts_with(br#"{"format":1,"kind":"mesh-records","#));

    // Restored into a home that does not exist yet: every record, byte for byte, and nothing
    // else.
    let restored = work.path().join("restored");
    let out = controller(&restored, &["records", "import", archive.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!("restored {} records", before.len())),
        "{said}"
    );
    assert_eq!(record_files(&restored), before);

    // Run again (an import that stopped part way): nothing to do, nothing changed.
    mesh_controller::records::restore(home(&restored).home(), &archive)
        .map_err(|e| crate::support::in_process::said(&e))
        .unwrap();
    assert_eq!(record_files(&restored), before);

    // A home holding a record the archive does not hold byte for byte is refused by name, and
    // nothing is written.
    let changed = restored.join("settings/backup/nodes/home.json");
    std::fs::write(&changed, b"{}\n").unwrap();
    let untouched = Mesh::snapshot_tree(&restored);
    // An error: `records import` exits 1 saying it.
    let refused = mesh_controller::records::restore(home(&restored).home(), &archive)
        .map_err(|e| crate::support::in_process::said(&e))
        .unwrap_err();
    assert!(refused.contains("is not empty"), "{refused}");
    assert!(
        refused.contains("settings/backup/nodes/home.json"),
        "{refused}"
    );
    assert_eq!(Mesh::snapshot_tree(&restored), untouched);

    // An archive cut off is refused before anything is written.
    let cut = work.path().join("cut.records");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let empty = work.path().join("empty");
    let refused = mesh_controller::records::restore(home(&empty).home(), &cut)
        .map_err(|e| crate::support::in_process::said(&e))
        .unwrap_err();
    assert!(refused.contains("cut.records line"), "{refused}");
    assert!(
        record_files(&empty).is_empty(),
        "{:?}",
        record_files(&empty)
    );
}

/// Every record of the bed's bucket, key → bytes, read as the controller reads them (a
/// chunked record assembled), but the plans lease.
fn bucket(bed: &Bed) -> (ChunkedRecords, BTreeMap<String, Vec<u8>>) {
    let records = ChunkedRecords::new(Arc::new(bed.records()));
    let all = records
        .keys_under("")
        .unwrap()
        .into_iter()
        .filter(|key| !key.starts_with("locks/"))
        .map(|key| {
            let bytes = records.get(&key).unwrap().unwrap();
            (key, bytes)
        })
        .collect();
    (records, all)
}

#[test]
fn a_fleets_records_bucket_comes_back_byte_for_byte() {
    let bed = Bed::new(&["a"]);
    // An inventory over 60 KiB, which the bucket keeps in chunks.
    let mut inventory = bed.record("inventory.toml").unwrap();
    for line in 0..2_000 {
        inventory.push_str(&format!("# a long inventory's comment, line {line:05}\n"));
    }
    let file = bed.home.path().join("big-inventory.toml");
    std::fs::write(&file, &inventory).unwrap();
    let put =
        mesh_controller::records::put_by_hand(bed.library().home(), "inventory.toml", &file, None)
            .map_err(|e| crate::support::in_process::said(&e))
            .unwrap();
    assert_eq!(put, records::PutOutcome::Replaced);
    // A module with a setting, for a secret and a layer.
    support::fleet::write(
        &bed.home.path().join("catalogue/modules/vault/module.toml"),
        "name = \"vault\"\n\n[settings]\ntoken = \"none\"\nmotd = \"hello\"\n",
    );
    let secret = unique_value("s3cret");
    let set = bed
        .library()
        .call(async |mesh| {
            mesh.settings_edit(
                &crate::support::layer("vault", Some("a")),
                &mesh_controller::SettingsEdit::SetSecret {
                    key: "token",
                    value: secret.as_bytes(),
                },
                mesh_store::clock::now(),
            )
            .await
        })
        .unwrap();
    assert!(!set.refused(), "{set:?}");

    let (records, before) = bucket(&bed);
    assert!(before["inventory.toml"].len() > 64 * 1024);
    assert_eq!(before["inventory.toml"], inventory.as_bytes());
    assert!(before.keys().any(|key| key.starts_with("bus/nkeys/")));
    assert!(before.contains_key("settings/vault/nodes/a.json"));

    let archive: PathBuf = bed.home.path().join("fleet.records");
    mesh_controller::records::export(bed.library().home(), &archive, mesh_store::clock::now())
        .map_err(|e| crate::support::in_process::said(&e))
        .unwrap();
    let bytes = std::fs::read(&archive).unwrap();
    assert!(
        !holds(&bytes, &secret),
        "the secret's value is in the archive"
    );

    // The bucket lost (every record deleted), then restored from the archive.
    for key in before.keys() {
        records.delete(key).unwrap();
    }
    assert!(bucket(&bed).1.is_empty());
    // What `records import` prints as "restored N records".
    let restored = mesh_controller::records::restore(bed.library().home(), &archive)
        .map_err(|e| crate::support::in_process::said(&e))
        .unwrap();
    assert_eq!(restored.records, before.len(), "{restored:?}");
    assert_eq!(bucket(&bed).1, before);
    // The controller reads its mesh again.
    bed.library()
        .call(async |mesh| {
            mesh.settings_show(&crate::support::layer("vault", Some("a")), false)
                .await
        })
        .unwrap();

    // A bucket holding what the archive does not is refused by name; nothing is written.
    let set = bed
        .library()
        .settings_set("vault", None, r#"{"motd": "changed"}"#)
        .unwrap();
    assert!(!set.refused(), "{set:?}");
    let (_, changed) = bucket(&bed);
    // An error: `records import` exits 1 saying it.
    let refused = mesh_controller::records::restore(bed.library().home(), &archive)
        .map_err(|e| crate::support::in_process::said(&e))
        .unwrap_err();
    assert!(refused.contains("is not empty"), "{refused}");
    assert!(refused.contains("settings/vault/mesh.json"), "{refused}");
    assert_eq!(bucket(&bed).1, changed);
}
