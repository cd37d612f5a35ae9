//! Collecting declarations no record names: declarations are kept once by digest;
//! `records collect` keeps what each node was last sent and what open plans name (what a node
//! is sent, what it ran before, what it was sent back), keeps one younger than the grace (a
//! push writes it before the record naming it), and removes the rest, saying how many and their
//! bytes — on the embedded default (files under the home) and on a real nats-server's records
//! bucket. The clock is the `now` given: no test waits for the grace to pass.

use mesh_bus::records::KvRecords;
use mesh_bus::NatsOptions;
use mesh_controller::declaration_key;
use mesh_controller::plans::ModuleWork;
use mesh_controller::plans::PlanRecord;
use mesh_controller::plans::RolloutNodeRecord;
use mesh_controller::plans::PLAN_FORMAT;
use mesh_controller::plans::ROLLOUT_NODE_FORMAT;
use mesh_controller::records::collect_declarations;
use mesh_controller::records::DeclarationsCollected;
use mesh_controller::Home;
use mesh_model::declaration::{Declaration, FileSpec, Resource, Spec};
use mesh_model::plan::{Plan, PlanState};
use mesh_plan::rollout::NodeProgress;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const GRACE: Duration = Duration::from_secs(600);

fn now() -> u64 {
    mesh_store::clock::now()
}

/// A declaration for `node` that differs by `tag` (one file resource).
fn declaration(node: &str, tag: &str) -> Declaration {
    let resource = Resource {
        id: format!("web/file/{tag}"),
        module: "web".to_owned(),
        together: None,
        after: Vec::new(),
        spec: Spec::File(FileSpec::inline(
            format!("/etc/web/{tag}"),
            tag,
            0o644,
            "root",
            "root",
        )),
    };
    Declaration::new(node, vec![resource])
}

fn plan(id: &str, state: PlanState, reverted: BTreeMap<String, String>) -> PlanRecord {
    PlanRecord {
        format: PLAN_FORMAT,
        plan: Plan {
            id: id.to_owned(),
            repository: "cat".to_owned(),
            branch: "main".to_owned(),
            commit: "0".repeat(40),
            made_at: 1,
            modules: vec!["web".to_owned()],
            tiers: vec![vec!["web".to_owned()]],
            rollouts: BTreeMap::new(),
            state,
        },
        previous_commit: None,
        changed_paths: 1,
        shared_paths: Vec::new(),
        folded: BTreeMap::new(),
        work: BTreeMap::from([(
            "web".to_owned(),
            ModuleWork {
                reverted,
                ..ModuleWork::default()
            },
        )]),
        held: Default::default(),
        forgotten: Default::default(),
        nodes_folded: false,
    }
}

fn rollout_node(home: &Home, plan: &str, node: &str, after: &str, before: Option<String>) {
    home.plans()
        .write_rollout_node(
            plan,
            "web",
            &RolloutNodeRecord {
                format: ROLLOUT_NODE_FORMAT,
                node: node.to_owned(),
                running: true,
                declaration: after.to_owned(),
                before,
                progress: NodeProgress::Waiting,
            },
        )
        .unwrap();
}

fn kept(home: &Home, digest: &str) -> bool {
    home.records()
        .get(&declaration_key(digest))
        .unwrap()
        .is_some()
}

