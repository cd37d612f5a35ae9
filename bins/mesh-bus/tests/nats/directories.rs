//! The records' buckets, one per top-level directory (`mesh_bus::records::place`): where each
//! record is kept, and the one move of a bucket holding every record (layout 2) to them.

use mesh_bus::records::{directory_bucket, directory_of_bucket, place, KvRecords};
use mesh_bus::subjects::RECORDS_BUCKET;
use mesh_bus::NatsOptions;
use mesh_records::record_store::RecordStore;
use mesh_test_support::nats_server::NatsServer;

fn open(server: &NatsServer) -> KvRecords {
    KvRecords::open(&NatsOptions::new(server.url())).unwrap_or_else(|e| panic!("{e}"))
}

fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// The keys `bucket` holds now (none when there is no such bucket), as the bus has them.
fn raw_keys(server: &NatsServer, bucket: &str) -> Vec<String> {
    block_on(async {
        use futures_util::StreamExt as _;
        let bus = super::connect(server).await;
        let Ok(kv) = bus.jetstream().get_key_value(bucket).await else {
            return Vec::new();
        };
        let mut keys: Vec<String> = kv
            .keys()
            .await
            .unwrap()
            .map(|key| key.unwrap())
            .collect()
            .await;
        keys.sort();
        keys
    })
}

#[test]
fn a_record_is_kept_in_its_top_level_directorys_bucket() {
    assert_eq!(
        place("sent/n1.json"),
        ("mesh-records-sent".to_owned(), "n1=json".to_owned())
    );
    assert_eq!(
        place("rollouts/plan-1/m00/n1.json"),
        (
            "mesh-records-rollouts".to_owned(),
            "plan-1.m00.n1=json".to_owned()
        )
    );
    assert_eq!(
        place("inventory.toml"),
        (RECORDS_BUCKET.to_owned(), "inventory=toml".to_owned())
    );
    // A bucket's name has no `.`: the directory's name is written so it reads back.
    for top in ["store", "a_b.c", "_.", "x-y"] {
        let bucket = directory_bucket(top);
        assert!(
            bucket
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_')),
            "{bucket}"
        );
        assert_eq!(directory_of_bucket(&bucket).as_deref(), Some(top));
    }
    assert_eq!(directory_bucket("a_b.c"), "mesh-records-a__b_0c");
    assert_eq!(directory_of_bucket(RECORDS_BUCKET), None);
    assert_eq!(directory_of_bucket("agent_state"), None);

    // On the bus: each directory's records in its bucket, the top's in the records bucket.
    let server = super::server();
    let records = open(&server);
    records.put("inventory.toml", b"i").unwrap();
    records.put("sent/n1.json", b"s").unwrap();
    records.put("settings/web/nodes/a.json", b"{}").unwrap();
    assert_eq!(
        raw_keys(&server, RECORDS_BUCKET),
        ["=layout", "inventory=toml"]
    );
    assert_eq!(raw_keys(&server, "mesh-records-sent"), ["n1=json"]);
    assert_eq!(
        raw_keys(&server, "mesh-records-settings"),
        ["web.nodes.a=json"]
    );
    // A directory never written has no bucket, and reads as empty.
    assert!(records.keys_under("plans").unwrap().is_empty());
    assert_eq!(records.get("plans/plan-1.json").unwrap(), None);
    records.delete("plans/plan-1.json").unwrap();
    assert!(raw_keys(&server, "mesh-records-plans").is_empty());
    // Made ahead of a first write, a directory's bucket is empty and lists as such.
    records.make_directories(&["plans", "sent"]).unwrap();
    assert!(records.keys_under("plans").unwrap().is_empty());
    assert_eq!(
        raw_keys(&server, "mesh-records-plans"),
        Vec::<String>::new()
    );
    assert!(raw_keys(&server, RECORDS_BUCKET).contains(&"=directories".to_owned()));
    assert_eq!(
        records.keys_under("").unwrap(),
        [
            "inventory.toml",
            "sent/n1.json",
            "settings/web/nodes/a.json"
        ]
    );
}

