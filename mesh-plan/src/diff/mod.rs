//! What a push would change: a node's new declaration against the one it was last sent
//! The rules “A push says what it will change” and “A push to every node is asked for by name”.
//!
//! Start at [`diff`]. Resources are matched by id: added, removed, or changed with the fields
//! that differ and their old and new values. A file's content is summarised (line and byte
//! counts and a short excerpt of the changed lines), never printed whole. A file read from its
//! module's archive is known by its content's digest only: when either side is such a file,
//! `content` is compared by digest (and shown as the two digests), and where it is read from is
//! the field `source`. For a container, every field that makes the host recreate it is marked.
//! [`DeclarationDiff::render_text`] is what `plan NODE --diff` prints (nothing at all when
//! nothing differs); the value serializes for `--output json`.

use mesh_model::declaration::{ContainerSpec, Declaration, Resource, Spec};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// How many changed lines of a file an excerpt shows, on each side.
pub const EXCERPT_LINES: usize = 6;
/// How many characters of one line an excerpt shows.
pub const EXCERPT_WIDTH: usize = 100;

/// The difference between what a node was sent and what it would be sent now.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct DeclarationDiff {
    /// The node.
    pub node: String,
    /// Nothing was sent to the node before: everything is added.
    pub first_send: bool,
    /// Resources only the new declaration holds, by id.
    pub added: Vec<ResourceEntry>,
    /// Resources only the sent declaration holds, by id.
    pub removed: Vec<ResourceEntry>,
    /// Resources both hold that differ, by id.
    pub changed: Vec<ResourceChange>,
}

/// A resource added or removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct ResourceEntry {
    /// Its id.
    pub id: String,
    /// Its kind (`file`, `directory`, `membership`, `container`).
    pub kind: String,
}

/// A resource whose declaration changed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct ResourceChange {
    /// Its id.
    pub id: String,
    /// Its kind in the new declaration.
    pub kind: String,
    /// Whether the host will recreate it (a container whose recreating field changed).
    pub recreates: bool,
    /// Whether the host will run it again (a job whose image, command, environment or
    /// `rerun-on` changed). Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reruns: bool,
    /// The fields that differ, sorted by name.
    pub fields: Vec<FieldChange>,
}

/// One field that differs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct FieldChange {
    /// The field: `image`, `env.PORT`, `mounts[/config].source`, `content`, `after`, …
    pub field: String,
    /// Whether this field's change makes the host recreate the resource.
    pub recreates: bool,
    /// Whether this field's change makes the host run the job again. Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reruns: bool,
    /// Old and new.
    #[serde(flatten)]
    pub change: FieldDiff,
}

/// How a field differs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "change", rename_all = "kebab-case")]
pub enum FieldDiff {
    /// A value, old and new (`None` where one side does not hold the field).
    Value {
        /// The value that was sent.
        old: Option<Value>,
        /// The value that would be sent.
        new: Option<Value>,
    },
    /// A file's content: a summary, not the text.
    Content(ContentSummary),
}

/// A summary of a changed text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct ContentSummary {
    /// Bytes before.
    pub old_bytes: usize,
    /// Bytes after.
    pub new_bytes: usize,
    /// Lines before.
    pub old_lines: usize,
    /// Lines after.
    pub new_lines: usize,
    /// The first line that differs (1-based).
    pub first_changed_line: usize,
    /// Lines of the old text not in the new one.
    pub lines_removed: usize,
    /// Lines of the new text not in the old one.
    pub lines_added: usize,
    /// The first changed lines in unified style: `@@ -old +new @@` before each stretch, then
    /// `-` old and `+` new lines, each cut to [`EXCERPT_WIDTH`] characters; at most twice
    /// [`EXCERPT_LINES`] changed lines.
    pub excerpt: Vec<String>,
    /// Changed lines the excerpt leaves out.
    pub lines_not_shown: usize,
}

