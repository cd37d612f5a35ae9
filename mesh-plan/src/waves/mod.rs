//! Waves: a module's nodes in the stages its rollout reaches them, the failure budget that stops
//! it, and the hours a wave may start in — as pure decisions (the rule “A change reaches the
//! fleet in waves”).
//!
//! Start at [`plan_waves`]: a module's target nodes partitioned into [`Wave`]s by the `[rollout]`
//! of its `module.toml` over the inventory's ([`mesh_model::waves`]), or, with none declared,
//! today's two: one machine first, then the rest. Then [`progress`] (a wave rollout as a state
//! machine: events in, actions out, `now` an argument) and [`windows`] (whether a wave may start
//! at `now`, and if not when it may).
//!
//! # The rules it keeps
//! - **Every node in exactly one wave.** A node two selector waves match, a node in none, and a
//!   size that rounds to no node while nodes are left are refused ([`WaveProblem`]), each
//!   naming the waves and nodes; every problem is said at once.
//! - **Stable.** Waves by selector take the module's nodes they match; waves by size then take,
//!   in order, their size of the nodes no wave has taken yet, in an order fixed by a hash of the
//!   module's and the node's names (so the same inventory and module give the same waves, and
//!   the first waves of two modules are not the same machines).
//! - **Rounding.** A share takes the nearest whole number of the nodes left, a half up
//!   (`10%` of 15 is 2, of 14 is 1, of 4 is 0 — refused); a count takes that many, or all that
//!   are left when fewer. A wave left with no node to take (an earlier wave took them all) is
//!   empty, not refused: a fleet's default waves fit a module on one machine.
//!
//! Deliberately absent: IO and the clock. Zones reach [`windows`] from the caller.

use mesh_model::inventory::{Inventory, INVENTORY_FILE};
use mesh_model::module::{Catalogue, ModuleDefinition, Upgrade, DEFINITION_FILE};
use mesh_model::selector::{Labels, Selector, UnknownLabels};
use mesh_model::waves::{
    Budget, Pause, RolloutPolicy, Share, WaveDefinition, WaveNodes, WaveSize, Window,
};
use mesh_model::Diagnostic;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

pub mod progress;
pub mod windows;

#[cfg(test)]
mod tests;

/// A module's rollout in waves: fixed for the life of a rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct WavePlan {
    /// The module.
    pub module: String,
    /// The waves, in order; together they hold every target node once.
    pub waves: Vec<Wave>,
    /// The failure budget (unset in `[rollout]`: the first failure stops, as without waves).
    pub budget: Budget,
    /// Sends under way at once (`[rollout] max-parallel`, else the module's, else all).
    pub max_parallel: Option<u32>,
    /// The hours a wave may start in (none: any time).
    pub windows: Vec<Window>,
    /// Whether the waves were declared (`[[rollout.waves]]`), rather than today's default.
    pub declared: bool,
}

/// One wave of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Wave {
    /// What people read: its `name`, else `wave N` (or `first node`, `the rest`, `every node`
    /// for today's default).
    pub name: String,
    /// How it chose its nodes.
    pub chosen_by: ChosenBy,
    /// Its nodes, in the order they are sent.
    pub nodes: Vec<String>,
    /// What happens once it is done, before the next wave.
    pub pause: Option<Pause>,
}

/// How many node names a wave's line shows before it says how many more.
const NAMES_SHOWN: usize = 5;

