//! The controller's own records fed random bytes and changed valid ones, in the embedded home:
//! `inventory.toml`, a settings layer and a replaced one kept in its history, what a node was
//! last sent and its last report, a plan (and one of format 1, migrated on its first read), a
//! rollout's records of its nodes (a node's own, a step's, the nodes running at its start), the
//! daemon's heartbeat, a node's acknowledged drift and a module's deployed build.
//!
//! The property: no panic; every reader of the mesh (`status`, the plans and their rollouts,
//! the settings and their history, the deployed builds, the heartbeat) either reads or refuses
//! naming the file; a record accepted is of a format this build reads; and no read changes
//! anything in the home — but the migration of the format-1 plan, which rewrites that plan and
//! writes its rollouts' records, and only when it reads.
//!
//! CI runs a few dozen cases; `scripts/fuzz` runs 10,000 (`PROPTEST_CASES`).

use mesh_bus::jetstream::MergesWaiting;
use mesh_controller::bus::Heartbeat;
use mesh_controller::catalogue::DeployedRecord;
use mesh_controller::catalogue::NotSent;
use mesh_controller::plans::ModuleWork;
use mesh_controller::plans::PlanRecord;
use mesh_controller::plans::RolloutKept;
use mesh_controller::plans::RolloutNodeRecord;
use mesh_controller::plans::RunningNode;
use mesh_controller::plans::PLAN_FORMAT;
use mesh_controller::plans::ROLLOUT_NODE_FORMAT;
use mesh_controller::status::Acks;
use mesh_controller::Home;
use mesh_controller::LayerChange;
use mesh_model::build::{ArchiveRef, Build};
use mesh_model::declaration::Declaration;
use mesh_model::inventory::LayerScope;
use mesh_model::module::{OnFailure, Upgrade};
use mesh_model::plan::{ModuleRollout, Plan, PlanState};
use mesh_model::report::Report;
use mesh_plan::rollout::{NodeProgress, RolloutParts, Stage};
use mesh_plan::Move;
use mesh_test_support::mutate::{
    byte_edits, cases, edit_bytes, edit_value, files_under, reset_dir, value_edits,
};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const DECLARATION: &str = include_str!("../../../mesh-model/tests/fixtures/declaration.json");
const REPORT: &str = include_str!("../../../mesh-model/tests/fixtures/report.json");
const PLAN_OF_FORMAT_1: &str = include_str!("fixtures/v1-home/plans/plan-1.json");

/// When `status` looks (seconds since the epoch); the records were written ten minutes before.
const NOW: u64 = 1_800_000_000;
const AT: u64 = NOW - 600;

/// A record a case may change: its file, and the formats a reader accepts it in (none: the file
/// is not versioned).
struct Record {
    file: &'static str,
    formats: &'static [u64],
}

const RECORDS: [Record; 13] = [
    Record {
        file: "inventory.toml",
        formats: &[],
    },
    Record {
        file: "settings/base/mesh.json",
        formats: &[],
    },
    // A pointer to the declaration (format 1), or the whole declaration as the format before
    // kept it (a declaration's format, 2).
    Record {
        file: "sent/home.json",
        formats: &[1, 2],
    },
    // A report that does not read is its node's problem, which `status` shows, never a
    // refusal of the reader: whatever it holds, the reader goes on.
    Record {
        file: "reports/home.json",
        formats: &[],
    },
    Record {
        file: "plans/plan-1.json",
        formats: &[PLAN_FORMAT as u64],
    },
    Record {
        file: "plans/plan-2.json",
        formats: &[1, PLAN_FORMAT as u64],
    },
    Record {
        file: "rollouts/plan-1/base/home.json",
        formats: &[1],
    },
    Record {
        file: "rollouts/plan-1/base/steps/0000000000.json",
        formats: &[1],
    },
    Record {
        file: "rollouts/plan-1/base.running.json",
        formats: &[1],
    },
    Record {
        file: "daemon/heartbeat.json",
        formats: &[1],
    },
    Record {
        file: "acks/home.json",
        formats: &[1],
    },
    Record {
        file: "deployed/base.json",
        formats: &[1],
    },
    Record {
        file: "history/settings/base/mesh/000001.json",
        formats: &[1],
    },
];

