//! `serve`: the controller as a daemon on a fleet, with the status page beside it.

use anyhow::Result;
use mesh_controller::daemon;
use mesh_controller::http;

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
/// Webhooks: `POST /hooks/NAME` from a forge (Forgejo, Gitea, GitHub, GitLab), signed with
/// the secret `repo add NAME … --hook-secret-file FILE` registered, announces a push to the
/// registered branch, answering 202 at once (the daemon plans it). They are served on the
/// `--http` listener, and with `--hooks ADDR` on a listener of their own that serves nothing
/// else (so a forge reaches the hooks and not the status page); its URL is printed likewise.
///
/// Exit codes: 0 stopped by a signal; 1 error (the bus cannot be reached; the status page's
/// or the webhooks' address refused or taken, its certificate or key unreadable).
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
    /// Serve the webhooks (`POST /hooks/NAME`), and nothing else, on this address too, e.g.
    /// `0.0.0.0:9481` with `--hooks-cert`. Only a loopback address, unless `--hooks-cert`
    /// (TLS) or `--hooks-public` is given.
    #[arg(long, value_name = "ADDR")]
    hooks: Option<std::net::SocketAddr>,
    /// Serve the webhooks over HTTPS with this certificate chain (PEM; needs `--hooks-key`).
    #[arg(long, value_name = "FILE", requires_all = ["hooks", "hooks_key"])]
    hooks_cert: Option<PathBuf>,
    /// The key of `--hooks-cert` (PEM, mode 0600: refused when others may read it).
    #[arg(long, value_name = "FILE", requires = "hooks_cert")]
    hooks_key: Option<PathBuf>,
    /// Answer only webhook clients presenting a certificate signed by this CA (PEM).
    #[arg(long, value_name = "FILE", requires = "hooks_cert")]
    hooks_client_ca: Option<PathBuf>,
    /// Serve a non-loopback `--hooks` address in the clear, without TLS: a GitLab webhook's
    /// token then crosses the network readable.
    #[arg(long, requires = "hooks")]
    hooks_public: bool,
    /// For the status page: seconds without a report after which a node is called silent
    /// (as `status --silent-after`).
    #[arg(long, value_name = "SECS", default_value_t = mesh_controller::SILENT_AFTER_SECS)]
    silent_after: u64,
    /// How many plans are driven at once (plans of different repositories or branches; a
    /// repository's own plans are driven one after another).
    #[arg(long, value_name = "N", default_value_t = daemon::MAX_DRIVES,
        value_parser = clap::value_parser!(u16).range(1..))]
    max_drives: u16,
    /// Seconds between two heartbeats of the daemon (its loop's last turn, the merges waiting
    /// on its consumer, the plans it drives), published on the bus and kept for `status`,
    /// which calls the daemon silent after three missed.
    #[arg(long, value_name = "SECS", default_value_t = daemon::ServeOptions::default().heartbeat.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..))]
    heartbeat: u64,
    /// Seconds between two collections of the records, as `records collect` does by hand:
    /// the plans that ended folded (the records of their rollouts' nodes removed, a summary
    /// kept in the plan), the plans older than `--keep-plans` that nothing reads removed, and
    /// the declarations no record names (written over 10 minutes ago). A plan's end collects
    /// soon too.
    #[arg(long, value_name = "SECS",
        default_value_t = daemon::ServeOptions::default().collect_every.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..))]
    collect_every: u64,
    /// How many of the newest plans are kept whole; an older one that ended is removed, unless
    /// it is its repository's newest or `status` still shows a rollout it stopped.
    #[arg(long, value_name = "N", default_value_t = mesh_controller::plans::KEEP_PLANS)]
    keep_plans: usize,
}

