//! The order an apply takes: units (a lone resource, or a whole together group) sorted so every
//! unit comes after what it depends on.
//!
//! A resource depends on what its `after` names, and implicitly on the declared directory nearest
//! above its path, on the files a container restarts on, and on the directories it mounts. Among
//! units that are free to go, directories go first (shallowest first), then files, memberships,
//! jobs, containers; ties by id, so the order is a pure function of the declaration.

use crate::paths::depth;
use mesh_model::declaration::{Declaration, Declared, Resource, Spec};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A lone resource or a together group, applied as one.
#[derive(Debug)]
pub(crate) struct Unit {
    /// The together group's name (`<module>/<group>`), if it is one.
    pub(crate) group: Option<String>,
    /// Indices into the declaration's resources, in commit order.
    pub(crate) members: Vec<usize>,
    /// Ids of resources outside the unit it depends on.
    pub(crate) deps: BTreeSet<String>,
}

type Key<'a> = (u8, usize, &'a str);

fn key(resource: &Resource) -> Key<'_> {
    let (phase, path_depth) = match &resource.spec {
        Spec::Directory(d) => (0, depth(&d.path)),
        Spec::File(f) => (1, depth(&f.path)),
        Spec::Account(_) => (2, 0),
        Spec::Network(_) => (3, 0),
        Spec::Job(_) => (4, 0),
        Spec::Container(_) => (5, 0),
        // A membership, and any other kind: after the files and accounts, before what runs.
        _ => (2, 1),
    };
    (phase, path_depth, resource.id.as_str())
}

/// A declaration's units in apply order, and the units caught in a dependency cycle.
pub(crate) type Order = (Vec<Unit>, Vec<Unit>);

/// [`units_in_order`] of `declaration`, computed once per sealed declaration (kept in its
/// [`Declared::derived`] slot) when `declaration` is `sent`'s own; computed again otherwise.
pub(crate) fn order_of(declaration: &Declaration, sent: &dyn Declared) -> Arc<Order> {
    let slot = sent
        .derived()
        .filter(|_| std::ptr::eq(sent.declaration(), declaration));
    let Some(slot) = slot else {
        return Arc::new(units_in_order(declaration));
    };
    let kept = slot.get_or_init(|| -> Arc<dyn std::any::Any + Send + Sync> {
        Arc::new(units_in_order(declaration))
    });
    match Arc::clone(kept).downcast::<Order>() {
        Ok(order) => order,
        // Another consumer's slot: derive it here.
        Err(_) => Arc::new(units_in_order(declaration)),
    }
}

/// The units of a declaration in apply order, and the units caught in a dependency cycle.
pub(crate) fn units_in_order(declaration: &Declaration) -> Order {
    let resources = &declaration.resources;
    let directories: BTreeMap<&str, &str> = resources
        .iter()
        .filter_map(|r| match &r.spec {
            Spec::Directory(d) => Some((d.path.as_str(), r.id.as_str())),
            _ => None,
        })
        .collect();
    // Resources are sorted by id (a declaration's rule).
    let declared = |id: &str| {
        resources
            .binary_search_by(|r| r.id.as_str().cmp(id))
            .is_ok()
    };

    // Group resources into units.
    let mut unit_of_group: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut units: Vec<Unit> = Vec::new();
    let mut unit_of_resource: Vec<usize> = Vec::with_capacity(resources.len());
    for (index, resource) in resources.iter().enumerate() {
        let unit = match &resource.together {
            Some(group) => *unit_of_group
                .entry((resource.module.clone(), group.clone()))
                .or_insert_with(|| {
                    units.push(Unit {
                        group: Some(format!("{}/{group}", resource.module)),
                        members: Vec::new(),
                        deps: BTreeSet::new(),
                    });
                    units.len() - 1
                }),
            None => {
                units.push(Unit {
                    group: None,
                    members: Vec::new(),
                    deps: BTreeSet::new(),
                });
                units.len() - 1
            }
        };
        units[unit].members.push(index);
        unit_of_resource.push(unit);
    }

    // Dependencies, explicit and implicit.
    for (index, resource) in resources.iter().enumerate() {
        let mut deps: Vec<&str> = resource.after.iter().map(String::as_str).collect();
        let nearest_directory = |path: &str| -> Option<&str> {
            let mut current = path;
            while let Some(cut) = current.rfind('/') {
                current = &current[..cut];
                if let Some(id) = directories.get(current) {
                    return Some(id);
                }
            }
            None
        };
        match &resource.spec {
            Spec::File(f) => deps.extend(nearest_directory(&f.path)),
            Spec::Directory(d) => deps.extend(nearest_directory(&d.path)),
            Spec::Job(j) => {
                deps.extend(
                    j.rerun_on
                        .iter()
                        .map(String::as_str)
                        .filter(|id| declared(id)),
                );
                for mount in &j.run.mounts {
                    if let Some(id) = directories.get(mount.source.as_str()) {
                        deps.push(id);
                    }
                }
            }
            Spec::Container(c) => {
                deps.extend(
                    c.restart_on
                        .iter()
                        .map(String::as_str)
                        .filter(|id| declared(id)),
                );
                for mount in &c.mounts {
                    if let Some(id) = directories.get(mount.source.as_str()) {
                        deps.push(id);
                    }
                }
            }
            // The other kinds depend on nothing but what they name `after`.
            _ => {}
        }
        let unit = unit_of_resource[index];
        for dep in deps {
            let dep_unit = resources
                .binary_search_by(|r| r.id.as_str().cmp(dep))
                .ok()
                .map(|i| unit_of_resource[i]);
            if dep_unit.is_some_and(|u| u != unit) {
                units[unit].deps.insert(dep.to_owned());
            }
        }
    }
    for unit in &mut units {
        unit.members.sort_by_key(|&i| key(&resources[i]));
    }

    // Kahn's algorithm, smallest key first.
    let unit_key = |u: &Unit| key(&resources[u.members[0]]);
    let mut waiting_on: Vec<usize> = vec![0; units.len()];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); units.len()];
    for (u, unit) in units.iter().enumerate() {
        let dep_units: BTreeSet<usize> = unit
            .deps
            .iter()
            .filter_map(|id| {
                resources
                    .binary_search_by(|r| r.id.as_str().cmp(id))
                    .ok()
                    .map(|i| unit_of_resource[i])
            })
            .collect();
        waiting_on[u] = dep_units.len();
        for d in dep_units {
            dependents[d].push(u);
        }
    }
    let mut ready: BTreeSet<(Key, usize)> = units
        .iter()
        .enumerate()
        .filter(|(u, _)| waiting_on[*u] == 0)
        .map(|(u, unit)| (unit_key(unit), u))
        .collect();
    let mut sorted = Vec::with_capacity(units.len());
    while let Some((_, u)) = ready.pop_first() {
        sorted.push(u);
        for &d in &dependents[u] {
            waiting_on[d] -= 1;
            if waiting_on[d] == 0 {
                ready.insert((unit_key(&units[d]), d));
            }
        }
    }
    let mut in_order = vec![false; units.len()];
    for &u in &sorted {
        in_order[u] = true;
    }
    let mut slots: Vec<Option<Unit>> = units.into_iter().map(Some).collect();
    let ordered = sorted
        .iter()
        .map(|&u| slots[u].take().expect("each unit once"))
        .collect();
    let cyclic = slots
        .into_iter()
        .enumerate()
        .filter(|(u, _)| !in_order[*u])
        .filter_map(|(_, unit)| unit)
        .collect();
    (ordered, cyclic)
}
