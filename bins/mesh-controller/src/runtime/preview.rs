//! The fleet preview of a plan (`merge --plan-only`, `plans show PLAN --preview`): what its
//! rollouts would do across the fleet, tier by tier and module by module, before anything is
//! built or sent.
//!
//! Start at [`preview`]; [`diff`] is what a push would change on one node (`plan --diff`).
//!
//! For each module of each tier of a plan it answers the machine that would go
//! first, each node whose declaration would change (resources added, changed and removed, and
//! the containers that would be recreated, with the fields that make it so), the nodes that
//! would be held because a running container's data would move (the rule “A moved mount is held”),
//! the nodes with a maintenance window open (their held containers are left alone), the nodes whose
//! declaration would not change, and the nodes not running (never sent to).
//!
//! # Guarantees
//! - Nothing is built, published, written or sent: the preview reads the records, the
//!   repository at the plan's commit (git objects, no checkout) and the store's deployed builds.
//! - It composes exactly as the rollout does: the module's tree at the plan's commit over what
//!   the mesh runs, the modules of earlier tiers of the same plan included
//!   ([`mesh_plan::preview::Walk`], whose tests hold that what it names per node is what
//!   `plan NODE --diff` names for the same two versions), and the first
//!   machine is the one mesh-plan's state machine ([`mesh_plan::rollout::step`]) sends first,
//!   held nodes passed over as a rollout passes them.
//! - A module that does not validate at the commit is named with every problem; the other
//!   modules are previewed all the same.

use crate::catalogue::builds::{effective_source, module_problems};
use crate::catalogue::repos;
use crate::error::Result;
use crate::home::Home;
use crate::plans::PlanRecord;
use crate::runtime::{Ctx, MergeOptions, Runtime};
use mesh_model::module::{load_catalogue, ModuleDefinition};
use mesh_plan::preview::{ModuleStep, NodeStep, Walk};
use mesh_plan::rollout::{step, Action, Event, RolloutNode, RolloutSpec, RolloutState};
use mesh_plan::PushDecision;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// What a plan's rollouts would do, tier by tier.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Preview {
    /// The plan's id.
    pub plan: String,
    /// Its tiers, in order.
    pub tiers: Vec<TierPreview>,
}

/// One tier of a preview.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct TierPreview {
    /// The tier's number, from 0, as the plan numbers it.
    pub tier: usize,
    /// Its modules, in the order they roll out.
    pub modules: Vec<ModulePreview>,
}

/// What one module's rollout would do.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct ModulePreview {
    /// The module.
    pub module: String,
    /// Why it would not be built (it does not validate at the commit): every problem, one to a
    /// line. Nothing else is said of it then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// The node its rollout would send first (`None`: none would be sent).
    pub first: Option<String>,
    /// The nodes whose declaration would change, with how.
    pub changes: Vec<NodeChange>,
    /// The nodes that would be held: a running container's data would move.
    pub held: Vec<HeldNode>,
    /// The nodes with a maintenance window open (the containers it holds are left alone).
    pub in_window: Vec<WindowNode>,
    /// The nodes whose declaration would not change.
    pub unchanged: Vec<String>,
    /// The nodes assigned the module that do not run (never sent to).
    pub not_running: Vec<String>,
    /// The settings its layers hold that this version no longer accepts, or accepts with
    /// another type (the rule "an orphaned setting is a removal"), with what the nodes get in
    /// their place.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orphans: Option<mesh_plan::Orphans>,
    /// The running nodes those orphans change what they get, by name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub orphaned_nodes: Vec<String>,
    /// The nodes that would be held because a setting their modules require is set by no layer,
    /// with those settings.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unset: Vec<UnsetNode>,
}

/// A node a rollout would hold: settings its modules require are set by no layer.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct UnsetNode {
    /// The node.
    pub node: String,
    /// The settings unset.
    pub unset: Vec<mesh_plan::Unset>,
}

