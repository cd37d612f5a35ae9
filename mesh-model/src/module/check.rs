//! Checking one module's definition against itself and its directory: every problem at once,
//! each naming the key it is about.

use super::{
    check_absolute, check_name, container, is_valid_name, parse_mode, EntryKind, ModuleDefinition,
    ModuleTree, PLACES_KEY,
};
use crate::template;
use crate::Diagnostic;
use std::collections::{BTreeMap, BTreeSet};

pub(super) fn check_module(
    file: &str,
    dir: &str,
    tree: &ModuleTree,
    d: &ModuleDefinition,
    out: &mut Vec<Diagnostic>,
) {
    let m = Some(dir);
    let mut say = |key: String, message: String| {
        out.push(Diagnostic::new(file, m, Some(&key), message));
    };
    if d.name != dir {
        say(
            "name".into(),
            format!(
                "the module is named `{}` but its directory is `{dir}`",
                d.name
            ),
        );
    }
    if !is_valid_name(&d.name) {
        say("name".into(), "a module name is [a-z0-9][a-z0-9_-]*".into());
    }
    if d.depends.contains(&d.name) {
        say("depends".into(), "a module cannot depend on itself".into());
    }
    for key in d.settings.keys() {
        if key == PLACES_KEY {
            say(
                format!("settings.{key}"),
                "`places` is reserved for placements; declare [places.NAME] instead".into(),
            );
        } else if !template::is_dotted_key(key) || key.contains('.') {
            say(format!("settings.{key}"), "not a valid setting name".into());
        }
    }
    let mut required = BTreeSet::new();
    for key in &d.required {
        if !required.insert(key) {
            say("required".into(), format!("`{key}` is named twice"));
        } else if !d.settings.contains_key(key) {
            say(
                "required".into(),
                format!(
                    "`{key}` is not a setting of the module; a required setting is declared \
                     under [settings] too (its default a placeholder)"
                ),
            );
        }
    }
    let defaults = d.defaults();
    let check_text =
        |key: String, text: &str, say: &mut dyn FnMut(String, String)| match template::references(
            text,
        ) {
            Ok(refs) => {
                for r in refs {
                    if template::lookup(&defaults, &r).is_none() {
                        say(key.clone(), format!("refers to the unknown setting `{r}`"));
                    }
                }
            }
            Err(error) => say(key, error.to_string()),
        };
    let mut names = BTreeSet::new();
    for (name, place) in &d.places {
        let key = format!("places.{name}");
        check_name(&key, name, &mut say);
        names.insert(format!("directory/{name}"));
        check_absolute(&format!("{key}.default"), &place.default, &mut say);
        check_mode(&format!("{key}.mode"), &place.mode, &mut say);
        check_text(format!("{key}.owner"), &place.owner, &mut say);
    }
    for (name, dir_def) in &d.directories {
        let key = format!("directories.{name}");
        check_name(&key, name, &mut say);
        if !names.insert(format!("directory/{name}")) {
            say(key.clone(), format!("a place is also named `{name}`"));
        }
        check_absolute(&format!("{key}.path"), &dir_def.path, &mut say);
        check_text(format!("{key}.path"), &dir_def.path, &mut say);
        check_mode(&format!("{key}.mode"), &dir_def.mode, &mut say);
    }
    for (name, f) in &d.files {
        let key = format!("files.{name}");
        check_name(&key, name, &mut say);
        check_absolute(&format!("{key}.path"), &f.path, &mut say);
        check_text(format!("{key}.path"), &f.path, &mut say);
        check_mode(&format!("{key}.mode"), &f.mode, &mut say);
        match tree.entries.get(&f.source) {
            Some(EntryKind::File { bytes, .. }) if f.secret => {
                if f.template {
                    say(
                        format!("{key}.template"),
                        "a secret file is put on the machine as it is, never rendered: use a \
                         secret setting in a template instead"
                            .into(),
                    );
                }
                if crate::secret::SecretValue::from_file(bytes).is_err() {
                    say(
                        format!("{key}.source"),
                        format!(
                            "`{}` is marked `secret = true` but is not encrypted: encrypt it \
                             with `mesh-controller secrets encrypt {}` before committing it",
                            f.source, f.source
                        ),
                    );
                }
            }
            Some(EntryKind::File { bytes, .. }) => {
                if f.template {
                    match std::str::from_utf8(bytes) {
                        Ok(text) => check_text(format!("{key}.source"), text, &mut say),
                        Err(_) => say(
                            format!("{key}.source"),
                            format!("the template `{}` is not UTF-8", f.source),
                        ),
                    }
                }
            }
            Some(EntryKind::Symlink { .. }) => say(
                format!("{key}.source"),
                format!("the source `{}` is a symbolic link", f.source),
            ),
            Some(_) => say(
                format!("{key}.source"),
                format!("the source `{}` is not a regular file", f.source),
            ),
            None => say(
                format!("{key}.source"),
                format!("the source `{}` is not in the module directory", f.source),
            ),
        }
    }
    for (name, c) in &d.containers {
        container::check_container(
            &format!("containers.{name}"),
            name,
            c,
            d,
            &mut say,
            &check_text,
        );
    }
    for (name, job) in &d.jobs {
        let key = format!("jobs.{name}");
        container::check_job(&key, name, job, d, &mut say, &check_text);
        if d.containers.contains_key(&format!("job-{name}")) {
            say(
                key,
                format!(
                    "the container `job-{name}` would have the job's name on the machine \
                     (`mesh-{}-job-{name}`)",
                    d.name
                ),
            );
        }
    }
    for (name, line) in &d.lines {
        let key = format!("lines.{name}");
        check_name(&key, name, &mut say);
        check_absolute(&format!("{key}.path"), &line.path, &mut say);
        check_text(format!("{key}.path"), &line.path, &mut say);
        check_text(format!("{key}.line"), &line.line, &mut say);
        if line.line.is_empty() || line.line.contains(['\n', '\r']) {
            say(
                format!("{key}.line"),
                "a line is one line of text, not empty".into(),
            );
        }
        if let Some(replaces) = &line.replaces {
            check_text(format!("{key}.match"), replaces, &mut say);
            if replaces.is_empty() || replaces.contains(['\n', '\r']) {
                say(
                    format!("{key}.match"),
                    "`match` is the start of one line, not empty".into(),
                );
            }
        }
    }
    for (name, mship) in &d.memberships {
        let key = format!("memberships.{name}");
        check_name(&key, name, &mut say);
        check_text(format!("{key}.account"), &mship.account, &mut say);
        check_text(format!("{key}.group"), &mship.group, &mut say);
    }
    for name in d.networks.keys() {
        check_name(&format!("networks.{name}"), name, &mut say);
        if matches!(name.as_str(), "bridge" | "host" | "none" | "podman") {
            say(
                format!("networks.{name}"),
                format!("`{name}` is podman's own network; name the module's another way"),
            );
        }
    }
    for (name, account) in &d.accounts {
        let key = format!("accounts.{name}");
        if let Some(problem) = crate::declaration::account_name_problem(name) {
            say(key.clone(), problem);
        }
        for (field, id) in [("uid", &account.uid), ("gid", &account.gid)] {
            let Some(id) = id else { continue };
            check_text(format!("{key}.{field}"), id, &mut say);
            if !id.contains("{{") && id.parse::<u32>().is_err() {
                say(format!("{key}.{field}"), format!("`{id}` is not a number"));
            }
        }
        if let Some(home) = &account.home {
            check_absolute(&format!("{key}.home"), home, &mut say);
        }
    }
    let refs = d.resource_refs();
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for (group, members) in &d.together {
        let key = format!("together.{group}");
        if members.len() < 2 {
            say(
                key.clone(),
                "a together group needs at least two members".into(),
            );
        }
        for member in members {
            if member.starts_with("network/") || member.starts_with("line/") {
                let kind = member.split('/').next().unwrap_or_default();
                say(
                    key.clone(),
                    format!("`{member}`: a {kind} cannot be in a together group"),
                );
            } else if !refs.contains(member) {
                say(
                    key.clone(),
                    format!("`{member}` is not a resource of this module (expected kind/name)"),
                );
            } else if let Some(other) = seen.insert(member, group) {
                say(
                    key.clone(),
                    format!("`{member}` is already in the together group `{other}`"),
                );
            }
        }
    }
}

fn check_mode(key: &str, mode: &str, say: &mut dyn FnMut(String, String)) {
    if parse_mode(mode).is_none() {
        say(
            key.to_owned(),
            format!("`{mode}` is not an octal mode such as 0644"),
        );
    }
}