/// Compares what a node was last sent (`None`: never) with its new declaration.
///
/// # Guarantees
/// Pure and deterministic; `diff(Some(d), d)` is empty ([`DeclarationDiff::is_empty`]), and its
/// text is the empty string.
pub fn diff(sent: Option<&Declaration>, new: &Declaration) -> DeclarationDiff {
    let mut out = DeclarationDiff {
        node: new.node.clone(),
        first_send: sent.is_none(),
        added: Vec::new(),
        removed: Vec::new(),
        changed: Vec::new(),
    };
    let old: BTreeMap<&str, &Resource> = sent
        .map(|d| d.resources.iter().map(|r| (r.id.as_str(), r)).collect())
        .unwrap_or_default();
    let current: BTreeMap<&str, &Resource> =
        new.resources.iter().map(|r| (r.id.as_str(), r)).collect();
    for (id, resource) in &current {
        match old.get(id) {
            None => out.added.push(entry(resource)),
            Some(before) if *before == *resource => {
                out.changed.extend(rerun_by_files(resource, &old, &current));
            }
            Some(before) => {
                let mut change = resource_change(before, resource);
                if let Some(files) = rerun_by_files(resource, &old, &current) {
                    change.reruns = true;
                    change.fields.extend(files.fields);
                    change.fields.sort_by(|a, b| a.field.cmp(&b.field));
                }
                out.changed.push(change);
            }
        }
    }
    for (id, resource) in &old {
        if !current.contains_key(id) {
            out.removed.push(entry(resource));
        }
    }
    out
}

/// A job sent before that runs again because the content of a file in its `rerun-on` changed:
/// each such file as the field `rerun-on[ID]`, its content's digests old and new.
fn rerun_by_files(
    job: &Resource,
    old: &BTreeMap<&str, &Resource>,
    current: &BTreeMap<&str, &Resource>,
) -> Option<ResourceChange> {
    let Spec::Job(spec) = &job.spec else {
        return None;
    };
    let digest = |resources: &BTreeMap<&str, &Resource>, id: &str| match resources
        .get(id)
        .map(|r| &r.spec)
    {
        Some(Spec::File(f)) => mesh_model::declaration::rerun_file_digest(f),
        _ => None,
    };
    let fields: Vec<FieldChange> = spec
        .rerun_on
        .iter()
        .filter_map(|file| {
            let (before, after) = (digest(old, file), digest(current, file));
            (before.is_some() && before != after).then(|| FieldChange {
                field: format!("rerun-on[{file}]"),
                recreates: false,
                reruns: true,
                change: FieldDiff::Value {
                    old: before.map(Value::String),
                    new: after.map(Value::String),
                },
            })
        })
        .collect();
    (!fields.is_empty()).then(|| ResourceChange {
        id: job.id.clone(),
        kind: "job".to_owned(),
        recreates: false,
        reruns: true,
        fields,
    })
}

fn entry(resource: &Resource) -> ResourceEntry {
    ResourceEntry {
        id: resource.id.clone(),
        kind: resource.spec.kind().to_owned(),
    }
}