/// How long a stop waits for the daemon's loop to end at its next step, well within the stop's
/// bound.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Serves until a signal.
pub fn exec(args: Args, env: &super::Env) -> Result<ExitCode> {
    env.home.require()?;
    let bus = env.need_bus()?;
    let drives = env.drives();
    let tls =
        |cert: Option<PathBuf>, key: Option<PathBuf>, client_ca: Option<PathBuf>| match (cert, key)
        {
            (Some(cert_file), Some(key_file)) => Some(http::Tls {
                cert_file,
                key_file,
                client_ca_file: client_ca,
            }),
            _ => None,
        };
    env.runtime.block_on(async {
        // A stop is heard from the start, also while the streams are being made.
        let mut signal = Box::pin(mesh_host::serve::shutdown_signal());
        let hooks: std::sync::Arc<dyn http::Mounted> =
            std::sync::Arc::new(daemon::Hooks::new(env.home.clone(), bus.clone()));
        // Both listeners are bound first (a bad address, certificate or key is said before
        // anything else is done), and answer once the mesh's streams are made: a read of a
        // stream while it is being made crashes nats-server 2.9 (daemon::make_streams).
        let pages_bound = match args.http {
            Some(addr) => Some(
                http::bind(&http::Listen {
                    addr,
                    tls: tls(args.http_cert, args.http_key, args.http_client_ca),
                    public: args.http_public,
                })
                .await?,
            ),
            None => None,
        };
        let hooks_bound = match args.hooks {
            Some(addr) => Some(
                daemon::bind_hooks(&http::Listen {
                    addr,
                    tls: tls(args.hooks_cert, args.hooks_key, args.hooks_client_ca),
                    public: args.hooks_public,
                })
                .await?,
            ),
            None => None,
        };
        let connected = mesh_controller::bus::connect(&env.home, &bus).await?;
        if daemon::make_streams(&env.home, &bus, &connected, &mut signal)
            .await?
            .is_none()
        {
            return Ok(());
        }
        // The pages share the home's records (dropped with it, after the runtime).
        let mut listeners = Vec::new();
        if let Some(bound) = pages_bound {
            println!("serving the status page on {}", bound.url());
            // The page reads the merges waiting from the bus as `status` does (the
            // heartbeat's when the bus does not answer), so the two agree.
            let pages = http::Pages::new(env.home.clone(), args.silent_after)
                .with_merges_waiting(merges_waiting_on(connected));
            let routes = http::Routes {
                pages: Some(std::sync::Arc::new(pages)),
                mounted: Some(std::sync::Arc::clone(&hooks)),
            };
            listeners.push(tokio::spawn(http::serve(
                bound,
                routes,
                std::future::pending(),
            )));
        }
        if let Some(bound) = hooks_bound {
            println!("serving the webhooks on {}hooks/NAME", bound.url());
            let routes = http::Routes {
                pages: None,
                mounted: Some(hooks),
            };
            listeners.push(tokio::spawn(http::serve(
                bound,
                routes,
                std::future::pending(),
            )));
        }
        let options = daemon::ServeOptions {
            max_drives: usize::from(args.max_drives),
            heartbeat: std::time::Duration::from_secs(args.heartbeat),
            collect_every: std::time::Duration::from_secs(args.collect_every),
            keep_plans: args.keep_plans,
            ..mesh_controller::daemon::ServeOptions::default()
        };
        // The daemon's loop runs as a task of its own, so that the stop is heard here even
        // while the loop waits in a call on a bus that is gone (a records read waits up to the
        // client's retry limit, longer than the stop's bound).
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let mut looping = tokio::spawn(async move {
            daemon::serve(&drives, &options, async move {
                let _ = stopped.await;
            })
            .await
        });
        let served = tokio::select! {
            () = &mut signal => {
                let _ = stop.send(());
                // The loop ends at its next step; one still waiting on the bus is let go, as
                // a kill would leave it (every record it writes survives one), and the runtime
                // is let go without it.
                match tokio::time::timeout(STOP_GRACE, &mut looping).await {
                    Ok(joined) => joined.unwrap_or_else(|error| Err(
                        mesh_controller::Error::refused(format!("the daemon's loop ended: {error}"))
                    )),
                    Err(_) => {
                        tracing::warn!(
                            grace_secs = STOP_GRACE.as_secs(),
                            "the daemon's loop is waiting on the bus: stopping without it"
                        );
                        Ok(())
                    }
                }
            }
            joined = &mut looping => joined.unwrap_or_else(|error| Err(
                mesh_controller::Error::refused(format!("the daemon's loop ended: {error}"))
            )),
        };
        for listener in listeners {
            listener.abort();
        }
        served
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The merges waiting on the daemon's consumer, read on `bus` when a page is asked for (from
/// the blocking thread the page is made on), bounded as a page must be.
fn merges_waiting_on(bus: mesh_bus::NatsBus) -> http::MergesWaitingSource {
    let handle = tokio::runtime::Handle::current();
    let js = bus.jetstream();
    http::MergesWaitingSource(std::sync::Arc::new(move || {
        handle.block_on(async {
            let read =
                mesh_bus::jetstream::merges_waiting(&js, mesh_controller::bus::MERGE_CONSUMER);
            match tokio::time::timeout(std::time::Duration::from_secs(2), read).await {
                Ok(Ok(waiting)) => Some(waiting),
                Ok(Err(_)) | Err(_) => None,
            }
        })
    }))
}
