//! The newest version of a module the mesh knows, and the settings set ahead for it (the rule
//! "A setting can be set ahead of its version"): an open plan's commit that names the module,
//! else the version the nodes run. `settings set`, `set-secret`, `restore` and `rename` check a
//! layer against it; a key only that newer version accepts is kept, and waits for its plan —
//! `check`, a push and `plan` read it as waiting, not as a problem, until the version rolls out
//! (then the version the nodes run accepts it) or the plan ends without it (then it is a problem
//! again).
//!
//! Start at [`newest_definition`] and [`waiting`]. Reads the plans and git (no checkout);
//! writes nothing.

use crate::catalogue::repos;
use crate::error::{Context, Result};
use crate::home::Home;
use mesh_model::inventory::{check_layer, layer_file, Inventory, LayerScope};
use mesh_model::module::{load_catalogue, Catalogue, ModuleDefinition};
use mesh_model::Diagnostic;
use serde::Serialize;

/// The newest version of a module the mesh knows, and where it was read.
#[derive(Debug, Clone)]
pub(crate) struct Newest {
    /// Its definition.
    pub definition: ModuleDefinition,
    /// Where it was read: an open plan (`plan-2 (at 1a2b3c4d5e6f)`), or what the nodes run.
    pub from: String,
    /// The open plan it was read from; `None`: it is the version the nodes run.
    pub plan: Option<String>,
}

/// The newest version of `module` the mesh knows: the newest open plan's commit that names it,
/// else the version the nodes run (`catalogue`: the deployed builds, or the home's
/// catalogue). `None` when neither holds it.
///
/// # Errors
/// A record or a repository cannot be read.
pub(crate) fn newest_definition(
    home: &Home,
    catalogue: &Catalogue,
    module: &str,
) -> Result<Option<Newest>> {
    let records = home.plans().all()?;
    let newest_plan = records
        .iter()
        .filter(|r| r.plan.state.is_open() && r.plan.modules.iter().any(|m| m == module))
        .max_by(|a, b| (a.plan.made_at, &a.plan.id).cmp(&(b.plan.made_at, &b.plan.id)));
    if let Some(record) = newest_plan {
        let repo = home.repos().get(&record.plan.repository)?;
        let source = repos::catalogue_at(&repo.path, &record.plan.commit, &repo.modules_dir)
            .for_plan(&record.plan.id, || "reading its catalogue".to_owned())?;
        let (at_plan, _) = load_catalogue(&source);
        if let Some(found) = at_plan.module(module) {
            return Ok(Some(Newest {
                definition: found.definition.clone(),
                from: format!(
                    "{} (at {})",
                    record.plan.id,
                    crate::catalogue::builds::short_commit(&record.plan.commit)
                ),
                plan: Some(record.plan.id.clone()),
            }));
        }
    }
    Ok(catalogue.module(module).map(|found| Newest {
        definition: found.definition.clone(),
        from: "the version the nodes run".to_owned(),
        plan: None,
    }))
}

/// The newest version of `module` the mesh knows, as [`newest_definition`], which a layer is
/// checked against (`settings rename`); a module neither holds is refused, naming the
/// catalogue's modules.
///
/// # Errors
/// As [`newest_definition`]; [`crate::Error::Refused`] when `module` is not a module of the
/// catalogue.
pub(crate) fn newest_known(home: &Home, catalogue: &Catalogue, module: &str) -> Result<Newest> {
    newest_definition(home, catalogue, module)?
        .ok_or_else(|| crate::error::Error::refused(not_a_module(catalogue, module)))
}

