//! Compose: a node's declaration from the catalogue and the inventory.
//!
//! Start at [`compose`]. For every module assigned to the node its settings are resolved
//! ([`resolve_settings`]: the module's defaults, then the mesh layer, then the node's layer,
//! objects merged key by key), and every resource the module defines is rendered from them.
//!
//! # Guarantees
//! - A declaration is a pure function of its inputs: the same catalogue and inventory give the
//!   same canonical bytes and so the same digest.
//! - A resource changes only when a setting it refers to (or its definition) changes; the one
//!   exception is `after`, which follows where directories are (a file that moves out of a
//!   declared directory no longer comes after it).
//! - Every problem is reported at once ([`ComposeError::Problems`]), each naming node, module
//!   and key.
//! - A file of a module that comes from a build ([`Module::archive`]) and is not a template is
//!   declared by its place in the archive and its content's digest, not its content: the
//!   declaration names the archive ([`Declaration::archives`]) and the host reads the file from
//!   it. A template is rendered here and carried. A declaration of modules that come from no
//!   build is format 1, as it always was.

mod accounts;
mod container;
mod job;
#[cfg(test)]
mod secret_tests;

pub use container::container_name;
#[cfg(test)]
pub(crate) use job::tests::JOBS as JOBS_FIXTURE;

use mesh_model::declaration::{
    path_problem, resource_id, ArchivedFile, Declaration, DirectorySpec, FileSpec, LineSpec,
    MembershipSpec, NetworkSpec, Resource, Spec,
};
use mesh_model::drift::DriftPolicy;
use mesh_model::inventory::{Inventory, LayerScope};
use mesh_model::module::{parse_mode, Catalogue, EntryKind, Module, ModuleDefinition, PLACES_KEY};
use mesh_model::template::{self, TemplateError};
use serde_json::Value;
use std::collections::BTreeMap;

/// Why a node's declaration could not be composed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ComposeError {
    /// The inventory has no such node.
    #[error("`{node}` is not a node of the mesh")]
    UnknownNode {
        /// The node asked for.
        node: String,
    },
    /// One or more modules could not be composed; every problem is listed.
    #[error("cannot compose `{node}`: {}", problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Problems {
        /// The node.
        node: String,
        /// Every problem found, in module order.
        problems: Vec<ComposeProblem>,
    },
}

/// One problem composing one module for one node.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ComposeProblem {
    /// The module is assigned to the node but is not in the catalogue (or did not validate).
    #[error("module `{module}` is assigned but not in the catalogue")]
    NotInCatalogue {
        /// The module.
        module: String,
    },
    /// A settings layer is not a JSON object.
    #[error("module `{module}`: the {scope} is not a JSON object")]
    LayerNotObject {
        /// The module.
        module: String,
        /// Which layer.
        scope: LayerScope,
    },
    /// A template (file content or a resource field) did not render.
    #[error("module `{module}`: `{key}`: {source}")]
    Template {
        /// The module.
        module: String,
        /// The definition key (`files.config.path`, `containers.app.env.PORT`, …).
        key: String,
        /// What the template engine said.
        #[source]
        source: TemplateError,
    },
    /// A file copied as it is (not a template) holds bytes that are not UTF-8 text.
    #[error(
        "module `{module}`: `{key}`: `{source_path}` is not UTF-8 text; a declared file is text"
    )]
    NotText {
        /// The module.
        module: String,
        /// The definition key (`files.<name>.source`).
        key: String,
        /// The source path inside the module directory.
        source_path: String,
    },
    /// A file's source is not a regular file of the module directory.
    #[error("module `{module}`: `{key}`: `{source_path}` is not a file of the module directory")]
    MissingSource {
        /// The module.
        module: String,
        /// The definition key (`files.<name>.source`).
        key: String,
        /// The source path inside the module directory.
        source_path: String,
    },
    /// A resolved placement is not a string.
    #[error("module `{module}`: `{key}`: a placement is a directory path, found {found}")]
    PlacementNotText {
        /// The module.
        module: String,
        /// `places.<name>`.
        key: String,
        /// The value found, as JSON.
        found: String,
    },
    /// A mode is not octal text.
    #[error("module `{module}`: `{key}`: `{mode}` is not an octal mode")]
    BadMode {
        /// The module.
        module: String,
        /// The definition key.
        key: String,
        /// The text found.
        mode: String,
    },
    /// A file rendered from a secret whose mode lets more than its owner and group read it.
    #[error(
        "module `{module}`: `{key}`: the file uses a secret, so its mode must be 0640 or \
         tighter, not {mode:04o}"
    )]
    SecretFileMode {
        /// The module.
        module: String,
        /// The definition key (`files.NAME.mode`).
        key: String,
        /// The mode declared.
        mode: u32,
    },
    /// A rendered machine path is not acceptable.
    #[error("module `{module}`: `{key}`: {problem}")]
    BadPath {
        /// The module.
        module: String,
        /// The definition key.
        key: String,
        /// What is wrong with the path.
        problem: String,
    },
    /// A rendered value is not acceptable (a port that is not one, …).
    #[error("module `{module}`: `{key}`: {problem}")]
    BadValue {
        /// The module.
        module: String,
        /// The definition key.
        key: String,
        /// What is wrong with the value.
        problem: String,
    },
    /// The composed declaration breaks a declaration rule (two resources on one path, …).
    #[error("{problem}")]
    Declaration {
        /// The rule broken, naming the resources.
        problem: String,
    },
    /// A setting the module requires is set by no layer for the node ([`unset_required`]).
    #[error("module `{module}`: the setting `{key}` is required, and no layer sets it here")]
    RequiredUnset {
        /// The module.
        module: String,
        /// The setting.
        key: String,
    },
}

