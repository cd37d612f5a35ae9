//! The mesh home: where the embedded controller keeps the inventory, the catalogue, settings
//! and their history, what it sent each node and what each node reported.
//!
//! ```text
//! <home>/inventory.toml                       nodes, bus node, assignments
//! <home>/catalogue/modules/<module>/...       the catalogue
//! <home>/settings/<module>/mesh.json          the mesh layer of a module's settings
//! <home>/settings/<module>/nodes/<node>.json  a node's layer
//! <home>/history/settings/<module>/<scope>/<revision>.json   every layer replaced
//! <home>/sent/<node>.json                     the whole declaration last sent to a node
//! <home>/reports/<node>.json                  the node's last report
//! <home>/roots/<node>/                        the node's sandbox root (embedded default)
//! <home>/state/<node>/                        the node's host state directory
//! <home>/repos/<name>.json                    a registered catalogue repository ([`crate::repos`])
//! <home>/plans/<id>.json                      a plan and the work behind it ([`crate::plans`])
//! <home>/plans/.lock                          held while planning or driving plans
//! <home>/deployed/<module>.json               the build a finished rollout made current
//! <home>/store/oci/                           the default archive store (OCI image layout)
//! <home>/store/modules/<module>.json          every build of a module (mesh-store's records)
//! ```
//!
//! Every write is atomic (temp file, fsync, rename).

use anyhow::{bail, Context, Result};
use mesh_model::declaration::Declaration;
use mesh_model::inventory::{
    layer_file, Inventory, InventoryFile, LayerScope, Layers, INVENTORY_FILE,
};
use mesh_model::module::{load_catalogue, Catalogue};
use mesh_model::report::Report;
use mesh_model::Diagnostic;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A mesh home directory.
#[derive(Debug, Clone)]
pub struct Home {
    root: PathBuf,
}

/// The format version of a settings history record.
pub const HISTORY_FORMAT: u32 = 1;

/// One replaced settings layer, as kept in the history (disk format, versioned).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct HistoryRecord {
    /// Format version.
    pub format: u32,
    /// The revision number (1, 2, …) within this layer's history.
    pub revision: u64,
    /// When the layer was replaced (seconds since the epoch).
    pub replaced_at: u64,
    /// The command that replaced it.
    pub command: String,
    /// The layer as it was before (None: there was no layer).
    pub layer: Option<Value>,
}

