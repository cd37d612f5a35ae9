//! The [`Bus`] over a real NATS server (async-nats), for a fleet.
//!
//! Start at [`NatsBus::connect`] with [`NatsOptions`] (a URL and, on a secured server, the
//! user and password [`crate::grants`] composed for this node or the controller). The same
//! connection gives JetStream ([`NatsBus::jetstream`], used by [`crate::jetstream`]) and the raw
//! client ([`NatsBus::client`], used by [`crate::discovery`]).
//!
//! What it must never do: interpret a payload (the bus knows nothing of declarations), or retry
//! behind its caller's back an operation the server refused — a refusal is said, on
//! [`NatsBus::refusals`] and in the log, never swallowed (the rule “Nothing fails silently”).

use crate::{check_subject, Bus, BusError, Message, Subscription};
use futures_util::StreamExt;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::broadcast;

/// A failure of the NATS side of the bus: connecting, JetStream, discovery.
///
/// Every message names the server, subject, stream, consumer or bucket concerned.
#[derive(Debug, thiserror::Error)]
pub enum NatsError {
    /// The server could not be reached, or refused our credentials.
    #[error("cannot connect to the nats server at `{url}`: {source}")]
    Connect {
        /// The server's URL.
        url: String,
        /// Why.
        #[source]
        source: async_nats::ConnectError,
    },
    /// The server's TLS certificate is not signed by a CA this client trusts.
    #[error(
        "cannot connect to the nats server at `{url}`: its certificate is not trusted \
         ({trust}): {detail}"
    )]
    Untrusted {
        /// The server's URL.
        url: String,
        /// What this client trusts: the CA file given, or the system's CAs.
        trust: String,
        /// What the TLS library said.
        detail: String,
    },
    /// This client asked for TLS (a `tls://` URL or a CA file) and the server does not offer
    /// it.
    #[error(
        "cannot connect to the nats server at `{url}`: it does not offer TLS, and this client \
         requires it ({why})"
    )]
    TlsNotOffered {
        /// The server's URL.
        url: String,
        /// Why TLS is required: the URL's scheme or the CA file.
        why: String,
    },
    /// A file of the connection's TLS or credentials cannot be used (a key readable by others).
    #[error("cannot connect to the nats server at `{url}`: {source}")]
    Secret {
        /// The server's URL.
        url: String,
        /// Why.
        #[source]
        source: mesh_records::secret::SecretFileError,
    },
    /// A server address that is not one (in [`NatsOptions::url`]).
    #[error("`{url}` is not a nats server address: {reason}")]
    Url {
        /// The address given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A stream could not be made, opened or read.
    #[error("stream `{stream}`: {source}")]
    Stream {
        /// The stream.
        stream: String,
        /// Why.
        #[source]
        source: async_nats::Error,
    },
    /// A consumer could not be made, opened, read, deleted or acknowledged.
    #[error("consumer `{consumer}` on stream `{stream}`: {source}")]
    Consumer {
        /// The stream.
        stream: String,
        /// The consumer.
        consumer: String,
        /// Why.
        #[source]
        source: async_nats::Error,
    },
    /// A durable consumer was asked for without a durable name.
    #[error("a durable consumer on stream `{stream}` needs a durable name")]
    ConsumerName {
        /// The stream.
        stream: String,
    },
    /// A reset was asked of a work-queue stream's consumer, where what is pending is work.
    #[error(
        "consumer `{consumer}` is on stream `{stream}`, a work queue: what it holds pending is \
         work to do, not history, so it is not reset"
    )]
    WorkQueue {
        /// The stream.
        stream: String,
        /// The consumer.
        consumer: String,
    },
    /// A JetStream publish was not stored.
    #[error("publish on `{subject}` was not stored: {source}")]
    Publish {
        /// The subject.
        subject: String,
        /// Why.
        #[source]
        source: async_nats::Error,
    },
    /// A key-value bucket could not be made or opened.
    #[error("key-value bucket `{bucket}`: {source}")]
    Bucket {
        /// The bucket.
        bucket: String,
        /// Why.
        #[source]
        source: async_nats::Error,
    },
    /// A core NATS operation (subscribe, publish, flush) failed.
    #[error("nats operation on `{subject}` failed: {source}")]
    Core {
        /// The subject concerned.
        subject: String,
        /// Why.
        #[source]
        source: async_nats::Error,
    },
    /// A message on a subject could not be read as what the mesh expects there.
    #[error("message on `{subject}` is not what it should be: {reason}")]
    Decode {
        /// The subject.
        subject: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The runtime's discovery service could not start.
    #[error("discovery service `{name}` cannot start: {source}")]
    Service {
        /// The service name.
        name: String,
        /// Why.
        #[source]
        source: async_nats::Error,
    },
}

