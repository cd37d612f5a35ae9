//! The controller's records in the bus's bucket ([`mesh_bus::records::KvRecords`]): what one
//! connection writes another reads, listing is one level like a directory, concurrent updates
//! lose nothing, and a node cannot read the bucket (it holds the nodes' passwords).

use mesh_bus::grants::{authorization_config, BusAuthorization, NodeGrants};
use mesh_bus::records::KvRecords;
use mesh_bus::subjects::CONTROLLER_USER;
use mesh_bus::subjects::RECORDS_BUCKET;
use mesh_bus::NatsOptions;
use mesh_records::record_store::RecordStore;
use mesh_test_support::nats_server::NatsServer;

fn open(server: &NatsServer) -> KvRecords {
    KvRecords::open(&NatsOptions::new(server.url())).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn what_one_controller_writes_another_reads_and_lists() {
    let server = super::server();
    let first = open(&server);
    assert_eq!(first.get("inventory.toml").unwrap(), None);
    assert!(first.list("").unwrap().is_empty());
    first.put("inventory.toml", b"bus-node = \"a\"\n").unwrap();
    first.put("plans/plan-1.json", b"{\"format\":1}").unwrap();
    first.put("settings/web/mesh.json", b"{}").unwrap();
    first.put("settings/web/nodes/a.json", b"{}").unwrap();
    drop(first);

    // Another connection, as a controller started elsewhere.
    let second = open(&server);
    assert_eq!(
        second.get("plans/plan-1.json").unwrap().as_deref(),
        Some(b"{\"format\":1}".as_slice())
    );
    assert_eq!(
        second.list("").unwrap(),
        vec!["inventory.toml", "plans", "settings"]
    );
    assert_eq!(
        second.list("settings/web").unwrap(),
        vec!["mesh.json", "nodes"]
    );
    assert!(second.list("plans/plan-1.json").unwrap().is_empty());
    assert_eq!(
        second.keys_under("settings").unwrap(),
        vec!["settings/web/mesh.json", "settings/web/nodes/a.json"]
    );
    second.delete("settings/web/nodes/a.json").unwrap();
    second.delete("settings/web/nodes/a.json").unwrap();
    assert_eq!(second.get("settings/web/nodes/a.json").unwrap(), None);
    assert_eq!(second.list("settings/web").unwrap(), vec!["mesh.json"]);
    // A deleted record can be made again by an update.
    let made = second
        .update("settings/web/nodes/a.json", &mut |old| {
            assert_eq!(old, None);
            Ok(b"again".to_vec())
        })
        .unwrap();
    assert_eq!(made, b"again");

    let error = second.get("../x").unwrap_err().to_string();
    assert!(error.contains("\"../x\""), "{error}");
    let error = second.put("a b", b"").unwrap_err().to_string();
    assert!(error.contains(RECORDS_BUCKET), "{error}");
}

#[test]
fn concurrent_updates_lose_nothing() {
    let server = super::server();
    let writers: Vec<KvRecords> = (0..4).map(|_| open(&server)).collect();
    std::thread::scope(|scope| {
        for (w, records) in writers.iter().enumerate() {
            scope.spawn(move || {
                for i in 0..25 {
                    records
                        .update("store/modules/web.json", &mut |old| {
                            let mut list: Vec<String> = match old {
                                Some(bytes) => serde_json::from_slice(bytes).unwrap(),
                                None => Vec::new(),
                            };
                            list.push(format!("{w}-{i}"));
                            Ok(serde_json::to_vec(&list).unwrap())
                        })
                        .unwrap();
                }
            });
        }
    });
    let list: Vec<String> =
        serde_json::from_slice(&writers[0].get("store/modules/web.json").unwrap().unwrap())
            .unwrap();
    assert_eq!(list.len(), 100, "{list:?}");
    // A refused change writes nothing.
    let refused = writers[0].update("store/modules/web.json", &mut |_| Err("no".into()));
    assert!(refused.unwrap_err().to_string().contains("update"));
    let after: Vec<String> =
        serde_json::from_slice(&writers[0].get("store/modules/web.json").unwrap().unwrap())
            .unwrap();
    assert_eq!(after.len(), 100);
}

/// A read-modify-write that must do more between its read and its write than
/// `update` allows (a settings layer, whose history is written first) is a compare-and-set on
/// the revision read: a writer that was overtaken writes nothing.
#[test]
fn a_compare_and_set_writes_only_over_the_revision_it_read() {
    use mesh_records::record_store::{Swap, Version};
    let server = super::server();
    let (first, second) = (open(&server), open(&server));
    let key = "settings/web/mesh.json";
    assert_eq!(first.get_versioned(key).unwrap(), None);
    assert_eq!(
        first.compare_and_set(key, None, Some(b"1")).unwrap(),
        Swap::Done
    );
    // Made only while absent.
    assert_eq!(
        second.compare_and_set(key, None, Some(b"2")).unwrap(),
        Swap::Stale
    );
    let (bytes, read) = first.get_versioned(key).unwrap().unwrap();
    assert_eq!(bytes, b"1");
    let (_, also_read) = second.get_versioned(key).unwrap().unwrap();
    assert_eq!(read, also_read);
    assert_eq!(
        second
            .compare_and_set(key, Some(&also_read), Some(b"2"))
            .unwrap(),
        Swap::Done
    );
    // The first writer was overtaken: neither its write nor its delete goes through.
    assert_eq!(
        first.compare_and_set(key, Some(&read), Some(b"3")).unwrap(),
        Swap::Stale
    );
    assert_eq!(
        first.compare_and_set(key, Some(&read), None).unwrap(),
        Swap::Stale
    );
    // A version another kind of store gave is never this record's.
    assert_eq!(
        first
            .compare_and_set(key, Some(&Version::of_bytes(b"2")), Some(b"3"))
            .unwrap(),
        Swap::Stale
    );
    assert_eq!(first.get(key).unwrap().as_deref(), Some(b"2".as_slice()));
    let (_, now) = first.get_versioned(key).unwrap().unwrap();
    assert_eq!(
        first.compare_and_set(key, Some(&now), None).unwrap(),
        Swap::Done
    );
    assert_eq!(first.get_versioned(key).unwrap(), None);
    // A removed record counts as absent: it is made again only while absent.
    assert_eq!(
        second.compare_and_set(key, None, Some(b"again")).unwrap(),
        Swap::Done
    );
    assert_eq!(
        first.compare_and_set(key, None, Some(b"twice")).unwrap(),
        Swap::Stale
    );
}

#[test]
fn a_node_cannot_read_the_records_and_the_bucket_is_never_granted() {
    let authorization = BusAuthorization {
        controller_password: "controller-secret".into(),
        nodes: vec![NodeGrants {
            node: "home".into(),
            password: "home-secret".into(),
            buckets: vec!["home_state".into()],
            subjects: vec![],
        }],
    };
    let config = authorization_config(&authorization).unwrap();
    let server = NatsServer::start_with_config(&config).unwrap_or_else(|e| panic!("{e}"));
    let controller = KvRecords::open(&NatsOptions::for_controller(
        server.url(),
        "controller-secret",
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    controller
        .put("bus/passwords/home", b"home-secret\n")
        .unwrap();

    // The node's user is refused the bucket: it can neither open nor make it.
    let mut options = NatsOptions::for_node(server.url(), "home", "home-secret");
    options.connect_timeout = std::time::Duration::from_secs(2);
    assert!(
        KvRecords::open(&options).is_err(),
        "a node opened the controller's records"
    );

    // And no module can be granted it, nor a directory's bucket of it.
    for bucket in [RECORDS_BUCKET, "mesh-records-sent"] {
        let mut granted = authorization.clone();
        granted.nodes[0].buckets.push(bucket.into());
        let problems = authorization_config(&granted).unwrap_err();
        assert!(
            problems
                .iter()
                .any(|p| p.to_string().contains("never granted")),
            "{bucket}: {problems:?}"
        );
    }
    assert_eq!(CONTROLLER_USER, "controller");
}

/// A listing reads only what is under its directory: each directory is a subject token of the
/// bucket's keys (`mesh_bus::records::bucket_key`), so a prefix is one subject filter. Names
/// holding dots list as themselves, a removed record is not listed, and the values and sizes
/// come with one listing.
#[test]
fn a_listing_reads_only_its_directory_with_values_and_sizes() {
    let server = super::server();
    let records = open(&server);
    records.put("sent/n1.json", b"one").unwrap();
    records.put("sent/n2.json", b"second").unwrap();
    records.put("sentinel.json", b"not under sent").unwrap();
    records.put("sent.json", b"not under sent either").unwrap();
    records.put("declarations/ab.json", b"{}").unwrap();
    records.put("rollouts/plan-1/m00/n1.json", b"r").unwrap();
    records.put("rollouts/plan-1/m00/n2.json", b"r").unwrap();
    records.delete("rollouts/plan-1/m00/n2.json").unwrap();
    assert_eq!(
        records.keys_under("sent").unwrap(),
        vec!["sent/n1.json", "sent/n2.json"]
    );
    assert_eq!(
        records.values_under("sent").unwrap(),
        vec![
            ("sent/n1.json".to_owned(), b"one".to_vec()),
            ("sent/n2.json".to_owned(), b"second".to_vec())
        ]
    );
    assert_eq!(records.list("rollouts/plan-1").unwrap(), vec!["m00"]);
    assert_eq!(
        records.keys_under("rollouts").unwrap(),
        vec!["rollouts/plan-1/m00/n1.json"]
    );
    assert!(records.keys_under("nothing").unwrap().is_empty());
    assert_eq!(
        records.list("").unwrap(),
        vec![
            "declarations",
            "rollouts",
            "sent",
            "sent.json",
            "sentinel.json"
        ]
    );
    let stats = records.stat_under("sent").unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(
        stats
            .iter()
            .map(|s| (s.key.as_str(), s.size))
            .collect::<Vec<_>>(),
        vec![("sent/n1.json", 3), ("sent/n2.json", 6)]
    );
    assert!(
        stats
            .iter()
            .all(|s| s.written <= now + 1 && s.written + 600 > now),
        "{stats:?}"
    );
    // The bucket's keys: directories as subject tokens, a name's dots as `=`.
    assert_eq!(
        mesh_bus::records::bucket_key("rollouts/plan-1/m00/n1.json"),
        "rollouts.plan-1.m00.n1=json"
    );
    assert_eq!(
        mesh_bus::records::record_key("rollouts.plan-1.m00.n1=json"),
        "rollouts/plan-1/m00/n1.json"
    );
}

/// A bucket written with the record keys as its keys (before the layout of
/// `mesh_bus::records::bucket_key`) is moved to the layout on first open, saying how many,
/// every record read back as it was; a second open moves nothing.
#[test]
fn a_bucket_of_the_older_layout_is_moved_on_first_open() {
    let server = super::server();
    // The older layout, written as the controller wrote it then: the record key as the key.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let bus = super::connect(&server).await;
        let js = bus.jetstream();
        js.get_or_create_stream(mesh_bus::jetstream::bucket_stream(RECORDS_BUCKET, 16))
            .await
            .unwrap();
        let kv = js.get_key_value(RECORDS_BUCKET).await.unwrap();
        for (key, value) in [
            ("inventory.toml", "bus-node = \"a\"\n"),
            ("plans/plan-1.json", "{\"format\":2}"),
            ("settings/web/nodes/a.json", "{}"),
            ("bus/passwords/a", "secret\n"),
        ] {
            kv.put(key, value.as_bytes().to_vec().into()).await.unwrap();
        }
        kv.put("plans/gone.json", b"x".to_vec().into())
            .await
            .unwrap();
        kv.delete("plans/gone.json").await.unwrap();
    });
    let records = open(&server);
    // The four records; the removed one is not moved.
    assert_eq!(records.migrated(), 4);
    assert_eq!(
        records.get("inventory.toml").unwrap().as_deref(),
        Some(b"bus-node = \"a\"\n".as_slice())
    );
    assert_eq!(
        records.keys_under("").unwrap(),
        vec![
            "bus/passwords/a",
            "inventory.toml",
            "plans/plan-1.json",
            "settings/web/nodes/a.json"
        ]
    );
    assert_eq!(
        records.get("bus/passwords/a").unwrap().as_deref(),
        Some(b"secret\n".as_slice())
    );
    drop(records);
    let again = open(&server);
    assert_eq!(again.migrated(), 0);
    assert_eq!(
        again.keys_under("plans").unwrap(),
        vec!["plans/plan-1.json"]
    );
}

/// Records removed together leave nothing of themselves in their directory's bucket's stream —
/// no value, no older value, no removal marker — and the records beside them are kept.
#[test]
fn records_removed_together_leave_nothing_in_the_bucket() {
    let server = super::server();
    let records = open(&server);
    let keys: Vec<String> = (0..600)
        .map(|i| format!("rollouts/plan-1/m{:02}/n{i:04}.json", i % 3))
        .collect();
    let batch: Vec<(String, Vec<u8>)> = keys.iter().map(|k| (k.clone(), b"r".to_vec())).collect();
    records.put_many(&batch).unwrap();
    // A second value of one, so its history goes too.
    records.put(&keys[0], b"again").unwrap();
    records.put("sent/n0001.json", b"kept").unwrap();
    // A sibling whose name starts as the directory's does: not under it.
    records.put("rollouts/plan-10/m/n.json", b"kept").unwrap();
    let messages = || {
        let options = NatsOptions::new(server.url());
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let bus = mesh_bus::NatsBus::connect(&options).await.unwrap();
            let mut stream = bus
                .jetstream()
                .get_stream(mesh_bus::subjects::bucket_stream_name(
                    &mesh_bus::records::directory_bucket("rollouts"),
                ))
                .await
                .unwrap();
            stream.info().await.unwrap().state.messages
        })
    };
    let before = messages();
    assert!(before >= 601, "{before}");
    assert_eq!(records.delete_under("rollouts/plan-1").unwrap(), 600);
    assert_eq!(
        records.keys_under("rollouts").unwrap(),
        ["rollouts/plan-10/m/n.json"]
    );
    assert_eq!(records.get(&keys[0]).unwrap(), None);
    assert_eq!(records.get("sent/n0001.json").unwrap().unwrap(), b"kept");
    assert_eq!(
        messages(),
        before - 601,
        "every value of the 600 records is gone"
    );
    // Removing what is not there is no error; a key that is not one is refused, naming it.
    records.delete_many(&keys[..2]).unwrap();
    let error = records.delete_many(&["../x".to_owned()]).unwrap_err();
    assert!(error.to_string().contains("../x"), "{error}");
}

