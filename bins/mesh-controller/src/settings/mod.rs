//! `settings show | set | clear | restore`: reading and replacing settings layers, with every
//! replaced layer kept (the rule “A settings layer is read before it is replaced”).

pub(crate) mod orphans;

pub use orphans::{in_open_plans, ComingOrphans};

use crate::error::{Error, Result};
use crate::home::{HistoryRecord, Home, LayerChange};
use mesh_model::inventory::{check_layer, LayerScope};
use mesh_model::module::{Catalogue, ModuleDefinition};
use mesh_model::secret::shown;
use mesh_plan::{settings_change, SettingsChange, SettingsDecision};
use serde::Serialize;
use serde_json::Value;

/// What settings calls work on: the home, the catalogue (what is deployed), and the command
/// that asks (kept in the history beside every layer it replaces).
pub struct On<'a> {
    /// The mesh home.
    pub home: &'a Home,
    /// The catalogue modules are checked against.
    pub catalogue: &'a Catalogue,
    /// The command as a person would retype it (`mesh-controller settings set web …`).
    pub command: &'a str,
}

/// The scope a `--node` option names, checked against the inventory and the catalogue (what is
/// deployed, [`crate::catalogue::builds::effective_catalogue`]).
fn scope(
    home: &Home,
    catalogue: &Catalogue,
    module: &str,
    node: Option<&str>,
) -> Result<LayerScope> {
    let inventory = home.inventory()?;
    // A module an open plan adds is known before its first rollout: its settings (a secret
    // above all) can be set before its first send.
    if catalogue.module(module).is_none()
        && crate::catalogue::newest::newest_definition(home, catalogue, module)?.is_none()
    {
        return Err(Error::invalid(crate::catalogue::newest::not_a_module(
            catalogue, module,
        )));
    }
    match node {
        None => Ok(LayerScope::Mesh),
        Some(node) if inventory.file.nodes.contains_key(node) => {
            Ok(LayerScope::Node(node.to_owned()))
        }
        Some(node) => Err(Error::UnknownNode {
            node: node.to_owned(),
            known: Vec::new(),
        }),
    }
}

/// "web, mesh layer" or "web, node home": a layer as a person names it.
pub fn describe(module: &str, scope: &LayerScope) -> String {
    match scope {
        LayerScope::Mesh => format!("{module}, mesh layer"),
        LayerScope::Node(node) => format!("{module}, node {node}"),
    }
}

/// A layer as `settings show` reads it.
#[derive(Debug, Clone, Serialize)]
pub struct Shown {
    /// The module.
    pub module: String,
    /// The node whose layer it is (`None`: the mesh layer).
    pub node: Option<String>,
    /// The layer, if set.
    pub layer: Option<Value>,
    /// With `history`: every layer it replaced, oldest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<HistoryRecord>>,
    /// The keys it sets ahead of the version the nodes run, each waiting for the open plan
    /// whose version accepts it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<crate::catalogue::newest::Waiting>,
}

impl Shown {
    /// The layer's scope.
    pub fn scope(&self) -> LayerScope {
        match &self.node {
            Some(node) => LayerScope::Node(node.clone()),
            None => LayerScope::Mesh,
        }
    }
}

/// Reads a layer (and with `history` every layer it replaced).
///
/// # Errors
/// An unknown module or node (naming the ones there are); a record that cannot be read.
pub(crate) fn show(on: &On<'_>, module: &str, node: Option<&str>, history: bool) -> Result<Shown> {
    let (home, catalogue) = (on.home, on.catalogue);
    let scope = scope(home, catalogue, module, node)?;
    // A secret is shown by its digest, never its ciphertext (the rule “A secret is readable
    // only where it is used”).
    let layer = home
        .layers()
        .get(module, &scope)?
        .map(|layer| shown(&layer));
    let running = catalogue.module(module).map(|m| &m.definition);
    let waiting = match &layer {
        Some(layer) if running.is_none_or(|running| !check_layer(running, layer).is_empty()) => {
            match crate::catalogue::newest::newest_definition(home, catalogue, module)? {
                Some(newest) => {
                    crate::catalogue::newest::ahead_of(running, &newest, module, &scope, layer)
                }
                None => Vec::new(),
            }
        }
        Some(_) | None => Vec::new(),
    };
    let history = if history {
        let mut records = home.layers().history(module, &scope)?;
        for record in &mut records {
            record.layer = record.layer.as_ref().map(shown);
        }
        Some(records)
    } else {
        None
    };
    Ok(Shown {
        module: module.to_owned(),
        node: node.map(str::to_owned),
        layer,
        history,
        waiting,
    })
}

