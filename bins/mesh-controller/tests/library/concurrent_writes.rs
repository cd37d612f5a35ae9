//! Two operators writing the same record at once. Settings: the library's
//! `settings::set` called from two threads released together by a barrier, many times, on the
//! embedded default's records (files under the home) and on a real nats-server's bucket.
//!
//! Before the fix a set read the layer, decided, and wrote the layer and its history record
//! blind: two sets from the same layer both went ahead, the second dropping the first's key
//! without a word, and both wrote the same history revision.

use mesh_controller::settings;
use mesh_controller::settings::On;
use mesh_controller::Home;
use mesh_model::inventory::LayerScope;
use mesh_plan::SettingsDecision;
use mesh_store::record_store::{DirRecords, RecordStore};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};

const ROUNDS: usize = 40;

const MODULE: &str = r#"name = "web"

[settings]
a = {}
b = {}
"#;

const INVENTORY: &str = "bus-node = \"n1\"\n\n[nodes.n1]\n\n[assignments]\nweb = [\"n1\"]\n";

/// A home holding the module `web` (settings `a` and `b`), its records in `records`.
fn home(dir: &std::path::Path, records: Option<Arc<dyn RecordStore>>) -> Home {
    let modules = dir.join("catalogue/modules/web");
    std::fs::create_dir_all(&modules).unwrap();
    std::fs::write(modules.join("module.toml"), MODULE).unwrap();
    let home = match records {
        Some(records) => Home::on_bus(dir, records, None),
        None => Home::new(dir),
    };
    home.put("inventory.toml", INVENTORY.as_bytes()).unwrap();
    home
}

/// What one thread's set answered: whether it went ahead, the history revision it kept, and
/// the keys it said it removed.
struct Answered {
    went_ahead: bool,
    revision: Option<u64>,
    removed: Vec<String>,
}

