//! Random bytes, and structured mutations of valid inputs, fed to every parser mesh-model owns:
//! declarations and reports (the wire between controller and host), `module.toml` through
//! catalogue loading, and templates. The property is the same for each: no panic, and what is
//! accepted is sound — a declaration read is one whose rules hold and that reads back the same
//! from its own canonical bytes, a report reads back the same, a catalogue that refuses a module
//! says so in a diagnostic naming it.
//!
//! CI runs proptest's default number of cases per parser; `scripts/fuzz` runs 10,000
//! (`PROPTEST_CASES`).

use mesh_model::declaration::Declaration;
use mesh_model::module::{load_catalogue, CatalogueSource, EntryKind, ModuleTree};
use mesh_model::report::Report;
use mesh_test_support::mutate::{byte_edits, cases, edit_bytes, edit_value, value_edits};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

const DECLARATION: &str = include_str!("fixtures/declaration.json");
const REPORT: &str = include_str!("fixtures/report.json");
const MEDIA_MODULE: &str = include_str!("../../book/example/catalogue/modules/media/module.toml");
const EXAMPLE_MODULES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../book/example/catalogue/modules"
);

/// What a declaration parser may do with any bytes: refuse them, or accept a sound declaration
/// that reads back the same from its canonical bytes.
fn declaration_holds(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(declaration) = Declaration::from_json(bytes) {
        prop_assert!(declaration.problems().is_empty());
        let again = Declaration::from_json(&declaration.canonical_json())
            .map_err(|e| TestCaseError::fail(format!("its own bytes are refused: {e}")))?;
        prop_assert_eq!(again.digest(), declaration.digest());
    }
    Ok(())
}

/// A report accepted reads back the same.
fn report_holds(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(report) = Report::from_json(bytes) {
        let json = serde_json::to_vec(&report).expect("a report serializes");
        let again = Report::from_json(&json)
            .map_err(|e| TestCaseError::fail(format!("its own bytes are refused: {e}")))?;
        prop_assert_eq!(again, report);
    }
    Ok(())
}

/// The example's module directory `name`, as a tree (files only: the example has no links).
fn example_tree(name: &str) -> ModuleTree {
    fn walk(dir: &Path, rel: &str, entries: &mut BTreeMap<String, EntryKind>) {
        for entry in std::fs::read_dir(dir)
            .expect("the example is readable")
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if entry.file_type().expect("a file type").is_dir() {
                entries.insert(path.clone(), EntryKind::Directory);
                walk(&entry.path(), &path, entries);
            } else {
                let bytes = std::fs::read(entry.path()).expect("the example is readable");
                entries.insert(
                    path,
                    EntryKind::File {
                        bytes,
                        executable: false,
                    },
                );
            }
        }
    }
    let mut entries = BTreeMap::new();
    walk(&Path::new(EXAMPLE_MODULES).join(name), "", &mut entries);
    ModuleTree { entries }
}

/// The example's modules, with `media`'s `module.toml` replaced by `module_toml`.
fn catalogue_of(module_toml: &[u8]) -> CatalogueSource {
    let mut modules: BTreeMap<String, ModuleTree> = std::fs::read_dir(EXAMPLE_MODULES)
        .expect("the example is readable")
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .map(|name| (name.clone(), example_tree(&name)))
        .collect();
    // The example's secret file is in clear in the book; `init --example` encrypts it.
    let sealed = mesh_model::secret::SecretValue {
        digest: format!("sha256:{}", "0".repeat(64)),
        ciphertext: "YWdlLWVuY3J5cHRpb24=".into(),
    };
    modules
        .get_mut("tls")
        .expect("the example has `tls`")
        .entries
        .insert(
            "files/key.pem".to_owned(),
            EntryKind::File {
                bytes: sealed.to_file().into_bytes(),
                executable: false,
            },
        );
    let media = modules.get_mut("media").expect("the example has `media`");
    media.entries.insert(
        "module.toml".to_owned(),
        EntryKind::File {
            bytes: module_toml.to_vec(),
            executable: false,
        },
    );
    CatalogueSource {
        prefix: "modules".to_owned(),
        modules,
        archives: BTreeMap::new(),
    }
}

/// A catalogue whose `media` module is refused names it in a diagnostic; `base`, which nothing
/// of `media` touches, is loaded whatever `media` holds.
fn catalogue_holds(module_toml: &[u8]) -> Result<(), TestCaseError> {
    let (catalogue, diagnostics) = load_catalogue(&catalogue_of(module_toml));
    prop_assert!(catalogue.modules.contains_key("base"), "{diagnostics:?}");
    if !catalogue.modules.contains_key("media") {
        prop_assert!(
            diagnostics
                .iter()
                .any(|d| d.file.contains("media") || d.module.as_deref() == Some("media")),
            "refused without a diagnostic naming it: {diagnostics:?}"
        );
    }
    Ok(())
}

#[test]
fn the_fixtures_are_accepted() {
    Declaration::from_json(DECLARATION.as_bytes()).expect("the declaration fixture reads");
    Report::from_json(REPORT.as_bytes()).expect("the report fixture reads");
    let (catalogue, diagnostics) = load_catalogue(&catalogue_of(MEDIA_MODULE.as_bytes()));
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    assert!(catalogue.modules.contains_key("media"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    #[test]
    fn a_declaration_of_random_bytes_is_refused_or_sound(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        declaration_holds(&bytes)?;
    }

    #[test]
    fn a_declaration_with_bytes_changed_is_refused_or_sound(edits in byte_edits()) {
        declaration_holds(&edit_bytes(DECLARATION.as_bytes(), &edits))?;
    }

    #[test]
    fn a_declaration_with_values_changed_is_refused_or_sound(edits in value_edits()) {
        declaration_holds(&edit_value(DECLARATION, &edits))?;
    }

    #[test]
    fn a_report_of_random_bytes_is_refused_or_reads_back(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        report_holds(&bytes)?;
    }

    #[test]
    fn a_report_with_bytes_changed_is_refused_or_reads_back(edits in byte_edits()) {
        report_holds(&edit_bytes(REPORT.as_bytes(), &edits))?;
    }

    #[test]
    fn a_report_with_values_changed_is_refused_or_reads_back(edits in value_edits()) {
        report_holds(&edit_value(REPORT, &edits))?;
    }

    #[test]
    fn a_module_toml_of_random_bytes_is_refused_by_name(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        catalogue_holds(&bytes)?;
    }

    #[test]
    fn a_module_toml_with_bytes_changed_is_refused_by_name_or_loaded(edits in byte_edits()) {
        catalogue_holds(&edit_bytes(MEDIA_MODULE.as_bytes(), &edits))?;
    }

    #[test]
    fn a_template_of_any_text_renders_or_is_refused(text in ".{0,64}", braces in "[{} a-z.]{0,32}") {
        let settings = serde_json::json!({"a": {"b": 1}, "port": 8080});
        let text = format!("{text}{braces}");
        if let Ok(keys) = mesh_model::template::references(&text) {
            for key in keys {
                prop_assert!(!key.is_empty());
            }
        }
        let _ = mesh_model::template::render(&text, &settings);
    }
}
