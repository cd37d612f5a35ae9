//! Proving each node's permissions in force on a real server (the rule “Grants before code”): a
//! change of permissions alone — the same users, a bucket granted, a subject taken away — is not
//! proven until the server has reloaded it, and the proof stores nothing.

use super::home_and_laptop;
use mesh_bus::grants::{
    authorization_config, node_permissions, permissions_in_config, BusAuthorization, Permissions,
};
use mesh_bus::jetstream::ensure_bucket;
use mesh_bus::probe::{prove_permissions, Unproven};
use mesh_bus::subjects::REPORTS_STREAM;
use mesh_bus::NatsOptions;
use mesh_test_support::nats_server::{NatsServer, USERS_FILE};
use std::time::Duration;

fn permissions(authorization: &BusAuthorization, node: &str) -> Permissions {
    node_permissions(
        authorization
            .nodes
            .iter()
            .find(|grants| grants.node == node)
            .expect("the node is in the authorization"),
    )
}

fn within(wait: Duration) -> tokio::time::Instant {
    tokio::time::Instant::now() + wait
}

fn said(unproven: &[Unproven]) -> String {
    unproven
        .iter()
        .map(|u| u.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

// The incident behind “Grants before code”: a module newly granted a state bucket was sent before
// the server had its grant. The same users, new permissions: not proven until the server reloads
// them.
#[tokio::test]
async fn a_permissions_only_change_is_proven_only_once_the_server_reloaded_it() {
    let before = home_and_laptop(&["agent"], &["media.scan", "media.done"]);
    let after = home_and_laptop(&["agent", "media"], &["media.scan"]);
    let config = authorization_config(&before).unwrap();
    let (server, controller) = super::secured(&config).await;
    let js = controller.jetstream();
    for bucket in ["agent", "media"] {
        ensure_bucket(&js, bucket).await.unwrap();
    }

    // What the server was started with is in force.
    for node in ["home", "laptop"] {
        prove_permissions(
            &super::as_node(&server, node),
            &permissions(&before, node),
            None,
            within(Duration::from_secs(10)),
        )
        .await
        .unwrap_or_else(|unproven| panic!("{node}: {}", said(&unproven)));
    }

    // The users file is rewritten — the same users — and the server not yet told.
    let granted = authorization_config(&after).unwrap();
    assert_eq!(
        permissions_in_config(&granted).keys().collect::<Vec<_>>(),
        permissions_in_config(&config).keys().collect::<Vec<_>>(),
        "the same users"
    );
    std::fs::write(server.dir().join(USERS_FILE), &granted).unwrap();
    // The proof is tried again until its deadline and then says what the last attempt found:
    // a deadline long enough for every check to answer on a busy machine (with 1 s, one once
    // went unanswered and the refusals differed from the snapshot).
    let unproven = prove_permissions(
        &super::as_node(&server, "home"),
        &permissions(&after, "home"),
        Some(&permissions(&before, "home")),
        within(Duration::from_secs(5)),
    )
    .await
    .expect_err("the server has not reloaded: `media` is not granted, `media.done` not taken");
    // Every permission of the new bucket is named refused, `media.done` named still allowed;
    // nothing else.
    insta::assert_snapshot!(said(&unproven));
    // laptop's permissions did not change: proven as they are.
    prove_permissions(
        &super::as_node(&server, "laptop"),
        &permissions(&after, "laptop"),
        Some(&permissions(&before, "laptop")),
        within(Duration::from_secs(10)),
    )
    .await
    .unwrap_or_else(|unproven| panic!("laptop: {}", said(&unproven)));

    // Reloaded, the new permissions are proven (tried again while the server reloads).
    server.reload(&granted).unwrap();
    for node in ["home", "laptop"] {
        prove_permissions(
            &super::as_node(&server, node),
            &permissions(&after, node),
            Some(&permissions(&before, node)),
            within(Duration::from_secs(10)),
        )
        .await
        .unwrap_or_else(|unproven| panic!("{node}: {}", said(&unproven)));
    }

    // The proofs stored nothing: no key in the buckets, no report.
    for stream in ["KV_agent", "KV_media", REPORTS_STREAM] {
        let mut stream = js.get_stream(stream).await.unwrap();
        let info = stream.info().await.unwrap();
        assert_eq!(
            info.state.messages, 0,
            "{} holds a probe's message",
            info.config.name
        );
    }
}

#[tokio::test]
async fn a_node_that_cannot_log_in_is_named() {
    let config = authorization_config(&home_and_laptop(&[], &[])).unwrap();
    let server = NatsServer::start_with_config(&config).unwrap_or_else(|e| panic!("{e}"));
    let wrong = NatsOptions::for_node(server.url(), "home", "wrong");
    let unproven = prove_permissions(
        &wrong,
        &permissions(&home_and_laptop(&[], &[]), "home"),
        None,
        within(Duration::from_secs(5)),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&unproven[..], [Unproven::Login { user, .. }] if user == "node-home"),
        "{unproven:?}"
    );
}

/// Every log line written while it is held, at every level, as text without colour.
struct CapturedLog(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for CapturedLog {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// The probe's refusals — a permission taken away is refused on purpose — were logged
// as ERROR (`the nats server refused an operation`) during a push that succeeded.
#[tokio::test]
async fn a_proof_that_holds_logs_its_expected_refusals_below_error() {
    let authorization = home_and_laptop(&["agent"], &["media.scan"]);
    let before = home_and_laptop(&["agent"], &["media.scan", "media.done"]);
    let (server, controller) = super::secured(&authorization_config(&authorization).unwrap()).await;
    ensure_bucket(&controller.jetstream(), "agent")
        .await
        .unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let writer = std::sync::Arc::clone(&log);
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || CapturedLog(std::sync::Arc::clone(&writer)))
        .finish();
    // This test runs on one thread (tokio's current-thread runtime): the connection's tasks log
    // here too.
    let _guard = tracing::subscriber::set_default(subscriber);
    // tracing caches each log line's interest for the whole process, the first time any thread
    // reaches it. While one dispatcher alone is registered, that interest is asked of the
    // reaching thread's own subscriber: a sibling test's thread, with none, would cache
    // "never" for the probe's log line and this capture would hear nothing (it failed so once
    // in CI). With a second dispatcher alive, tracing asks every live one, this capture among
    // them.
    let _second = tracing::Dispatch::new(tracing_subscriber::registry());
    prove_permissions(
        &super::as_node(&server, "home"),
        &permissions(&authorization, "home"),
        Some(&permissions(&before, "home")),
        within(Duration::from_secs(10)),
    )
    .await
    .unwrap_or_else(|unproven| panic!("{}", said(&unproven)));
    let text = String::from_utf8(log.lock().unwrap().clone()).unwrap();
    assert!(
        text.contains("refused an operation, as expected"),
        "the refusal is still said, below error:\n{text}"
    );
    assert!(
        !text
            .lines()
            .any(|line| line.split_whitespace().nth(1) == Some("ERROR")),
        "an ERROR during a proof that held:\n{text}"
    );
}

// A quiet bus log: nats-server logs every refusal as an error, so a proof of permissions granted
// (nothing taken away) asks for none — an operator reads every `[ERR]` in the bus's log as one.
// Run on both servers (Debian's 2.9 by default, `MESH_NATS_SERVER` for the current one).
// Known: 2.10 and later still log a `[WRN] Invalid JetStream request` for each probe of a
// JetStream API permission (a state bucket's), whose payload is not JSON on purpose so that no
// API acts on it; those are warnings, not errors, and are left for later.
#[tokio::test]
async fn a_proof_of_permissions_granted_leaves_no_error_in_the_servers_log() {
    let authorization = home_and_laptop(&["agent"], &["media.scan"]);
    let (server, controller) = super::secured(&authorization_config(&authorization).unwrap()).await;
    ensure_bucket(&controller.jetstream(), "agent")
        .await
        .unwrap();
    let before = server.log().len();
    prove_permissions(
        &super::as_node(&server, "home"),
        &permissions(&authorization, "home"),
        None,
        within(Duration::from_secs(10)),
    )
    .await
    .unwrap_or_else(|unproven| panic!("{}", said(&unproven)));
    let log = server.log();
    let complaints: Vec<&str> = log[before..]
        .lines()
        .filter(|line| line.contains("[ERR]"))
        .collect();
    assert!(
        complaints.is_empty(),
        "the proof left errors in nats-server {}'s log:\n{}",
        server.version(),
        complaints.join("\n")
    );
}
