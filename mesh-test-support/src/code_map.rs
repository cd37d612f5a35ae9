//! The modules of a crate and the `use` lines between them, read from its source, so that a
//! crate's test can hold it to the architecture page's code map: its top-level modules, each a
//! file or a directory, form no cycle.
//!
//! An edge `a → b` is any `crate::b` path in module `a`'s source outside comments and its unit
//! tests (a `#[cfg(test)]` module, inline or a module directory's `tests.rs`), and `super::b` in a top-level file (whose parent is the
//! crate root). Paths through the crate root's re-exports are not followed: a module that
//! reaches another only through one is not counted, so keep `use` lines naming the module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each top-level module of the crate whose source is `src`, and the modules it uses.
///
/// # Panics
/// When `src` cannot be read: a test asked for it.
pub fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut sources: BTreeMap<String, Vec<(String, bool)>> = BTreeMap::new();
    let entries = std::fs::read_dir(src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else {
            continue;
        };
        if path.is_dir() {
            // A module directory's `tests.rs` or `*_tests.rs` is its unit tests (declared
            // `#[cfg(test)] mod tests;`), left out as an inline test module is.
            for file in rust_files(&path).into_iter().filter(|f| !is_unit_tests(f)) {
                let text = std::fs::read_to_string(&file).expect("a source file");
                sources.entry(stem.clone()).or_default().push((text, true));
            }
        } else if path.extension().is_some_and(|e| e == "rs") && stem != "lib" && stem != "main" {
            let text = std::fs::read_to_string(&path).expect("a source file");
            sources.entry(stem).or_default().push((text, false));
        }
    }
    let names: BTreeSet<String> = sources.keys().cloned().collect();
    sources
        .into_iter()
        .map(|(module, texts)| {
            let mut uses = BTreeSet::new();
            for (text, nested) in &texts {
                let code = without_tests(&without_comments(text));
                uses.extend(paths_after(&code, "crate::"));
                if !nested {
                    uses.extend(paths_after(&code, "super::"));
                }
            }
            uses.retain(|used| used != &module && names.contains(used));
            (module, uses)
        })
        .collect()
}

/// Whether `file` is a module's unit tests kept in a file of their own: `tests.rs` or
/// `*_tests.rs`.
fn is_unit_tests(file: &Path) -> bool {
    file.file_stem()
        .and_then(|s| s.to_str())
        .is_some_and(|stem| stem == "tests" || stem.ends_with("_tests"))
}

/// The cycles among the modules of `graph`, each as its modules in order; empty when there is
/// none.
pub fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut done = BTreeSet::new();
    for start in graph.keys() {
        let mut path = Vec::new();
        walk(graph, start, &mut path, &mut done, &mut found);
    }
    found
}

fn walk(
    graph: &BTreeMap<String, BTreeSet<String>>,
    module: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
    found: &mut Vec<Vec<String>>,
) {
    if let Some(at) = path.iter().position(|m| m == module) {
        found.push(path[at..].to_vec());
        return;
    }
    if done.contains(module) {
        return;
    }
    path.push(module.to_owned());
    for used in graph.get(module).into_iter().flatten() {
        walk(graph, used, path, done, found);
    }
    path.pop();
    done.insert(module.to_owned());
}

fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// `text` without `//` comments (doc comments included) and `/* */` blocks; string literals are
/// kept as they are (a `//` inside one ends the line's code early, which loses no `use`).
fn without_comments(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("/*") {
        out.push_str(&rest[..at]);
        rest = rest[at..]
            .find("*/")
            .map_or("", |end| &rest[at + end + 2..]);
    }
    out.push_str(rest);
    out.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` up to its unit tests: the first `#[cfg(test)]` followed by a `mod`.
fn without_tests(text: &str) -> String {
    let mut at = 0;
    while let Some(found) = text[at..].find("#[cfg(test)]") {
        let start = at + found;
        let after = text[start + "#[cfg(test)]".len()..].trim_start();
        if after.starts_with("mod ") || after.starts_with("pub mod ") {
            return text[..start].to_owned();
        }
        at = start + 1;
    }
    text.to_owned()
}

/// The first name of every path after `prefix` (`crate::a::b` → `a`; `crate::{a, b::c}` → `a`,
/// `b`).
fn paths_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.extend(first_name(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            out.extend(first_name(&item));
        } else {
            out.extend(first_name(rest));
        }
    }
    out
}

fn first_name(path: &str) -> Option<String> {
    let name: String = path
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_their_first_module_in_groups_too() {
        let code = "use crate::a::B;\nuse crate::{b, c::{D, E}, self};\nlet x = crate::d::f();";
        let names: Vec<String> = paths_after(code, "crate::").into_iter().collect();
        assert_eq!(names, ["a", "b", "c", "d", "self"]);
    }

    #[test]
    fn comments_and_unit_tests_are_not_uses() {
        let text = "/// see [`crate::a`]\nuse crate::b; // crate::c\n#[cfg(test)]\nmod tests {\n use crate::d;\n}\n";
        let code = without_tests(&without_comments(text));
        let names: Vec<String> = paths_after(&code, "crate::").into_iter().collect();
        assert_eq!(names, ["b"]);
    }

    #[test]
    fn a_cycle_is_found_and_an_order_is_not_one() {
        let graph = |edges: &[(&str, &str)]| {
            let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for (from, to) in edges {
                graph
                    .entry(from.to_string())
                    .or_default()
                    .insert(to.to_string());
                graph.entry(to.to_string()).or_default();
            }
            graph
        };
        assert!(cycles(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])).is_empty());
        assert_eq!(
            cycles(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])),
            [["a", "b", "c"]]
        );
    }
}