/// How a client proves who it is to the server. `Debug` never shows a password or seed.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// A user and password, as in the server's `authorization { users = [...] }` block
    /// (see [`crate::grants::authorization_config`]).
    UserPassword {
        /// The user.
        user: String,
        /// Its password.
        password: String,
    },
    /// An NKey: the client signs the server's nonce with its seed, and the server knows the
    /// user by its public key (see [`crate::grants::users_config`], [`crate::keys`]).
    Nkey {
        /// The mesh's name for the user (`node-<node>`, `controller`), for messages only: the
        /// server knows the user by its key.
        user: String,
        /// The user's seed (`SU…`).
        seed: String,
    },
}

impl Credentials {
    /// The mesh's name for the user these credentials are.
    pub fn user(&self) -> &str {
        match self {
            Credentials::UserPassword { user, .. } | Credentials::Nkey { user, .. } => user,
        }
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::UserPassword { user, .. } => f
                .debug_struct("UserPassword")
                .field("user", user)
                .field("password", &"<hidden>")
                .finish(),
            Credentials::Nkey { user, .. } => f
                .debug_struct("Nkey")
                .field("user", user)
                .field("seed", &"<hidden>")
                .finish(),
        }
    }
}

/// What a node proves itself with: its password (what the controller made) or its NKey seed
/// (what `mesh-host keygen` made on the host). `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub enum NodeSecret {
    /// A password.
    Password(String),
    /// An NKey user seed (`SU…`).
    NkeySeed(String),
}

impl std::fmt::Debug for NodeSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeSecret::Password(_) => f.write_str("Password(<hidden>)"),
            NodeSecret::NkeySeed(_) => f.write_str("NkeySeed(<hidden>)"),
        }
    }
}

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct NatsOptions {
    /// The server, e.g. `nats://127.0.0.1:4222`, or several servers of one cluster,
    /// comma-separated (`nats://a:4222,nats://b:4222`): the client connects to one of them and,
    /// when it is lost, to another.
    pub url: String,
    /// How many copies of each stream and bucket to make (`--bus-replicas N`); `None`: 1 on a
    /// single server, 3 on a cluster ([`crate::jetstream::replicas_for`]).
    pub replicas: Option<usize>,
    /// Credentials, on a secured server.
    pub credentials: Option<Credentials>,
    /// The connection's name, as the server's monitoring shows it.
    pub name: Option<String>,
    /// The prefix of this client's reply inboxes. A node must use its own
    /// ([`crate::subjects::node_inbox_prefix`]): its grants let it hear only those.
    pub inbox_prefix: Option<String>,
    /// How long to wait for the server on connect.
    pub connect_timeout: Duration,
    /// TLS: the CA the server's certificate must be signed by, and this client's certificate
    /// for mTLS. A `tls://` URL asks for TLS with the system's CAs.
    pub tls: BusTls,
    /// Whether the server refusing an operation is expected (a permission probe tries what must
    /// be refused): such a refusal is logged at debug level, not as an error. It is sent to
    /// [`NatsBus::refusals`] either way.
    pub refusals_expected: bool,
}

/// How a client checks the bus server and proves itself by certificate (mTLS).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BusTls {
    /// A PEM file of the CA(s) the server's certificate must be signed by; when given, TLS is
    /// required and only these are trusted (`--bus-ca`, `MESH_BUS_CA`).
    pub ca_file: Option<PathBuf>,
    /// This client's certificate, for a server that verifies clients (mTLS).
    pub client_certificate: Option<ClientCertificate>,
}