/// A field of a resource, flattened for comparison.
enum Flat<'r> {
    Value(Value),
    Text(&'r str),
    /// A file's content known by its digest only (it is in the module's archive).
    Digest(&'r str),
    /// A template of secrets, known by its secrets' keyed digests and its own
    /// (`mesh_model::secret::describe_sealed`): never a secret's value or ciphertext.
    Sealed(String),
}

/// Every field of a resource by name. A field holding an object (a container's `env`, one of
/// its mounts) is compared key by key when both sides hold it.
fn flatten(resource: &Resource) -> BTreeMap<String, Flat<'_>> {
    let mut fields: BTreeMap<String, Flat<'_>> = BTreeMap::new();
    let mut put = |name: &str, value: Value| {
        fields.insert(name.to_owned(), Flat::Value(value));
    };
    put("kind", json!(resource.spec.kind()));
    put("after", json!(resource.after));
    put("together", json!(resource.together));
    match &resource.spec {
        Spec::File(f) => {
            put("path", json!(f.path));
            put("mode", json!(format!("{:04o}", f.mode)));
            put("owner", json!(f.owner));
            put("group", json!(f.group));
            if let Some(source) = &f.source {
                put("source", json!(source.path));
            }
            let content = match (&f.content, &f.source, &f.sealed) {
                (Some(text), _, _) => Some(Flat::Text(text)),
                (None, Some(source), _) => Some(Flat::Digest(&source.sha256)),
                (None, None, Some(pieces)) => {
                    Some(Flat::Sealed(mesh_model::secret::describe_sealed(pieces)))
                }
                (None, None, None) => None,
            };
            if let Some(content) = content {
                fields.insert("content".to_owned(), content);
            }
        }
        Spec::Directory(d) => {
            put("path", json!(d.path));
            put("mode", json!(format!("{:04o}", d.mode)));
            put("owner", json!(d.owner));
            put("group", json!(d.group));
        }
        Spec::Account(a) => {
            put("name", json!(a.name));
            put("uid", json!(a.uid));
            put("gid", json!(a.gid));
            put("home", json!(a.home));
            put("shell", json!(a.shell));
        }
        Spec::Job(j) => {
            put("rerun-on", json!(j.rerun_on));
            put("timeout", json!(format!("{}s", j.timeout_secs())));
            flatten_container(&j.run, &mut put);
        }
        Spec::Container(c) => {
            put("restart-on", json!(c.restart_on));
            flatten_container(c, &mut put);
        }
        // A kind whose fields are shown as its spec says them (a network, a membership, …).
        other => {
            if let Value::Object(spec) = json!(other) {
                for (name, value) in spec {
                    if name != "kind" {
                        put(&name, value);
                    }
                }
            }
        }
    }
    fields
}

/// A container's fields (a job's container's too), by the names `plan --diff` gives them.
fn flatten_container(c: &ContainerSpec, put: &mut dyn FnMut(&str, Value)) {
    put("name", json!(c.name));
    put("image", json!(c.image));
    put("command", json!(c.command));
    put("env", json!(c.env));
    // The fields services gained: each is shown only when set, so a declaration sent
    // before they existed compares equal to its successor that does not use them.
    for (name, value) in c.run_fields() {
        if mesh_model::declaration::says_nothing(&value) {
            continue;
        }
        match (name, value.as_u64()) {
            ("stop-timeout", Some(secs)) => put(name, json!(format!("{secs}s"))),
            _ => put(name, value),
        }
    }
    for mount in &c.mounts {
        put(
            &format!("mounts[{}]", mount.at),
            json!({"place": mount.place, "source": mount.source, "read-only": mount.read_only}),
        );
    }
}

/// Whether a change of `field` makes the host recreate a resource of `kind`.
///
/// A container is recreated for any change of how it runs: name, image, command, an environment
/// variable, a mount (added, removed, its source or its read-only flag), its ports, network,
/// user, limits, capabilities, read-only root, workdir, entrypoint, labels, stop timeout and
/// restart policy (podman sets each only when it creates a container). Its `restart-on` list,
/// a mount's place name, `after` and `together` only change how an apply is ordered.
pub fn field_recreates(kind: &str, field: &str) -> bool {
    kind == "container"
        && !matches!(field, "kind" | "after" | "together" | "restart-on")
        && !field.ends_with(".place")
}

/// Whether a change of `field` makes the host run a resource of `kind` again: a job runs again
/// when its image, command, an environment variable or its `rerun-on` list changes (and when
/// the content of a file in it changes, which is that file's change). Nothing else of it does.
pub fn field_reruns(kind: &str, field: &str) -> bool {
    kind == "job"
        && (matches!(field, "image" | "command" | "env" | "rerun-on") || field.starts_with("env."))
}

