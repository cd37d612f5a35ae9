//! The executor called as a library, in process: a Rust tool brings its own
//! [`Fleet`] — here simulated hosts that apply nothing and answer every declaration with a real
//! converged report — and drives merges, one machine first, through the same executor `push`
//! and the CLI use. What is checked is the executor's: the held move on the rollout path
//! The rule “A moved mount is held”, the one-first order, and the plan and status naming what was
//! held.
//!
//! What a test of it does besides is called in process too (`support::in_process`); the
//! binary is run for what a person reads: a merge's preview (a snapshot) and `status` in text,
//! the same before and after a fold.

use crate::support;
use mesh_controller::plans::MergeOutcome;
use mesh_controller::Home;
use mesh_controller::MeshOptions;
use mesh_controller::Runtime;
use mesh_model::plan::PlanState;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use support::simulated::Simulated;
use support::{Mesh, Repo};

/// `keep` runs a container whose `/data` is the place `data`; `home` and `laptop` set the place
/// in their own layers, so a change of its default moves only `control`'s data.
const INVENTORY: &str = r#"bus-node = "control"

[nodes.control]
[nodes.home]
[nodes.laptop]

[assignments]
keep = ["control", "home", "laptop"]
"#;

fn keep_module(default: &str, note: &str) -> String {
    format!(
        r#"name = "keep"

[places.data]
default = "{default}"

[files.note]
source = "files/note.txt"
path = "/etc/keep.txt"

[containers.db]
image = "localhost/mesh-busybox:latest"
command = ["sleep", "3600"]
mounts = [{{ place = "data", at = "/data" }}]
# {note}
"#
    )
}

