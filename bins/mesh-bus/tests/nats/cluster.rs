//! The bus on a loopback cluster of three nats-servers ([`mesh_test_support::nats_cluster`]):
//! the controller's records (`KvRecords`, a bucket per top-level directory) on three copies
//! survive the loss of the stream's
//! leader and of the server a client is connected to, read back byte for byte; a server
//! restarted with its store deleted catches up; the plans lease holds across a server loss; with
//! quorum lost a write fails saying so and stores nothing, and works again when quorum returns;
//! a write whose answer is lost (a proxy cuts the connection between the stream storing it and
//! the answer reaching the client) is sent again and stored once; a reports reader opened while
//! its stream has no leader reads every report stored after its opening once the stream has one.
//!
//! Every kill happens after a named step (a write acknowledged, a lease taken), never after a
//! sleep, and every wait is on a condition the servers or the records report.

use mesh_bus::jetstream::{
    self, raise_replicas, replica_shortfalls, ReplicaShortfall, CLUSTER_REPLICAS,
};
use mesh_bus::records::{KvRecords, StepHook, STEP_WRITE_SENDING, STEP_WRITE_SENT};
use mesh_bus::subjects::RECORDS_BUCKET;
use mesh_bus::{NatsBus, NatsOptions};
use mesh_records::lease::{check_held, Lease, PLANS_LEASE};
use mesh_records::record_store::RecordStore;
use mesh_test_support::nats_cluster::NatsCluster;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// The stream of the records at the top (`inventory.toml`).
const RECORDS_STREAM: &str = "KV_mesh-records";

/// The stream of the records under a top-level directory.
fn stream_of(top: &str) -> String {
    format!("KV_{}", mesh_bus::records::directory_bucket(top))
}

/// How long a condition is waited for before the test fails (it bounds a failure only).
const PATIENCE: Duration = Duration::from_secs(60);

fn cluster() -> NatsCluster {
    NatsCluster::start(3).unwrap_or_else(|error| panic!("{error}"))
}

/// The records on the cluster, the client given every server, the buckets of the directories
/// the tests write made while every server is up (as the controller makes its own).
fn records(cluster: &NatsCluster) -> KvRecords {
    let records =
        KvRecords::open(&NatsOptions::new(cluster.urls())).unwrap_or_else(|e| panic!("{e}"));
    records
        .make_directories(&["plans", "builds", "sent", "settings", "locks"])
        .unwrap_or_else(|e| panic!("{e}"));
    records
}

/// Every byte value, and the key's name, so no two records are alike.
fn payload(key: &str) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..=255u8).collect();
    bytes.extend_from_slice(key.as_bytes());
    bytes
}

/// Blocks on `future` on a runtime of its own (the test itself is not async: KvRecords blocks).
fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// The stream's info as the cluster's running servers answer it: `(leader's index, every
/// replica current)`.
fn stream_cluster(cluster: &NatsCluster, stream: &str) -> Option<(usize, bool)> {
    let urls = cluster.urls();
    let stream = stream.to_owned();
    block_on(async move {
        let bus = NatsBus::connect(&NatsOptions::new(urls)).await.ok()?;
        let mut handle = bus.jetstream().get_stream(&stream).await.ok()?;
        let info = handle.info().await.ok()?;
        let cluster_info = info.cluster.clone()?;
        let leader = cluster_info.leader.clone()?;
        let current = cluster_info
            .replicas
            .iter()
            .all(|peer| peer.current && !peer.offline);
        Some((leader, current))
    })
    .and_then(|(leader, current)| Some((cluster.index_of(&leader)?, current)))
}

/// Waits until `stream` has a running leader and every copy is current; its leader's index.
fn settled_leader(cluster: &NatsCluster, stream: &str) -> usize {
    wait_for(&format!("{stream} led, every copy current"), || {
        stream_cluster(cluster, stream)
            .filter(|(leader, current)| *current && cluster.server(*leader).is_running())
            .map(|(leader, _)| leader)
    })
}

/// Waits until `stream` has a running leader (its copies may still be catching up).
fn running_leader(cluster: &NatsCluster, stream: &str) -> usize {
    wait_for(&format!("{stream} led by a running server"), || {
        stream_cluster(cluster, stream)
            .map(|(leader, _)| leader)
            .filter(|leader| cluster.server(*leader).is_running())
    })
}

fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "not so within {PATIENCE:?}: {what}"
        );
        // Only paces the looks at the condition above; the deadline bounds a failure.
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The server `records` is connected to now.
fn connected_to(cluster: &NatsCluster, records: &KvRecords) -> usize {
    let port = records.bus().client().server_info().port;
    cluster
        .index_of_port(port)
        .unwrap_or_else(|| panic!("connected to port {port}, no server of the cluster"))
}

fn read_back(records: &KvRecords, keys: &[String]) {
    for key in keys {
        assert_eq!(
            records.get(key).unwrap().as_deref(),
            Some(payload(key).as_slice()),
            "{key} read back"
        );
    }
}

#[test]
fn records_on_three_copies_survive_the_leader_and_the_connected_server_killed() {
    let mut cluster = cluster();
    // What is asserted is that no record is lost, not how soon the cluster answers after a
    // kill: on a 2.9 cluster, listings made just after a server was killed were seen to go
    // unanswered for longer than the default 30 s, so the calls here ride it out.
    let records = records(&cluster).with_retry_limit(PATIENCE);
    // Made on a cluster, the bucket has three copies.
    assert_eq!(
        block_on(async {
            let bus = NatsBus::connect(&NatsOptions::new(cluster.urls()))
                .await
                .unwrap();
            replica_shortfalls(&bus.jetstream(), CLUSTER_REPLICAS)
                .await
                .unwrap()
        }),
        vec![]
    );
    let mut keys: Vec<String> = (0..20).map(|i| format!("plans/plan-{i}.json")).collect();
    for key in &keys {
        records.put(key, &payload(key)).unwrap();
    }

    // Step: every put acknowledged. Kill the leader of their directory's bucket.
    let leader = settled_leader(&cluster, &stream_of("plans"));
    cluster.kill(leader);
    read_back(&records, &keys);
    let more: Vec<String> = (0..5).map(|i| format!("builds/build-{i}.json")).collect();
    for key in &more {
        records.put(key, &payload(key)).unwrap();
    }
    keys.extend(more);
    read_back(&records, &keys);

    // The leader back, caught up; then kill the server the records are connected to.
    cluster.start_again(leader).unwrap();
    settled_leader(&cluster, &stream_of("plans"));
    let connected = connected_to(&cluster, &records);
    cluster.kill(connected);
    let after: Vec<String> = (0..5).map(|i| format!("sent/node-{i}.json")).collect();
    for key in &after {
        records.put(key, &payload(key)).unwrap();
    }
    keys.extend(after);
    read_back(&records, &keys);
    assert_ne!(connected_to(&cluster, &records), connected);

    // A controller started afresh reads every record, byte for byte.
    drop(records);
    let again = self::records(&cluster).with_retry_limit(PATIENCE);
    read_back(&again, &keys);
    let mut listed = again.keys_under("").unwrap();
    listed.sort();
    let mut expected = keys.clone();
    expected.sort();
    assert_eq!(listed, expected);
}

#[test]
fn a_server_restarted_with_its_store_deleted_catches_up() {
    let mut cluster = cluster();
    let records = records(&cluster);
    let keys: Vec<String> = (0..10)
        .map(|i| format!("settings/m{i}/mesh.json"))
        .collect();
    for key in &keys[..5] {
        records.put(key, &payload(key)).unwrap();
    }
    let settings = stream_of("settings");
    let leader = settled_leader(&cluster, &settings);
    let replaced = (leader + 1) % cluster.len();

    // Step: the first five stored. The replaced server's disk is lost.
    cluster.kill(replaced);
    cluster.start_empty(replaced).unwrap();
    assert_eq!(cluster.stream_state(replaced, &settings), None);
    // Writes go on while it catches up.
    for key in &keys[5..] {
        records.put(key, &payload(key)).unwrap();
    }
    let on_leader = wait_for("the leader's state", || {
        cluster.stream_state(leader, &settings)
    });
    // The records, and nothing else: the directory's bucket holds only its records.
    assert_eq!(on_leader.0, keys.len() as u64);
    wait_for("the emptied server holding what the leader holds", || {
        (cluster.stream_state(replaced, &settings) == Some(on_leader)).then_some(())
    });

    // With the old leader gone, the caught-up server and the third hold every record.
    cluster.kill(leader);
    running_leader(&cluster, &settings);
    read_back(&records, &keys);
}

