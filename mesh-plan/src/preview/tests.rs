//! The merge's preview names what `plan NODE --diff` names, over the book's example mesh and
//! generated changes to it.

use super::*;
use crate::fixture;
use mesh_model::module::EntryKind;
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::path::Path;

/// The book's example mesh (`book/example`): its modules but `tls`, whose key is a secret file
/// only `init` seals, and the inventory and layers without it.
fn example() -> (CatalogueSource, Inventory) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../book/example");
    let mut source = CatalogueSource {
        prefix: "catalogue/modules".into(),
        ..CatalogueSource::default()
    };
    let modules = root.join("catalogue/modules");
    for entry in std::fs::read_dir(&modules).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_str().unwrap().to_owned();
        if name == "tls" {
            continue;
        }
        let mut tree = ModuleTree::default();
        read_tree(&dir, "", &mut tree);
        source.modules.insert(name, tree);
    }
    let mut text = String::new();
    let inventory = std::fs::read_to_string(root.join("inventory.toml")).unwrap();
    text.push_str("//- inventory.toml\n");
    for line in inventory.lines().filter(|l| !l.starts_with("tls ")) {
        text.push_str(line);
        text.push('\n');
    }
    for layer in [
        "base/mesh.json",
        "base/nodes/laptop.json",
        "media/nodes/home.json",
    ] {
        let body = std::fs::read_to_string(root.join("settings").join(layer)).unwrap();
        text.push_str(&format!("//- settings/{layer}\n{body}\n"));
    }
    for layer in ["operator/mesh.json", "storage/nodes/home.json"] {
        let body = std::fs::read_to_string(root.join("settings").join(layer)).unwrap();
        text.push_str(&format!("//- settings/{layer}\n{body}\n"));
    }
    (source, fixture::inventory(&text))
}

fn read_tree(dir: &Path, prefix: &str, tree: &mut ModuleTree) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = format!("{prefix}{}", path.file_name().unwrap().to_str().unwrap());
        if path.is_dir() {
            tree.entries.insert(name.clone(), EntryKind::Directory);
            read_tree(&path, &format!("{name}/"), tree);
        } else {
            let bytes = std::fs::read(&path).unwrap();
            tree.entries.insert(
                name,
                EntryKind::File {
                    bytes,
                    executable: false,
                },
            );
        }
    }
}

/// A change to one module of the example.
#[derive(Debug, Clone)]
struct Change {
    /// A line appended to its first file under `files/` (the text of a file, or a template).
    line: Option<u8>,
    /// Files added to it, each a resource of its own.
    extra: u8,
    /// `media`'s port: its container's published port, its environment and its configuration.
    port: Option<u16>,
}

fn change() -> impl Strategy<Value = Change> {
    (
        proptest::option::of(0u8..4),
        0u8..3,
        proptest::option::of(8000u16..8004),
    )
        .prop_map(|(line, extra, port)| Change { line, extra, port })
}

/// A version of the example: some of its modules changed.
fn version() -> impl Strategy<Value = BTreeMap<String, Change>> {
    proptest::collection::btree_map(
        proptest::sample::select(vec!["backup", "base", "media", "operator", "storage"])
            .prop_map(str::to_owned),
        change(),
        0..4,
    )
}

fn file(bytes: &[u8]) -> EntryKind {
    EntryKind::File {
        bytes: bytes.to_vec(),
        executable: false,
    }
}

/// The example with `changes` made, each module's archive named by its content.
fn changed(base: &CatalogueSource, changes: &BTreeMap<String, Change>) -> CatalogueSource {
    let mut source = base.clone();
    for (module, change) in changes {
        let tree = source.modules.get_mut(module).unwrap();
        if let Some(line) = change.line {
            let first = tree
                .entries
                .keys()
                .find(|path| path.starts_with("files/") && tree.file(path).is_some())
                .cloned();
            if let Some(path) = first {
                let mut bytes = tree.file(&path).unwrap().to_vec();
                bytes.extend_from_slice(format!("# changed {line}\n").as_bytes());
                tree.entries.insert(path, file(&bytes));
            }
        }
        let mut definition = String::from_utf8(tree.file("module.toml").unwrap().to_vec()).unwrap();
        if let Some(port) = change.port.filter(|_| module == "media") {
            definition = definition.replace("\nport = 8096\n", &format!("\nport = {port}\n"));
        }
        for i in 0..change.extra {
            definition.push_str(&format!(
                "\n[files.extra-{i}]\nsource = \"files/extra-{i}\"\npath = \"/etc/mesh/extra/{module}-{i}\"\n"
            ));
            tree.entries.insert(
                format!("files/extra-{i}"),
                file(format!("extra {i}\n").as_bytes()),
            );
        }
        tree.entries
            .insert("module.toml".into(), file(definition.as_bytes()));
    }
    source.archives = source
        .modules
        .iter()
        .map(|(module, tree)| (module.clone(), archive_of(tree)))
        .collect();
    source
}

