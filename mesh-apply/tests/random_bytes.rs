//! The host's own state files fed random bytes and changed valid ones: `state.json`,
//! `in-progress.json`, `group-commit.json` and a window's record. The property: no panic, and a
//! refusal names the file and changes nothing — not under the root, not in the state directory,
//! and nothing outside the root (a canary beside it stays).
//!
//! CI runs proptest's default number of cases; `scripts/fuzz` runs 10,000 (`PROPTEST_CASES`).

mod common;

use common::*;
use mesh_apply::state::{GroupCommit, GroupDirectory, GroupFile, STATE_FORMAT};
use mesh_apply::window::{WindowFile, WINDOW_FORMAT};
use mesh_apply::{apply, is_mid_change};
use mesh_model::declaration::Declaration;
use mesh_test_support::mutate::{byte_edits, cases, edit_bytes, edit_value, value_edits};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

const T0: u64 = 1_800_000_000;

/// A machine after one good apply: a file, a directory, and a canary outside the root.
struct Machine {
    sandbox: Sandbox,
    declaration: Declaration,
    canary: PathBuf,
}

impl Machine {
    fn new() -> Self {
        let sandbox = Sandbox::new();
        let declaration = declaration(vec![
            directory("app", "data", "/srv/app", 0o750),
            file("app", "conf", "/etc/app.conf", "port = 8080\n"),
        ]);
        apply(&sandbox.config, &declaration, T0).expect("the first apply runs");
        let canary = sandbox.config.root.parent().unwrap().join("canary");
        fs::write(&canary, "outside the root\n").unwrap();
        Machine {
            sandbox,
            declaration,
            canary,
        }
    }

    fn state(&self, name: &str) -> PathBuf {
        self.sandbox.config.state_dir.join(name)
    }

