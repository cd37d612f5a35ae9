//! mesh-bus against a real `nats-server` (Debian's 2.9): each test starts its own on loopback
//! ([`mesh_bus::nats_server`]) and it is killed when the test ends. A missing binary fails the
//! test, saying to install the Debian package `nats-server`; nothing is skipped.

mod consumers;
mod contract;
mod discovery;
mod grants;
mod merges;
mod permissions;
mod records;

use mesh_bus::nats_server::NatsServer;
use mesh_bus::{NatsBus, NatsOptions};

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
