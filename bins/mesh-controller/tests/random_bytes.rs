//! The controller's own records fed random bytes and changed valid ones: `inventory.toml`, a
//! settings layer, what a node was last sent, and a node's last report, in the embedded home.
//! The property: no panic; reading the mesh (its inventory, a layer, the catalogue with its
//! settings checked, `status`) either works or is refused naming the file; and no read changes
//! anything in the home.
//!
//! CI runs a few dozen cases; `scripts/fuzz` runs 10,000 (`PROPTEST_CASES`).

use mesh_controller::home::Home;
use mesh_model::declaration::Declaration;
use mesh_model::inventory::LayerScope;
use mesh_model::report::Report;
use mesh_test_support::mutate::{byte_edits, cases, edit_bytes, edit_value, value_edits};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const DECLARATION: &str = include_str!("../../../mesh-model/tests/fixtures/declaration.json");
const REPORT: &str = include_str!("../../../mesh-model/tests/fixtures/report.json");

/// The files a case may change, each with its valid content.
const FILES: [&str; 4] = [
    "inventory.toml",
    "settings/base/mesh.json",
    "sent/home.json",
    "reports/home.json",
];

/// The example mesh in a temporary home, with `home` sent a declaration and reporting on it.
struct Mesh {
    _dir: tempfile::TempDir,
    home: Home,
}

impl Mesh {
    fn new() -> Mesh {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path().join("home"));
        mesh_controller::runtime::init::init(&home, true).expect("the example initializes");
        let declaration = Declaration::from_json(DECLARATION.as_bytes()).unwrap();
        home.sent().record(&declaration).unwrap();
        let mut report = Report::from_json(REPORT.as_bytes()).unwrap();
        report.node = "home".to_owned();
        report.declaration = declaration.digest();
        home.reports().record(&report).unwrap();
        Mesh { _dir: dir, home }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.home.root().join(file)
    }

    fn valid(&self, file: &str) -> Vec<u8> {
        std::fs::read(self.path(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
    }

    /// Every file of the home: path → bytes.
    fn everything(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                if entry.file_type().unwrap().is_dir() {
                    walk(&entry.path(), out);
                } else {
                    out.insert(entry.path(), std::fs::read(entry.path()).unwrap());
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(self.home.root(), &mut out);
        out
    }

    /// Writes `bytes` as `file`, reads the mesh every way `status` and `check` do, and checks
    /// the property.
    fn read_over(&self, file: &str, bytes: &[u8]) -> Result<(), TestCaseError> {
        std::fs::write(self.path(file), bytes).unwrap();
        let before = self.everything();
        let name = Path::new(file)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let named = |said: String| -> Result<(), TestCaseError> {
            prop_assert!(
                said.contains(&name) || said.contains(file),
                "the refusal does not name `{file}`: {said}"
            );
            Ok(())
        };
        if let Err(e) = self.home.inventory() {
            named(e.to_string())?;
        }
        if let Err(e) = self.home.layers().get("base", &LayerScope::Mesh) {
            named(e.to_string())?;
        }
        if let Err(e) = self.home.sent().get("home") {
            named(e.to_string())?;
        }
        if let Err(e) = self.home.reports().get("home") {
            named(e.to_string())?;
        }
        if let Err(e) = mesh_controller::status::overview(&self.home, 1_800_000_000, 60) {
            named(e.to_string())?;
        }
        prop_assert_eq!(self.everything(), before, "a read changed the home");
        Ok(())
    }
}

#[test]
fn the_valid_home_reads() {
    let mesh = Mesh::new();
    for file in FILES {
        mesh.read_over(file, &mesh.valid(file)).unwrap();
    }
    mesh_controller::status::overview(&mesh.home, 1_800_000_000, 60).expect("status reads");
    assert!(mesh.home.reports().get("home").unwrap().is_some());
    assert!(mesh.home.sent().get("home").unwrap().is_some());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(32)))]

    #[test]
    fn a_record_of_random_bytes_is_refused_by_name_or_read(
        which in 0usize..FILES.len(),
        bytes in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        Mesh::new().read_over(FILES[which], &bytes)?;
    }

    #[test]
    fn a_record_with_bytes_changed_is_refused_by_name_or_read(
        which in 0usize..FILES.len(),
        edits in byte_edits(),
    ) {
        let mesh = Mesh::new();
        let valid = mesh.valid(FILES[which]);
        mesh.read_over(FILES[which], &edit_bytes(&valid, &edits))?;
    }

    #[test]
    fn a_json_record_with_values_changed_is_refused_by_name_or_read(
        which in 1usize..FILES.len(),
        edits in value_edits(),
    ) {
        let mesh = Mesh::new();
        let valid = String::from_utf8(mesh.valid(FILES[which])).unwrap();
        mesh.read_over(FILES[which], &edit_value(&valid, &edits))?;
    }
}