/// An archive reference named by the tree's content (as a build's digest is).
fn archive_of(tree: &ModuleTree) -> ArchiveRef {
    let mut bytes = Vec::new();
    for (path, entry) in &tree.entries {
        bytes.extend_from_slice(path.as_bytes());
        if let EntryKind::File { bytes: content, .. } = entry {
            bytes.extend_from_slice(content);
        }
    }
    ArchiveRef {
        digest: mesh_model::sha256_digest(&bytes),
        size: bytes.len() as u64,
    }
}

/// What a diff names: the resources added and removed, and each changed one with its fields.
#[derive(Debug, Default, PartialEq, Eq)]
struct Named {
    added: BTreeSet<String>,
    removed: BTreeSet<String>,
    changed: BTreeMap<String, BTreeSet<String>>,
}

impl Named {
    fn add(&mut self, diff: &DeclarationDiff) {
        self.added.extend(diff.added.iter().map(|r| r.id.clone()));
        self.removed
            .extend(diff.removed.iter().map(|r| r.id.clone()));
        for change in &diff.changed {
            self.changed
                .entry(change.id.clone())
                .or_default()
                .extend(change.fields.iter().map(|f| f.field.clone()));
        }
    }
}

fn catalogue_of(source: &CatalogueSource) -> Catalogue {
    let (catalogue, problems) = load_catalogue(source);
    assert!(problems.is_empty(), "{problems:?}");
    catalogue
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The equality asserted. `plan NODE --diff` diffs the declaration composed from what the
    /// mesh runs against what the node was last sent; the preview diffs, module by module in
    /// the plan's tier order, the declaration composed with each module at the plan's commit
    /// (over the modules before it) against what the node would hold by then. On one home
    /// they read different versions (the diff the deployed one, the preview the plan's
    /// commit), so they are compared on the same pair: every node last sent the `from`
    /// version, `to` what the mesh runs once the plan of the modules that differ is done. For
    /// every node, the resources the preview's steps name — added, removed, and changed with
    /// each field — put together, are those the diff names; and an unchanged node is named by
    /// neither.
    #[test]
    fn the_preview_names_per_node_what_plan_diff_names(from in version(), to in version()) {
        let (base, inventory) = example();
        let from = changed(&base, &from);
        let to = changed(&base, &to);
        let (from_catalogue, to_catalogue) = (catalogue_of(&from), catalogue_of(&to));
        let nodes: Vec<String> = inventory.file.nodes.keys().cloned().collect();
        let sent: BTreeMap<String, Option<Declaration>> = nodes
            .iter()
            .map(|node| (node.clone(), Some(compose(&from_catalogue, &inventory, node).unwrap())))
            .collect();
        let differing: BTreeSet<String> = to
            .modules
            .iter()
            .filter(|(module, tree)| from.modules.get(*module) != Some(tree))
            .map(|(module, _)| module.clone())
            .collect();
        let graph: BTreeMap<String, Vec<String>> = to_catalogue
            .modules
            .iter()
            .map(|(name, module)| (name.clone(), module.definition.depends.clone()))
            .collect();
        let tiers = crate::tiers(&graph, &differing).unwrap();

        let mut walk = Walk::new(from.clone(), inventory.clone(), sent.clone());
        let mut previewed: BTreeMap<String, Named> = BTreeMap::new();
        for module in tiers.tiers.iter().flatten() {
            let step = walk.step(
                module,
                to.modules[module].clone(),
                to.archives[module].clone(),
                &|declaration, _| declaration,
            );
            prop_assert!(step.valid, "{module}");
            for node in step.nodes {
                let (declaration, diff) = node.composed.unwrap().unwrap();
                previewed.entry(node.node.clone()).or_default().add(&diff);
                walk.holds(&node.node, declaration);
            }
        }
        for node in &nodes {
            let mut shown = Named::default();
            let now = compose(&to_catalogue, &inventory, node).unwrap();
            shown.add(&diff(sent[node].as_ref(), &now));
            let preview = previewed.remove(node).unwrap_or_default();
            prop_assert_eq!(&preview, &shown, "node {}", node);
        }
    }
}
