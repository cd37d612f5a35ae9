//! The modules of a crate and the `use` lines between them, read from its source, so that a
//! crate's test can hold it to the architecture page's code map: its top-level modules, each a
//! file or a directory, form no cycle, and where the page lists them in dependency order, each
//! uses only modules listed before it ([`page_order`], [`out_of_order`]).
//!
//! An edge `a → b` is any `crate::b` path in module `a`'s source outside comments and its unit
//! tests (a `#[cfg(test)]` module, inline or a module directory's `tests.rs`), and `super::b` in a
//! top-level file (whose parent is the crate root). Paths through the crate root's re-exports are
//! not followed: a module that reaches another only through one is not counted, so keep `use` lines
//! naming the module. `src/bin`, where Cargo finds binaries each a crate of its own, is not a
//! module.

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
        if path.is_dir() && stem == "bin" {
            // `src/bin` holds binaries, each a crate of its own, not a module of this one: read
            // one with a `module_graph` of its own directory.
            continue;
        }
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

/// The modules of `graph` in the order the architecture page's section `heading` (a whole line,
/// `### mesh-store`) first names them, each in backquotes, from its words "In dependency order"
/// up to its invariants (`**Invariants.**`) or the next heading. Names that are not modules of
/// `graph` (types, functions, submodules) are passed over.
///
/// # Panics
/// When the page has no such section, or the section no "In dependency order": a test asked
/// for it.
pub fn page_order(
    page: &str,
    heading: &str,
    graph: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let start = page
        .lines()
        .position(|line| line.trim_end() == heading)
        .unwrap_or_else(|| panic!("the page has no section `{heading}`"));
    let section: Vec<&str> = page
        .lines()
        .skip(start + 1)
        .take_while(|line| !line.starts_with("## ") && !line.starts_with("### "))
        .collect();
    let section = section.join("\n");
    let from = section
        .find("In dependency order")
        .unwrap_or_else(|| panic!("`{heading}` does not say \"In dependency order\""));
    let section = &section[from..];
    let section = &section[..section.find("**Invariants.**").unwrap_or(section.len())];
    let mut order: Vec<String> = Vec::new();
    for (at, quoted) in section.split('`').enumerate() {
        if at % 2 == 1 && graph.contains_key(quoted) && !order.iter().any(|m| m == quoted) {
            order.push(quoted.to_owned());
        }
    }
    order
}

