//! The sender against real HTTP servers started here, on loopback: the signature verifies, a
//! receiver answering 500 is tried again and then failing, a hung receiver delays neither the
//! caller nor another receiver, and no secret value reaches a body. `notify.toml` read, and
//! every problem in it named at once.

use super::*;
use hmac::{Hmac, Mac};
use mesh_plan::notify::{Notifier, Observation};
use mesh_plan::waves::progress::{FailedNode, WaveAction};
use mesh_test_support::wait::free_port;
use sha2::Sha256;
use std::path::Path;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};

/// A secret planted in the signing key: it must be in no body and no header but the HMAC.
const PLANTED: &str = "planted-secret-value-7f3a9c";

/// How long a test waits for what must happen (only so a failure ends; never a pass).
const LIMIT: Duration = Duration::from_secs(60);

/// A request a receiver heard.
#[derive(Debug)]
struct Heard {
    signature: Option<String>,
    body: String,
}

/// A real HTTP/1.1 server on a loopback port: it reports each request as it arrives, then
/// answers it with `status`, once `held` is false.
struct TestReceiver {
    url: String,
    heard: mpsc::UnboundedReceiver<Heard>,
    status: Arc<AtomicU16>,
    held: watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for TestReceiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl TestReceiver {
    async fn start(status: u16) -> TestReceiver {
        let port = free_port();
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| panic!("bind 127.0.0.1:{port}: {e}"));
        let (tell, heard) = mpsc::unbounded_channel();
        let status = Arc::new(AtomicU16::new(status));
        let (held, holding) = watch::channel(false);
        let answer = status.clone();
        let server = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, tell.clone(), answer.clone(), holding.clone()));
            }
        });
        TestReceiver {
            url: format!("http://127.0.0.1:{port}/hooks/T000/B000/url-token-4242"),
            heard,
            status,
            held,
            server,
        }
    }

    async fn next(&mut self) -> Heard {
        tokio::time::timeout(LIMIT, self.heard.recv())
            .await
            .expect("a request within the limit")
            .expect("the server runs")
    }

    fn nothing_more(&mut self) -> bool {
        self.heard.try_recv().is_err()
    }
}

async fn serve(
    stream: tokio::net::TcpStream,
    tell: mpsc::UnboundedSender<Heard>,
    status: Arc<AtomicU16>,
    mut holding: watch::Receiver<bool>,
) {
    let mut stream = BufReader::new(stream);
    loop {
        let (mut length, mut signature) = (0, None);
        let mut line = String::new();
        if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        loop {
            line.clear();
            if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').unwrap_or((header, ""));
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().unwrap_or(0),
                "x-mesh-signature" => signature = Some(value.trim().to_owned()),
                _ => {}
            }
        }
        let mut body = vec![0; length];
        if stream.read_exact(&mut body).await.is_err() {
            return;
        }
        let body = String::from_utf8(body).expect("a UTF-8 body");
        let _ = tell.send(Heard { signature, body });
        if holding.wait_for(|held| !held).await.is_err() {
            return;
        }
        let code = status.load(Ordering::SeqCst);
        let answer = format!("HTTP/1.1 {code} X\r\ncontent-length: 0\r\n\r\n");
        if stream.get_mut().write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// A home with `notify.toml` written from `text`, and the key file `hook.key` (0600).
fn home_with(text: &str) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    mesh_store::secret::write_secret(&home.path().join("hook.key"), PLANTED.as_bytes()).unwrap();
    std::fs::write(home.path().join(NOTIFY_FILE), text).unwrap();
    home
}

fn start(home: &Path, options: SendOptions) -> Notifications {
    let config = NotifyConfig::read(home).unwrap().expect("notify.toml");
    Notifications::start(config, options).unwrap()
}

fn quick() -> SendOptions {
    SendOptions {
        queue: 16,
        attempt_timeout: Duration::from_secs(30),
        first_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(4),
        give_up_after: Duration::from_secs(600),
        max_attempts: 3,
    }
}

fn budget_stop(notifier: &mut Notifier, plan: &str) -> Vec<Notice> {
    let failed = (1..=5)
        .map(|n| FailedNode {
            node: format!("n{n}"),
            reason: "unit web.service failed to start".to_owned(),
        })
        .collect();
    notifier.observe(
        Observation::Wave {
            plan: plan.to_owned(),
            module: "web".to_owned(),
            action: WaveAction::BudgetExceeded {
                wave: 0,
                name: "canary".to_owned(),
                budget: mesh_model::waves::Budget {
                    failed: mesh_model::waves::Share::parse("10%").unwrap(),
                    min: 1,
                },
                answered: 5,
                failed,
            },
        },
        1_765_155_600,
    )
}

fn started(notifier: &mut Notifier, plan: &str) -> Vec<Notice> {
    notifier.observe(
        Observation::PlanStarted {
            plan: plan.to_owned(),
            repository: "fleet".to_owned(),
            commit: "0123456789abcdef".to_owned(),
            modules: vec!["web".to_owned()],
            rollback: false,
        },
        1_765_155_600,
    )
}

