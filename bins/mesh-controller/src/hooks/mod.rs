//! Webhooks: `POST /hooks/NAME` from a forge announces the merge of a push to the branch
//! registered for repository NAME, to the daemon, as `merge NAME --announce` would.
//!
//! Start at [`Hooks`]: mounted on the status page's listener ([`crate::http::Routes`]) and on
//! a listener of their own ([`bind`], `serve --hooks ADDR`), which serves nothing else, so a
//! forge can reach them without reaching the status page. [`respond`] answers one request:
//! its proof checked against the repository's secret ([`verify`]), then its body read as a push
//! in the forge's format ([`forge`]).
//!
//! The answers: 202 a push to the registered branch, announced (answered once the events
//! stream stored it, never waiting for the plan), or another branch, a tag, a deleted branch or
//! another event (a ping), ignored and named; 400 a body that is not a push; 401 no proof, or
//! one that does not match; 404 no repository of that name takes webhooks; 405 not `POST`;
//! 413 a body over [`BODY_LIMIT`] (read no further than the limit); 503 the bus cannot be
//! reached.
//!
//! # Invariants
//! - Nothing is announced before the proof is checked, and a proof is checked in constant
//!   time against the secret read from the repository's secret file, which is never logged,
//!   answered or kept.
//! - A webhook only announces: the daemon plans (the rule “A merge heard twice makes one
//!   plan”: a push delivered twice is announced once).
//! - An answer never lists the registered repositories, and says the same for a repository
//!   not registered and one registered without a secret.

pub(crate) mod poll;

pub(crate) mod forge;
pub(crate) mod verify;

use crate::bus::credentials::BusConfig;
use crate::catalogue::repos::{self, RepoRecord};
use crate::error::{Error, Result};
use crate::home::Home;
use crate::http::{Answer, Bound, Listen, Mounted, BODY_LIMIT};
use forge::Push;
use http_body_util::BodyExt as _;
use hyper::HeaderMap;
use mesh_bus::NatsBus;

/// The path the webhooks are under.
pub(crate) const PREFIX: &str = "/hooks/";

/// The webhooks of one mesh: its repositories' records and secrets, and the bus merges are
/// announced on (connected at the first push, and kept).
pub struct Hooks {
    home: Home,
    bus_config: BusConfig,
    bus: tokio::sync::OnceCell<NatsBus>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("bus", &self.bus_config.url)
            .finish_non_exhaustive()
    }
}

fn text(status: u16, body: impl Into<String>) -> Answer {
    Answer {
        status,
        content_type: "text/plain; charset=utf-8",
        body: body.into() + "\n",
    }
}

impl Hooks {
    /// The webhooks of `home`'s repositories, announcing on the bus `bus_config` names.
    pub fn new(home: Home, bus_config: BusConfig) -> Hooks {
        Hooks {
            home,
            bus_config,
            bus: tokio::sync::OnceCell::new(),
        }
    }

    /// The answer to a push event for repository `name`: `headers` and the `body` read whole.
    pub async fn receive(&self, name: &str, headers: &HeaderMap, body: &[u8]) -> Answer {
        let not_here = || {
            text(
                404,
                format!(
                    "no repository `{}` takes webhooks here: register it with `repo add` and a \
                     hook secret file",
                    name.chars().take(100).collect::<String>()
                ),
            )
        };
        if !mesh_model::module::is_valid_name(name) {
            return not_here();
        }
        // The records may be the bus's, and the secret is a file: read off the workers.
        let home = self.home.clone();
        let owned = name.to_owned();
        let looked = tokio::task::spawn_blocking(move || -> Result<Option<_>> {
            let repo = match home.repos().get(&owned) {
                Ok(repo) => repo,
                Err(Error::Invalid { .. }) => return Ok(None),
                Err(error) => return Err(error),
            };
            let Some(file) = &repo.hook_secret_file else {
                return Ok(None);
            };
            let secret = zeroize::Zeroizing::new(repos::read_hook_secret(&repo.name, file)?);
            Ok(Some((repo, secret)))
        })
        .await;
        let (repo, secret) = match looked {
            Ok(Ok(Some(found))) => found,
            Ok(Ok(None)) => return not_here(),
            Ok(Err(error)) => {
                tracing::error!(
                    repository = name,
                    error = error.chain_line(),
                    "a webhook could not be checked"
                );
                return text(
                    500,
                    "the repository or its webhook secret could not be read: the controller's \
                     log says why",
                );
            }
            Err(error) => return text(500, format!("the webhook failed: {error}")),
        };
        let Some((forge, proof)) = forge::proof(headers) else {
            tracing::warn!(repository = name, "a webhook came unsigned: refused");
            return text(
                401,
                "unsigned: no X-Forgejo-Signature, X-Gitea-Signature, X-Hub-Signature-256 or \
                 X-Gitlab-Token",
            );
        };
        if !verify::verify(secret.as_bytes(), body, &proof) {
            tracing::warn!(
                repository = name,
                forge = forge.name(),
                "a webhook's signature does not match the repository's secret: refused"
            );
            return text(
                401,
                format!(
                    "the {} signature does not match repository `{name}`'s secret",
                    forge.name()
                ),
            );
        }
        drop(secret);
        if let Some(event) = forge.other_event(headers) {
            return text(202, format!("ignored: a {event} event, not a push"));
        }
        let (branch, commit) = match forge::push(body) {
            Ok(Push::Branch { branch, commit }) => (branch, commit),
            Ok(Push::Deleted { branch }) => {
                return text(202, format!("ignored: branch {branch} deleted"))
            }
            Ok(Push::NotABranch { reference }) => {
                return text(202, format!("ignored: {reference} is not a branch"))
            }
            Err(why) => return text(400, format!("malformed: {why}")),
        };
        if branch != repo.branch {
            return text(202, format!("ignored: branch {branch}"));
        }
        match self.announce(&repo, &commit).await {
            Ok(announced) => {
                tracing::info!(repository = name, forge = forge.name(), commit = %commit,
                    already = announced.already_announced, "a webhook announced a merge");
                text(
                    202,
                    format!(
                        "{}: `{name}` {branch} at {}",
                        if announced.already_announced {
                            "already announced"
                        } else {
                            "announced"
                        },
                        crate::catalogue::builds::short_commit(&commit)
                    ),
                )
            }
            Err(error) => {
                tracing::error!(
                    repository = name,
                    error = error.chain_line(),
                    "a webhook's merge could not be announced"
                );
                text(
                    503,
                    format!("the merge could not be announced: {}", error.chain_line()),
                )
            }
        }
    }

