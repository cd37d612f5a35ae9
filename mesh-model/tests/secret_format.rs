//! A declaration holding a template of secrets is written in format 3, which a host that reads
//! only formats 1 and 2 refuses naming the format, rather than ignore the secret; format 3
//! claimed without one, or a secret under an older format, is refused naming why.

use mesh_model::declaration::{
    resource_id, Declaration, FileSpec, Resource, Spec, DECLARATION_FORMAT,
    DECLARATION_FORMAT_SECRETS,
};
use mesh_model::secret::{SealedPiece, SecretValue};

fn declaration(sealed: bool) -> Declaration {
    let mut spec = FileSpec::inline("/etc/creds", "x", 0o600, "root", "root");
    if sealed {
        spec.content = None;
        spec.sealed = Some(vec![SealedPiece::Secret {
            key: "password".into(),
            value: SecretValue {
                digest: format!("sha256:{}", "a".repeat(64)),
                ciphertext: "YWdl".into(),
            },
        }]);
    }
    Declaration::new(
        "n",
        vec![Resource {
            id: resource_id("db", "file", "creds"),
            module: "db".into(),
            together: None,
            after: Vec::new(),
            spec: Spec::File(spec),
        }],
    )
}

#[test]
fn a_template_of_secrets_is_format_3_and_reads_back() {
    let sealed = declaration(true);
    assert_eq!(sealed.format, DECLARATION_FORMAT_SECRETS);
    let again = Declaration::from_json(&sealed.canonical_json()).unwrap();
    assert_eq!(again, sealed);
    assert_eq!(declaration(false).format, DECLARATION_FORMAT);
}

#[test]
fn a_secret_under_an_older_format_or_format_3_without_one_is_refused_naming_why() {
    let mut old = declaration(true);
    old.format = DECLARATION_FORMAT;
    let error = Declaration::from_json(&old.canonical_json())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("template of secrets, which format 1 does not hold"),
        "{error}"
    );
    let mut claimed = declaration(false);
    claimed.format = DECLARATION_FORMAT_SECRETS;
    let error = Declaration::from_json(&claimed.canonical_json())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("format 3 has a template of secrets"),
        "{error}"
    );
    let mut newer = declaration(true);
    newer.format = 4;
    let error = Declaration::from_json(&newer.canonical_json())
        .unwrap_err()
        .to_string();
    assert!(error.contains('4') && error.contains('3'), "{error}");
}
