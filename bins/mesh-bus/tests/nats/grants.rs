//! Grants as real bus permissions (the rule “Grants before code”): a server started with the
//! authorization file the bus node is sent refuses a host another node's subjects, and lets a
//! node use a bucket from the moment it is granted.

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::Context;
use futures_util::StreamExt;
use mesh_bus::grants::{authorization_config, BusAuthorization};
use mesh_bus::jetstream::{
    ensure_bucket, ensure_consumer_from_now, ensure_streams, last_declaration, publish_declaration,
};
use mesh_bus::nats::Refusal;
use mesh_bus::subjects::{declaration_consumer, DECLARATIONS_STREAM};
use mesh_bus::{subjects, Bus, NatsBus, NatsOptions};
use mesh_test_support::nats_server::NatsServer;
use std::time::{Duration, Instant};
use tokio::sync::broadcast;

const WAIT: Duration = Duration::from_secs(5);

/// The grants the tests start from: `home` may publish `media.scan` and use `home_buckets`.
fn grants(home_buckets: &[&str]) -> BusAuthorization {
    super::home_and_laptop(home_buckets, &["media.scan"])
}

async fn node(server: &NatsServer, node: &str) -> NatsBus {
    NatsBus::connect(&super::as_node(server, node))
        .await
        .unwrap_or_else(|error| panic!("{error}"))
}

/// `node`'s durable consumer as an earlier mesh made it for its host.
async fn earlier_meshs_consumer(js: &Context, node: &str) {
    ensure_consumer_from_now(
        js,
        DECLARATIONS_STREAM,
        async_nats::jetstream::consumer::pull::Config {
            durable_name: Some(declaration_consumer(node)),
            filter_subject: subjects::declaration(node),
            ack_policy: async_nats::jetstream::consumer::AckPolicy::Explicit,
            ..Default::default()
        },
    )
    .await
    .unwrap();
}

async fn refused(refusals: &mut broadcast::Receiver<Refusal>, expected: Refusal) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match tokio::time::timeout_at(deadline, refusals.recv()).await {
            Ok(Ok(refusal)) if refusal == expected => return,
            Ok(Ok(_other)) => continue,
            Ok(Err(error)) => panic!("refusals: {error}"),
            Err(_) => panic!("the server did not refuse: expected {expected:?}"),
        }
    }
}

fn quick(bus: &NatsBus) -> Context {
    let mut js = bus.jetstream();
    js.set_timeout(Duration::from_millis(500));
    js
}

#[tokio::test]
async fn a_host_is_refused_another_nodes_declarations_and_reports() {
    let config = authorization_config(&grants(&[])).unwrap();
    let (server, controller) = super::secured(&config).await;
    let js = controller.jetstream();
    ensure_streams(&js).await.unwrap();
    for name in ["home", "laptop"] {
        earlier_meshs_consumer(&js, name).await;
    }
    let home = node(&server, "home").await;
    let mut reports = controller.subscribe(subjects::ALL_REPORTS).await.unwrap();

    // Another node's declarations: the subscription is refused and ends.
    let mut refusals = home.refusals();
    let mut spying = home
        .subscribe(&subjects::declaration("laptop"))
        .await
        .unwrap();
    refused(
        &mut refusals,
        Refusal::Subscribe {
            subject: "mesh.declaration.laptop".into(),
        },
    )
    .await;
    controller
        .publish(&subjects::declaration("laptop"), b"laptop's".to_vec())
        .await
        .unwrap();
    let spied = tokio::time::timeout(WAIT, spying.next()).await.unwrap();
    assert_eq!(
        spied, None,
        "the refused subscription ended, having heard nothing"
    );

    // Another node's reports: the publish is refused, and never reaches the controller.
    home.publish(&subjects::report("laptop"), b"forged".to_vec())
        .await
        .unwrap();
    refused(
        &mut refusals,
        Refusal::Publish {
            subject: "mesh.report.laptop".into(),
        },
    )
    .await;
    home.publish(&subjects::report("home"), b"home's own".to_vec())
        .await
        .unwrap();
    let heard = super::next_within(WAIT, &mut reports).await;
    assert_eq!(
        (heard.subject.as_str(), heard.payload.as_slice()),
        ("mesh.report.home", b"home's own".as_slice()),
        "the forged report never arrived; home's own did"
    );

    // Its own declarations it hears, live and as the stream's last (a direct get naming its
    // subject); another's last it cannot ask for.
    let mut own = home
        .subscribe(&subjects::declaration("home"))
        .await
        .unwrap();
    publish_declaration(&js, "home", b"home's".to_vec(), "home:1")
        .await
        .unwrap();
    publish_declaration(&js, "laptop", b"laptop's".to_vec(), "laptop:1")
        .await
        .unwrap();
    let live = super::next_within(WAIT, &mut own).await;
    assert_eq!(live.payload, b"home's");
    let last = last_declaration(&home.jetstream(), "home")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (last.payload.as_ref(), last.message_id.as_deref()),
        (b"home's".as_slice(), Some("home:1"))
    );
    let spied = last_declaration(&quick(&home), "laptop").await;
    assert!(
        spied.is_err(),
        "home read laptop's last declaration: {spied:?}"
    );
    refused(
        &mut refusals,
        Refusal::Publish {
            subject: "$JS.API.DIRECT.GET.MESH_DECLARATIONS.mesh.declaration.laptop".into(),
        },
    )
    .await;

    // A host of an earlier mesh reads its own durable consumer, and not another's.
    let consumer: PullConsumer = home
        .jetstream()
        .get_consumer_from_stream(declaration_consumer("home"), DECLARATIONS_STREAM)
        .await
        .unwrap();
    let mut batch = consumer
        .fetch()
        .max_messages(10)
        .expires(Duration::from_millis(500))
        .messages()
        .await
        .unwrap();
    let stored = batch.next().await.unwrap().unwrap();
    assert_eq!(stored.payload.as_ref(), b"home's");
    stored.ack().await.unwrap();
    let theirs = quick(&home)
        .get_consumer_from_stream::<async_nats::jetstream::consumer::pull::Config, _, _>(
            declaration_consumer("laptop"),
            DECLARATIONS_STREAM,
        )
        .await;
    assert!(theirs.is_err(), "home read laptop's declaration consumer");
}

