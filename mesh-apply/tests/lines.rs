//! The `lines` kind end to end, against a sandbox root: a module file's `[lines.NAME]` is
//! checked, composed into a node's declaration, previewed (`plan --diff`), applied (the line
//! added, or put in place of the one its `match` names, every other line of the file left as it
//! was), seen as drift when removed by hand and put back, and given back when its module leaves
//! the node (removed, or the replaced line restored; a line that was there before stays).

mod common;

use common::Sandbox;
use mesh_apply::apply;
use mesh_apply::drift::Examiner;
use mesh_apply::NoContainerRuntime;
use mesh_model::declaration::{Declaration, Spec};
use mesh_model::inventory::{Inventory, InventoryFile};
use mesh_model::module::{load_catalogue, Catalogue, CatalogueSource, EntryKind};
use mesh_model::report::{Outcome, Report};

const MODULE: &str = r#"
name = "hosts"

[settings]
address = "10.0.0.5"

[lines.media]
path = "/etc/hosts"
line = "{{ address }} media.internal"

[lines.name]
path = "/etc/hosts"
line = "127.0.1.1 node-a.internal node-a"
match = "127.0.1.1 "

[lines.localhost]
path = "/etc/hosts"
line = "127.0.0.1 localhost"
"#;

/// The file as the machine had it before the mesh.
const HOSTS: &str = "127.0.0.1 localhost\n127.0.1.1 old-name\n::1 localhost ip6-localhost\n";

const T0: u64 = 1_700_000_000;

/// A catalogue of the module `hosts` with `module_toml`, and every diagnostic of its check.
fn catalogue(module_toml: &str) -> (Catalogue, Vec<String>) {
    let mut source = CatalogueSource {
        prefix: "modules".into(),
        ..CatalogueSource::default()
    };
    source
        .modules
        .entry("hosts".to_owned())
        .or_default()
        .entries
        .insert(
            "module.toml".to_owned(),
            EntryKind::File {
                bytes: module_toml.as_bytes().to_vec(),
                executable: false,
            },
        );
    let (catalogue, diagnostics) = load_catalogue(&source);
    let said = diagnostics.iter().map(ToString::to_string).collect();
    (catalogue, said)
}

/// The inventory of one node `a`, `hosts` assigned to it or not.
fn inventory(assigned: bool) -> Inventory {
    let assignments = if assigned {
        serde_json::json!({ "hosts": ["a"] })
    } else {
        serde_json::json!({})
    };
    let file: InventoryFile = serde_json::from_value(serde_json::json!({
        "bus-node": "a",
        "nodes": { "a": {} },
        "assignments": assignments,
    }))
    .unwrap();
    Inventory {
        file,
        ..Inventory::default()
    }
}

fn outcome<'r>(report: &'r Report, id: &str) -> &'r Outcome {
    report
        .resources
        .get(id)
        .or_else(|| report.undeclared.get(id))
        .unwrap_or_else(|| panic!("no outcome for {id}: {report:#?}"))
}

fn applied(changed: &str) -> Outcome {
    Outcome::Applied {
        changed: vec![changed.to_owned()],
    }
}

