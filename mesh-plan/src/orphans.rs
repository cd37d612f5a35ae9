//! Orphaned settings: a key a mesh or node layer sets that a module's new version no longer
//! accepts, or accepts with another type (the rule "an orphaned setting is a removal").
//!
//! Start at [`orphaned_settings`]. A layer is kept apart from the module it configures: a
//! commit that renames `port` to `http-port` leaves `port = 9090` in a node's layer, where
//! nothing reads it, and the node quietly goes back to the default. This module names each such
//! key — module, layer, key, value — and what the node gets in its place, so a preview, `plan
//! --diff` and `check` show it before it takes effect, and a rollout can hold the nodes it
//! concerns ([`Orphans::for_node`]).
//!
//! # Guarantees
//! - Pure: the definitions and layers are values; nothing is read or written.
//! - A key is orphaned when the new version has no setting (or place) by that name, or when its
//!   value is of another JSON type than the new version's default; inside an object default,
//!   keys the default does not hold are a map's entries and are never orphaned.
//! - Every orphan of every layer is named, sorted by layer then key.

use mesh_model::inventory::{LayerScope, Layers};
use mesh_model::module::{ModuleDefinition, PLACES_KEY};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeSet;
use std::fmt;
use std::fmt::Write as _;

/// A JSON value's type, as a setting's type is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool,
    /// A number (integer or not).
    Number,
    /// Text.
    String,
    /// A list.
    Array,
    /// A table.
    Object,
}

impl Kind {
    /// The type of `value`; a secret is text.
    pub fn of(value: &Value) -> Kind {
        if mesh_model::secret::SecretValue::from_json(value).is_some() {
            return Kind::String;
        }
        match value {
            Value::Null => Kind::Null,
            Value::Bool(_) => Kind::Bool,
            Value::Number(_) => Kind::Number,
            Value::String(_) => Kind::String,
            Value::Array(_) => Kind::Array,
            Value::Object(_) => Kind::Object,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Null => "null",
            Kind::Bool => "a boolean",
            Kind::Number => "a number",
            Kind::String => "text",
            Kind::Array => "a list",
            Kind::Object => "a table",
        })
    }
}

/// Why a key is orphaned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "why", rename_all = "kebab-case")]
pub enum Why {
    /// The new version has no setting (or place) by this name.
    NotAccepted,
    /// The new version accepts the key with another type.
    OtherType {
        /// The type it accepts (its default's).
        accepts: Kind,
        /// The type the layer holds.
        found: Kind,
    },
}

/// What the node gets where the orphaned value was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "gets", rename_all = "kebab-case")]
pub enum Instead {
    /// Nothing: no setting by that name is read any more.
    Nothing,
    /// The new version's default.
    Default {
        /// The default.
        value: Value,
    },
    /// The mesh layer's value (a node layer's key of another type, over a mesh layer that
    /// holds the accepted type).
    MeshLayer {
        /// The mesh layer's value.
        value: Value,
    },
}

/// One orphaned key of one layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Orphan {
    /// The module.
    pub module: String,
    /// The layer that sets it.
    pub layer: LayerScope,
    /// The dotted key (`port`, `places.media`, `endpoints.web`).
    pub key: String,
    /// The value the layer sets.
    pub value: Value,
    /// Why it is orphaned.
    #[serde(flatten)]
    pub why: Why,
    /// What the node gets in its place.
    pub instead: Instead,
}

