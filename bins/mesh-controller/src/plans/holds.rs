//! A rollout held for orphaned settings whose hold the layers have ended since (the rule "An
//! orphaned setting is a removal": once `settings rename` or `settings set … --replace` leaves
//! none, the node goes on by itself), or for a required setting a layer now sets. The daemon
//! asks this of each plan resting open, so it drives it again with no merge and no command.

use super::PlanRecord;
use crate::error::Result;
use crate::home::Home;
use mesh_model::inventory::Layers;
use mesh_plan::rollout::NodeProgress;

/// Whether the layers still set `orphan`'s key to the value it was held for.
fn still_set(orphan: &mesh_plan::Orphan, layers: &Layers) -> bool {
    layers
        .get(&orphan.module, &orphan.layer)
        .and_then(|layer| {
            orphan
                .key
                .split('.')
                .try_fold(layer, |value, key| value.get(key))
        })
        .is_some_and(|value| *value == orphan.value)
}

/// Whether a layer sets `unset`'s key for `node` now (the mesh layer or the node's).
fn set_now(unset: &mesh_plan::Unset, node: &str, layers: &Layers) -> bool {
    [
        mesh_model::inventory::LayerScope::Mesh,
        mesh_model::inventory::LayerScope::Node(node.to_owned()),
    ]
    .iter()
    .any(|scope| {
        layers
            .get(&unset.module, scope)
            .and_then(|layer| layer.get(&unset.key))
            .is_some()
    })
}

/// Whether a node of `record`'s rollouts is held for orphaned settings none of which its
/// layers still set as they were, or for a required setting a layer sets now.
///
/// # Errors
/// The inventory or a rollout's nodes cannot be read.
pub(crate) fn hold_ended(home: &Home, record: &PlanRecord) -> Result<bool> {
    let held: Vec<&String> = record
        .plan
        .rollouts
        .iter()
        .filter(|(_, rollout)| rollout.held > 0)
        .map(|(module, _)| module)
        .collect();
    if held.is_empty() {
        return Ok(false);
    }
    let layers = home.inventory()?.layers;
    for module in held {
        for node in home.plans().rollout_nodes(&record.plan.id, module)? {
            if let NodeProgress::Held { orphans, unset, .. } = &node.progress {
                if !orphans.is_empty() && !orphans.iter().any(|o| still_set(o, &layers)) {
                    return Ok(true);
                }
                if unset.iter().any(|u| set_now(u, &node.node, &layers)) {
                    return Ok(true);
                }
            }
        }
    }
    Ok(false)
}
