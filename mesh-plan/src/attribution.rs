//! Which modules a merge changed, from the paths it changed (rule 17, seed issue 252), and the
//! tiers they are built and rolled out in (rule 16's input, ADR 0162/0218).
//!
//! Start at [`attribute`], then [`tiers`].
//!
//! A catalogue repository keeps each module in `<modules dir>/<name>/` with its definition at
//! `<modules dir>/<name>/module.toml`. A changed path
//! - in a known module's directory is that module's;
//! - in a sibling directory (one the mesh does not know as a module) is that new — or removed —
//!   module's own when its definition is among the changed paths;
//! - in a sibling without a definition among the changes (shared code), or anywhere outside the
//!   module directories (a root file), means every module of the repository: the safe direction.
//!
//! The caller reads the changed paths whole (every page of them); attribution never guesses at
//! a list it was not given.

use mesh_model::module::{find_cycles, Catalogue, DEFINITION_FILE};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The modules a merge changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Attribution {
    /// Modules whose own directories changed (known ones, and new or removed ones whose
    /// definition is among the changed paths).
    pub modules: BTreeSet<String>,
    /// Changed paths that belong to no one module: each means every module of the repository.
    pub shared: Vec<String>,
}

impl Attribution {
    /// Whether the change touches every module (a shared or root path changed).
    pub fn everything(&self) -> bool {
        !self.shared.is_empty()
    }

    /// The changed modules among `repository_modules` (the modules at the merged commit): all of
    /// them when a shared path changed, otherwise the attributed ones that still exist (a
    /// removed module has nothing to build).
    pub fn changed_modules(&self, repository_modules: &BTreeSet<String>) -> BTreeSet<String> {
        if self.everything() {
            repository_modules.clone()
        } else {
            self.modules
                .intersection(repository_modules)
                .cloned()
                .collect()
        }
    }
}

/// Attributes changed paths (relative to the repository root, `/`-separated) to modules.
///
/// `modules_dir` is the directory holding module directories (`modules`); `known` the modules
/// the mesh holds for this repository.
pub fn attribute(
    changed_paths: &[String],
    modules_dir: &str,
    known: &BTreeSet<String>,
) -> Attribution {
    let prefix = format!("{}/", modules_dir.trim_end_matches('/'));
    let defined: BTreeSet<&str> = changed_paths
        .iter()
        .filter_map(|path| {
            let (module, rest) = path.strip_prefix(&prefix)?.split_once('/')?;
            (rest == DEFINITION_FILE).then_some(module)
        })
        .collect();
    let mut out = Attribution::default();
    for path in changed_paths {
        let module = path
            .strip_prefix(&prefix)
            .and_then(|rest| rest.split_once('/'))
            .map(|(module, _)| module)
            .filter(|module| !module.is_empty());
        match module {
            Some(module) if known.contains(module) || defined.contains(module) => {
                out.modules.insert(module.to_owned());
            }
            Some(_) | None => out.shared.push(path.clone()),
        }
    }
    out.shared.sort();
    out
}

/// A module's dependencies (`depends`) by module, from a catalogue.
pub fn dependency_graph(catalogue: &Catalogue) -> BTreeMap<String, Vec<String>> {
    catalogue
        .modules
        .iter()
        .map(|(name, module)| (name.clone(), module.definition.depends.clone()))
        .collect()
}

/// Why tiers could not be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TierError {
    /// The affected modules depend on each other in a circle.
    #[error("dependency cycle: {}", cycle_text(cycle))]
    Cycle {
        /// The modules of the cycle, sorted by name.
        cycle: Vec<String>,
    },
    /// A changed module is not in the dependency graph.
    #[error("`{module}` is not a module of the catalogue")]
    UnknownModule {
        /// The module.
        module: String,
    },
}

fn cycle_text(cycle: &[String]) -> String {
    match cycle.first() {
        Some(first) => format!("{} -> {first}", cycle.join(" -> ")),
        None => String::new(),
    }
}

