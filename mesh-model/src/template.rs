//! The template language of module files and resource fields: `{{ dotted.key }}`.
//!
//! A reference names a setting by its dotted path (`port`, `endpoints.api`, `places.media`).
//! Strings render as they are, numbers and booleans as JSON would print them, and arrays or
//! objects as compact JSON. There is nothing else: no conditionals, no loops, so a template's
//! inputs are exactly its references.

use serde_json::Value;

/// A problem with a template or its inputs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// `{{` without a matching `}}`.
    #[error("unclosed `{{{{` at byte {offset}")]
    Unclosed {
        /// Byte offset of the opening braces.
        offset: usize,
    },
    /// A reference that is not a dotted path of `[A-Za-z0-9_-]` segments.
    #[error("`{{{{{text}}}}}` is not a setting reference (expected `{{{{ dotted.key }}}}`)")]
    BadReference {
        /// The text between the braces.
        text: String,
    },
    /// A reference to a setting that has no value.
    #[error("no setting `{key}`")]
    Unknown {
        /// The dotted key.
        key: String,
    },
    /// A reference to a secret where only its value would do: a secret is never rendered by
    /// the controller (the rule “A secret is readable only where it is used”).
    #[error(
        "`{key}` is a secret, and a secret is rendered only into a file's template, on its host"
    )]
    Secret {
        /// The dotted key.
        key: String,
    },
}

/// The dotted keys a template refers to, in order of appearance.
///
/// # Errors
/// A malformed template ([`TemplateError::Unclosed`], [`TemplateError::BadReference`]).
pub fn references(text: &str) -> Result<Vec<String>, TemplateError> {
    let mut keys = Vec::new();
    walk(text, |piece| {
        if let Piece::Reference(key) = piece {
            keys.push(key.to_owned());
        }
        Ok(())
    })?;
    Ok(keys)
}

/// Renders a template against settings (a JSON object).
///
/// # Errors
/// A malformed template, or a reference to a key `settings` does not hold.
pub fn render(text: &str, settings: &Value) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(text.len());
    walk(text, |piece| {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Reference(key) => {
                let value = lookup(settings, key).ok_or_else(|| TemplateError::Unknown {
                    key: key.to_owned(),
                })?;
                if crate::secret::holds_secret(value) {
                    return Err(TemplateError::Secret {
                        key: key.to_owned(),
                    });
                }
                match value {
                    Value::String(s) => out.push_str(s),
                    other => out.push_str(&other.to_string()),
                }
            }
        }
        Ok(())
    })?;
    Ok(out)
}

/// A file's template rendered: all text, or pieces of text and secrets its host puts in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rendered {
    /// No secret is used: the text.
    Plain(String),
    /// Secrets are used: text and sealed secrets, in order.
    Sealed(Vec<crate::secret::SealedPiece>),
}

/// Renders a file's template against settings, leaving each secret it names sealed, for its
/// host to put in (the rule “A secret is readable only where it is used”).
///
/// # Errors
/// As [`render`]; a reference to a table holding secrets is [`TemplateError::Secret`].
pub fn render_sealed(text: &str, settings: &Value) -> Result<Rendered, TemplateError> {
    use crate::secret::{SealedPiece, SecretValue};
    let mut pieces: Vec<SealedPiece> = Vec::new();
    let mut sealed = false;
    let push_text = |pieces: &mut Vec<SealedPiece>, text: &str| match pieces.last_mut() {
        Some(SealedPiece::Text(last)) => last.push_str(text),
        _ => pieces.push(SealedPiece::Text(text.to_owned())),
    };
    walk(text, |piece| {
        match piece {
            Piece::Text(t) => push_text(&mut pieces, t),
            Piece::Reference(key) => {
                let value = lookup(settings, key).ok_or_else(|| TemplateError::Unknown {
                    key: key.to_owned(),
                })?;
                match SecretValue::from_json(value) {
                    Some(Ok(secret)) => {
                        sealed = true;
                        pieces.push(SealedPiece::Secret {
                            key: key.to_owned(),
                            value: secret,
                        });
                    }
                    Some(Err(_)) => {
                        return Err(TemplateError::Secret {
                            key: key.to_owned(),
                        })
                    }
                    None if crate::secret::holds_secret(value) => {
                        return Err(TemplateError::Secret {
                            key: key.to_owned(),
                        })
                    }
                    None => match value {
                        Value::String(s) => push_text(&mut pieces, s),
                        other => push_text(&mut pieces, &other.to_string()),
                    },
                }
            }
        }
        Ok(())
    })?;
    if sealed {
        return Ok(Rendered::Sealed(pieces));
    }
    Ok(Rendered::Plain(
        pieces
            .into_iter()
            .map(|piece| match piece {
                SealedPiece::Text(text) => text,
                SealedPiece::Secret { .. } => String::new(),
            })
            .collect(),
    ))
}