/// How one node's declaration would change.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct NodeChange {
    /// The node.
    pub node: String,
    /// Whether it was never sent anything (everything is added).
    pub first_send: bool,
    /// Resources added.
    pub added: usize,
    /// Resources changed.
    pub changed: usize,
    /// Resources removed.
    pub removed: usize,
    /// The containers that would be recreated, each with the fields that make it so.
    pub recreated: Vec<Recreated>,
    /// The resources added, changed (with their fields) and removed, by id, as `plan NODE
    /// --diff` shows them.
    pub diff: mesh_plan::DeclarationDiff,
}

/// A container that would be recreated.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Recreated {
    /// The resource id.
    pub resource: String,
    /// The fields whose change recreates it.
    pub fields: Vec<String>,
}

/// A node that would be held for a move.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct HeldNode {
    /// The node.
    pub node: String,
    /// Each move: module, mount, both directories.
    pub moves: Vec<String>,
}

/// A node with a maintenance window open, as its last report says.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct WindowNode {
    /// The node.
    pub node: String,
    /// Each open window's step and the containers it holds still.
    pub windows: Vec<String>,
}

/// The preview of `record`'s rollouts (see the module's guarantees); `ctx.moves` are the
/// modules whose moves are acknowledged (`--move`), as for the rollout.
///
/// # Errors
/// The records, the repository or the store's deployed builds cannot be read.
pub async fn preview(ctx: &Ctx, record: &PlanRecord) -> Result<Preview> {
    let home = ctx.home();
    let repo = home.repos().get(&record.plan.repository)?;
    let at_commit = repos::catalogue_at(&repo.path, &record.plan.commit, &repo.modules_dir)?;
    let source = effective_source(home, ctx.store()).await?;
    // What the nodes run now: the version each module's orphaned settings are judged from.
    let (running, _) = load_catalogue(&source);
    let base_inventory = home.inventory()?;
    // What each node assigned a module of the plan was last sent: the preview's changes are
    // diffed from it, then from what the modules before would have sent it.
    let mut sent = BTreeMap::new();
    for module in record.plan.tiers.iter().flatten() {
        for node in base_inventory.nodes_of(module) {
            if !sent.contains_key(node) {
                sent.insert(node.to_owned(), home.sent().get(node)?);
            }
        }
    }
    let mut walk = Walk::new(source, base_inventory, sent);
    let mut tiers = Vec::new();
    for (index, tier) in record.plan.tiers.iter().enumerate() {
        let mut modules = Vec::new();
        for module in tier {
            let problems = module_problems(&at_commit, module);
            if !problems.is_empty() {
                let mut refused = ModulePreview::of(module);
                refused.refused = Some(
                    problems
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("\n"),
                );
                modules.push(refused);
                continue;
            }
            let tree = at_commit.modules[module].clone();
            let archive = mesh_store::archive::archive_tree(&tree)?;
            // The bus's users, sent the bus node with every declaration, are not the modules'
            // doing: carried over, as `plan --diff` carries them, not shown removed.
            let step = walk.step(
                module,
                tree,
                archive.reference.clone(),
                &crate::bus::users::with_users_file_of,
            );
            let previous = running.module(module).map(|m| &m.definition);
            modules.push(preview_module(ctx, step, (module, previous), &mut walk)?);
        }
        tiers.push(TierPreview {
            tier: index,
            modules,
        });
    }
    Ok(Preview {
        plan: record.plan.id.clone(),
        tiers,
    })
}

impl ModulePreview {
    /// A module's preview with nothing said of it yet.
    fn of(module: &str) -> ModulePreview {
        ModulePreview {
            module: module.to_owned(),
            refused: None,
            first: None,
            changes: Vec::new(),
            held: Vec::new(),
            in_window: Vec::new(),
            unchanged: Vec::new(),
            not_running: Vec::new(),
            orphans: None,
            orphaned_nodes: Vec::new(),
            unset: Vec::new(),
        }
    }
}