/// A client certificate and its key (PEM files). The key file is a secret: refused when
/// others may read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertificate {
    /// The certificate.
    pub cert_file: PathBuf,
    /// Its key.
    pub key_file: PathBuf,
}

impl BusTls {
    /// TLS verified against `ca_file`, no client certificate.
    pub fn with_ca(ca_file: impl Into<PathBuf>) -> BusTls {
        BusTls {
            ca_file: Some(ca_file.into()),
            client_certificate: None,
        }
    }
}

impl NatsOptions {
    /// The servers [`NatsOptions::url`] names, in its order.
    ///
    /// # Errors
    /// [`NatsError::Url`] naming one that is not a server address, or a URL naming none.
    pub fn servers(&self) -> Result<Vec<async_nats::ServerAddr>, NatsError> {
        let urls: Vec<&str> = self
            .url
            .split(',')
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .collect();
        if urls.is_empty() {
            return Err(NatsError::Url {
                url: self.url.clone(),
                reason: "it names no server".to_owned(),
            });
        }
        urls.into_iter()
            .map(|url| {
                url.parse()
                    .map_err(|source: std::io::Error| NatsError::Url {
                        url: url.to_owned(),
                        reason: source.to_string(),
                    })
            })
            .collect()
    }

    /// Options for an unsecured server at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        NatsOptions {
            url: url.into(),
            replicas: None,
            credentials: None,
            name: None,
            inbox_prefix: None,
            connect_timeout: Duration::from_secs(5),
            tls: BusTls::default(),
            refusals_expected: false,
        }
    }

    /// These options, verifying the server against `tls` (see [`BusTls`]).
    pub fn with_tls(self, tls: BusTls) -> Self {
        NatsOptions { tls, ..self }
    }

    /// Whether this client will speak only TLS: a `tls://` URL or a CA file.
    pub fn requires_tls(&self) -> bool {
        self.url.starts_with("tls://") || self.tls.ca_file.is_some()
    }

    /// Options for `node`'s host: its user (see [`crate::subjects::node_user`]), its password and
    /// its own inbox prefix.
    pub fn for_node(url: impl Into<String>, node: &str, password: impl Into<String>) -> Self {
        NatsOptions {
            credentials: Some(Credentials::UserPassword {
                user: crate::subjects::node_user(node),
                password: password.into(),
            }),
            name: Some(format!("mesh-host {node}")),
            inbox_prefix: Some(crate::subjects::node_inbox_prefix(node)),
            ..NatsOptions::new(url)
        }
    }

    /// Options for `node`'s host signing with its NKey `seed`, with its own inbox prefix.
    pub fn for_node_nkey(url: impl Into<String>, node: &str, seed: impl Into<String>) -> Self {
        NatsOptions {
            credentials: Some(Credentials::Nkey {
                user: crate::subjects::node_user(node),
                seed: seed.into(),
            }),
            ..NatsOptions::for_node(url, node, String::new())
        }
    }

    /// Options for `node`'s host with whichever secret it has.
    pub fn for_node_with(url: impl Into<String>, node: &str, secret: &NodeSecret) -> Self {
        match secret {
            NodeSecret::Password(password) => NatsOptions::for_node(url, node, password.clone()),
            NodeSecret::NkeySeed(seed) => NatsOptions::for_node_nkey(url, node, seed.clone()),
        }
    }

    /// Options for the controller signing with its NKey `seed` (which stays on its machine).
    pub fn for_controller_nkey(url: impl Into<String>, seed: impl Into<String>) -> Self {
        NatsOptions {
            credentials: Some(Credentials::Nkey {
                user: crate::subjects::CONTROLLER_USER.to_owned(),
                seed: seed.into(),
            }),
            ..NatsOptions::for_controller(url, String::new())
        }
    }

    /// Options for the controller: its user ([`crate::subjects::CONTROLLER_USER`]) and password.
    pub fn for_controller(url: impl Into<String>, password: impl Into<String>) -> Self {
        NatsOptions {
            credentials: Some(Credentials::UserPassword {
                user: crate::subjects::CONTROLLER_USER.to_owned(),
                password: password.into(),
            }),
            name: Some("mesh-controller".to_owned()),
            ..NatsOptions::new(url)
        }
    }
}