/// A bucket holding every record (layout 2: `plans.plan-1=json` in `mesh-records`, marked 2)
/// is moved to a bucket per top-level directory on its first open, saying how many, every
/// record read and listed as it was; the mark says layout 3 and a second open moves nothing. A
/// move stopped part way (a directory's bucket already holding a copy) is done again whole.
#[test]
fn a_bucket_of_every_record_is_moved_to_a_bucket_per_directory_once() {
    let server = super::server();
    let old = [
        ("inventory.toml", "bus-node = \"a\"\n"),
        ("plans/plan-1.json", "{\"format\":2}"),
        ("settings/web/mesh.json", "{\"port\":1}"),
        ("settings/web/nodes/a.json", "{}"),
        ("bus/passwords/a", "secret\n"),
    ];
    block_on(async {
        let bus = super::connect(&server).await;
        let js = bus.jetstream();
        js.get_or_create_stream(mesh_bus::jetstream::bucket_stream(RECORDS_BUCKET, 16))
            .await
            .unwrap();
        let kv = js.get_key_value(RECORDS_BUCKET).await.unwrap();
        kv.put("=layout", b"2".to_vec().into()).await.unwrap();
        for (key, value) in old {
            let key = mesh_bus::records::bucket_key(key);
            kv.put(key, value.as_bytes().to_vec().into()).await.unwrap();
        }
        kv.put("plans.gone=json", b"x".to_vec().into())
            .await
            .unwrap();
        kv.delete("plans.gone=json").await.unwrap();
        // A move stopped part way: plans' bucket made, holding a copy of one record.
        js.get_or_create_stream(mesh_bus::jetstream::bucket_stream("mesh-records-plans", 16))
            .await
            .unwrap();
        let plans = js.get_key_value("mesh-records-plans").await.unwrap();
        plans
            .put("plan-1=json", b"{\"format\":2}".to_vec().into())
            .await
            .unwrap();
    });

    let records = open(&server);
    // The four under a directory; the one at the top stays; the removed one is not moved.
    assert_eq!(records.migrated(), 4);
    for (key, value) in old {
        assert_eq!(
            records.get(key).unwrap().as_deref(),
            Some(value.as_bytes()),
            "{key}"
        );
    }
    assert_eq!(
        records.keys_under("").unwrap(),
        [
            "bus/passwords/a",
            "inventory.toml",
            "plans/plan-1.json",
            "settings/web/mesh.json",
            "settings/web/nodes/a.json"
        ]
    );
    assert_eq!(
        records.list("").unwrap(),
        ["bus", "inventory.toml", "plans", "settings"]
    );
    assert_eq!(
        records.values_under("settings/web/nodes").unwrap(),
        [("settings/web/nodes/a.json".to_owned(), b"{}".to_vec())]
    );
    // The records bucket keeps the top's records and the mark of layout 3, nothing more.
    assert_eq!(
        raw_keys(&server, RECORDS_BUCKET),
        ["=layout", "inventory=toml"]
    );
    let mark = block_on(async {
        let bus = super::connect(&server).await;
        let kv = bus.jetstream().get_key_value(RECORDS_BUCKET).await.unwrap();
        kv.get("=layout").await.unwrap().unwrap()
    });
    assert_eq!(mark.as_ref(), b"3");
    assert_eq!(raw_keys(&server, "mesh-records-bus"), ["passwords.a"]);

    // Written after the move, then opened again: nothing moves, nothing is lost.
    records.put("plans/plan-2.json", b"2").unwrap();
    drop(records);
    let again = open(&server);
    assert_eq!(again.migrated(), 0);
    assert_eq!(
        again.keys_under("plans").unwrap(),
        ["plans/plan-1.json", "plans/plan-2.json"]
    );
}
