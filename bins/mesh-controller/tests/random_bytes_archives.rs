//! The archives the controller makes for others to read, fed random bytes and changed valid
//! ones: a `records import` archive (made by `records export`) and the bus's users archive as
//! the node holding the bus reads it (`mesh_host::archives::read_archived`, from its cache).
//!
//! The properties: no panic, and
//! - an import either restores — and then what it wrote is exactly what an export of the home
//!   gives back, nothing that stays on a machine (the mesh's secrets key, the controller's
//!   password) touched — or is refused naming the archive, the home unchanged;
//! - the users file is either read, as the text its digest names, or unavailable with a reason
//!   naming its module and archive; and the host's state directory is unchanged but for a
//!   damaged cache entry, which is removed so that it is fetched again.
//!
//! CI runs a few dozen cases; `scripts/fuzz` runs 10,000 (`PROPTEST_CASES`).

use base64::Engine as _;
use mesh_controller::records;
use mesh_controller::Home;

use mesh_host::archives::{read_archived, ArchiveSource, CACHE_DIR};
use mesh_model::build::ArchiveRef;
use mesh_model::declaration::{ArchivedFile, Declaration, FileSpec, Resource, Spec};
use mesh_store::archive::Archive;
use mesh_test_support::mutate::{
    byte_edits, cases, edit_bytes, edit_value, files_under, reset_dir, value_edits,
};
use proptest::prelude::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

const DECLARATION: &str = include_str!("../../../mesh-model/tests/fixtures/declaration.json");

/// When the archive was made (seconds since the epoch).
const NOW: u64 = 1_800_000_000;

/// The records of an example mesh that sent `home` a declaration, exported.
fn valid_archive() -> &'static [u8] {
    static ARCHIVE: OnceLock<Vec<u8>> = OnceLock::new();
    ARCHIVE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path().join("home"));
        mesh_controller::init(&home, true).expect("the example initializes");
        let declaration = Declaration::from_json(DECLARATION.as_bytes()).unwrap();
        home.sent().record(&declaration).unwrap();
        let file = dir.path().join("records.archive");
        records::export(&home, &file, NOW).expect("the example exports");
        std::fs::read(file).unwrap()
    })
}

/// What an empty home to import into holds: only what stays on a machine, never a record.
fn kept_on_the_machine() -> BTreeMap<PathBuf, Vec<u8>> {
    [
        ("secrets/mesh.key", "AGE-SECRET-KEY-1 the machine's own\n"),
        (
            "bus/passwords/controller",
            "the controller's own password\n",
        ),
        ("catalogue/modules/base/module.toml", "name = \"base\"\n"),
    ]
    .into_iter()
    .map(|(path, text)| (PathBuf::from(path), text.as_bytes().to_vec()))
    .collect()
}

/// The records an archive holds, by key (what the test reads of the format: a header line,
/// then a line per record with its key and its bytes in base64).
fn records_of(archive: &[u8]) -> BTreeMap<PathBuf, Vec<u8>> {
    String::from_utf8(archive.to_vec())
        .unwrap()
        .lines()
        .skip(1)
        .map(|line| {
            let line: Value = serde_json::from_str(line).unwrap();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(line["bytes"].as_str().unwrap())
                .unwrap();
            (PathBuf::from(line["key"].as_str().unwrap()), bytes)
        })
        .collect()
}

/// Writes `bytes` as an archive, imports it into an empty home, and checks the property; the
/// refusal, said.
fn import_over(bytes: &[u8]) -> Result<Option<String>, TestCaseError> {
    thread_local! {
        static DIR: tempfile::TempDir = tempfile::tempdir().unwrap();
    }
    let dir = DIR.with(|dir| dir.path().to_owned());
    let root = dir.join("home");
    let empty = kept_on_the_machine();
    reset_dir(&root, &empty);
    let file = dir.join("records.archive");
    std::fs::write(&file, bytes).unwrap();
    let home = Home::new(&root);
    match records::restore(&home, &file) {
        Err(error) => {
            let said = error.to_string();
            prop_assert!(
                said.contains(&*file.to_string_lossy()),
                "the refusal does not name the archive: {said}"
            );
            prop_assert_eq!(files_under(&root), empty, "a refused import wrote");
            return Ok(Some(said));
        }
        Ok(restored) => {
            let after = files_under(&root);
            for (kept, bytes) in &empty {
                prop_assert_eq!(after.get(kept), Some(bytes), "the import wrote {:?}", kept);
            }
            let written: BTreeMap<PathBuf, Vec<u8>> = after
                .into_iter()
                .filter(|(path, _)| !empty.contains_key(path))
                .collect();
            prop_assert_eq!(restored.records, written.len());
            let again = dir.join("again.archive");
            records::export(&home, &again, NOW).map_err(|e| {
                TestCaseError::fail(format!("a restored home does not export: {e}"))
            })?;
            prop_assert_eq!(
                records_of(&std::fs::read(&again).unwrap()),
                written,
                "what the import wrote is not what an export gives back"
            );
        }
    }
    Ok(None)
}

