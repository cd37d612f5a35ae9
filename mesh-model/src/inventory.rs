//! The inventory: nodes, which node holds the bus, which modules each node runs, and the
//! settings layers (one mesh-wide and one per node, for each module, each replaced whole).

use crate::module::Catalogue;
use crate::selector::{Labels, Selector};
use crate::waves::RolloutPolicy;
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
    /// Its labels, which selectors choose it by: `labels = { site = "fra", role = "edge" }`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: Labels,
}

fn yes() -> bool {
    true
}

/// Nodes and assignments, as kept in `inventory.toml`.
///
/// An assignment is a list of node names (`web = ["a", "b"]`), or a selector with, if need be,
/// names beside it (`web = { select = "role=edge" }`, `web = { select = "role=edge", nodes =
/// ["a"] }`): a node added with the right labels then gets the module with no list to edit. The
/// names are kept in [`InventoryFile::assignments`] (a module assigned by a selector alone holds
/// none there), the selector in [`InventoryFile::selected`]; [`Inventory::nodes_of`] and
/// [`Inventory::modules_of`] read both.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "InventoryFileToml", into = "InventoryFileToml")]
pub struct InventoryFile {
    /// The node that holds the bus.
    pub bus_node: String,
    /// Nodes by name.
    pub nodes: BTreeMap<String, Node>,
    /// Module → the nodes it is assigned to by name (every assigned module has an entry, empty
    /// when only a selector assigns it).
    pub assignments: BTreeMap<String, BTreeSet<String>>,
    /// Module → the selector that assigns it to every node it matches, beside the names.
    pub selected: BTreeMap<String, Selector>,
    /// The fleet's default rollout (`[rollout]`): waves, budget, windows; a module's own
    /// `[rollout]` overrides it key by key.
    pub rollout: Option<RolloutPolicy>,
}

/// `inventory.toml` as written: [`InventoryFile`] is read from it and written as it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct InventoryFileToml {
    bus_node: String,
    #[serde(default)]
    nodes: BTreeMap<String, Node>,
    #[serde(default)]
    assignments: BTreeMap<String, AssignmentToml>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rollout: Option<RolloutPolicy>,
}

/// One assignment as written: a list of node names, or a table with a selector.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
enum AssignmentToml {
    Nodes(BTreeSet<String>),
    Selected(SelectedToml),
}

impl<'de> Deserialize<'de> for AssignmentToml {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = AssignmentToml;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "a list of node names, or a table `{ select = \"SELECTOR\" }` \
                     (with `nodes = [...]` beside it if need be)",
                )
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                seq: A,
            ) -> Result<Self::Value, A::Error> {
                BTreeSet::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))
                    .map(AssignmentToml::Nodes)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                SelectedToml::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(AssignmentToml::Selected)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SelectedToml {
    select: Selector,
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    nodes: BTreeSet<String>,
}

impl From<InventoryFileToml> for InventoryFile {
    fn from(toml: InventoryFileToml) -> Self {
        let mut assignments = BTreeMap::new();
        let mut selected = BTreeMap::new();
        for (module, assignment) in toml.assignments {
            let nodes = match assignment {
                AssignmentToml::Nodes(nodes) => nodes,
                AssignmentToml::Selected(SelectedToml { select, nodes }) => {
                    selected.insert(module.clone(), select);
                    nodes
                }
            };
            assignments.insert(module, nodes);
        }
        InventoryFile {
            bus_node: toml.bus_node,
            nodes: toml.nodes,
            assignments,
            selected,
            rollout: toml.rollout,
        }
    }
}

impl From<InventoryFile> for InventoryFileToml {
    fn from(file: InventoryFile) -> Self {
        let mut assignments: BTreeMap<String, AssignmentToml> = file
            .assignments
            .into_iter()
            .map(|(module, nodes)| (module, AssignmentToml::Nodes(nodes)))
            .collect();
        for (module, select) in file.selected {
            let nodes = match assignments.remove(&module) {
                Some(AssignmentToml::Nodes(nodes)) => nodes,
                Some(AssignmentToml::Selected(selected)) => selected.nodes,
                None => BTreeSet::new(),
            };
            assignments.insert(
                module,
                AssignmentToml::Selected(SelectedToml { select, nodes }),
            );
        }
        InventoryFileToml {
            bus_node: file.bus_node,
            nodes: file.nodes,
            assignments,
            rollout: file.rollout,
        }
    }
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

/// Why a node runs a module: named in its assignment, chosen by its selector, or both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AssignedBy {
    /// The assignment names the node.
    pub named: bool,
    /// The assignment's selector, when it matches the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<Selector>,
}

impl std::fmt::Display for AssignedBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.named, &self.selector) {
            (true, None) => f.write_str("by name"),
            (false, Some(selector)) => write!(f, "by selector `{selector}`"),
            (true, Some(selector)) => write!(f, "by name and by selector `{selector}`"),
            (false, None) => f.write_str("not assigned"),
        }
    }
}

/// Every assignment resolved: module → node → why ([`Inventory::resolve_assignments`]).
pub type ResolvedAssignments = BTreeMap<String, BTreeMap<String, AssignedBy>>;