#[test]
fn the_plans_lease_holds_across_a_server_loss() {
    let mut cluster = cluster();
    let first: Arc<dyn RecordStore> = Arc::new(records(&cluster));
    let held = Arc::new(Mutex::new(None));
    let lease = Lease::acquire(Arc::clone(&first), "merge catalogue", Arc::clone(&held)).unwrap();
    let token = held.lock().unwrap().clone().unwrap();

    // A second controller, on its own connection, tries for the lease the whole time.
    let second: Arc<dyn RecordStore> = Arc::new(records(&cluster));
    let (took, taken) = mpsc::channel();
    let trying = {
        let second = Arc::clone(&second);
        std::thread::spawn(move || {
            let lease = Lease::acquire(second, "plans resume", Arc::default()).unwrap();
            let _ = took.send(());
            lease
        })
    };

    // Step: the lease taken. Kill the leader of the lease's bucket.
    let leader = settled_leader(&cluster, &stream_of("locks"));
    cluster.kill(leader);
    // The first holder's beat goes on moving across the loss: three renewals after it.
    let beat = |records: &dyn RecordStore| -> u64 {
        let bytes = records.get(PLANS_LEASE).unwrap().unwrap();
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        value["beat"].as_u64().unwrap()
    };
    let at_kill = beat(first.as_ref());
    wait_for("three renewals after the kill", || {
        (beat(first.as_ref()) >= at_kill + 3).then_some(())
    });
    assert!(
        taken.try_recv().is_err(),
        "the second controller took the lease while the first lived"
    );
    check_held(first.as_ref(), &token).unwrap();

    // Released, the lease goes to the one waiting.
    drop(lease);
    taken.recv_timeout(PATIENCE).unwrap();
    let second_lease = trying.join().unwrap();
    assert!(check_held(first.as_ref(), &token).is_err());
    drop(second_lease);
}

#[test]
fn with_quorum_lost_a_write_fails_saying_so_and_stores_nothing_until_quorum_returns() {
    let mut cluster = cluster();
    let records = records(&cluster).with_retry_limit(Duration::from_secs(5));
    records
        .put("inventory.toml", b"bus-node = \"a\"\n")
        .unwrap();

    // Step: the first write stored. Kill the bucket's leader and one more server: the one left
    // is a follower that cannot make a leader alone.
    let leader = settled_leader(&cluster, RECORDS_STREAM);
    let leaderless = |cluster: &NatsCluster| {
        let urls = cluster.urls();
        block_on(async move {
            let bus = NatsBus::connect(&NatsOptions::new(urls)).await.unwrap();
            jetstream::leaderless(&bus.jetstream(), RECORDS_STREAM).await
        })
    };
    assert_eq!(leaderless(&cluster), None, "a stream with a leader");
    let second = (leader + 1) % cluster.len();
    cluster.kill(leader);
    cluster.kill(second);
    // What a send that got no answer says of the stream (the controller's declarations).
    let said = leaderless(&cluster).expect("the stream is said to have lost its leader");
    assert!(
        said.contains(RECORDS_STREAM) && said.contains("lost its quorum"),
        "{said}"
    );
    let error = chain(
        &records
            .put("inventory.toml", b"bus-node = \"b\"\n")
            .unwrap_err(),
    );
    assert!(
        error.contains("quorum") && error.contains("no leader"),
        "the error names the lost quorum: {error}"
    );
    assert!(error.contains("inventory.toml"), "{error}");

    // Quorum back: nothing of the failed write was stored; a write works again.
    cluster.start_again(second).unwrap();
    running_leader(&cluster, RECORDS_STREAM);
    // The stream has its leader again, but the cluster's JetStream may still answer 503 for
    // a while (its own leader not yet chosen again): the records answer when it is back.
    let read = wait_for("the records to answer with quorum back", || {
        records.get("inventory.toml").ok()
    });
    assert_eq!(read.as_deref(), Some(b"bus-node = \"a\"\n".as_slice()));
    records
        .put("inventory.toml", b"bus-node = \"b\"\n")
        .unwrap();
    assert_eq!(
        records.get("inventory.toml").unwrap().as_deref(),
        Some(b"bus-node = \"b\"\n".as_slice())
    );
}

