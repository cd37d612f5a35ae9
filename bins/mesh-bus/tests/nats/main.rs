//! mesh-bus against a real `nats-server` (Debian's 2.9): each test starts its own on loopback
//! ([`mesh_test_support::nats_server`]) and it is killed when the test ends. A missing binary fails
//! the test, saying to install the Debian package `nats-server`; nothing is skipped.

mod audit;
mod cluster;
mod consumers;
mod contract;
mod declarations;
mod directories;
mod discovery;
mod grants;
mod merges;
mod nkey_users;
mod permissions;
mod records;
mod tls;

use mesh_test_support::pki;

use mesh_bus::grants::{BusAuthorization, NodeGrants};
use mesh_bus::{Message, NatsBus, NatsOptions, Subscription};
use mesh_test_support::nats_server::NatsServer;
use std::time::Duration;

/// A fresh server, or a failure that says what to install.
pub fn server() -> NatsServer {
    NatsServer::start().unwrap_or_else(|error| panic!("{error}"))
}

/// A connection to `server` with no credentials.
pub async fn connect(server: &NatsServer) -> NatsBus {
    NatsBus::connect(&NatsOptions::new(server.url()))
        .await
        .unwrap_or_else(|error| panic!("{error}"))
}

/// A server started with `authorization` (the text the bus node is sent), and the controller
/// connected to it as its user (password `controller-secret`) with the mesh's streams made.
pub async fn secured(authorization: &str) -> (NatsServer, NatsBus) {
    let server = NatsServer::start_with_config(authorization).unwrap_or_else(|e| panic!("{e}"));
    let controller = NatsBus::connect(&NatsOptions::for_controller(
        server.url(),
        "controller-secret",
    ))
    .await
    .unwrap_or_else(|error| panic!("{error}"));
    mesh_bus::jetstream::ensure_streams(&controller.jetstream())
        .await
        .unwrap();
    (server, controller)
}

/// The next message on `subscription`, which must come within `wait` and not end.
pub async fn next_within(wait: Duration, subscription: &mut Subscription) -> Message {
    tokio::time::timeout(wait, subscription.next())
        .await
        .unwrap()
        .unwrap()
}

/// Two nodes' grants: `home` with `home_buckets` and `home_subjects`, `laptop` with nothing;
/// each password is `NODE-secret`, the controller's `controller-secret`.
pub fn home_and_laptop(home_buckets: &[&str], home_subjects: &[&str]) -> BusAuthorization {
    BusAuthorization {
        controller_password: "controller-secret".into(),
        nodes: vec![
            NodeGrants {
                node: "home".into(),
                password: "home-secret".into(),
                buckets: home_buckets.iter().map(|b| b.to_string()).collect(),
                subjects: home_subjects.iter().map(|s| s.to_string()).collect(),
            },
            NodeGrants {
                node: "laptop".into(),
                password: "laptop-secret".into(),
                buckets: vec![],
                subjects: vec![],
            },
        ],
    }
}

/// Options to connect to `server` as `node` with its password from [`home_and_laptop`].
pub fn as_node(server: &NatsServer, node: &str) -> NatsOptions {
    NatsOptions::for_node(server.url(), node, format!("{node}-secret"))
}
