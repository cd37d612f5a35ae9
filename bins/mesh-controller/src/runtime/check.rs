//! What `check` finds: the mesh checked as a whole before a merge — every problem of the
//! catalogue and the inventory, each registered repository's head checked, the settings those
//! heads' next merges would orphan, and the keys a layer sets ahead of the version the nodes run.
//!
//! Start at [`check()`]; [`Check::sound`] is whether `check` exits 0. Reads git and the records
//! only — but a repository registered by URL is fetched into its clone first, as its next merge
//! would be; nothing else is written.

use crate::error::Result;
use crate::home::Home;
use crate::push::Checked;
use crate::settings::orphans::ComingOrphans;
use serde::Serialize;

/// What `check` finds: the catalogues it read, every problem of the catalogue and the
/// inventory and of each registered repository's head, the settings those heads' next merges
/// would orphan, and the keys a layer sets ahead of the version the nodes run (each waiting
/// for an open plan). Its fields are what `check --output json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What the version the nodes run was read from.
    pub running: crate::catalogue::heads::Running,
    /// Each registered repository's head, checked.
    pub heads: Vec<crate::catalogue::heads::Head>,
    /// Every problem of the catalogue and the inventory.
    pub problems: Vec<mesh_model::Diagnostic>,
    /// What each head's next merge would orphan.
    pub orphans: Vec<ComingOrphans>,
    /// The keys set ahead of the version the nodes run; waiting is no problem.
    pub waiting: Vec<crate::catalogue::newest::Waiting>,
}

impl Check {
    /// Whether the catalogue and inventory are sound: no problem, in the home or at a head,
    /// and no setting a head would orphan. `check` exits 1 otherwise.
    pub fn sound(&self) -> bool {
        self.problems.is_empty()
            && self.orphans.is_empty()
            && self.heads.iter().all(|head| head.problems.is_empty())
    }
}

/// Checks the mesh as `check` does: `checked` (the catalogue the nodes run and its problems)
/// with the inventory, each registered repository's head, and the orphans and waiting keys.
/// Reads only.
///
/// # Errors
/// A record or a repository cannot be read.
pub fn check(home: &Home, checked: &Checked) -> Result<Check> {
    let mut problems = crate::push::problems(home, checked)?;
    problems.extend(unset_ahead(home, checked)?);
    problems.sort();
    // Heads first: a repository registered by URL is fetched there, and the orphans are read
    // at the commit fetched.
    let heads = crate::catalogue::heads::check_heads(home)?;
    let orphans = crate::settings::orphans::at_heads(home, checked, &heads)?;
    let waiting = crate::catalogue::newest::waiting(home, &checked.0, &home.inventory()?)?;
    let running = crate::catalogue::heads::read(home)?;
    Ok(Check {
        running,
        heads,
        problems,
        orphans,
        waiting,
    })
}

/// The settings the versions open plans will roll out require that no layer sets, each a
/// problem of its node (the version the nodes run names its own when composed): the plan would
/// hold the node until a layer sets them.
///
/// # Errors
/// A record or a repository cannot be read.
fn unset_ahead(home: &Home, checked: &Checked) -> Result<Vec<mesh_model::Diagnostic>> {
    let inventory = home.inventory()?;
    let modules: std::collections::BTreeSet<String> = home
        .plans()
        .all()?
        .into_iter()
        .filter(|record| record.plan.state.is_open())
        .flat_map(|record| record.plan.modules)
        .collect();
    let mut out = Vec::new();
    for module in modules {
        let Some(newest) = crate::catalogue::newest::newest_definition(home, &checked.0, &module)?
        else {
            continue;
        };
        let Some(plan) = &newest.plan else {
            continue;
        };
        for node in inventory.nodes_of(&module) {
            for key in mesh_plan::compose::keys_unset(&newest.definition, &inventory, node) {
                let running = checked.0.module(&module);
                if running.is_some_and(|m| m.definition.required.iter().any(|r| r == key)) {
                    // Composing the version the nodes run names it already.
                    continue;
                }
                out.push(mesh_model::Diagnostic::new(
                    mesh_model::inventory::INVENTORY_FILE,
                    None,
                    Some(&format!("nodes.{node}")),
                    format!(
                        "module `{module}` ({plan}'s version): the setting `{key}` is required, \
                         and no layer sets it here; the plan holds `{node}` until one does"
                    ),
                ));
            }
        }
    }
    Ok(out)
}