/// Says why a connection failed when it is TLS: a certificate not trusted, or a server that
/// does not offer TLS to a client that requires it (found by reading the server's greeting).
async fn explain_connect_failure(
    options: &NatsOptions,
    source: async_nats::ConnectError,
) -> NatsError {
    let url = options.url.clone();
    let trust = match &options.tls.ca_file {
        Some(path) => format!("CA file {}", path.display()),
        None if !options.url.starts_with("tls://") => "the system's CAs: the server requires \
            TLS and no CA file was given (--bus-ca, MESH_BUS_CA)"
            .to_owned(),
        None => "the system's CAs".to_owned(),
    };
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(&source);
    while let Some(error) = next {
        let text = error.to_string();
        if text.contains("invalid peer certificate") || text.contains("UnknownIssuer") {
            return NatsError::Untrusted {
                url,
                trust,
                detail: text,
            };
        }
        next = error.source();
    }
    // A server that refused the credentials spoke TLS to get that far: asking its greeting
    // again would only leave a TLS handshake cut short in its log.
    let refused = matches!(
        source.kind(),
        async_nats::ConnectErrorKind::AuthorizationViolation
            | async_nats::ConnectErrorKind::Authentication
    );
    if !refused
        && options.requires_tls()
        && matches!(server_offers_tls(&options.url).await, Some(false))
    {
        let why = match &options.tls.ca_file {
            Some(path) => format!("a CA file is given: {}", path.display()),
            None => "the URL is tls://".to_owned(),
        };
        return NatsError::TlsNotOffered { url, why };
    }
    NatsError::Connect { url, source }
}

/// Whether the server at `url` offers TLS, as its greeting (`INFO {…}`) says; `None` when it
/// cannot be read.
async fn server_offers_tls(url: &str) -> Option<bool> {
    use tokio::io::AsyncBufReadExt as _;
    let address = url.split("://").nth(1).unwrap_or(url);
    let address = address.rsplit('@').next()?.split(',').next()?;
    let stream = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect(address),
    )
    .await
    .ok()?
    .ok()?;
    let mut line = String::new();
    tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::BufReader::new(stream).read_line(&mut line),
    )
    .await
    .ok()?
    .ok()?;
    let info: serde_json::Value = serde_json::from_str(line.strip_prefix("INFO ")?.trim()).ok()?;
    let flag = |key: &str| info.get(key).and_then(serde_json::Value::as_bool) == Some(true);
    Some(flag("tls_required") || flag("tls_available"))
}

/// What the server refused to let this connection do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A publish on a subject its user may not publish to.
    Publish {
        /// The subject.
        subject: String,
    },
    /// A subscription to a subject its user may not hear.
    Subscribe {
        /// The subject.
        subject: String,
    },
    /// Another server error, as the server said it.
    Other {
        /// The server's words.
        error: String,
    },
}

impl Refusal {
    /// Reads a server error (`Permissions Violation for Publish to "x"`, …).
    pub fn from_server_error(error: &str) -> Refusal {
        let quoted = |prefix: &str| {
            let start = error.find(prefix)? + prefix.len();
            let rest = &error[start..];
            Some(rest[..rest.find('"')?].to_owned())
        };
        if let Some(subject) = quoted("Permissions Violation for Publish to \"") {
            Refusal::Publish { subject }
        } else if let Some(subject) = quoted("Permissions Violation for Subscription to \"") {
            Refusal::Subscribe { subject }
        } else {
            Refusal::Other {
                error: error.trim_matches('\'').to_owned(),
            }
        }
    }
}