/// Fills `home` with declarations named in every way, and two named by nothing (one sent
/// before and replaced, one named only by a plan that ended), then collects twice: at the time
/// they were written (everything younger than the grace: nothing removed) and after the grace
/// (the two unnamed removed, with their bytes).
fn collects_what_no_record_names(home: &Home) {
    home.put(
        "inventory.toml",
        b"bus-node = \"a\"\n[nodes.a]\n[nodes.b]\n",
    )
    .unwrap();
    // `a` was sent `replaced`, then `sent`: only `sent` is named by its record.
    let replaced = declaration("a", "replaced");
    home.sent().record(&replaced).unwrap();
    let sent = declaration("a", "sent");
    home.sent().record(&sent).unwrap();
    // An open plan: `b` is sent `after`, ran `before`, was sent back `reverted`.
    let (before, after, reverted) = (
        declaration("b", "before"),
        declaration("b", "after"),
        declaration("b", "reverted"),
    );
    for kept in [&before, &after, &reverted] {
        home.sent().keep_declaration(kept).unwrap();
    }
    home.plans()
        .write(&plan(
            "plan-1",
            PlanState::RollingOut,
            BTreeMap::from([("b".to_owned(), reverted.digest())]),
        ))
        .unwrap();
    rollout_node(home, "plan-1", "b", &after.digest(), Some(before.digest()));
    // A plan that ended names `ended`: nothing keeps it.
    let ended = declaration("b", "ended");
    home.sent().keep_declaration(&ended).unwrap();
    home.plans()
        .write(&plan("plan-2", PlanState::Done, BTreeMap::new()))
        .unwrap();
    rollout_node(home, "plan-2", "b", &ended.digest(), None);

    // Now: every declaration was just written, within the grace — a push may be between
    // writing one and the record naming it. Nothing is removed.
    let young = collect_declarations(home, now(), GRACE).unwrap();
    assert_eq!(
        (young.collected.count, young.collected.young, young.named),
        (0, 2, 4),
        "{young:?}"
    );
    assert!(kept(home, &replaced.digest()) && kept(home, &ended.digest()));

    // After the grace: the two no record names are removed, their bytes said.
    let later = now() + GRACE.as_secs() + 1;
    let done: DeclarationsCollected = collect_declarations(home, later, GRACE).unwrap();
    assert_eq!(
        (done.collected.count, done.collected.young, done.named),
        (2, 0, 4),
        "{done:?}"
    );
    let bytes = (replaced.canonical_json().len() + ended.canonical_json().len()) as u64;
    assert_eq!(done.collected.bytes, bytes);
    assert_eq!(done.sent_nodes, 1);
    assert_eq!(done.open_plans, vec!["plan-1"]);
    assert!(!kept(home, &replaced.digest()) && !kept(home, &ended.digest()));
    for named in [&sent, &before, &after, &reverted] {
        assert!(kept(home, &named.digest()), "{}", named.digest());
    }
    assert_eq!(home.sent().get("a").unwrap(), Some(sent));

    // Collected again: nothing more.
    let again = collect_declarations(home, later, GRACE).unwrap();
    assert_eq!((again.collected.count, again.named), (0, 4));
}

#[test]
fn the_embedded_default_collects_declarations_no_record_names() {
    let dir = tempfile::tempdir().unwrap();
    collects_what_no_record_names(&Home::new(dir.path()));
}

#[test]
fn a_fleets_records_bucket_collects_declarations_no_record_names() {
    let server = mesh_test_support::nats_server::NatsServer::start()
        .unwrap_or_else(|error| panic!("{error}"));
    let records = KvRecords::open(&NatsOptions::new(server.url())).unwrap();
    let chunked = mesh_store::chunked::ChunkedRecords::new(Arc::new(records));
    let dir = tempfile::tempdir().unwrap();
    collects_what_no_record_names(&Home::on_bus(dir.path(), Arc::new(chunked), None));
}

/// What the operator reads: `records collect` says what it removed and why the rest is kept.
#[test]
fn records_collect_says_what_it_kept_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let home = Home::new(dir.path());
    home.put("inventory.toml", b"bus-node = \"a\"\n[nodes.a]\n")
        .unwrap();
    home.sent().record(&declaration("a", "sent")).unwrap();
    home.sent()
        .keep_declaration(&declaration("a", "pushed"))
        .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mesh-controller"))
        .arg("--home")
        .arg(dir.path())
        .args(["records", "collect"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "collected 0 declaration(s), 0 bytes, that no record names; kept 1 named (by what 1 \
         node(s) were last sent and no open plan) and 1 written less than 10 minute(s) ago\n"
    );
}
