//! Changes to a valid input, for the property tests that feed every parser random bytes
//! (`tests/random_bytes.rs` of each crate, at length with `scripts/fuzz`): its bytes flipped,
//! cut, repeated or spliced ([`byte_edits`], [`edit_bytes`]), and its JSON values replaced by
//! others of any shape, removed, or joined by unknown keys ([`value_edits`], [`edit_value`]).
//! A case's directory is compared and put back with [`files_under`] and [`reset_dir`].
use proptest::prelude::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One change to a valid input's bytes (positions are taken modulo the input's length).
#[derive(Debug, Clone)]
pub enum ByteEdit {
    /// The byte at a position replaced.
    Flip(usize, u8),
    /// The input cut at a position.
    Truncate(usize),
    /// Bytes inserted at a position.
    Insert(usize, Vec<u8>),
    /// Up to n bytes removed from a position.
    Delete(usize, usize),
    /// Up to n bytes from a position repeated after themselves.
    Repeat(usize, usize),
}

/// One to five byte changes.
pub fn byte_edits() -> impl Strategy<Value = Vec<ByteEdit>> {
    let edit = prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, b)| ByteEdit::Flip(at, b)),
        any::<usize>().prop_map(ByteEdit::Truncate),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| ByteEdit::Insert(at, bytes)),
        (any::<usize>(), 1usize..64).prop_map(|(at, n)| ByteEdit::Delete(at, n)),
        (any::<usize>(), 1usize..64).prop_map(|(at, n)| ByteEdit::Repeat(at, n)),
    ];
    prop::collection::vec(edit, 1..6)
}

/// `valid` with `edits` made in order.
pub fn edit_bytes(valid: &[u8], edits: &[ByteEdit]) -> Vec<u8> {
    let mut out = valid.to_vec();
    for edit in edits {
        let len = out.len().max(1);
        match edit {
            ByteEdit::Flip(at, b) => {
                if !out.is_empty() {
                    let i = at % out.len();
                    out[i] = *b;
                }
            }
            ByteEdit::Truncate(at) => out.truncate(at % len),
            ByteEdit::Insert(at, bytes) => {
                let i = at % (out.len() + 1);
                out.splice(i..i, bytes.iter().copied());
            }
            ByteEdit::Delete(at, n) => {
                if !out.is_empty() {
                    let i = at % out.len();
                    let end = (i + n).min(out.len());
                    out.drain(i..end);
                }
            }
            ByteEdit::Repeat(at, n) => {
                if !out.is_empty() {
                    let i = at % out.len();
                    let end = (i + n).min(out.len());
                    let piece: Vec<u8> = out[i..end].to_vec();
                    out.splice(end..end, piece);
                }
            }
        }
    }
    out
}

/// A JSON value of any shape, a few levels deep.
pub fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,24}".prop_map(Value::String),
        Just(Value::String("../../etc/shadow".into())),
        Just(Value::String("sha256:".into())),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z-]{1,10}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// One change to a valid input's structure: a value replaced by one of another shape, a key
/// removed, an unknown key added.
#[derive(Debug, Clone)]
pub enum ValueEdit {
    /// The value at a place (taken modulo the number of places) replaced.
    Replace(usize, Value),
    /// The value at a place removed from its object or array.
    Remove(usize),
    /// A key added to the object at a place.
    Add(usize, String, Value),
}

/// One to three value changes.
pub fn value_edits() -> impl Strategy<Value = Vec<ValueEdit>> {
    let edit = prop_oneof![
        (any::<usize>(), any_json()).prop_map(|(at, v)| ValueEdit::Replace(at, v)),
        any::<usize>().prop_map(ValueEdit::Remove),
        (any::<usize>(), "[a-z-]{1,12}", any_json())
            .prop_map(|(at, k, v)| ValueEdit::Add(at, k, v)),
    ];
    prop::collection::vec(edit, 1..4)
}

/// Every place in a value, as a JSON pointer, the root first.
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match value {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                pointers(item, format!("{at}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                let k = k.replace('~', "~0").replace('/', "~1");
                pointers(v, format!("{at}/{k}"), out);
            }
        }
        _ => {}
    }
}

/// The JSON `valid` with `edits` made in order, as bytes.
///
/// # Panics
/// When `valid` is not JSON.
pub fn edit_value(valid: &str, edits: &[ValueEdit]) -> Vec<u8> {
    let mut value: Value = serde_json::from_str(valid).expect("the fixture is JSON");
    for edit in edits {
        let mut places = Vec::new();
        pointers(&value, String::new(), &mut places);
        match edit {
            ValueEdit::Replace(at, new) => {
                let place = &places[at % places.len()];
                if let Some(slot) = value.pointer_mut(place) {
                    *slot = new.clone();
                }
            }
            ValueEdit::Remove(at) => {
                let place = places[at % places.len()].clone();
                if let Some((parent, key)) = place.rsplit_once('/') {
                    match value.pointer_mut(parent) {
                        Some(Value::Object(map)) => {
                            map.remove(&key.replace("~1", "/").replace("~0", "~"));
                        }
                        Some(Value::Array(items)) => {
                            if let Ok(i) = key.parse::<usize>() {
                                if i < items.len() {
                                    items.remove(i);
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            ValueEdit::Add(at, key, new) => {
                let place = &places[at % places.len()];
                if let Some(Value::Object(map)) = value.pointer_mut(place) {
                    map.insert(key.clone(), new.clone());
                }
            }
        }
    }
    serde_json::to_vec(&value).expect("a value serializes")
}

/// How many cases each property runs: `PROPTEST_CASES` when set (`scripts/fuzz` sets 10,000),
/// else `default`, kept small enough for the test command.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
/// Every file under `root`, by its path relative to `root`, with its bytes (none when `root`
/// is not there): what a case compares before and after a read that must change nothing.
///
/// # Panics
/// When a directory under `root` or a file cannot be read.
pub fn files_under(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            if entry.file_type().expect("a file type").is_dir() {
                walk(root, &entry.path(), out);
            } else {
                let relative = entry
                    .path()
                    .strip_prefix(root)
                    .expect("under root")
                    .to_owned();
                out.insert(relative, std::fs::read(entry.path()).expect("a file"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// Puts the directory `root` back to hold exactly `files` (paths relative to it): what a case
/// changed is removed or written again, directories left empty go, the rest is left as it is —
/// a directory kept from one case to the next costs less than one made and removed per case.
///
/// # Panics
/// When a file cannot be removed or written.
pub fn reset_dir(root: &Path, files: &BTreeMap<PathBuf, Vec<u8>>) {
    /// Removes every directory under `dir` left empty, deepest first.
    fn remove_empty(dir: &Path) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                remove_empty(&entry.path());
                let _ = std::fs::remove_dir(entry.path());
            }
        }
    }
    for (relative, bytes) in files_under(root) {
        if files.get(&relative) != Some(&bytes) {
            std::fs::remove_file(root.join(relative)).expect("a file removed");
        }
    }
    remove_empty(root);
    let held = files_under(root);
    for (relative, bytes) in files {
        if !held.contains_key(relative) {
            let to = root.join(relative);
            std::fs::create_dir_all(to.parent().expect("a file has a directory"))
                .expect("its directory made");
            std::fs::write(to, bytes).expect("a file written");
        }
    }
}