impl fmt::Display for WavePlan {
    /// The plan as `merge --plan-only` and `plans show --preview` show it: each wave with how it
    /// chose its nodes, their count and first names, and its pause; then the budget,
    /// `max-parallel` and the windows.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: usize = self.waves.iter().map(|w| w.nodes.len()).sum();
        let source = if self.declared {
            "its [rollout] waves"
        } else {
            "no waves declared: one machine first, then the rest"
        };
        writeln!(
            f,
            "`{}`: {} wave(s) over {nodes} node(s) ({source})",
            self.module,
            self.waves.len()
        )?;
        for wave in &self.waves {
            let mut names = wave
                .nodes
                .iter()
                .take(NAMES_SHOWN)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            if wave.nodes.len() > NAMES_SHOWN {
                names.push_str(&format!(" and {} more", wave.nodes.len() - NAMES_SHOWN));
            }
            write!(
                f,
                "  {}: {}: {} node(s)",
                wave.name,
                wave.chosen_by,
                wave.nodes.len()
            )?;
            if !names.is_empty() {
                write!(f, " ({names})")?;
            }
            match wave.pause {
                Some(Pause::Approve) => writeln!(f, ", then waits for an approval")?,
                Some(pause @ Pause::For { .. }) => writeln!(f, ", then pauses {pause}")?,
                None => writeln!(f)?,
            }
        }
        let budget = &self.budget;
        if budget.failed.basis_points == 0 {
            write!(f, "  budget: the first failure stops the rollout")?;
        } else {
            write!(
                f,
                "  budget: stops when over {} of a wave's answers failed, once {} answered",
                budget.failed, budget.min
            )?;
        }
        match self.max_parallel {
            Some(n) => writeln!(f, "; at most {n} sent at once")?,
            None => writeln!(f)?,
        }
        for window in &self.windows {
            writeln!(f, "  window: {window}")?;
        }
        Ok(())
    }
}

/// How a wave chose its nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "kebab-case")]
pub enum ChosenBy {
    /// The nodes a selector matches.
    Select {
        /// The selector.
        selector: String,
    },
    /// A size of the nodes not yet in a wave.
    Size {
        /// The size as written (`10%`, `5`).
        size: String,
        /// How many nodes were left to take from.
        of: usize,
    },
    /// Today's default: the first node by name.
    FirstNode,
    /// Today's default: every node after the first.
    Rest,
    /// Today's default for `upgrade = "together"`: every node at once.
    Everyone,
}

impl fmt::Display for ChosenBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChosenBy::Select { selector } => write!(f, "`{selector}`"),
            ChosenBy::Size { size, of } => write!(f, "{size} of {of}"),
            ChosenBy::FirstNode => f.write_str("the first node by name"),
            ChosenBy::Rest => f.write_str("every node after the first"),
            ChosenBy::Everyone => f.write_str("every node at once"),
        }
    }
}

/// Why a module's waves are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WaveProblem {
    /// A wave's selector names a label no node has.
    #[error("module `{module}`: {wave}: {error}")]
    UnknownLabels {
        /// The module.
        module: String,
        /// The wave.
        wave: String,
        /// The labels.
        error: UnknownLabels,
    },
    /// Two selector waves match the same node.
    #[error("module `{module}`: node `{node}` is in two waves, {first} and {second}")]
    InTwoWaves {
        /// The module.
        module: String,
        /// The node.
        node: String,
        /// The first wave that has it.
        first: String,
        /// The later wave that has it too.
        second: String,
    },
    /// Nodes of the module no wave takes.
    #[error(
        "module `{module}`: {} in no wave: {}{}; end with a wave of `size = \"100%\"`",
        if nodes.len() == 1 { "a node is" } else { "nodes are" },
        shown(nodes),
        more(nodes.len())
    )]
    InNoWave {
        /// The module.
        module: String,
        /// Every node left out, in order of name.
        nodes: Vec<String>,
    },
    /// A size that takes no node while nodes are left.
    #[error(
        "module `{module}`: {wave} takes no node: {size} of the {left} nodes left rounds to 0 \
         (give a count, e.g. `size = 1`, or a larger share)"
    )]
    RoundsToZero {
        /// The module.
        module: String,
        /// The wave.
        wave: String,
        /// The size as written.
        size: String,
        /// How many nodes were left for it.
        left: usize,
    },
}

/// How many nodes a message names before it says how many more.
const SHOWN: usize = 10;

fn more(count: usize) -> String {
    match count.checked_sub(SHOWN) {
        Some(more) if more > 0 => format!(" and {more} more"),
        Some(_) | None => String::new(),
    }
}

