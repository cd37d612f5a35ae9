//! Test fixtures as text: a whole mesh (catalogue, inventory, settings layers) in one string.
//!
//! ```text
//! //- modules/media/module.toml
//! name = "media"
//! //- modules/media/files/config.toml
//! port = {{ port }}
//! //- inventory.toml
//! bus-node = "control"
//! [nodes.control]
//! [assignments]
//! media = ["control"]
//! //- settings/media/mesh.json
//! {"port": 8096}
//! //- settings/media/nodes/control.json
//! {"places": {"media": "/data/media"}}
//! ```
//!
//! Paths under `modules/<name>/` make the catalogue; `inventory.toml` and `settings/…` make the
//! inventory. A broken fixture panics with every diagnostic.

use mesh_model::inventory::{Inventory, InventoryFile, LayerScope};
use mesh_model::module::{load_catalogue, Catalogue, CatalogueSource, EntryKind};

/// Splits a fixture into `(path, text)` pairs.
pub fn files(text: &str) -> Vec<(String, String)> {
    let indent = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        let line = line.get(indent..).unwrap_or("");
        if let Some(path) = line.strip_prefix("//- ") {
            out.push((path.trim().to_owned(), String::new()));
        } else if let Some((_, body)) = out.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

/// The catalogue part of a fixture.
pub fn catalogue(text: &str) -> Catalogue {
    let mut source = CatalogueSource {
        prefix: "modules".into(),
        ..CatalogueSource::default()
    };
    for (path, body) in files(text) {
        let Some(rest) = path.strip_prefix("modules/") else {
            continue;
        };
        let (module, inner) = rest.split_once('/').expect("modules/<name>/<path>");
        source
            .modules
            .entry(module.to_owned())
            .or_default()
            .entries
            .insert(
                inner.to_owned(),
                EntryKind::File {
                    bytes: body.into_bytes(),
                    executable: false,
                },
            );
    }
    let (catalogue, diagnostics) = load_catalogue(&source);
    assert!(
        diagnostics.is_empty(),
        "fixture catalogue: {}",
        diagnostics
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
    catalogue
}

/// The inventory part of a fixture.
pub fn inventory(text: &str) -> Inventory {
    let mut inventory = Inventory::default();
    for (path, body) in files(text) {
        if path == "inventory.toml" {
            let file: InventoryFile = toml::from_str(&body).expect("fixture inventory.toml");
            inventory.file = file;
        } else if let Some(rest) = path.strip_prefix("settings/") {
            let (module, scope) = rest.split_once('/').expect("settings/<module>/...");
            let scope = match scope.strip_prefix("nodes/") {
                Some(node) => LayerScope::Node(node.trim_end_matches(".json").to_owned()),
                None => LayerScope::Mesh,
            };
            let layer = serde_json::from_str(&body).expect("fixture layer is JSON");
            inventory.layers.set(module, scope, layer);
        }
    }
    inventory
}

/// A whole mesh from one fixture.
pub fn mesh(text: &str) -> (Catalogue, Inventory) {
    (catalogue(text), inventory(text))
}
