//! The bus options every binary takes, declared once (feature `cli`): `--bus`, `--bus-ca`,
//! `--bus-cert`, `--bus-key`, each with its `MESH_*` variable, and `--bus-retry-limit` for the
//! binaries that read the controller's records. Each is global: it may come before or after the
//! subcommand. A binary flattens these into its own options and turns them into [`BusTls`].

use crate::{BusTls, ClientCertificate};
use std::path::PathBuf;
use std::time::Duration;

/// Where the bus is and how this program proves itself to it.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct BusArgs {
    /// A fleet's bus (NATS JetStream), e.g. `nats://bus.example:4222`, or `tls://…` for TLS
    /// (with `--bus-ca`); several servers of a cluster separated by commas.
    #[arg(long, env = "MESH_BUS", global = true, value_name = "URL")]
    pub bus: Option<String>,
    /// The bus server's CA (a PEM file): TLS is then required and only these CAs are trusted.
    #[arg(long, env = "MESH_BUS_CA", global = true, value_name = "FILE")]
    pub bus_ca: Option<PathBuf>,
    /// This program's client certificate (PEM), for a bus that verifies clients (mTLS; needs
    /// `--bus-key`).
    #[arg(
        long,
        env = "MESH_BUS_CERT",
        global = true,
        value_name = "FILE",
        requires = "bus_key"
    )]
    pub bus_cert: Option<PathBuf>,
    /// The key of `--bus-cert` (PEM, mode 0600: refused when others may read it).
    #[arg(
        long,
        env = "MESH_BUS_KEY",
        global = true,
        value_name = "FILE",
        requires = "bus_cert"
    )]
    pub bus_key: Option<PathBuf>,
}

impl BusArgs {
    /// The TLS the options ask for: the CA, and the client certificate with its key.
    pub fn tls(&self) -> BusTls {
        BusTls {
            ca_file: self.bus_ca.clone(),
            client_certificate: match (&self.bus_cert, &self.bus_key) {
                (Some(cert_file), Some(key_file)) => Some(ClientCertificate {
                    cert_file: cert_file.clone(),
                    key_file: key_file.clone(),
                }),
                _ => None,
            },
        }
    }
}

/// How long the controller's records on the bus are tried again, for a binary that reads them.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RecordsRetryArgs {
    /// How long a read or write of the controller's records on the bus is tried again while
    /// the bus gives no answer (a cluster electing a leader, or one that lost its quorum)
    /// before the command fails saying so (default 30). Shorter fails sooner on a cluster that
    /// stays down; longer rides out a slower election.
    #[arg(long, env = "MESH_BUS_RETRY_LIMIT", global = true, value_name = "SECS",
        value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub bus_retry_limit: Option<u64>,
}

impl RecordsRetryArgs {
    /// The limit asked for, if any (else [`crate::records::RETRY_LIMIT`]).
    pub fn limit(&self) -> Option<Duration> {
        self.bus_retry_limit.map(Duration::from_secs)
    }
}
