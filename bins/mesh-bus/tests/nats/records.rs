//! The controller's records in the bus's bucket ([`mesh_bus::records::KvRecords`]): what one
//! connection writes another reads, listing is one level like a directory, concurrent updates
//! lose nothing, and a node cannot read the bucket (it holds the nodes' passwords).

use mesh_bus::grants::{authorization_config, BusAuthorization, NodeGrants, CONTROLLER_USER};
use mesh_bus::nats_server::NatsServer;
use mesh_bus::records::{KvRecords, RECORDS_BUCKET};
use mesh_bus::NatsOptions;
use mesh_store::record_store::RecordStore;

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

/// Issue 12: a read-modify-write that must do more between its read and its write than
/// `update` allows (a settings layer, whose history is written first) is a compare-and-set on
/// the revision read: a writer that was overtaken writes nothing.
#[test]
fn a_compare_and_set_writes_only_over_the_revision_it_read() {
    use mesh_store::record_store::{Swap, Version};
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

    // And no module can be granted it.
    let mut granted = authorization.clone();
    granted.nodes[0].buckets.push(RECORDS_BUCKET.into());
    let problems = authorization_config(&granted).unwrap_err();
    assert!(
        problems
            .iter()
            .any(|p| p.to_string().contains("never granted")),
        "{problems:?}"
    );
    assert_eq!(CONTROLLER_USER, "controller");
}