impl Inventory {
    /// The labels of `node` (none for a node not in the inventory).
    pub fn labels_of(&self, node: &str) -> &Labels {
        static NONE: Labels = BTreeMap::new();
        self.file.nodes.get(node).map_or(&NONE, |n| &n.labels)
    }

    /// Every node with its labels, in order of name: what a selector is resolved against.
    pub fn node_labels(&self) -> impl Iterator<Item = (&str, &Labels)> + Clone {
        self.file
            .nodes
            .iter()
            .map(|(name, node)| (name.as_str(), &node.labels))
    }

    /// The nodes a selector chooses, in order of name (what `push --select` and `status
    /// --select` send to and show).
    ///
    /// # Errors
    /// [`UnknownLabels`](crate::selector::UnknownLabels) when it names a label no node has.
    pub fn select(
        &self,
        selector: &Selector,
    ) -> Result<BTreeSet<&str>, crate::selector::UnknownLabels> {
        crate::selector::resolve(selector, self.node_labels())
    }

    /// Whether `module` is assigned to `node`, by name or by its selector.
    pub fn assigns(&self, module: &str, node: &str) -> bool {
        self.file
            .assignments
            .get(module)
            .is_some_and(|nodes| nodes.contains(node))
            || self.file.selected.get(module).is_some_and(|selector| {
                self.file
                    .nodes
                    .get(node)
                    .is_some_and(|found| selector.matches(node, &found.labels))
            })
    }

    /// The modules assigned to `node` — by name, or by a selector its name and labels match.
    pub fn modules_of(&self, node: &str) -> BTreeSet<&str> {
        self.file
            .assignments
            .keys()
            .chain(self.file.selected.keys())
            .filter(|module| self.assigns(module, node))
            .map(String::as_str)
            .collect()
    }

    /// Every module with an assignment, by name or by selector.
    pub fn assigned_modules(&self) -> BTreeSet<&str> {
        self.file
            .assignments
            .keys()
            .chain(self.file.selected.keys())
            .map(String::as_str)
            .collect()
    }

    /// The nodes `module` is assigned to — by name, and every node of the inventory its
    /// selector matches — in order of name.
    pub fn nodes_of(&self, module: &str) -> BTreeSet<&str> {
        let mut nodes: BTreeSet<&str> = self
            .file
            .assignments
            .get(module)
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
        if let Some(selector) = self.file.selected.get(module) {
            nodes.extend(
                self.node_labels()
                    .filter(|(name, labels)| selector.matches(name, labels))
                    .map(|(name, _)| name),
            );
        }
        nodes
    }

    /// Keeps the assignments (by name and by selector) of the modules `keep` says yes to.
    pub fn retain_assignments(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.file.assignments.retain(|module, _| keep(module));
        self.file.selected.retain(|module, _| keep(module));
    }