/// One module's preview from its step of the walk ([`Walk::step`]: each node's declaration and
/// what changes), with what the rollout would hold, the first machine, the windows and the
/// orphaned settings; each node it would send is then taken as holding its declaration.
fn preview_module(
    ctx: &Ctx,
    step: ModuleStep,
    (module, previous): (&str, Option<&ModuleDefinition>),
    walk: &mut Walk,
) -> Result<ModulePreview> {
    let home = ctx.home();
    let mut out = ModulePreview::of(module);
    let Some(definition) = step.catalogue.module(module).map(|m| m.definition.clone()) else {
        out.refused =
            Some("it does not validate against what the mesh runs (`check` lists why)".into());
        return Ok(out);
    };
    let allowed: BTreeSet<String> = if ctx.moves.contains(module) {
        BTreeSet::from([module.to_owned()])
    } else {
        BTreeSet::new()
    };
    let orphans = mesh_plan::orphaned_settings(previous, &definition, &step.inventory.layers);
    let mut nodes = BTreeMap::new();
    let mut held_moves: BTreeMap<String, Vec<mesh_plan::Move>> = BTreeMap::new();
    for NodeStep {
        node,
        running,
        composed,
    } in step.nodes
    {
        let Some(composed) = composed else {
            out.not_running.push(node.clone());
            nodes.insert(
                node,
                RolloutNode {
                    running,
                    declaration: String::new(),
                },
            );
            continue;
        };
        if !orphans.for_node(&node).is_empty() {
            // Held as the rollout holds it: nothing is sent to it.
            out.orphaned_nodes.push(node.clone());
            held_moves.entry(node.clone()).or_default();
        }
        let unset = mesh_plan::unset_required(&step.catalogue, &step.inventory, &node);
        if !unset.is_empty() {
            // Held as the rollout holds it, never sent the placeholders: nothing is composed.
            out.unset.push(UnsetNode {
                node: node.clone(),
                unset,
            });
            held_moves.entry(node.clone()).or_default();
            nodes.insert(
                node,
                RolloutNode {
                    running,
                    declaration: String::new(),
                },
            );
            continue;
        }
        let (declaration, diff) = composed?;
        if diff.added.is_empty() && diff.changed.is_empty() && diff.removed.is_empty() {
            out.unchanged.push(node.clone());
        } else {
            out.changes.push(NodeChange {
                node: node.clone(),
                first_send: diff.first_send,
                added: diff.added.len(),
                changed: diff.changed.len(),
                removed: diff.removed.len(),
                recreated: diff
                    .changed
                    .iter()
                    .filter(|change| change.recreates)
                    .map(|change| Recreated {
                        resource: change.id.clone(),
                        fields: change
                            .fields
                            .iter()
                            .filter(|field| field.recreates)
                            .map(|field| field.field.clone())
                            .collect(),
                    })
                    .collect(),
                diff,
            });
        }
        if let PushDecision::Hold { moves } = crate::executor::decide(home, &declaration, &allowed)?
        {
            out.held.push(HeldNode {
                node: node.clone(),
                moves: moves.iter().map(ToString::to_string).collect(),
            });
            held_moves.insert(node.clone(), moves);
        }
        if let Some(report) = home.reports().get(&node)? {
            if !report.windows.is_empty() {
                out.in_window.push(WindowNode {
                    node: node.clone(),
                    windows: report
                        .windows
                        .iter()
                        .map(|w| format!("{} (holding {})", w.step, w.containers.join(", ")))
                        .collect(),
                });
            }
        }
        nodes.insert(
            node.clone(),
            RolloutNode {
                running,
                declaration: declaration.digest(),
            },
        );
        if !held_moves.contains_key(&node) {
            walk.holds(&node, declaration);
        }
    }
    if !orphans.is_empty() {
        out.orphans = Some(orphans);
    }
    out.first = first_sent(&RolloutSpec::new(&definition, nodes, None), &held_moves);
    Ok(out)
}