/// Round after round, both threads set the layer from the same start (the layer as it was
/// when the round began), each adding a key of its own: the classic lost update. Exactly one
/// goes ahead; the other, decided again against the layer the first left, would remove the
/// first's key and is refused, naming it. No key is lost, and every history revision is one
/// set's.
fn two_sets_at_once_lose_no_key(home: &Home) {
    let (catalogue, problems) = home.catalogue().unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    let barrier = Barrier::new(2);
    let mut won: Vec<String> = Vec::new();
    let mut revisions: BTreeSet<u64> = BTreeSet::new();
    for round in 1..=ROUNDS {
        let start = home
            .layers()
            .get("web", &LayerScope::Mesh)
            .unwrap()
            .unwrap_or_else(|| json!({"a": {}, "b": {}}));
        let answers: Vec<Answered> = std::thread::scope(|scope| {
            let threads: Vec<_> = ["a", "b"]
                .into_iter()
                .map(|setting| {
                    let (barrier, catalogue, start) = (&barrier, &catalogue, start.clone());
                    scope.spawn(move || {
                        let mut layer = start;
                        layer[setting][format!("r{round}")] = Value::from(round);
                        let on = On {
                            home,
                            catalogue,
                            command: &format!("set {setting} in round {round}"),
                        };
                        barrier.wait();
                        let answer = settings::set(
                            &on,
                            "web",
                            None,
                            &layer.to_string(),
                            false,
                            round as u64,
                        )
                        .unwrap();
                        Answered {
                            went_ahead: answer.change.decision.goes_ahead(),
                            revision: answer.kept_as_revision,
                            removed: answer
                                .change
                                .removed
                                .iter()
                                .map(|r| r.key.clone())
                                .collect(),
                        }
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let ahead: Vec<(usize, &Answered)> = answers
            .iter()
            .enumerate()
            .filter(|(_, a)| a.went_ahead)
            .collect();
        assert_eq!(
            ahead.len(),
            1,
            "round {round}: exactly one of two sets from the same layer goes ahead"
        );
        let (winner, first) = ahead[0];
        let loser = &answers[1 - winner];
        let winner_key = format!("{}.r{round}", ["a", "b"][winner]);
        assert_eq!(
            loser.removed,
            vec![winner_key.clone()],
            "round {round}: the refused set names the key it would have dropped"
        );
        assert_eq!(loser.revision, None, "a refused set keeps nothing");
        let revision = first
            .revision
            .expect("a set that went ahead keeps the layer");
        assert!(
            revisions.insert(revision),
            "revision {revision} written twice"
        );
        won.push(winner_key);
    }
    let layer = home
        .layers()
        .get("web", &LayerScope::Mesh)
        .unwrap()
        .unwrap();
    for key in &won {
        let (setting, name) = key.split_once('.').unwrap();
        assert!(
            layer[setting].get(name).is_some(),
            "{key} was lost: {layer}"
        );
    }
    // The history holds one record per set that went ahead, each the layer it replaced: the
    // layer the set before it left.
    let history = home.layers().history("web", &LayerScope::Mesh).unwrap();
    assert_eq!(history.len(), ROUNDS);
    assert_eq!(
        history.iter().map(|r| r.revision).collect::<BTreeSet<_>>(),
        revisions
    );
    assert_eq!(history[0].layer, None);
    for (earlier, later) in history.iter().zip(&history[1..]) {
        let replaced = later.layer.as_ref().unwrap();
        let count = |layer: &Value| {
            layer["a"].as_object().unwrap().len() + layer["b"].as_object().unwrap().len()
        };
        assert_eq!(
            count(replaced),
            earlier.layer.as_ref().map_or(0, count) + 1,
            "revision {} replaced a layer one key larger than revision {}'s",
            later.revision,
            earlier.revision
        );
    }
}

/// `--replace` lets a set remove keys: both sets go ahead, one after the other, and each
/// answers against the layer it actually replaced (the second removes the first's key and
/// says so). The history holds both.
fn two_replacing_sets_both_say_what_they_replaced(home: &Home) {
    let (catalogue, _) = home.catalogue().unwrap();
    let barrier = Barrier::new(2);
    let before = home
        .layers()
        .history("web", &LayerScope::Node("n1".into()))
        .unwrap();
    assert!(before.is_empty());
    for round in 1..=ROUNDS {
        let answers: Vec<settings::Answer> = std::thread::scope(|scope| {
            let threads: Vec<_> = ["a", "b"]
                .into_iter()
                .map(|setting| {
                    let (barrier, catalogue) = (&barrier, &catalogue);
                    scope.spawn(move || {
                        let layer = json!({ setting: { format!("r{round}"): round } });
                        let on = On {
                            home,
                            catalogue,
                            command: "set --replace",
                        };
                        barrier.wait();
                        settings::set(&on, "web", Some("n1"), &layer.to_string(), true, 0).unwrap()
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let mut kept: Vec<u64> = answers
            .iter()
            .map(|a| a.kept_as_revision.expect("a replacing set goes ahead"))
            .collect();
        kept.sort();
        let history = home
            .layers()
            .history("web", &LayerScope::Node("n1".into()))
            .unwrap();
        for (i, answer) in answers.iter().enumerate() {
            let revision = answer.kept_as_revision.unwrap();
            let record = history.iter().find(|r| r.revision == revision).unwrap();
            let replaced = record.layer.as_ref().map(leaves).unwrap_or_default();
            let new = leaves(&json!({ ["a", "b"][i]: { format!("r{round}"): round } }));
            let removed: BTreeSet<String> = answer
                .change
                .removed
                .iter()
                .map(|r| r.key.clone())
                .collect();
            let added: BTreeSet<String> =
                answer.change.added.iter().map(|r| r.key.clone()).collect();
            // Relative to the layer it actually replaced, exactly.
            assert_eq!(
                removed,
                &replaced - &new,
                "round {round}: {:?}",
                answer.change
            );
            assert_eq!(
                added,
                &new - &replaced,
                "round {round}: {:?}",
                answer.change
            );
            let decision = if removed.is_empty() {
                SettingsDecision::Set
            } else {
                SettingsDecision::Replace
            };
            assert_eq!(answer.change.decision, decision);
        }
        assert_eq!(kept.len(), 2);
        assert_ne!(kept[0], kept[1], "two sets kept the same revision");
    }
    let history = home
        .layers()
        .history("web", &LayerScope::Node("n1".into()))
        .unwrap();
    assert_eq!(history.len(), 2 * ROUNDS, "the history holds every set");
}

/// Every leaf key of a layer by dotted path (an empty object is a leaf, as the answer names it).
fn leaves(layer: &Value) -> BTreeSet<String> {
    fn walk(path: &str, value: &Value, out: &mut BTreeSet<String>) {
        match value {
            Value::Object(object) if !object.is_empty() => {
                for (key, value) in object {
                    let path = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    walk(&path, value, out);
                }
            }
            _ => {
                out.insert(path.to_owned());
            }
        }
    }
    let mut out = BTreeSet::new();
    walk("", layer, &mut out);
    out
}

#[test]
fn two_settings_sets_on_one_layer_lose_no_key_in_a_home() {
    let dir = tempfile::tempdir().unwrap();
    let home = home(dir.path(), None);
    two_sets_at_once_lose_no_key(&home);
    two_replacing_sets_both_say_what_they_replaced(&home);
    // The layer's lock is no record.
    let records = DirRecords::new(dir.path());
    assert!(records
        .keys_under("settings")
        .unwrap()
        .iter()
        .all(|k| k.ends_with(".json")));
}

#[test]
fn two_settings_sets_on_one_layer_lose_no_key_on_the_bus() {
    let server = mesh_test_support::nats_server::NatsServer::start()
        .unwrap_or_else(|error| panic!("{error}"));
    let records = mesh_bus::records::KvRecords::open(&mesh_bus::NatsOptions::new(server.url()))
        .unwrap_or_else(|error| panic!("{error}"));
    let dir = tempfile::tempdir().unwrap();
    let home = home(dir.path(), Some(Arc::new(records)));
    two_sets_at_once_lose_no_key(&home);
    two_replacing_sets_both_say_what_they_replaced(&home);
}

/// `records put inventory.toml` after `records get` and an edit replaced whatever the
/// inventory held by then, undoing another operator's put unseen. With `--base` (the inventory
/// the edit started from) it is compare-and-set: refused, nothing changed, once another put
/// came between.
#[test]
fn an_inventory_put_over_a_changed_base_is_refused() {
    use mesh_controller::records::put_by_hand;
    use mesh_controller::records::PutOutcome;
    let dir = tempfile::tempdir().unwrap();
    let home = home(dir.path(), None);
    let edits = tempfile::tempdir().unwrap();
    let base = edits.path().join("base.toml");
    std::fs::write(&base, home.get("inventory.toml").unwrap().unwrap()).unwrap();
    let first = edits.path().join("first.toml");
    std::fs::write(&first, format!("{INVENTORY}\n[nodes.n2]\n")).unwrap();
    let second = edits.path().join("second.toml");
    std::fs::write(&second, format!("{INVENTORY}\n[nodes.n3]\n")).unwrap();
    // Both edits started from the same inventory; the first put goes ahead.
    assert_eq!(
        put_by_hand(&home, "inventory.toml", &first, Some(&base)).unwrap(),
        PutOutcome::Replaced
    );
    assert_eq!(
        put_by_hand(&home, "inventory.toml", &second, Some(&base)).unwrap(),
        PutOutcome::BaseChanged
    );
    let inventory = home.inventory().unwrap();
    assert!(inventory.file.nodes.contains_key("n2"));
    assert!(!inventory.file.nodes.contains_key("n3"));
    // Read again, edited again: it goes ahead.
    assert_eq!(
        put_by_hand(&home, "inventory.toml", &second, Some(&first)).unwrap(),
        PutOutcome::Replaced
    );
    assert!(home.inventory().unwrap().file.nodes.contains_key("n3"));
    // Without --base a put replaces what is there, as before.
    assert_eq!(
        put_by_hand(&home, "inventory.toml", &first, None).unwrap(),
        PutOutcome::Replaced
    );
}