/// The valid archive with the key of its record `at` (from 1) replaced by `key`, its records
/// kept in key order (its digests are of the bytes, not the keys).
fn with_key(at: usize, key: &str) -> Vec<u8> {
    let text = String::from_utf8(valid_archive().to_vec()).unwrap();
    let mut lines: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    lines[at]["key"] = Value::String(key.to_owned());
    lines[1..].sort_by(|a, b| a["key"].as_str().cmp(&b["key"].as_str()));
    let lines: Vec<String> = lines.iter().map(Value::to_string).collect();
    format!("{}\n", lines.join("\n")).into_bytes()
}

/// The key of the valid archive's record `at` (from 1).
fn key_of(at: usize) -> String {
    let text = std::str::from_utf8(valid_archive()).unwrap();
    let line: Value = serde_json::from_str(text.lines().nth(at).unwrap()).unwrap();
    line["key"].as_str().unwrap().to_owned()
}

fn records_in_the_archive() -> usize {
    records_of(valid_archive()).len()
}

#[test]
fn a_valid_archive_restores_what_an_export_gives_back() {
    let archive = valid_archive();
    let keys: Vec<PathBuf> = records_of(archive).into_keys().collect();
    for key in [
        "inventory.toml",
        "settings/base/mesh.json",
        "sent/home.json",
    ] {
        assert!(keys.contains(&PathBuf::from(key)), "{keys:?}");
    }
    assert_eq!(import_over(archive).unwrap(), None);
}

/// The archive's digests are of the bytes, not the keys: a record under any valid key was
/// written, the mesh's secrets key, the controller's password or the catalogue among them —
/// what stays on the machine replaced by a record. A key is checked for what it is now.
/// (Issue 46, item 7.)
#[test]
fn an_archive_naming_what_stays_on_the_machine_is_refused_before_anything_is_written() {
    for key in [
        "secrets/mesh.key",
        "bus/passwords/controller",
        "bus/nkey.seed",
        "records-moved",
        "catalogue/modules/base/module.toml",
        "settings",
    ] {
        let refused = import_over(&with_key(1, key)).unwrap();
        assert!(refused.is_some_and(|said| said.contains(key)), "{key}");
    }
}

/// A record and a record under it (`settings/x/mesh.json` and `settings/x/mesh.json/y`) read
/// as an archive, and the import stopped part way, at the second, naming the home's file —
/// what it had written before left. (Issue 46, item 7.)
#[test]
fn an_archive_holding_a_record_under_another_is_refused_before_anything_is_written() {
    let under = format!("{}/x", key_of(2));
    let refused = import_over(&with_key(3, &under)).unwrap();
    assert!(refused.is_some_and(|said| said.contains(&under)));
}

/// The bus's users file as the controller composes it (its text does not matter here).
const USERS: &str = "authorization {\n  users = [\n    { user: \"mesh-controller\", password: \"$2a$11$abc\" }\n    { nkey: \"UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4\", permissions: { publish: [\"mesh.report.home\"] } }\n  ]\n}\n";

fn users_archive() -> &'static Archive {
    static ARCHIVE: OnceLock<Archive> = OnceLock::new();
    ARCHIVE.get_or_init(|| mesh_controller::bus::users_archive(USERS).expect("the users pack"))
}

/// The bus node's declaration as far as the users file goes: the file, read from the archive
/// `archive` of the module `mesh-bus` by its path and the digest of [`USERS`].
fn users_declaration(archive: &ArchiveRef) -> Declaration {
    let file = Resource {
        id: "mesh-bus/file/users".to_owned(),
        module: "mesh-bus".to_owned(),
        together: None,
        after: Vec::new(),
        spec: Spec::File(FileSpec {
            path: "/etc/nats/mesh-users.conf".to_owned(),
            content: None,
            source: Some(ArchivedFile {
                path: "users.conf".to_owned(),
                sha256: mesh_model::sha256_digest(USERS.as_bytes()),
            }),
            sealed: None,
            mode: 0o640,
            owner: "root".to_owned(),
            group: "nats".to_owned(),
        }),
    };
    Declaration::with_archives(
        "control",
        vec![file],
        BTreeMap::from([("mesh-bus".to_owned(), archive.clone())]),
    )
}