/// Every node's latest report in one pass: the last message of each subject, however many each
/// node published, none of another stream's subjects; a stream not there yet holds nothing.
#[tokio::test]
async fn the_last_message_of_every_subject_is_read_in_one_pass() {
    use mesh_bus::subjects::{report, REPORTS_STREAM};
    use mesh_bus::NatsBus;
    let server = super::server();
    let url = server.url();
    let empty = tokio::task::spawn_blocking({
        let url = url.clone();
        move || {
            KvRecords::open(&NatsOptions::new(url))
                .unwrap()
                .last_per_subject(REPORTS_STREAM, "mesh.report.>")
        }
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(empty.is_empty(), "{empty:?}");

    let bus = NatsBus::connect(&NatsOptions::new(url.clone()))
        .await
        .unwrap();
    let js = bus.jetstream();
    mesh_bus::jetstream::ensure_streams(&js).await.unwrap();
    let nodes: Vec<String> = (0..300).map(|n| format!("node-{n:03}")).collect();
    // Each stored before the next is sent (its acknowledgement awaited): nothing to wait on.
    for round in 0..3 {
        for node in &nodes {
            js.publish(report(node), format!("{node} round {round}").into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
    }
    js.publish("mesh.event.merge", "not a report".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let last = tokio::task::spawn_blocking(move || {
        KvRecords::open(&NatsOptions::new(url))
            .unwrap()
            .last_per_subject(REPORTS_STREAM, "mesh.report.>")
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(last.len(), 300);
    for (message, node) in last.iter().zip(&nodes) {
        assert_eq!(message.subject, report(node));
        assert_eq!(message.payload, format!("{node} round 2").into_bytes());
    }
}
