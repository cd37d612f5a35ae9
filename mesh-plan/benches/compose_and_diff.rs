//! Compose plus diff for 1,000 nodes × 30 modules, against the time to deserialize the same
//! inputs from JSON, in one run (the ratio must stay at or below 3).
//!
//! Run with `cargo bench -p mesh-plan --bench compose_and_diff`.

use mesh_model::declaration::Declaration;
use mesh_model::inventory::{Inventory, InventoryFile, LayerScope, Layers};
use mesh_model::module::{load_catalogue, Catalogue, CatalogueSource, EntryKind, ModuleTree};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

const NODES: usize = 1_000;
const MODULES: usize = 30;
const ROUNDS: usize = 5;

fn module_toml(i: usize) -> String {
    format!(
        r#"
name = "m{i:02}"
[settings]
port = {port}
user = "svc{i}"
level = "info"
image = "localhost/m{i:02}:1"
endpoints = {{ api = "http://localhost:{port}", web = "http://localhost:{web}" }}
[places.data]
default = "/srv/m{i:02}/data"
[places.cache]
default = "/srv/m{i:02}/cache"
owner = "{{{{ user }}}}"
[files.config]
source = "files/config.toml"
path = "{{{{ places.data }}}}/config.toml"
template = true
[files.readme]
source = "files/readme.txt"
path = "/usr/share/m{i:02}/readme.txt"
[containers.server]
image = "{{{{ image }}}}"
command = ["serve", "--port", "{{{{ port }}}}", "--level", "{{{{ level }}}}"]
env = {{ API = "{{{{ endpoints.api }}}}", WEB = "{{{{ endpoints.web }}}}", USER = "{{{{ user }}}}" }}
mounts = [{{ place = "data", at = "/data" }}, {{ place = "cache", at = "/cache" }}]
restart-on = ["config"]
[memberships.video]
account = "{{{{ user }}}}"
group = "video"
[together]
serve = ["file/config", "container/server"]
"#,
        port = 8000 + i,
        web = 9000 + i,
    )
}

fn template_text() -> String {
    let mut text = String::from("# generated\nport = {{ port }}\nlevel = \"{{ level }}\"\n");
    for line in 0..40 {
        text.push_str(&format!(
            "option_{line} = \"value {line} for {{{{ user }}}} at {{{{ endpoints.api }}}}\"\n"
        ));
    }
    text
}

fn catalogue_source() -> CatalogueSource {
    let mut source = CatalogueSource {
        prefix: "modules".into(),
        ..CatalogueSource::default()
    };
    for i in 0..MODULES {
        let mut tree = ModuleTree::default();
        let file = |text: String| EntryKind::File {
            bytes: text.into_bytes(),
            executable: false,
        };
        tree.entries
            .insert("module.toml".into(), file(module_toml(i)));
        tree.entries.insert("files".into(), EntryKind::Directory);
        tree.entries
            .insert("files/config.toml".into(), file(template_text()));
        tree.entries.insert(
            "files/readme.txt".into(),
            file("a plain file, copied as it is\n".repeat(20)),
        );
        source.modules.insert(format!("m{i:02}"), tree);
    }
    source
}

fn inventory(version: u64) -> Inventory {
    let nodes: Vec<String> = (0..NODES).map(|n| format!("node{n:04}")).collect();
    let mut file = InventoryFile {
        bus_node: nodes[0].clone(),
        ..InventoryFile::default()
    };
    for node in &nodes {
        file.nodes.insert(node.clone(), Default::default());
    }
    let mut layers = Layers::default();
    for i in 0..MODULES {
        let module = format!("m{i:02}");
        file.assignments
            .insert(module.clone(), nodes.iter().cloned().collect());
        layers.set(&module, LayerScope::Mesh, json!({"level": "warn"}));
        for (n, node) in nodes.iter().enumerate() {
            // One node in ten changes a setting between the sent and the new inventory.
            let level = if n % 10 == 0 && version > 0 {
                "debug"
            } else {
                "warn"
            };
            layers.set(
                &module,
                LayerScope::Node(node.clone()),
                json!({
                    "places": {"data": format!("/tank/{node}/m{i:02}")},
                    "level": level,
                    "endpoints": {"api": format!("http://{node}:{}", 8000 + i)}
                }),
            );
        }
    }
    Inventory { file, layers }
}

/// The inputs as JSON text: module definitions and trees, inventory, layers, sent declarations.
struct JsonInputs {
    modules: String,
    inventory_file: String,
    layers: String,
    sent: String,
}