/// Where `order` disagrees with `graph`: each module `order` leaves out (`(module, None)`), and
/// each use of a module listed at or after the one using it (`(module, Some(used))`). Empty
/// when every module is listed after all it uses.
pub fn out_of_order(
    graph: &BTreeMap<String, BTreeSet<String>>,
    order: &[String],
) -> Vec<(String, Option<String>)> {
    let place = |module: &str| order.iter().position(|m| m == module);
    let mut found = Vec::new();
    for (module, uses) in graph {
        let Some(at) = place(module) else {
            found.push((module.clone(), None));
            continue;
        };
        for used in uses {
            if place(used).is_none_or(|used_at| used_at >= at) {
                found.push((module.clone(), Some(used.clone())));
            }
        }
    }
    found
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

/// `text` up to its unit tests: the first `#[cfg(test)]` followed by a `mod`, of any
/// visibility (`mod`, `pub mod`, `pub(crate) mod`).
fn without_tests(text: &str) -> String {
    let mut at = 0;
    while let Some(found) = text[at..].find("#[cfg(test)]") {
        let start = at + found;
        let after = text[start + "#[cfg(test)]".len()..].trim_start();
        let after = match after.strip_prefix("pub") {
            Some(rest) if rest.starts_with('(') => {
                rest.find(')').map_or("", |end| &rest[end + 1..])
            }
            Some(rest) => rest,
            None => after,
        };
        if after.trim_start().starts_with("mod ") {
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

/// The modules of every module directory under `src` (the crate root's own are
/// [`module_graph`]'s), each level's children and the siblings each uses, keyed by the
/// directory's module path (`status`, `bus::users`). An edge `a → b` is a `crate::<path>::b` path
/// in `a`'s source, or a `super::…::b` path that climbs to the directory's module, outside
/// comments and unit tests. `src/bin` is left out (read a binary with its own directory).
///
/// # Panics
/// When `src` cannot be read: a test asked for it.
pub fn nested_module_graphs(src: &Path) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut out = BTreeMap::new();
    for dir in module_dirs(src, src) {
        let path: Vec<String> = dir
            .strip_prefix(src)
            .expect("under src")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let graph = children_graph(&dir, &path.join("::"));
        if !graph.is_empty() {
            out.insert(path.join("::"), graph);
        }
    }
    out
}

/// Every directory under `dir` that holds Rust sources, `src/bin`, snapshots and fixtures
/// left out.
fn module_dirs(src: &Path, dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("a directory entry").path();
        if !path.is_dir() {
            continue;
        }
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if (dir == src && name == "bin") || name == "snapshots" || name == "fixtures" {
            continue;
        }
        if !rust_files(&path).is_empty() {
            out.push(path.clone());
            out.extend(module_dirs(src, &path));
        }
    }
    out
}

/// The children of the module directory `dir` (module path `module`) and the siblings each
/// uses.
fn children_graph(dir: &Path, module: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut files: BTreeMap<String, Vec<(std::path::PathBuf, usize)>> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("a module directory") {
        let path = entry.expect("a directory entry").path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else {
            continue;
        };
        if path.is_dir() {
            if stem == "snapshots" || stem == "fixtures" {
                continue;
            }
            for file in rust_files(&path).into_iter().filter(|f| !is_unit_tests(f)) {
                // How many modules below `dir` the file's module is: `c/mod.rs` is `c` (1),
                // `c/x.rs` and `c/x/mod.rs` are `c::x` (2).
                let below = file
                    .strip_prefix(dir)
                    .expect("under dir")
                    .components()
                    .count();
                let depth = if file.file_stem().is_some_and(|s| s == "mod") {
                    below - 1
                } else {
                    below
                };
                files.entry(stem.clone()).or_default().push((file, depth));
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && !["mod", "lib", "main"].contains(&stem.as_str())
            && !is_unit_tests(&path)
        {
            files.entry(stem).or_default().push((path, 1));
        }
    }
    let names: BTreeSet<String> = files.keys().cloned().collect();
    files
        .into_iter()
        .map(|(child, sources)| {
            let mut uses = BTreeSet::new();
            for (file, depth) in &sources {
                let text = std::fs::read_to_string(file).expect("a source file");
                let code = without_tests(&without_comments(&text));
                uses.extend(paths_after(&code, &format!("crate::{module}::")));
                uses.extend(paths_after(&code, &"super::".repeat(*depth)));
            }
            uses.retain(|used| used != &child && names.contains(used));
            (child, uses)
        })
        .collect()
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
        let text = "use crate::b;\n#[cfg(test)]\nfn helper() {}\n#[cfg(test)]\npub(crate) mod tests {\n use crate::d;\n}\n";
        let names: Vec<String> = paths_after(&without_tests(text), "crate::")
            .into_iter()
            .collect();
        assert_eq!(names, ["b"]);
    }

    #[test]
    fn the_page_order_is_read_from_the_section_and_a_use_of_a_later_module_is_found() {
        let graph: BTreeMap<String, BTreeSet<String>> = [
            ("a", vec![]),
            ("b", vec!["a"]),
            ("c", vec!["b", "d"]),
            ("d", vec![]),
        ]
        .into_iter()
        .map(|(m, uses)| (m.to_owned(), uses.into_iter().map(str::to_owned).collect()))
        .collect();
        let page = "### other\nIn dependency order: `d`, `c`.\n### krate\nStart at `c`.\n\
                    In dependency order: `a` (`Type`), `b` uses `a`; `c`, then `a` again.\n\
                    **Invariants.** `d`\n### next\n`d`\n";
        let order = page_order(page, "### krate", &graph);
        assert_eq!(order, ["a", "b", "c"]);
        assert_eq!(
            out_of_order(&graph, &order),
            [
                ("c".to_owned(), Some("d".to_owned())),
                ("d".to_owned(), None)
            ]
        );
        let whole: Vec<String> = ["a", "d", "b", "c"].map(str::to_owned).to_vec();
        assert!(out_of_order(&graph, &whole).is_empty());
    }

    #[test]
    fn src_bin_is_not_a_module_and_its_paths_are_not_uses() {
        let src = tempfile::tempdir().expect("a temporary directory");
        let write = |path: &str, text: &str| {
            let path = src.path().join(path);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("a directory");
            std::fs::write(path, text).expect("a file");
        };
        write("lib.rs", "pub mod a;\npub mod b;\n");
        write("a.rs", "use crate::b::B;\n");
        write("b.rs", "pub struct B;\n");
        write("bin/tool/main.rs", "mod a;\n");
        write("bin/tool/a.rs", "use crate::a::A;\nuse crate::b::B;\n");
        let graph = module_graph(src.path());
        let modules: Vec<&String> = graph.keys().collect();
        assert_eq!(modules, ["a", "b"]);
        assert!(cycles(&graph).is_empty());
        assert_eq!(module_graph(&src.path().join("bin/tool"))["a"].len(), 0);
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

/// What a library crate shows outside itself, read from its source: its public modules (the
/// crate root's `pub mod`s and theirs, each by path) and its public items, each by path — an
/// item declared `pub` (`fn`, `struct`, `enum`, `const`, `static`, `trait`, `type`, `mod`) in
/// the crate root or a public module, and each name a `pub use` there exports. Methods, fields
/// and variants are not items; `pub(crate)` and the like are not public; a `#[cfg(test)]`
/// module is left out. An item behind a feature counts as if the feature were on.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PublicSurface {
    /// The public modules, by path (`status`, `bus::users`).
    pub modules: Vec<String>,
    /// The public items, by path (`Mesh`, `status::Overview`), the modules among them.
    pub items: Vec<String>,
}

/// The public surface of the library whose root is `src/lib.rs` (see [`PublicSurface`]).
///
/// # Panics
/// When `src/lib.rs` or a public module's file cannot be read: a test asked for it.
pub fn public_surface(src: &Path) -> PublicSurface {
    let mut surface = PublicSurface::default();
    let root = std::fs::read_to_string(src.join("lib.rs"))
        .unwrap_or_else(|e| panic!("{}: {e}", src.join("lib.rs").display()));
    read_public(&code_only(&root), "", src, &mut surface);
    surface
}

/// Adds the public items of the module `path` to `surface`, and those of its public children:
/// `code` is its source as [`code_only`] leaves it, `dir` the directory of its children's files.
fn read_public(code: &str, path: &str, dir: &Path, surface: &mut PublicSurface) {
    let code = without_test_modules(code);
    let named = |name: &str| {
        if path.is_empty() {
            name.to_owned()
        } else {
            format!("{path}::{name}")
        }
    };
    let bytes = code.as_bytes();
    let mut depth = 0usize;
    let mut at = 0;
    while at < bytes.len() {
        let starts_word =
            at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
        match bytes[at] {
            b'{' => depth += 1,
            b'}' => depth = depth.saturating_sub(1),
            b'p' if depth == 0 && starts_word && code[at..].starts_with("pub ") => {
                let rest = code[at + 4..].trim_start();
                let rest = rest.strip_prefix("async ").unwrap_or(rest).trim_start();
                let keyword: String = rest.chars().take_while(char::is_ascii_alphabetic).collect();
                let after = rest[keyword.len()..].trim_start();
                let after_at = code.len() - after.len();
                match keyword.as_str() {
                    "use" => {
                        let end = after.find(';').unwrap_or(after.len());
                        surface
                            .items
                            .extend(use_names(&after[..end]).iter().map(|name| named(name)));
                        at = after_at + end;
                    }
                    "fn" | "struct" | "enum" | "const" | "static" | "trait" | "type" => {
                        let after = after.strip_prefix("mut ").unwrap_or(after);
                        surface
                            .items
                            .extend(first_name(after).map(|name| named(&name)));
                    }
                    "mod" => {
                        if let Some(name) = first_name(after) {
                            let child = named(&name);
                            surface.items.push(child.clone());
                            surface.modules.push(child.clone());
                            let body = after[name.len()..].trim_start();
                            if let Some(inline) = body.strip_prefix('{') {
                                let inner = matching_body(inline);
                                read_public(inner, &child, &dir.join(&name), surface);
                                at = code.len() - inline.len() + inner.len();
                            } else {
                                let file = [
                                    dir.join(format!("{name}.rs")),
                                    dir.join(&name).join("mod.rs"),
                                ]
                                .into_iter()
                                .find(|file| file.exists())
                                .unwrap_or_else(|| {
                                    panic!("{child}: no file under {}", dir.display())
                                });
                                let text = std::fs::read_to_string(&file)
                                    .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                                read_public(&code_only(&text), &child, &dir.join(&name), surface);
                            }
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        at += 1;
    }
}

/// `code` with each `#[cfg(test)]` module blanked (`mod tests;` or `mod tests { … }`).
fn without_test_modules(code: &str) -> String {
    let mut out = code.to_owned();
    let mut from = 0;
    while let Some(found) = out[from..].find("#[cfg(test)]") {
        let start = from + found;
        let after = &out[start + "#[cfg(test)]".len()..];
        let item = after.trim_start();
        let item = item
            .strip_prefix("pub(crate) ")
            .or_else(|| item.strip_prefix("pub "))
            .unwrap_or(item);
        from = start + 1;
        if !item.starts_with("mod ") {
            continue;
        }
        let item_at = out.len() - item.len();
        let end = match (item.find(';'), item.find('{')) {
            (Some(semi), Some(brace)) if brace < semi => {
                item_at + brace + 1 + matching_body(&item[brace + 1..]).len() + 1
            }
            (Some(semi), _) => item_at + semi + 1,
            (None, Some(brace)) => {
                item_at + brace + 1 + matching_body(&item[brace + 1..]).len() + 1
            }
            (None, None) => out.len(),
        };
        let end = end.min(out.len());
        out.replace_range(start..end, &" ".repeat(end - start));
    }
    out
}

/// The text inside a `{ … }` whose opening brace was just read, up to its closing one.
fn matching_body(text: &str) -> &str {
    let mut depth = 0usize;
    for (at, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return &text[..at],
            '}' => depth -= 1,
            _ => {}
        }
    }
    text
}

/// The names a `use` tree exports: each leaf's name, or its `as` name (`a::{b, c as d}` → `b`,
/// `d`; `a::b::{self}` → `b`; a glob `a::*` → `a::*`).
fn use_names(tree: &str) -> Vec<String> {
    fn leaves(prefix: &str, tree: &str, out: &mut Vec<String>) {
        let tree = tree.trim();
        if let Some(at) = tree.find('{') {
            let head = format!("{prefix}::{}", tree[..at].trim().trim_end_matches("::"));
            let mut depth = 0usize;
            let mut item = String::new();
            for c in matching_body(&tree[at + 1..]).chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        leaves(&head, &item, out);
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            leaves(&head, &item, out);
            return;
        }
        if tree.is_empty() {
            return;
        }
        let (path, alias) = match tree.split_once(" as ") {
            Some((path, alias)) => (path.trim(), Some(alias.trim())),
            None => (tree, None),
        };
        let full = format!("{prefix}::{path}");
        let mut names = full.rsplit("::").filter(|name| !name.trim().is_empty());
        let last = names.next().unwrap_or_default().trim();
        out.push(match (alias, last) {
            (Some(alias), _) => alias.to_owned(),
            (None, "self") => names.next().unwrap_or_default().trim().to_owned(),
            (None, "*") => full.trim_start_matches("::").replace(' ', ""),
            (None, name) => name.to_owned(),
        });
    }
    let mut out = Vec::new();
    leaves("", tree, &mut out);
    out
}

/// `text` as code alone: comments (doc comments included) and the contents of string and
/// character literals blanked, so their braces and words do not read as code.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while at < chars.len() {
        let next = chars.get(at + 1).copied();
        let follows_word = at > 0 && (chars[at - 1].is_alphanumeric() || chars[at - 1] == '_');
        match chars[at] {
            '/' if next == Some('/') => {
                while at < chars.len() && chars[at] != '\n' {
                    out.push(' ');
                    at += 1;
                }
            }
            '/' if next == Some('*') => {
                let mut depth = 0usize;
                while at < chars.len() {
                    if chars[at] == '/' && chars.get(at + 1) == Some(&'*') {
                        depth += 1;
                        out.push_str("  ");
                        at += 2;
                    } else if chars[at] == '*' && chars.get(at + 1) == Some(&'/') {
                        depth -= 1;
                        out.push_str("  ");
                        at += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        out.push(blank(chars[at]));
                        at += 1;
                    }
                }
            }
            'r' if !follows_word && matches!(next, Some('"' | '#')) => {
                let hashes = chars[at + 1..].iter().take_while(|c| **c == '#').count();
                if chars.get(at + 1 + hashes) != Some(&'"') {
                    out.push('r');
                    at += 1;
                    continue;
                }
                out.push('r');
                out.extend(std::iter::repeat_n('#', hashes));
                out.push('"');
                at += 2 + hashes;
                while at < chars.len() {
                    let closes =
                        chars[at] == '"' && (1..=hashes).all(|k| chars.get(at + k) == Some(&'#'));
                    if closes {
                        out.push('"');
                        out.extend(std::iter::repeat_n('#', hashes));
                        at += 1 + hashes;
                        break;
                    }
                    out.push(blank(chars[at]));
                    at += 1;
                }
            }
            '"' => {
                out.push('"');
                at += 1;
                while at < chars.len() && chars[at] != '"' {
                    if chars[at] == '\\' {
                        out.push(' ');
                        at += 1;
                    }
                    if at < chars.len() {
                        out.push(blank(chars[at]));
                        at += 1;
                    }
                }
                out.push('"');
                at += 1;
            }
            '\'' => {
                // A character literal ('{', '\''), not a lifetime ('a).
                let end = if next == Some('\\') {
                    (at + 2..chars.len()).find(|k| chars[*k] == '\'' && *k > at + 2)
                } else {
                    (chars.get(at + 2) == Some(&'\'')).then_some(at + 2)
                };
                match end {
                    Some(end) => {
                        out.push('\'');
                        out.extend(std::iter::repeat_n(' ', end - at - 1));
                        out.push('\'');
                        at = end + 1;
                    }
                    None => {
                        out.push('\'');
                        at += 1;
                    }
                }
            }
            c => {
                out.push(c);
                at += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod surface_tests {
    use super::*;

    /// The counter on a small crate: a public module with a private child, re-exports (a group,
    /// a rename, a `self`), items behind `pub(crate)`, methods, a unit-test module, and braces and
    /// `pub` words inside strings, characters and comments.
    #[test]
    fn a_crates_public_surface_counts_its_public_modules_and_items() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        std::fs::create_dir_all(src.join("ops/inner")).unwrap();
        std::fs::write(
            src.join("lib.rs"),
            "//! pub fn not_code() {}\n\
             pub mod ops;\nmod hidden;\n\
             pub use hidden::{Shown, renamed as Other, deep::{self}};\n\
             pub(crate) fn crate_only() {}\n\
             /* pub struct Commented; */\n\
             pub struct Mesh { pub field: u8 }\n\
             impl Mesh { pub fn method(&self) -> char { '{' } }\n\
             pub const TEXT: &str = \"{ pub fn in_a_string() }\";\n\
             pub async fn run<'a>(_: &'a str) {}\n\
             #[cfg(test)]\nmod tests { pub fn helper() {} }\n\
             pub fn after_the_tests() {}\n",
        )
        .unwrap();
        std::fs::write(
            src.join("ops/mod.rs"),
            "pub(crate) mod inner;\npub use inner::Op;\npub enum Outcome { Done }\n\
             pub mod nested { pub fn deep() { let _ = r#\"}\"#; } }\n",
        )
        .unwrap();
        std::fs::write(src.join("ops/inner/mod.rs"), "pub struct Op;\n").unwrap();
        let surface = public_surface(src);
        assert_eq!(surface.modules, ["ops", "ops::nested"]);
        assert_eq!(
            surface.items,
            [
                "ops",
                "ops::Op",
                "ops::Outcome",
                "ops::nested",
                "ops::nested::deep",
                "Shown",
                "Other",
                "deep",
                "Mesh",
                "TEXT",
                "run",
                "after_the_tests",
            ]
        );
    }
}