/// The [`Bus`] over a NATS server. Cloning gives another handle on the same connection.
///
/// # Guarantees
/// - Messages on one subscription arrive in the order the server delivered them.
/// - A subscription is registered at the server when [`Bus::subscribe`] returns (a
///   [`round_trip`] through it), so a publish made after it, from any connection, reaches it.
/// - A subscription the server refuses ends: its [`Subscription::next`] returns `None`, and the
///   refusal is on [`NatsBus::refusals`] and in the log.
/// - When [`Bus::publish`] returns, the message is written to the connection (flushed), so it
///   is sent whatever the runtime, even if the process exits next.
/// - A publish the server refuses is said on [`NatsBus::refusals`] and in the log: a core
///   publish has no answer, so [`Bus::publish`] itself cannot return the refusal.
///   Where a publish must be known stored, publish through JetStream
///   ([`crate::jetstream::publish_merge`] does).
#[derive(Clone)]
pub struct NatsBus {
    client: async_nats::Client,
    refusals: broadcast::Sender<Refusal>,
    connects: tokio::sync::watch::Receiver<u64>,
    /// Set once the connection has begun to drain ([`NatsBus::drain_heard`]).
    draining: tokio::sync::watch::Receiver<bool>,
}

impl std::fmt::Debug for NatsBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let server = self.client.server_info();
        f.debug_struct("NatsBus")
            .field("server", &format!("{}:{}", server.host, server.port))
            .finish_non_exhaustive()
    }
}

impl NatsBus {
    /// Connects to the server.
    ///
    /// # Errors
    /// [`NatsError::Connect`] when the server cannot be reached in time or refuses the
    /// credentials.
    pub async fn connect(options: &NatsOptions) -> Result<NatsBus, NatsError> {
        let (refusals, _) = broadcast::channel(256);
        let sender = refusals.clone();
        let (connected, connects) = tokio::sync::watch::channel(0_u64);
        let connected = std::sync::Arc::new(connected);
        let (drained, draining) = tokio::sync::watch::channel(false);
        let drained = std::sync::Arc::new(drained);
        let refusals_expected = options.refusals_expected;
        let mut connect = async_nats::ConnectOptions::new()
            .connection_timeout(options.connect_timeout)
            .event_callback(move |event| {
                let sender = sender.clone();
                let connected = std::sync::Arc::clone(&connected);
                let drained = std::sync::Arc::clone(&drained);
                async move {
                    match event {
                        // The events come in the order the connection met them: every refusal
                        // before the drain has been sent on `refusals` by now.
                        async_nats::Event::Draining => {
                            tracing::debug!("nats connection draining");
                            drained.send_replace(true);
                        }
                        async_nats::Event::Connected => {
                            tracing::info!(event = %event, "nats connection");
                            connected.send_modify(|count| *count += 1);
                        }
                        async_nats::Event::ServerError(error) => {
                            let refusal = match error {
                                async_nats::ServerError::Other(text) => {
                                    Refusal::from_server_error(&text)
                                }
                                other => Refusal::Other {
                                    error: other.to_string(),
                                },
                            };
                            if refusals_expected {
                                tracing::debug!(
                                    ?refusal,
                                    "the nats server refused an operation, as expected"
                                );
                            } else {
                                tracing::error!(?refusal, "the nats server refused an operation");
                            }
                            // Nobody listening is fine: the log has it.
                            let _ = sender.send(refusal);
                        }
                        other => tracing::info!(event = %other, "nats connection"),
                    }
                }
            });
        match &options.credentials {
            Some(Credentials::UserPassword { user, password }) => {
                connect = connect.user_and_password(user.clone(), password.clone());
            }
            Some(Credentials::Nkey { seed, .. }) => connect = connect.nkey(seed.clone()),
            None => {}
        }
        if let Some(name) = &options.name {
            connect = connect.name(name);
        }
        if let Some(prefix) = &options.inbox_prefix {
            connect = connect.custom_inbox_prefix(prefix);
        }
        if let Some(ca) = &options.tls.ca_file {
            connect = connect.add_root_certificates(ca.clone()).require_tls(true);
        }
        if let Some(client) = &options.tls.client_certificate {
            mesh_records::secret::check_secret_mode(&client.key_file).map_err(|source| {
                NatsError::Secret {
                    url: options.url.clone(),
                    source,
                }
            })?;
            connect = connect
                .add_client_certificate(client.cert_file.clone(), client.key_file.clone())
                .require_tls(true);
        }
        let client = match connect.connect(options.servers()?).await {
            Ok(client) => client,
            Err(source) => return Err(explain_connect_failure(options, source).await),
        };
        Ok(NatsBus {
            client,
            refusals,
            connects,
            draining,
        })
    }