async fn put_and_get(js: &Context, bucket: &str) -> Result<(), String> {
    let store = js
        .get_key_value(bucket)
        .await
        .map_err(|e| format!("open: {e}"))?;
    store
        .put("state", "kept".into())
        .await
        .map_err(|e| format!("put: {e}"))?;
    let value = store.get("state").await.map_err(|e| format!("get: {e}"))?;
    if value.as_deref() != Some(b"kept".as_slice()) {
        return Err(format!("get gave {value:?}"));
    }
    // The incident behind “Grants before code”: its module watched its new state, and a watch hears
    // the next put.
    let mut watch = store
        .watch("state")
        .await
        .map_err(|e| format!("watch: {e}"))?;
    store
        .put("state", "changed".into())
        .await
        .map_err(|e| format!("put: {e}"))?;
    match tokio::time::timeout(Duration::from_secs(2), watch.next()).await {
        Ok(Some(Ok(entry))) if entry.value.as_ref() == b"changed" => Ok(()),
        other => Err(format!("watch heard {other:?}")),
    }
}

// The incident behind “Grants before code”: a module's new state was refused for two minutes
// because its grant came after its code. Granted (and the server reloaded) first, it is usable at
// once.
#[tokio::test]
async fn a_node_granted_a_new_bucket_can_use_it() {
    let config = authorization_config(&grants(&["agent"])).unwrap();
    let (server, controller) = super::secured(&config).await;
    let js = controller.jetstream();
    for bucket in ["agent", "media"] {
        ensure_bucket(&js, bucket).await.unwrap();
    }
    let home = node(&server, "home").await;
    let laptop = node(&server, "laptop").await;
    put_and_get(&quick(&home), "agent").await.unwrap();
    put_and_get(&quick(&laptop), "agent")
        .await
        .expect_err("laptop was never granted `agent`");
    put_and_get(&quick(&home), "media")
        .await
        .expect_err("`media` is not granted yet");

    // The controller grants `media` to home: the bus node is sent the new users and reloads.
    let granted = authorization_config(&grants(&["agent", "media"])).unwrap();
    assert_ne!(
        granted, config,
        "the permissions changed, and the text says so"
    );
    server.reload(&granted).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        // The connection home already had, and a fresh one, as a module's first start has.
        let old = put_and_get(&quick(&home), "media").await;
        let fresh = put_and_get(&quick(&node(&server, "home").await), "media").await;
        match (old, fresh) {
            (Ok(()), Ok(())) => break,
            (old, fresh) if Instant::now() > deadline => {
                let log = std::fs::read_to_string(server.dir().join("server.log")).unwrap();
                panic!("granted `media` is still refused: {old:?} {fresh:?}\n{log}")
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    put_and_get(&quick(&laptop), "media")
        .await
        .expect_err("laptop was never granted `media`");
}

#[tokio::test]
async fn a_wrong_password_is_refused_at_connect() {
    let config = authorization_config(&grants(&[])).unwrap();
    let server = NatsServer::start_with_config(&config).unwrap_or_else(|e| panic!("{e}"));
    let err = NatsBus::connect(&NatsOptions::for_node(server.url(), "home", "wrong"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains(&server.url()), "{err}");
}