    async fn announce(
        &self,
        repo: &RepoRecord,
        commit: &str,
    ) -> Result<crate::bus::announce::Announced> {
        let bus = self
            .bus
            .get_or_try_init(|| crate::bus::credentials::connect(&self.home, &self.bus_config))
            .await?;
        crate::bus::announce::announce(bus, repo, commit).await
    }
}

/// The answer to one request to the webhooks: `POST /hooks/NAME` with a body of at most
/// [`BODY_LIMIT`] (a longer one is read no further).
pub(crate) async fn respond<B>(hooks: &Hooks, request: hyper::Request<B>) -> Answer
where
    B: hyper::body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let path = request.uri().path().to_owned();
    let Some(name) = path.strip_prefix(PREFIX).filter(|n| !n.contains('/')) else {
        return text(404, "the webhooks are at /hooks/NAME");
    };
    if request.method() != hyper::Method::POST {
        return text(405, "a webhook is a POST");
    }
    let declared = request
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_long = || text(413, format!("the body is over {BODY_LIMIT} bytes"));
    if declared.is_some_and(|length| length > BODY_LIMIT as u64) {
        return too_long();
    }
    let (parts, body) = request.into_parts();
    let body = match http_body_util::Limited::new(body, BODY_LIMIT)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => return too_long(),
        Err(error) => return text(400, format!("the body could not be read: {error}")),
    };
    hooks.receive(name, &parts.headers, &body).await
}

#[async_trait::async_trait]
impl Mounted for Hooks {
    fn owns(&self, path: &str) -> bool {
        path.starts_with(PREFIX) || path == "/hooks"
    }

    async fn respond(&self, request: axum::extract::Request) -> Answer {
        respond(self, request).await
    }
}

/// Binds the webhooks' own listener (`serve --hooks ADDR`): a loopback address, or TLS
/// given, or `public` (webhooks signed by an HMAC are safe to receive in the clear; a GitLab
/// token is not).
///
/// # Errors
/// The address is refused, naming `--hooks` and how to allow it; otherwise as
/// [`crate::http::bind`].
pub async fn bind(listen: &Listen) -> Result<Bound> {
    if !(listen.addr.ip().is_loopback() || listen.tls.is_some() || listen.public) {
        return Err(Error::Given {
            option: crate::error::Given::HooksListen,
            value: Some(listen.addr.to_string()),
            why: "not a loopback address, and no TLS given: a GitLab webhook's token would \
                  cross the network in the clear; give a certificate and key, or say it is public"
                .to_owned(),
        });
    }
    crate::http::bind(&Listen {
        public: true,
        ..listen.clone()
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body of `chunks` chunks of 64 KiB, counting how many were read.
    fn counted_body(
        chunks: usize,
        read: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    ) -> impl hyper::body::Body<Data = bytes::Bytes, Error = std::convert::Infallible> {
        let stream = futures_util::stream::iter((0..chunks).map(move |_| {
            read.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(hyper::body::Frame::data(bytes::Bytes::from(vec![
                b'x';
                64 * 1024
            ])))
        }));
        http_body_util::StreamBody::new(stream)
    }

    fn hooks() -> (tempfile::TempDir, Hooks) {
        let dir = tempfile::tempdir().unwrap();
        let hooks = Hooks::new(Home::new(dir.path()), BusConfig::new("nats://127.0.0.1:1"));
        (dir, hooks)
    }

    #[tokio::test]
    async fn a_body_of_unannounced_length_is_read_no_further_than_the_limit() {
        let (_dir, hooks) = hooks();
        let read = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        // 10 MiB, sent without a length (chunked).
        let request = hyper::Request::post("/hooks/cat")
            .body(counted_body(160, std::sync::Arc::clone(&read)))
            .unwrap();
        let answer = respond(&hooks, request).await;
        assert_eq!(answer.status, 413, "{answer:?}");
        let chunks = read.load(std::sync::atomic::Ordering::SeqCst);
        assert!(
            chunks <= 17,
            "read {chunks} chunks of 64 KiB past a 1 MiB limit"
        );
    }

    #[tokio::test]
    async fn another_path_or_method_is_not_a_webhook() {
        let (_dir, hooks) = hooks();
        let get = hyper::Request::get("/hooks/cat")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        assert_eq!(respond(&hooks, get).await.status, 405);
        let deeper = hyper::Request::post("/hooks/cat/x")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        assert_eq!(respond(&hooks, deeper).await.status, 404);
    }
}
