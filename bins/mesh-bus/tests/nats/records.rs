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