struct Bed {
    mesh: Mesh,
    repo: Repo,
    store: Box<dyn mesh_store::store::ArchiveStore>,
    fleet: mesh_controller::GivenFleet,
    sent: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Bed {
    fn new() -> Bed {
        let mesh = Mesh::example();
        std::fs::write(mesh.home().join("inventory.toml"), INVENTORY).unwrap();
        // The layers are written as the home keeps them: `settings set` knows only modules the
        // mesh runs, and `keep` arrives with the first merge.
        for node in ["home", "laptop"] {
            let dir = mesh.home().join("settings/keep/nodes");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join(format!("{node}.json")),
                format!(r#"{{"places": {{"data": "/srv/{node}-data"}}}}"#),
            )
            .unwrap();
        }
        let repo = Repo::new();
        repo.write(&[
            ("modules/keep/module.toml", &keep_module("/srv/data", "v1")),
            ("modules/keep/files/note.txt", "v1\n"),
        ]);
        repo.commit("first");
        let path = repo.path().to_str().unwrap().to_owned();
        mesh.library().repo_add("cat", Path::new(&path)).unwrap();
        let store =
            mesh_store::open_store(&mesh_store::store::default_store_spec(mesh.home())).unwrap();
        let simulated = Simulated::default();
        let sent = Arc::clone(&simulated.sent);
        let fleet: mesh_controller::GivenFleet =
            Arc::new(tokio::sync::Mutex::new(Box::new(simulated)));
        Bed {
            mesh,
            repo,
            store,
            fleet,
            sent,
        }
    }

    /// The mesh opened as a tool opens it, sending through the simulated hosts; progress goes
    /// to `progress`.
    fn runtime(&self, progress: Arc<dyn mesh_controller::Progress>) -> Runtime {
        let mesh = mesh_controller::Mesh::open(self.mesh.home(), MeshOptions::default())
            .unwrap()
            .with_fleet(Arc::clone(&self.fleet));
        Runtime::new(Arc::new(mesh), progress)
    }

    /// `merge cat` through the library, `moves` allowed to move.
    fn merge(&self, moves: &[&str]) -> (MergeOutcome, Vec<String>) {
        let progress = Arc::new(mesh_controller::Collected::default());
        let moves: BTreeSet<String> = moves.iter().map(|m| (*m).to_owned()).collect();
        let tokio = tokio::runtime::Runtime::new().unwrap();
        let runtime = self.runtime(Arc::clone(&progress) as _);
        let outcome = tokio
            .block_on(runtime.merge(
                "cat",
                &mesh_controller::MergeOptions {
                    moves,
                    ..Default::default()
                },
            ))
            .unwrap();
        let lines = progress.0.lock().unwrap().clone();
        (outcome, lines)
    }

    fn resume(&self, moves: &[&str]) -> Vec<String> {
        let progress = Arc::new(mesh_controller::Collected::default());
        let moves: BTreeSet<String> = moves.iter().map(|m| (*m).to_owned()).collect();
        let tokio = tokio::runtime::Runtime::new().unwrap();
        let runtime = self.runtime(Arc::clone(&progress) as _);
        tokio
            .block_on(runtime.drive_open(&mesh_controller::DriveOptions {
                moves,
                ..Default::default()
            }))
            .unwrap();
        let lines = progress.0.lock().unwrap().clone();
        lines
    }

    fn sent_since(&self, from: usize) -> Vec<String> {
        self.sent.lock().unwrap()[from..].to_vec()
    }
}

/// A plan's drive is a task the runtime owns: cancelled while it waits on its first machine
/// (hosts that never report), it stops at its next step — the task ends, the plan saved open
/// where it stood, nothing written after — and a later drive resumes it from there to the end.
#[test]
fn a_drive_cancelled_while_its_first_machine_is_awaited_stops_saved_and_resumes() {
    let bed = Bed::new();
    let mut silent = Simulated::default();
    silent.silent = true;
    let sent = Arc::clone(&silent.sent);
    let mesh = mesh_controller::Mesh::open(bed.mesh.home(), MeshOptions::default())
        .unwrap()
        .with_fleet(Arc::new(tokio::sync::Mutex::new(Box::new(silent))));
    let runtime = Runtime::new(Arc::new(mesh), Arc::new(mesh_controller::Quiet));
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let none = BTreeSet::new();
    let MergeOutcome::Planned { plan, .. } = tokio
        .block_on(runtime.merge(
            "cat",
            &mesh_controller::MergeOptions {
                plan_only: true,
                ..Default::default()
            },
        ))
        .unwrap()
    else {
        panic!("the first merge plans")
    };
    let home = Home::new(bed.mesh.home());
    let record = home.plans().get(&plan.id).unwrap();
    let stopped = tokio.block_on(async {
        let task = runtime.drive(
            record,
            mesh_controller::DriveMode::All,
            runtime.ctx(&none, &none),
        );
        assert_eq!(runtime.driving(), std::slice::from_ref(&plan.id));
        // The condition, not a time: the first machine was sent its declaration (polled, in
        // the async drive's own runtime; the 60 s only bounds a failure).
        tokio::time::timeout(Duration::from_secs(60), async {
            while sent.lock().unwrap().is_empty() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the first machine is sent its declaration");
        assert!(runtime.cancel(&plan.id), "the drive runs");
        tokio::time::timeout(Duration::from_secs(30), task.finish())
            .await
            .expect("a cancelled drive ends at its next step")
            .unwrap()
    });
    assert!(runtime.driving().is_empty());
    assert_eq!(sent.lock().unwrap().len(), 1, "one machine first");
    assert_eq!(
        stopped.plan.state,
        PlanState::RollingOut,
        "{:?}",
        stopped.plan
    );
    let saved = home.plans().get(&plan.id).unwrap();
    assert_eq!(saved.plan.state, PlanState::RollingOut);
    let kept = saved.work["keep"]
        .rollout
        .as_ref()
        .expect("its rollout is saved");
    assert_eq!(kept.state.stage, mesh_plan::rollout::Stage::FirstNode);
    assert_eq!(kept.state.sent, 1, "{kept:?}");

    // Resumed on hosts that answer: the first machine is sent again, then the others.
    let lines = bed.resume(&[]);
    let record = home.plans().get(&plan.id).unwrap();
    assert_eq!(record.plan.state, PlanState::Done, "{lines:#?}");
    assert_eq!(bed.sent_since(0).len(), 3, "{lines:#?}");
}

/// The rule “A moved mount is held” on the rollout path: a merge that changes a place's default for
/// a running container holds the node whose data would move (the plan and `status` name module,
/// mount and both directories), the other nodes go on one machine first, and `plans resume --move
/// MODULE` sends it. Before, held moves were checked by `push` only.
#[test]
fn a_merge_moving_a_running_containers_data_holds_that_node_and_the_others_go_on() {
    let bed = Bed::new();
    let (first, _) = bed.merge(&[]);
    let MergeOutcome::Planned { plan, .. } = first else {
        panic!("the first merge plans")
    };
    assert_eq!(plan.state, PlanState::Done, "{plan:?}");
    assert_eq!(bed.sent_since(0), ["control", "home", "laptop"]);

    bed.repo.write(&[
        ("modules/keep/module.toml", &keep_module("/srv/data2", "v2")),
        ("modules/keep/files/note.txt", "v2\n"),
    ]);
    bed.repo.commit("keep: data moves to /srv/data2");
    let (second, lines) = bed.merge(&[]);
    let MergeOutcome::Planned { plan, .. } = second else {
        panic!("the second merge plans")
    };
    // `control` (first by name) is held; `home` goes first, then `laptop`.
    assert_eq!(bed.sent_since(3), ["home", "laptop"], "{lines:#?}");
    assert_eq!(plan.state, PlanState::RollingOut, "still open: {plan:?}");
    let held_line = lines
        .iter()
        .find(|l| l.contains("`control` held"))
        .unwrap_or_else(|| panic!("{lines:#?}"));
    assert!(held_line.contains("/srv/data"), "{held_line}");
    assert!(held_line.contains("/srv/data2"), "{held_line}");
    assert!(held_line.contains("mount `/data`"), "{held_line}");

    let home = Home::new(bed.mesh.home());
    let status = mesh_controller::status::overview(
        &home,
        mesh_store::clock::now(),
        mesh_controller::SILENT_AFTER_SECS,
    )
    .unwrap();
    assert_eq!(status.held.len(), 1, "{:?}", status.held);
    let held = &status.held[0];
    assert_eq!(
        (held.plan.as_str(), held.module.as_str(), held.node.as_str()),
        (plan.id.as_str(), "keep", "control")
    );
    assert_eq!(held.moves[0].at, "/data");
    assert!(
        held.moves[0].from.ends_with("/srv/data"),
        "{:?}",
        held.moves
    );
    assert!(held.moves[0].to.ends_with("/srv/data2"), "{:?}", held.moves);
    assert!(
        status.open_plans[0]
            .waits_on
            .contains("resuming the plan with `keep`'s move allowed sends them"),
        "{}",
        status.open_plans[0].waits_on
    );
    // `status` exits 3, and names `keep` on `control` held for a move.
    let shown = bed.mesh.library().status();
    assert_eq!(shown.code, 3, "{:#}", shown.json);
    let held = shown.json["held"].as_array().unwrap();
    assert!(
        held.iter()
            .any(|held| held["module"] == "keep" && held["node"] == "control"),
        "{:#}",
        shown.json
    );

    // Resumed without `--move`, it stays held and nothing is sent.
    bed.resume(&[]);
    assert_eq!(bed.sent_since(5), Vec::<String>::new());
    // With `--move keep`, `control` is sent and the plan is done.
    let lines = bed.resume(&["keep"]);
    assert_eq!(bed.sent_since(5), ["control"], "{lines:#?}");
    let record = home.plans().get(&plan.id).unwrap();
    assert_eq!(record.plan.state, PlanState::Done, "{lines:#?}");
    let allowed: BTreeSet<String> = BTreeSet::new();
    let sent = home.sent().get("control").unwrap().unwrap();
    let composed = mesh_controller::decide(&home, &sent, &allowed).unwrap();
    assert!(
        matches!(composed, mesh_plan::PushDecision::Send { .. }),
        "what control was sent is now what it holds"
    );
}

/// What fails is a typed error an embedding tool can match, naming the node, module
/// or plan: a node not in the inventory, a catalogue with problems (a refusal, nothing sent), a
/// module whose build does not validate, a plan that is not there.
#[test]
fn the_library_fails_with_typed_errors_naming_what_failed() {
    use mesh_controller::Error;
    let bed = Bed::new();
    bed.merge(&[]);
    let home = Home::new(bed.mesh.home());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let checked = runtime
        .block_on(mesh_controller::catalogue::effective_catalogue(
            &home,
            bed.store.as_ref(),
        ))
        .unwrap();
    let push = |nodes: &[&str], checked: &mesh_controller::Checked| {
        let mut fleet = Simulated::default();
        let nodes: Vec<String> = nodes.iter().map(|n| (*n).to_owned()).collect();
        runtime.block_on(mesh_controller::push(
            &home,
            &mut fleet,
            checked,
            &nodes,
            &BTreeSet::new(),
            Duration::from_secs(5),
        ))
    };

    let error = push(&["nowhere"], &checked).unwrap_err();
    assert!(
        matches!(&error, Error::UnknownNode { node, known } if node == "nowhere" && known.len() == 3),
        "{error:?}"
    );
    assert_eq!(error.node(), Some("nowhere"));
    assert_eq!(
        error.to_string(),
        "`nowhere` is not a node of this mesh; its nodes are: control, home, laptop"
    );

    assert_eq!(checked.1, Vec::new(), "the merged mesh is sound");
    let problem = mesh_model::Diagnostic::new("catalogue/modules/web", Some("web"), None, "broken");
    let broken = (checked.0.clone(), vec![problem]);
    let error = push(&["home"], &broken).unwrap_err();
    assert!(
        matches!(&error, Error::Problems { problems } if problems.len() == 1),
        "{error:?}"
    );
    assert!(error.is_refusal());
    assert!(error.to_string().contains("nothing was sent"), "{error}");

    let error = home.plans().get("plan-99").unwrap_err();
    assert!(matches!(&error, Error::Invalid { .. }), "{error:?}");
    assert!(
        error.to_string().contains("there is no plan `plan-99`"),
        "{error}"
    );

    // A module that does not validate at a commit names the module, the repository and every
    // problem.
    bed.repo
        .write(&[("modules/keep/module.toml", "this is not toml = [")]);
    bed.repo.commit("keep: broken");
    let commit = mesh_controller::catalogue::resolve(bed.repo.path(), "HEAD").unwrap();
    let source =
        mesh_controller::catalogue::catalogue_at(bed.repo.path(), &commit, "modules").unwrap();
    let built = runtime.block_on(mesh_controller::catalogue::build_module(
        &home,
        bed.store.as_ref(),
        &mesh_controller::catalogue::BuildSource {
            repository: "cat",
            commit: &commit,
            source: &source,
        },
        "keep",
        mesh_store::clock::now(),
        true,
    ));
    let error = built.unwrap_err();
    assert_eq!(error.module(), Some("keep"), "{error:?}");
    assert!(error.is_refusal(), "{error:?}");
    assert!(
        matches!(&error, Error::DoesNotValidate { repository, .. } if repository == "cat"),
        "{error:?}"
    );
}

/// The fleet preview of a merge (`merge --plan-only`) names the first machine, each
/// node that changes with its counts and its recreated containers, the node held for a move and
/// the node in a window; nothing is sent. The rollout of that plan then does what it said.
#[test]
fn the_preview_of_a_merge_says_what_its_rollout_then_does() {
    let bed = Bed::new();
    bed.merge(&[]);
    let home = Home::new(bed.mesh.home());
    // `laptop`'s host reports a maintenance window holding the container still.
    let mut report = home.reports().get("laptop").unwrap().unwrap();
    report.windows.push(mesh_model::report::WindowSummary {
        step: "backup".to_owned(),
        containers: vec!["keep/container/db".to_owned()],
        opened_at: report.finished_at,
        holder: None,
    });
    home.reports().record(&report).unwrap();

    // The data's default moves (only `control` follows the default) and the command changes
    // (every node's container is recreated).
    let module = keep_module("/srv/data2", "v2").replace("\"3600\"", "\"7200\"");
    bed.repo.write(&[
        ("modules/keep/module.toml", &module),
        ("modules/keep/files/note.txt", "v2\n"),
    ]);
    bed.repo.commit("keep: data moves, the command changes");
    let sent_before = bed.sent_since(0).len();
    let text = bed.mesh.expect(&["merge", "cat", "--plan-only"], 0);
    assert_eq!(
        bed.sent_since(0).len(),
        sent_before,
        "the preview sends nothing"
    );
    let home_dir = bed.mesh.home().display().to_string();
    let mut words: Vec<(String, String)> = bed.repo.commit_names();
    words.push((home_dir, "[home]".to_owned()));
    let words: Vec<(&str, &str)> = words
        .iter()
        .map(|(w, n)| (w.as_str(), n.as_str()))
        .collect();
    insta::assert_snapshot!("merge_preview", support::redact(&text, &words));

    let answer = bed.mesh.library().merge_plan_only("cat").unwrap();
    assert!(!answer.stopped, "it exits 0: {}", answer.json);
    let answer = answer.json;
    // The plan was already made by the first --plan-only: this one answers that, no preview.
    assert_eq!(answer["result"], "already-planned", "{answer:#}");
    let plan = answer["plan"]["id"].as_str().unwrap().to_owned();
    let preview = bed.mesh.library().plan_preview(&plan).unwrap();
    let keep = &preview["tiers"][0]["modules"][0];
    assert_eq!(keep["module"], "keep", "{preview:#}");
    assert_eq!(keep["first"], "home", "{preview:#}");
    assert_eq!(keep["held"][0]["node"], "control", "{preview:#}");
    assert_eq!(keep["in-window"][0]["node"], "laptop", "{preview:#}");
    let changed: Vec<&str> = keep["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["node"].as_str().unwrap())
        .collect();
    assert_eq!(changed, ["control", "home", "laptop"], "{preview:#}");
    for change in keep["changes"].as_array().unwrap() {
        assert_eq!(
            change["recreated"][0]["resource"], "keep/container/db",
            "{change:#}"
        );
    }

    // The rollout does what the preview said: `home` first, then `laptop`; `control` held.
    let lines = bed.resume(&[]);
    assert_eq!(
        bed.sent_since(sent_before),
        ["home", "laptop"],
        "{lines:#?}"
    );
    let status = mesh_controller::status::overview(
        &home,
        mesh_store::clock::now(),
        mesh_controller::SILENT_AFTER_SECS,
    )
    .unwrap();
    let held: Vec<&str> = status.held.iter().map(|h| h.node.as_str()).collect();
    assert_eq!(held, ["control"]);
}

/// Rollout progress as a tool (or the binary's bar) receives it.
#[derive(Default)]
struct Steps(std::sync::Mutex<Vec<mesh_controller::RolloutProgress>>);

impl mesh_controller::Progress for Steps {
    fn line(&self, _text: &str) {}

    fn rollout(&self, at: &mesh_controller::RolloutProgress) {
        self.0.lock().unwrap().push(at.clone());
    }
}

/// A rollout says where it stands after every step — the machine awaited while it
/// goes first, then nodes applied of all — so a terminal can draw it; counts only.
#[test]
fn a_rollout_reports_its_progress_step_by_step() {
    let bed = Bed::new();
    let steps = Arc::new(Steps::default());
    let tokio = tokio::runtime::Runtime::new().unwrap();
    tokio
        .block_on(
            bed.runtime(Arc::clone(&steps) as _)
                .merge("cat", &Default::default()),
        )
        .unwrap();
    let steps = steps.0.lock().unwrap().clone();
    assert!(!steps.is_empty());
    assert!(
        steps.iter().all(|s| s.module == "keep" && s.total == 3),
        "{steps:#?}"
    );
    let first = steps
        .iter()
        .find(|s| s.stage == "first")
        .unwrap_or_else(|| panic!("{steps:#?}"));
    assert_eq!(first.waiting_on.as_deref(), Some("control"), "{steps:#?}");
    assert!(
        steps.windows(2).all(|w| w[0].applied <= w[1].applied),
        "applied only grows: {steps:#?}"
    );
    let last = steps.last().unwrap();
    assert_eq!((last.stage, last.applied), ("done", 3), "{steps:#?}");
}

/// A later merge of a commit already planned drives that plan, with its flags: after a rollout
/// that held a node for a move, `merge --move keep` sends it, as the rollout's own message and
/// the book promise; after `merge --plan-only`, `merge` rolls the plan out. A merge of a commit
/// whose plan is done still makes nothing.
#[test]
fn a_merge_of_a_commit_already_planned_drives_that_plan_with_its_flags() {
    let bed = Bed::new();
    bed.merge(&[]);
    bed.repo.write(&[
        ("modules/keep/module.toml", &keep_module("/srv/data2", "v2")),
        ("modules/keep/files/note.txt", "v2\n"),
    ]);
    bed.repo.commit("keep: data moves to /srv/data2");
    let (second, _) = bed.merge(&[]);
    let MergeOutcome::Planned { plan, .. } = second else {
        panic!("the second merge plans")
    };
    assert_eq!(
        plan.state,
        PlanState::RollingOut,
        "`control` held: {plan:?}"
    );
    assert_eq!(bed.sent_since(3), ["home", "laptop"]);

    // The same commit merged again, without `--move`: driven, and `control` still held.
    let (again, _) = bed.merge(&[]);
    let MergeOutcome::AlreadyPlanned { plan: same, driven } = again else {
        panic!("the same commit makes no new plan")
    };
    assert!(driven);
    assert_eq!(same.id, plan.id);
    assert_eq!(same.state, PlanState::RollingOut);
    assert_eq!(bed.sent_since(5), Vec::<String>::new());
    // With `--move keep`: `control` is sent, and the plan is done.
    let (moved, lines) = bed.merge(&["keep"]);
    let MergeOutcome::AlreadyPlanned { plan: same, driven } = moved else {
        panic!("the same commit makes no new plan")
    };
    assert!(driven);
    assert_eq!(same.state, PlanState::Done, "{lines:#?}");
    assert_eq!(bed.sent_since(5), ["control"], "{lines:#?}");
    // Done, the same commit merged again drives nothing and sends nothing.
    let (done, _) = bed.merge(&["keep"]);
    assert!(
        matches!(done, MergeOutcome::AlreadyPlanned { driven: false, .. }),
        "{done:?}"
    );
    assert_eq!(bed.sent_since(6), Vec::<String>::new());
}

/// After `merge --plan-only`, a `merge` of the same commit rolls that plan out.
#[test]
fn a_merge_after_plan_only_rolls_the_plan_out() {
    let bed = Bed::new();
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let runtime = bed.runtime(Arc::new(mesh_controller::Quiet));
    let MergeOutcome::Planned { plan, .. } = tokio
        .block_on(runtime.merge(
            "cat",
            &mesh_controller::MergeOptions {
                plan_only: true,
                ..Default::default()
            },
        ))
        .unwrap()
    else {
        panic!("the merge plans")
    };
    assert!(plan.state.is_open(), "{plan:?}");
    assert_eq!(
        bed.sent_since(0),
        Vec::<String>::new(),
        "--plan-only sends nothing"
    );
    let (outcome, _) = bed.merge(&[]);
    let MergeOutcome::AlreadyPlanned { plan: same, driven } = outcome else {
        panic!("the same commit makes no new plan")
    };
    assert!(driven);
    assert_eq!(
        (same.id.as_str(), &same.state),
        (plan.id.as_str(), &PlanState::Done)
    );
    assert_eq!(bed.sent_since(0), ["control", "home", "laptop"]);
}

/// A plan that ended keeps no record per node once folded — by the runtime at the end of a
/// merge, by the daemon, or by `records collect` by hand — and everything that reads it answers
/// the same after: `status` (text and JSON, byte for byte), the nodes behind, the plan's
/// rollouts. What it must remember is its summary: how many nodes ended where, and their
/// latencies.
#[test]
fn a_plan_that_ended_is_folded_and_reads_the_same_after() {
    let bed = Bed::new();
    let runtime = bed.runtime(Arc::new(mesh_controller::Quiet));
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let none = BTreeSet::new();
    // Planned, then driven alone: a drive does not fold (the merge that called it does).
    let MergeOutcome::Planned { plan, .. } = tokio
        .block_on(runtime.merge(
            "cat",
            &mesh_controller::MergeOptions {
                plan_only: true,
                ..Default::default()
            },
        ))
        .unwrap()
    else {
        panic!("the first merge plans")
    };
    let home = Home::new(bed.mesh.home());
    let record = home.plans().get(&plan.id).unwrap();
    let driven = tokio
        .block_on(async {
            runtime
                .drive(
                    record,
                    mesh_controller::DriveMode::All,
                    runtime.ctx(&none, &none),
                )
                .finish()
                .await
        })
        .unwrap();
    assert_eq!(driven.plan.state, PlanState::Done);
    let rollouts = bed.mesh.home().join("rollouts").join(&plan.id);
    // Every record under the plan's rollouts directory: its steps and the list of the nodes
    // it found running.
    fn records_under(dir: &std::path::Path) -> usize {
        std::fs::read_dir(dir).map_or(0, |entries| {
            entries
                .map(|entry| entry.unwrap().path())
                .map(|path| {
                    if path.is_dir() {
                        records_under(&path)
                    } else {
                        usize::from(path.extension().is_some_and(|e| e == "json"))
                    }
                })
                .sum()
        })
    }
    assert!(
        rollouts.join("keep.running.json").exists(),
        "the nodes the rollout found running are named in one record"
    );
    let node_records = records_under(&rollouts);
    assert!(
        node_records >= 2,
        "the running nodes and at least one step: {node_records}"
    );
    let nodes = home.plans().rollout_nodes(&plan.id, "keep").unwrap();
    assert_eq!(
        nodes.len(),
        3,
        "every node of the rollout read back: {nodes:?}"
    );
    let before_text = bed.mesh.expect(&["status"], 0);
    let before_json = bed.mesh.library().status();
    assert_eq!(before_json.code, 0, "{}", before_json.document);
    let before_behind = mesh_controller::status::nodes_behind(&home).unwrap();
    let before_plan = home.plans().get(&plan.id).unwrap();

    let said = mesh_controller::records::collect(
        bed.mesh.library().home(),
        mesh_store::clock::now(),
        std::time::Duration::ZERO,
        mesh_controller::plans::KEEP_PLANS,
    )
    .map_err(|e| crate::support::in_process::said(&e))
    .unwrap();
    // "folded 1 plan(s) that ended (plan-1): N record(s) of their nodes removed".
    assert_eq!(
        (said.plans.plans.as_slice(), said.plans.node_records),
        (std::slice::from_ref(&plan.id), node_records as u64),
        "{said:?}"
    );
    assert_eq!(records_under(&rollouts), 0, "{said:?}");
    assert!(!rollouts.exists(), "{said:?}");
    assert_eq!(bed.mesh.expect(&["status"], 0), before_text);
    let after_json = bed.mesh.library().status();
    assert_eq!(after_json.code, 0, "{}", after_json.document);
    assert_eq!(after_json.document, before_json.document);
    assert_eq!(
        mesh_controller::status::nodes_behind(&home).unwrap(),
        before_behind
    );
    let after = home.plans().get(&plan.id).unwrap();
    assert_eq!(after.plan, before_plan.plan);
    assert!(after.nodes_folded);
    let summary = after.work["keep"].summary.as_ref().expect("a summary");
    assert_eq!(summary.nodes.get("applied"), Some(&3), "{summary:?}");
    assert_eq!(summary.latencies.values().sum::<u64>(), 3, "{summary:?}");
    assert!(summary.unfinished.is_empty(), "{summary:?}");
    // Folded once: a collection again folds nothing more.
    let again = mesh_controller::records::collect(
        bed.mesh.library().home(),
        mesh_store::clock::now(),
        std::time::Duration::ZERO,
        mesh_controller::plans::KEEP_PLANS,
    )
    .map_err(|e| crate::support::in_process::said(&e))
    .unwrap();
    // Nothing "folded" said.
    assert!(again.plans.plans.is_empty(), "{again:?}");

    // A merge folds the plans that ended by itself.
    bed.repo.write(&[("modules/keep/files/note.txt", "v2\n")]);
    bed.repo.commit("keep: v2");
    let (second, _) = bed.merge(&[]);
    let MergeOutcome::Planned { plan: second, .. } = second else {
        panic!("the second merge plans")
    };
    assert_eq!(second.state, PlanState::Done);
    assert!(home.plans().get(&second.id).unwrap().nodes_folded);
    assert!(!bed.mesh.home().join("rollouts").join(&second.id).exists());
}

/// A rollout's nodes read back from what its records hold: a node's own record (as an earlier
/// mesh wrote one for each node), overridden by each step naming the node, in order, and a
/// node running at the start that no record names waiting for its send; the next step is
/// numbered after the last.
#[test]
fn a_rollouts_nodes_are_read_back_from_its_steps_over_earlier_records() {
    use mesh_controller::plans::RolloutNodeRecord;
    use mesh_plan::rollout::NodeProgress;
    let dir = tempfile::tempdir().unwrap();
    let home = Home::new(dir.path());
    let record = |node: &str, progress: NodeProgress| RolloutNodeRecord {
        format: mesh_controller::plans::ROLLOUT_NODE_FORMAT,
        node: node.to_owned(),
        running: true,
        declaration: format!("sha256:{node}"),
        before: None,
        progress,
    };
    home.plans()
        .write_rollout_node("plan-1", "m", &record("a", NodeProgress::Waiting))
        .unwrap();
    home.plans()
        .write_rollout_node("plan-1", "m", &record("b", NodeProgress::Waiting))
        .unwrap();
    let running = |node: &str| mesh_controller::plans::RunningNode {
        node: node.to_owned(),
        before: Some(format!("sha256:{node}-before")),
    };
    home.plans()
        .write_rollout_running(
            "plan-1",
            "m",
            vec![running("a"), running("b"), running("c")],
        )
        .unwrap();
    home.plans()
        .write_rollout_step(
            "plan-1",
            "m",
            0,
            vec![record("a", NodeProgress::Sent { at: 5, send: None })],
        )
        .unwrap();
    home.plans()
        .write_rollout_step(
            "plan-1",
            "m",
            1,
            vec![record("a", NodeProgress::Applied { sent_at: 5, at: 7 })],
        )
        .unwrap();
    let recorded = home.plans().rollout_nodes_recorded("plan-1", "m").unwrap();
    assert_eq!(recorded.next_step, 2);
    let all: Vec<(String, NodeProgress, String, Option<String>)> = recorded
        .all()
        .into_iter()
        .map(|r| (r.node, r.progress, r.declaration, r.before))
        .collect();
    assert_eq!(
        all,
        [
            (
                "a".to_owned(),
                NodeProgress::Applied { sent_at: 5, at: 7 },
                "sha256:a".to_owned(),
                None
            ),
            (
                "b".to_owned(),
                NodeProgress::Waiting,
                "sha256:b".to_owned(),
                None
            ),
            // Named by no record but the running nodes': what it ran before is kept there.
            (
                "c".to_owned(),
                NodeProgress::Waiting,
                String::new(),
                Some("sha256:c-before".to_owned())
            ),
        ]
    );
    // Another module's records, and a module whose name starts the same, are not its.
    home.plans()
        .write_rollout_step("plan-1", "m2", 0, vec![record("z", NodeProgress::Waiting)])
        .unwrap();
    assert_eq!(home.plans().rollout_nodes("plan-1", "m").unwrap().len(), 3);
    // A step of another format is named, not read as something else.
    let step = dir.path().join("rollouts/plan-1/m/steps/0000000002.json");
    std::fs::write(&step, r#"{"format": 9, "nodes": []}"#).unwrap();
    let error = home
        .plans()
        .rollout_nodes("plan-1", "m")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("steps/0000000002.json") && error.contains('9'),
        "{error}"
    );
}
