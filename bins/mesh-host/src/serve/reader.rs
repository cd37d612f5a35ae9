//! The node's declarations, read in the daemon's own loop: heard on a plain subscription of its
//! subject, and asked for from the declarations stream (its last one) whenever what was sent
//! might have been missed — when the subscription is made, and each time the connection comes
//! back.

use super::RETRY_DELAY;
use futures_util::StreamExt;
use mesh_bus::jetstream::{last_declaration, LastDeclaration};
use mesh_bus::{subjects, NatsBus};

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
/// Nothing sent to the node is missed for good: the subscription is registered at the server
/// before the stream is asked for its last declaration, so a declaration is either the last
/// one stored when asked or heard after; a connection lost and made again is followed by
/// another ask (what was published meanwhile was not heard). A send may be heard twice (live
/// and as the last one): [`Heard::send`] tells them apart.
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
            if let Some(at) = self.retry_at {
                tokio::time::sleep_until(at).await;
                self.retry_at = None;
            }
            let Some(subscription) = self.subscription.as_mut() else {
                self.subscribe().await;
                continue;
            };
            if self.ask {
                match last_declaration(&self.bus.jetstream(), &self.node).await {
                    Ok(last) => {
                        self.ask = false;
                        self.last_failure.clear();
                        if let Some(last) = last {
                            return last.into();
                        }
                    }
                    Err(error) => {
                        self.failed(format!(
                            "cannot ask the declarations stream for this node's last \
                             declaration; trying every second: {error}"
                        ));
                    }
                }
                continue;
            }
            tokio::select! {
                message = subscription.next() => match message {
                    Some(message) => {
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
                            "connected again: asking for the last declaration sent meanwhile");
                        self.ask = true;
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
