//! Serving the routes ([`super::router`]): the listen address and its TLS (client certificates
//! verified against a CA when given), and the loop accepting connections, each served by hyper's
//! HTTP/1.1 with the axum router as its service.

use super::routes::{router, Routes};
use crate::error::{Error, Result};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How long a client may take over its TLS handshake, and over a request's head, before its
/// connection is closed (a client that opens connections and says nothing holds none for long).
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and how the pages are served.
#[derive(Debug, Clone)]
pub struct Listen {
    /// The address to listen on (e.g. `127.0.0.1:9480`; port 0 picks a free one).
    pub addr: SocketAddr,
    /// Serve HTTPS with this certificate, when given.
    pub tls: Option<Tls>,
    /// Listen on an address that is not loopback without TLS (a person said so).
    pub public: bool,
}

/// The certificate the pages are served behind, and who may ask.
#[derive(Debug, Clone)]
pub struct Tls {
    /// The certificate chain (PEM).
    pub cert_file: PathBuf,
    /// Its key (PEM, mode 0600: refused when others may read it).
    pub key_file: PathBuf,
    /// When given, only clients presenting a certificate signed by one of these CAs (PEM) are
    /// answered (mutual TLS, as a bus that verifies clients).
    pub client_ca_file: Option<PathBuf>,
}

/// A bound listener, ready for [`serve`].
pub struct Bound {
    listener: tokio::net::TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    addr: SocketAddr,
}

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bound")
            .field("addr", &self.addr)
            .field("tls", &self.acceptor.is_some())
            .finish()
    }
}

impl Bound {
    /// The address bound (the port chosen, when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The page's URL: `http://ADDR/` or `https://ADDR/`.
    pub fn url(&self) -> String {
        format!(
            "{}://{}/",
            if self.acceptor.is_some() {
                "https"
            } else {
                "http"
            },
            self.addr
        )
    }
}

/// Whether `listen` may be served: a loopback address, or TLS given, or `public`.
///
/// # Errors
/// [`Error::Refused`] naming the address and how to allow it.
pub(crate) fn check_listen(listen: &Listen) -> Result<()> {
    if listen.addr.ip().is_loopback() || listen.tls.is_some() || listen.public {
        return Ok(());
    }
    Err(Error::Given {
        option: crate::error::Given::HttpListen,
        value: Some(listen.addr.to_string()),
        why: "not a loopback address, and no TLS given: the status page would be readable in \
              the clear by anyone who reaches it; give a certificate and key (and a client CA to \
              admit only clients it signed), or say it is public"
            .to_owned(),
    })
}

/// Binds `listen`'s address, its TLS loaded, after [`check_listen`].
///
/// # Errors
/// The address is refused ([`check_listen`]) or cannot be bound; a certificate, key or CA
/// file cannot be read or is not valid PEM; the key file is readable by others.
pub async fn bind(listen: &Listen) -> Result<Bound> {
    check_listen(listen)?;
    let acceptor = listen.tls.as_ref().map(acceptor).transpose()?;
    let listener = tokio::net::TcpListener::bind(listen.addr)
        .await
        .map_err(|source| Error::Internal {
            doing: format!("listening on {} for the status page", listen.addr),
            source: Some(Box::new(source)),
        })?;
    let addr = listener.local_addr().map_err(|source| Error::Internal {
        doing: format!("reading the address bound for {}", listen.addr),
        source: Some(Box::new(source)),
    })?;
    Ok(Bound {
        listener,
        acceptor,
        addr,
    })
}

fn acceptor(tls: &Tls) -> Result<tokio_rustls::TlsAcceptor> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject as _;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |path: &std::path::Path, what: &str| {
        let path = path.to_owned();
        let what = what.to_owned();
        move |e: rustls::pki_types::pem::Error| Error::Invalid {
            what: format!("{} is not {what}", path.display()),
            source: Some(Box::new(e)),
        }
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&tls.cert_file)
        .map_err(bad(&tls.cert_file, "a PEM certificate chain"))?
        .collect::<std::result::Result<_, _>>()
        .map_err(bad(&tls.cert_file, "a PEM certificate chain"))?;
    if certs.is_empty() {
        return Err(Error::invalid(format!(
            "{} holds no certificate",
            tls.cert_file.display()
        )));
    }
    mesh_store::secret::check_secret_mode(&tls.key_file).map_err(|e| Error::Invalid {
        what: format!("the status page's key {}", tls.key_file.display()),
        source: Some(Box::new(e)),
    })?;
    let key = PrivateKeyDer::from_pem_file(&tls.key_file)
        .map_err(bad(&tls.key_file, "a PEM private key"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Internal {
            doing: "choosing the TLS versions".to_owned(),
            source: Some(Box::new(e)),
        })?;
    let builder = match &tls.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(ca_file) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca_file)
                .map_err(bad(ca_file, "a PEM CA certificate"))?
            {
                let cert = cert.map_err(bad(ca_file, "a PEM CA certificate"))?;
                roots.add(cert).map_err(|e| Error::Invalid {
                    what: format!("{} is not a CA certificate", ca_file.display()),
                    source: Some(Box::new(e)),
                })?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| Error::Invalid {
                what: format!("{} admits no client", ca_file.display()),
                source: Some(Box::new(e)),
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| Error::Invalid {
            what: format!(
                "{} and {} are not a certificate and its key",
                tls.cert_file.display(),
                tls.key_file.display()
            ),
            source: Some(Box::new(e)),
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Serves `routes` (the pages, or what [`Routes`] says, as [`super::router`] answers them) on
/// `bound` until `shutdown`: each connection in a task of its own, HTTP/1.1, behind TLS when
/// `bound` has it; a TLS handshake or a request's head that takes over [`HANDSHAKE_TIMEOUT`]
/// closes its connection.
///
/// # Guarantees
/// The pages are read-only: nothing a request to them changes a record or sends anything.
///
/// # Errors
/// None once bound: a connection that fails (a TLS handshake refused, a client gone) is logged
/// and the others go on.
pub async fn serve(
    bound: Bound,
    routes: impl Into<Routes>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let routes = router(routes.into());
    let Bound {
        listener,
        acceptor,
        addr,
    } = bound;
    let mut shutdown = std::pin::pin!(shutdown);
    tracing::info!(%addr, "serving the status page");
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "accepting a status page connection failed");
                    // Out of file descriptors, most likely: let some close.
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let service = hyper_util::service::TowerToHyperService::new(routes.clone());
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HANDSHAKE_TIMEOUT);
            let served = match acceptor {
                None => {
                    http.serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await
                }
                Some(acceptor) => {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            http.serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                                .await
                        }
                        Ok(Err(error)) => {
                            tracing::debug!(%peer, %error, "a TLS handshake for the status page failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "a TLS handshake for the status page took too long");
                            return;
                        }
                    }
                }
            };
            if let Err(error) = served {
                tracing::debug!(%peer, %error, "a status page connection ended in error");
            }
        });
    }
}
