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

use mesh_model::module::{Catalogue, DEFINITION_FILE};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

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
    // Changed paths come grouped by directory: the module just attributed needs no new lookup.
    let mut last: Option<&str> = None;
    for path in changed_paths {
        let module = path
            .strip_prefix(&prefix)
            .and_then(|rest| rest.split_once('/'))
            .map(|(module, _)| module)
            .filter(|module| !module.is_empty());
        match module {
            Some(module) if last == Some(module) => {}
            Some(module) if known.contains(module) || defined.contains(module) => {
                out.modules.insert(module.to_owned());
                last = Some(module);
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
        /// The modules of the cycle in dependency order (each depends on the next, the last on
        /// the first), starting at the first by name.
        cycle: Vec<String>,
    },
    /// A changed module is not in the dependency graph.
    #[error("`{module}` is not a module of the catalogue")]
    UnknownModule {
        /// The module.
        module: String,
    },
}

/// Moves the distinct values of a sorted slice to its front, returning how many there are.
fn dedup_sorted(row: &mut [u32]) -> usize {
    let mut unique = 0;
    for i in 0..row.len() {
        if unique == 0 || row[i] != row[unique - 1] {
            row[unique] = row[i];
            unique += 1;
        }
    }
    unique
}

/// FNV-1a: a small, fast hash for module names (no denial-of-service concern here).
#[derive(Clone, Copy, Default)]
struct BuildFnv;

struct Fnv(u64);

impl std::hash::BuildHasher for BuildFnv {
    type Hasher = Fnv;
    fn build_hasher(&self) -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
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
    /// Tier by tier: a module comes in the tier after the last of its affected dependencies;
    /// each tier sorted by name.
    pub tiers: Vec<Vec<String>>,
}

impl Tiers {
    /// The affected modules: the changed ones and every module depending on them, directly or
    /// not (every module of every tier).
    pub fn affected(&self) -> BTreeSet<&str> {
        self.tiers.iter().flatten().map(String::as_str).collect()
    }
}

/// The affected set (changed modules and their dependents) in tiers.
///
/// `graph` maps each module to the modules it depends on; a dependency not in the graph is
/// ignored (the catalogue's validation reports it). Builds a [`DependencyGraph`] and asks it;
/// keep the graph when planning more than once against the same catalogue.
///
/// # Errors
/// [`TierError::Cycle`] naming a cycle among the affected modules;
/// [`TierError::UnknownModule`] for a changed module the graph does not hold.
pub fn tiers(
    graph: &BTreeMap<String, Vec<String>>,
    changed: &BTreeSet<String>,
) -> Result<Tiers, TierError> {
    DependencyGraph::new(graph).tiers(changed)
}

/// A catalogue's dependencies, indexed once for planning: modules by number (in name order),
/// edges in flat arrays both ways, names in one buffer. Planning over it is linear in the
/// affected modules and their edges, and touches little memory.
#[derive(Debug, Clone)]
pub struct DependencyGraph {
    names: String,
    name_ends: Vec<usize>,
    index: HashMap<String, usize>,
    depends_start: Vec<usize>,
    depends_flat: Vec<u32>,
    dependents_start: Vec<usize>,
    dependents_flat: Vec<u32>,
}

impl DependencyGraph {
    /// Indexes `graph` (module → the modules it depends on). Unknown dependencies are ignored.
    /// Modules are numbered in 32 bits (a catalogue holds fewer than 2³² modules), which halves
    /// the memory planning walks.
    pub fn new(graph: &BTreeMap<String, Vec<String>>) -> Self {
        let count = graph.len();
        let mut index: HashMap<String, usize> = HashMap::with_capacity(count);
        let mut names = String::new();
        let mut name_ends = Vec::with_capacity(count);
        for (i, name) in graph.keys().enumerate() {
            index.insert(name.clone(), i);
            names.push_str(name);
            name_ends.push(names.len());
        }
        let mut depends_start = Vec::with_capacity(count + 1);
        let mut depends_flat: Vec<u32> = Vec::new();
        for deps in graph.values() {
            let start = depends_flat.len();
            depends_start.push(start);
            depends_flat.extend(
                deps.iter()
                    .filter_map(|d| index.get(d.as_str()).map(|&i| i as u32)),
            );
            let row = &mut depends_flat[start..];
            row.sort_unstable();
            let unique = dedup_sorted(row);
            depends_flat.truncate(start + unique);
        }
        depends_start.push(depends_flat.len());
        let mut dependents_start = vec![0usize; count + 1];
        for &dependency in &depends_flat {
            dependents_start[dependency as usize + 1] += 1;
        }
        for i in 0..count {
            dependents_start[i + 1] += dependents_start[i];
        }
        let mut dependents_flat = vec![0u32; depends_flat.len()];
        let mut fill = dependents_start.clone();
        for module in 0..count {
            for &dependency in &depends_flat[depends_start[module]..depends_start[module + 1]] {
                dependents_flat[fill[dependency as usize]] = module as u32;
                fill[dependency as usize] += 1;
            }
        }
        DependencyGraph {
            names,
            name_ends,
            index,
            depends_start,
            depends_flat,
            dependents_start,
            dependents_flat,
        }
    }

    /// How many modules the graph holds.
    pub fn len(&self) -> usize {
        self.name_ends.len()
    }

    /// Whether the graph holds no module.
    pub fn is_empty(&self) -> bool {
        self.name_ends.is_empty()
    }

    fn name(&self, module: usize) -> &str {
        let start = module.checked_sub(1).map_or(0, |m| self.name_ends[m]);
        &self.names[start..self.name_ends[module]]
    }

    fn depends_on(&self, module: usize) -> impl Iterator<Item = usize> + '_ {
        self.depends_flat[self.depends_start[module]..self.depends_start[module + 1]]
            .iter()
            .map(|&d| d as usize)
    }

    fn dependents(&self, module: usize) -> impl Iterator<Item = usize> + '_ {
        self.dependents_flat[self.dependents_start[module]..self.dependents_start[module + 1]]
            .iter()
            .map(|&d| d as usize)
    }

    /// The affected set (changed modules and their dependents) in tiers.
    ///
    /// # Errors
    /// As [`tiers`].
    pub fn tiers(&self, changed: &BTreeSet<String>) -> Result<Tiers, TierError> {
        let count = self.len();
        let mut affected = vec![false; count];
        let mut queue: VecDeque<usize> = VecDeque::new();
        for module in changed {
            let Some(&i) = self.index.get(module.as_str()) else {
                return Err(TierError::UnknownModule {
                    module: module.clone(),
                });
            };
            if !affected[i] {
                affected[i] = true;
                queue.push_back(i);
            }
        }
        while let Some(module) = queue.pop_front() {
            for dependent in self.dependents(module) {
                if !affected[dependent] {
                    affected[dependent] = true;
                    queue.push_back(dependent);
                }
            }
        }
        // Kahn's algorithm over the affected modules.
        let mut waiting_on: Vec<u32> = (0..count)
            .map(|m| {
                if affected[m] {
                    self.depends_on(m).filter(|&d| affected[d]).count() as u32
                } else {
                    0
                }
            })
            .collect();
        let mut current: Vec<usize> = (0..count)
            .filter(|&i| affected[i] && waiting_on[i] == 0)
            .collect();
        let total = affected.iter().filter(|a| **a).count();
        let mut tiers: Vec<Vec<String>> = Vec::new();
        let mut placed = 0;
        while !current.is_empty() {
            placed += current.len();
            let mut next = Vec::new();
            for &module in &current {
                for dependent in self.dependents(module) {
                    if affected[dependent] {
                        waiting_on[dependent] -= 1;
                        if waiting_on[dependent] == 0 {
                            next.push(dependent);
                        }
                    }
                }
            }
            // Numbers follow names, so sorting numbers sorts the tier by name.
            next.sort_unstable();
            tiers.push(current.iter().map(|&m| self.name(m).to_owned()).collect());
            current = next;
        }
        if placed < total {
            return Err(TierError::Cycle {
                cycle: self.a_cycle(|m| affected[m] && waiting_on[m] > 0),
            });
        }
        Ok(Tiers { tiers })
    }

    /// A cycle among the modules `left` holds, in dependency order from its first by name.
    ///
    /// Every module left waits on an affected dependency that is also left, so walking from
    /// the first of them along such dependencies comes back to a module already seen.
    fn a_cycle(&self, left: impl Fn(usize) -> bool) -> Vec<String> {
        let start = (0..self.len()).find(|&m| left(m)).unwrap_or_default();
        let mut seen_at: HashMap<usize, usize, BuildFnv> = HashMap::with_hasher(BuildFnv);
        let mut path = Vec::new();
        let mut module = start;
        while let std::collections::hash_map::Entry::Vacant(slot) = seen_at.entry(module) {
            slot.insert(path.len());
            path.push(module);
            module = self.depends_on(module).find(|&d| left(d)).unwrap_or(module);
        }
        let mut cycle: Vec<usize> = path[seen_at[&module]..].to_vec();
        let smallest = (0..cycle.len()).min_by_key(|&i| cycle[i]).unwrap_or(0);
        cycle.rotate_left(smallest);
        cycle.into_iter().map(|m| self.name(m).to_owned()).collect()
    }
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
        let result = tiers(&g, &changed).unwrap();
        assert_eq!(result.affected(), ["media", "net", "web"].into());
        insta::assert_json_snapshot!(result);
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
        // a depends on c, c on b, b on a.
        assert_eq!(error.to_string(), "dependency cycle: a -> c -> b -> a");
    }
}
