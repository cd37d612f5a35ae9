//! Which modules a merge changed, from the paths it changed (the rule “Changed paths name their
//! modules”), and the tiers they are built and rolled out in (the input of the rule “A newer merge
//! takes over an older plan”).
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
use std::collections::{BTreeMap, BTreeSet, HashMap};

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

/// A catalogue's dependencies, indexed once for planning.
///
/// Modules are numbered by name (names in one buffer) and placed in dependency order once, when
/// the graph is built: every module after the modules it depends on (those in or after a
/// dependency cycle come last, by name). Planning is then one pass in that order over flat
/// arrays: each module's tier is one more than the deepest tier among its dependencies, read
/// from a table of four bytes a module. No walk jumps from module to module along the edges
/// (a breadth-first walk and Kahn's algorithm did, and their scattered reads of edge lists
/// grew dearer per module as the catalogue outgrew the fastest cache).
#[derive(Debug, Clone)]
pub struct DependencyGraph {
    /// Every name, in name order, one after another.
    names: String,
    /// Where each name ends in `names`, by module number.
    name_ends: Vec<usize>,
    /// Module number by name.
    index: HashMap<String, u32, BuildFnv>,
    /// Each module's place in dependency order, by module number.
    place: Vec<u32>,
    /// The module number at each place.
    module_at: Vec<u32>,
    /// How many places come in dependency order; the places after them hold the modules in a
    /// dependency cycle or depending on one, by name.
    ordered: usize,
    /// Where each place's dependencies start in `depends_flat`, by place (one more at the end).
    depends_start: Vec<usize>,
    /// The places of each place's dependencies, one row after another, each row by name.
    depends_flat: Vec<u32>,
}