/// What `settings set`, `clear` and `restore` did.
#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    /// The module.
    pub module: String,
    /// The node whose layer it is (`None`: the mesh layer).
    pub node: Option<String>,
    /// Keys added, changed and removed, and whether it went ahead.
    #[serde(flatten)]
    pub change: SettingsChange,
    /// The history revision that now holds the layer replaced, when one was replaced.
    pub kept_as_revision: Option<u64>,
    /// How many times another writer changed the layer while this was being set, so it was
    /// decided again against theirs: the keys added, changed and removed are relative to the
    /// layer actually replaced.
    #[serde(skip_serializing_if = "is_zero")]
    pub raced: u32,
    /// The version the layer was checked against (`settings set`) when it is newer than what
    /// the nodes run: an open plan's (`plan-2 (at 1a2b3c4d5e6f)`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checked_against: Option<String>,
    /// The keys it sets ahead: accepted by that version (an open plan's), not yet by the one
    /// the nodes run; each waits for its plan to roll out.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<crate::catalogue::newest::Waiting>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Answer {
    /// Whether it was refused (it would remove keys and `replace` was not given): nothing
    /// changed.
    pub fn refused(&self) -> bool {
        match self.change.decision {
            SettingsDecision::Refused => true,
            SettingsDecision::Unchanged | SettingsDecision::Set | SettingsDecision::Replace => {
                false
            }
        }
    }
}

/// Replaces a layer with `new` (None: clears it) after deciding, and answers. The decision
/// is made against the layer actually replaced: when another writer changed it meanwhile, it
/// is made again against theirs ([`Home::replace_layer`]).
fn replace(
    on: &On<'_>,
    module: &str,
    node: Option<&str>,
    scope: &LayerScope,
    new: Option<Value>,
    replace: bool,
    now: u64,
) -> Result<Answer> {
    let compared = new
        .clone()
        .unwrap_or_else(|| Value::Object(Default::default()));
    let mut change = None;
    let replaced = on
        .home
        .layers()
        .replace(module, scope, on.command, now, &mut |old| {
            let mut decided = settings_change(old, &compared, replace);
            if new.is_none() && old.is_some() && decided.decision == SettingsDecision::Unchanged {
                // Clearing an empty layer still removes the layer.
                decided.decision = SettingsDecision::Replace;
            }
            let goes_ahead = decided.decision.goes_ahead();
            change = Some(decided);
            Ok(match (&new, goes_ahead) {
                (_, false) => LayerChange::Leave,
                (Some(layer), true) => LayerChange::Set(layer.clone()),
                (None, true) if old.is_none() => LayerChange::Leave,
                (None, true) => LayerChange::Remove,
            })
        })?;
    Ok(Answer {
        module: module.to_owned(),
        node: node.map(str::to_owned),
        change: change.ok_or_else(|| Error::internal("the layer was never decided on"))?,
        kept_as_revision: replaced.kept.map(|record| record.revision),
        raced: replaced.raced,
        checked_against: None,
        waiting: Vec::new(),
    })
}

