//! A declaration published again with its message id is stored once: a send tried
//! again — its answer lost, the server restarting — does not put a second copy before the
//! host, while another send of the same declaration (another id) is a new message. And the
//! stream takes a consumer for every node of a fleet past a thousand nodes, on every server.

use async_nats::jetstream::Context;
use futures_util::StreamExt as _;
use mesh_bus::jetstream::{
    declarations_stream, ensure_declaration_consumer, ensure_streams, publish_declaration,
    DECLARATION_CONSUMERS,
};
use mesh_bus::subjects::DECLARATIONS_STREAM;
use mesh_bus::version::ServerVersion;
use std::time::Duration;

/// How many messages the declarations stream holds now.
async fn stored(js: &Context) -> u64 {
    js.get_stream(DECLARATIONS_STREAM)
        .await
        .unwrap()
        .get_info()
        .await
        .unwrap()
        .state
        .messages
}

#[tokio::test]
async fn a_declaration_published_twice_with_its_id_is_stored_once() {
    let server = super::server();
    let js = super::connect(&server).await.jetstream();
    ensure_streams(&js).await.unwrap();
    let (consumer, _) = ensure_declaration_consumer(&js, "a").await.unwrap();
    let declaration = br#"{"format":1,"node":"a","resources":[]}"#.to_vec();

    let first = publish_declaration(&js, "a", declaration.clone(), "a:sha256:00:send-1")
        .await
        .unwrap();
    let again = publish_declaration(&js, "a", declaration.clone(), "a:sha256:00:send-1")
        .await
        .unwrap();
    assert!(!first.duplicate);
    assert!(again.duplicate, "the stream kept it once");
    assert_eq!(again.sequence, first.sequence);
    assert_eq!(stored(&js).await, 1);

    // Another send of the same declaration is another message.
    let other = publish_declaration(&js, "a", declaration.clone(), "a:sha256:00:send-2")
        .await
        .unwrap();
    assert!(!other.duplicate);
    assert_eq!(stored(&js).await, 2);

    // The host's consumer is handed the two sends, not three.
    let mut batch = consumer
        .fetch()
        .max_messages(10)
        .expires(Duration::from_secs(1))
        .messages()
        .await
        .unwrap();
    let mut handed = Vec::new();
    while let Some(message) = batch.next().await {
        let message = message.unwrap();
        handed.push(message.info().unwrap().stream_sequence);
        message.ack().await.unwrap();
    }
    assert_eq!(handed, vec![first.sequence, other.sequence]);
}

/// Makes the declaration consumers of `nodes` nodes, 32 at once; fails naming the first node
/// whose consumer could not be made.
async fn make_consumers(js: &Context, nodes: usize) {
    let made: Vec<Result<(), String>> = futures_util::stream::iter(0..nodes)
        .map(|n| async move {
            let node = format!("n{n:05}");
            ensure_declaration_consumer(js, &node)
                .await
                .map(|_| ())
                .map_err(|error| format!("{node}: {error}"))
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let failed: Vec<&String> = made.iter().filter_map(|made| made.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{} of {nodes} consumers not made, the first: {}",
        failed.len(),
        failed[0]
    );
}

/// The consumer limit the declarations stream says now.
async fn max_consumers(js: &Context) -> i32 {
    js.get_stream(DECLARATIONS_STREAM)
        .await
        .unwrap()
        .get_info()
        .await
        .unwrap()
        .config
        .max_consumers
}

#[tokio::test]
async fn the_declarations_stream_takes_a_consumer_for_each_of_more_than_a_thousand_nodes() {
    let server = super::server();
    let js = super::connect(&server).await.jetstream();
    ensure_streams(&js).await.unwrap();
    assert_eq!(max_consumers(&js).await, DECLARATION_CONSUMERS);
    // nats-server 2.15 gives a stream that says no limit 1,000 consumers.
    make_consumers(&js, 1_001).await;
}

#[tokio::test]
async fn a_declarations_stream_made_without_a_consumer_limit_is_given_one_where_the_server_has_a_default(
) {
    let server = super::server();
    let js = super::connect(&server).await.jetstream();
    // As an earlier mesh made it: no limit said.
    js.create_stream(async_nats::jetstream::stream::Config {
        max_consumers: 0,
        ..declarations_stream()
    })
    .await
    .unwrap();
    let made_with = max_consumers(&js).await;
    ensure_streams(&js).await.unwrap();
    if ServerVersion::of_client(&js.client()).at_least(2, 15) {
        // The server's default, 1,000, would stop the fleet's 1,001st node.
        assert_eq!(max_consumers(&js).await, DECLARATION_CONSUMERS);
    } else {
        // No limit said is none on servers before 2.15 (which cannot change it either).
        assert_eq!(max_consumers(&js).await, made_with);
        assert!(made_with <= 0, "{made_with}");
    }
    make_consumers(&js, 1_001).await;
}