/// Puts `bytes` in the bus node's archive cache as the archive its declaration names — `bytes`
/// themselves (a store that served them: their digest checks, their content is what is read),
/// or the valid archive (a damaged cache entry) — reads the users file as its host does, and
/// checks the property.
fn users_over(bytes: &[u8], named_as_themselves: bool) -> Result<(), TestCaseError> {
    thread_local! {
        static DIR: tempfile::TempDir = tempfile::tempdir().unwrap();
    }
    let state = DIR.with(|dir| dir.path().to_owned());
    reset_dir(&state, &BTreeMap::new());
    let archive = if named_as_themselves {
        Archive::from_bytes(bytes.to_vec()).reference
    } else {
        users_archive().reference.clone()
    };
    let source = ArchiveSource::cache_only(&state);
    let entry = source.cache_path(&archive.digest);
    std::fs::create_dir_all(entry.parent().unwrap()).unwrap();
    std::fs::write(&entry, bytes).unwrap();
    let before = files_under(&state);
    let declaration = users_declaration(&archive);
    let contents = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(read_archived(&declaration, &source));
    let id = "mesh-bus/file/users";
    match (contents.read.get(id), contents.unavailable.get(id)) {
        (Some(text), None) => prop_assert_eq!(text, USERS),
        (None, Some(why)) => prop_assert!(
            why.contains("`mesh-bus`") && why.contains(&archive.digest),
            "the reason names neither the module nor its archive: {why}"
        ),
        other => prop_assert!(false, "read and unavailable at once, or neither: {other:?}"),
    }
    let mut after = files_under(&state);
    if !named_as_themselves && bytes != users_archive().bytes.as_slice() {
        let relative = entry.strip_prefix(&state).unwrap();
        prop_assert!(
            !after.contains_key(relative),
            "a cache entry that is not its digest is kept"
        );
        after.insert(relative.to_owned(), bytes.to_vec());
    }
    prop_assert_eq!(
        after,
        before,
        "reading the users file changed the state directory"
    );
    prop_assert!(state.join(CACHE_DIR).is_dir());
    Ok(())
}

/// A tar holding one file, `path`, with `bytes` (a ustar header as `archive_tree` writes one:
/// mode 0644, owner 0, time 0).
fn tar_of(path: &str, bytes: &[u8]) -> Vec<u8> {
    let mut header = [0u8; 512];
    header[..path.len()].copy_from_slice(path.as_bytes());
    for (at, width, value) in [
        (100, 8, 0o644),
        (108, 8, 0),
        (116, 8, 0),
        (124, 12, bytes.len()),
        (136, 12, 0),
    ] {
        let octal = format!("{value:0w$o}\0", w = width - 1);
        header[at..at + width].copy_from_slice(octal.as_bytes());
    }
    header[156] = b'0';
    header[257..265].copy_from_slice(b"ustar\x0000");
    let mut tar = header.to_vec();
    tar.extend(bytes);
    tar.resize(tar.len().next_multiple_of(512) + 1024, 0);
    with_checksums(tar)
}

/// `tar` with every header's checksum made right again (headers found as a reader finds them:
/// each after the content its predecessor's size claims), so that what a change reaches is the
/// reader's handling of the header, not its checksum.
fn with_checksums(mut tar: Vec<u8>) -> Vec<u8> {
    let mut at = 0;
    while at + 512 <= tar.len() {
        let header = &mut tar[at..at + 512];
        if header.iter().all(|b| *b == 0) {
            at += 512;
            continue;
        }
        header[148..156].fill(b' ');
        let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
        header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        let size = std::str::from_utf8(&header[124..136])
            .ok()
            .and_then(|s| usize::from_str_radix(s.trim_matches(|c| c == '\0' || c == ' '), 8).ok())
            .unwrap_or(0);
        at += 512 + size.div_ceil(512).saturating_mul(512);
    }
    tar
}