impl Home {
    /// The home at `root` (not checked).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Home { root: root.into() }
    }

    /// The home directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Fails unless the home was made by `init`.
    pub fn require(&self) -> Result<()> {
        if !self.root.join(INVENTORY_FILE).is_file() {
            bail!(
                "{} is not a mesh home (no {INVENTORY_FILE}); make one with `mesh-controller --home {} init --example`",
                self.root.display(),
                self.root.display()
            );
        }
        Ok(())
    }

    /// The catalogue's modules directory.
    pub fn modules_dir(&self) -> PathBuf {
        self.root.join("catalogue/modules")
    }

    /// Reads and validates the catalogue: modules that are sound, and every problem.
    pub fn catalogue(&self) -> Result<(Catalogue, Vec<Diagnostic>)> {
        let dir = self.modules_dir();
        let source = mesh_store::tree::read_catalogue(&dir, "catalogue/modules")
            .with_context(|| format!("reading the catalogue at {}", dir.display()))?;
        Ok(load_catalogue(&source))
    }

    /// Reads the inventory: nodes, assignments and every settings layer.
    pub fn inventory(&self) -> Result<Inventory> {
        self.require()?;
        let path = self.root.join(INVENTORY_FILE);
        let text =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let file: InventoryFile = toml::from_str(&text)
            .with_context(|| format!("{} is not a valid inventory", path.display()))?;
        let mut layers = Layers::default();
        let settings = self.root.join("settings");
        if settings.is_dir() {
            for module in sorted_entries(&settings)? {
                let name = file_name(&module)?;
                let mesh = module.join("mesh.json");
                if mesh.is_file() {
                    layers.set(&name, LayerScope::Mesh, read_json(&mesh)?);
                }
                let nodes = module.join("nodes");
                if nodes.is_dir() {
                    for node_file in sorted_entries(&nodes)? {
                        let node_name = file_name(&node_file)?;
                        let Some(node_name) = node_name.strip_suffix(".json") else {
                            continue;
                        };
                        layers.set(
                            &name,
                            LayerScope::Node(node_name.to_owned()),
                            read_json(&node_file)?,
                        );
                    }
                }
            }
        }
        Ok(Inventory { file, layers })
    }

    /// Writes the inventory file.
    pub fn write_inventory(&self, file: &InventoryFile) -> Result<()> {
        let text = toml::to_string_pretty(file).context("writing the inventory")?;
        write_atomic(&self.root.join(INVENTORY_FILE), text.as_bytes())
    }

    /// Where a layer is kept.
    pub fn layer_path(&self, module: &str, scope: &LayerScope) -> PathBuf {
        self.root.join(layer_file(module, scope))
    }

    /// Reads one layer, if set.
    pub fn layer(&self, module: &str, scope: &LayerScope) -> Result<Option<Value>> {
        let path = self.layer_path(module, scope);
        if path.is_file() {
            Ok(Some(read_json(&path)?))
        } else {
            Ok(None)
        }
    }

    /// Replaces a layer (or removes it with `None`), keeping the layer it replaced in the
    /// history first.
    pub fn replace_layer(
        &self,
        module: &str,
        scope: &LayerScope,
        new: Option<&Value>,
        command: &str,
        now: u64,
    ) -> Result<HistoryRecord> {
        let old = self.layer(module, scope)?;
        let history = self.history(module, scope)?;
        let record = HistoryRecord {
            format: HISTORY_FORMAT,
            revision: history.last().map_or(1, |r| r.revision + 1),
            replaced_at: now,
            command: command.to_owned(),
            layer: old,
        };
        let dir = self.history_dir(module, scope);
        write_atomic(
            &dir.join(format!("{:06}.json", record.revision)),
            &serde_json::to_vec_pretty(&record)?,
        )?;
        let path = self.layer_path(module, scope);
        match new {
            Some(layer) => write_atomic(&path, &serde_json::to_vec_pretty(layer)?)?,
            None => {
                if path.exists() {
                    fs::remove_file(&path)
                        .with_context(|| format!("removing {}", path.display()))?;
                }
            }
        }
        Ok(record)
    }

    fn history_dir(&self, module: &str, scope: &LayerScope) -> PathBuf {
        let scope_dir = match scope {
            LayerScope::Mesh => "mesh".to_owned(),
            LayerScope::Node(node) => format!("nodes/{node}"),
        };
        self.root
            .join("history/settings")
            .join(module)
            .join(scope_dir)
    }

    /// Every replaced layer, oldest first.
    pub fn history(&self, module: &str, scope: &LayerScope) -> Result<Vec<HistoryRecord>> {
        let dir = self.history_dir(module, scope);
        if !dir.is_dir() {
            return Ok(Vec::new());
        }
        let mut records = Vec::new();
        for path in sorted_entries(&dir)? {
            if path.extension().is_some_and(|e| e == "json") {
                let record: HistoryRecord = serde_json::from_value(read_json(&path)?)
                    .with_context(|| format!("{} is not a history record", path.display()))?;
                records.push(record);
            }
        }
        records.sort_by_key(|r| r.revision);
        Ok(records)
    }

    /// The declaration last sent to `node`.
    pub fn sent(&self, node: &str) -> Result<Option<Declaration>> {
        let path = self.root.join("sent").join(format!("{node}.json"));
        if !path.is_file() {
            return Ok(None);
        }
        let bytes = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        Declaration::from_json(&bytes)
            .map(Some)
            .with_context(|| format!("{} (what was sent to `{node}`)", path.display()))
    }

    /// Records what was sent to `node`.
    pub fn record_sent(&self, declaration: &Declaration) -> Result<()> {
        let path = self
            .root
            .join("sent")
            .join(format!("{}.json", declaration.node));
        write_atomic(&path, &declaration.canonical_json())
    }

    /// The last report heard from `node`.
    pub fn report(&self, node: &str) -> Result<Option<Report>> {
        let path = self.root.join("reports").join(format!("{node}.json"));
        if !path.is_file() {
            return Ok(None);
        }
        let bytes = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        Report::from_json(&bytes)
            .map(Some)
            .with_context(|| format!("{} (the last report of `{node}`)", path.display()))
    }

    /// Records a node's report.
    pub fn record_report(&self, report: &Report) -> Result<()> {
        let path = self
            .root
            .join("reports")
            .join(format!("{}.json", report.node));
        write_atomic(&path, &serde_json::to_vec_pretty(report)?)
    }

    /// The root a node's host applies under.
    pub fn node_root(&self, node: &str, inventory: &Inventory) -> PathBuf {
        match inventory.file.nodes.get(node).and_then(|n| n.root.as_ref()) {
            Some(root) => self.root.join(root),
            None => self.root.join("roots").join(node),
        }
    }

    /// A node's host state directory.
    pub fn node_state_dir(&self, node: &str) -> PathBuf {
        self.root.join("state").join(node)
    }
}

fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut entries = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<Vec<_>>>()
        .with_context(|| format!("reading {}", dir.display()))?;
    entries.sort();
    Ok(entries)
}

fn file_name(path: &Path) -> Result<String> {
    path.file_name()
        .and_then(|n| n.to_str())
        .map(str::to_owned)
        .with_context(|| format!("{} has a name that is not UTF-8", path.display()))
}

/// The names of the `*.json` files in `dir`, without the extension, sorted (none when `dir`
/// does not exist).
pub fn json_stems(dir: &Path) -> Result<Vec<String>> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut names: Vec<String> = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .map(str::to_owned)
        })
        .collect();
    names.sort();
    Ok(names)
}

/// Reads one of the controller's versioned records: JSON whose `format` must be `expected`.
pub fn read_record<T: serde::de::DeserializeOwned>(
    path: &Path,
    what: &str,
    expected: u32,
) -> Result<T> {
    let value = read_json(path)?;
    match value.get("format").and_then(Value::as_u64) {
        Some(found) if found == u64::from(expected) => {}
        found => bail!(
            "{} has format {}, this build reads format {expected}",
            path.display(),
            found.map_or("none".to_owned(), |f| f.to_string())
        ),
    }
    serde_json::from_value(value).with_context(|| format!("{} is not {what}", path.display()))
}

/// Reads a JSON file, naming it in any error.
pub fn read_json(path: &Path) -> Result<Value> {
    let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("{} is not valid JSON", path.display()))
}

/// Writes a file atomically: a temporary file beside it, fsync, rename, fsync the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .with_context(|| format!("{} has no parent directory", path.display()))?;
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    let mut file = fs::File::create(&tmp).with_context(|| format!("writing {}", tmp.display()))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("renaming into {}", path.display()))?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))?;
    Ok(())
}
