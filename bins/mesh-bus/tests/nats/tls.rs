//! The bus over TLS: a real nats-server serving TLS only, with a CA and certificates
//! made by the test. A client verifying the server against the CA connects; a plain client is
//! refused; a server another CA signed, or one that does not offer TLS, is refused with an
//! error saying which; with mTLS a client without a certificate is refused.

use crate::pki::{run_recipe, TestPki};
use mesh_bus::{Bus, BusTls, ClientCertificate, NatsBus, NatsError, NatsOptions};
use mesh_test_support::nats_server::{NatsServer, ServerTls};
use std::io::{BufRead as _, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

/// A TLS-only server with `pki`'s certificate (and, for mTLS, verifying clients against it).
pub fn tls_server(pki: &TestPki, config: &str, mtls: bool) -> NatsServer {
    NatsServer::start_with_tls(
        config,
        &ServerTls {
            cert_file: pki.server_cert.clone(),
            key_file: pki.server_key.clone(),
            client_ca_file: mtls.then(|| pki.ca_file.clone()),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

async fn refused(options: &NatsOptions) -> NatsError {
    match NatsBus::connect(options).await {
        Ok(_) => panic!("{} let the client in", options.url),
        Err(error) => error,
    }
}

#[tokio::test]
async fn a_client_verifying_the_servers_ca_connects_over_tls() {
    let pki = TestPki::new("bus");
    let server = tls_server(&pki, "", false);
    assert!(server.url().starts_with("tls://"), "{}", server.url());
    let bus =
        NatsBus::connect(&NatsOptions::new(server.url()).with_tls(BusTls::with_ca(&pki.ca_file)))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    let mut heard = bus.subscribe("tls.check").await.unwrap();
    bus.publish("tls.check", b"over tls".to_vec())
        .await
        .unwrap();
    let message = crate::next_within(Duration::from_secs(10), &mut heard).await;
    assert_eq!(message.payload, b"over tls");
}

#[tokio::test]
async fn a_plain_client_to_the_tls_only_server_is_refused() {
    let pki = TestPki::new("bus");
    let server = tls_server(&pki, "", false);
    // A client that speaks no TLS at all, as any tool on the path would: the server's greeting
    // says TLS is required, and a plain CONNECT is answered with an error, never +OK or PONG.
    let stream = std::net::TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
    let mut greeting = String::new();
    reader.read_line(&mut greeting).unwrap();
    assert!(greeting.contains("\"tls_required\":true"), "{greeting}");
    (&stream)
        .write_all(b"CONNECT {\"verbose\":false}\r\nPING\r\n")
        .unwrap();
    let mut answer = String::new();
    let read = reader.read_line(&mut answer);
    assert!(
        matches!(read, Ok(0)) || answer.starts_with("-ERR"),
        "a plain client was answered: {read:?} {answer:?}"
    );

    // Our client given the plain URL and no CA tries TLS (the server requires it) and trusts
    // only the system's CAs, which did not sign this server: refused, saying so.
    let error = refused(&NatsOptions::new(server.plain_url())).await;
    let message = error.to_string();
    assert!(matches!(error, NatsError::Untrusted { .. }), "{message}");
    assert!(message.contains("certificate is not trusted"), "{message}");
    assert!(message.contains("the system's CAs"), "{message}");
}

#[tokio::test]
async fn a_server_whose_certificate_another_ca_signed_is_refused_and_says_so() {
    let pki = TestPki::new("bus");
    let other = TestPki::new("other");
    let server = tls_server(&pki, "", false);
    let error =
        refused(&NatsOptions::new(server.url()).with_tls(BusTls::with_ca(&other.ca_file))).await;
    let message = error.to_string();
    assert!(matches!(error, NatsError::Untrusted { .. }), "{message}");
    assert!(message.contains("certificate is not trusted"), "{message}");
    assert!(
        message.contains(&other.ca_file.display().to_string()),
        "{message}"
    );
}

#[tokio::test]
async fn a_tls_client_to_a_server_without_tls_says_it_does_not_offer_it() {
    let pki = TestPki::new("bus");
    let plain = crate::server();
    let error =
        refused(&NatsOptions::new(plain.url()).with_tls(BusTls::with_ca(&pki.ca_file))).await;
    let message = error.to_string();
    assert!(
        matches!(error, NatsError::TlsNotOffered { .. }),
        "{message}"
    );
    assert!(message.contains("does not offer TLS"), "{message}");
}

#[tokio::test]
async fn with_mtls_a_client_without_a_certificate_is_refused_and_one_with_connects() {
    let pki = TestPki::new("bus");
    let server = tls_server(&pki, "", true);
    let without = NatsOptions::new(server.url()).with_tls(BusTls::with_ca(&pki.ca_file));
    refused(&without).await;
    let with = NatsOptions::new(server.url()).with_tls(BusTls {
        ca_file: Some(pki.ca_file.clone()),
        client_certificate: Some(ClientCertificate {
            cert_file: pki.client_cert.clone(),
            key_file: pki.client_key.clone(),
        }),
    });
    NatsBus::connect(&with)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // A client key others may read is refused before anything is sent.
    std::fs::set_permissions(&pki.client_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let error = refused(&with).await;
    let message = error.to_string();
    assert!(matches!(error, NatsError::Secret { .. }), "{message}");
    assert!(message.contains("readable by others"), "{message}");
}

/// The CA recipe the book gives operators (`contrib/tls/mesh-certs`) makes certificates a real
/// nats-server serves mutual TLS with and our client connects with; a client certificate
/// another run of the recipe made (another fleet's CA) is refused; keys are private; and a
/// second `ca` changes nothing.
#[tokio::test]
async fn the_books_ca_recipe_makes_certificates_the_bus_and_its_clients_accept() {
    let pki = TestPki::from_recipe();
    for key in [&pki.ca_key, &pki.server_key, &pki.client_key] {
        let mode = std::fs::metadata(key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{} is {mode:o}", key.display());
    }
    let ca_before = std::fs::read(&pki.ca_file).unwrap();
    let again = run_recipe(pki.dir.path(), &["ca"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("ca.pem is already there"),
        "{again:?}"
    );
    assert_eq!(std::fs::read(&pki.ca_file).unwrap(), ca_before);

    let server = tls_server(&pki, "", true);
    let client = |client: &TestPki| {
        NatsOptions::new(server.url()).with_tls(BusTls {
            ca_file: Some(pki.ca_file.clone()),
            client_certificate: Some(ClientCertificate {
                cert_file: client.client_cert.clone(),
                key_file: client.client_key.clone(),
            }),
        })
    };
    let bus = NatsBus::connect(&client(&pki))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut heard = bus.subscribe("tls.recipe").await.unwrap();
    bus.publish("tls.recipe", b"copied".to_vec()).await.unwrap();
    let message = crate::next_within(Duration::from_secs(10), &mut heard).await;
    assert_eq!(message.payload, b"copied");

    let other_fleet = TestPki::from_recipe();
    refused(&client(&other_fleet)).await;
}