fn resource_change(old: &Resource, new: &Resource) -> ResourceChange {
    let kind = new.spec.kind();
    let before = flatten(old);
    let after = flatten(new);
    let mut fields = Vec::new();
    let names: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    for name in names {
        match (before.get(name), after.get(name)) {
            (Some(Flat::Text(a)), Some(Flat::Text(b))) => {
                if a != b {
                    fields.push(FieldChange {
                        field: name.clone(),
                        recreates: field_recreates(kind, name),
                        reruns: field_reruns(kind, name),
                        change: FieldDiff::Content(summarise_text(a, b)),
                    });
                }
            }
            // A content known by its digest on either side (read from an archive): the digests
            // say whether it changed.
            (
                Some(a @ (Flat::Text(_) | Flat::Digest(_) | Flat::Sealed(_))),
                Some(b @ (Flat::Text(_) | Flat::Digest(_) | Flat::Sealed(_))),
            ) => {
                let (a, b) = (content_digest(a), content_digest(b));
                if a != b {
                    fields.push(FieldChange {
                        field: name.clone(),
                        recreates: field_recreates(kind, name),
                        reruns: field_reruns(kind, name),
                        change: FieldDiff::Value {
                            old: Some(Value::String(a)),
                            new: Some(Value::String(b)),
                        },
                    });
                }
            }
            (a, b) => {
                let a = a.map(flat_value);
                let b = b.map(flat_value);
                value_changes(kind, name, a, b, &mut fields);
            }
        }
    }
    fields.sort_by(|a, b| a.field.cmp(&b.field));
    ResourceChange {
        id: new.id.clone(),
        kind: kind.to_owned(),
        recreates: fields.iter().any(|f| f.recreates),
        reruns: fields.iter().any(|f| f.reruns),
        fields,
    }
}

fn flat_value(flat: &Flat<'_>) -> Value {
    match flat {
        Flat::Value(value) => value.clone(),
        Flat::Text(text) | Flat::Digest(text) => Value::String((*text).to_owned()),
        Flat::Sealed(described) => Value::String(described.clone()),
    }
}

/// The digest of a file's content, carried or named.
fn content_digest(flat: &Flat<'_>) -> String {
    match flat {
        Flat::Text(text) => mesh_model::sha256_digest(text.as_bytes()),
        Flat::Digest(digest) => (*digest).to_owned(),
        Flat::Sealed(described) => described.clone(),
        Flat::Value(value) => value.to_string(),
    }
}

fn value_changes(
    kind: &str,
    name: &str,
    old: Option<Value>,
    new: Option<Value>,
    out: &mut Vec<FieldChange>,
) {
    if old == new {
        return;
    }
    if let (Some(Value::Object(a)), Some(Value::Object(b))) = (&old, &new) {
        let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        for key in keys {
            value_changes(
                kind,
                &format!("{name}.{key}"),
                a.get(key).cloned(),
                b.get(key).cloned(),
                out,
            );
        }
        return;
    }
    out.push(FieldChange {
        field: name.to_owned(),
        recreates: field_recreates(kind, name),
        reruns: field_reruns(kind, name),
        change: FieldDiff::Value { old, new },
    });
}

/// The most edits [`summarise_text`] looks for before it calls the whole changed stretch
/// removed and added (keeps the summary fast on texts that share nothing).
pub const MAX_EDITS: usize = 2_000;