/// `data` as a gzip member of stored (uncompressed) deflate blocks: a changed tar wrapped so
/// that the reader's gzip check passes and its tar parsing meets the change.
fn gzip_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];
    let mut blocks = data.chunks(usize::from(u16::MAX)).peekable();
    if data.is_empty() {
        out.extend([1, 0, 0, 0xff, 0xff]);
    }
    while let Some(block) = blocks.next() {
        out.push(u8::from(blocks.peek().is_none()));
        let len = u16::try_from(block.len()).unwrap();
        out.extend(len.to_le_bytes());
        out.extend((!len).to_le_bytes());
        out.extend(block);
    }
    let mut crc = !0u32;
    for byte in data {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    out.extend((!crc).to_le_bytes());
    out.extend(u32::try_from(data.len()).unwrap().to_le_bytes());
    out
}

#[test]
fn the_users_archive_reads_as_its_host_reads_it() {
    let tar = tar_of("users.conf", USERS.as_bytes());
    assert_eq!(with_checksums(tar.clone()), tar);
    let tree = mesh_store::archive::unpack_archive(&gzip_stored(&tar), None).unwrap();
    assert_eq!(tree.file("users.conf"), Some(USERS.as_bytes()));
    users_over(&gzip_stored(&tar), true).unwrap();
    let valid = users_archive().bytes.clone();
    for named_as_themselves in [true, false] {
        users_over(&valid, named_as_themselves).unwrap();
    }
    let contents = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(read_archived(
            &users_declaration(&users_archive().reference),
            &ArchiveSource::cache_only(tempfile::tempdir().unwrap().path()),
        ));
    assert!(contents.read.is_empty(), "nothing is in an empty cache");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(32)))]

    #[test]
    fn an_archive_of_random_bytes_is_refused_by_name(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        import_over(&bytes)?;
    }

    #[test]
    fn an_archive_with_bytes_changed_is_refused_by_name_or_restores_what_export_gives_back(
        edits in byte_edits(),
    ) {
        import_over(&edit_bytes(valid_archive(), &edits))?;
    }

    #[test]
    fn an_archive_with_values_changed_is_refused_by_name_or_restores_what_export_gives_back(
        line in any::<prop::sample::Index>(),
        edits in value_edits(),
    ) {
        // One line of the archive (its header, or a record) with its JSON values changed.
        let text = String::from_utf8(valid_archive().to_vec()).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let at = line.index(lines.len());
        lines[at] = String::from_utf8(edit_value(&lines[at], &edits)).unwrap();
        import_over(format!("{}\n", lines.join("\n")).as_bytes())?;
    }

    #[test]
    fn an_archive_with_a_key_changed_is_refused_by_name_or_restores_what_export_gives_back(
        at in any::<prop::sample::Index>(),
        key in prop_oneof![
            "[a-z]{1,8}(/[a-z.-]{1,8}){0,3}",
            "(settings|sent|plans|acks|bus|secrets)(/[a-z.-]{1,8}){1,3}",
            Just("secrets/mesh.key".to_owned()),
            Just("bus/passwords/controller".to_owned()),
            Just("bus/nkey.seed".to_owned()),
            Just("records-moved".to_owned()),
            Just("catalogue/modules/base/module.toml".to_owned()),
            Just("locks/plans".to_owned()),
        ],
        under in any::<Option<prop::sample::Index>>(),
    ) {
        // The key given, or one under another record's.
        let key = match under {
            Some(other) => format!("{}/{key}", key_of(1 + other.index(records_in_the_archive()))),
            None => key,
        };
        import_over(&with_key(1 + at.index(records_in_the_archive()), &key))?;
    }

    #[test]
    fn a_users_archive_of_random_bytes_is_unavailable_by_name(
        named_as_themselves in any::<bool>(),
        bytes in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        users_over(&bytes, named_as_themselves)?;
    }

    #[test]
    fn a_users_archive_with_bytes_changed_is_unavailable_by_name_or_read_whole(
        named_as_themselves in any::<bool>(),
        edits in byte_edits(),
    ) {
        users_over(&edit_bytes(&users_archive().bytes, &edits), named_as_themselves)?;
    }

    #[test]
    fn a_users_archive_whose_tar_is_changed_is_unavailable_by_name_or_read_whole(
        checksums_made_right in any::<bool>(),
        edits in byte_edits(),
    ) {
        let mut tar = edit_bytes(&tar_of("users.conf", USERS.as_bytes()), &edits);
        if checksums_made_right {
            tar = with_checksums(tar);
        }
        users_over(&gzip_stored(&tar), true)?;
    }
}