/// A setting a module requires that no layer sets for a node: the node is not sent the module
/// until one does.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Unset {
    /// The module.
    pub module: String,
    /// The setting.
    pub key: String,
}

impl std::fmt::Display for Unset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` of `{}`", self.key, self.module)
    }
}

/// The settings `node`'s modules require (`required` in a module's definition) that neither the
/// mesh layer nor the node's layer sets, in module order; a module the catalogue does not hold
/// has none.
pub fn unset_required(catalogue: &Catalogue, inventory: &Inventory, node: &str) -> Vec<Unset> {
    let mut unset = Vec::new();
    for name in inventory.modules_of(node) {
        let Some(module) = catalogue.module(name) else {
            continue;
        };
        unset.extend(
            keys_unset(&module.definition, inventory, node).map(|key| Unset {
                module: name.to_owned(),
                key: key.to_owned(),
            }),
        );
    }
    unset
}

/// The keys `definition` requires that neither the mesh layer nor `node`'s layer sets (a
/// version not deployed yet, an open plan's, is asked too: `check` names them).
pub fn keys_unset<'m>(
    definition: &'m ModuleDefinition,
    inventory: &'m Inventory,
    node: &'m str,
) -> impl Iterator<Item = &'m str> + 'm {
    let name = &definition.name;
    definition
        .required
        .iter()
        .filter(move |key| {
            ![LayerScope::Mesh, LayerScope::Node(node.to_owned())]
                .iter()
                .any(|scope| {
                    inventory
                        .layers
                        .get(name, scope)
                        .and_then(|layer| layer.get(key.as_str()))
                        .is_some()
                })
        })
        .map(String::as_str)
}

/// Composes the declaration of `node`.
///
/// # Errors
/// [`ComposeError::UnknownNode`] for a node the inventory does not hold;
/// [`ComposeError::Problems`] listing every problem of every module otherwise.
pub fn compose(
    catalogue: &Catalogue,
    inventory: &Inventory,
    node: &str,
) -> Result<Declaration, ComposeError> {
    if !inventory.file.nodes.contains_key(node) {
        return Err(ComposeError::UnknownNode {
            node: node.to_owned(),
        });
    }
    let mut problems = Vec::new();
    let mut resources = Vec::new();
    let mut archives = BTreeMap::new();
    let mut drift = BTreeMap::new();
    for module_name in inventory.modules_of(node) {
        let Some(module) = catalogue.module(module_name) else {
            problems.push(ComposeProblem::NotInCatalogue {
                module: module_name.to_owned(),
            });
            continue;
        };
        // The node's own say over the module's (the rule “Drift is seen, and reported even when
        // corrected”).
        let policy = inventory
            .file
            .nodes
            .get(node)
            .and_then(|n| n.drift.get(module_name))
            .copied()
            .unwrap_or(module.definition.drift);
        if policy != DriftPolicy::Correct {
            drift.insert(module.definition.name.clone(), policy);
        }
        problems.extend(keys_unset(&module.definition, inventory, node).map(|key| {
            ComposeProblem::RequiredUnset {
                module: module_name.to_owned(),
                key: key.to_owned(),
            }
        }));
        match resolve_settings(module, inventory, node) {
            Ok(settings) => {
                let before = resources.len();
                compose_module(module, &settings, &mut resources, &mut problems);
                let archived = resources[before..]
                    .iter()
                    .any(|r| matches!(&r.spec, Spec::File(f) if f.source.is_some()));
                if let (true, Some(archive)) = (archived, &module.archive) {
                    archives.insert(module.definition.name.clone(), archive.clone());
                }
            }
            Err(problem) => problems.push(problem),
        }
    }
    if problems.is_empty() {
        add_directory_edges(&mut resources);
        let mut declaration = Declaration::with_archives(node, resources, archives);
        declaration.drift = drift;
        problems.extend(
            declaration
                .problems()
                .into_iter()
                .map(|problem| ComposeProblem::Declaration { problem }),
        );
        if problems.is_empty() {
            return Ok(declaration);
        }
    }
    Err(ComposeError::Problems {
        node: node.to_owned(),
        problems,
    })
}

/// A module's settings on `node`: its defaults (places under `places`), merged with the mesh
/// layer, then with the node's layer. Objects merge key by key; any other value replaces.
///
/// # Errors
/// [`ComposeProblem::LayerNotObject`] when a layer is not a JSON object.
pub fn resolve_settings(
    module: &Module,
    inventory: &Inventory,
    node: &str,
) -> Result<Value, ComposeProblem> {
    let name = &module.definition.name;
    let mut settings = module.definition.defaults();
    for scope in [LayerScope::Mesh, LayerScope::Node(node.to_owned())] {
        if let Some(layer) = inventory.layers.get(name, &scope) {
            if !layer.is_object() {
                return Err(ComposeProblem::LayerNotObject {
                    module: name.clone(),
                    scope,
                });
            }
            merge_into(&mut settings, layer);
        }
    }
    Ok(settings)
}

/// Deep-merges `layer` over `base`: objects key by key, anything else replaces.
pub fn merge_into(base: &mut Value, layer: &Value) {
    match (base, layer) {
        (Value::Object(base), Value::Object(layer)) => {
            for (key, value) in layer {
                match base.get_mut(key) {
                    Some(existing) => merge_into(existing, value),
                    None => {
                        base.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (base, layer) => *base = layer.clone(),
    }
}

/// Renders one module's resources, pushing them (and any problems) onto the outputs.
struct ModuleComposer<'a> {
    module: &'a Module,
    settings: &'a Value,
    problems: &'a mut Vec<ComposeProblem>,
}

impl ModuleComposer<'_> {
    fn name(&self) -> &str {
        &self.module.definition.name
    }

    fn render(&mut self, key: String, text: &str) -> String {
        match template::render(text, self.settings) {
            Ok(out) => out,
            Err(source) => {
                self.problems.push(ComposeProblem::Template {
                    module: self.name().to_owned(),
                    key,
                    source,
                });
                String::new()
            }
        }
    }

    fn mode(&mut self, key: String, text: &str) -> u32 {
        parse_mode(text).unwrap_or_else(|| {
            self.problems.push(ComposeProblem::BadMode {
                module: self.name().to_owned(),
                key,
                mode: text.to_owned(),
            });
            0
        })
    }

    fn path(&mut self, key: String, text: &str) -> String {
        let before = self.problems.len();
        let path = self.render(key.clone(), text);
        if self.problems.len() == before {
            if let Some(problem) = path_problem(&path) {
                self.problems.push(ComposeProblem::BadPath {
                    module: self.name().to_owned(),
                    key,
                    problem,
                });
            }
        }
        path
    }

    fn resource(&self, kind: &str, name: &str, after: Vec<String>, spec: Spec) -> Resource {
        let definition = &self.module.definition;
        Resource {
            id: resource_id(&definition.name, kind, name),
            module: definition.name.clone(),
            together: definition
                .together_group_of(&format!("{kind}/{name}"))
                .map(str::to_owned),
            after,
            spec,
        }
    }
}

fn compose_module(
    module: &Module,
    settings: &Value,
    resources: &mut Vec<Resource>,
    problems: &mut Vec<ComposeProblem>,
) {
    let definition = &module.definition;
    let mut c = ModuleComposer {
        module,
        settings,
        problems,
    };
    let first = resources.len();
    let mut place_paths: BTreeMap<&str, String> = BTreeMap::new();
    for (name, place) in &definition.places {
        let key = format!("{PLACES_KEY}.{name}");
        let path = match template::lookup(settings, &key) {
            Some(Value::String(path)) => {
                if let Some(problem) = path_problem(path) {
                    c.problems.push(ComposeProblem::BadPath {
                        module: c.name().to_owned(),
                        key: key.clone(),
                        problem,
                    });
                }
                path.clone()
            }
            other => {
                c.problems.push(ComposeProblem::PlacementNotText {
                    module: c.name().to_owned(),
                    key: key.clone(),
                    found: other.map_or_else(|| "nothing".to_owned(), ToString::to_string),
                });
                String::new()
            }
        };
        place_paths.insert(name, path.clone());
        let spec = Spec::Directory(DirectorySpec {
            path,
            mode: c.mode(format!("{key}.mode"), &place.mode),
            owner: c.render(format!("{key}.owner"), &place.owner),
            group: c.render(format!("{key}.group"), &place.group),
        });
        resources.push(c.resource("directory", name, Vec::new(), spec));
    }
    for (name, directory) in &definition.directories {
        let key = format!("directories.{name}");
        let spec = Spec::Directory(DirectorySpec {
            path: c.path(format!("{key}.path"), &directory.path),
            mode: c.mode(format!("{key}.mode"), &directory.mode),
            owner: c.render(format!("{key}.owner"), &directory.owner),
            group: c.render(format!("{key}.group"), &directory.group),
        });
        resources.push(c.resource("directory", name, Vec::new(), spec));
    }
    for (name, file) in &definition.files {
        let key = format!("files.{name}");
        let source_key = format!("{key}.source");
        let mut sealed = None;
        let (content, source) = match module.tree.entries.get(&file.source) {
            // A secret file is sealed in the catalogue, and opened by its host alone.
            Some(EntryKind::File { bytes, .. }) if file.secret => {
                match mesh_model::secret::SecretValue::from_file(bytes) {
                    Ok(value) => {
                        sealed = Some(vec![mesh_model::secret::SealedPiece::Secret {
                            key: key.clone(),
                            value,
                        }])
                    }
                    Err(why) => c.problems.push(ComposeProblem::BadValue {
                        module: c.name().to_owned(),
                        key: source_key,
                        problem: format!("`{}` is marked `secret = true`: {why}", file.source),
                    }),
                }
                (String::new(), None)
            }
            Some(EntryKind::File { bytes, .. }) => match std::str::from_utf8(bytes) {
                Ok(text) if file.template => match template::render_sealed(text, c.settings) {
                    Ok(template::Rendered::Plain(text)) => (text, None),
                    // A secret is put in by its host (the rule “A secret is readable only
                    // where it is used”).
                    Ok(template::Rendered::Sealed(pieces)) => {
                        sealed = Some(pieces);
                        (String::new(), None)
                    }
                    Err(source) => {
                        c.problems.push(ComposeProblem::Template {
                            module: c.name().to_owned(),
                            key: source_key,
                            source,
                        });
                        (String::new(), None)
                    }
                },
                // A file of a build reaches the host inside the build's archive.
                Ok(_) if module.archive.is_some() => (
                    String::new(),
                    Some(ArchivedFile {
                        path: file.source.clone(),
                        sha256: mesh_model::sha256_digest(bytes),
                    }),
                ),
                Ok(text) => (text.to_owned(), None),
                Err(_) => {
                    c.problems.push(ComposeProblem::NotText {
                        module: c.name().to_owned(),
                        key: source_key,
                        source_path: file.source.clone(),
                    });
                    (String::new(), None)
                }
            },
            Some(EntryKind::Directory | EntryKind::Symlink { .. } | EntryKind::Other) | None => {
                c.problems.push(ComposeProblem::MissingSource {
                    module: c.name().to_owned(),
                    key: source_key,
                    source_path: file.source.clone(),
                });
                (String::new(), None)
            }
        };
        let path = c.path(format!("{key}.path"), &file.path);
        let mode = c.mode(format!("{key}.mode"), &file.mode);
        if sealed.is_some() && mode & !0o640 != 0 {
            c.problems.push(ComposeProblem::SecretFileMode {
                module: c.name().to_owned(),
                key: format!("{key}.mode"),
                mode,
            });
        }
        let spec = Spec::File(FileSpec {
            path,
            content: (source.is_none() && sealed.is_none()).then_some(content),
            source,
            sealed,
            mode,
            owner: c.render(format!("{key}.owner"), &file.owner),
            group: c.render(format!("{key}.group"), &file.group),
        });
        resources.push(c.resource("file", name, Vec::new(), spec));
    }
    for (name, membership) in &definition.memberships {
        let key = format!("memberships.{name}");
        let spec = Spec::Membership(MembershipSpec {
            account: c.render(format!("{key}.account"), &membership.account),
            group: c.render(format!("{key}.group"), &membership.group),
        });
        resources.push(c.resource("membership", name, Vec::new(), spec));
    }
    for (name, container) in &definition.containers {
        resources.push(c.container(name, container, &place_paths));
    }
    for name in definition.networks.keys() {
        let spec = Spec::Network(NetworkSpec {
            name: container_name(c.name(), name),
        });
        resources.push(c.resource("network", name, Vec::new(), spec));
    }
    for (name, account) in &definition.accounts {
        resources.push(c.account(name, account));
    }
    for (name, job) in &definition.jobs {
        resources.push(c.job(name, job, &place_paths));
    }
    for (name, line) in &definition.lines {
        let key = format!("lines.{name}");
        let spec = Spec::Line(LineSpec {
            path: c.render(format!("{key}.path"), &line.path),
            line: c.render(format!("{key}.line"), &line.line),
            replaces: line
                .replaces
                .as_ref()
                .map(|replaces| c.render(format!("{key}.match"), replaces)),
        });
        resources.push(c.resource("line", name, Vec::new(), spec));
    }
    c.account_edges(&mut resources[first..]);
}

/// Adds, to every file and directory inside a declared directory, an `after` edge to the
/// nearest such directory (any module's).
fn add_directory_edges(resources: &mut [Resource]) {
    let directories: BTreeMap<String, String> = resources
        .iter()
        .filter_map(|r| match &r.spec {
            Spec::Directory(d) => Some((d.path.trim_end_matches('/').to_owned(), r.id.clone())),
            Spec::File(_)
            | Spec::Membership(_)
            | Spec::Container(_)
            | Spec::Network(_)
            | Spec::Account(_)
            | Spec::Job(_)
            | Spec::Line(_) => None,
        })
        .collect();
    for resource in resources.iter_mut() {
        let path = match &resource.spec {
            Spec::File(f) => f.path.as_str(),
            Spec::Directory(d) => d.path.as_str(),
            Spec::Membership(_)
            | Spec::Container(_)
            | Spec::Network(_)
            | Spec::Account(_)
            | Spec::Job(_)
            // A line keeps a file that is there already.
            | Spec::Line(_) => continue,
        };
        let mut rest = path.trim_end_matches('/');
        while let Some((parent, _)) = rest.rsplit_once('/') {
            if parent.is_empty() {
                break;
            }
            if let Some(id) = directories.get(parent) {
                if *id != resource.id && !resource.after.contains(id) {
                    resource.after.push(id.clone());
                    resource.after.sort();
                }
                break;
            }
            rest = parent;
        }
    }
}

#[cfg(test)]
mod tests;