/// The command line as a person would retype it: the program's name without its directory,
/// arguments quoted where a shell needs it (for [`On::command`]).
pub fn invoked_command() -> String {
    let mut args = std::env::args();
    let program = args
        .next()
        .map(|p| {
            std::path::Path::new(&p)
                .file_name()
                .map_or(p.clone(), |n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "mesh-controller".to_owned());
    std::iter::once(program)
        .chain(args.map(|arg| {
            let plain = arg
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:@".contains(c));
            if plain {
                arg
            } else {
                format!("'{}'", arg.replace('\'', r"'\''"))
            }
        }))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The newest version of `module` the mesh knows ([`crate::catalogue::newest::newest_definition`]):
/// what every layer edit is checked against (the rule "A setting can be set ahead of its version").
fn newest(
    home: &Home,
    catalogue: &Catalogue,
    module: &str,
) -> Result<crate::catalogue::newest::Newest> {
    crate::catalogue::newest::newest_definition(home, catalogue, module)?
        .ok_or_else(|| Error::internal(format!("`{module}` is not in the catalogue")))
}

/// Refuses `layer` (of `module`, at `scope`) with keys `newest` does not accept, listing what it
/// accepts; answers the keys only `newest` accepts, which wait for its plan.
fn check_newest(
    catalogue: &Catalogue,
    newest: &crate::catalogue::newest::Newest,
    (module, scope): (&str, &LayerScope),
    layer: &Value,
) -> Result<Vec<crate::catalogue::newest::Waiting>> {
    check_against(
        &newest.definition,
        newest.plan.as_ref().map(|_| newest.from.as_str()),
        layer,
    )?;
    Ok(crate::catalogue::newest::ahead_of(
        catalogue.module(module).map(|m| &m.definition),
        newest,
        module,
        scope,
        layer,
    ))
}

/// Refuses a layer with keys `definition` does not accept, listing what it accepts, and
/// naming the version it was checked against when that is not what the nodes run.
fn check_against(definition: &ModuleDefinition, from: Option<&str>, layer: &Value) -> Result<()> {
    let problems = check_layer(definition, layer);
    if !problems.is_empty() {
        let listed: Vec<String> = problems
            .iter()
            .map(|p| {
                if p.key.is_empty() {
                    format!("  {}", p.message)
                } else {
                    format!("  `{}`: {}", p.key, p.message)
                }
            })
            .collect();
        return Err(Error::refused(format!(
            "the layer is refused, nothing changed{}:\n{}",
            from.map(|from| format!(" (checked against {from})"))
                .unwrap_or_default(),
            listed.join("\n")
        )));
    }
    Ok(())
}

/// `settings set MODULE JSON [--node NODE] [--replace]`, the layer checked against the newest
/// version of the module the mesh knows ([`crate::catalogue::newest::newest_definition`]). A
/// key only that version accepts (an open plan's) is kept, and the answer names it waiting for
/// the plan (the rule "A setting can be set ahead of its version").
///
/// # Errors
/// An unknown module or node, a layer that is not JSON or that `newest` refuses (nothing
/// changed), a record that cannot be read or written.
pub fn set(
    on: &On<'_>,
    module: &str,
    node: Option<&str>,
    json: &str,
    replace_keys: bool,
    now: u64,
) -> Result<Answer> {
    let (home, catalogue) = (on.home, on.catalogue);
    let scope = scope(home, catalogue, module, node)?;
    let newest = newest(home, catalogue, module)?;
    let layer: Value = serde_json::from_str(json).map_err(|source| Error::Invalid {
        what: format!(
            "the new layer for {} is not valid JSON",
            describe(module, &scope)
        ),
        source: Some(Box::new(source)),
    })?;
    let waiting = check_newest(catalogue, &newest, (module, &scope), &layer)?;
    let mut answer = replace(on, module, node, &scope, Some(layer), replace_keys, now)?;
    answer.checked_against = newest.plan.as_ref().map(|_| newest.from.clone());
    answer.waiting = waiting;
    Ok(answer)
}

/// `layer` with `value` at the dotted `path` (intermediate tables made as needed), or `None`
/// when something on the way is not a table.
fn with_value_at(layer: &Value, path: &str, value: Value) -> Option<Value> {
    let mut layer = layer.clone();
    let mut at = &mut layer;
    let mut keys = path.split('.').peekable();
    while let Some(key) = keys.next() {
        let object = at.as_object_mut()?;
        if keys.peek().is_none() {
            object.insert(key.to_owned(), value);
            return Some(layer);
        }
        at = object
            .entry(key.to_owned())
            .or_insert_with(|| Value::Object(Default::default()));
    }
    None
}

/// The most bytes a secret may hold: 64 KiB. [`set_secret`] refuses a longer one, and the
/// binary reads no more than one byte past it from standard input.
pub const SECRET_LIMIT: usize = 64 * 1024;

/// `settings set-secret MODULE KEY [--node NODE]`: sets one key of a layer to a secret, its
/// value read by the caller from standard input (never from the command line), sealed to the
/// mesh key and the operators' keys (`crate::secrets::seal`); the layer keeps the ciphertext
/// only, and the answer shows the keyed digest. The layer's other keys are kept; the replaced
/// layer is kept in the history like any set. The layer is checked against the newest version
/// of the module the mesh knows, as `settings set` checks it: a key only an open plan's
/// version accepts waits for it.
///
/// # Errors
/// An unknown module, node or key (nothing changed), an empty value or one longer than
/// [`SECRET_LIMIT`] (refused before anything is read or written), a key under a value that is
/// not a table, or a record that cannot be read or written.
pub(crate) fn set_secret(
    on: &On<'_>,
    module: &str,
    node: Option<&str>,
    key: &str,
    value: &[u8],
    now: u64,
) -> Result<Answer> {
    if value.len() > SECRET_LIMIT {
        let scope = node.map_or(LayerScope::Mesh, |node| LayerScope::Node(node.to_owned()));
        return Err(Error::refused(format!(
            "{}: the secret for `{key}` is {} bytes; a secret is at most 64 KiB \
             ({SECRET_LIMIT} bytes); nothing changed",
            describe(module, &scope),
            value.len()
        )));
    }
    let (home, catalogue) = (on.home, on.catalogue);
    let scope = scope(home, catalogue, module, node)?;
    if !mesh_model::template::is_dotted_key(key) {
        return Err(Error::invalid(format!(
            "`{key}` is not a setting's key (a dotted path of letters, digits, `_` and `-`)"
        )));
    }
    let newest = newest(home, catalogue, module)?;
    let secret = crate::secrets::seal(home, value)?.to_json();
    let empty = Value::Object(Default::default());
    let mut change = None;
    let mut waiting = Vec::new();
    let replaced = home
        .layers()
        .replace(module, &scope, on.command, now, &mut |old| {
            let layer =
                with_value_at(old.unwrap_or(&empty), key, secret.clone()).ok_or_else(|| {
                    Error::refused(format!(
                        "{}: `{key}` is inside a value that is not a table; nothing changed",
                        describe(module, &scope)
                    ))
                })?;
            waiting = check_newest(catalogue, &newest, (module, &scope), &layer)?;
            let decided = settings_change(old, &layer, false);
            let goes_ahead = decided.decision.goes_ahead();
            change = Some(decided);
            Ok(if goes_ahead {
                LayerChange::Set(layer)
            } else {
                LayerChange::Leave
            })
        })?;
    Ok(Answer {
        module: module.to_owned(),
        node: node.map(str::to_owned),
        change: change.ok_or_else(|| Error::internal("the layer was never decided on"))?,
        kept_as_revision: replaced.kept.map(|record| record.revision),
        raced: replaced.raced,
        checked_against: newest.plan.as_ref().map(|_| newest.from.clone()),
        waiting,
    })
}

/// `settings clear MODULE [--node NODE]`.
pub(crate) fn clear(on: &On<'_>, module: &str, node: Option<&str>, now: u64) -> Result<Answer> {
    let (home, catalogue) = (on.home, on.catalogue);
    let scope = scope(home, catalogue, module, node)?;
    if home.layers().get(module, &scope)?.is_none() {
        return Err(Error::refused(format!(
            "{}: no layer set; nothing to clear",
            describe(module, &scope)
        )));
    }
    replace(on, module, node, &scope, None, true, now)
}

/// `settings restore MODULE [--node NODE] REVISION`: puts back a layer from the history (the
/// layer it replaces is kept too), checked against the newest version of the module the mesh
/// knows as `settings set` checks a layer.
pub(crate) fn restore(
    on: &On<'_>,
    module: &str,
    node: Option<&str>,
    revision: u64,
    now: u64,
) -> Result<Answer> {
    let (home, catalogue) = (on.home, on.catalogue);
    let scope = scope(home, catalogue, module, node)?;
    let records = home.layers().history(module, &scope)?;
    let Some(record) = records.iter().find(|r| r.revision == revision) else {
        return Err(Error::invalid(format!(
            "{} has no revision {revision}; its revisions are: {}",
            describe(module, &scope),
            records
                .iter()
                .map(|r| r.revision.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    let newest = newest(home, catalogue, module)?;
    let waiting = match &record.layer {
        Some(layer) => check_newest(catalogue, &newest, (module, &scope), layer)?,
        None => Vec::new(),
    };
    let mut answer = replace(on, module, node, &scope, record.layer.clone(), true, now)?;
    answer.checked_against = newest.plan.as_ref().map(|_| newest.from.clone());
    answer.waiting = waiting;
    Ok(answer)
}

/// What `settings rename` did: each layer that held the old key, with what changed in it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Renamed {
    /// The module.
    pub module: String,
    /// The key's old name (a dotted path).
    pub old: String,
    /// Its new name.
    pub new: String,
    /// The version the new name was checked against: the newest the mesh knows.
    pub checked_against: String,
    /// Each layer renamed, mesh layer first: its keys added and removed, and the history
    /// revision that keeps the layer it replaced.
    pub layers: Vec<Answer>,
}

/// The value at a dotted path of an object.
fn at_path<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(value, |value, key| value.get(key))
}

/// `layer` with the value at `old` moved to `new` (intermediate tables made as needed), or
/// `None` when it holds nothing at `old`.
fn moved(layer: &Value, old: &str, new: &str) -> Option<Value> {
    let value = at_path(layer, old)?.clone();
    let mut layer = layer.clone();
    let (parent, leaf) = match old.rsplit_once('.') {
        Some((parent, leaf)) => (Some(parent), leaf),
        None => (None, old),
    };
    let holder = match parent {
        Some(parent) => parent
            .split('.')
            .try_fold(&mut layer, |value, key| value.get_mut(key))?,
        None => &mut layer,
    };
    holder.as_object_mut()?.remove(leaf);
    let mut at = &mut layer;
    let mut keys = new.split('.').peekable();
    while let Some(key) = keys.next() {
        let object = at.as_object_mut()?;
        if keys.peek().is_none() {
            object.insert(key.to_owned(), value);
            return Some(layer);
        }
        at = object
            .entry(key.to_owned())
            .or_insert_with(|| Value::Object(Default::default()));
    }
    None
}

/// `settings rename MODULE OLD NEW`: moves the value of `old` to `new` in every layer of the
/// module that sets `old` (the mesh layer and each node's), keeping each replaced layer in the
/// history, so a setting a new version renamed keeps its value (the rule "an orphaned setting
/// is a removal"). `newest` is the version `new` must be accepted by: the newest the mesh knows
/// ([`crate::catalogue::newest::newest_definition`]).
///
/// # Guarantees
/// Every layer is checked before any is written: when no layer sets `old`, a layer already
/// sets `new`, or `newest` does not accept `new`, it is refused and nothing changes.
///
/// # Errors
/// As above (a refusal), or a record that cannot be read or written.
pub(crate) fn rename(
    on: &On<'_>,
    module: &str,
    (old, new): (&str, &str),
    newest: &crate::catalogue::newest::Newest,
    now: u64,
) -> Result<Renamed> {
    let home = on.home;
    scope(home, on.catalogue, module, None)?;
    let refused = |why: String| {
        Error::refused(format!(
            "`settings rename {module} {old} {new}` is refused, nothing changed: {why}"
        ))
    };
    if old == new || old.is_empty() || new.is_empty() || new.split('.').any(str::is_empty) {
        return Err(refused("name two different keys".into()));
    }
    let inventory = home.inventory()?;
    let mut to_rename = Vec::new();
    for (scope, layer) in inventory.layers.layers.get(module).into_iter().flatten() {
        let Some(renamed) = moved(layer, old, new) else {
            continue;
        };
        if at_path(layer, new).is_some() {
            return Err(refused(format!(
                "the {scope} sets `{new}` already; set it with `settings set` instead"
            )));
        }
        let top = new.split('.').next().unwrap_or(new);
        if let Some(problem) = check_layer(&newest.definition, &renamed)
            .into_iter()
            .find(|p| p.key == new || p.key == top)
        {
            return Err(refused(format!(
                "{} (checked against {})",
                problem.message, newest.from
            )));
        }
        to_rename.push(scope.clone());
    }
    if to_rename.is_empty() {
        return Err(refused(format!("no layer of `{module}` sets `{old}`")));
    }
    let mut layers = Vec::new();
    for scope in to_rename {
        let mut change = None;
        let replaced = home
            .layers()
            .replace(module, &scope, on.command, now, &mut |found| {
                // Another writer may have renamed or dropped it meanwhile: then leave it.
                let Some(renamed) = found.and_then(|layer| moved(layer, old, new)) else {
                    change = None;
                    return Ok(LayerChange::Leave);
                };
                change = Some(settings_change(found, &renamed, true));
                Ok(LayerChange::Set(renamed))
            })?;
        if let Some(change) = change {
            layers.push(Answer {
                module: module.to_owned(),
                node: match &scope {
                    LayerScope::Node(node) => Some(node.clone()),
                    LayerScope::Mesh => None,
                },
                change,
                kept_as_revision: replaced.kept.map(|record| record.revision),
                raced: replaced.raced,
                checked_against: None,
                waiting: Vec::new(),
            });
        }
    }
    Ok(Renamed {
        module: module.to_owned(),
        old: old.to_owned(),
        new: new.to_owned(),
        checked_against: newest.from.clone(),
        layers,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_key_is_moved_at_any_depth_and_only_when_it_is_there() {
        let layer = json!({"port": 9090, "places": {"a": "/x"}, "user": "m"});
        assert_eq!(
            super::moved(&layer, "port", "http-port"),
            Some(json!({"http-port": 9090, "places": {"a": "/x"}, "user": "m"}))
        );
        assert_eq!(
            super::moved(&layer, "places.a", "places.b"),
            Some(json!({"port": 9090, "places": {"b": "/x"}, "user": "m"}))
        );
        assert_eq!(
            super::moved(&layer, "user", "account.name"),
            Some(json!({"port": 9090, "places": {"a": "/x"}, "account": {"name": "m"}}))
        );
        assert_eq!(super::moved(&layer, "size", "capacity"), None);
    }

    #[test]
    fn formats_times_in_utc() {
        assert_eq!(mesh_store::clock::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            mesh_store::clock::rfc3339(1_795_966_200),
            "2026-11-29T15:30:00Z"
        );
    }
}
