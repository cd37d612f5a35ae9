//! Pure parts: deterministic archives and their inverse, the holding manifest, the keep set.

mod support;

use mesh_model::build::ArchiveRef;
use mesh_model::module::EntryKind;
use mesh_store::archive::{archive_tree, unpack_archive, ArchiveError};
use mesh_store::keep::{keep_set, KeepReason, RECENT_BUILDS_KEPT};
use mesh_store::manifest::{
    archive_digest_of_tag, holding_manifest, holding_manifest_digest, holding_tag, HoldingManifest,
};
use mesh_store::records::ModuleRecord;
use support::{build, tree};

#[test]
fn the_same_tree_archived_twice_has_the_same_digest() {
    let first = archive_tree(&tree("same")).unwrap();
    let second = archive_tree(&tree("same")).unwrap();
    assert_eq!(first.bytes, second.bytes);
    assert_eq!(first.reference, second.reference);
    assert_ne!(
        archive_tree(&tree("other")).unwrap().reference,
        first.reference
    );
}

#[test]
fn the_executable_bit_is_part_of_the_digest_and_nothing_else_of_the_mode() {
    let mut t = tree("mode");
    let before = archive_tree(&t).unwrap().reference;
    if let Some(EntryKind::File { executable, .. }) = t.entries.get_mut("bin/run") {
        *executable = false;
    }
    assert_ne!(archive_tree(&t).unwrap().reference, before);
}

#[test]
fn an_archive_is_stable_across_builds_of_this_crate() {
    // If this digest changes, every module's next build is redeployed once (the rule “A
    // byte-identical build is not redeployed”): change it only on purpose.
    let digest = archive_tree(&tree("stable")).unwrap().reference.digest;
    insta::assert_snapshot!(digest, @"sha256:9c31d3b4d504dcae3a44da7965cfb974a6601c810b0874b1368f4a949c5f932d");
}

#[test]
fn an_archive_unpacks_to_the_tree_it_was_made_from() {
    let mut t = tree("roundtrip");
    let long = format!("{}/file.txt", "d".repeat(120));
    t.entries.insert("d".repeat(120), EntryKind::Directory);
    t.entries.insert(
        long,
        EntryKind::File {
            bytes: b"deep".to_vec(),
            executable: false,
        },
    );
    let archive = archive_tree(&t).unwrap();
    assert_eq!(
        unpack_archive(&archive.bytes, Some(&archive.reference)).unwrap(),
        t
    );
}

#[test]
fn unpacking_checks_the_digest_first() {
    let archive = archive_tree(&tree("x")).unwrap();
    let wrong = ArchiveRef {
        digest: mesh_model::sha256_digest(b"other"),
        size: archive.reference.size,
    };
    assert!(matches!(
        unpack_archive(&archive.bytes, Some(&wrong)),
        Err(ArchiveError::Digest { .. })
    ));
}

#[test]
fn a_tree_with_a_link_is_not_archived() {
    let mut t = tree("link");
    t.entries.insert(
        "data".to_owned(),
        EntryKind::Symlink {
            target: "/var/lib".to_owned(),
        },
    );
    let error = archive_tree(&t).unwrap_err();
    assert_eq!(
        error.to_string(),
        "`data` is a symbolic link (to `/var/lib`); an archive holds no links"
    );
}