/// What the format-1 plan's migration may write: the plan itself, its rollouts' records and the
/// declarations its nodes ran before.
fn written_by_migration(relative: &Path) -> bool {
    relative == Path::new("plans/plan-2.json")
        || relative.starts_with("rollouts/plan-2")
        || relative.starts_with("declarations")
}

fn archive(seed: &str) -> ArchiveRef {
    ArchiveRef {
        digest: mesh_model::sha256_digest(seed.as_bytes()),
        size: 193,
    }
}

/// `plan-1`: `base` rolling out — `home` went first and applied, `control` was sent, `laptop`
/// is held for a move.
fn open_plan() -> PlanRecord {
    let commit = "d6d15300560ac52eb632b094a387b241fe3f4116";
    let build = Build {
        module: "base".to_owned(),
        repository: "cat".to_owned(),
        commit: commit.to_owned(),
        archive: archive("base"),
        at: AT,
        dry_run: false,
    };
    PlanRecord {
        format: PLAN_FORMAT,
        plan: Plan {
            id: "plan-1".to_owned(),
            repository: "cat".to_owned(),
            branch: "main".to_owned(),
            commit: commit.to_owned(),
            made_at: AT,
            modules: vec!["base".to_owned()],
            tiers: vec![vec!["base".to_owned()]],
            rollouts: BTreeMap::from([(
                "base".to_owned(),
                ModuleRollout {
                    first: Some("home".to_owned()),
                    sent: 2,
                    applied: 1,
                    held: 1,
                    build: Some(build.archive.clone()),
                    ..ModuleRollout::default()
                },
            )]),
            state: PlanState::RollingOut,
        },
        previous_commit: None,
        changed_paths: 1,
        shared_paths: Vec::new(),
        folded: BTreeMap::new(),
        work: BTreeMap::from([(
            "base".to_owned(),
            ModuleWork {
                build: Some(build),
                rollout: Some(RolloutKept {
                    upgrade: Upgrade::OneFirst,
                    on_failure: OnFailure::Revert,
                    deadline_secs: 600,
                    max_parallel: Some(2),
                    bus_first: None,
                    state: RolloutParts {
                        stage: Stage::Rest,
                        first: Some("home".to_owned()),
                        bus_node: None,
                        in_flight: 1,
                        applied: 1,
                        held: 1,
                        sent: 2,
                        nodes: 3,
                        outcome: None,
                    },
                }),
                ..ModuleWork::default()
            },
        )]),
        held: BTreeSet::new(),
        forgotten: BTreeSet::new(),
        nodes_folded: false,
    }
}

/// The format-1 fixture as `plan-2`, `home` having run `declaration` before its rollout.
fn plan_of_format_1(declaration: &Declaration) -> Value {
    let mut plan: Value = serde_json::from_str(PLAN_OF_FORMAT_1).unwrap();
    plan["plan"]["id"] = json!("plan-2");
    plan["work"]["site"]["before"] =
        json!({ "home": serde_json::from_slice::<Value>(&declaration.canonical_json()).unwrap() });
    plan
}

fn node_record(node: &str, digest: &str, progress: NodeProgress) -> RolloutNodeRecord {
    RolloutNodeRecord {
        format: ROLLOUT_NODE_FORMAT,
        node: node.to_owned(),
        running: true,
        declaration: digest.to_owned(),
        before: Some(digest.to_owned()),
        progress,
    }
}

