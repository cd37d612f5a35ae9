//! A declaration published again with its message id is stored once: a send tried
//! again — its answer lost, the server restarting — does not put a second copy before the
//! host, while another send of the same declaration (another id) is a new message.

use async_nats::jetstream::Context;
use futures_util::StreamExt as _;
use mesh_bus::jetstream::{ensure_declaration_consumer, ensure_streams, publish_declaration};
use mesh_bus::subjects::DECLARATIONS_STREAM;
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
