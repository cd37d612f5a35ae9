//! What replacing a settings layer does: keys added, changed and removed, and whether the set
//! may go ahead (the rule “A settings layer is read before it is replaced”).
//!
//! Start at [`settings_change`]. A layer is replaced whole; this module says what the
//! replacement adds, changes and removes, by dotted path (nested objects compared key by key),
//! and refuses a replacement that removes anything unless the person said `--replace`.
//! [`SettingsChange::render_text`] is the answer a person reads; the value itself serializes for
//! `--output json`. A secret is one value, compared by its digest and shown as
//! `<secret sha256:…>`, never its ciphertext (the rule “A secret is readable only where it is
//! used”).

use mesh_model::secret::{shown, SecretValue};
use serde::Serialize;
use serde_json::{Map, Value};
use std::fmt::Write as _;

/// A key the new layer adds.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct KeyAdded {
    /// The dotted path.
    pub key: String,
    /// Its value in the new layer.
    pub value: Value,
}

/// A key both layers hold with different values.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct KeyChanged {
    /// The dotted path.
    pub key: String,
    /// Its value in the old layer.
    pub old: Value,
    /// Its value in the new layer.
    pub new: Value,
}

/// A key the new layer no longer holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct KeyRemoved {
    /// The dotted path.
    pub key: String,
    /// Its value in the old layer.
    pub old: Value,
}

/// Whether a settings set may go ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SettingsDecision {
    /// Nothing would differ: the layer is the same.
    Unchanged,
    /// Keys are only added or changed: the set goes ahead, nothing needed.
    Set,
    /// Keys are removed and `--replace` says that is meant: the set goes ahead.
    Replace,
    /// Keys would be removed without `--replace`: the set is refused and nothing changes.
    Refused,
}

impl SettingsDecision {
    /// Whether the new layer is to be stored.
    pub fn goes_ahead(self) -> bool {
        match self {
            SettingsDecision::Set | SettingsDecision::Replace => true,
            SettingsDecision::Unchanged | SettingsDecision::Refused => false,
        }
    }
}

/// What replacing a layer does, and the decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct SettingsChange {
    /// Whether there was a layer before.
    pub had_layer: bool,
    /// Keys added, sorted by path.
    pub added: Vec<KeyAdded>,
    /// Keys changed, sorted by path.
    pub changed: Vec<KeyChanged>,
    /// Keys removed, sorted by path.
    pub removed: Vec<KeyRemoved>,
    /// Whether the set goes ahead.
    pub decision: SettingsDecision,
}

