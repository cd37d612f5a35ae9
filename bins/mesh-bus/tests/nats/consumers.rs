//! Durable consumers made from now, kept where they are, and reset from now (the rule “A durable
//! consumer starts from now”, ).

use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy, PullConsumer};
use async_nats::jetstream::stream::{self, RetentionPolicy};
use async_nats::jetstream::Context;
use futures_util::StreamExt;
use mesh_bus::jetstream::{consumer_reset, ensure_consumer_from_now, ensure_stream, Ensured};
use mesh_bus::NatsError;
use std::time::Duration;

async fn history(js: &Context, name: &str, retention: RetentionPolicy) {
    ensure_stream(
        js,
        stream::Config {
            name: name.into(),
            subjects: vec![format!("{}.>", name.to_lowercase())],
            retention,
            ..Default::default()
        },
    )
    .await
    .unwrap();
}

async fn publish(js: &Context, subject: &str, payload: &str) {
    js.publish(subject.to_owned(), payload.to_owned().into())
        .await
        .unwrap()
        .await
        .unwrap();
}

/// What the consumer delivers within a short wait, acknowledged.
async fn take(consumer: &PullConsumer) -> Vec<String> {
    let mut batch = consumer
        .fetch()
        .max_messages(100)
        .expires(Duration::from_millis(300))
        .messages()
        .await
        .unwrap();
    let mut taken = Vec::new();
    while let Some(message) = batch.next().await {
        let message = message.unwrap();
        taken.push(String::from_utf8(message.payload.to_vec()).unwrap());
        message.ack().await.unwrap();
    }
    taken
}

fn config(durable: &str, deliver_policy: DeliverPolicy) -> pull::Config {
    pull::Config {
        durable_name: Some(durable.into()),
        filter_subject: "events.merge".into(),
        ack_policy: AckPolicy::Explicit,
        deliver_policy,
        ..Default::default()
    }
}

// The incident behind “A durable consumer starts from now”: a consumer re-made with the server's
// default replayed a week of merges.
#[tokio::test]
async fn a_consumer_made_from_now_holds_none_of_the_past_and_keeps_its_place() {
    let server = super::server();
    let js = super::connect(&server).await.jetstream();
    history(&js, "EVENTS", RetentionPolicy::Limits).await;
    for n in 1..=3 {
        publish(&js, "events.merge", &format!("past {n}")).await;
    }

    // Even asked for everything, it is made from now.
    let (controller, ensured) =
        ensure_consumer_from_now(&js, "EVENTS", config("controller", DeliverPolicy::All))
            .await
            .unwrap();
    assert_eq!(ensured, Ensured::Made);
    let mut info = controller.clone();
    let info = info.info().await.unwrap();
    assert_eq!(info.config.deliver_policy, DeliverPolicy::New);
    assert_eq!(info.num_pending, 0, "none of the stream's past");

    publish(&js, "events.merge", "next").await;
    assert_eq!(
        take(&controller).await,
        ["next"],
        "does hold the next event"
    );

    // Asserted again, it keeps its place: only what came after is delivered.
    publish(&js, "events.merge", "after").await;
    let (again, ensured) =
        ensure_consumer_from_now(&js, "EVENTS", config("controller", DeliverPolicy::New))
            .await
            .unwrap();
    assert_eq!(ensured, Ensured::Kept);
    assert_eq!(take(&again).await, ["after"]);

    // What the fix prevents: the server's default replays all of it.
    let default = js
        .get_stream("EVENTS")
        .await
        .unwrap()
        .create_consumer(config("default", DeliverPolicy::All))
        .await
        .unwrap();
    assert_eq!(
        take(&default).await,
        ["past 1", "past 2", "past 3", "next", "after"]
    );
}

#[tokio::test]
async fn a_consumer_without_a_durable_name_is_refused() {
    let server = super::server();
    let js = super::connect(&server).await.jetstream();
    history(&js, "EVENTS", RetentionPolicy::Limits).await;
    let err = ensure_consumer_from_now(&js, "EVENTS", pull::Config::default())
        .await
        .unwrap_err();
    assert!(matches!(err, NatsError::ConsumerName { .. }), "{err}");
    assert!(err.to_string().contains("`EVENTS`"), "{err}");
}