fn shown(nodes: &[String]) -> String {
    nodes
        .iter()
        .take(SHOWN)
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The budget without a `[rollout] budget`: the first failure stops the rollout, as it does
/// without waves.
pub fn default_budget() -> Budget {
    Budget {
        failed: Share { basis_points: 0 },
        min: 1,
    }
}

/// A module's waves over `targets` (the nodes its rollout sends to, e.g. its running assigned
/// nodes), by its `[rollout]` over the inventory's.
///
/// With no waves declared the plan is today's: for `upgrade = "one-first"` two waves, the first
/// node by name and then the rest (the second empty for a module on one node); for
/// `together`, one wave of every node.
///
/// # Errors
/// Every [`WaveProblem`] at once.
pub fn plan_waves(
    definition: &ModuleDefinition,
    inventory: &Inventory,
    targets: &BTreeSet<String>,
) -> Result<WavePlan, Vec<WaveProblem>> {
    let policy = RolloutPolicy::over(definition.rollout.as_ref(), inventory.file.rollout.as_ref())
        .unwrap_or_default();
    let waves = match &policy.waves {
        Some(declared) => partition(&definition.name, declared, targets, inventory.node_labels())?,
        None => default_waves(definition.upgrade, targets),
    };
    Ok(WavePlan {
        module: definition.name.clone(),
        waves,
        budget: policy.budget.clone().unwrap_or_else(default_budget),
        max_parallel: policy.max_parallel.or(definition.max_parallel),
        windows: policy.windows.clone().unwrap_or_default(),
        declared: policy.waves.is_some(),
    })
}

/// What `check` says of every module's waves over the nodes it is assigned to, and of every
/// window's zone (`zone` finds one by name; the controller passes `jiff::tz::db().get`): each
/// problem a [`Diagnostic`] naming the file that declares the waves (the module's
/// `module.toml`, or the inventory for the fleet's), the module and the key.
pub fn check_waves(
    catalogue: &Catalogue,
    inventory: &Inventory,
    zone: impl Fn(&str) -> Result<jiff::tz::TimeZone, String>,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for (name, module) in &catalogue.modules {
        let targets: BTreeSet<String> = inventory
            .nodes_of(name)
            .into_iter()
            .map(str::to_owned)
            .collect();
        if targets.is_empty() {
            continue;
        }
        let own = module.definition.rollout.as_ref();
        let file_of = |declares: bool| {
            if declares {
                format!("modules/{name}/{DEFINITION_FILE}")
            } else {
                INVENTORY_FILE.to_owned()
            }
        };
        if let Err(problems) = plan_waves(&module.definition, inventory, &targets) {
            let declares = own.is_some_and(|policy| policy.waves.is_some());
            for problem in problems {
                out.push(Diagnostic::new(
                    file_of(declares),
                    Some(name),
                    Some("rollout.waves"),
                    problem.to_string(),
                ));
            }
        }
        let policy = RolloutPolicy::over(own, inventory.file.rollout.as_ref()).unwrap_or_default();
        let declared = policy.windows.unwrap_or_default();
        if let Err(unknown) = windows::zone_windows(&declared, &zone) {
            let declares = own.is_some_and(|policy| policy.windows.is_some());
            for problem in unknown {
                out.push(Diagnostic::new(
                    file_of(declares),
                    Some(name),
                    Some("rollout.windows"),
                    problem.to_string(),
                ));
            }
        }
    }
    out.sort();
    out
}

/// Today's waves: one machine first (by name), then the rest; or everyone for `together`.
pub fn default_waves(upgrade: Upgrade, targets: &BTreeSet<String>) -> Vec<Wave> {
    match upgrade {
        Upgrade::OneFirst => {
            let mut nodes = targets.iter().cloned();
            vec![
                Wave {
                    name: "first node".into(),
                    chosen_by: ChosenBy::FirstNode,
                    nodes: nodes.next().into_iter().collect(),
                    pause: None,
                },
                Wave {
                    name: "the rest".into(),
                    chosen_by: ChosenBy::Rest,
                    nodes: nodes.collect(),
                    pause: None,
                },
            ]
        }
        Upgrade::Together => vec![Wave {
            name: "every node".into(),
            chosen_by: ChosenBy::Everyone,
            nodes: targets.iter().cloned().collect(),
            pause: None,
        }],
    }
}

/// The name a declared wave is shown by.
fn wave_name(index: usize, definition: &WaveDefinition) -> String {
    match &definition.name {
        Some(name) => format!("wave {} `{name}`", index + 1),
        None => match &definition.nodes {
            WaveNodes::Select(selector) => format!("wave {} (`{selector}`)", index + 1),
            WaveNodes::Size(size) => format!("wave {} ({size})", index + 1),
        },
    }
}

/// Declared waves over `targets`, whose labels are among `nodes` (every node of the inventory,
/// so a selector naming a label some node has is not refused for matching none of these).
///
/// # Errors
/// Every [`WaveProblem`] at once.
pub fn partition<'n>(
    module: &str,
    declared: &[WaveDefinition],
    targets: &BTreeSet<String>,
    nodes: impl IntoIterator<Item = (&'n str, &'n Labels)> + Clone,
) -> Result<Vec<Wave>, Vec<WaveProblem>> {
    let labels: BTreeMap<&str, &Labels> = nodes.clone().into_iter().collect();
    let no_labels = Labels::new();
    let mut problems = Vec::new();
    let mut taken: BTreeMap<&str, String> = BTreeMap::new();
    let mut waves: Vec<Option<Wave>> = vec![None; declared.len()];
    // Waves by selector first: they take what they match, wherever they stand.
    for (index, definition) in declared.iter().enumerate() {
        let WaveNodes::Select(selector) = &definition.nodes else {
            continue;
        };
        let name = wave_name(index, definition);
        let unknown = selector.unknown_labels(nodes.clone());
        if !unknown.is_empty() {
            problems.push(WaveProblem::UnknownLabels {
                module: module.to_owned(),
                wave: name.clone(),
                error: UnknownLabels {
                    selector: selector.to_string(),
                    unknown,
                },
            });
        }
        let mut chosen = Vec::new();
        for node in targets {
            let node_labels = labels.get(node.as_str()).copied().unwrap_or(&no_labels);
            if !selector.matches(node, node_labels) {
                continue;
            }
            match taken.get(node.as_str()) {
                Some(first) => problems.push(WaveProblem::InTwoWaves {
                    module: module.to_owned(),
                    node: node.clone(),
                    first: first.clone(),
                    second: name.clone(),
                }),
                None => {
                    taken.insert(node, name.clone());
                    chosen.push(node.clone());
                }
            }
        }
        waves[index] = Some(declared_wave(
            name,
            definition,
            selector_by(selector),
            chosen,
        ));
    }
    // Then waves by size, in order, from what is left, in the module's stable order.
    let mut left: Vec<&String> = targets
        .iter()
        .filter(|node| !taken.contains_key(node.as_str()))
        .collect();
    left.sort_by_key(|node| (stable_hash(module, node), *node));
    let mut left = left.into_iter().peekable();
    for (index, definition) in declared.iter().enumerate() {
        let WaveNodes::Size(size) = &definition.nodes else {
            continue;
        };
        let name = wave_name(index, definition);
        let count = left.len();
        let take = size_of(*size, count);
        if take == 0 && count > 0 {
            problems.push(WaveProblem::RoundsToZero {
                module: module.to_owned(),
                wave: name.clone(),
                size: size.to_string(),
                left: count,
            });
        }
        let chosen: Vec<String> = left.by_ref().take(take).cloned().collect();
        let by = ChosenBy::Size {
            size: size.to_string(),
            of: count,
        };
        waves[index] = Some(declared_wave(name, definition, by, chosen));
    }
    let mut unplaced: Vec<String> = left.cloned().collect();
    if !unplaced.is_empty() {
        unplaced.sort();
        problems.push(WaveProblem::InNoWave {
            module: module.to_owned(),
            nodes: unplaced,
        });
    }
    if problems.is_empty() {
        Ok(waves.into_iter().flatten().collect())
    } else {
        Err(problems)
    }
}

fn selector_by(selector: &Selector) -> ChosenBy {
    ChosenBy::Select {
        selector: selector.to_string(),
    }
}

fn declared_wave(
    name: String,
    definition: &WaveDefinition,
    chosen_by: ChosenBy,
    nodes: Vec<String>,
) -> Wave {
    Wave {
        name,
        chosen_by,
        nodes,
        pause: definition.pause,
    }
}

/// How many of `left` nodes a size takes: a share rounded to the nearest node, a half up; a
/// count, or all that are left when fewer.
pub fn size_of(size: WaveSize, left: usize) -> usize {
    match size {
        WaveSize::Share(share) => {
            let exact = left as u128 * u128::from(share.basis_points);
            ((exact + 5_000) / 10_000) as usize
        }
        WaveSize::Count(count) => left.min(count as usize),
    }
}

/// FNV-1a over the module's name, a zero byte and the node's: a fixed order of a module's
/// nodes that differs from module to module.
fn stable_hash(module: &str, node: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in module.bytes().chain([0]).chain(node.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}