/// Compares the layer a set replaces (`None` when there is none) with the new one.
///
/// Objects are compared key by key, to any depth; any other value (a string, a number, an
/// array, `null`) is compared whole, and a key whose value turns from an object into something
/// else (or back) is *changed* at that key. A new layer that is not an object is compared the
/// same way as a value at the empty path.
///
/// # Guarantees
/// [`SettingsDecision::Refused`] whenever anything is removed and `replace` is false; a set that
/// only adds or changes keys is never refused.
pub fn settings_change(old: Option<&Value>, new: &Value, replace: bool) -> SettingsChange {
    let mut change = SettingsChange {
        had_layer: old.is_some(),
        added: Vec::new(),
        changed: Vec::new(),
        removed: Vec::new(),
        decision: SettingsDecision::Unchanged,
    };
    let empty = Value::Object(Map::new());
    compare("", old.unwrap_or(&empty), new, &mut change);
    change.decision = if !change.removed.is_empty() {
        if replace {
            SettingsDecision::Replace
        } else {
            SettingsDecision::Refused
        }
    } else if change.added.is_empty() && change.changed.is_empty() {
        SettingsDecision::Unchanged
    } else {
        SettingsDecision::Set
    };
    change
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

fn compare(path: &str, old: &Value, new: &Value, out: &mut SettingsChange) {
    match (old, new) {
        // A secret is one value, the same when its digest is (each set encrypts anew).
        (old, new) if is_secret(old) || is_secret(new) => {
            if secret_or_value(old) != secret_or_value(new) {
                out.changed.push(KeyChanged {
                    key: path.to_owned(),
                    old: shown(old),
                    new: shown(new),
                });
            }
        }
        (Value::Object(old), Value::Object(new)) => {
            for (key, old_value) in old {
                let key_path = join(path, key);
                match new.get(key) {
                    Some(new_value) => compare(&key_path, old_value, new_value, out),
                    None => removed(&key_path, old_value, out),
                }
            }
            for (key, new_value) in new {
                if !old.contains_key(key) {
                    added(&join(path, key), new_value, out);
                }
            }
        }
        (old, new) => {
            if old != new {
                out.changed.push(KeyChanged {
                    key: path.to_owned(),
                    old: old.clone(),
                    new: new.clone(),
                });
            }
        }
    }
    if path.is_empty() {
        out.added.sort_by(|a, b| a.key.cmp(&b.key));
        out.changed.sort_by(|a, b| a.key.cmp(&b.key));
        out.removed.sort_by(|a, b| a.key.cmp(&b.key));
    }
}

fn is_secret(value: &Value) -> bool {
    SecretValue::from_json(value).is_some()
}

/// A secret compares by its digest, anything else whole.
fn secret_or_value(value: &Value) -> Value {
    match SecretValue::from_json(value) {
        Some(Ok(secret)) => Value::String(secret.to_string()),
        Some(Err(_)) | None => value.clone(),
    }
}

/// A removed object names every leaf key it held (so a person sees each dropped setting).
fn removed(path: &str, old: &Value, out: &mut SettingsChange) {
    match old {
        Value::Object(object) if !object.is_empty() && !is_secret(old) => {
            for (key, value) in object {
                removed(&join(path, key), value, out);
            }
        }
        other => out.removed.push(KeyRemoved {
            key: path.to_owned(),
            old: shown(other),
        }),
    }
}

/// An added object names every leaf key it brings.
fn added(path: &str, new: &Value, out: &mut SettingsChange) {
    match new {
        Value::Object(object) if !object.is_empty() && !is_secret(new) => {
            for (key, value) in object {
                added(&join(path, key), value, out);
            }
        }
        other => out.added.push(KeyAdded {
            key: path.to_owned(),
            value: shown(other),
        }),
    }
}

impl SettingsChange {
    /// The dotted paths removed.
    pub fn removed_keys(&self) -> Vec<&str> {
        self.removed.iter().map(|k| k.key.as_str()).collect()
    }

    /// The answer a person reads, e.g. for `settings set media --node home …`:
    ///
    /// ```text
    /// media, node home: refused, nothing changed: the new layer would remove 1 key
    ///   ~ places.previews  "/tank/previews" -> "/fast/previews"
    ///   - endpoints.api    (was "http://home:8096")
    /// 0 added, 1 changed, 1 removed
    /// a layer is replaced whole: include the removed keys in the new layer, or say --replace …
    /// ```
    ///
    /// `what` names the layer (`media, node home`).
    pub fn render_text(&self, what: &str) -> String {
        let mut out = String::new();
        let plural = |n: usize| if n == 1 { "key" } else { "keys" };
        match self.decision {
            SettingsDecision::Unchanged => {
                let _ = writeln!(out, "{what}: unchanged (the new layer is the same)");
                return out;
            }
            SettingsDecision::Set => {
                let _ = writeln!(out, "{what}: set");
            }
            SettingsDecision::Replace => {
                let _ = writeln!(
                    out,
                    "{what}: replaced; {} {} removed (--replace)",
                    self.removed.len(),
                    plural(self.removed.len())
                );
            }
            SettingsDecision::Refused => {
                let _ = writeln!(
                    out,
                    "{what}: refused, nothing changed: the new layer would remove {} {}",
                    self.removed.len(),
                    plural(self.removed.len())
                );
            }
        }
        let width = self
            .added
            .iter()
            .map(|k| k.key.len())
            .chain(self.changed.iter().map(|k| k.key.len()))
            .chain(self.removed.iter().map(|k| k.key.len()))
            .max()
            .unwrap_or(0);
        for key in &self.added {
            let _ = writeln!(out, "  + {:width$}  {}", key.key, key.value);
        }
        for key in &self.changed {
            let _ = writeln!(out, "  ~ {:width$}  {} -> {}", key.key, key.old, key.new);
        }
        for key in &self.removed {
            let _ = writeln!(out, "  - {:width$}  (was {})", key.key, key.old);
        }
        let _ = writeln!(
            out,
            "{} added, {} changed, {} removed",
            self.added.len(),
            self.changed.len(),
            self.removed.len()
        );
        if self.decision == SettingsDecision::Refused {
            let _ = writeln!(
                out,
                "a layer is replaced whole: include the removed keys in the new layer, or say \
                 --replace if removing them is meant"
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compares two layers (JSON text; `old` empty for none) and shows the text and the data.
    fn check(old: &str, new: &str, replace: bool) -> String {
        let old: Option<Value> =
            (!old.trim().is_empty()).then(|| serde_json::from_str(old).unwrap());
        let new: Value = serde_json::from_str(new).unwrap();
        let change = settings_change(old.as_ref(), &new, replace);
        format!(
            "{}\n{}",
            change.render_text("media, node home"),
            serde_json::to_string_pretty(&change).unwrap()
        )
    }

    #[test]
    fn a_set_that_only_adds_or_changes_goes_ahead() {
        insta::assert_snapshot!(check(
            r#"{"port": 8096, "endpoints": {"api": "http://a"}}"#,
            r#"{"port": 9000, "endpoints": {"api": "http://a", "web": "http://b"}, "user": "m"}"#,
            false,
        ));
    }

    #[test]
    fn a_first_layer_only_adds() {
        insta::assert_snapshot!(check("", r#"{"places": {"media": "/srv/media"}}"#, false));
    }

    #[test]
    fn the_same_layer_is_unchanged() {
        let change = settings_change(
            Some(&serde_json::json!({"a": 1})),
            &serde_json::json!({"a": 1}),
            false,
        );
        assert_eq!(change.decision, SettingsDecision::Unchanged);
        assert!(!change.decision.goes_ahead());
    }

    #[test]
    fn a_set_dropping_a_key_is_refused_and_with_replace_names_it() {
        let old = r#"{"port": 8096, "user": "media"}"#;
        let new = r#"{"port": 8096}"#;
        insta::assert_snapshot!("refused", check(old, new, false));
        insta::assert_snapshot!("replaced", check(old, new, true));
    }

    #[test]
    fn a_value_turning_into_an_object_is_a_change_at_its_key() {
        insta::assert_snapshot!(check(
            r#"{"endpoints": "http://a"}"#,
            r#"{"endpoints": {"api": "http://a"}}"#,
            false
        ));
    }

    /// The incident behind “A settings layer is read before it is replaced”: one placement was set
    /// for one module on one machine; the layer is replaced whole, and placements, media accesses,
    /// an exposure, endpoints and the account's ids were silently dropped. The set must be refused
    /// naming every dropped key.
    #[test]
    fn setting_one_placement_over_a_full_node_layer_is_refused_naming_every_dropped_key() {
        let node_layer = r#"{
            "places": {"config": "/tank/media/config", "cache": "/fast/media/cache",
                       "transcodes": "/fast/media/transcodes", "previews": "/tank/media/previews"},
            "accesses": {"movies": "/tank/movies", "shows": "/tank/shows", "music": "/tank/music",
                         "photos": "/tank/photos", "books": "/tank/books", "audiobooks": "/tank/audiobooks",
                         "podcasts": "/tank/podcasts", "home-videos": "/tank/home-videos"},
            "exposure": {"public": true, "hostname": "media.example.net"},
            "endpoints": {"api": "http://home:8096", "web": "http://home:80",
                          "metrics": "http://home:9100", "events": "nats://control:4222"},
            "account": {"uid": 1500, "gid": 1500}
        }"#;
        let one_placement = r#"{"places": {"previews": "/fast/media/previews"}}"#;
        let text = check(node_layer, one_placement, false);
        let change = settings_change(
            Some(&serde_json::from_str(node_layer).unwrap()),
            &serde_json::from_str(one_placement).unwrap(),
            false,
        );
        assert_eq!(change.decision, SettingsDecision::Refused);
        assert_eq!(change.removed.len(), 3 + 8 + 2 + 4 + 2);
        insta::assert_snapshot!(text);
    }

    fn secret(digest: char, ciphertext: &str) -> Value {
        SecretValue {
            digest: format!("sha256:{}", digest.to_string().repeat(64)),
            ciphertext: ciphertext.into(),
        }
        .to_json()
    }

    #[test]
    fn a_secret_is_one_value_compared_by_its_digest_and_shown_without_its_ciphertext() {
        let old = serde_json::json!({"port": 1, "password": secret('a', "Y2lwaGVyLW9uZQ==")});
        // Set again to the same value: a new ciphertext, the same digest — nothing changes.
        let same = serde_json::json!({"port": 1, "password": secret('a', "Y2lwaGVyLXR3bw==")});
        assert_eq!(
            settings_change(Some(&old), &same, false).decision,
            SettingsDecision::Unchanged
        );
        let changed = serde_json::json!({"port": 1, "password": secret('b', "Y2lwaGVyLXR3bw==")});
        let added = serde_json::json!({"port": 1, "password": secret('a', "x"), "token": secret('c', "Y2lwaGVyLXRocmVl")});
        let mut text = String::new();
        for (old, new, replace) in [
            (Some(&old), &changed, false),
            (Some(&old), &added, false),
            (Some(&old), &serde_json::json!({"port": 1}), true),
        ] {
            let change = settings_change(old, new, replace);
            let shown = format!(
                "{}\n{}\n",
                change.render_text("db, mesh layer"),
                serde_json::to_string(&change).unwrap()
            );
            assert!(!shown.contains("Y2lw"), "{shown}");
            text.push_str(&shown);
        }
        assert!(text.contains(&format!("<secret sha256:{}>", "b".repeat(64))));
        insta::assert_snapshot!(text);
    }
}
