//! A declaration published again with its message id is stored once: a send tried
//! again — its answer lost, the server restarting — does not put a second copy before the
//! host, while another send of the same declaration (another id) is a new message. A host reads
//! the last one on its subject by a direct get, with the send's id; a declarations stream made
//! by an earlier mesh (no direct gets) is made to answer them, on every server.

use async_nats::jetstream::Context;
use mesh_bus::jetstream::{
    declarations_stream, ensure_streams, last_declaration, publish_declaration, LastDeclaration,
};
use mesh_bus::subjects::DECLARATIONS_STREAM;

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

    // Another send of the same declaration is another message, and the last one read.
    let other = publish_declaration(&js, "a", declaration.clone(), "a:sha256:00:send-2")
        .await
        .unwrap();
    assert!(!other.duplicate);
    assert_eq!(stored(&js).await, 2);
    assert_eq!(
        last_declaration(&js, "a").await.unwrap(),
        Some(LastDeclaration {
            payload: declaration.into(),
            message_id: Some("a:sha256:00:send-2".to_owned()),
            sequence: other.sequence,
        })
    );
}

#[tokio::test]
async fn a_nodes_last_declaration_is_its_own_subjects_newest_and_none_before_any() {
    let server = super::server();
    let js = super::connect(&server).await.jetstream();
    ensure_streams(&js).await.unwrap();
    assert_eq!(last_declaration(&js, "a").await.unwrap(), None);
    for (node, send) in [("a", "a:1"), ("b", "b:1"), ("a", "a:2"), ("ab", "ab:1")] {
        publish_declaration(&js, node, format!("{send}'s").into_bytes(), send)
            .await
            .unwrap();
    }
    let last = |node: &'static str| {
        let js = js.clone();
        async move {
            let last = last_declaration(&js, node).await.unwrap().unwrap();
            (
                last.message_id.unwrap(),
                String::from_utf8(last.payload.to_vec()).unwrap(),
            )
        }
    };
    assert_eq!(last("a").await, ("a:2".to_owned(), "a:2's".to_owned()));
    assert_eq!(last("b").await, ("b:1".to_owned(), "b:1's".to_owned()));
    assert_eq!(last("ab").await, ("ab:1".to_owned(), "ab:1's".to_owned()));
    assert_eq!(last_declaration(&js, "c").await.unwrap(), None);
}

#[tokio::test]
async fn a_declarations_stream_made_by_an_earlier_mesh_is_made_to_answer_direct_gets() {
    let server = super::server();
    let js = super::connect(&server).await.jetstream();
    // As an earlier mesh made it: its hosts read durable consumers, no direct gets.
    js.create_stream(async_nats::jetstream::stream::Config {
        allow_direct: false,
        max_consumers: 1_000_000,
        ..declarations_stream()
    })
    .await
    .unwrap();
    publish_declaration(&js, "a", b"sent before".to_vec(), "a:1")
        .await
        .unwrap();
    let error = last_declaration(&js, "a").await.unwrap_err();
    assert!(
        error.to_string().contains("mesh.declaration.a"),
        "the error names the subject: {error}"
    );

    ensure_streams(&js).await.unwrap();
    let info = js
        .get_stream(DECLARATIONS_STREAM)
        .await
        .unwrap()
        .get_info()
        .await
        .unwrap();
    assert!(info.config.allow_direct);
    assert_eq!(info.config.max_consumers, 1_000_000, "the rest is kept");
    let last = last_declaration(&js, "a").await.unwrap().unwrap();
    assert_eq!(
        (last.payload.as_ref(), last.message_id.as_deref()),
        (b"sent before".as_slice(), Some("a:1"))
    );
}