    /// Every assignment resolved to nodes, saying for each node whether its name or a selector
    /// (which one) gave it the module — what `plan` and a preview show.
    ///
    /// # Errors
    /// Every selector that names a label no node has, with its module (never an empty set).
    pub fn resolve_assignments(
        &self,
    ) -> Result<ResolvedAssignments, Vec<(String, crate::selector::UnknownLabels)>> {
        let mut out: ResolvedAssignments = BTreeMap::new();
        let mut problems = Vec::new();
        for (module, nodes) in &self.file.assignments {
            let entry = out.entry(module.clone()).or_default();
            for node in nodes {
                entry.insert(
                    node.clone(),
                    AssignedBy {
                        named: true,
                        selector: None,
                    },
                );
            }
        }
        for (module, selector) in &self.file.selected {
            match crate::selector::resolve(selector, self.node_labels()) {
                Ok(chosen) => {
                    let entry = out.entry(module.clone()).or_default();
                    for node in chosen {
                        entry
                            .entry(node.to_owned())
                            .or_insert(AssignedBy {
                                named: false,
                                selector: None,
                            })
                            .selector = Some(selector.clone());
                    }
                }
                Err(unknown) => problems.push((module.clone(), unknown)),
            }
        }
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(problems)
        }
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
        for (module, selector) in &self.file.selected {
            let unknown = selector.unknown_labels(self.node_labels());
            if !unknown.is_empty() {
                let error = crate::selector::UnknownLabels {
                    selector: selector.to_string(),
                    unknown,
                };
                out.push(Diagnostic::new(
                    file,
                    Some(module),
                    Some(&format!("assignments.{module}.select")),
                    error.to_string(),
                ));
            }
        }
        for (node, found) in &self.file.nodes {
            for (key, value) in &found.labels {
                if !crate::selector::is_word(key) || !crate::selector::is_word(value) {
                    out.push(Diagnostic::new(
                        file,
                        None,
                        Some(&format!("nodes.{node}.labels.{key}")),
                        "a label's key and value are letters, digits, `_`, `-`, `.` and `/`",
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
                } else if !self.assigns(module, node) {
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

#[cfg(test)]
mod tests {
    use super::*;

    const FLEET: &str = r#"
        bus-node = "bus"
        [nodes.bus]
        [nodes.web-1]
        labels = { site = "fra", role = "edge" }
        [nodes.web-2]
        labels = { site = "ams", role = "edge" }
        [nodes.db-1]
        labels = { site = "fra", role = "db" }

        [assignments]
        base = ["bus", "db-1"]
        web = { select = "role=edge" }
        metrics = { select = "site=fra", nodes = ["bus"] }
    "#;

    fn inventory(text: &str) -> Inventory {
        Inventory {
            file: toml::from_str(text).unwrap(),
            layers: Layers::default(),
        }
    }

    #[test]
    fn a_node_with_the_right_labels_gets_the_modules_its_selectors_assign() {
        let mut inventory = inventory(FLEET);
        assert_eq!(
            inventory.modules_of("web-1"),
            BTreeSet::from(["metrics", "web"])
        );
        assert_eq!(
            inventory.modules_of("db-1"),
            BTreeSet::from(["base", "metrics"])
        );
        assert_eq!(
            inventory.nodes_of("web"),
            BTreeSet::from(["web-1", "web-2"])
        );
        assert_eq!(
            inventory.nodes_of("metrics"),
            BTreeSet::from(["bus", "db-1", "web-1"])
        );
        // A node added with `role = "edge"` is given `web`, with no list edited.
        inventory.file.nodes.insert(
            "web-3".into(),
            Node {
                labels: [("role".to_owned(), "edge".to_owned())].into(),
                ..Node::default()
            },
        );
        assert!(inventory.modules_of("web-3").contains("web"));
        assert!(inventory.assigns("web", "web-3"));
        let edge_outside_fra = Selector::parse("role=edge,site!=fra").unwrap();
        assert_eq!(
            inventory.select(&edge_outside_fra).unwrap(),
            BTreeSet::from(["web-2", "web-3"])
        );
        assert!(inventory
            .select(&Selector::parse("rack=r1").unwrap())
            .is_err());
    }

    #[test]
    fn resolved_assignments_say_which_selector_assigned_what() {
        let resolved = inventory(FLEET).resolve_assignments().unwrap();
        let shown: Vec<String> = resolved
            .iter()
            .flat_map(|(module, nodes)| {
                nodes
                    .iter()
                    .map(move |(node, by)| format!("{module} on {node}: {by}"))
            })
            .collect();
        assert_eq!(
            shown,
            [
                "base on bus: by name",
                "base on db-1: by name",
                "metrics on bus: by name",
                "metrics on db-1: by selector `site=fra`",
                "metrics on web-1: by selector `site=fra`",
                "web on web-1: by selector `role=edge`",
                "web on web-2: by selector `role=edge`",
            ]
        );
    }

    #[test]
    fn an_inventory_with_selectors_and_a_rollout_writes_back_as_it_reads() {
        let text = format!("{FLEET}\n[rollout]\nmax-parallel = 50\n");
        let file: InventoryFile = toml::from_str(&text).unwrap();
        let written = toml::to_string(&file).unwrap();
        assert!(written.contains("select = \"role=edge\""), "{written}");
        assert_eq!(toml::from_str::<InventoryFile>(&written).unwrap(), file);
        let json = serde_json::to_string(&file).unwrap();
        assert_eq!(serde_json::from_str::<InventoryFile>(&json).unwrap(), file);
        assert_eq!(file.rollout.unwrap().max_parallel, Some(50));
        // The lists of names alone read as before.
        assert_eq!(
            file.assignments["base"],
            BTreeSet::from(["bus".into(), "db-1".into()])
        );
        assert!(file.assignments["web"].is_empty());
    }

    #[test]
    fn a_bad_selector_or_an_unknown_label_is_refused_naming_the_assignment() {
        let error = toml::from_str::<InventoryFile>(
            "bus-node = \"a\"\n[nodes.a]\n[assignments]\nweb = { select = \"role=\" }\n",
        )
        .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("expected a label value after `=`")
                && error.to_string().contains("web = "),
            "{error}"
        );
        let error = toml::from_str::<InventoryFile>(
            "bus-node = \"a\"\n[nodes.a]\n[assignments]\nweb = { selct = \"role=edge\" }\n",
        )
        .unwrap_err();
        assert!(
            error.to_string().contains("unknown field `selct`"),
            "{error}"
        );
        let typo = inventory(&FLEET.replace("role=edge", "rle=edge"));
        let catalogue = Catalogue::default();
        let problems: Vec<String> = typo
            .validate(&catalogue)
            .into_iter()
            .filter(|d| d.key.as_deref() == Some("assignments.web.select"))
            .map(|d| d.to_string())
            .collect();
        assert_eq!(
            problems,
            ["inventory.toml: module `web`: `assignments.web.select`: selector `rle=edge` names \
              a label no node has: `rle`"]
        );
        let (module, unknown) = &typo.resolve_assignments().unwrap_err()[0];
        assert_eq!(
            (module.as_str(), unknown.unknown.clone()),
            ("web", vec!["rle".into()])
        );
    }
}