#[test]
fn a_line_is_kept_in_a_file_the_mesh_did_not_make_seen_when_removed_and_given_back() {
    // Check: the module is sound.
    let (catalogue, said) = catalogue(MODULE);
    assert!(said.is_empty(), "{said:?}");
    // Compose: each line rendered from the module's settings.
    let declaration: Declaration = mesh_plan::compose(&catalogue, &inventory(true), "a").unwrap();
    let Some(Spec::Line(media)) = declaration.resource("hosts/line/media").map(|r| &r.spec) else {
        panic!("no line: {declaration:#?}");
    };
    assert_eq!(media.line, "10.0.0.5 media.internal");
    assert_eq!(media.path, "/etc/hosts");
    // The preview a person reads before the first send.
    let preview = mesh_plan::diff(None, &declaration).render_text();
    insta::assert_snapshot!("preview", preview);

    // Apply under a sandbox root: the line added at the end, the named one put in place of the
    // line its `match` starts, the one already there taken as found; the rest as it was.
    let sandbox = Sandbox::new();
    sandbox.write("/etc/hosts", HOSTS, 0o644);
    let report = apply(&sandbox.config, &declaration, T0).unwrap();
    assert_eq!(*outcome(&report, "hosts/line/media"), applied("added"));
    assert_eq!(*outcome(&report, "hosts/line/name"), applied("replaced"));
    assert_eq!(
        *outcome(&report, "hosts/line/localhost"),
        Outcome::Unchanged
    );
    assert_eq!(
        sandbox.read("/etc/hosts"),
        "127.0.0.1 localhost\n127.0.1.1 node-a.internal node-a\n::1 localhost ip6-localhost\n\
         10.0.0.5 media.internal\n"
    );
    assert_eq!(sandbox.mode("/etc/hosts"), 0o644);
    // Again: nothing changes.
    let report = apply(&sandbox.config, &declaration, T0 + 1).unwrap();
    assert!(
        report.resources.values().all(|o| *o == Outcome::Unchanged),
        "{report:#?}"
    );

    // A hand edit removes the line and adds one of its own: the removal is drift, seen.
    let mut examiner = Examiner::open(&sandbox.config.state_dir);
    assert!(examiner
        .examine(
            &sandbox.config,
            &declaration,
            &report,
            &NoContainerRuntime,
            T0 + 2,
            true
        )
        .is_empty());
    sandbox.write(
        "/etc/hosts",
        "127.0.0.1 localhost\n127.0.1.1 node-a.internal node-a\n::1 localhost ip6-localhost\n\
         192.168.1.9 printer\n",
        0o644,
    );
    let drift = examiner.examine(
        &sandbox.config,
        &declaration,
        &report,
        &NoContainerRuntime,
        T0 + 3,
        true,
    );
    let seen: Vec<(&str, &str, &str, &str)> = drift
        .iter()
        .map(|d| (&*d.resource, &*d.field, &*d.was, &*d.found))
        .collect();
    assert_eq!(
        seen,
        [(
            "hosts/line/media",
            "line",
            "10.0.0.5 media.internal",
            "absent"
        )]
    );
    // Corrected by the next apply, the hand's own line kept.
    let report = apply(&sandbox.config, &declaration, T0 + 4).unwrap();
    assert_eq!(*outcome(&report, "hosts/line/media"), applied("added"));
    assert_eq!(
        sandbox.read("/etc/hosts"),
        "127.0.0.1 localhost\n127.0.1.1 node-a.internal node-a\n::1 localhost ip6-localhost\n\
         192.168.1.9 printer\n10.0.0.5 media.internal\n"
    );

    // The module leaves the node: each line given back, the file's other lines kept.
    let without = mesh_plan::compose(&catalogue, &inventory(false), "a").unwrap();
    let preview = mesh_plan::diff(Some(&declaration), &without).render_text();
    insta::assert_snapshot!("preview_of_leaving", preview);
    let report = apply(&sandbox.config, &without, T0 + 5).unwrap();
    for id in [
        "hosts/line/media",
        "hosts/line/name",
        "hosts/line/localhost",
    ] {
        assert!(
            matches!(outcome(&report, id), Outcome::Removed { .. }),
            "{id}: {report:#?}"
        );
    }
    let details: Vec<String> = report
        .undeclared
        .iter()
        .map(|(id, o)| format!("{id}: {o:?}"))
        .collect();
    insta::assert_snapshot!("given_back", details.join("\n"));
    assert_eq!(
        sandbox.read("/etc/hosts"),
        "127.0.0.1 localhost\n127.0.1.1 old-name\n::1 localhost ip6-localhost\n\
         192.168.1.9 printer\n"
    );
}

#[test]
fn a_line_in_a_file_that_is_not_there_fails_and_makes_no_file() {
    let (catalogue, _) = catalogue(MODULE);
    let declaration = mesh_plan::compose(&catalogue, &inventory(true), "a").unwrap();
    let sandbox = Sandbox::new();
    let report = apply(&sandbox.config, &declaration, T0).unwrap();
    let Outcome::Failed { reason, .. } = outcome(&report, "hosts/line/media") else {
        panic!("{report:#?}");
    };
    assert!(reason.contains("`/etc/hosts` is not there"), "{reason}");
    assert!(!sandbox.exists("/etc/hosts"));
}

#[test]
fn a_bad_line_is_named_by_its_key_and_a_line_in_a_declared_file_is_refused() {
    let (_, said) = catalogue(
        r#"
name = "hosts"
[lines.relative]
path = "etc/hosts"
line = "{{ nope }}"
[lines.two]
path = "/etc/hosts"
line = "a\nb"
match = ""
[lines.grouped]
path = "/etc/hosts"
line = "x"
[together]
both = ["line/grouped", "line/two"]
"#,
    );
    let said = said.join("\n");
    for says in [
        "`lines.relative.path`: `etc/hosts` is not an absolute path",
        "`lines.relative.line`: refers to the unknown setting `nope`",
        "`lines.two.line`: a line is one line of text, not empty",
        "`lines.two.match`: `match` is the start of one line, not empty",
        "`line/grouped`: a line cannot be in a together group",
    ] {
        assert!(said.contains(says), "{says}\n{said}");
    }
    // A directory (or file) the declaration holds whole holds no line.
    let (catalogue, said) = catalogue(
        r#"
name = "hosts"
[directories.etc]
path = "/etc/hosts"
[lines.media]
path = "/etc/hosts"
line = "10.0.0.5 media.internal"
"#,
    );
    assert!(said.is_empty(), "{said:?}");
    let error = mesh_plan::compose(&catalogue, &inventory(true), "a").unwrap_err();
    assert!(
        error.to_string().contains(
            "`hosts/line/media` keeps a line in `/etc/hosts`, which `hosts/directory/etc` \
                       declares whole"
        ),
        "{error}"
    );
}
