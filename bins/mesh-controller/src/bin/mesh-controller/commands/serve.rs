//! `serve`: the controller as a daemon on a fleet, with the status page beside it.

use anyhow::Result;
use mesh_controller::{daemon, http};
use std::path::PathBuf;
use std::process::ExitCode;

/// Runs the controller as a daemon on a fleet (needs `--bus`).
///
/// It makes the mesh's streams, answers discovery, and plans each merge announced on the
/// bus, heard once however often it is announced, and builds and rolls out the open plans
/// to the fleet's hosts (as `merge NAME --commit C` would), several at once (`--max-drives`)
/// while it goes on hearing merges; open plans left mid-rollout are driven on when it starts.
/// SIGTERM or SIGINT stop it, mid-rollout too (the plan resumes where it was), within 30 s
/// whatever the bus is doing; a second signal, or the 30 s elapsing, ends it at once (exit
/// 1), which its records survive as they survive a kill.
///
/// With `--http ADDR` it also serves a read-only status page at `/`, the Prometheus
/// text format at `/metrics` and `/status.json` (the document `status --output json`
/// prints), and prints the page's URL on standard output once it listens.
///
/// Exit codes: 0 stopped by a signal; 1 error (the bus cannot be reached; the status page's
/// address refused or taken, its certificate or key unreadable).
#[derive(clap::Args)]
pub struct Args {
    /// Serve the status page, `/metrics` and `/status.json` on this address, e.g.
    /// `127.0.0.1:9480` (port 0 picks a free one). Only a loopback address, unless
    /// `--http-cert` (TLS) or `--http-public` is given.
    #[arg(long, value_name = "ADDR")]
    http: Option<std::net::SocketAddr>,
    /// Serve the status page over HTTPS with this certificate chain (PEM; needs
    /// `--http-key`), e.g. the bus server's.
    #[arg(long, value_name = "FILE", requires_all = ["http", "http_key"])]
    http_cert: Option<PathBuf>,
    /// The key of `--http-cert` (PEM, mode 0600: refused when others may read it).
    #[arg(long, value_name = "FILE", requires = "http_cert")]
    http_key: Option<PathBuf>,
    /// Answer only HTTPS clients presenting a certificate signed by this CA (PEM), e.g. the
    /// bus's `--bus-ca`.
    #[arg(long, value_name = "FILE", requires = "http_cert")]
    http_client_ca: Option<PathBuf>,
    /// Serve a non-loopback `--http` address in the clear, without TLS: anyone who reaches
    /// it reads the fleet's status.
    #[arg(long, requires = "http")]
    http_public: bool,
    /// For the status page: seconds without a report after which a node is called silent
    /// (as `status --silent-after`).
    #[arg(long, value_name = "SECS", default_value_t = mesh_controller::push::SILENT_AFTER_SECS)]
    silent_after: u64,
    /// How many plans are driven at once (plans of different repositories or branches; a
    /// repository's own plans are driven one after another).
    #[arg(long, value_name = "N", default_value_t = daemon::MAX_DRIVES,
        value_parser = clap::value_parser!(u16).range(1..))]
    max_drives: u16,
}

/// Serves until a signal.
pub fn exec(args: Args, env: &super::Env) -> Result<ExitCode> {
    env.home.require()?;
    env.need_bus()?;
    let drives = env.drives();
    env.runtime.block_on(async {
        // The pages share the home's records (dropped with it, after the runtime).
        let pages = match args.http {
            Some(addr) => {
                let listen = http::Listen {
                    addr,
                    tls: match (args.http_cert, args.http_key) {
                        (Some(cert_file), Some(key_file)) => Some(http::Tls {
                            cert_file,
                            key_file,
                            client_ca_file: args.http_client_ca,
                        }),
                        _ => None,
                    },
                    public: args.http_public,
                };
                let bound = http::bind(&listen).await?;
                println!("serving the status page on {}", bound.url());
                let pages =
                    std::sync::Arc::new(http::Pages::new(env.home.clone(), args.silent_after));
                Some(tokio::spawn(http::serve(
                    bound,
                    pages,
                    std::future::pending(),
                )))
            }
            None => None,
        };
        let served = daemon::serve(
            &drives,
            &daemon::ServeOptions {
                max_drives: usize::from(args.max_drives),
            },
            mesh_host::serve::shutdown_signal(),
        )
        .await;
        if let Some(pages) = pages {
            pages.abort();
        }
        served
    })?;
    Ok(ExitCode::SUCCESS)
}
