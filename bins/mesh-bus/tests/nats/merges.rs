//! A merge published twice is heard once (the rules “A durable consumer starts from now” and “A
//! merge heard twice makes one plan”).

use async_nats::jetstream::{stream, Context};
use mesh_bus::jetstream::{
    ensure_streams, publish_merge, HeardMerge, MergeAnnouncement, MergeListener,
};
use mesh_bus::subjects;
use mesh_bus::subjects::EVENTS_STREAM;
use mesh_test_support::nats_server::NatsServer;
use std::time::Duration;

const QUIET: Duration = Duration::from_millis(500);

/// A JetStream context on `server` with the mesh's streams made.
async fn with_the_mesh_streams(server: &NatsServer) -> Context {
    let js = super::connect(server).await.jetstream();
    ensure_streams(&js).await.unwrap();
    js
}

/// The next merge `listener` hands out, waiting up to five seconds for it.
async fn hear(listener: &mut MergeListener) -> HeardMerge {
    listener
        .next(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("a merge within 5 s")
}

/// What the server says of `stream` now (its configuration and state).
async fn stream_info(js: &Context, stream: &str) -> stream::Info {
    js.get_stream(stream)
        .await
        .unwrap()
        .get_info()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_merge_published_twice_is_heard_once() {
    let server = super::server();
    let js = with_the_mesh_streams(&server).await;
    publish_merge(&js, "catalogue", "main", "past")
        .await
        .unwrap();
    let mut listener = MergeListener::open(&js, "controller").await.unwrap();

    let first = publish_merge(&js, "catalogue", "main", "abc")
        .await
        .unwrap();
    let second = publish_merge(&js, "catalogue", "main", "abc")
        .await
        .unwrap();
    assert!(!first.duplicate);
    assert!(second.duplicate, "the stream kept it once");
    assert_eq!(second.sequence, first.sequence);
    // The same commit on another branch is another merge.
    publish_merge(&js, "catalogue", "dev", "abc").await.unwrap();

    let heard = hear(&mut listener).await;
    assert_eq!(heard.merge.commit, "abc");
    assert_eq!(heard.merge.branch, "main");
    heard.ack().await.unwrap();
    let heard = hear(&mut listener).await;
    assert_eq!(
        (heard.merge.branch.as_str(), heard.merge.commit.as_str()),
        ("dev", "abc")
    );
    heard.ack().await.unwrap();
    assert!(
        listener.next(QUIET).await.unwrap().is_none(),
        "nothing more"
    );
}

// Past the stream's deduplication window (or published without a message id), the listener
// still hands a merge out once.
#[tokio::test]
async fn a_merge_announced_again_without_its_id_is_still_heard_once() {
    let server = super::server();
    let js = with_the_mesh_streams(&server).await;
    let mut listener = MergeListener::open(&js, "controller").await.unwrap();
    let merge = MergeAnnouncement {
        repository: "records".into(),
        branch: "main".into(),
        commit: "f00".into(),
    };
    for _ in 0..2 {
        js.publish(subjects::MERGES, merge.to_bytes().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let stream_info = stream_info(&js, EVENTS_STREAM).await;
    assert_eq!(stream_info.state.messages, 2, "both stored: no message id");
    let heard = hear(&mut listener).await;
    assert_eq!(heard.merge, merge);
    heard.ack().await.unwrap();
    assert!(listener.next(QUIET).await.unwrap().is_none(), "heard once");
}

#[tokio::test]
async fn the_mesh_streams_are_made_once_and_a_reopened_listener_keeps_its_place() {
    let server = super::server();
    let js = with_the_mesh_streams(&server).await;
    ensure_streams(&js).await.unwrap();
    let events = stream_info(&js, EVENTS_STREAM).await;
    assert_eq!(events.config.subjects, [subjects::ALL_EVENTS]);
    assert_eq!(
        events.config.duplicate_window,
        mesh_bus::jetstream::MERGE_DEDUPLICATION_WINDOW
    );
    for (stream, subject) in [
        (
            mesh_bus::subjects::DECLARATIONS_STREAM,
            subjects::ALL_DECLARATIONS,
        ),
        (mesh_bus::subjects::REPORTS_STREAM, subjects::ALL_REPORTS),
    ] {
        let info = stream_info(&js, stream).await;
        assert_eq!(info.config.subjects, [subject]);
    }

    let mut listener = MergeListener::open(&js, "controller").await.unwrap();
    publish_merge(&js, "catalogue", "main", "one")
        .await
        .unwrap();
    let heard = hear(&mut listener).await;
    heard.ack().await.unwrap();
    drop(listener);
    // A controller restarted: its consumer kept its place, nothing is heard again.
    let mut listener = MergeListener::open(&js, "controller").await.unwrap();
    assert!(listener.next(QUIET).await.unwrap().is_none());
    publish_merge(&js, "catalogue", "main", "two")
        .await
        .unwrap();
    let heard = hear(&mut listener).await;
    assert_eq!(heard.merge.commit, "two");
}
