//! The inventory: nodes, which node holds the bus, which modules each node runs, and the
//! settings layers (one mesh-wide and one per node, for each module, each replaced whole).

use crate::module::Catalogue;
use crate::Diagnostic;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The file an inventory's nodes and assignments are kept in, in a mesh home.
pub const INVENTORY_FILE: &str = "inventory.toml";

/// A machine of the mesh.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Node {
    /// The root prefix its host applies under, when not the embedded default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// Whether the node is running (a rollout's first node is the first running one by name).
    #[serde(default = "yes")]
    pub running: bool,
    /// Module → what this node's host does with its drift, over the module's own `drift`
    /// The rule “Drift is seen, and reported even when corrected”: `[nodes.laptop] drift = { media
    /// = "report" }`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub drift: BTreeMap<String, crate::drift::DriftPolicy>,
}

fn yes() -> bool {
    true
}

/// Nodes and assignments, as kept in `inventory.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct InventoryFile {
    /// The node that holds the bus.
    pub bus_node: String,
    /// Nodes by name.
    #[serde(default)]
    pub nodes: BTreeMap<String, Node>,
    /// Module → the nodes it is assigned to.
    #[serde(default)]
    pub assignments: BTreeMap<String, BTreeSet<String>>,
}

/// Which layer of a module's settings: the mesh-wide one or one node's.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "scope", content = "node")]
pub enum LayerScope {
    /// Applies to every node the module runs on.
    Mesh,
    /// Applies to one node, over the mesh layer.
    Node(String),
}

impl std::fmt::Display for LayerScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LayerScope::Mesh => f.write_str("mesh layer"),
            LayerScope::Node(node) => write!(f, "node `{node}` layer"),
        }
    }
}

/// Every settings layer: module → scope → layer (a JSON object).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Layers {
    /// module → scope → object.
    pub layers: BTreeMap<String, BTreeMap<LayerScope, Value>>,
}

impl Layers {
    /// The layer of `module` at `scope`, if one is set.
    pub fn get(&self, module: &str, scope: &LayerScope) -> Option<&Value> {
        self.layers.get(module)?.get(scope)
    }

    /// Sets (replaces whole) a layer.
    pub fn set(&mut self, module: &str, scope: LayerScope, layer: Value) {
        self.layers
            .entry(module.to_owned())
            .or_default()
            .insert(scope, layer);
    }

    /// Removes a layer, returning what it held.
    pub fn clear(&mut self, module: &str, scope: &LayerScope) -> Option<Value> {
        self.layers.get_mut(module)?.remove(scope)
    }
}

/// The whole inventory: nodes, assignments and layers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inventory {
    /// Nodes and assignments.
    pub file: InventoryFile,
    /// Settings layers.
    pub layers: Layers,
}

impl Inventory {
    /// The modules assigned to `node`, by name.
    pub fn modules_of(&self, node: &str) -> BTreeSet<&str> {
        self.file
            .assignments
            .iter()
            .filter(|(_, nodes)| nodes.contains(node))
            .map(|(module, _)| module.as_str())
            .collect()
    }

