//! A secret as the model carries it: ciphertext and a keyed digest, never the value.
//!
//! A secret setting is held in a settings layer as the JSON object
//! `{"$secret": {"digest": "sha256:…", "ciphertext": "…"}}` ([`SecretValue::to_json`]): the
//! ciphertext is an age file (base64) only the mesh's secrets key and the operators' keys can
//! open, and the digest is an HMAC-SHA256 of the value keyed from the mesh's secrets key, so a
//! change is visible but the value cannot be guessed from it. The cryptography is
//! `mesh-secrets`'; here a secret is an opaque typed value.
//!
//! Everything a person reads shows a secret as `<secret sha256:…>` ([`SecretValue`]'s
//! `Display`, [`shown`] for a whole JSON value) — the rule “A secret is readable only where it
//! is used”.
//!
//! What it must never do: hold or show a secret's value; no IO.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The key that marks a JSON object as a secret value.
pub const SECRET_MARKER: &str = "$secret";

/// A secret: its ciphertext and its keyed digest.
///
/// It serializes as `{"digest", "ciphertext"}`; while a declaration is hashed, with its
/// ciphertext empty (`with_ciphertexts_left_out`).
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SecretValue {
    /// `sha256:<hex>`: an HMAC-SHA256 of the value, keyed from the mesh's secrets key.
    pub digest: String,
    /// The age file (binary, base64 with padding) holding the value.
    pub ciphertext: String,
}

thread_local! {
    /// Whether a secret serialized on this thread now leaves its ciphertext out
    /// ([`with_ciphertexts_left_out`]).
    static CIPHERTEXTS_LEFT_OUT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `serialize` with every [`SecretValue`] it serializes on this thread written with an
/// empty ciphertext: what a declaration's digest counts (`Declaration::digest`), its secrets by
/// their keyed digests only, hashed as it is serialized — no copy of it with its ciphertexts
/// cleared. Whatever `serialize` does, secrets serialize whole again
/// once it returns (or unwinds).
pub(crate) fn with_ciphertexts_left_out<T>(serialize: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            CIPHERTEXTS_LEFT_OUT.set(self.0);
        }
    }
    let _restore = Restore(CIPHERTEXTS_LEFT_OUT.replace(true));
    serialize()
}

impl Serialize for SecretValue {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        let ciphertext = if CIPHERTEXTS_LEFT_OUT.get() {
            ""
        } else {
            self.ciphertext.as_str()
        };
        let mut fields = serializer.serialize_struct("SecretValue", 2)?;
        fields.serialize_field("digest", &self.digest)?;
        fields.serialize_field("ciphertext", ciphertext)?;
        fields.end()
    }
}

impl SecretValue {
    /// The JSON a settings layer holds for it: `{"$secret": {"digest", "ciphertext"}}`.
    pub fn to_json(&self) -> Value {
        let mut object = serde_json::Map::new();
        object.insert(
            SECRET_MARKER.to_owned(),
            serde_json::to_value(self).expect("a secret value always serializes"),
        );
        Value::Object(object)
    }

    /// Reads a secret from a JSON value: `None` when the value is not marked as one,
    /// `Some(Err(why))` when it is marked but malformed.
    pub fn from_json(value: &Value) -> Option<Result<SecretValue, String>> {
        let object = value.as_object()?;
        let inner = object.get(SECRET_MARKER)?;
        if object.len() != 1 {
            return Some(Err(format!(
                "a secret is an object with `{SECRET_MARKER}` alone"
            )));
        }
        Some(
            serde_json::from_value::<SecretValue>(inner.clone())
                .map_err(|e| format!("a malformed secret: {e}"))
                .and_then(|secret| match secret.problem() {
                    Some(problem) => Err(problem),
                    None => Ok(secret),
                }),
        )
    }

    /// The text of a module's secret file (`secret = true`) holding it: its JSON
    /// ([`SecretValue::to_json`]), pretty, ending in a newline.
    pub fn to_file(&self) -> String {
        let mut text = serde_json::to_string_pretty(&self.to_json())
            .expect("a secret value always serializes");
        text.push('\n');
        text
    }