impl DependencyGraph {
    /// Indexes `graph` (module → the modules it depends on). Unknown dependencies are ignored.
    /// Modules are numbered in 32 bits (a catalogue holds fewer than 2³² modules), which halves
    /// the memory planning reads.
    pub fn new(graph: &BTreeMap<String, Vec<String>>) -> Self {
        let count = graph.len();
        let mut index: HashMap<String, u32, BuildFnv> =
            HashMap::with_capacity_and_hasher(count, BuildFnv);
        let mut names = String::new();
        let mut name_ends = Vec::with_capacity(count);
        for (i, name) in graph.keys().enumerate() {
            index.insert(name.clone(), i as u32);
            names.push_str(name);
            name_ends.push(names.len());
        }
        // Dependencies by module number, each row sorted and without repeats.
        let mut by_module_start = Vec::with_capacity(count + 1);
        let mut by_module: Vec<u32> = Vec::new();
        for deps in graph.values() {
            let start = by_module.len();
            by_module_start.push(start);
            by_module.extend(deps.iter().filter_map(|d| index.get(d.as_str()).copied()));
            let row = &mut by_module[start..];
            row.sort_unstable();
            let unique = dedup_sorted(row);
            by_module.truncate(start + unique);
        }
        by_module_start.push(by_module.len());
        let row = |m: usize| &by_module[by_module_start[m]..by_module_start[m + 1]];
        // Dependents by module number, to place modules in dependency order (Kahn's algorithm).
        let mut dependents_start = vec![0usize; count + 1];
        for &dependency in &by_module {
            dependents_start[dependency as usize + 1] += 1;
        }
        for i in 0..count {
            dependents_start[i + 1] += dependents_start[i];
        }
        let mut dependents = vec![0u32; by_module.len()];
        let mut fill = dependents_start.clone();
        for module in 0..count {
            for &dependency in row(module) {
                dependents[fill[dependency as usize]] = module as u32;
                fill[dependency as usize] += 1;
            }
        }
        let mut waiting: Vec<usize> = (0..count).map(|m| row(m).len()).collect();
        let mut module_at: Vec<u32> = (0..count as u32)
            .filter(|&m| waiting[m as usize] == 0)
            .collect();
        let mut next = 0;
        while let Some(&module) = module_at.get(next) {
            next += 1;
            let module = module as usize;
            for &dependent in &dependents[dependents_start[module]..dependents_start[module + 1]] {
                waiting[dependent as usize] -= 1;
                if waiting[dependent as usize] == 0 {
                    module_at.push(dependent);
                }
            }
        }
        let ordered = module_at.len();
        module_at.extend((0..count as u32).filter(|&m| waiting[m as usize] > 0));
        let mut place = vec![0u32; count];
        for (at, &module) in module_at.iter().enumerate() {
            place[module as usize] = at as u32;
        }
        let mut depends_start = Vec::with_capacity(count + 1);
        let mut depends_flat = Vec::with_capacity(by_module.len());
        for &module in &module_at {
            depends_start.push(depends_flat.len());
            depends_flat.extend(row(module as usize).iter().map(|&d| place[d as usize]));
        }
        depends_start.push(depends_flat.len());
        DependencyGraph {
            names,
            name_ends,
            index,
            place,
            module_at,
            ordered,
            depends_start,
            depends_flat,
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

    /// The name of the module numbered `module`.
    fn name(&self, module: usize) -> &str {
        let start = module.checked_sub(1).map_or(0, |m| self.name_ends[m]);
        &self.names[start..self.name_ends[module]]
    }

    /// The places of the dependencies of the module at `at`, by name.
    fn depends_on(&self, at: usize) -> impl Iterator<Item = usize> + '_ {
        self.depends_flat[self.depends_start[at]..self.depends_start[at + 1]]
            .iter()
            .map(|&d| d as usize)
    }

    /// The affected set (changed modules and their dependents) in tiers.
    ///
    /// Linear in the modules and edges placed after the first changed module: one pass reads
    /// the edge arrays front to back, and reads at random only the table of tiers (four bytes a
    /// module) — never an edge list or a name through another module's edges.
    ///
    /// # Errors
    /// As [`tiers`].
    pub fn tiers(&self, changed: &BTreeSet<String>) -> Result<Tiers, TierError> {
        // Each module's tier by place: 0 while unaffected.
        let mut tier = vec![0u32; self.len()];
        let mut first = self.len();
        for module in changed {
            let Some(&m) = self.index.get(module.as_str()) else {
                return Err(TierError::UnknownModule {
                    module: module.clone(),
                });
            };
            let at = self.place[m as usize] as usize;
            tier[at] = 1;
            first = first.min(at);
        }
        // In dependency order, a module's dependencies have their tiers when it comes; nothing
        // before the first changed module is affected.
        for at in first.min(self.ordered)..self.ordered {
            let deepest = self.depends_on(at).map(|d| tier[d]).max().unwrap_or(0);
            if deepest > 0 {
                tier[at] = deepest + 1;
            }
        }
        if self.ordered < self.len() {
            self.tiers_past_cycles(&mut tier)?;
        }
        // Tiers filled in name order are sorted by name.
        let mut sizes: Vec<usize> = Vec::new();
        for &t in &tier {
            let t = t as usize;
            if t > 0 {
                if sizes.len() < t {
                    sizes.resize(t, 0);
                }
                sizes[t - 1] += 1;
            }
        }
        let mut tiers: Vec<Vec<String>> = sizes.into_iter().map(Vec::with_capacity).collect();
        for (module, &at) in self.place.iter().enumerate() {
            let t = tier[at as usize] as usize;
            if t > 0 {
                tiers[t - 1].push(self.name(module).to_owned());
            }
        }
        Ok(Tiers { tiers })
    }

    /// Gives tiers to the affected modules placed after the ordered ones (in a dependency
    /// cycle or depending on one), by Kahn's algorithm over them: a catalogue without a cycle
    /// never comes here.
    ///
    /// # Errors
    /// [`TierError::Cycle`] when affected modules depend on each other in a circle.
    fn tiers_past_cycles(&self, tier: &mut [u32]) -> Result<(), TierError> {
        let ordered = self.ordered;
        let rest = self.len() - ordered;
        // Dependents among the rest (only modules of the rest depend on one of them).
        let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); rest];
        for at in ordered..self.len() {
            for d in self.depends_on(at).filter(|&d| d >= ordered) {
                dependents[d - ordered].push(at);
            }
        }
        let mut affected: Vec<bool> = (ordered..self.len())
            .map(|at| tier[at] > 0 || self.depends_on(at).any(|d| d < ordered && tier[d] > 0))
            .collect();
        let mut queue: Vec<usize> = (0..rest).filter(|&r| affected[r]).collect();
        while let Some(r) = queue.pop() {
            for &dependent in &dependents[r] {
                if !affected[dependent - ordered] {
                    affected[dependent - ordered] = true;
                    queue.push(dependent - ordered);
                }
            }
        }
        let mut waiting: Vec<usize> = (0..rest)
            .map(|r| {
                self.depends_on(ordered + r)
                    .filter(|&d| d >= ordered && affected[d - ordered])
                    .count()
            })
            .collect();
        let mut ready: Vec<usize> = (0..rest)
            .filter(|&r| affected[r] && waiting[r] == 0)
            .collect();
        while let Some(r) = ready.pop() {
            let at = ordered + r;
            let deepest = self.depends_on(at).map(|d| tier[d]).max().unwrap_or(0);
            tier[at] = tier[at].max(deepest + 1);
            for &dependent in &dependents[r] {
                let d = dependent - ordered;
                if affected[d] {
                    waiting[d] -= 1;
                    if waiting[d] == 0 {
                        ready.push(d);
                    }
                }
            }
        }
        if (0..rest).any(|r| affected[r] && waiting[r] > 0) {
            return Err(TierError::Cycle {
                cycle: self.a_cycle(|at| {
                    at >= ordered && affected[at - ordered] && waiting[at - ordered] > 0
                }),
            });
        }
        Ok(())
    }

    /// A cycle among the places `left` holds, in dependency order from its first by name.
    ///
    /// Every module left waits on an affected dependency that is also left, so walking from
    /// the first of them along such dependencies (the first by name) comes back to a module
    /// already seen.
    fn a_cycle(&self, left: impl Fn(usize) -> bool) -> Vec<String> {
        let start = (0..self.len())
            .map(|m| self.place[m] as usize)
            .find(|&at| left(at))
            .unwrap_or_default();
        let mut seen_at: HashMap<usize, usize, BuildFnv> = HashMap::with_hasher(BuildFnv);
        let mut path = Vec::new();
        let mut at = start;
        while let std::collections::hash_map::Entry::Vacant(slot) = seen_at.entry(at) {
            slot.insert(path.len());
            path.push(self.module_at[at] as usize);
            at = self
                .depends_on(at)
                .filter(|&d| left(d))
                .min_by_key(|&d| self.module_at[d])
                .unwrap_or(at);
        }
        let mut cycle: Vec<usize> = path[seen_at[&at]..].to_vec();
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

    /// The incident behind “Changed paths name their modules” ("too many"): a new module's
    /// directory counted as shared code and planned every module. With its definition among the
    /// changed paths it is that module's own.
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

    /// The incident behind “Changed paths name their modules”: a removed module's definition is
    /// among the changed paths too; it is that module's own change, and has nothing left to build.
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

    /// The incident behind “Changed paths name their modules”: a sibling without a definition (a
    /// shared library) means every module.
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

    /// The incident behind “Changed paths name their modules” ("too few"): a 59-file merge arrived
    /// as 50 files (one forge page). Every changed path given is read: the 59th file's module is
    /// planned.
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

    /// A catalogue with a cycle still plans a change the cycle is not part of, including a
    /// module depending on the cycle that the change reaches another way.
    #[test]
    fn a_cycle_outside_the_affected_modules_does_not_matter() {
        let g = graph(&[
            ("base", &[]),
            ("x", &["y"]),
            ("y", &["x"]),
            ("after", &["x", "base"]),
            ("late", &["after"]),
            ("self", &["self"]),
            ("p", &["r", "q"]),
            ("q", &["p"]),
            ("r", &["p"]),
        ]);
        let result = tiers(&g, &["base".to_owned()].into()).unwrap();
        assert_eq!(result.tiers, [["base"], ["after"], ["late"]]);
        let error = tiers(&g, &["late".to_owned(), "y".to_owned()].into()).unwrap_err();
        assert_eq!(error.to_string(), "dependency cycle: x -> y -> x");
        let error = tiers(&g, &["self".to_owned()].into()).unwrap_err();
        assert_eq!(error.to_string(), "dependency cycle: self -> self");
        // Of two cycles through `p`, the one by the first dependency by name.
        let error = tiers(&g, &["p".to_owned()].into()).unwrap_err();
        assert_eq!(error.to_string(), "dependency cycle: p -> q -> p");
        assert_eq!(
            tiers(&g, &["nowhere".to_owned()].into()).unwrap_err(),
            TierError::UnknownModule {
                module: "nowhere".into()
            }
        );
    }

    /// Tiers the plain way: the affected set grown until it stops growing, then tier after
    /// tier the modules whose affected dependencies are all placed; `None` for a cycle.
    fn plain_tiers(
        graph: &BTreeMap<String, Vec<String>>,
        changed: &BTreeSet<String>,
    ) -> Option<Vec<Vec<String>>> {
        let mut affected = changed.clone();
        loop {
            let more: Vec<String> = graph
                .iter()
                .filter(|(m, deps)| {
                    !affected.contains(*m) && deps.iter().any(|d| affected.contains(d))
                })
                .map(|(m, _)| m.clone())
                .collect();
            if more.is_empty() {
                break;
            }
            affected.extend(more);
        }
        let mut placed = BTreeSet::new();
        let mut out = Vec::new();
        while placed.len() < affected.len() {
            let tier: Vec<String> = affected
                .iter()
                .filter(|m| !placed.contains(*m))
                .filter(|m| {
                    graph[*m]
                        .iter()
                        .all(|d| !affected.contains(d) || placed.contains(d))
                })
                .cloned()
                .collect();
            if tier.is_empty() {
                return None;
            }
            placed.extend(tier.iter().cloned());
            out.push(tier);
        }
        Some(out)
    }

    /// Random catalogues, some with cycles and dependencies on unknown modules, planned both
    /// ways: the same tiers, or a cycle that is one (each module depends on the next, all
    /// affected, starting at the first by name).
    #[test]
    fn tiers_match_the_plain_way_on_random_catalogues() {
        let mut seed = 17u64;
        let mut below = |n: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as usize) % n.max(1)
        };
        let (mut cycles, mut past_cycles) = (0, 0);
        for _ in 0..500 {
            let count = 1 + below(12);
            let name = |i: usize| format!("m{i:02}");
            let g: BTreeMap<String, Vec<String>> = (0..count)
                .map(|i| {
                    let deps = (0..below(4))
                        .map(|_| {
                            // Mostly earlier modules; now and then any module (a cycle) or
                            // one the catalogue does not hold.
                            match below(10) {
                                0 => name(below(count)),
                                1 => "unknown".to_owned(),
                                _ => name(below(i)),
                            }
                        })
                        .collect();
                    (name(i), deps)
                })
                .collect();
            let changed: BTreeSet<String> = (0..1 + below(3)).map(|_| name(below(count))).collect();
            let graph = DependencyGraph::new(&g);
            match (graph.tiers(&changed), plain_tiers(&g, &changed)) {
                (Ok(result), Some(expected)) => {
                    assert_eq!(result.tiers, expected, "{g:?}");
                    past_cycles += usize::from(graph.ordered < graph.len());
                }
                (Err(TierError::Cycle { cycle }), None) => {
                    cycles += 1;
                    let first = cycle.iter().min().unwrap();
                    assert_eq!(&cycle[0], first);
                    for (i, module) in cycle.iter().enumerate() {
                        let next = &cycle[(i + 1) % cycle.len()];
                        assert!(g[module].contains(next), "{cycle:?} in {g:?}");
                    }
                }
                (result, expected) => panic!("{result:?} vs {expected:?} for {g:?}"),
            }
        }
        // Both ways out of a catalogue with a cycle are tried, many times.
        assert!(cycles > 50 && past_cycles > 50, "{cycles} {past_cycles}");
    }
}