/// The node the rollout's state machine sends first, a held node passed over as the executor
/// passes it ([`Event::Held`]).
fn first_sent(spec: &RolloutSpec, held: &BTreeMap<String, Vec<mesh_plan::Move>>) -> Option<String> {
    let mut state = RolloutState::new();
    let mut events = VecDeque::from([Event::Start]);
    // The clock is not read: the preview's steps need no deadline.
    while let Some(event) = events.pop_front() {
        for action in step(spec, &mut state, event, 0) {
            match action {
                Action::IssueGrants { nodes } => events.push_back(Event::GrantsIssued { nodes }),
                Action::SendBusNode { node } | Action::Send { node, .. } => match held.get(&node) {
                    Some(moves) => events.push_back(Event::Held {
                        node,
                        moves: moves.clone(),
                        orphans: Vec::new(),
                        unset: Vec::new(),
                    }),
                    None => return Some(node),
                },
                Action::SendFailed { .. }
                | Action::Stop { .. }
                | Action::Revert { .. }
                | Action::Held { .. }
                | Action::Done { .. } => {}
            }
        }
    }
    None
}

/// What [`merge`] answers: what the merge did, and with [`MergeOptions::plan_only`] the
/// preview of the plan it made (`merge --output json` prints it).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Merged {
    /// What hearing the merge did.
    #[serde(flatten)]
    pub outcome: crate::plans::MergeOutcome,
    /// What the plan it made would do across the fleet, when it was only planned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preview: Option<Preview>,
}

/// Hears a merge as [`Runtime::merge`] does; with [`MergeOptions::plan_only`], also previews
/// the plan it made (what its rollouts would do across the fleet), which is what `merge
/// --plan-only` answers. No preview when the merge was already planned or the plan is driven.
///
/// # Errors
/// As [`Runtime::merge`] and [`preview`].
pub async fn merge(runtime: &Runtime, repo: &str, options: &MergeOptions) -> Result<Merged> {
    let outcome = runtime.merge(repo, options).await?;
    let preview = match (&outcome, options.plan_only) {
        (crate::plans::MergeOutcome::Planned { plan, .. }, true) => {
            let record = runtime.mesh().home().plans().get(&plan.id)?;
            let ctx = runtime.ctx(&options.moves, &options.drop_settings);
            Some(preview(&ctx, &record).await?)
        }
        _ => None,
    };
    Ok(Merged { outcome, preview })
}

/// What a push would change on `node`: its declaration composed now against what it was last
/// sent. On a fleet the bus node is also sent the bus's users; they are not the modules' doing
/// (`broker users` shows them), and this diff compares what the modules change, so the users
/// file it was sent is carried over rather than shown gone.
///
/// # Errors
/// When the node is not in the mesh, the mesh is unsound, or a record cannot be read.
pub fn diff(
    home: &Home,
    checked: &crate::push::Checked,
    node: &str,
) -> Result<mesh_plan::DeclarationDiff> {
    let mut declaration = crate::push::compose_node(home, checked, node)?;
    let sent = home.sent().get(node)?;
    if let Some(sent) = &sent {
        declaration = crate::bus::users::with_users_file_of(declaration, sent);
    }
    Ok(mesh_plan::diff(sent.as_ref(), &declaration))
}

/// One node's diff in [`diff_all`].
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct NodeDiff {
    /// The node.
    pub node: String,
    /// What a push would change on it, as [`diff`] says.
    #[serde(flatten)]
    pub diff: mesh_plan::DeclarationDiff,
}

/// What a push would change on every node whose intent differs from what it was sent (`plan
/// --all --diff`), node by node; a node with nothing to change is left out. The intents are
/// made current first ([`crate::intent::keep_current`]), so only the nodes they name are
/// composed ([`crate::intent::nodes_to_diff`]).
///
/// # Errors
/// As [`diff`], and [`crate::intent::keep_current`].
pub async fn diff_all(
    home: &Home,
    store: &dyn mesh_store::store::ArchiveStore,
    checked: &crate::push::Checked,
) -> Result<Vec<NodeDiff>> {
    crate::intent::keep_current(home, store).await?;
    let mut out = Vec::new();
    for node in crate::intent::nodes_to_diff(home)? {
        let diff = diff(home, checked, &node)?;
        if !diff.is_empty() {
            out.push(NodeDiff { node, diff });
        }
    }
    Ok(out)
}