/// A loopback TCP proxy in front of one server, to lose a server's answers at a named step:
/// [`Proxy::hold`] keeps what the server sends from reaching the client, [`Proxy::cut`] closes
/// every connection with what it held unsent and takes no more (the client then reconnects to
/// another server of the cluster, as when its server dies with the answer unsent).
struct Proxy {
    port: u16,
    holding: Arc<AtomicBool>,
    cut: Arc<AtomicBool>,
    sockets: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let holding = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(AtomicBool::new(false));
        let sockets: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        {
            let (holding, cut, sockets) = (holding.clone(), cut.clone(), sockets.clone());
            std::thread::spawn(move || {
                for client in listener.incoming() {
                    let Ok(client) = client else { return };
                    if cut.load(Ordering::SeqCst) {
                        drop(client);
                        continue;
                    }
                    let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                        continue;
                    };
                    {
                        let mut sockets = sockets.lock().unwrap();
                        sockets.push(client.try_clone().unwrap());
                        sockets.push(server.try_clone().unwrap());
                    }
                    let (mut from_client, mut to_server) =
                        (client.try_clone().unwrap(), server.try_clone().unwrap());
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from_client, &mut to_server);
                    });
                    let (mut from_server, mut to_client) = (server, client);
                    let holding = holding.clone();
                    std::thread::spawn(move || {
                        let mut buffer = [0u8; 16 * 1024];
                        loop {
                            let Ok(n) = from_server.read(&mut buffer) else {
                                return;
                            };
                            if n == 0 {
                                return;
                            }
                            // Held: never sent (the connection is cut before it is let go).
                            if holding.load(Ordering::SeqCst) {
                                continue;
                            }
                            if to_client.write_all(&buffer[..n]).is_err() {
                                return;
                            }
                        }
                    });
                }
            });
        }
        Proxy {
            port,
            holding,
            cut,
            sockets,
        }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn hold(&self) {
        self.holding.store(true, Ordering::SeqCst);
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for socket in self.sockets.lock().unwrap().drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

/// What the fail point of [`a_write_whose_answer_is_lost_is_sent_again_and_stored_once`] needs:
/// the cluster, the proxy the write goes through, the records stream's leader and its last
/// sequence before the write, and whether the fail point ran.
struct Arranged {
    cluster: NatsCluster,
    proxy: Option<Proxy>,
    leader: usize,
    last_before: u64,
    ran: bool,
}

/// The fail point: at [`STEP_WRITE_SENDING`] nothing the server sends reaches the client any
/// more; at [`STEP_WRITE_SENT`], once the stream's leader has stored the write, the connection
/// is cut with its answer unsent — as when its server dies between storing and answering.
fn lose_the_answer(arranged: &Mutex<Arranged>, step: &str) {
    let mut arranged = arranged.lock().unwrap();
    let Some(proxy) = arranged.proxy.take() else {
        return;
    };
    match step {
        STEP_WRITE_SENDING => {
            proxy.hold();
            arranged.proxy = Some(proxy);
        }
        STEP_WRITE_SENT => {
            let (leader, before) = (arranged.leader, arranged.last_before);
            wait_for("the write stored", || {
                arranged
                    .cluster
                    .stream_state(leader, &stream_of("plans"))
                    .filter(|(_, last)| *last > before)
            });
            proxy.cut();
            arranged.ran = true;
        }
        other => panic!("no step {other}"),
    }
}

/// How many values `key` has in the records bucket's history (asked again while the cluster
/// cannot answer).
fn history_len(cluster: &NatsCluster, key: &str) -> usize {
    wait_for(&format!("the history of {key}"), || {
        let (urls, key) = (cluster.urls(), key.to_owned());
        block_on(async move {
            use futures_util::StreamExt as _;
            let bus = NatsBus::connect(&NatsOptions::new(urls)).await.ok()?;
            let (bucket, in_bucket) = mesh_bus::records::place(&key);
            let kv = bus.jetstream().get_key_value(bucket).await.ok()?;
            let mut history = kv.history(in_bucket).await.ok()?;
            let mut count = 0;
            while let Some(entry) = history.next().await {
                entry.ok()?;
                count += 1;
            }
            Some(count)
        })
    })
}

#[test]
fn a_write_whose_answer_is_lost_is_sent_again_and_stored_once() {
    let arranged = Arc::new(Mutex::new(Arranged {
        cluster: cluster(),
        proxy: None,
        leader: 0,
        last_before: 0,
        ran: false,
    }));
    let hook: StepHook = {
        let arranged = Arc::clone(&arranged);
        Arc::new(move |step: &str| lose_the_answer(&arranged, step))
    };
    // Records reached through a proxy in front of one server; the client learns the others
    // from it (the server's INFO) and reconnects to them when the proxy is cut.
    let open_through_proxy = || {
        let mut arranged = arranged.lock().unwrap();
        let proxy = Proxy::start(arranged.cluster.server(0).port());
        let records = KvRecords::open(&NatsOptions::new(proxy.url())).unwrap();
        arranged.proxy = Some(proxy);
        records
    };
    let arrange = || {
        let mut arranged = arranged.lock().unwrap();
        let leader = settled_leader(&arranged.cluster, &stream_of("plans"));
        let state = arranged.cluster.stream_state(leader, &stream_of("plans"));
        arranged.leader = leader;
        arranged.last_before = state.map_or(0, |(_, last)| last);
        arranged.ran = false;
    };
    let key = "plans/plan-1.json";

    // A put whose answer is lost: sent again, it is stored once.
    let records = open_through_proxy();
    records.put(key, b"first").unwrap();
    let records = records.at_step(Arc::clone(&hook));
    arrange();
    records.put(key, b"second").unwrap();
    assert!(arranged.lock().unwrap().ran, "the fail point ran");
    assert_eq!(
        records.get(key).unwrap().as_deref(),
        Some(b"second".as_slice())
    );
    assert_eq!(history_len(&arranged.lock().unwrap().cluster, key), 2);

    // An update (compare-and-set) whose answer is lost: applied once, not twice.
    let records = open_through_proxy().at_step(hook);
    arrange();
    let applied = records
        .update(key, &mut |current| {
            let mut next = current.unwrap_or_default().to_vec();
            next.extend_from_slice(b"+1");
            Ok(next)
        })
        .unwrap();
    assert!(arranged.lock().unwrap().ran, "the fail point ran");
    assert_eq!(applied, b"second+1");
    assert_eq!(
        records.get(key).unwrap().as_deref(),
        Some(b"second+1".as_slice())
    );
    assert_eq!(history_len(&arranged.lock().unwrap().cluster, key), 3);
}

/// An error and every source under it, as `{:#}` shows them.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(source) = next {
        text.push_str(": ");
        text.push_str(&source.to_string());
        next = source.source();
    }
    text
}