/// The consumer is asked for directly (not through the stream's info first): a stream that is
/// not there is still named as the stream's error, and nothing is made.
#[tokio::test]
async fn a_consumer_on_a_stream_that_is_not_there_names_the_stream() {
    let server = super::server();
    let js = super::connect(&server).await.jetstream();
    let err = ensure_consumer_from_now(&js, "NO_SUCH", config("controller", DeliverPolicy::New))
        .await
        .unwrap_err();
    assert!(matches!(err, NatsError::Stream { .. }), "{err}");
    assert!(err.to_string().contains("`NO_SUCH`"), "{err}");
    assert!(js.get_stream("NO_SUCH").await.is_err(), "nothing was made");
}

#[tokio::test]
async fn consumer_reset_leaves_nothing_pending_and_keeps_every_other_setting() {
    let server = super::server();
    let js = super::connect(&server).await.jetstream();
    history(&js, "EVENTS", RetentionPolicy::Limits).await;
    // A stuck consumer as the incident behind “A durable consumer starts from now” found it:
    // delivering everything, one at a time.
    let stuck = js
        .get_stream("EVENTS")
        .await
        .unwrap()
        .create_consumer(pull::Config {
            description: Some("the controller's events".into()),
            ack_wait: Duration::from_secs(30),
            max_deliver: 5,
            max_ack_pending: 1,
            ..config("controller", DeliverPolicy::All)
        })
        .await
        .unwrap();
    for n in 1..=5 {
        publish(&js, "events.merge", &format!("old {n}")).await;
    }
    // One delivered and never acknowledged, four more waiting behind it.
    let mut held = stuck.fetch().max_messages(1).messages().await.unwrap();
    let _unacknowledged = held.next().await.unwrap().unwrap();

    let reset = consumer_reset(&js, "EVENTS", "controller").await.unwrap();
    assert_eq!(reset.before.num_pending, 4);
    assert_eq!(reset.before.num_ack_pending, 1);
    assert_eq!(reset.after.num_pending, 0, "nothing pending");
    assert_eq!(reset.after.num_ack_pending, 0, "nothing awaiting an ack");
    assert_eq!(reset.after.config.deliver_policy, DeliverPolicy::New);
    let mut expected = reset.before.config.clone();
    expected.deliver_policy = DeliverPolicy::New;
    assert_eq!(reset.after.config, expected, "every other setting kept");
    assert_eq!(reset.after.config.max_ack_pending, 1);
    assert_eq!(reset.after.config.filter_subject, "events.merge");

    // The server agrees, and the next event is delivered.
    let stream = js.get_stream("EVENTS").await.unwrap();
    let now = stream.consumer_info("controller").await.unwrap();
    assert_eq!(now.config, expected);
    assert_eq!(now.num_pending, 0);
    publish(&js, "events.merge", "new").await;
    let consumer: PullConsumer = stream.get_consumer("controller").await.unwrap();
    assert_eq!(take(&consumer).await, ["new"]);
}

#[tokio::test]
async fn a_work_queues_consumer_is_not_reset() {
    let server = super::server();
    let js = super::connect(&server).await.jetstream();
    history(&js, "BUILDS", RetentionPolicy::WorkQueue).await;
    js.get_stream("BUILDS")
        .await
        .unwrap()
        .create_consumer(pull::Config {
            durable_name: Some("builder".into()),
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .unwrap();
    publish(&js, "builds.request", "build agent").await;

    let err = consumer_reset(&js, "BUILDS", "builder").await.unwrap_err();
    assert!(matches!(err, NatsError::WorkQueue { .. }), "{err}");
    assert!(
        err.to_string().contains("`builder`") && err.to_string().contains("`BUILDS`"),
        "{err}"
    );
    // Untouched: the work is still there.
    let info = js
        .get_stream("BUILDS")
        .await
        .unwrap()
        .consumer_info("builder")
        .await
        .unwrap();
    assert_eq!(info.num_pending, 1);
}

#[tokio::test]
async fn resetting_a_consumer_that_is_not_there_names_it() {
    let server = super::server();
    let js = super::connect(&server).await.jetstream();
    history(&js, "EVENTS", RetentionPolicy::Limits).await;
    let err = consumer_reset(&js, "EVENTS", "nobody").await.unwrap_err();
    assert!(matches!(err, NatsError::Consumer { .. }), "{err}");
    assert!(err.to_string().contains("`nobody`"), "{err}");
    let err = consumer_reset(&js, "NOSTREAM", "nobody").await.unwrap_err();
    assert!(matches!(err, NatsError::Stream { .. }), "{err}");
}
