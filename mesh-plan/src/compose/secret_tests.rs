//! A file's template that uses a secret is composed with the secret sealed in it, for its host
//! to put in: the declaration carries ciphertext and keyed digest, never the value (the rule “A
//! secret is readable only where it is used”); anywhere else a secret is refused, and a file
//! that uses one must be 0640 or tighter.

use super::*;
use crate::fixture;
use mesh_model::secret::{SealedPiece, SecretValue};

fn secret(digest: char) -> String {
    SecretValue {
        digest: format!("sha256:{}", digest.to_string().repeat(64)),
        ciphertext: format!("Y2lwaGVy{digest}"),
    }
    .to_json()
    .to_string()
}

fn mesh(mode: &str, path: &str, layer: &str) -> String {
    format!(
        r#"
        //- modules/db/module.toml
        name = "db"
        [settings]
        user = "app"
        password = ""
        [files.creds]
        source = "creds"
        path = "{path}"
        mode = "{mode}"
        template = true
        //- modules/db/creds
        {{{{ user }}}}:{{{{ password }}}}
        //- inventory.toml
        bus-node = "a"
        [nodes.a]
        [assignments]
        db = ["a"]
        //- settings/db/nodes/a.json
        {layer}
        "#
    )
}

fn compose_a(text: &str) -> Result<Declaration, ComposeError> {
    let (catalogue, inventory) = fixture::mesh(text);
    compose(&catalogue, &inventory, "a")
}