fn verifies(key: &[u8], heard: &Heard) -> bool {
    let Some(hex_mac) = heard
        .signature
        .as_deref()
        .and_then(|s| s.strip_prefix("sha256="))
    else {
        return false;
    };
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap();
    mac.update(heard.body.as_bytes());
    hex::decode(hex_mac).is_ok_and(|bytes| mac.verify_slice(&bytes).is_ok())
}

/// The issue's case: a rollout stopped by its budget over 5 failing nodes sends one
/// notification to each receiver, with a valid signature.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_stop_is_one_signed_notification_per_receiver_and_the_signature_verifies() {
    let mut hook = TestReceiver::start(200).await;
    let mut chat = TestReceiver::start(200).await;
    let home = home_with(&format!(
        r#"
        status-url = "https://mesh.example.net/"
        [[notify]]
        name = "ops-hook"
        url = "{}"
        kind = "webhook"
        secret-file = "hook.key"
        [[notify]]
        url = "{}"
        kind = "slack"
        severity = "critical"
        "#,
        hook.url, chat.url
    ));
    let notifications = start(home.path(), quick());
    let notices = budget_stop(&mut Notifier::new(), "plan-7");
    assert_eq!(notices.len(), 1);
    notifications.send(&notices, &BTreeMap::new());

    let heard = hook.next().await;
    assert!(verifies(PLANTED.as_bytes(), &heard), "{heard:?}");
    assert!(!verifies(b"another key", &heard));
    let body: serde_json::Value = serde_json::from_str(&heard.body).unwrap();
    assert_eq!(body["type"], "dev.cdevents.incident.detected");
    assert_eq!(body["subject"]["failed"].as_array().unwrap().len(), 5);

    let said = chat.next().await;
    assert_eq!(said.signature, None);
    let text: serde_json::Value = serde_json::from_str(&said.body).unwrap();
    let text = text["text"].as_str().unwrap();
    assert!(text.contains("n1, n2, n3, n4, n5"), "{text}");
    assert!(text.ends_with("https://mesh.example.net/") && !text.contains('\n'));

    for body in [&heard.body, &said.body] {
        assert!(
            !body.contains(PLANTED),
            "the planted secret in a body: {body}"
        );
    }
    assert!(hook.nothing_more() && chat.nothing_more());
    assert_eq!(notifications.problems(), vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_answering_500_is_tried_again_then_failing_and_well_again_once_it_takes_one() {
    let mut hook = TestReceiver::start(500).await;
    let home = home_with(&format!(
        "[[notify]]\nname = \"ops-hook\"\nurl = \"{}\"\nkind = \"webhook\"\n",
        hook.url
    ));
    let notifications = start(home.path(), quick());
    let mut notifier = Notifier::new();
    notifications.send(&started(&mut notifier, "plan-7"), &BTreeMap::new());

    // Every attempt reaches the receiver before it answers; the third is the last.
    let first = hook.next().await;
    for _ in 1..3 {
        assert_eq!(
            hook.next().await.body,
            first.body,
            "the same body, tried again"
        );
    }
    let problem = wait_until(|| notifications.problems().into_iter().next()).await;
    assert_eq!(problem.receiver, "ops-hook");
    assert_eq!((problem.attempts, problem.given_up), (3, 1));
    assert_eq!(
        problem.last_error,
        "answered 500 Internal Server Error".to_owned()
    );
    assert!(
        !problem.what().contains("url-token-4242"),
        "{}",
        problem.what()
    );
    assert!(hook.nothing_more(), "no fourth attempt");

    hook.status.store(200, Ordering::SeqCst);
    notifications.send(&budget_stop(&mut notifier, "plan-7"), &BTreeMap::new());
    let _ = hook.next().await;
    wait_until(|| notifications.problems().is_empty().then_some(())).await;
}

/// A receiver that takes a request and never answers while `held` (a condition the test
/// controls): the caller's sends all return, the other receiver gets every notice, and the
/// hung receiver's queue drops its oldest once full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_receiver_delays_neither_the_caller_nor_another_receiver() {
    let mut hung = TestReceiver::start(200).await;
    let mut well = TestReceiver::start(200).await;
    hung.held.send_replace(true);
    let home = home_with(&format!(
        "[[notify]]\nname = \"hung\"\nurl = \"{}\"\nkind = \"webhook\"\n\
         [[notify]]\nname = \"well\"\nurl = \"{}\"\nkind = \"slack\"\n",
        hung.url, well.url
    ));
    // An attempt times out only long after the test is done: the hold is the test's alone.
    let options = SendOptions {
        queue: 4,
        attempt_timeout: Duration::from_secs(3600),
        ..quick()
    };
    let notifications = start(home.path(), options);
    let mut notifier = Notifier::new();
    notifications.send(&started(&mut notifier, "plan-0"), &BTreeMap::new());
    let _held_request = hung.next().await;

    // The hung receiver now holds a request unanswered. Three more sends return, and the other
    // receiver takes all four.
    for plan in 1..=3 {
        notifications.send(
            &started(&mut notifier, &format!("plan-{plan}")),
            &BTreeMap::new(),
        );
    }
    for plan in 0..=3 {
        let said = well.next().await;
        assert!(
            said.body.contains(&format!("plan-{plan} started")),
            "{said:?}"
        );
    }
    // Seven more return too: the hung receiver's queue holds 4, so the 6 oldest of its 10
    // waiting were dropped and counted.
    for plan in 4..=10 {
        notifications.send(
            &started(&mut notifier, &format!("plan-{plan}")),
            &BTreeMap::new(),
        );
    }
    assert!(*hung.held.borrow(), "the receiver is still held");
    assert!(hung.nothing_more(), "it heard nothing more while held");
    assert_eq!(notifications.dropped().get("hung"), Some(&6));

    hung.held.send_replace(false);
    for plan in 7..=10 {
        let heard = hung.next().await;
        assert!(
            heard.body.contains(&format!("\"plan-{plan}/started\"")),
            "{heard:?}"
        );
    }
    assert_eq!(notifications.problems(), vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_value_is_in_any_body_of_any_kind_of_notice() {
    let mut hook = TestReceiver::start(200).await;
    let mut chat = TestReceiver::start(200).await;
    let home = home_with(&format!(
        "[[notify]]\nurl = \"{}\"\nkind = \"webhook\"\nsecret-file = \"hook.key\"\n\
         [[notify]]\nurl = \"{}\"\nkind = \"slack\"\nsecret-file = \"hook.key\"\n",
        hook.url, chat.url
    ));
    let notifications = start(home.path(), quick());
    let mut notifier = Notifier::new();
    let mut notices = started(&mut notifier, "plan-7");
    notices.extend(budget_stop(&mut notifier, "plan-7"));
    for observation in [
        Observation::Nodes {
            failing: vec![FailedNode {
                node: "n1".to_owned(),
                reason: "unit failed".to_owned(),
            }],
        },
        Observation::Nodes { failing: vec![] },
        Observation::Daemon {
            silent_since: Some(1_765_155_000),
        },
        Observation::Daemon { silent_since: None },
    ] {
        notices.extend(notifier.observe(observation, 1_765_155_700));
    }
    assert_eq!(notices.len(), 6);
    notifications.send(&notices, &BTreeMap::new());
    for receiver in [&mut hook, &mut chat] {
        for _ in 0..notices.len() {
            let heard = receiver.next().await;
            assert!(verifies(PLANTED.as_bytes(), &heard));
            assert!(!heard.body.contains(PLANTED), "{}", heard.body);
            assert!(!heard.signature.unwrap_or_default().contains(PLANTED));
        }
    }
}

#[test]
fn notify_toml_names_every_wrong_entry_at_once() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("open.key"), "k").unwrap();
    std::fs::set_permissions(
        home.path().join("open.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let text = r#"
        [[notify]]
        url = "https://hooks.example.net/T/B/token"
        kind = "pager"
        severity = "loud"
        [[notify]]
        name = "ops"
        url = "ftp://example.net/"
        kind = "webhook"
        select = "role="
        secret-file = "open.key"
        [[notify]]
        url = "https://chat.example.net/hooks/abc"
        kind = "slack"
        secret-file = "missing.key"
    "#;
    let path = home.path().join(NOTIFY_FILE);
    let e = NotifyConfig::parse(text, home.path(), &path).unwrap_err();
    let NotifyConfigError::Invalid { problems, .. } = e else {
        panic!("{e}");
    };
    let problems = problems
        .join("\n")
        .replace(&home.path().display().to_string(), "HOME");
    insta::assert_snapshot!(problems);
    assert!(!problems.contains("token"), "a URL's token in a problem");
}

#[test]
fn notify_toml_read_gives_each_receiver_its_filter_and_key_and_none_without_the_file() {
    let empty = tempfile::tempdir().unwrap();
    assert!(NotifyConfig::read(empty.path()).unwrap().is_none());
    let home = home_with(
        r#"
        source = "mesh/prod"
        [[notify]]
        url = "https://hooks.example.net/a"
        kind = "webhook"
        secret-file = "hook.key"
        severity = "warning"
        select = "role=edge"
        "#,
    );
    let config = NotifyConfig::read(home.path()).unwrap().unwrap();
    assert_eq!(config.source, "mesh/prod");
    let receiver = &config.receivers[0];
    assert_eq!(receiver.name, "notify[0] (hooks.example.net)");
    assert_eq!(receiver.kind, ReceiverKind::Webhook);
    assert_eq!(
        receiver.key.as_deref().map(Vec::as_slice),
        Some(PLANTED.as_bytes())
    );
    assert_eq!(
        receiver.filter.severity,
        Some(mesh_plan::notify::Severity::Warning)
    );
    let debug = format!("{config:?}");
    assert!(!debug.contains(PLANTED) && !debug.contains("/a"), "{debug}");
}

/// Waits until `check` gives a value (bounded only so a failure ends).
async fn wait_until<T>(mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never within {LIMIT:?}"
        );
        // Only paces the looks at the condition above (the sender's own state, which tells
        // no one when it changes); the deadline bounds a failure, nothing is asserted on time.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
