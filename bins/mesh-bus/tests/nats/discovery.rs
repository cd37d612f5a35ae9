//! Discovery (the rule “Discovery waits for everyone who said they are there”): a late INFO is
//! waited for, a runtime that never says what it serves is named.

use futures_util::StreamExt;
use mesh_bus::discovery::{
    discover, discover_naming_unreadable, serve_discovery, RuntimeAnnouncement, HOST_SERVICE,
    OLD_WINDOW,
};
use std::time::Duration;

/// A runtime written by hand: answers PING at once and INFO after `info_delay` (never, if
/// `None`), in the shapes the NATS service API uses.
async fn hand_made_runtime(
    client: async_nats::Client,
    id: &'static str,
    info_delay: Option<Duration>,
) {
    let mut pings = client.subscribe("$SRV.PING").await.unwrap();
    let mut infos = client.subscribe("$SRV.INFO.>").await.unwrap();
    mesh_bus::nats::round_trip(&client).await.unwrap();
    let metadata = serde_json::json!({"node": id, "modules": "slack,media"});
    tokio::spawn(async move {
        loop {
            tokio::select! {
                Some(ping) = pings.next() => {
                    let pong = serde_json::json!({
                        "type": "io.nats.micro.v1.ping_response",
                        "name": HOST_SERVICE, "id": id, "version": "0.1.0", "metadata": metadata,
                    });
                    let reply = ping.reply.unwrap();
                    client.publish(reply, pong.to_string().into()).await.unwrap();
                    client.flush().await.unwrap();
                }
                Some(info) = infos.next() => {
                    let Some(delay) = info_delay else { continue };
                    if info.subject.as_str() != format!("$SRV.INFO.{HOST_SERVICE}.{id}") {
                        continue;
                    }
                    let answer = serde_json::json!({
                        "type": "io.nats.micro.v1.info_response",
                        "name": HOST_SERVICE, "id": id, "version": "0.1.0",
                        "description": "slow", "metadata": metadata,
                        "endpoints": [],
                        // A large answer, as the laptop's 164 kB was.
                        "padding": "x".repeat(100_000),
                    });
                    let client = client.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        let reply = info.reply.unwrap();
                        client.publish(reply, answer.to_string().into()).await.unwrap();
                        client.flush().await.unwrap();
                    });
                }
                else => break,
            }
        }
    });
}

#[tokio::test]
async fn a_runtime_that_answers_info_after_a_second_is_found() {
    let server = super::server();
    let controller = super::connect(&server).await;
    let host = super::connect(&server).await;
    let served = serve_discovery(
        host.client(),
        &RuntimeAnnouncement {
            service: HOST_SERVICE.into(),
            node: "home".into(),
            version: "0.1.0".into(),
            modules: vec!["media".into(), "agent".into()],
        },
    )
    .await
    .unwrap();
    let slow = super::connect(&server).await;
    hand_made_runtime(
        slow.client().clone(),
        "laptop",
        Some(Duration::from_secs(1)),
    )
    .await;

    let found = discover(controller.client(), OLD_WINDOW).await.unwrap();
    assert!(found.unheard.is_empty(), "{:?}", found.unheard);
    assert_eq!(found.runtimes.len(), 2, "{found:?}");
    let home = &found.runtimes[0];
    assert_eq!(home.node.as_deref(), Some("home"));
    assert_eq!(home.id, served.id());
    assert_eq!(home.modules, ["agent", "media"]);
    assert!(home.answer_size > 0);
    let laptop = &found.runtimes[1];
    assert_eq!(laptop.node.as_deref(), Some("laptop"));
    assert_eq!(laptop.modules, ["media", "slack"]);
    assert!(
        laptop.answer_time >= Duration::from_secs(1),
        "{:?}",
        laptop.answer_time
    );
    assert!(laptop.answer_time > OLD_WINDOW, "found past the old window");
    assert!(laptop.answer_size > 100_000);
    assert!(laptop.ping_time < laptop.answer_time);
    // Once everyone is heard, discovery stops waiting.
    assert!(found.waited < Duration::from_secs(3), "{:?}", found.waited);
    served.stop();
}