/// The affected modules in build order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Tiers {
    /// The changed modules and every module depending on them, directly or not.
    pub affected: BTreeSet<String>,
    /// Tier by tier: a module comes in the tier after the last of its affected dependencies;
    /// each tier sorted by name.
    pub tiers: Vec<Vec<String>>,
}

/// The affected set (changed modules and their dependents) in tiers.
///
/// `graph` maps each module to the modules it depends on; a dependency not in the graph is
/// ignored (the catalogue's validation reports it). Linear in modules plus edges.
///
/// # Errors
/// [`TierError::Cycle`] naming the first cycle among the affected modules;
/// [`TierError::UnknownModule`] for a changed module the graph does not hold.
pub fn tiers(
    graph: &BTreeMap<String, Vec<String>>,
    changed: &BTreeSet<String>,
) -> Result<Tiers, TierError> {
    if let Some(module) = changed.iter().find(|m| !graph.contains_key(*m)) {
        return Err(TierError::UnknownModule {
            module: module.clone(),
        });
    }
    let mut dependents: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (module, depends) in graph {
        for dependency in depends {
            if graph.contains_key(dependency) {
                dependents
                    .entry(dependency.as_str())
                    .or_default()
                    .push(module.as_str());
            }
        }
    }
    let mut affected: BTreeSet<&str> = changed.iter().map(String::as_str).collect();
    let mut queue: VecDeque<&str> = affected.iter().copied().collect();
    while let Some(module) = queue.pop_front() {
        for &dependent in dependents.get(module).map(Vec::as_slice).unwrap_or(&[]) {
            if affected.insert(dependent) {
                queue.push_back(dependent);
            }
        }
    }
    // Kahn's algorithm over the affected modules.
    let mut waiting_on: BTreeMap<&str, usize> = affected
        .iter()
        .map(|&module| {
            let count = graph[module]
                .iter()
                .filter(|d| affected.contains(d.as_str()))
                .collect::<BTreeSet<_>>()
                .len();
            (module, count)
        })
        .collect();
    let mut tiers: Vec<Vec<String>> = Vec::new();
    let mut current: Vec<&str> = waiting_on
        .iter()
        .filter(|(_, count)| **count == 0)
        .map(|(module, _)| *module)
        .collect();
    let mut placed = 0;
    while !current.is_empty() {
        placed += current.len();
        let mut next = Vec::new();
        for &module in &current {
            let mut seen = BTreeSet::new();
            for &dependent in dependents.get(module).map(Vec::as_slice).unwrap_or(&[]) {
                if !seen.insert(dependent) {
                    continue;
                }
                if let Some(count) = waiting_on.get_mut(dependent) {
                    *count -= 1;
                    if *count == 0 {
                        next.push(dependent);
                    }
                }
            }
        }
        next.sort_unstable();
        tiers.push(current.iter().map(|m| (*m).to_owned()).collect());
        current = next;
    }
    if placed < affected.len() {
        let rest: BTreeMap<&str, Vec<&str>> = waiting_on
            .iter()
            .filter(|(_, count)| **count > 0)
            .map(|(&module, _)| {
                let deps = graph[module]
                    .iter()
                    .map(String::as_str)
                    .filter(|d| affected.contains(d))
                    .collect();
                (module, deps)
            })
            .collect();
        let cycle = find_cycles(&rest).into_iter().next().unwrap_or_default();
        return Err(TierError::Cycle { cycle });
    }
    Ok(Tiers {
        affected: affected.into_iter().map(str::to_owned).collect(),
        tiers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attributes paths (one a line) with the known modules `a`, `b`, `c` and shows the result.
    fn check(paths: &str) -> String {
        let paths: Vec<String> = paths
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        let known: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
        let attribution = attribute(&paths, "modules", &known);
        serde_json::to_string_pretty(&attribution).unwrap()
    }

    #[test]
    fn a_path_in_a_modules_directory_is_that_modules() {
        insta::assert_snapshot!(check(
            "modules/a/files/config.toml
             modules/a/module.toml
             modules/c/README.md"
        ));
    }

    /// Seed issue 252 ("too many"): a new module's directory counted as shared code and planned
    /// every module. With its definition among the changed paths it is that module's own.
    #[test]
    fn a_new_modules_own_directory_with_its_definition_plans_one_module() {
        let text = check(
            "modules/fresh/module.toml
             modules/fresh/files/run.sh",
        );
        insta::assert_snapshot!(text);
        let known: BTreeSet<String> = ["a", "fresh"].map(String::from).into();
        let paths = ["modules/fresh/module.toml".to_owned()];
        assert_eq!(
            attribute(&paths, "modules", &BTreeSet::new()).changed_modules(&known),
            ["fresh".to_owned()].into()
        );
    }

    /// Seed issue 252: a removed module's definition is among the changed paths too; it is that
    /// module's own change, and has nothing left to build.
    #[test]
    fn a_removed_modules_directory_plans_nothing_else() {
        let paths = [
            "modules/gone/module.toml".to_owned(),
            "modules/gone/files/x".to_owned(),
        ];
        let attribution = attribute(&paths, "modules", &BTreeSet::new());
        assert!(!attribution.everything());
        let now: BTreeSet<String> = ["a", "b"].map(String::from).into();
        assert!(attribution.changed_modules(&now).is_empty());
    }

    /// Seed issue 252: a sibling without a definition (a shared library) means every module.
    #[test]
    fn a_shared_sibling_without_a_definition_plans_all() {
        insta::assert_snapshot!(check(
            "modules/lib/common.sh
             modules/a/files/x"
        ));
        let all: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
        let paths = ["modules/lib/common.sh".to_owned()];
        assert_eq!(
            attribute(&paths, "modules", &all).changed_modules(&all),
            all
        );
    }

    #[test]
    fn a_root_file_plans_all() {
        insta::assert_snapshot!(check(
            "README.md
             modules/notes.md"
        ));
    }

    /// Seed issue 252 ("too few"): a 59-file merge arrived as 50 files (one forge page). Every
    /// changed path given is read: the 59th file's module is planned.
    #[test]
    fn a_59_file_change_is_read_whole() {
        let mut paths: Vec<String> = (0..58).map(|i| format!("modules/a/files/f{i}")).collect();
        paths.push("modules/b/files/the-59th".to_owned());
        let known: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
        let attribution = attribute(&paths, "modules", &known);
        assert_eq!(attribution.modules, ["a", "b"].map(String::from).into());
        assert!(!attribution.everything());
    }

    fn graph(edges: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        edges
            .iter()
            .map(|(m, deps)| {
                (
                    (*m).to_owned(),
                    deps.iter().map(|d| (*d).to_owned()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn affected_modules_are_the_changed_and_their_dependents_in_tiers() {
        let g = graph(&[
            ("base", &[]),
            ("net", &["base"]),
            ("media", &["net", "base"]),
            ("web", &["net"]),
            ("lonely", &[]),
            ("tools", &["lonely"]),
        ]);
        let changed = ["net".to_owned()].into();
        insta::assert_json_snapshot!(tiers(&g, &changed).unwrap());
        let changed = ["base".to_owned(), "lonely".to_owned()].into();
        insta::assert_json_snapshot!("two_roots", tiers(&g, &changed).unwrap());
    }

    #[test]
    fn a_cycle_is_an_error_naming_it() {
        let g = graph(&[
            ("base", &[]),
            ("a", &["base", "c"]),
            ("b", &["a"]),
            ("c", &["b"]),
        ]);
        let error = tiers(&g, &["base".to_owned()].into()).unwrap_err();
        assert_eq!(error.to_string(), "dependency cycle: a -> b -> c -> a");
    }
}
