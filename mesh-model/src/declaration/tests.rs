//! The declaration's unit tests.

use super::*;

fn file(module: &str, name: &str, content: Option<&str>, source: Option<&str>) -> Resource {
    Resource {
        id: resource_id(module, "file", name),
        module: module.to_owned(),
        together: None,
        after: Vec::new(),
        spec: Spec::File(FileSpec {
            path: format!("/etc/{module}/{name}"),
            content: content.map(str::to_owned),
            source: source.map(|path| ArchivedFile {
                path: path.to_owned(),
                sha256: sha256_digest(path.as_bytes()),
            }),
            sealed: None,
            mode: 0o644,
            owner: "root".to_owned(),
            group: "root".to_owned(),
        }),
    }
}

fn archive(name: &str) -> ArchiveRef {
    ArchiveRef {
        digest: sha256_digest(name.as_bytes()),
        size: 10,
    }
}

#[test]
fn a_declaration_naming_no_archive_is_format_1_and_a_declaration_naming_one_is_format_2() {
    let inline = Declaration::new("n", vec![file("a", "x", Some("x\n"), None)]);
    assert_eq!(inline.format, DECLARATION_FORMAT);
    assert!(!String::from_utf8(inline.canonical_json())
        .unwrap()
        .contains("archives"));
    let archived = Declaration::with_archives(
        "n",
        vec![file("a", "x", None, Some("files/x"))],
        BTreeMap::from([("a".to_owned(), archive("a"))]),
    );
    assert_eq!(archived.format, DECLARATION_FORMAT_ARCHIVES);
    assert_eq!(
        Declaration::from_json(&archived.canonical_json()).unwrap(),
        archived
    );
    // With no secret in it, serialized once and hashed: the bytes and digest made apart.
    for declaration in [&inline, &archived] {
        assert_eq!(
            declaration.canonical_json_and_digest(),
            (declaration.canonical_json(), declaration.digest())
        );
    }
}

/// A newer minor version's fields (what a controller upgraded before its hosts sends once
/// a module uses something new) are read and ignored; a newer major format is named.
#[test]
fn a_newer_minor_versions_fields_are_read_and_a_newer_major_format_named() {
    let declaration = Declaration::new("n", vec![file("a", "x", Some("x\n"), None)]);
    let mut value: serde_json::Value =
        serde_json::from_slice(&declaration.canonical_json()).unwrap();
    value["rollout-hint"] = serde_json::json!("soon");
    value["resources"][0]["priority"] = serde_json::json!(3);
    value["resources"][0]["spec"]["checksum-only"] = serde_json::json!(true);
    let read = Declaration::from_json(&serde_json::to_vec(&value).unwrap()).unwrap();
    assert_eq!(read, declaration);

    value["format"] = serde_json::json!(9);
    let newer = Declaration::from_json(&serde_json::to_vec(&value).unwrap())
        .unwrap_err()
        .to_string();
    assert_eq!(
        newer,
        "declaration has format 9, this build reads up to format 3"
    );
}

#[test]
fn every_broken_archive_rule_is_said() {
    let mut declaration = Declaration::with_archives(
        "n",
        vec![
            file("a", "both", Some("x\n"), Some("both")),
            file("a", "neither", None, None),
            file("b", "orphan", None, Some("orphan")),
            file("a", "climbs", None, Some("../out")),
            file("a", "fine", None, Some("files/fine")),
        ],
        BTreeMap::from([
            ("a".to_owned(), archive("a")),
            ("c".to_owned(), archive("c")),
        ]),
    );
    assert_eq!(
        declaration.problems(),
        [
            "the archive of `c` is named but no file of `c` is read from it",
            "`a/file/both`: a file carries its content or names its source, not both",
            "`a/file/climbs`: `../out` is not a plain relative path in an archive",
            "`a/file/neither`: a file carries its content or names its source",
            "`b/file/orphan`: its content is in the archive of `b`, which the declaration does \
             not name",
        ]
    );
    declaration.format = DECLARATION_FORMAT;
    assert!(declaration.problems()[0].starts_with("format 1 names no archive"));
}

#[test]
fn a_declarations_digest_counts_its_secrets_by_their_digests_and_leaves_them_whole() {
    use crate::secret::{with_ciphertexts_left_out, SealedPiece, SecretValue};
    let secret = || SecretValue {
        digest: format!("sha256:{}", "ab".repeat(32)),
        ciphertext: "YWdlLWVuY3J5cHRpb24=".into(),
    };
    let declaration = |value: SecretValue| {
        let mut spec = FileSpec::inline("/etc/app/creds", "", 0o600, "root", "root");
        spec.content = None;
        spec.sealed = Some(vec![
            SealedPiece::Text("app:".into()),
            SealedPiece::Secret {
                key: "password".into(),
                value,
            },
        ]);
        Declaration::new(
            "n",
            vec![Resource {
                id: resource_id("app", "file", "creds"),
                module: "app".into(),
                together: None,
                after: Vec::new(),
                spec: Spec::File(spec),
            }],
        )
    };
    let sent = declaration(secret());
    let cleared = declaration(SecretValue {
        ciphertext: String::new(),
        ..secret()
    });
    // The digest is of the canonical JSON with each ciphertext empty: sealed again to
    // another key, the same; its keyed digest changed, another.
    assert_eq!(
        sent.digest(),
        crate::sha256_digest(&cleared.canonical_json())
    );
    let resealed = declaration(SecretValue {
        ciphertext: "b3RoZXIga2V5".into(),
        ..secret()
    });
    assert_eq!(resealed.digest(), sent.digest());
    let changed = declaration(SecretValue {
        digest: format!("sha256:{}", "cd".repeat(32)),
        ..secret()
    });
    assert_ne!(changed.digest(), sent.digest());
    // Serialized and hashed once (as a send does), the same bytes and digest; sealed again,
    // its own bytes and the first one's digest.
    let (json, digest) = sent.canonical_json_and_digest();
    assert_eq!(
        (json, digest.clone()),
        (sent.canonical_json(), sent.digest())
    );
    let outgoing = super::Outgoing::new(sent.clone());
    assert_eq!(outgoing.digest(), digest);
    let resealed_out = outgoing.resealed(resealed.clone());
    assert_eq!(resealed_out.json(), resealed.canonical_json());
    assert_eq!(resealed_out.digest(), digest);
    // Hashed, it still serializes whole, here and after a panic while hashing.
    let whole = String::from_utf8(sent.canonical_json()).unwrap();
    assert!(whole.contains(&secret().ciphertext), "{whole}");
    let panicked =
        std::panic::catch_unwind(|| with_ciphertexts_left_out(|| panic!("while serializing")));
    assert!(panicked.is_err());
    assert_eq!(sent.canonical_json(), whole.into_bytes());
}
