//! How a resource's [`Spec`] is read: its `kind` first, then the fields of that kind read
//! straight from the map.
//!
//! The spec is internally tagged (`{"kind": "file", "path": …}`). serde's derive for such an
//! enum buffers the whole object first, every string and map of it copied into a tree, to find
//! the tag wherever it is, then reads the variant from that tree: for a file rendered from
//! secrets — its template's pieces, each secret's ciphertext — that is most of what reading a
//! declaration costs, on a host that reads one on every apply. The canonical JSON
//! ([`super::Declaration::canonical_json`]) always writes `kind` first, so it is read first
//! and the rest of the object is handed to the kind's own `Deserialize` as it is; an object
//! with `kind` elsewhere (written by hand, or by another program) is read through a
//! [`serde_json::Value`], as the derive would read it. Either way the same spec is read, with
//! the derive's errors (`missing field `kind``, `unknown variant …`).

use super::Spec;
use serde::de::{self, Deserialize, Deserializer, IntoDeserializer as _, MapAccess, Visitor};

/// An object's first key: `kind`, or another (kept, to read the object whole).
enum FirstKey {
    Kind,
    Other(String),
}

impl<'de> Deserialize<'de> for FirstKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<FirstKey, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = FirstKey;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a field's name")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<FirstKey, E> {
                Ok(if key == "kind" {
                    FirstKey::Kind
                } else {
                    FirstKey::Other(key.to_owned())
                })
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for Spec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Spec, D::Error> {
        deserializer.deserialize_map(SpecVisitor)
    }
}

struct SpecVisitor;

impl<'de> Visitor<'de> for SpecVisitor {
    type Value = Spec;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a resource's spec: an object with its `kind`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Spec, A::Error> {
        let first = match map.next_key::<FirstKey>()? {
            Some(FirstKey::Kind) => {
                let kind: std::borrow::Cow<'de, str> = map.next_value()?;
                return Spec::read(&kind, de::value::MapAccessDeserializer::new(map));
            }
            Some(FirstKey::Other(key)) => key,
            None => return Err(de::Error::missing_field("kind")),
        };
        // `kind` is not first: the object is read whole, then its kind found in it.
        let mut fields = serde_json::Map::new();
        let value = map.next_value()?;
        fields.insert(first, value);
        while let Some((key, value)) = map.next_entry::<String, serde_json::Value>()? {
            fields.insert(key, value);
        }
        let kind = fields
            .remove("kind")
            .ok_or_else(|| de::Error::missing_field("kind"))?;
        let serde_json::Value::String(kind) = kind else {
            return Err(de::Error::custom(format!(
                "invalid type: {kind}, expected a kind's name"
            )));
        };
        Spec::read(&kind, fields.into_deserializer()).map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{resource_id, ContainerSpec, Declaration, FileSpec, Resource};
    use super::*;
    use crate::secret::{SealedPiece, SecretValue};

    fn declaration() -> Declaration {
        let mut sealed = FileSpec::inline("/etc/app/creds", "", 0o600, "root", "root");
        sealed.content = None;
        sealed.sealed = Some(vec![
            SealedPiece::Text("app:".into()),
            SealedPiece::Secret {
                key: "password".into(),
                value: SecretValue {
                    digest: format!("sha256:{}", "ab".repeat(32)),
                    ciphertext: "YWdlLWVuY3J5cHRpb24=".into(),
                },
            },
            SealedPiece::Text("\n".into()),
        ]);
        let resource = |name: &str, spec: Spec| Resource {
            id: resource_id("app", spec.kind(), name),
            module: "app".into(),
            together: None,
            after: Vec::new(),
            spec,
        };
        Declaration::new(
            "n",
            vec![
                resource(
                    "a",
                    Spec::File(FileSpec::inline("/etc/app/a", "a\n", 0o644, "root", "root")),
                ),
                resource("creds", Spec::File(sealed)),
                resource(
                    "app",
                    Spec::Container(Box::new(ContainerSpec {
                        name: "app".into(),
                        image: "registry.example/app:1".into(),
                        ..ContainerSpec::default()
                    })),
                ),
            ],
        )
    }

    #[test]
    fn a_spec_reads_back_with_its_kind_first_or_anywhere() {
        let declaration = declaration();
        let bytes = declaration.canonical_json();
        assert_eq!(
            serde_json::from_slice::<Declaration>(&bytes).unwrap(),
            declaration
        );
        // Written by another program: its keys sorted, `kind` among them.
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let moved = serde_json::to_string(&value).unwrap();
        assert!(!moved.contains(r#""spec":{"kind""#), "{moved}");
        assert_eq!(
            serde_json::from_str::<Declaration>(&moved).unwrap(),
            declaration
        );
    }

    #[test]
    fn a_spec_without_a_known_kind_is_refused_as_the_derive_would() {
        let read = |json: &str| serde_json::from_str::<Spec>(json).unwrap_err().to_string();
        assert!(read(r#"{"path": "/x"}"#).contains("missing field `kind`"));
        assert!(read("{}").contains("missing field `kind`"));
        for json in [
            r#"{"kind": "link", "path": "/x"}"#,
            r#"{"path": "/x", "kind": "link"}"#,
        ] {
            let error = read(json);
            assert!(
                error.contains("unknown variant `link`, expected one of `file`"),
                "{error}"
            );
        }
        let error = read(r#"{"kind": "file", "path": "/x"}"#);
        assert!(error.contains("missing field `mode`"), "{error}");
    }
}