/// Summarises a changed text: counts, and an excerpt of the changed lines in unified style
/// (`@@ -old +new @@` headers, `-` and `+` lines). Lines are matched with Myers' algorithm, in
/// O((N+M)·D) for D edits, up to [`MAX_EDITS`] edits.
pub fn summarise_text(old: &str, new: &str) -> ContentSummary {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let middle_a = &a[prefix..a.len() - suffix];
    let middle_b = &b[prefix..b.len() - suffix];
    let edits = line_edits(middle_a, middle_b, MAX_EDITS).unwrap_or_else(|| {
        let mut all: Vec<Edit> = (0..middle_a.len()).map(Edit::Remove).collect();
        all.extend((0..middle_b.len()).map(Edit::Add));
        all
    });
    let cut = |sign: char, line: &str| {
        let mut shown: String = line.chars().take(EXCERPT_WIDTH).collect();
        if line.chars().count() > EXCERPT_WIDTH {
            shown.push('…');
        }
        format!("{sign} {shown}")
    };
    let mut summary = ContentSummary {
        old_bytes: old.len(),
        new_bytes: new.len(),
        old_lines: a.len(),
        new_lines: b.len(),
        first_changed_line: prefix + 1,
        lines_removed: 0,
        lines_added: 0,
        excerpt: Vec::new(),
        lines_not_shown: 0,
    };
    let (mut old_line, mut new_line) = (prefix, prefix);
    let mut in_hunk = false;
    let mut shown = 0;
    for edit in &edits {
        let line = match edit {
            Edit::Keep => {
                old_line += 1;
                new_line += 1;
                in_hunk = false;
                continue;
            }
            Edit::Remove(i) => {
                summary.lines_removed += 1;
                cut('-', middle_a[*i])
            }
            Edit::Add(j) => {
                summary.lines_added += 1;
                cut('+', middle_b[*j])
            }
        };
        if shown < 2 * EXCERPT_LINES {
            if !in_hunk {
                summary
                    .excerpt
                    .push(format!("@@ -{} +{} @@", old_line + 1, new_line + 1));
            }
            summary.excerpt.push(line);
            shown += 1;
        } else {
            summary.lines_not_shown += 1;
        }
        in_hunk = true;
        match edit {
            Edit::Remove(_) => old_line += 1,
            Edit::Add(_) => new_line += 1,
            Edit::Keep => {}
        }
    }
    summary
}

/// One step of a line edit script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edit {
    /// The next line is in both texts.
    Keep,
    /// The old text's line (index) is removed.
    Remove(usize),
    /// The new text's line (index) is added.
    Add(usize),
}

/// Myers' shortest edit script from `a` to `b`, or `None` when it needs more than `max_edits`.
fn line_edits(a: &[&str], b: &[&str], max_edits: usize) -> Option<Vec<Edit>> {
    let (n, m) = (a.len() as isize, b.len() as isize);
    let max_d = max_edits.min(a.len() + b.len()) as isize;
    let offset = max_d + 1;
    let mut v = vec![0isize; (2 * max_d + 3) as usize];
    // trace[d] holds v over k in [-(d+1), d+1] as it was before step d.
    let mut trace: Vec<Vec<isize>> = Vec::new();
    let mut found = None;
    'steps: for d in 0..=max_d {
        trace.push(v[(offset - d - 1) as usize..=(offset + d + 1) as usize].to_vec());
        let mut k = -d;
        while k <= d {
            let i = (k + offset) as usize;
            let mut x = if k == -d || (k != d && v[i - 1] < v[i + 1]) {
                v[i + 1]
            } else {
                v[i - 1] + 1
            };
            let mut y = x - k;
            while x < n && y < m && a[x as usize] == b[y as usize] {
                x += 1;
                y += 1;
            }
            v[i] = x;
            if x >= n && y >= m {
                found = Some(d);
                break 'steps;
            }
            k += 2;
        }
    }
    let last = found?;
    let mut edits = Vec::new();
    let (mut x, mut y) = (n, m);
    for d in (0..=last).rev() {
        let window = &trace[d as usize];
        let at = |k: isize| window[(k + d + 1) as usize];
        let k = x - y;
        let prev_k = if k == -d || (k != d && at(k - 1) < at(k + 1)) {
            k + 1
        } else {
            k - 1
        };
        let prev_x = at(prev_k);
        let prev_y = prev_x - prev_k;
        while x > prev_x && y > prev_y {
            edits.push(Edit::Keep);
            x -= 1;
            y -= 1;
        }
        if d > 0 {
            if x == prev_x {
                edits.push(Edit::Add((y - 1) as usize));
                y -= 1;
            } else {
                edits.push(Edit::Remove((x - 1) as usize));
                x -= 1;
            }
        }
    }
    edits.reverse();
    Some(edits)
}