/// What is said of `module` when the catalogue holds no such module: its modules named.
pub(crate) fn not_a_module(catalogue: &Catalogue, module: &str) -> String {
    format!(
        "`{module}` is not a module of the catalogue; its modules are: {}",
        catalogue
            .modules
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// A key a layer sets ahead: the version the nodes run does not accept it, the newest open
/// plan's does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Waiting {
    /// The module.
    pub module: String,
    /// The layer that sets it.
    pub layer: LayerScope,
    /// The key (dotted for a place: `places.media`).
    pub key: String,
    /// The plan whose version accepts it.
    pub plan: String,
    /// The nodes run no version of the module yet: the plan adds it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adds_module: bool,
}

impl std::fmt::Display for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}`, {}: `{}` waits for {} ({})",
            self.module,
            self.layer,
            self.key,
            self.plan,
            if self.adds_module {
                "it adds the module: its first send takes the setting"
            } else {
                "the version the nodes run does not accept it yet"
            }
        )
    }
}

/// The keys `layer` of `module` sets that `running` does not accept and `newest` does. A module
/// the nodes do not run yet (`running` is `None`: an open plan adds it) accepts none: every key
/// the layer sets waits for the plan.
pub(crate) fn ahead_of(
    running: Option<&ModuleDefinition>,
    newest: &Newest,
    module: &str,
    scope: &LayerScope,
    layer: &serde_json::Value,
) -> Vec<Waiting> {
    let Some(plan) = &newest.plan else {
        return Vec::new();
    };
    let refused_by_newest: Vec<String> = check_layer(&newest.definition, layer)
        .into_iter()
        .map(|p| p.key)
        .collect();
    let not_accepted: Vec<String> = match running {
        Some(running) => check_layer(running, layer)
            .into_iter()
            .map(|p| p.key)
            .collect(),
        None => keys_set(layer),
    };
    not_accepted
        .into_iter()
        .filter(|key| !key.is_empty() && !refused_by_newest.contains(key))
        .map(|key| Waiting {
            module: module.to_owned(),
            layer: scope.clone(),
            key,
            plan: plan.clone(),
            adds_module: running.is_none(),
        })
        .collect()
}

/// The keys a layer sets, as [`check_layer`] names them: each top-level key, and each place
/// under `places` as `places.<place>`.
fn keys_set(layer: &serde_json::Value) -> Vec<String> {
    let Some(object) = layer.as_object() else {
        return Vec::new();
    };
    let mut keys = Vec::new();
    for (key, value) in object {
        match value.as_object() {
            Some(places) if key == mesh_model::module::PLACES_KEY => {
                keys.extend(places.keys().map(|place| format!("places.{place}")));
            }
            Some(_) | None => keys.push(key.clone()),
        }
    }
    keys
}

/// Every key the layers set ahead of the version the nodes run (`catalogue`), each waiting
/// for the open plan whose version accepts it — every key of a module the nodes do not run yet,
/// which an open plan adds.
///
/// # Errors
/// A record or a repository cannot be read.
pub(crate) fn waiting(
    home: &Home,
    catalogue: &Catalogue,
    inventory: &Inventory,
) -> Result<Vec<Waiting>> {
    let mut out = Vec::new();
    for (module, scopes) in &inventory.layers.layers {
        let running = catalogue.module(module).map(|m| &m.definition);
        if let Some(running) = running {
            let refused = scopes
                .iter()
                .any(|(_, layer)| !check_layer(running, layer).is_empty());
            if !refused {
                continue;
            }
        }
        let Some(newest) = newest_definition(home, catalogue, module)? else {
            continue;
        };
        for (scope, layer) in scopes {
            out.extend(ahead_of(running, &newest, module, scope, layer));
        }
    }
    Ok(out)
}

/// The inventory's problems with `catalogue` ([`Inventory::validate`]) but a key set ahead:
/// that one waits, and is in the second list.
///
/// # Errors
/// A record or a repository cannot be read.
pub(crate) fn validate(
    home: &Home,
    catalogue: &Catalogue,
    inventory: &Inventory,
) -> Result<(Vec<Diagnostic>, Vec<Waiting>)> {
    let problems = inventory.validate(catalogue);
    let layer_problem = problems.iter().any(|p| p.file.starts_with("settings/"));
    if !layer_problem {
        return Ok((problems, Vec::new()));
    }
    let waiting = waiting(home, catalogue, inventory)?;
    let problems = problems
        .into_iter()
        .filter(|p| {
            !waiting.iter().any(|w| {
                p.module.as_deref() == Some(w.module.as_str())
                    && p.file == layer_file(&w.module, &w.layer)
                    // A key set ahead; or the layer of a module the nodes do not run yet, whose
                    // keys all wait for the plan that adds it.
                    && (p.key.as_deref() == Some(w.key.as_str())
                        || (p.key.is_none() && catalogue.module(&w.module).is_none()))
            })
        })
        .collect();
    Ok((problems, waiting))
}
