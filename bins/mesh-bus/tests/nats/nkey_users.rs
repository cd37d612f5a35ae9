//! NKeys over TLS (the rule “Secrets never leave their owner”): each node signs with a seed made on
//! its host; the server's users file holds public keys and permissions only. Against a real
//! nats-server serving TLS with test-made certificates: the users file parses and holds no secret;
//! a host signing with its own seed is its own node and no other; and the nine refusals measured on
//! a real fleet hold for a node's user over TLS.

use crate::pki::TestPki;
use crate::tls::tls_server;
use mesh_bus::grants::{
    permissions_in_config, users_config, users_on_passwords, BusUsers, NodeUser, UserCredential,
};
use mesh_bus::nats::Refusal;
use mesh_bus::{subjects, Bus, BusTls, NatsBus, NatsError, NatsOptions};
use mesh_test_support::nats_server::NatsServer;
use std::io::{BufRead as _, Write as _};
use std::time::Duration;
use tokio::sync::broadcast;

const WAIT: Duration = Duration::from_secs(10);

/// A user key pair: (seed, public key).
fn key() -> (String, String) {
    let pair = nkeys::KeyPair::new_user();
    (pair.seed().unwrap(), pair.public_key())
}

struct Keys {
    controller: (String, String),
    home: (String, String),
    laptop: (String, String),
}

fn keys() -> Keys {
    Keys {
        controller: key(),
        home: key(),
        laptop: key(),
    }
}

/// `home` granted the event subject `media.scan`, `laptop` nothing; everyone on an NKey.
fn users(keys: &Keys) -> BusUsers {
    BusUsers {
        controller: UserCredential::Nkey(keys.controller.1.clone()),
        nodes: vec![
            NodeUser {
                node: "home".into(),
                credential: UserCredential::Nkey(keys.home.1.clone()),
                buckets: vec![],
                subjects: vec!["media.scan".into()],
            },
            NodeUser {
                node: "laptop".into(),
                credential: UserCredential::Nkey(keys.laptop.1.clone()),
                buckets: vec![],
                subjects: vec![],
            },
        ],
    }
}

async fn connect(options: NatsOptions) -> NatsBus {
    NatsBus::connect(&options)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
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

#[test]
fn the_users_file_holds_public_keys_and_permissions_only() {
    let keys = keys();
    let text = users_config(&users(&keys)).unwrap();
    for secret in [&keys.controller.0, &keys.home.0, &keys.laptop.0] {
        assert!(
            !text.contains(secret.as_str()),
            "a seed is in the users file"
        );
    }
    assert!(!text.contains("password"), "{text}");
    // Every credential in it is a user public key, and each is the one of its user.
    let nkeys: Vec<&str> = text
        .lines()
        .filter_map(|line| line.trim().strip_prefix("nkey: "))
        .map(|key| key.trim_matches('"'))
        .collect();
    assert_eq!(nkeys.len(), 3, "{text}");
    assert!(nkeys
        .iter()
        .all(|key| mesh_bus::keys::is_user_public_key(key)));
    assert!(nkeys.contains(&keys.home.1.as_str()));
    // The mesh reads each node's permissions back by user.
    let read = permissions_in_config(&text);
    assert_eq!(
        read.keys().collect::<Vec<_>>(),
        ["node-home", "node-laptop"]
    );
    assert!(read["node-home"].publish.contains(&"media.scan".to_owned()));
    assert!(users_on_passwords(&users(&keys)).is_empty());

    // A home not yet enrolled is named as still on a password; a seed given for a key is
    // refused without being echoed.
    let mut mixed = users(&keys);
    mixed.nodes[1].credential = UserCredential::Password("laptop-secret".into());
    assert_eq!(users_on_passwords(&mixed), ["node-laptop"]);
    let mut wrong = users(&keys);
    wrong.nodes[0].credential = UserCredential::Nkey(keys.home.0.clone());
    let problems = users_config(&wrong).unwrap_err();
    let message = problems
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        message.contains("user `node-home`: its nkey is not"),
        "{message}"
    );
    assert!(!message.contains(&keys.home.0), "{message}");
}

#[tokio::test]
async fn a_host_signing_with_its_own_seed_cannot_connect_as_another_node() {
    let keys = keys();
    let pki = TestPki::new("bus");
    let server = tls_server(&pki, &users_config(&users(&keys)).unwrap(), false);
    let tls = BusTls::with_ca(&pki.ca_file);
    let controller = connect(
        NatsOptions::for_controller_nkey(server.url(), &keys.controller.0).with_tls(tls.clone()),
    )
    .await;

    // home's seed makes it home, whatever it calls itself: laptop's declarations and reports
    // are refused to it.
    let home = connect(
        NatsOptions::for_node_nkey(server.url(), "home", &keys.home.0).with_tls(tls.clone()),
    )
    .await;
    let mut refusals = home.refusals();
    let _spying = home
        .client()
        .subscribe(subjects::declaration("laptop"))
        .await
        .unwrap();
    refused(
        &mut refusals,
        Refusal::Subscribe {
            subject: "mesh.declaration.laptop".into(),
        },
    )
    .await;
    let mut reports = controller.subscribe(subjects::ALL_REPORTS).await.unwrap();
    home.publish(&subjects::report("home"), b"home's own".to_vec())
        .await
        .unwrap();
    let heard = crate::next_within(WAIT, &mut reports).await;
    assert_eq!(heard.subject, "mesh.report.home");

    // A seed no one enrolled is refused at connect.
    let stranger = key();
    let error = NatsBus::connect(
        &NatsOptions::for_node_nkey(server.url(), "laptop", &stranger.0).with_tls(tls.clone()),
    )
    .await
    .unwrap_err();
    assert!(matches!(error, NatsError::Connect { .. }), "{error}");
    assert!(!error.to_string().contains(&stranger.0), "{error}");

    // Claiming laptop's public key with a signature made by home's seed: refused. (Forged by
    // hand on a plain server with the same users: the signature check is the server's, TLS or
    // not.)
    let plain = NatsServer::start_with_config(&users_config(&users(&keys)).unwrap())
        .unwrap_or_else(|e| panic!("{e}"));
    let honest = raw_connect(&plain, &keys.home.1, &keys.home.0);
    assert!(
        honest.starts_with("PONG"),
        "home signing as home: {honest:?}"
    );
    let forged = raw_connect(&plain, &keys.laptop.1, &keys.home.0);
    assert!(
        forged.contains("Authorization Violation"),
        "home's seed claiming laptop's key: {forged:?}"
    );
}

