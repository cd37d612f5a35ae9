//! The inventory as the home keeps it: whether the records hold a mesh at all, the inventory
//! read (its file parsed once while its bytes stay the same, and every settings layer) and
//! written.

use super::{Home, MOVED_FILE};
use crate::error::{bad_record, Error, NoMesh, Result};
use mesh_model::inventory::{Inventory, InventoryFile, LayerScope, Layers, INVENTORY_FILE};
use std::fs;

/// The inventory file last parsed and the bytes it was read from: read again the same, it is
/// not parsed again (a merge's every module reads it; at 10,000 nodes a parse is some 80 ms).
#[derive(Default)]
pub(super) struct ParsedInventory(Option<(Vec<u8>, InventoryFile)>);

impl std::fmt::Debug for ParsedInventory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Some(_) => "ParsedInventory(some)",
            None => "ParsedInventory(none)",
        })
    }
}

impl Home {
    /// Fails unless the records hold a mesh (made by `init`, or moved to the bus by
    /// `records import`), or when the home's records were moved to a bus and this command
    /// was not given it.
    pub fn require(&self) -> Result<()> {
        self.inventory_bytes().map(drop)
    }

    /// The inventory's bytes, read once; the errors are [`Home::require`]'s.
    fn inventory_bytes(&self) -> Result<Vec<u8>> {
        if !self.on_bus {
            let moved = self.root.join(MOVED_FILE);
            if let Ok(text) = fs::read_to_string(&moved) {
                return Err(Error::NoMesh {
                    home: self.root.display().to_string(),
                    why: NoMesh::MovedToBus(text.trim().to_owned()),
                });
            }
        }
        match self.records.get(INVENTORY_FILE)? {
            Some(bytes) => Ok(bytes),
            None if self.on_bus => Err(Error::NoMesh {
                home: self.records.name(),
                why: NoMesh::EmptyBus,
            }),
            None => Err(Error::NoMesh {
                home: self.root.display().to_string(),
                why: NoMesh::NotAHome,
            }),
        }
    }

    /// Reads the inventory: nodes, assignments and every settings layer.
    pub fn inventory(&self) -> Result<Inventory> {
        let bytes = self.inventory_bytes()?;
        let file = self.parsed_inventory(bytes)?;
        let mut layers = Layers::default();
        // One listing: `settings/<module>/mesh.json` and `settings/<module>/nodes/<node>.json`.
        for key in self.records.keys_under("settings")? {
            let parts: Vec<&str> = key.split('/').collect();
            let (module, scope) = match parts[..] {
                [_, module, "mesh.json"] => (module, LayerScope::Mesh),
                [_, module, "nodes", file] => match file.strip_suffix(".json") {
                    Some(node) => (module, LayerScope::Node(node.to_owned())),
                    None => continue,
                },
                _ => continue,
            };
            if let Some(layer) = self.get_json(&key)? {
                layers.set(module, scope, layer);
            }
        }
        Ok(Inventory { file, layers })
    }

    /// The inventory file in `bytes`: parsed, unless they are the bytes last parsed.
    fn parsed_inventory(&self, bytes: Vec<u8>) -> Result<InventoryFile> {
        let mut parsed = self.parsed.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((last, file)) = &parsed.0 {
            if *last == bytes {
                return Ok(file.clone());
            }
        }
        let location = self.records.locate(INVENTORY_FILE);
        let text =
            std::str::from_utf8(&bytes).map_err(bad_record(location.clone(), "UTF-8 text"))?;
        let file: InventoryFile =
            toml::from_str(text).map_err(bad_record(location, "a valid inventory"))?;
        parsed.0 = Some((bytes, file.clone()));
        Ok(file)
    }

    /// Writes the inventory.
    pub fn write_inventory(&self, file: &InventoryFile) -> Result<()> {
        let text = toml::to_string_pretty(file).map_err(|source| Error::Internal {
            doing: "writing the inventory".to_owned(),
            source: Some(Box::new(source)),
        })?;
        self.put(INVENTORY_FILE, text.as_bytes())
    }
}