#[test]
fn a_file_using_a_secret_carries_it_sealed_and_the_digest_follows_the_secret() {
    let layer = format!(r#"{{"password": {}}}"#, secret('a'));
    let declaration = compose_a(&mesh("0600", "/etc/db/creds", &layer)).unwrap();
    let Spec::File(file) = &declaration.resource("db/file/creds").unwrap().spec else {
        panic!("a file");
    };
    assert_eq!(file.content, None);
    let pieces = file.sealed.as_ref().expect("a template of secrets");
    assert_eq!(pieces[0], SealedPiece::Text("app:".into()));
    assert!(matches!(&pieces[1], SealedPiece::Secret { key, value }
        if key == "password" && value.ciphertext == "Y2lwaGVya"));
    assert_eq!(declaration.problems(), Vec::<String>::new());
    let changed = format!(r#"{{"password": {}}}"#, secret('b'));
    let other = compose_a(&mesh("0600", "/etc/db/creds", &changed)).unwrap();
    assert_ne!(other.digest(), declaration.digest());
}

#[test]
fn a_file_using_a_secret_looser_than_0640_is_refused_naming_module_and_key() {
    let layer = format!(r#"{{"password": {}}}"#, secret('a'));
    let error = compose_a(&mesh("0644", "/etc/db/creds", &layer))
        .unwrap_err()
        .to_string();
    assert!(error.contains("module `db`: `files.creds.mode`"), "{error}");
    assert!(error.contains("0640 or tighter, not 0644"), "{error}");
    assert!(compose_a(&mesh("0640", "/etc/db/creds", &layer)).is_ok());
    // The same mode without a secret is the module's own business.
    assert!(compose_a(&mesh("0644", "/etc/db/creds", r#"{"password": "x"}"#)).is_ok());
}

#[test]
fn a_secret_anywhere_but_a_files_template_is_refused_and_never_rendered() {
    let layer = format!(r#"{{"password": {}}}"#, secret('a'));
    let error = compose_a(&mesh("0600", "/etc/{{ password }}", &layer)).unwrap_err();
    let text = format!("{error} {error:?}");
    assert!(text.contains("`password` is a secret"), "{text}");
    assert!(!text.contains("Y2lwaGVy"), "{text}");
}

#[test]
fn a_changed_secret_shows_as_changed_in_the_diff_by_its_digests_only() {
    let before = format!(r#"{{"password": {}}}"#, secret('a'));
    let after = format!(r#"{{"password": {}}}"#, secret('b'));
    let sent = compose_a(&mesh("0600", "/etc/db/creds", r#"{"password": "x"}"#)).unwrap();
    let first = compose_a(&mesh("0600", "/etc/db/creds", &before)).unwrap();
    let second = compose_a(&mesh("0600", "/etc/db/creds", &after)).unwrap();
    let mut text = String::new();
    for (old, new) in [(&sent, &first), (&first, &second), (&second, &second)] {
        let diff = crate::diff::diff(Some(old), new);
        text.push_str(&diff.render_text());
        text.push_str(&serde_json::to_string(&diff).unwrap());
        text.push('\n');
    }
    assert!(!text.contains("Y2lwaGVy"), "{text}");
    assert!(!text.contains("app:x"), "{text}");
    assert!(text.contains(&format!("password <secret sha256:{}>", "b".repeat(64))));
    insta::assert_snapshot!(text);
}

#[test]
fn a_declaration_resealed_for_its_node_keeps_its_digest() {
    let layer = format!(r#"{{"password": {}}}"#, secret('a'));
    let declaration = compose_a(&mesh("0600", "/etc/db/creds", &layer)).unwrap();
    let mut resealed = declaration.clone();
    for resource in &mut resealed.resources {
        if let Spec::File(FileSpec {
            sealed: Some(pieces),
            ..
        }) = &mut resource.spec
        {
            for piece in pieces {
                if let SealedPiece::Secret { value, .. } = piece {
                    value.ciphertext = "b3RoZXIta2V5".into();
                }
            }
        }
    }
    assert_ne!(resealed.canonical_json(), declaration.canonical_json());
    assert_eq!(resealed.digest(), declaration.digest());
}

fn secret_file_mesh(mode: &str, file: &str) -> String {
    format!(
        r#"
        //- modules/tls/module.toml
        name = "tls"
        [files.key]
        source = "key.pem"
        path = "/etc/tls/server.key"
        mode = "{mode}"
        secret = true
        //- modules/tls/key.pem
        {file}
        //- inventory.toml
        bus-node = "a"
        [nodes.a]
        [assignments]
        tls = ["a"]
        "#
    )
}

#[test]
fn a_secret_file_is_carried_sealed_as_the_catalogue_holds_it_and_0640_or_tighter() {
    let sealed = secret('c');
    let declaration = compose_a(&secret_file_mesh("0600", &sealed)).unwrap();
    let Spec::File(file) = &declaration.resource("tls/file/key").unwrap().spec else {
        panic!("a file");
    };
    assert_eq!(file.content, None);
    let value = SecretValue::from_json(&serde_json::from_str(&sealed).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(
        file.sealed,
        Some(vec![SealedPiece::Secret {
            key: "files.key".into(),
            value
        }])
    );
    let error = compose_a(&secret_file_mesh("0644", &sealed))
        .unwrap_err()
        .to_string();
    assert!(error.contains("module `tls`: `files.key.mode`"), "{error}");
    assert!(error.contains("0640 or tighter, not 0644"), "{error}");
}

#[test]
fn a_secret_file_in_clear_is_refused_naming_module_and_file_and_never_quoted() {
    let mut source = mesh_model::module::CatalogueSource {
        prefix: "modules".into(),
        ..Default::default()
    };
    for (path, body) in fixture::files(&secret_file_mesh("0600", "-----BEGIN PRIVATE KEY-----")) {
        if let Some(inner) = path.strip_prefix("modules/tls/") {
            let entries = &mut source.modules.entry("tls".into()).or_default().entries;
            let bytes = body.into_bytes();
            entries.insert(
                inner.into(),
                EntryKind::File {
                    bytes,
                    executable: false,
                },
            );
        }
    }
    let (_, problems) = mesh_model::module::load_catalogue(&source);
    let text = problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(problems.len(), 1, "{text}");
    assert!(text.contains("files.key.source"), "{text}");
    assert!(text.contains("secrets encrypt key.pem"), "{text}");
    assert!(!text.contains("PRIVATE"), "{text}");
}