/// Looks up a dotted key in a JSON object.
pub fn lookup<'v>(settings: &'v Value, key: &str) -> Option<&'v Value> {
    key.split('.')
        .try_fold(settings, |value, segment| value.as_object()?.get(segment))
}

enum Piece<'t> {
    Text(&'t str),
    Reference(&'t str),
}

fn walk<'t>(
    text: &'t str,
    mut each: impl FnMut(Piece<'t>) -> Result<(), TemplateError>,
) -> Result<(), TemplateError> {
    let mut rest = text;
    let mut consumed = 0;
    while let Some(open) = rest.find("{{") {
        if open > 0 {
            each(Piece::Text(&rest[..open]))?;
        }
        let after = &rest[open + 2..];
        let close = after.find("}}").ok_or(TemplateError::Unclosed {
            offset: consumed + open,
        })?;
        let inner = after[..close].trim();
        if !is_dotted_key(inner) {
            return Err(TemplateError::BadReference {
                text: after[..close].to_owned(),
            });
        }
        each(Piece::Reference(inner))?;
        let advance = open + 2 + close + 2;
        consumed += advance;
        rest = &rest[advance..];
    }
    if !rest.is_empty() {
        each(Piece::Text(rest))?;
    }
    Ok(())
}

/// Whether `key` is a dotted path of `[A-Za-z0-9_-]+` segments.
pub fn is_dotted_key(key: &str) -> bool {
    !key.is_empty()
        && key.split('.').all(|segment| {
            !segment.is_empty()
                && segment
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_strings_numbers_and_nested_keys() {
        let settings = json!({"port": 8080, "name": "media", "places": {"media": "/srv/media"}});
        let out = render("{{name}} on {{ port }} at {{places.media}}", &settings).unwrap();
        assert_eq!(out, "media on 8080 at /srv/media");
    }

    #[test]
    fn names_the_unknown_key() {
        let err = render("x {{ nope.deep }}", &json!({})).unwrap_err();
        assert_eq!(err.to_string(), "no setting `nope.deep`");
    }

    #[test]
    fn a_secret_is_never_rendered() {
        let secret = crate::secret::SecretValue {
            digest: format!("sha256:{}", "0".repeat(64)),
            ciphertext: "YWdl".into(),
        };
        let settings = json!({"password": secret.to_json(), "db": {"password": secret.to_json()}});
        for text in ["{{ password }}", "{{ db }}"] {
            let err = render(text, &settings).unwrap_err();
            assert!(matches!(err, TemplateError::Secret { .. }), "{err}");
            assert!(!err.to_string().contains("YWdl"));
        }
    }

    #[test]
    fn a_files_template_leaves_its_secrets_sealed_for_its_host() {
        use crate::secret::SealedPiece;
        let secret = crate::secret::SecretValue {
            digest: format!("sha256:{}", "0".repeat(64)),
            ciphertext: "YWdl".into(),
        };
        let settings = json!({"user": "app", "password": secret.to_json()});
        assert_eq!(
            render_sealed("{{user}}:{{ password }}\n", &settings).unwrap(),
            Rendered::Sealed(vec![
                SealedPiece::Text("app:".into()),
                SealedPiece::Secret {
                    key: "password".into(),
                    value: secret
                },
                SealedPiece::Text("\n".into()),
            ])
        );
        assert_eq!(
            render_sealed("{{user}} on {{user}}", &settings).unwrap(),
            Rendered::Plain("app on app".into())
        );
    }

    #[test]
    fn refuses_malformed_templates() {
        assert_eq!(
            references("a {{ b").unwrap_err(),
            TemplateError::Unclosed { offset: 2 }
        );
        assert!(matches!(
            references("{{ a b }}").unwrap_err(),
            TemplateError::BadReference { .. }
        ));
        assert_eq!(references("{{a}}{{b.c}}").unwrap(), vec!["a", "b.c"]);
    }
}
