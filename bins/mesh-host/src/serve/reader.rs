//! The node's declaration consumer, read in the daemon's own loop.

use super::RETRY_DELAY;
use async_nats::jetstream::consumer::PullConsumer;
use futures_util::StreamExt;
use mesh_bus::subjects::{declaration_consumer, DECLARATIONS_STREAM};

/// The node's declaration consumer, read in the daemon's own loop (no task or channel between
/// the bus and the apply); it is opened again after any failure — a bus restart, a consumer not
/// made yet — at most once every [`RETRY_DELAY`].
pub(super) struct DeclarationReader {
    js: async_nats::jetstream::Context,
    node: String,
    messages: Option<async_nats::jetstream::consumer::pull::Stream>,
    /// When to try opening the consumer again after a failure.
    reopen_at: Option<tokio::time::Instant>,
    /// The last failure said (the same failure every second is said once).
    last_failure: String,
}

impl DeclarationReader {
    /// A reader of `node`'s consumer, opened when first read.
    pub(super) fn new(js: async_nats::jetstream::Context, node: String) -> DeclarationReader {
        DeclarationReader {
            js,
            node,
            messages: None,
            reopen_at: None,
            last_failure: String::new(),
        }
    }

    /// The next declaration message. Cancel-safe: dropped while waiting, nothing is lost (the
    /// message stream buffers; an open under way is started again; a retry keeps its time).
    pub(super) async fn next(&mut self) -> async_nats::jetstream::Message {
        loop {
            let Some(messages) = self.messages.as_mut() else {
                if let Some(at) = self.reopen_at {
                    tokio::time::sleep_until(at).await;
                }
                self.open().await;
                continue;
            };
            match messages.next().await {
                Some(Ok(message)) => return message,
                Some(Err(error)) => self.failed(format!(
                    "the declaration consumer failed, opening it again: {error}"
                )),
                None => self.failed("the declaration consumer ended; opening it again".into()),
            }
        }
    }

    async fn open(&mut self) {
        let name = declaration_consumer(&self.node);
        let consumer: PullConsumer = match self
            .js
            .get_consumer_from_stream(&name, DECLARATIONS_STREAM)
            .await
        {
            Ok(consumer) => consumer,
            Err(error) => {
                return self.failed(format!(
                    "cannot open the declaration consumer `{name}` (the controller makes it \
                     on its first send); trying every second: {error}"
                ))
            }
        };
        if mesh_bus::jetstream::awaits_leader(consumer.cached_info()) {
            // A pull sent to it now is lost (nothing answers it, not even with a heartbeat),
            // and would be found out only when the heartbeats are missed, 30 s later: seen on
            // a 2.9 cluster right after the controller made the consumer.
            return self.failed(format!(
                "the declaration consumer `{name}` has no leader yet (its cluster is electing \
                 one); trying every second"
            ));
        }
        match consumer.messages().await {
            Ok(messages) => {
                tracing::info!(node = %self.node, consumer = %name, "reading declarations");
                self.messages = Some(messages);
                self.reopen_at = None;
                self.last_failure.clear();
            }
            Err(error) => self.failed(format!(
                "cannot read the declaration consumer `{name}`; trying every second: {error}"
            )),
        }
    }

    fn failed(&mut self, failure: String) {
        if failure != self.last_failure {
            tracing::warn!(node = %self.node, "{failure}");
            self.last_failure = failure;
        }
        self.messages = None;
        self.reopen_at = Some(tokio::time::Instant::now() + RETRY_DELAY);
    }
}