impl fmt::Display for Orphan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}`, {}: `{}` = {}: ",
            self.module, self.layer, self.key, self.value
        )?;
        match &self.why {
            Why::NotAccepted => f.write_str("no longer accepted")?,
            Why::OtherType { accepts, found } => {
                write!(f, "now accepted as {accepts}, not {found}")?;
            }
        }
        match &self.instead {
            Instead::Nothing => f.write_str("; nothing takes its place"),
            Instead::Default { value } => write!(f, "; the default {value} instead"),
            Instead::MeshLayer { value } => write!(f, "; the mesh layer's {value} instead"),
        }
    }
}

/// A setting the new version accepts that the version before did not, and that no layer sets:
/// where a renamed key's value would now be looked for.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct NewSetting {
    /// The key.
    pub key: String,
    /// Its default: what every node gets.
    pub default: Value,
}

/// One module's orphaned settings under a new version.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Orphans {
    /// The module.
    pub module: String,
    /// Every orphaned key, by layer (the mesh layer first) then key.
    pub orphans: Vec<Orphan>,
    /// The settings the new version adds that no layer sets (empty when the version before is
    /// not known).
    pub new_settings: Vec<NewSetting>,
    /// (node, key): a node's layer sets the key of a mesh-layer orphan, so the mesh layer's
    /// value never reached it.
    #[serde(skip)]
    shadowed: BTreeSet<(String, String)>,
}

/// The orphaned settings of `definition`'s module under its new version, over every layer of
/// `layers`; `previous` (the version the nodes run, when known) names the settings it adds.
pub fn orphaned_settings(
    previous: Option<&ModuleDefinition>,
    definition: &ModuleDefinition,
    layers: &Layers,
) -> Orphans {
    let module = &definition.name;
    let mut orphans = Vec::new();
    let scopes = layers.layers.get(module);
    let mesh = layers.get(module, &LayerScope::Mesh);
    for (scope, layer) in scopes.into_iter().flatten() {
        let Some(object) = layer.as_object() else {
            continue;
        };
        let mut found = Finder {
            module,
            scope,
            mesh: match scope {
                LayerScope::Mesh => None,
                LayerScope::Node(_) => mesh,
            },
            out: &mut orphans,
        };
        for (key, value) in object {
            if key == PLACES_KEY {
                for (place, path) in value.as_object().into_iter().flatten() {
                    if !definition.places.contains_key(place) {
                        found.not_accepted(format!("{PLACES_KEY}.{place}"), path);
                    }
                }
                continue;
            }
            match definition.settings.get(key) {
                None => found.not_accepted(key.clone(), value),
                Some(default) => found.compare(key.clone(), default, value),
            }
        }
    }
    let new_settings = match previous {
        None => Vec::new(),
        Some(previous) => definition
            .settings
            .iter()
            .filter(|(key, _)| !previous.settings.contains_key(*key))
            .filter(|(key, _)| {
                !scopes
                    .into_iter()
                    .flatten()
                    .any(|(_, layer)| layer.get(key.as_str()).is_some())
            })
            .map(|(key, default)| NewSetting {
                key: key.clone(),
                default: default.clone(),
            })
            .collect(),
    };
    orphans.sort_by(|a, b| (&a.layer, &a.key).cmp(&(&b.layer, &b.key)));
    let mut shadowed = BTreeSet::new();
    for orphan in orphans.iter().filter(|o| o.layer == LayerScope::Mesh) {
        for (scope, layer) in scopes.into_iter().flatten() {
            if let LayerScope::Node(node) = scope {
                if at_path(layer, &orphan.key).is_some() {
                    shadowed.insert((node.clone(), orphan.key.clone()));
                }
            }
        }
    }
    Orphans {
        module: module.clone(),
        orphans,
        new_settings,
        shadowed,
    }
}

/// Collects one layer's orphans.
struct Finder<'a> {
    module: &'a str,
    scope: &'a LayerScope,
    /// The mesh layer, when this is a node's layer.
    mesh: Option<&'a Value>,
    out: &'a mut Vec<Orphan>,
}

impl Finder<'_> {
    fn not_accepted(&mut self, key: String, value: &Value) {
        self.out.push(Orphan {
            module: self.module.to_owned(),
            layer: self.scope.clone(),
            key,
            value: mesh_model::secret::shown(value),
            why: Why::NotAccepted,
            instead: Instead::Nothing,
        });
    }

    /// Compares a layer's value with the default at `key`: tables key by key (only the keys
    /// the default holds), anything else by type.
    fn compare(&mut self, key: String, default: &Value, value: &Value) {
        match (default, value) {
            (Value::Object(default), Value::Object(inner_values))
                if Kind::of(value) == Kind::Object =>
            {
                for (inner, value) in inner_values {
                    if let Some(default) = default.get(inner) {
                        self.compare(format!("{key}.{inner}"), default, value);
                    }
                }
            }
            (default, value) if Kind::of(default) != Kind::of(value) => {
                let accepts = Kind::of(default);
                let below = self
                    .mesh
                    .and_then(|mesh| at_path(mesh, &key))
                    .filter(|v| Kind::of(v) == accepts);
                let instead = match below {
                    Some(value) => Instead::MeshLayer {
                        value: mesh_model::secret::shown(value),
                    },
                    None => Instead::Default {
                        value: default.clone(),
                    },
                };
                self.out.push(Orphan {
                    module: self.module.to_owned(),
                    layer: self.scope.clone(),
                    key,
                    value: mesh_model::secret::shown(value),
                    why: Why::OtherType {
                        accepts,
                        found: Kind::of(value),
                    },
                    instead,
                });
            }
            _ => {}
        }
    }
}

/// The value at a dotted path of an object.
fn at_path<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(value, |value, key| value.get(key))
}

impl Orphans {
    /// Whether nothing is orphaned.
    pub fn is_empty(&self) -> bool {
        self.orphans.is_empty()
    }

    /// The orphans that change what `node` gets: its own layer's, and the mesh layer's unless
    /// the node's layer sets that key itself (then the mesh layer's value never reached it).
    pub fn for_node(&self, node: &str) -> Vec<&Orphan> {
        self.orphans
            .iter()
            .filter(|o| match &o.layer {
                LayerScope::Node(owner) => owner == node,
                LayerScope::Mesh => !self.shadowed.contains(&(node.to_owned(), o.key.clone())),
            })
            .collect()
    }

    /// What a person reads, each line indented by `indent`:
    ///
    /// ```text
    /// `web`, node `a` layer: `port` = 9090: no longer accepted; nothing takes its place
    /// `web` now accepts `http-port` (default 8080), which no layer sets: if it is `port`'s new name, `settings rename web port http-port` keeps the value
    /// to keep a value under a new name: settings rename web OLD NEW
    /// to drop or retype a value: settings set web [--node NODE] … --replace
    /// ```
    pub fn render_text(&self, orphans: &[&Orphan], indent: &str) -> String {
        let mut out = String::new();
        if orphans.is_empty() {
            return out;
        }
        for orphan in orphans {
            let _ = writeln!(out, "{indent}{orphan}");
        }
        // The keys no longer accepted at all, where a renamed setting's old name would be.
        let gone: BTreeSet<&str> = orphans
            .iter()
            .filter(|o| o.why == Why::NotAccepted && !o.key.contains('.'))
            .map(|o| o.key.as_str())
            .collect();
        for new in &self.new_settings {
            let _ = write!(
                out,
                "{indent}`{}` now accepts `{}` (default {}), which no layer sets",
                self.module, new.key, new.default
            );
            match gone.iter().collect::<Vec<_>>().as_slice() {
                [old] => {
                    let _ = writeln!(
                        out,
                        ": if it is `{old}`'s new name, `settings rename {} {old} {}` keeps the \
                         value",
                        self.module, new.key
                    );
                }
                _ => out.push('\n'),
            }
        }
        if !gone.is_empty() {
            let _ = writeln!(
                out,
                "{indent}to keep a value under a new name: settings rename {} OLD NEW",
                self.module
            );
        }
        let _ = writeln!(
            out,
            "{indent}to drop or retype a value: settings set {} [--node NODE] … --replace",
            self.module
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn definition(text: &str) -> ModuleDefinition {
        toml::from_str(text).unwrap()
    }

    const WEB_V1: &str = "name = \"web\"\n[settings]\nport = 8080\nsize = 3\n";

    /// `web`'s layers: the mesh layer and node `a`'s, each a JSON object.
    fn layers(mesh: Option<Value>, a: Option<Value>) -> Layers {
        let mut layers = Layers::default();
        if let Some(mesh) = mesh {
            layers.set("web", LayerScope::Mesh, mesh);
        }
        if let Some(a) = a {
            layers.set("web", LayerScope::Node("a".into()), a);
        }
        layers
    }

    /// The orphans as a person reads them for node `a`, then as data.
    fn shown(orphans: &Orphans) -> String {
        format!(
            "{}\n{}",
            orphans.render_text(&orphans.for_node("a"), ""),
            serde_json::to_string_pretty(orphans).unwrap()
        )
    }

    #[test]
    fn a_renamed_setting_orphans_the_nodes_override_and_names_the_new_one() {
        let v1 = definition(WEB_V1);
        let v2 = definition("name = \"web\"\n[settings]\nhttp-port = 8080\nsize = 3\n");
        let orphans = orphaned_settings(
            Some(&v1),
            &v2,
            &layers(None, Some(json!({"port": 9090, "size": 4}))),
        );
        assert_eq!(orphans.orphans.len(), 1);
        assert_eq!(orphans.orphans[0].key, "port");
        assert_eq!(orphans.orphans[0].value, json!(9090));
        assert_eq!(orphans.orphans[0].instead, Instead::Nothing);
        insta::assert_snapshot!(shown(&orphans));
    }

    #[test]
    fn a_type_change_is_named_with_what_the_node_gets_instead() {
        let v2 = definition("name = \"web\"\n[settings]\nport = \"8080\"\nsize = 3\n");
        let orphans = orphaned_settings(
            None,
            &v2,
            &layers(Some(json!({"port": "8081"})), Some(json!({"port": 9090}))),
        );
        assert_eq!(
            orphans.orphans[0].why,
            Why::OtherType {
                accepts: Kind::String,
                found: Kind::Number
            }
        );
        assert_eq!(
            orphans.orphans[0].instead,
            Instead::MeshLayer {
                value: json!("8081")
            },
            "the mesh layer's value is of the accepted type, and is what `a` gets"
        );
        insta::assert_snapshot!(shown(&orphans));
        let no_mesh = orphaned_settings(None, &v2, &layers(None, Some(json!({"port": 9090}))));
        assert_eq!(
            no_mesh.orphans[0].instead,
            Instead::Default {
                value: json!("8080")
            }
        );
    }

    #[test]
    fn a_removed_place_and_a_nested_type_change_are_orphans_and_a_maps_new_entries_are_not() {
        let v2 = definition(
            "name = \"web\"\n[settings]\nendpoints = { web = \"http://a\" }\n\
             [places.data]\ndefault = \"/srv/data\"\n",
        );
        let orphans = orphaned_settings(
            None,
            &v2,
            &layers(
                Some(json!({"endpoints": {"web": 80, "api": "http://b"}})),
                Some(json!({"places": {"data": "/tank/data", "cache": "/fast/cache"}})),
            ),
        );
        let named: Vec<(String, &str)> = orphans
            .orphans
            .iter()
            .map(|o| (o.layer.to_string(), o.key.as_str()))
            .collect();
        assert_eq!(
            named,
            [
                ("mesh layer".to_owned(), "endpoints.web"),
                ("node `a` layer".to_owned(), "places.cache"),
            ]
        );
        insta::assert_snapshot!(shown(&orphans));
    }

    #[test]
    fn a_mesh_layer_orphan_concerns_every_node_but_one_whose_layer_sets_the_key() {
        let v2 = definition("name = \"web\"\n[settings]\nhttp-port = 8080\n");
        let mut both = layers(Some(json!({"port": 9000})), Some(json!({})));
        both.set("web", LayerScope::Node("b".into()), json!({"port": 9001}));
        let orphans = orphaned_settings(None, &v2, &both);
        let for_node = |node: &str| -> Vec<String> {
            orphans
                .for_node(node)
                .iter()
                .map(|o| format!("{} {}", o.layer, o.key))
                .collect()
        };
        assert_eq!(for_node("a"), ["mesh layer port"]);
        assert_eq!(
            for_node("c"),
            ["mesh layer port"],
            "a node with no layer of its own"
        );
        assert_eq!(
            for_node("b"),
            ["node `b` layer port"],
            "b's own value shadowed the mesh's"
        );
    }

    #[test]
    fn a_version_accepting_every_key_with_its_type_orphans_nothing() {
        let v1 = definition(WEB_V1);
        let orphans = orphaned_settings(
            Some(&v1),
            &v1,
            &layers(Some(json!({"size": 5})), Some(json!({"port": 9090}))),
        );
        assert!(orphans.is_empty());
        assert!(orphans.new_settings.is_empty());
        assert_eq!(orphans.render_text(&orphans.for_node("a"), ""), "");
    }
}
