//! Notifications sent: the notices mesh-plan's `Notifier` decides, posted to the receivers of
//! the home's `notify.toml`, off the caller's path.
//!
//! Start at [`Notifications::start`] (the receivers read by [`NotifyConfig::read`]) and
//! [`Notifications::send`]: the caller hands over the notices its `Notifier` returned, each is
//! filtered per receiver, written in the receiver's format (mesh-plan's `notify::format`),
//! signed when the receiver has a key, and queued; a task per receiver posts them, with retries
//! and backoff for a bounded time ([`SendOptions`]). [`Notifications::problems`] names the
//! receivers that keep failing, for `status`.
//!
//! # Guarantees
//! - `send` never waits on a receiver: it renders and queues, and returns. A full queue drops
//!   its oldest body and counts it ([`Notifications::dropped`]); a hung receiver delays only its
//!   own queue.
//! - A body is signed over its exact bytes: `X-Mesh-Signature: sha256=<hex HMAC-SHA256>`.
//! - No secret value is in a body: notices hold names, counts, digests and hosts' reasons; the
//!   signing key is only in the header's HMAC. A receiver's URL (which may hold a token) is in
//!   no problem and no `Debug`.
//!
//! What it must never do: block or slow a rollout, or send what the `Notifier` did not decide.
//!
//! Not yet called by the daemon: it is built here as a component, wired in by the daemon next.
#![allow(dead_code, unused_imports)]

mod config;
mod send;

#[cfg(test)]
mod tests;

pub(crate) use config::{NotifyConfig, NotifyConfigError, ReceiverKind, NOTIFY_FILE};
pub(crate) use send::{ReceiverProblem, SendOptions, SIGNATURE_HEADER};

use mesh_model::selector::Labels;
use mesh_plan::notify::format::{chat_body, webhook_body, Origin};
use mesh_plan::notify::Notice;
use send::Lane;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The receivers and their tasks. Dropping it stops the tasks (what is queued is not sent).
#[derive(Debug)]
pub(crate) struct Notifications {
    source: String,
    status_url: Option<String>,
    lanes: Vec<Arc<Lane>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Notifications {
    /// Starts a task per receiver on the current tokio runtime.
    ///
    /// # Errors
    /// [`NotifyConfigError::Client`]: the HTTP client cannot be made (its TLS roots).
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub(crate) fn start(
        config: NotifyConfig,
        options: SendOptions,
    ) -> Result<Notifications, NotifyConfigError> {
        let client = reqwest::Client::builder()
            .connect_timeout(options.attempt_timeout)
            .build()
            .map_err(|e| NotifyConfigError::Client {
                reason: e.without_url().to_string(),
            })?;
        let lanes: Vec<Arc<Lane>> = config
            .receivers
            .into_iter()
            .map(|receiver| Arc::new(Lane::new(receiver, options.queue)))
            .collect();
        let tasks = lanes
            .iter()
            .map(|lane| tokio::spawn(send::run(lane.clone(), client.clone(), options.clone())))
            .collect();
        Ok(Notifications {
            source: config.source,
            status_url: config.status_url,
            lanes,
            tasks,
        })
    }

    /// Queues each notice for every receiver whose filter takes it (narrowed to the nodes it
    /// selects; `labels` are the nodes' labels). Never waits on a receiver.
    pub(crate) fn send(&self, notices: &[Notice], labels: &BTreeMap<String, Labels>) {
        let origin = Origin {
            source: &self.source,
            status_url: self.status_url.as_deref(),
        };
        for lane in &self.lanes {
            for notice in notices {
                let Some(notice) = lane.receiver.filter.admit(notice, labels) else {
                    continue;
                };
                let body = match lane.receiver.kind {
                    ReceiverKind::Webhook => webhook_body(&notice, &origin),
                    ReceiverKind::Slack => chat_body(&notice, &origin),
                };
                lane.push(body);
            }
        }
    }

    /// The receivers that keep failing: each gave up on a body since it last took one.
    pub(crate) fn problems(&self) -> Vec<ReceiverProblem> {
        self.lanes
            .iter()
            .filter_map(|lane| lane.problem())
            .collect()
    }

    /// Bodies dropped from full queues, by receiver (those that dropped none left out).
    pub(crate) fn dropped(&self) -> BTreeMap<String, u64> {
        self.lanes
            .iter()
            .map(|lane| (lane.receiver.name.clone(), lane.dropped()))
            .filter(|(_, dropped)| *dropped > 0)
            .collect()
    }
}

impl Drop for Notifications {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