    /// Everything under the root and the state directory, and the canary: path → (kind or
    /// bytes, mode).
    fn everything(&self) -> BTreeMap<PathBuf, (Vec<u8>, u32)> {
        fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, (Vec<u8>, u32)>) {
            let Ok(entries) = fs::read_dir(dir) else {
                return;
            };
            for entry in entries.flatten() {
                let meta = entry.path().symlink_metadata().unwrap();
                if meta.is_dir() {
                    out.insert(entry.path(), (b"<dir>".to_vec(), meta.mode()));
                    walk(&entry.path(), out);
                } else {
                    out.insert(entry.path(), (fs::read(entry.path()).unwrap(), meta.mode()));
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(&self.sandbox.config.root, &mut out);
        walk(&self.sandbox.config.state_dir, &mut out);
        out.insert(
            self.canary.clone(),
            (fs::read(&self.canary).unwrap_or_default(), 0),
        );
        out
    }

    /// Writes `bytes` as the state file `name`, applies again, and checks the property.
    fn apply_over(&self, name: &str, bytes: &[u8]) -> Result<(), TestCaseError> {
        let path = self.state(name);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, bytes).unwrap();
        let _ = is_mid_change(&self.sandbox.config.state_dir);
        let _ = mesh_apply::window::list(&self.sandbox.config.state_dir, T0 + 1);
        let before = self.everything();
        match apply(&self.sandbox.config, &self.declaration, T0 + 1) {
            Ok(_) => {}
            Err(error) => {
                let said = error.to_string();
                let file_name = Path::new(name).file_name().unwrap().to_string_lossy();
                prop_assert!(
                    said.contains(&*file_name) || said.contains("windows"),
                    "the refusal does not name `{name}`: {said}"
                );
                prop_assert_eq!(self.everything(), before, "a refusal changed something");
            }
        }
        prop_assert!(self.canary.exists(), "the canary outside the root is gone");
        Ok(())
    }
}

fn valid_state(machine: &Machine) -> String {
    fs::read_to_string(machine.state("state.json")).expect("the first apply wrote its state")
}

fn valid_in_progress(machine: &Machine) -> String {
    serde_json::json!({
        "format": STATE_FORMAT,
        "declaration": machine.declaration.digest(),
        "started-at": T0,
    })
    .to_string()
}

/// A record of a together group mid-commit, every target under the root.
fn valid_group_commit(machine: &Machine) -> String {
    let root = &machine.sandbox.config.root;
    serde_json::to_string(&GroupCommit {
        format: STATE_FORMAT,
        group: "app/serve".to_owned(),
        files: vec![
            GroupFile {
                target: root.join("etc/app.conf"),
                existed: true,
            },
            GroupFile {
                target: root.join("etc/app.extra"),
                existed: false,
            },
        ],
        directories: vec![GroupDirectory {
            target: root.join("srv/app/cache"),
            created: true,
            mode: 0o750,
            uid: 0,
            gid: 0,
        }],
        memberships: Vec::new(),
        containers: Vec::new(),
        newer: Default::default(),
    })
    .unwrap()
}

fn valid_window() -> String {
    serde_json::to_string(&WindowFile {
        format: WINDOW_FORMAT,
        step: "backup".to_owned(),
        containers: vec!["mesh-app-server".to_owned()],
        pid: 1,
        process_start: 1,
        opened_at: T0,
    })
    .unwrap()
}

#[test]
fn the_valid_files_are_accepted() {
    let machine = Machine::new();
    for (name, bytes) in [
        ("state.json", valid_state(&machine)),
        ("in-progress.json", valid_in_progress(&machine)),
        ("group-commit.json", valid_group_commit(&machine)),
    ] {
        fs::write(machine.state(name), bytes).unwrap();
        apply(&machine.sandbox.config, &machine.declaration, T0 + 1)
            .unwrap_or_else(|e| panic!("{name} is refused: {e}"));
    }
    assert!(
        !machine.state("group-commit.json").exists(),
        "the group was put back"
    );
}

/// A group record naming a file outside the root — a state directory copied from another
/// machine, or a damaged one — is refused whole: putting it back would remove that file.
#[test]
fn a_group_record_naming_a_path_outside_the_root_is_refused_and_changes_nothing() {
    let machine = Machine::new();
    for outside in [
        machine.canary.clone(),
        machine.sandbox.config.root.join("../canary"),
    ] {
        let record = GroupCommit {
            format: STATE_FORMAT,
            group: "app/serve".to_owned(),
            files: vec![GroupFile {
                target: outside.clone(),
                existed: false,
            }],
            directories: Vec::new(),
            memberships: Vec::new(),
            containers: Vec::new(),
            newer: Default::default(),
        };
        let bytes = serde_json::to_vec(&record).unwrap();
        fs::write(machine.state("group-commit.json"), &bytes).unwrap();
        let before = machine.everything();
        let error = apply(&machine.sandbox.config, &machine.declaration, T0 + 1)
            .expect_err("a record reaching outside the root is refused");
        let said = error.to_string();
        assert!(said.contains("group-commit.json"), "{said}");
        assert!(said.contains("not under the root"), "{said}");
        assert!(
            machine.canary.exists(),
            "{} was removed",
            machine.canary.display()
        );
        assert_eq!(machine.everything(), before);
        assert_eq!(fs::read(machine.state("group-commit.json")).unwrap(), bytes);
    }
}

/// A group record naming a file under a file (`etc/app.conf/…`: two paths run together) was
/// put back until the file system refused, and the apply was refused naming that path — not
/// the record at fault, which the next apply read again. (Issue 46, item 7: found by
/// `scripts/fuzz`'s first run at 10,000 cases.)
#[test]
fn a_group_record_naming_a_path_under_a_file_is_refused_by_name_and_changes_nothing() {
    let machine = Machine::new();
    let root = &machine.sandbox.config.root;
    let record = GroupCommit {
        format: STATE_FORMAT,
        group: "app/serve".to_owned(),
        files: vec![GroupFile {
            target: root
                .join("etc/app.conf")
                .join(root.strip_prefix("/").unwrap()),
            existed: false,
        }],
        directories: Vec::new(),
        memberships: Vec::new(),
        containers: Vec::new(),
        newer: Default::default(),
    };
    let bytes = serde_json::to_vec(&record).unwrap();
    machine.apply_over("group-commit.json", &bytes).unwrap();
    let error = apply(&machine.sandbox.config, &machine.declaration, T0 + 1)
        .expect_err("a record naming a path under a file is refused");
    assert!(error.to_string().contains("group-commit.json"), "{error}");
    assert!(error.to_string().contains("not a directory"), "{error}");
}

/// A group record naming a file through a link under the root reached wherever the link led:
/// putting the group back removed the file there, outside the root. A record reaching through
/// anything but a directory is refused whole now, before anything is touched.
#[test]
fn a_group_record_naming_a_path_through_a_link_is_refused_and_removes_nothing() {
    let machine = Machine::new();
    let root = &machine.sandbox.config.root;
    let link = root.join("srv/app/out");
    std::os::unix::fs::symlink(machine.canary.parent().unwrap(), &link).unwrap();
    let record = GroupCommit {
        format: STATE_FORMAT,
        group: "app/serve".to_owned(),
        files: vec![GroupFile {
            target: link.join("canary"),
            existed: false,
        }],
        directories: Vec::new(),
        memberships: Vec::new(),
        containers: Vec::new(),
        newer: Default::default(),
    };
    fs::write(
        machine.state("group-commit.json"),
        serde_json::to_vec(&record).unwrap(),
    )
    .unwrap();
    let error = apply(&machine.sandbox.config, &machine.declaration, T0 + 1)
        .expect_err("a record reaching through a link is refused");
    assert!(error.to_string().contains("group-commit.json"), "{error}");
    assert!(
        machine.canary.exists(),
        "the file the link led to was removed"
    );
    assert!(machine.state("group-commit.json").exists());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(48)))]

    #[test]
    fn a_state_file_of_random_bytes_is_refused_by_name(
        which in 0usize..4,
        bytes in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let name = ["state.json", "in-progress.json", "group-commit.json", "windows/1-1.json"][which];
        Machine::new().apply_over(name, &bytes)?;
    }

    #[test]
    fn a_state_file_with_bytes_changed_is_refused_by_name_or_read(
        which in 0usize..4,
        edits in byte_edits(),
    ) {
        let machine = Machine::new();
        let (name, valid) = match which {
            0 => ("state.json", valid_state(&machine)),
            1 => ("in-progress.json", valid_in_progress(&machine)),
            2 => ("group-commit.json", valid_group_commit(&machine)),
            _ => ("windows/1-1.json", valid_window()),
        };
        machine.apply_over(name, &edit_bytes(valid.as_bytes(), &edits))?;
    }

    #[test]
    fn a_state_file_with_values_changed_is_refused_by_name_or_read(
        which in 0usize..4,
        edits in value_edits(),
    ) {
        let machine = Machine::new();
        let (name, valid) = match which {
            0 => ("state.json", valid_state(&machine)),
            1 => ("in-progress.json", valid_in_progress(&machine)),
            2 => ("group-commit.json", valid_group_commit(&machine)),
            _ => ("windows/1-1.json", valid_window()),
        };
        machine.apply_over(name, &edit_value(&valid, &edits))?;
    }
}