#[tokio::test]
async fn a_runtime_that_answers_ping_and_never_info_is_named() {
    let server = super::server();
    let controller = super::connect(&server).await;
    let mute = super::connect(&server).await;
    hand_made_runtime(mute.client().clone(), "workstation", None).await;

    let found = discover(controller.client(), Duration::from_millis(100))
        .await
        .unwrap();
    assert!(found.runtimes.is_empty(), "{found:?}");
    assert_eq!(found.unheard.len(), 1, "{found:?}");
    assert_eq!(found.unheard[0].id, "workstation");
    assert_eq!(found.unheard[0].node.as_deref(), Some("workstation"));
    assert_eq!(found.unheard[0].service, HOST_SERVICE);
    assert!(
        found.waited >= Duration::from_secs(5),
        "waited up to the limit"
    );
}

#[tokio::test]
async fn a_quiet_mesh_costs_only_the_window() {
    let server = super::server();
    let controller = super::connect(&server).await;
    let found = discover(controller.client(), Duration::from_millis(200))
        .await
        .unwrap();
    assert!(found.runtimes.is_empty() && found.unheard.is_empty());
    assert!(found.waited >= Duration::from_millis(200));
    assert!(found.waited < Duration::from_secs(1), "{:?}", found.waited);
}

// The incident behind “Discovery waits for everyone who said they are there”: a restarted runtime
// answers under a new instance, and is not reported as missed.
#[tokio::test]
async fn a_restarted_runtime_is_heard_under_its_new_instance() {
    let server = super::server();
    let controller = super::connect(&server).await;
    let host = super::connect(&server).await;
    let announcement = RuntimeAnnouncement {
        service: HOST_SERVICE.into(),
        node: "home".into(),
        version: "0.1.0".into(),
        modules: vec!["media".into()],
    };
    let first = serve_discovery(host.client(), &announcement).await.unwrap();
    let first_id = first.id().to_owned();
    first.stop();
    let second = serve_discovery(host.client(), &announcement).await.unwrap();
    assert_ne!(second.id(), first_id);

    let found = discover(controller.client(), Duration::from_millis(200))
        .await
        .unwrap();
    assert!(found.unheard.is_empty(), "{found:?}");
    assert_eq!(found.runtimes.len(), 1, "{found:?}");
    assert_eq!(found.runtimes[0].id, second.id());
}

/// A stand-in that answers PING with `ping` (raw bytes), and INFO addressed to instance `id`
/// with `info`, whatever they are.
async fn garbage_runtime(
    client: async_nats::Client,
    id: &'static str,
    ping: &'static str,
    info: &'static str,
) {
    let mut pings = client.subscribe("$SRV.PING").await.unwrap();
    let mut infos = client.subscribe("$SRV.INFO.>").await.unwrap();
    mesh_bus::nats::round_trip(&client).await.unwrap();
    tokio::spawn(async move {
        loop {
            let (asked, answer) = tokio::select! {
                Some(asked) = pings.next() => (asked, ping),
                Some(asked) = infos.next() => (asked, info),
                else => break,
            };
            if asked.subject.starts_with("$SRV.INFO") && !asked.subject.ends_with(&format!(".{id}"))
            {
                continue;
            }
            let reply = asked.reply.unwrap();
            client.publish(reply, answer.into()).await.unwrap();
            client.flush().await.unwrap();
        }
    });
}