#[test]
fn a_bucket_made_with_one_copy_is_reported_and_raised() {
    let cluster = cluster();
    block_on(async {
        let bus = NatsBus::connect(&NatsOptions::new(cluster.urls()))
            .await
            .unwrap();
        let js = bus.jetstream();
        // As a mesh made before replicas were: every stream and bucket with one copy. A
        // cluster just started may time a request out under load: making is asked again, as
        // `serve` does at start (making twice makes nothing more).
        let mut tries = 0;
        loop {
            tries += 1;
            let made = async {
                jetstream::ensure_streams_with(&js, 1).await?;
                jetstream::ensure_bucket_with(&js, "agent_state", 1).await
            };
            match made.await {
                Ok(_) => break,
                Err(error) if tries < 30 => eprintln!("making the streams, try {tries}: {error}"),
                Err(error) => panic!("the streams not made in {tries} tries: {error}"),
            }
        }
        let short = replica_shortfalls(&js, CLUSTER_REPLICAS).await.unwrap();
        let names: Vec<&str> = short.iter().map(|s| s.stream.as_str()).collect();
        assert_eq!(
            names,
            [
                "KV_agent_state",
                "MESH_DECLARATIONS",
                "MESH_EVENTS",
                "MESH_REPORTS"
            ]
        );
        assert_eq!(
            short[0],
            ReplicaShortfall {
                stream: "KV_agent_state".into(),
                replicas: 1,
                wanted: 3
            }
        );
        // Opened again with the default, a stream is left as it is (an operator's choice
        // stands) and still reported.
        jetstream::ensure_streams(&js).await.unwrap();
        assert_eq!(replica_shortfalls(&js, 3).await.unwrap().len(), 4);

        let mut kv = js.get_key_value("agent_state").await.unwrap();
        kv.put("k", "v".into()).await.unwrap();
        for stream in names {
            let raised = raise_replicas(&js, stream, 3).await.unwrap();
            assert_eq!((raised.before, raised.after), (1, 3), "{stream}");
        }
        assert_eq!(replica_shortfalls(&js, 3).await.unwrap(), vec![]);
        // Raised again, nothing changes; never lowered.
        let again = raise_replicas(&js, "MESH_EVENTS", 1).await.unwrap();
        assert_eq!((again.before, again.after), (3, 3));
        kv = js.get_key_value("agent_state").await.unwrap();
        // A copy the raise made may answer a read before it has caught up (CI saw `None` once,
        // under load): the value is waited for, the limit bounding only a failure.
        let limit = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let read = kv.get("k").await.unwrap();
            if read.as_deref() == Some(b"v".as_slice()) {
                break;
            }
            assert!(
                std::time::Instant::now() < limit,
                "the value kept through the raise: {read:?}"
            );
            // A wait on a condition (the value read back), inside the test's one runtime where
            // the test kit's blocking `wait_for` cannot run: the sleep only paces the reads,
            // and nothing is asserted on time — the 30 s limit bounds a failure.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    });
    // The records bucket made on the cluster: three copies, nothing to raise.
    let records = records(&cluster);
    records.put("inventory.toml", b"x").unwrap();
    let leader = settled_leader(&cluster, &format!("KV_{RECORDS_BUCKET}"));
    assert!(cluster.server(leader).is_running());
}

#[test]
fn several_servers_are_given_as_one_comma_separated_url() {
    let options = NatsOptions::new("nats://127.0.0.1:4222, nats://127.0.0.1:4223,");
    assert_eq!(options.servers().unwrap().len(), 2);
    let error = NatsOptions::new(" , ").servers().unwrap_err().to_string();
    assert!(error.contains("names no server"), "{error}");
}

/// Publishes `payload` on `node`'s report subject as a host does, and waits until the stream
/// stored it (call it once the stream has a running leader).
async fn publish_report(js: &async_nats::jetstream::Context, node: &str, payload: &'static str) {
    js.publish(mesh_bus::subjects::report(node), payload.into())
        .await
        .unwrap_or_else(|error| panic!("the report of {node} not published: {error}"))
        .await
        .unwrap_or_else(|error| panic!("the report of {node} not stored: {error}"));
}

#[test]
fn a_reports_reader_opened_while_its_stream_has_no_leader_reads_what_comes_once_it_has() {
    let mut cluster = cluster();
    let urls = cluster.urls();
    block_on(async {
        let bus = NatsBus::connect(&NatsOptions::new(urls.clone()))
            .await
            .unwrap();
        jetstream::ensure_streams_with(&bus.jetstream(), 3)
            .await
            .unwrap();
    });
    let leader = settled_leader(&cluster, mesh_bus::subjects::REPORTS_STREAM);
    // Before the opening: not read.
    block_on(async {
        let bus = NatsBus::connect(&NatsOptions::new(urls)).await.unwrap();
        publish_report(&bus.jetstream(), "before", "old").await;
    });

    // Two of three servers lost, the reports stream's leader among them: its consumer cannot
    // be made.
    let second = (leader + 1) % cluster.len();
    cluster.kill(leader);
    cluster.kill(second);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _in_runtime = runtime.enter();
    let bus = runtime
        .block_on(NatsBus::connect(&NatsOptions::new(cluster.urls())))
        .unwrap();
    let mut reader = runtime
        .block_on(jetstream::ReportReader::open(bus.jetstream()))
        .unwrap_or_else(|error| panic!("opened without its stream answering: {}", chain(&error)));
    assert!(!reader.is_reading(), "a consumer made without quorum");

    // Quorum back: a report stored before the reader makes its consumer is read all the same,
    // and the one stored before the opening is not.
    cluster.start_again(second).unwrap();
    running_leader(&cluster, mesh_bus::subjects::REPORTS_STREAM);
    runtime.block_on(async {
        publish_report(&bus.jetstream(), "after", "new").await;
        let until = tokio::time::Instant::now() + PATIENCE;
        let stored = reader
            .next(until)
            .await
            .expect("the report stored after the opening");
        assert_eq!(stored.subject, mesh_bus::subjects::report("after"));
        assert_eq!(&stored.payload[..], b"new");
        assert!(reader.is_reading());
    });
}