impl DeclarationDiff {
    /// Whether nothing differs.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }

    /// How many changed resources the host will recreate.
    pub fn recreated(&self) -> usize {
        self.changed.iter().filter(|c| c.recreates).count()
    }

    /// What `plan NODE --diff` prints; the empty string when nothing differs.
    ///
    /// ```text
    /// home: 1 to add, 1 to change (1 recreated), 0 to remove
    /// + media/file/extra
    /// ~ media/container/server (recreated)
    ///     image  "busybox:1" -> "busybox:2"  recreates
    /// ```
    pub fn render_text(&self) -> String {
        if self.is_empty() {
            return String::new();
        }
        let mut out = String::new();
        let _ = write!(out, "{}: ", self.node);
        if self.first_send {
            let _ = write!(out, "nothing sent before; ");
        }
        let _ = writeln!(
            out,
            "{} to add, {} to change ({} recreated), {} to remove",
            self.added.len(),
            self.changed.len(),
            self.recreated(),
            self.removed.len()
        );
        enum Line<'d> {
            Added(&'d ResourceEntry),
            Removed(&'d ResourceEntry),
            Changed(&'d ResourceChange),
        }
        let mut lines: Vec<(&str, Line<'_>)> = Vec::new();
        lines.extend(self.added.iter().map(|e| (e.id.as_str(), Line::Added(e))));
        lines.extend(
            self.removed
                .iter()
                .map(|e| (e.id.as_str(), Line::Removed(e))),
        );
        lines.extend(
            self.changed
                .iter()
                .map(|c| (c.id.as_str(), Line::Changed(c))),
        );
        lines.sort_by(|a, b| a.0.cmp(b.0));
        for (_, line) in lines {
            match line {
                Line::Added(e) => {
                    let _ = writeln!(out, "+ {}", e.id);
                }
                Line::Removed(e) => {
                    let _ = writeln!(out, "- {}", e.id);
                }
                Line::Changed(change) => render_change(change, &mut out),
            }
        }
        out
    }
}

fn shown(value: &Option<Value>) -> String {
    match value {
        Some(value) => value.to_string(),
        None => "(none)".to_owned(),
    }
}

fn render_change(change: &ResourceChange, out: &mut String) {
    let _ = writeln!(
        out,
        "~ {}{}{}",
        change.id,
        if change.recreates { " (recreated)" } else { "" },
        if change.reruns { " (runs again)" } else { "" }
    );
    let width = change
        .fields
        .iter()
        .map(|f| f.field.len())
        .max()
        .unwrap_or(0);
    for field in &change.fields {
        let mark = match (field.recreates, field.reruns) {
            (true, _) => "  recreates",
            (false, true) => "  runs again",
            (false, false) => "",
        };
        match &field.change {
            FieldDiff::Value { old, new } => {
                let _ = writeln!(
                    out,
                    "    {:width$}  {} -> {}{mark}",
                    field.field,
                    shown(old),
                    shown(new)
                );
            }
            FieldDiff::Content(s) => {
                let _ = writeln!(
                    out,
                    "    {:width$}  {} -> {} lines ({} -> {} bytes), -{} +{} lines{mark}",
                    field.field,
                    s.old_lines,
                    s.new_lines,
                    s.old_bytes,
                    s.new_bytes,
                    s.lines_removed,
                    s.lines_added
                );
                for line in &s.excerpt {
                    let _ = writeln!(out, "      {line}");
                }
                if s.lines_not_shown > 0 {
                    let _ = writeln!(out, "      … {} more changed lines", s.lines_not_shown);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