    /// Drains the connection, and waits until every refusal the server sent before the drain
    /// is on [`NatsBus::refusals`]: the server answers a connection's operations in order, and
    /// the client hands its events on in the order it met them. Proves that nothing was refused
    /// without asking the server for a refusal (which it would log as an error). The connection
    /// is closed after it.
    ///
    /// # Errors
    /// The drain could not be asked for, or was not heard (the connection was lost).
    pub async fn drain_heard(&self) -> Result<(), String> {
        let mut draining = self.draining.clone();
        self.client
            .drain()
            .await
            .map_err(|error| format!("draining the connection: {error}"))?;
        draining
            .wait_for(|drained| *drained)
            .await
            .map(|_| ())
            .map_err(|_| "the connection ended before its drain was heard".to_owned())
    }

    /// Changes each time the connection is made again after it was lost (and may once for the
    /// first connection): what was published while it was lost was not heard, and a reader
    /// that must not miss it asks again (the host asks for its last declaration). The
    /// connection's subscriptions are sent to the server again before anything sent after it
    /// changes.
    pub fn connects(&self) -> tokio::sync::watch::Receiver<u64> {
        let mut connects = self.connects.clone();
        connects.mark_unchanged();
        connects
    }

    /// The raw async-nats client, for what the [`Bus`] trait does not cover.
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// A JetStream context on this connection.
    pub fn jetstream(&self) -> async_nats::jetstream::Context {
        async_nats::jetstream::new(self.client.clone())
    }

    /// Every refusal the server sends this connection from now on.
    pub fn refusals(&self) -> broadcast::Receiver<Refusal> {
        self.refusals.subscribe()
    }

    /// Waits until everything sent so far is written to the connection (not yet handled by
    /// the server: see [`NatsBus::round_trip`]).
    ///
    /// # Errors
    /// [`NatsError::Core`] when the connection is lost.
    pub async fn flush(&self) -> Result<(), NatsError> {
        self.client.flush().await.map_err(|source| NatsError::Core {
            subject: "(flush)".to_owned(),
            source: source.into(),
        })
    }

    /// Waits until the server has handled everything this connection sent so far (see
    /// [`round_trip`]).
    ///
    /// # Errors
    /// As [`round_trip`].
    pub async fn round_trip(&self) -> Result<(), NatsError> {
        round_trip(&self.client).await
    }
}

/// How long [`round_trip`] waits for its echo.
pub const ROUND_TRIP_TIMEOUT: Duration = Duration::from_secs(10);

/// Waits until the server has handled everything `client` sent so far: a message to one of its
/// own inboxes, heard back.
///
/// async-nats' `flush` only writes to the socket; a subscription made on one connection is not
/// yet known to the server when it returns, and a publish from another connection can pass it.
/// After this, it is.
///
/// # Errors
/// [`NatsError::Core`] when the echo does not come back within [`ROUND_TRIP_TIMEOUT`].
pub async fn round_trip(client: &async_nats::Client) -> Result<(), NatsError> {
    let inbox = client.new_inbox();
    let core = |source: async_nats::Error| NatsError::Core {
        subject: inbox.clone(),
        source,
    };
    let mut echo = client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| core(e.into()))?;
    client
        .publish(inbox.clone(), bytes::Bytes::new())
        .await
        .map_err(|e| core(e.into()))?;
    client.flush().await.map_err(|e| core(e.into()))?;
    match tokio::time::timeout(ROUND_TRIP_TIMEOUT, echo.next()).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(core("the connection closed".into())),
        Err(_) => Err(core(
            format!("no echo from the server within {ROUND_TRIP_TIMEOUT:?}").into(),
        )),
    }
}