// The rule “Discovery waits for everyone who said they are there”: an answer that could not be read
// was skipped with a log line; a runtime answering PING with garbage vanished from discovery,
// unnamed.
#[tokio::test]
async fn an_unreadable_discovery_answer_is_named_with_its_instance_and_why() {
    let server = super::server();
    let controller = super::connect(&server).await;
    let host = super::connect(&server).await;
    let served = serve_discovery(
        host.client(),
        &RuntimeAnnouncement {
            service: HOST_SERVICE.into(),
            node: "home".into(),
            version: "0.1.0".into(),
            modules: vec!["media".into()],
        },
    )
    .await
    .unwrap();
    let garbled_ping = super::connect(&server).await;
    garbage_runtime(garbled_ping.client().clone(), "none", "PONG?", "").await;
    let garbled_info = super::connect(&server).await;
    garbage_runtime(
        garbled_info.client().clone(),
        "laptop1",
        r#"{"type":"io.nats.micro.v1.ping_response","name":"mesh-host","id":"laptop1","version":"0.1.0","metadata":{"node":"laptop"}}"#,
        "{\"name\": 7",
    )
    .await;

    // The window only bounds a failure: every stand-in answers PING at once.
    let found = discover_naming_unreadable(controller.client(), Duration::from_secs(2))
        .await
        .unwrap();
    let discovery = &found.discovery;
    assert_eq!(discovery.runtimes.len(), 1, "{found:#?}");
    assert_eq!(discovery.runtimes[0].node.as_deref(), Some("home"));
    // What the garbled INFO's runtime serves is not known: it is unheard, and named.
    assert_eq!(discovery.unheard.len(), 1, "{found:#?}");
    assert_eq!(discovery.unheard[0].id, "laptop1");
    let mut unreadable = found.unreadable.clone();
    unreadable.sort_by(|a, b| a.asked.cmp(&b.asked));
    assert_eq!(unreadable.len(), 2, "{found:#?}");
    let ping = &unreadable[1];
    assert_eq!(ping.asked, "$SRV.PING");
    assert_eq!((ping.id.as_deref(), ping.answer.as_str()), (None, "PONG?"));
    assert!(ping.error.contains("expected value"), "{ping:?}");
    let info = &unreadable[0];
    assert_eq!(info.asked, "$SRV.INFO.mesh-host.laptop1");
    assert_eq!(info.id.as_deref(), Some("laptop1"));
    assert_eq!(info.node.as_deref(), Some("laptop"));
    assert_eq!(info.service.as_deref(), Some(HOST_SERVICE));
    assert!(info.error.contains("invalid type"), "{info:?}");
    served.stop();
}

// The rule “Discovery waits for everyone who said they are there”: a PING answer that came after
// the window was never read, so an unreadable one vanished unnamed. A stand-in answers PING at once
// (it is asked INFO), then, only once the window is surely over (later than the window after it
// heard PING, which was sent after discovery began), answers PING again with garbage that names who
// sent it, and only then answers INFO: discovery is still waiting for that INFO when the garbage
// comes.
#[tokio::test]
async fn an_unreadable_ping_answer_after_the_window_is_named_with_who_sent_it() {
    let window = Duration::from_secs(2);
    let server = super::server();
    let controller = super::connect(&server).await;
    let late = super::connect(&server).await;
    let client = late.client().clone();
    let mut pings = client.subscribe("$SRV.PING").await.unwrap();
    let mut infos = client.subscribe("$SRV.INFO.mesh-host.late1").await.unwrap();
    mesh_bus::nats::round_trip(&client).await.unwrap();
    let stand_in = tokio::spawn(async move {
        let ping = pings.next().await.unwrap();
        let heard_at = tokio::time::Instant::now();
        let ping_reply = ping.reply.unwrap();
        client
            .publish(
                ping_reply.clone(),
                r#"{"type":"io.nats.micro.v1.ping_response","name":"mesh-host","id":"late1","version":"0.1.0","metadata":{"node":"late"}}"#.into(),
            )
            .await
            .unwrap();
        client.flush().await.unwrap();
        let info = infos.next().await.unwrap();
        // Time itself is what this test is about: an answer that arrives after discovery's
        // window must still be named. The sleep only puts the second answer past the window;
        // nothing is asserted on how long anything took.
        tokio::time::sleep_until(heard_at + window + Duration::from_millis(200)).await;
        client
            .publish(
                ping_reply,
                r#"{"name":"mesh-host","id":"late2","version":7,"metadata":{"node":"laptop"}}"#
                    .into(),
            )
            .await
            .unwrap();
        client.flush().await.unwrap();
        client
            .publish(
                info.reply.unwrap(),
                r#"{"type":"io.nats.micro.v1.info_response","name":"mesh-host","id":"late1","version":"0.1.0","metadata":{"node":"late"},"endpoints":[]}"#.into(),
            )
            .await
            .unwrap();
        client.flush().await.unwrap();
    });
    let found = discover_naming_unreadable(controller.client(), window)
        .await
        .unwrap();
    stand_in.await.unwrap();
    assert!(
        found.discovery.waited > window,
        "the garbage came after the window: {found:#?}"
    );
    assert_eq!(found.unreadable.len(), 1, "{found:#?}");
    let garbage = &found.unreadable[0];
    assert_eq!(garbage.asked, "$SRV.PING");
    assert_eq!(
        (
            garbage.service.as_deref(),
            garbage.id.as_deref(),
            garbage.node.as_deref()
        ),
        (Some("mesh-host"), Some("late2"), Some("laptop")),
        "who sent it, as far as it says: {garbage:?}"
    );
    assert!(garbage.error.contains("invalid type"), "{garbage:?}");
}