/// The example mesh with every record of [`RECORDS`] written by its own store.
fn write_template(root: &Path) {
    let home = Home::new(root);
    mesh_controller::init(&home, true).expect("the example initializes");
    let declaration = Declaration::from_json(DECLARATION.as_bytes()).unwrap();
    let digest = declaration.digest();
    home.sent().record(&declaration).unwrap();
    let mut report = Report::from_json(REPORT.as_bytes()).unwrap();
    report.node = "home".to_owned();
    report.declaration = digest.clone();
    home.reports().record(&report).unwrap();

    home.layers()
        .replace("base", &LayerScope::Mesh, "settings set", AT, &mut |old| {
            let mut layer = old.cloned().unwrap_or_else(|| json!({}));
            layer["motd"] = json!("hello");
            Ok(LayerChange::Set(layer))
        })
        .unwrap();

    let plans = home.plans();
    plans.write(&open_plan()).unwrap();
    home.put_json("plans/plan-2.json", &plan_of_format_1(&declaration))
        .unwrap();
    plans
        .write_rollout_running(
            "plan-1",
            "base",
            ["control", "home", "laptop"]
                .map(|node| RunningNode {
                    node: node.to_owned(),
                    before: Some(digest.clone()),
                })
                .to_vec(),
        )
        .unwrap();
    plans
        .write_rollout_node(
            "plan-1",
            "base",
            &node_record(
                "home",
                &digest,
                NodeProgress::Applied {
                    sent_at: AT,
                    at: AT + 5,
                },
            ),
        )
        .unwrap();
    let moved = Move {
        module: "base".to_owned(),
        container: "base/container/web".to_owned(),
        at: "/data".to_owned(),
        from: "/srv/web".to_owned(),
        to: "/srv/www".to_owned(),
    };
    plans
        .write_rollout_step(
            "plan-1",
            "base",
            0,
            vec![
                node_record(
                    "control",
                    &digest,
                    NodeProgress::Sent {
                        at: AT + 10,
                        send: Some(format!("control:{digest}:0123456789abcdef")),
                    },
                ),
                node_record(
                    "laptop",
                    &digest,
                    NodeProgress::Held {
                        moves: vec![moved],
                        orphans: Vec::new(),
                        unset: Vec::new(),
                    },
                ),
            ],
        )
        .unwrap();

    let beat = Heartbeat {
        format: 1,
        machine: "control".to_owned(),
        pid: 42,
        turn_at: AT,
        interval_secs: 10,
        merges_waiting: MergesWaiting {
            count: 1,
            oldest_at: Some(AT - 5),
        },
        driving: vec!["plan-1".to_owned()],
        failing: vec!["plan-2".to_owned()],
        stopped_at: None,
    };
    home.put("daemon/heartbeat.json", &serde_json::to_vec(&beat).unwrap())
        .unwrap();
    home.put_json(
        "acks/home.json",
        &Acks {
            format: 1,
            node: "home".to_owned(),
            all: Some(AT),
            resources: BTreeMap::from([("base/file/hello".to_owned(), AT + 1)]),
        },
    )
    .unwrap();
    home.deployed()
        .write(&DeployedRecord {
            format: 1,
            module: "base".to_owned(),
            repository: "cat".to_owned(),
            commit: "d6d15300560ac52eb632b094a387b241fe3f4116".to_owned(),
            archive: archive("base"),
            plan: "plan-1".to_owned(),
            at: AT,
            not_running: BTreeMap::from([(
                "laptop".to_owned(),
                NotSent {
                    before: Some(digest.clone()),
                    declaration: archive("laptop").digest,
                },
            )]),
        })
        .unwrap();
}

/// The files of the home every case starts from, by path relative to it: written once.
fn template() -> &'static BTreeMap<PathBuf, Vec<u8>> {
    static TEMPLATE: OnceLock<BTreeMap<PathBuf, Vec<u8>>> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        write_template(dir.path());
        let files = files_under(dir.path());
        let root = dir.path().to_string_lossy();
        for (path, bytes) in &files {
            assert!(
                !String::from_utf8_lossy(bytes).contains(&*root),
                "{} names the home's directory",
                path.display()
            );
        }
        files
    })
}

/// A case's home: a copy of the template's files. Each test keeps one home (on its thread) and
/// puts back what the case before changed — removing a directory of files per case costs more
/// than the case — so a thread has one `Mesh` at a time.
struct Mesh {
    home: Home,
}

impl Mesh {
    fn new() -> Mesh {
        thread_local! {
            static DIR: tempfile::TempDir = tempfile::tempdir().unwrap();
        }
        let root = DIR.with(|dir| dir.path().to_owned());
        let wanted = template();
        reset_dir(&root, wanted);
        assert_eq!(&files_under(&root), wanted, "the home is the template's");
        Mesh {
            home: Home::new(root),
        }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.home.root().join(file)
    }