fn tar_gz(entries: &[(&str, tar::EntryType, Option<&str>)]) -> Vec<u8> {
    let encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut builder = tar::Builder::new(encoder);
    for (path, kind, link) in entries {
        let mut header = tar::Header::new_gnu();
        // Written raw: the tar crate refuses `..` in set_path, an attacker's tool does not.
        let name = &mut header.as_gnu_mut().unwrap().name;
        name[..path.len()].copy_from_slice(path.as_bytes());
        header.set_entry_type(*kind);
        header.set_mode(0o644);
        header.set_size(0);
        if let Some(link) = link {
            header.set_link_name(link).unwrap();
        }
        header.set_cksum();
        builder.append(&header, std::io::empty()).unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

#[test]
fn unpacking_refuses_links_and_paths_that_climb_out() {
    let climbing = tar_gz(&[("../etc/passwd", tar::EntryType::Regular, None)]);
    assert!(matches!(
        unpack_archive(&climbing, None),
        Err(ArchiveError::Path { path }) if path == "../etc/passwd"
    ));
    let absolute = tar_gz(&[("/etc/passwd", tar::EntryType::Regular, None)]);
    assert!(matches!(
        unpack_archive(&absolute, None),
        Err(ArchiveError::Path { .. })
    ));
    let symlink = tar_gz(&[("data", tar::EntryType::Symlink, Some("/var"))]);
    assert!(matches!(
        unpack_archive(&symlink, None),
        Err(ArchiveError::Link { .. })
    ));
    let hardlink = tar_gz(&[("data", tar::EntryType::Link, Some("module.toml"))]);
    assert!(matches!(
        unpack_archive(&hardlink, None),
        Err(ArchiveError::Link { .. })
    ));
    let fifo = tar_gz(&[("pipe", tar::EntryType::Fifo, None)]);
    assert!(matches!(
        unpack_archive(&fifo, None),
        Err(ArchiveError::Special { .. })
    ));
}

#[test]
fn the_holding_manifest_is_canonical_and_a_function_of_digest_and_size() {
    let archive = ArchiveRef {
        digest: format!("sha256:{}", "ab".repeat(32)),
        size: 1234,
    };
    let bytes = holding_manifest(&archive);
    insta::assert_snapshot!(String::from_utf8(bytes.clone()).unwrap(), @r#"{"artifactType":"application/vnd.mesh.module.v1","config":{"digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","mediaType":"application/vnd.oci.empty.v1+json","size":2},"layers":[{"digest":"sha256:abababababababababababababababababababababababababababababababab","mediaType":"application/vnd.mesh.module.layer.v1.tar+gzip","size":1234}],"mediaType":"application/vnd.oci.image.manifest.v1+json","schemaVersion":2}"#);
    // Recomputed: byte-identical.
    assert_eq!(holding_manifest(&archive.clone()), bytes);
    // It says which archive it holds.
    let parsed: HoldingManifest = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(parsed.held_archive(), Some(archive.clone()));
    // A different size is a different manifest.
    let bigger = ArchiveRef {
        size: 1235,
        ..archive.clone()
    };
    assert_ne!(
        holding_manifest_digest(&bigger),
        holding_manifest_digest(&archive)
    );
    // The tag names the archive and back.
    assert_eq!(
        archive_digest_of_tag(&holding_tag(&archive.digest)),
        Some(archive.digest.clone())
    );
    assert_eq!(archive_digest_of_tag("latest"), None);
}

fn archive_ref(n: u64) -> ArchiveRef {
    ArchiveRef {
        digest: format!("sha256:{n:064x}"),
        size: n,
    }
}

fn module_with_builds(module: &str, count: u64) -> ModuleRecord {
    let mut record = ModuleRecord::new(module);
    for i in 0..count {
        record
            .builds
            .push(build(module, &archive_ref(i + 1), 100 + i));
    }
    record
}

#[test]
fn the_five_most_recent_rule_keeps_exactly_five() {
    let record = module_with_builds("web", 9);
    let keep = keep_set(&[record]);
    assert_eq!(keep.len(), RECENT_BUILDS_KEPT);
    // Builds 5..=9 (the newest), ranked newest first.
    for (rank, n) in (5..=9u64).rev().enumerate() {
        let kept = &keep.archives[&archive_ref(n).digest];
        assert_eq!(
            kept.reasons,
            vec![KeepReason::Recent {
                module: "web".to_owned(),
                rank: rank + 1
            }]
        );
    }
    assert!(!keep.keeps(&archive_ref(4).digest));
}

#[test]
fn a_rebuild_of_the_same_archive_does_not_take_a_second_place() {
    let mut record = module_with_builds("web", 6);
    // Build 6's bytes built again, later: still five distinct archives kept.
    record.builds.push(build("web", &archive_ref(6), 200));
    let keep = keep_set(&[record]);
    assert_eq!(keep.len(), 5);
    assert!(keep.keeps(&archive_ref(2).digest));
}

// The incident behind “An archive is published with a manifest that holds it”: "the five most
// recent builds" kept builds of modules the mesh no longer holds, forever.
#[test]
fn a_forgotten_module_keeps_nothing() {
    let mut forgotten = module_with_builds("old", 3);
    forgotten.held = false;
    forgotten.current = Some(archive_ref(3));
    let held = module_with_builds("web", 1);
    let keep = keep_set(&[forgotten, held]);
    assert_eq!(keep.len(), 1);
    assert!(keep.keeps(&archive_ref(1).digest));
    assert!(!keep.keeps(&archive_ref(3).digest));
}

#[test]
fn each_kept_digest_says_why() {
    let mut record = module_with_builds("web", 7);
    record.current = Some(archive_ref(2)); // rolled back to an old build
    let keep = keep_set(&[record]);
    let reasons: Vec<String> = keep
        .archives
        .values()
        .map(|k| {
            let why: Vec<String> = k.reasons.iter().map(|r| r.to_string()).collect();
            format!("{} {}", k.archive.size, why.join(", "))
        })
        .collect();
    insta::assert_snapshot!(reasons.join("\n"), @"
    2 current build of web
    3 recent build #5 of web
    4 recent build #4 of web
    5 recent build #3 of web
    6 recent build #2 of web
    7 recent build #1 of web
    ");
}