    /// Reads a module's secret file ([`SecretValue::to_file`]).
    ///
    /// # Errors
    /// Why the bytes are not an encrypted secret (never quoting them: they may be the value in
    /// clear).
    pub fn from_file(bytes: &[u8]) -> Result<SecretValue, String> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|_| "not an encrypted secret (`{\"$secret\": …}`)".to_owned())?;
        SecretValue::from_json(&value)
            .unwrap_or_else(|| Err("not an encrypted secret (`{\"$secret\": …}`)".to_owned()))
    }

    /// What is wrong with it, if anything (a digest that is not `sha256:<64 hex>`, or no
    /// ciphertext).
    pub fn problem(&self) -> Option<String> {
        if !crate::is_sha256_digest(&self.digest) {
            return Some("a secret's digest is `sha256:` and 64 hex digits".into());
        }
        if self.ciphertext.is_empty() {
            return Some("a secret has no ciphertext".into());
        }
        None
    }
}

/// Shown as `<secret sha256:…>`: its digest, never its ciphertext.
impl std::fmt::Display for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<secret {}>", self.digest)
    }
}

/// Like `Display`: a log or an error that prints a secret with `{:?}` shows its digest.
impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretValue(<secret {}>)", self.digest)
    }
}

/// A piece of a file's template that uses secrets (`FileSpec::sealed`): text the controller
/// rendered, or a secret its host opens and puts in at apply time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub enum SealedPiece {
    /// Text, as rendered.
    Text(String),
    /// The secret setting `key`.
    Secret {
        /// The setting's dotted key.
        key: String,
        /// Its value, sealed.
        value: SecretValue,
    },
}

/// The digest of a template of secrets: of its text and its secrets' keyed digests, never of
/// a ciphertext, so it is the same whichever key the secrets travel to, and changes with any
/// piece.
pub fn sealed_digest(pieces: &[SealedPiece]) -> String {
    let parts: Vec<(&str, &str)> = pieces
        .iter()
        .map(|piece| match piece {
            SealedPiece::Text(text) => ("text", text.as_str()),
            SealedPiece::Secret { value, .. } => ("secret", value.digest.as_str()),
        })
        .collect();
    crate::sha256_digest(&serde_json::to_vec(&parts).expect("text always serializes"))
}

/// A template of secrets as a person reads it: the secrets it uses by key and digest, and the
/// digest of the whole (`uses password <secret sha256:…>; sha256:…`).
pub fn describe_sealed(pieces: &[SealedPiece]) -> String {
    let secrets: Vec<String> = pieces
        .iter()
        .filter_map(|piece| match piece {
            SealedPiece::Secret { key, value } => Some(format!("{key} {value}")),
            SealedPiece::Text(_) => None,
        })
        .collect();
    format!("uses {}; {}", secrets.join(", "), sealed_digest(pieces))
}

/// Whether a JSON value is, or holds anywhere within it, a secret.
pub fn holds_secret(value: &Value) -> bool {
    match value {
        Value::Object(object) => {
            object.contains_key(SECRET_MARKER) || object.values().any(holds_secret)
        }
        Value::Array(items) => items.iter().any(holds_secret),
        _ => false,
    }
}

/// A JSON value as a person may see it: every secret in it replaced by the string
/// `<secret sha256:…>` (a malformed one by `<secret>`).
pub fn shown(value: &Value) -> Value {
    match value {
        Value::Object(object) => match SecretValue::from_json(value) {
            Some(Ok(secret)) => Value::String(secret.to_string()),
            Some(Err(_)) => Value::String("<secret>".into()),
            None => Value::Object(
                object
                    .iter()
                    .map(|(key, value)| (key.clone(), shown(value)))
                    .collect(),
            ),
        },
        Value::Array(items) => Value::Array(items.iter().map(shown).collect()),
        other => other.clone(),
    }
}

