//! What a plan's rollouts would change on each node, module by module, composed as the
//! rollouts compose (the rule “A push says what it will change”, before a merge runs): the
//! pure core of the controller's merge preview.
//!
//! Start at [`Walk`]: made from what the nodes run and what each was last sent, it takes the
//! plan's modules in tier order ([`Walk::step`]), each at the plan's commit put over what the
//! modules before it left, and answers for every running node assigned the module its
//! declaration and what differs from what the node would hold by then — the same
//! [`crate::diff()`] `plan NODE --diff` shows. The caller says which nodes would be sent
//! ([`Walk::holds`]); a node it holds back (a move, an orphaned setting) keeps what it held.
//!
//! # Invariants
//! No IO, no clock: the catalogues, the inventory and what the nodes were sent arrive as values.

use crate::compose::{compose, ComposeError};
use crate::diff::{diff, DeclarationDiff};
use mesh_model::build::ArchiveRef;
use mesh_model::declaration::Declaration;
use mesh_model::inventory::Inventory;
use mesh_model::module::{load_catalogue, Catalogue, CatalogueSource, ModuleTree};
use std::collections::BTreeMap;

/// Where a preview stands: the catalogue as the rollouts previewed so far would leave it, and
/// what each node would hold.
#[derive(Debug, Clone)]
pub struct Walk {
    source: CatalogueSource,
    inventory: Inventory,
    holds: BTreeMap<String, Option<Declaration>>,
}

/// One module's rollout, previewed.
#[derive(Debug, Clone)]
pub struct ModuleStep {
    /// The catalogue its declarations are composed from.
    pub catalogue: Catalogue,
    /// The inventory they are composed for: without the assignments of modules the catalogue
    /// does not hold (they reach their nodes with their own rollouts).
    pub inventory: Inventory,
    /// Whether the module validates against what the mesh runs; nothing is composed when not.
    pub valid: bool,
    /// Each node assigned the module, by name.
    pub nodes: Vec<NodeStep>,
}

/// One node of a module's previewed rollout.
#[derive(Debug, Clone)]
pub struct NodeStep {
    /// The node.
    pub node: String,
    /// Whether it runs (a node that does not is never sent, and nothing is composed for it).
    pub running: bool,
    /// Its declaration and what differs from what it would hold before this module's rollout,
    /// or why it cannot be composed. `None` for a node not running.
    pub composed: Option<Result<(Declaration, DeclarationDiff), ComposeError>>,
}

impl Walk {
    /// A preview from what the nodes run (`running`: the home's catalogue overlaid with the
    /// deployed builds), the inventory, and what each node was last sent (`None`: never; a
    /// node missing from `sent` is taken as never sent).
    pub fn new(
        running: CatalogueSource,
        inventory: Inventory,
        sent: BTreeMap<String, Option<Declaration>>,
    ) -> Walk {
        Walk {
            source: running,
            inventory,
            holds: sent,
        }
    }

    /// `module` at the plan's commit (`tree`, and the `archive` its files reach the hosts in)
    /// put over what the earlier steps left, and each running node assigned it composed and
    /// diffed against what it would hold by then. `carry` brings over, from what a node holds,
    /// what a send carries that is not the modules' doing (the bus's users the node holding the
    /// bus was sent), as `plan --diff` carries it.
    pub fn step(
        &mut self,
        module: &str,
        tree: ModuleTree,
        archive: ArchiveRef,
        carry: &dyn Fn(Declaration, &Declaration) -> Declaration,
    ) -> ModuleStep {
        self.source.modules.insert(module.to_owned(), tree);
        self.source.archives.insert(module.to_owned(), archive);
        let (catalogue, _) = load_catalogue(&self.source);
        let mut inventory = self.inventory.clone();
        inventory.retain_assignments(|m| catalogue.module(m).is_some() || m == module);
        let valid = catalogue.module(module).is_some();
        let mut nodes = Vec::new();
        if valid {
            for node in inventory.nodes_of(module) {
                let running = inventory.file.nodes.get(node).is_some_and(|n| n.running);
                let composed = running.then(|| {
                    let before = self.holds.get(node).cloned().flatten();
                    compose(&catalogue, &inventory, node).map(|declaration| {
                        let declaration = match &before {
                            Some(before) => carry(declaration, before),
                            None => declaration,
                        };
                        let changes = diff(before.as_ref(), &declaration);
                        (declaration, changes)
                    })
                });
                nodes.push(NodeStep {
                    node: node.to_owned(),
                    running,
                    composed,
                });
            }
        }
        ModuleStep {
            catalogue,
            inventory,
            valid,
            nodes,
        }
    }

    /// `node` would hold `declaration` once sent: the next modules' changes are diffed
    /// against it.
    pub fn holds(&mut self, node: &str, declaration: Declaration) {
        self.holds.insert(node.to_owned(), Some(declaration));
    }
}

#[cfg(test)]
mod tests;
