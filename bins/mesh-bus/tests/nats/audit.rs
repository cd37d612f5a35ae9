//! The audit log on a real nats-server: entries appended by two controllers at once form one
//! chain, each read back from any sequence; the server refuses to delete or purge any; and a
//! byte changed in the server's own store is found by `verify`, naming the entry.

use mesh_bus::records::KvRecords;
use mesh_bus::subjects::AUDIT_STREAM;
use mesh_bus::{NatsBus, NatsOptions};
use mesh_records::audit::{verify_log, AuditError, AuditLog, Sealed};
use mesh_test_support::nats_server::NatsServer;

fn open(server: &NatsServer) -> KvRecords {
    KvRecords::open(&NatsOptions::new(server.url())).unwrap_or_else(|e| panic!("{e}"))
}

fn entry(actor: &str, n: usize) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"actor": actor, "action": "merge", "n": n})).unwrap()
}

fn verified(log: &KvRecords) -> Result<u64, AuditError> {
    verify_log(log).map(|v| v.entries)
}

#[test]
fn two_controllers_appending_at_once_make_one_chain_read_from_any_sequence() {
    let server = super::server();
    let (first, second) = (open(&server), open(&server));
    assert!(first.read(1, 10).unwrap().is_empty());
    std::thread::scope(|scope| {
        for (log, actor) in [(&first, "ana"), (&second, "bo")] {
            scope.spawn(move || {
                for n in 0..15 {
                    log.append(&entry(actor, n))
                        .unwrap_or_else(|e| panic!("{e}"));
                }
            });
        }
    });
    assert_eq!(verified(&first).unwrap(), 30);
    let all = second.read(1, usize::MAX).unwrap();
    assert_eq!(
        all.iter().map(|s| s.seq).collect::<Vec<_>>(),
        (1..=30).collect::<Vec<u64>>()
    );
    let from_28 = first.read(28, 100).unwrap();
    assert_eq!(from_28, all[27..].to_vec());
    assert_eq!(first.read(5, 2).unwrap(), all[4..6].to_vec());
    assert!(first.read(31, 10).unwrap().is_empty());
    let each_actor = |actor: &str| {
        all.iter()
            .filter(|s| {
                let sealed = Sealed::from_bytes("t", s.seq, &s.bytes).unwrap();
                sealed.entry["actor"] == actor
            })
            .count()
    };
    assert_eq!((each_actor("ana"), each_actor("bo")), (15, 15));
}

#[tokio::test]
async fn the_server_refuses_to_delete_or_purge_an_entry() {
    let server = super::server();
    let url = server.url();
    tokio::task::spawn_blocking(move || {
        let log = KvRecords::open(&NatsOptions::new(url)).unwrap();
        for n in 0..3 {
            log.append(&entry("ana", n)).unwrap();
        }
    })
    .await
    .unwrap();
    let bus = NatsBus::connect(&NatsOptions::new(server.url()))
        .await
        .unwrap();
    let js = bus.jetstream();
    let stream = js.get_stream(AUDIT_STREAM).await.unwrap();
    assert!(
        stream.delete_message(2).await.is_err(),
        "entry 2 was deleted"
    );
    assert!(stream.purge().await.is_err(), "the audit stream was purged");
    let info = js
        .get_stream(AUDIT_STREAM)
        .await
        .unwrap()
        .cached_info()
        .clone();
    assert_eq!(info.state.messages, 3);
}

/// One byte of entry 2's JSON changed in the server's own files, with the server stopped: the
/// server drops entry 2 and those after it in the block when it starts again (its own checksum),
/// and the next `verify` names entry 2 — the head kept in the records says the log went on.
/// Nothing can be appended after an entry the stream lost: the append names it.
#[test]
fn a_byte_changed_in_the_servers_store_is_found_naming_its_entry() {
    let mut server = super::server();
    {
        let log = open(&server);
        for n in 0..4 {
            log.append(&entry("ana", n)).unwrap();
        }
        assert_eq!(verified(&log).unwrap(), 4);
    }
    server.kill();
    let blocks = find_blocks(&server.store_dir().join("jetstream"));
    assert!(
        !blocks.is_empty(),
        "no message block of {AUDIT_STREAM} under the store"
    );
    let marker = br#""n":1"#;
    let mut changed = false;
    for block in blocks {
        let mut bytes = std::fs::read(&block).unwrap();
        if let Some(at) = bytes.windows(marker.len()).position(|w| w == marker) {
            bytes[at + 4] = b'7';
            std::fs::write(&block, bytes).unwrap();
            changed = true;
        }
    }
    assert!(changed, "entry 2 was not found in the store's blocks");
    server.start_again().unwrap();
    let log = open(&server);
    match verified(&log) {
        Err(AuditError::Broken { seq, .. } | AuditError::Unreadable { seq, .. }) => {
            assert_eq!(seq, 2)
        }
        other => panic!(
            "a changed entry was not found: {other:?}\n{}",
            server.log_tail(30)
        ),
    }
    // The server kept entry 1 (and, on 2.9, a gap where entry 2 was): the next entry would be
    // sealed after entries lost, so none is.
    match log.append(&entry("ana", 9)) {
        Err(AuditError::Broken { seq, .. }) => assert_eq!(seq, 2),
        other => panic!("an entry was appended after a lost one: {other:?}"),
    }
}

fn find_blocks(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(find_blocks(&path));
        } else if path.extension().is_some_and(|e| e == "blk")
            && path.to_string_lossy().contains(AUDIT_STREAM)
        {
            found.push(path);
        }
    }
    found
}