/// A wire format's JSON (a declaration's) as a person may see it: every sealed secret in it
/// (an object of `digest` and `ciphertext` alone) replaced by `<secret sha256:…>`, and every
/// marked one as [`shown`] does.
pub fn shown_wire(value: &Value) -> Value {
    match value {
        Value::Object(object) => {
            let is_sealed = object.len() == 2
                && object.contains_key("ciphertext")
                && object.get("digest").is_some_and(Value::is_string);
            if is_sealed {
                if let Ok(secret) = serde_json::from_value::<SecretValue>(value.clone()) {
                    return Value::String(secret.to_string());
                }
            }
            if SecretValue::from_json(value).is_some() {
                return shown(value);
            }
            Value::Object(
                object
                    .iter()
                    .map(|(key, value)| (key.clone(), shown_wire(value)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(shown_wire).collect()),
        other => other.clone(),
    }
}

/// Every secret a JSON value holds, by dotted key below it (`""` for the value itself).
pub fn secrets_in(value: &Value) -> Vec<(String, SecretValue)> {
    fn walk(value: &Value, at: &str, out: &mut Vec<(String, SecretValue)>) {
        if let Some(Ok(secret)) = SecretValue::from_json(value) {
            out.push((at.to_owned(), secret));
            return;
        }
        if let Value::Object(object) = value {
            for (key, value) in object {
                let below = if at.is_empty() {
                    key.clone()
                } else {
                    format!("{at}.{key}")
                };
                walk(value, &below, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(value, "", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secret() -> SecretValue {
        SecretValue {
            digest: format!("sha256:{}", "ab".repeat(32)),
            ciphertext: "YWdlLWVuY3J5cHRpb24=".into(),
        }
    }

    #[test]
    fn a_secret_reads_back_from_its_json_and_shows_only_its_digest() {
        let json = secret().to_json();
        assert_eq!(SecretValue::from_json(&json), Some(Ok(secret())));
        let shown_text = format!("{} {:?}", secret(), secret());
        assert!(!shown_text.contains("YWdl"), "{shown_text}");
        assert!(shown_text.contains(&format!("<secret sha256:{}>", "ab".repeat(32))));
    }

    #[test]
    fn a_layer_is_shown_with_its_secrets_replaced() {
        let layer =
            json!({"port": 80, "tls": {"key": secret().to_json()}, "list": [secret().to_json()]});
        assert!(holds_secret(&layer));
        let shown = shown(&layer);
        let text = shown.to_string();
        assert!(!text.contains("YWdl"), "{text}");
        assert_eq!(shown["tls"]["key"], json!(secret().to_string()));
        assert_eq!(shown["port"], json!(80));
        assert_eq!(
            secrets_in(&layer).len(),
            1,
            "a list's secrets are not settings"
        );
        assert_eq!(secrets_in(&layer)[0].0, "tls.key");
    }

    #[test]
    fn a_secret_file_reads_back_and_clear_text_is_not_one() {
        let text = secret().to_file();
        assert!(text.ends_with('\n'));
        assert_eq!(SecretValue::from_file(text.as_bytes()), Ok(secret()));
        for clear in [
            &b"-----BEGIN PRIVATE KEY-----\n"[..],
            b"{\"a\": 1}",
            b"\xff",
        ] {
            let why = SecretValue::from_file(clear).unwrap_err();
            assert!(!why.contains("PRIVATE"), "{why}");
        }
    }

    #[test]
    fn a_malformed_secret_is_named_and_never_shown() {
        let bad = json!({"$secret": {"digest": "md5:x", "ciphertext": "YWdl"}});
        assert!(matches!(SecretValue::from_json(&bad), Some(Err(_))));
        assert_eq!(shown(&bad), json!("<secret>"));
        let extra = json!({"$secret": {"digest": "x", "ciphertext": "y"}, "other": 1});
        assert!(matches!(SecretValue::from_json(&extra), Some(Err(_))));
        assert_eq!(SecretValue::from_json(&json!({"a": 1})), None);
    }
}