/// A message as the server delivered it, as the bus hands it on (a delivery and a request's
/// answer alike).
fn message_of(message: async_nats::Message) -> Message {
    Message {
        subject: message.subject.to_string(),
        payload: message.payload.to_vec(),
        id: message
            .headers
            .as_ref()
            .and_then(|headers| headers.get(async_nats::header::NATS_MESSAGE_ID))
            .map(|id| id.as_str().to_owned()),
        reply: message.reply.map(|reply| reply.to_string()),
    }
}

fn failed(subject: &str, reason: impl std::fmt::Display) -> BusError {
    BusError::Failed {
        subject: subject.to_owned(),
        reason: reason.to_string(),
    }
}

#[async_trait::async_trait]
impl Bus for NatsBus {
    async fn publish(&self, subject: &str, payload: Vec<u8>) -> Result<(), BusError> {
        check_subject(subject, false)?;
        self.client
            .publish(subject.to_owned(), payload.into())
            .await
            .map_err(|error| failed(subject, error))?;
        // async-nats only queues a publish; on a current-thread runtime it may sit unsent until
        // the next flush (nats.rs#1408), and a command that exits right after loses it.
        self.client
            .flush()
            .await
            .map_err(|error| failed(subject, error))
    }

    async fn subscribe(&self, subject: &str) -> Result<Subscription, BusError> {
        check_subject(subject, true)?;
        let mut refusals = self.refusals.subscribe();
        let mut subscriber = self
            .client
            .subscribe(subject.to_owned())
            .await
            .map_err(|error| failed(subject, error))?;
        round_trip(&self.client)
            .await
            .map_err(|error| failed(subject, error))?;
        // Bounded: a reader behind holds the forwarding back, and the client's own buffer
        // then the server drop what it cannot take (crate::SUBSCRIPTION_CAPACITY).
        let (sender, receiver) = tokio::sync::mpsc::channel(crate::SUBSCRIPTION_CAPACITY);
        let pattern = subject.to_owned();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    message = subscriber.next() => {
                        let Some(message) = message else { break };
                        if sender.send(message_of(message)).await.is_err() {
                            break; // the subscription was dropped: unsubscribe
                        }
                    }
                    refusal = refusals.recv() => match refusal {
                        Ok(Refusal::Subscribe { subject }) if subject == pattern => break,
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => {}
                    },
                }
            }
        });
        Ok(Subscription::new(receiver))
    }

    async fn request(
        &self,
        subject: &str,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Message, BusError> {
        check_subject(subject, false)?;
        let request = async_nats::Request::new()
            .payload(payload.into())
            .timeout(Some(timeout));
        match self.client.send_request(subject.to_owned(), request).await {
            Ok(answer) => Ok(message_of(answer)),
            // Nobody listening is said by the server at once; to the caller it is the same as
            // nobody answering in time, as on the in-process bus.
            Err(error)
                if matches!(
                    error.kind(),
                    async_nats::RequestErrorKind::TimedOut
                        | async_nats::RequestErrorKind::NoResponders
                ) =>
            {
                Err(BusError::Timeout {
                    subject: subject.to_owned(),
                    timeout,
                })
            }
            Err(error) => Err(failed(subject, error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_servers_permission_violations() {
        assert_eq!(
            Refusal::from_server_error("Permissions Violation for Publish to \"mesh.report.b\""),
            Refusal::Publish {
                subject: "mesh.report.b".into()
            }
        );
        assert_eq!(
            Refusal::from_server_error(
                "'Permissions Violation for Subscription to \"mesh.declaration.b\"'"
            ),
            Refusal::Subscribe {
                subject: "mesh.declaration.b".into()
            }
        );
        assert_eq!(
            Refusal::from_server_error("'Maximum Payload Violation'"),
            Refusal::Other {
                error: "Maximum Payload Violation".into()
            }
        );
    }
}