    /// Checks the inventory against a catalogue, returning every problem.
    pub fn validate(&self, catalogue: &Catalogue) -> Vec<Diagnostic> {
        let file = INVENTORY_FILE;
        let mut out = Vec::new();
        if !self.file.nodes.contains_key(&self.file.bus_node) {
            out.push(Diagnostic::new(
                file,
                None,
                Some("bus-node"),
                format!(
                    "the bus node `{}` is not among the nodes",
                    self.file.bus_node
                ),
            ));
        }
        for node in self.file.nodes.keys() {
            if !crate::module::is_valid_name(node) {
                out.push(Diagnostic::new(
                    file,
                    None,
                    Some(&format!("nodes.{node}")),
                    "a node name is [a-z0-9][a-z0-9_-]*",
                ));
            }
        }
        for (module, nodes) in &self.file.assignments {
            let key = format!("assignments.{module}");
            if catalogue.refused.contains(module) {
                // Its own diagnostics say why it is refused.
            } else if catalogue.module(module).is_none() {
                out.push(Diagnostic::new(
                    file,
                    Some(module),
                    Some(&key),
                    "assigned, but not in the catalogue",
                ));
            }
            for node in nodes {
                if !self.file.nodes.contains_key(node) {
                    out.push(Diagnostic::new(
                        file,
                        Some(module),
                        Some(&key),
                        format!("assigned to `{node}`, which is not a node"),
                    ));
                }
            }
        }
        for (node, found) in &self.file.nodes {
            for module in found.drift.keys() {
                let key = format!("nodes.{node}.drift.{module}");
                if catalogue.module(module).is_none() && !catalogue.refused.contains(module) {
                    out.push(Diagnostic::new(
                        file,
                        Some(module),
                        Some(&key),
                        "a drift policy for a module that is not in the catalogue",
                    ));
                } else if !self
                    .file
                    .assignments
                    .get(module)
                    .is_some_and(|nodes| nodes.contains(node))
                {
                    out.push(Diagnostic::new(
                        file,
                        Some(module),
                        Some(&key),
                        format!("a drift policy for a module not assigned to `{node}`"),
                    ));
                }
            }
        }
        for (module, scopes) in &self.layers.layers {
            for (scope, layer) in scopes {
                let layer_file = layer_file(module, scope);
                if catalogue.refused.contains(module) {
                    continue;
                }
                let Some(found) = catalogue.module(module) else {
                    out.push(Diagnostic::new(
                        layer_file,
                        Some(module),
                        None,
                        "settings for a module that is not in the catalogue",
                    ));
                    continue;
                };
                if let LayerScope::Node(node) = scope {
                    if !self.file.nodes.contains_key(node) {
                        out.push(Diagnostic::new(
                            layer_file.clone(),
                            Some(module),
                            None,
                            format!("settings for `{node}`, which is not a node"),
                        ));
                    }
                }
                for problem in check_layer(&found.definition, layer) {
                    out.push(Diagnostic::new(
                        layer_file.clone(),
                        Some(module),
                        Some(&problem.key),
                        problem.message,
                    ));
                }
            }
        }
        out.sort();
        out
    }
}

/// Where a layer is kept, relative to the mesh home.
pub fn layer_file(module: &str, scope: &LayerScope) -> String {
    match scope {
        LayerScope::Mesh => format!("settings/{module}/mesh.json"),
        LayerScope::Node(node) => format!("settings/{module}/nodes/{node}.json"),
    }
}

/// A problem with a settings layer's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerProblem {
    /// The dotted key concerned.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

/// Checks a layer's keys against what a module accepts: top-level keys must be settings the
/// module declares (or `places`), and `places.<name>` must name its places.
pub fn check_layer(module: &crate::module::ModuleDefinition, layer: &Value) -> Vec<LayerProblem> {
    let mut out = Vec::new();
    let Some(object) = layer.as_object() else {
        out.push(LayerProblem {
            key: String::new(),
            message: "a settings layer is a JSON object".into(),
        });
        return out;
    };
    let known = module.known_keys();
    for (key, value) in object {
        if !known.contains(key) {
            out.push(LayerProblem {
                key: key.clone(),
                message: format!(
                    "`{}` accepts no setting `{key}`; its settings are: {}",
                    module.name,
                    known.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            });
        } else if key == crate::module::PLACES_KEY {
            match value.as_object() {
                Some(places) => {
                    for (place, path) in places {
                        if !module.places.contains_key(place) {
                            out.push(LayerProblem {
                                key: format!("places.{place}"),
                                message: format!(
                                    "`{}` has no place `{place}`; its places are: {}",
                                    module.name,
                                    module.places.keys().cloned().collect::<Vec<_>>().join(", ")
                                ),
                            });
                        } else if !path.as_str().is_some_and(|p| p.starts_with('/')) {
                            out.push(LayerProblem {
                                key: format!("places.{place}"),
                                message: "a placement is an absolute path".into(),
                            });
                        }
                    }
                }
                None => out.push(LayerProblem {
                    key: key.clone(),
                    message: "`places` maps place names to directories".into(),
                }),
            }
        }
    }
    out
}
