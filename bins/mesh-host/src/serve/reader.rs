//! The node's declarations, read in the daemon's own loop: heard on a plain subscription of its
//! subject, and asked for from the declarations stream (its last one) whenever what was sent
//! might have been missed — when the subscription is made, at the start and each time the
//! connection comes back. A declaration heard before the ask is answered ends the ask.

use super::RETRY_DELAY;
use futures_util::StreamExt;
use mesh_bus::jetstream::{last_declaration, LastDeclaration};
use mesh_bus::{subjects, NatsBus, NatsError};

/// A declaration heard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Heard {
    /// Its bytes, as the controller published them.
    pub(super) payload: Vec<u8>,
    /// The send's message id (`Nats-Msg-Id`): the same send heard twice — live, and as the
    /// stream's last — carries the same one.
    pub(super) send: Option<String>,
}

impl From<LastDeclaration> for Heard {
    fn from(last: LastDeclaration) -> Heard {
        Heard {
            payload: last.payload.to_vec(),
            send: last.message_id,
        }
    }
}

/// The node's declarations, read in the daemon's own loop (no task or channel between the bus
/// and the apply). The subscription is made again after any failure, and the stream asked again
/// after a failed ask, at most once every [`RETRY_DELAY`].
///
/// # Guarantees
/// - Nothing sent to the node is missed for good: a subscription is made whenever what was sent
///   might have been missed — at the start, and each time the connection comes back — and
///   registered at the server before the stream is asked for its last declaration, so a
///   declaration is either the last one stored when asked or heard after.
/// - A declaration heard on that subscription before the ask is answered ends the ask: it was
///   sent after the subscription was made, after every declaration the ask is for. What is
///   sent is then applied whatever the ask does meanwhile (nats-server 2.9 answers a direct get
///   on a stream not made yet only by its timeout, 10 s; a stream without a leader answers
///   nothing).
/// - Never an older declaration after a newer one: what the subscription held before the
///   connection was lost is dropped with it (the ask gives the last one sent, at least as new).
/// - A send may be heard twice (live and as the last one): [`Heard::send`] tells them apart.
pub(super) struct DeclarationReader {
    bus: NatsBus,
    node: String,
    subscription: Option<async_nats::Subscriber>,
    connects: tokio::sync::watch::Receiver<u64>,
    /// The stream is to be asked for the last declaration.
    ask: bool,
    /// When to try again what failed (the subscription, or the ask).
    retry_at: Option<tokio::time::Instant>,
    /// The last failure said (the same failure every second is said once).
    last_failure: String,
}

impl DeclarationReader {
    /// A reader of `node`'s declarations, subscribed when first read.
    pub(super) fn new(bus: NatsBus, node: String) -> DeclarationReader {
        DeclarationReader {
            connects: bus.connects(),
            bus,
            node,
            subscription: None,
            ask: true,
            retry_at: None,
            last_failure: String::new(),
        }
    }

    /// The next declaration heard. Cancel-safe: dropped while waiting, nothing is lost (the
    /// subscription buffers; an ask under way is asked again; a retry keeps its time).
    pub(super) async fn next(&mut self) -> Heard {
        loop {
            let Some(subscription) = self.subscription.as_mut() else {
                if let Some(at) = self.retry_at {
                    tokio::time::sleep_until(at).await;
                    self.retry_at = None;
                }
                self.subscribe().await;
                continue;
            };
            let (ask, retry_at, bus, node) = (self.ask, self.retry_at, &self.bus, &self.node);
            let asked = async move {
                if !ask {
                    return std::future::pending().await;
                }
                if let Some(at) = retry_at {
                    tokio::time::sleep_until(at).await;
                }
                ask_last(bus, node).await
            };
            tokio::select! {
                asked = asked => {
                    self.retry_at = None;
                    match asked {
                        Ok(last) => {
                            self.ask = false;
                            self.last_failure.clear();
                            if let Some(last) = last {
                                return last.into();
                            }
                        }
                        Err(error) => self.failed(format!(
                            "cannot ask the declarations stream for this node's last \
                             declaration; trying every second: {error}"
                        )),
                    }
                }
                message = subscription.next() => match message {
                    Some(message) => {
                        if self.ask {
                            tracing::info!(node = %self.node,
                                "a declaration heard before the stream answered the ask for \
                                 the last one: the ask is not needed");
                            self.ask = false;
                            self.retry_at = None;
                            self.last_failure.clear();
                        }
                        return Heard {
                            send: message
                                .headers
                                .as_ref()
                                .and_then(|headers| {
                                    headers.get(async_nats::header::NATS_MESSAGE_ID)
                                })
                                .map(|id| id.as_str().to_owned()),
                            payload: message.payload.to_vec(),
                        };
                    }
                    None => {
                        self.subscription = None;
                        self.failed("the declarations subscription ended; making it again".into());
                    }
                },
                changed = self.connects.changed() => {
                    if changed.is_ok() {
                        tracing::info!(node = %self.node,
                            "connected again: subscribing anew and asking for the last \
                             declaration sent meanwhile");
                        // What it holds came before the connection was lost: the ask gives
                        // the last one sent, at least as new.
                        self.subscription = None;
                        self.retry_at = None;
                    }
                }
            }
        }
    }

    /// Subscribes to the node's subject and waits until the server has it (so the ask that
    /// follows misses nothing published after).
    async fn subscribe(&mut self) {
        let subject = subjects::declaration(&self.node);
        let subscribed = match self.bus.client().subscribe(subject.clone()).await {
            Ok(subscription) => self.bus.round_trip().await.map(|()| subscription),
            Err(error) => {
                return self.failed(format!(
                    "cannot subscribe to `{subject}`; trying every second: {error}"
                ))
            }
        };
        match subscribed {
            Ok(subscription) => {
                tracing::info!(node = %self.node, %subject, "reading declarations");
                self.subscription = Some(subscription);
                self.ask = true;
                // A connection that came back before now is one this subscription followed.
                self.connects.borrow_and_update();
                self.last_failure.clear();
            }
            Err(error) => self.failed(format!(
                "the subscription to `{subject}` was not confirmed by the server; trying every \
                 second: {error}"
            )),
        }
    }

    fn failed(&mut self, failure: String) {
        if failure != self.last_failure {
            tracing::warn!(node = %self.node, "{failure}");
            self.last_failure = failure;
        }
        self.retry_at = Some(tokio::time::Instant::now() + RETRY_DELAY);
    }
}

/// The stream asked for `node`'s last declaration; never answered while the fail point
/// [`crate::ASK_UNANSWERED`] is set (tests: a bus that does not answer the ask).
async fn ask_last(bus: &NatsBus, node: &str) -> Result<Option<LastDeclaration>, NatsError> {
    #[cfg(feature = "fail-points")]
    {
        let unanswered = (|| {
            fail::fail_point!(crate::ASK_UNANSWERED, |_| true);
            false
        })();
        if unanswered {
            std::future::pending::<()>().await;
        }
    }
    last_declaration(&bus.jetstream(), node).await
}