fn to_json(catalogue: &Catalogue, inventory: &Inventory, sent: &[Declaration]) -> JsonInputs {
    let modules: BTreeMap<&String, Value> = catalogue
        .modules
        .iter()
        .map(|(name, module)| {
            let files: BTreeMap<&String, String> = module
                .tree
                .entries
                .iter()
                .filter_map(|(path, entry)| match entry {
                    EntryKind::File { bytes, .. } => {
                        Some((path, String::from_utf8(bytes.clone()).unwrap()))
                    }
                    EntryKind::Directory | EntryKind::Symlink { .. } | EntryKind::Other => None,
                })
                .collect();
            (
                name,
                json!({"definition": module.definition, "files": files}),
            )
        })
        .collect();
    let layers: BTreeMap<&String, BTreeMap<String, &Value>> = inventory
        .layers
        .layers
        .iter()
        .map(|(module, scopes)| {
            (
                module,
                scopes
                    .iter()
                    .map(|(scope, layer)| {
                        let key = match scope {
                            LayerScope::Mesh => "mesh".to_owned(),
                            LayerScope::Node(node) => node.clone(),
                        };
                        (key, layer)
                    })
                    .collect(),
            )
        })
        .collect();
    JsonInputs {
        modules: serde_json::to_string(&modules).unwrap(),
        inventory_file: serde_json::to_string(&inventory.file).unwrap(),
        layers: serde_json::to_string(&layers).unwrap(),
        sent: serde_json::to_string(sent).unwrap(),
    }
}

#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct ModuleJson {
    definition: mesh_model::module::ModuleDefinition,
    files: BTreeMap<String, String>,
}

fn deserialize(inputs: &JsonInputs) -> usize {
    let modules: BTreeMap<String, ModuleJson> = serde_json::from_str(&inputs.modules).unwrap();
    let file: InventoryFile = serde_json::from_str(&inputs.inventory_file).unwrap();
    let layers: BTreeMap<String, BTreeMap<String, Value>> =
        serde_json::from_str(&inputs.layers).unwrap();
    let sent: Vec<Declaration> = serde_json::from_str(&inputs.sent).unwrap();
    modules.len() + file.nodes.len() + layers.len() + sent.len()
}

fn compose_and_diff(catalogue: &Catalogue, inventory: &Inventory, sent: &[Declaration]) -> usize {
    let mut changed = 0;
    for old in sent {
        let new = mesh_plan::compose(catalogue, inventory, &old.node).unwrap();
        let diff = mesh_plan::diff(Some(old), &new);
        changed += diff.changed.len();
    }
    changed
}

fn best(mut run: impl FnMut() -> usize) -> (Duration, usize) {
    let mut best = Duration::MAX;
    let mut out = 0;
    for _ in 0..ROUNDS {
        let start = Instant::now();
        out = black_box(run());
        best = best.min(start.elapsed());
    }
    (best, out)
}

fn main() {
    let (catalogue, diagnostics) = load_catalogue(&catalogue_source());
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    let before = inventory(0);
    let sent: Vec<Declaration> = before
        .file
        .nodes
        .keys()
        .map(|node| mesh_plan::compose(&catalogue, &before, node).unwrap())
        .collect();
    let now = inventory(1);
    let inputs = to_json(&catalogue, &now, &sent);
    let bytes = inputs.modules.len()
        + inputs.inventory_file.len()
        + inputs.layers.len()
        + inputs.sent.len();

    let (read, _) = best(|| deserialize(&inputs));
    let (work, changed) = best(|| compose_and_diff(&catalogue, &now, &sent));
    let (compose_only, _) = best(|| {
        sent.iter()
            .map(|old| {
                mesh_plan::compose(&catalogue, &now, &old.node)
                    .unwrap()
                    .resources
                    .len()
            })
            .sum()
    });
    let ratio = work.as_secs_f64() / read.as_secs_f64();
    println!(
        "compose+diff, {NODES} nodes x {MODULES} modules ({} resources each; {changed} changed)",
        sent[0].resources.len()
    );
    println!(
        "  deserialize inputs ({:.1} MB JSON): {:>8.1} ms",
        bytes as f64 / 1e6,
        read.as_secs_f64() * 1e3
    );
    println!(
        "  compose + diff:                    {:>8.1} ms",
        work.as_secs_f64() * 1e3
    );
    println!(
        "    of which compose:                {:>8.1} ms",
        compose_only.as_secs_f64() * 1e3
    );
    println!(
        "  ratio: {ratio:.2} (target <= 3.00) {}",
        if ratio <= 3.0 { "ok" } else { "OVER" }
    );
}