    fn valid(&self, file: &str) -> Vec<u8> {
        std::fs::read(self.path(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
    }

    /// Every file of the home, by its path relative to it.
    fn everything(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        files_under(self.home.root())
    }

    /// Every reader of the mesh, in turn: each refusal, said.
    fn refusals(&self) -> Vec<String> {
        let home = &self.home;
        let plans = home.plans();
        let read: [mesh_controller::Result<()>; 12] = [
            home.inventory().map(drop),
            home.layers().get("base", &LayerScope::Mesh).map(drop),
            home.layers().history("base", &LayerScope::Mesh).map(drop),
            home.sent().get("home").map(drop),
            home.reports().get("home").map(drop),
            plans.get("plan-1").map(drop),
            plans.all().map(drop),
            plans.rollout_nodes_recorded("plan-1", "base").map(drop),
            home.deployed().get("base").map(drop),
            home.deployed().all().map(drop),
            mesh_controller::bus::last(home).map(drop),
            mesh_controller::status::overview(home, NOW, 60).map(drop),
        ];
        read.into_iter()
            .filter_map(|result| result.err().map(|e| e.to_string()))
            .collect()
    }

    /// Writes `bytes` as `record`'s file, reads the mesh every way, and checks the property;
    /// what refused it, said.
    fn read_over(&self, record: &Record, bytes: &[u8]) -> Result<Vec<String>, TestCaseError> {
        let file = record.file;
        std::fs::write(self.path(file), bytes).unwrap();
        let name = Path::new(file)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let named = |said: &str| -> Result<(), TestCaseError> {
            prop_assert!(
                said.contains(&name) || said.contains(file),
                "the refusal does not name `{file}`: {said}"
            );
            Ok(())
        };

        // The format-1 plan is migrated on its first read: the one read that may write.
        let start = self.everything();
        let migrated = self.home.plans().get("plan-2");
        match &migrated {
            Err(e) => {
                named(&e.to_string())?;
                prop_assert_eq!(
                    &self.everything(),
                    &start,
                    "a refused read changed the home"
                );
            }
            Ok(_) => {
                let now = self.everything();
                for (relative, bytes) in &now {
                    if start.get(relative) != Some(bytes) {
                        prop_assert!(
                            written_by_migration(relative),
                            "reading plan-2 wrote {}",
                            relative.display()
                        );
                    }
                }
                let plan: Value = serde_json::from_slice(&now[Path::new("plans/plan-2.json")])
                    .expect("a migrated plan is JSON");
                prop_assert_eq!(&plan["format"], &json!(PLAN_FORMAT));
            }
        }

        let before = self.everything();
        let mut refusals = self.refusals();
        for said in &refusals {
            named(said)?;
        }
        prop_assert_eq!(self.everything(), before, "a read changed the home");
        if refusals.is_empty() && !record.formats.is_empty() {
            let format = serde_json::from_slice::<Value>(bytes)
                .ok()
                .and_then(|value| value.get("format").and_then(Value::as_u64));
            prop_assert!(
                format.is_some_and(|f| record.formats.contains(&f)),
                "`{file}` was read in format {format:?}; this build reads {:?}",
                record.formats
            );
        }
        if let Err(e) = migrated {
            refusals.push(e.to_string());
        }
        Ok(refusals)
    }
}

#[test]
fn the_valid_home_reads() {
    let mesh = Mesh::new();
    assert_eq!(mesh.refusals(), Vec::<String>::new());
    for record in &RECORDS {
        mesh.read_over(record, &mesh.valid(record.file)).unwrap();
    }
    let home = &mesh.home;
    let status = mesh_controller::status::overview(home, NOW, 60).expect("status reads");
    assert_eq!(status.held.len(), 1, "{:?}", status.held);
    assert!(status.daemon.is_some());
    let nodes = home.plans().rollout_nodes("plan-1", "base").unwrap();
    assert_eq!(nodes.len(), 3, "{nodes:?}");
    assert_eq!(
        home.layers()
            .history("base", &LayerScope::Mesh)
            .unwrap()
            .len(),
        1
    );
    assert_eq!(home.deployed().all().unwrap().len(), 1);
    let migrated = home.plans().get("plan-2").unwrap();
    assert_eq!(migrated.format, PLAN_FORMAT);
    assert_eq!(
        home.plans().rollout_nodes("plan-2", "site").unwrap().len(),
        2
    );
}

/// The template's `file` with the JSON value at `pointer` replaced by `value`.
fn changed(file: &str, pointer: &str, value: Value) -> Vec<u8> {
    let mut record: Value = serde_json::from_slice(&template()[Path::new(file)]).unwrap();
    *record
        .pointer_mut(pointer)
        .expect("the record has the place") = value;
    serde_json::to_vec(&record).unwrap()
}

fn record(file: &str) -> &'static Record {
    RECORDS
        .iter()
        .find(|r| r.file == file)
        .expect("a record of RECORDS")
}

/// A plan record's id and modules become record keys (`rollouts/<plan>/<module>/…`): one that
/// named another plan, or a name no key can hold, was read, and `status` was refused naming
/// `rollouts/plan 1/base` — not the plan at fault. (Issue 46, item 7.)
#[test]
fn a_plan_naming_another_plan_or_a_name_no_key_holds_is_refused_naming_it() {
    for (pointer, value) in [
        ("/plan/id", json!("plan 1")),
        ("/plan/id", json!("")),
        ("/plan/id", json!("plan-3")),
        ("/plan/tiers/0/0", json!("ba se")),
    ] {
        let refusals = Mesh::new()
            .read_over(
                record("plans/plan-1.json"),
                &changed("plans/plan-1.json", pointer, value.clone()),
            )
            .unwrap();
        assert!(!refusals.is_empty(), "{pointer} = {value} was read");
    }
}

/// A plan of format 1 naming a node no record key can hold was migrated node by node: the
/// nodes before it were written, then the migration failed naming a rollout's record, and the
/// plan stayed in format 1 — a refused read that changed the home. Its names are checked
/// before anything is written now. (Issue 46, item 7.)
#[test]
fn a_plan_of_format_1_naming_a_node_no_key_holds_is_refused_before_anything_is_written() {
    let file = "plans/plan-2.json";
    let mut plan: Value = serde_json::from_slice(&template()[Path::new(file)]).unwrap();
    let nodes = plan["work"]["site"]["spec"]["nodes"]
        .as_object_mut()
        .unwrap();
    let entry = nodes.remove("home").unwrap();
    nodes.insert("ho me".to_owned(), entry);
    let refusals = Mesh::new()
        .read_over(record(file), &serde_json::to_vec(&plan).unwrap())
        .unwrap();
    assert!(!refusals.is_empty());
    let refusals = Mesh::new()
        .read_over(record(file), &changed(file, "/plan/id", json!("a b")))
        .unwrap();
    assert!(!refusals.is_empty());
}

/// An acknowledgement and a settings history record were read whatever their format said.
/// (Issue 46, item 7.)
#[test]
fn an_acknowledgement_or_a_history_record_of_another_format_is_refused_naming_it() {
    for file in ["acks/home.json", "history/settings/base/mesh/000001.json"] {
        let refusals = Mesh::new()
            .read_over(record(file), &changed(file, "/format", json!(7)))
            .unwrap();
        assert!(!refusals.is_empty(), "{file} of format 7 was read");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]

    #[test]
    fn a_record_of_random_bytes_is_refused_by_name_or_read(
        which in 0usize..RECORDS.len(),
        bytes in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        Mesh::new().read_over(&RECORDS[which], &bytes)?;
    }

    #[test]
    fn a_record_with_bytes_changed_is_refused_by_name_or_read(
        which in 0usize..RECORDS.len(),
        edits in byte_edits(),
    ) {
        let mesh = Mesh::new();
        let valid = mesh.valid(RECORDS[which].file);
        mesh.read_over(&RECORDS[which], &edit_bytes(&valid, &edits))?;
    }

    #[test]
    fn a_json_record_with_values_changed_is_refused_by_name_or_read(
        which in 1usize..RECORDS.len(),
        edits in value_edits(),
    ) {
        let mesh = Mesh::new();
        let valid = String::from_utf8(mesh.valid(RECORDS[which].file)).unwrap();
        mesh.read_over(&RECORDS[which], &edit_value(&valid, &edits))?;
    }
}