/// Connects by hand claiming `public_key` and signing the server's nonce with `seed`; the
/// server's first answer line.
fn raw_connect(server: &NatsServer, public_key: &str, seed: &str) -> String {
    use base64::Engine as _;
    let stream = std::net::TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
    let mut info = String::new();
    reader.read_line(&mut info).unwrap();
    let info: serde_json::Value =
        serde_json::from_str(info.strip_prefix("INFO ").unwrap().trim()).unwrap();
    let nonce = info["nonce"]
        .as_str()
        .expect("an nkey server sends a nonce");
    let signature = nkeys::KeyPair::from_seed(seed)
        .unwrap()
        .sign(nonce.as_bytes())
        .unwrap();
    let connect = serde_json::json!({
        "nkey": public_key,
        "sig": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(signature),
        "verbose": false,
        "pedantic": false,
        "protocol": 1,
    });
    (&stream)
        .write_all(format!("CONNECT {connect}\r\nPING\r\n").as_bytes())
        .unwrap();
    let mut answer = String::new();
    reader.read_line(&mut answer).unwrap();
    answer
}

// The nine refusals measured on a real fleet ("Why"), connected as `node-home`
// signing with its seed over TLS: another node's declarations, publishing its report or a
// declaration, the records bucket, the declarations stream, every report, another node's
// inbox, the system account, the stream list.
#[tokio::test]
async fn the_nine_refusals_hold_for_a_nodes_user_over_tls() {
    let keys = keys();
    let pki = TestPki::new("bus");
    let server = tls_server(&pki, &users_config(&users(&keys)).unwrap(), false);
    let tls = BusTls::with_ca(&pki.ca_file);
    let controller = connect(
        NatsOptions::for_controller_nkey(server.url(), &keys.controller.0).with_tls(tls.clone()),
    )
    .await;
    mesh_bus::jetstream::ensure_streams(&controller.jetstream())
        .await
        .unwrap();
    let home = connect(
        NatsOptions::for_node_nkey(server.url(), "home", &keys.home.0).with_tls(tls.clone()),
    )
    .await;
    let mut refusals = home.refusals();
    let client = home.client();

    let subscriptions = [
        // 1. hearing another node's declarations
        "mesh.declaration.laptop",
        // 5. hearing every report
        "mesh.report.>",
        // 6. another node's inbox
        "_INBOX.node-laptop.>",
        // 7. the system account
        "$SYS.>",
    ];
    let mut held = Vec::new();
    for subject in subscriptions {
        held.push(client.subscribe(subject.to_owned()).await.unwrap());
        client.flush().await.unwrap();
        refused(
            &mut refusals,
            Refusal::Subscribe {
                subject: subject.into(),
            },
        )
        .await;
    }
    let publishes = [
        // 2. publishing another node's report
        "mesh.report.laptop".to_owned(),
        // 3. publishing a declaration
        "mesh.declaration.laptop".to_owned(),
        // 4. reading the records bucket
        format!(
            "$JS.API.STREAM.INFO.KV_{}",
            mesh_bus::subjects::RECORDS_BUCKET
        ),
        format!("$KV.{}.some-key", mesh_bus::subjects::RECORDS_BUCKET),
        // 8. reading the declarations stream
        format!(
            "$JS.API.STREAM.MSG.GET.{}",
            mesh_bus::subjects::DECLARATIONS_STREAM
        ),
        // 9. the stream list
        "$JS.API.STREAM.LIST".to_owned(),
        "$JS.API.STREAM.NAMES".to_owned(),
    ];
    for subject in publishes {
        client.publish(subject.clone(), "{}".into()).await.unwrap();
        client.flush().await.unwrap();
        refused(&mut refusals, Refusal::Publish { subject }).await;
    }

    // And what it may do still works on the same connection: its own report reaches the
    // controller.
    let mut reports = controller.subscribe(subjects::ALL_REPORTS).await.unwrap();
    home.publish(&subjects::report("home"), b"still here".to_vec())
        .await
        .unwrap();
    let heard = crate::next_within(WAIT, &mut reports).await;
    assert_eq!(
        (heard.subject.as_str(), heard.payload.as_slice()),
        ("mesh.report.home", b"still here".as_slice())
    );
}
