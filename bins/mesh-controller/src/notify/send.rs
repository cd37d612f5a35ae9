//! One receiver's lane: a bounded queue of bodies and the task that posts them, with retries
//! and exponential backoff for a bounded time, signing each body when the receiver has a key.
//!
//! # Guarantees
//! - [`Lane::push`] never waits: it takes a lock held only to push or pop, and a full queue
//!   drops its oldest body, counted.
//! - A receiver that does not answer delays only its own lane: each lane has its own task,
//!   and each attempt its own timeout.
//! - A body given up on after its attempts makes the receiver failing (a
//!   [`ReceiverProblem`]) until a later body is taken.
//! - Nothing shown names the receiver's URL, which may hold a token.

use super::config::Receiver;
use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The header that carries a body's signature: `sha256=` and the HMAC-SHA256 of the body
/// under the receiver's key, in hex.
pub(crate) const SIGNATURE_HEADER: &str = "X-Mesh-Signature";

/// How sending goes: the queue's bound, each attempt's timeout, the backoff between attempts
/// and when a body is given up on.
#[derive(Debug, Clone)]
pub(crate) struct SendOptions {
    /// Bodies a receiver's queue holds; beyond it the oldest is dropped.
    pub(crate) queue: usize,
    /// How long one attempt may take.
    pub(crate) attempt_timeout: Duration,
    /// The wait after the first failed attempt; doubled after each, up to `max_backoff`.
    pub(crate) first_backoff: Duration,
    /// The longest wait between attempts.
    pub(crate) max_backoff: Duration,
    /// How long a body is tried, from its first attempt.
    pub(crate) give_up_after: Duration,
    /// How many attempts a body has at most.
    pub(crate) max_attempts: u32,
}

impl Default for SendOptions {
    fn default() -> SendOptions {
        SendOptions {
            queue: 256,
            attempt_timeout: Duration::from_secs(10),
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            give_up_after: Duration::from_secs(15 * 60),
            max_attempts: 20,
        }
    }
}

/// A receiver that keeps failing: what `status` shows. It names the receiver, never its URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct ReceiverProblem {
    /// The receiver's name.
    pub(crate) receiver: String,
    /// When a body was first given up on since the last one taken (seconds since the epoch).
    pub(crate) since: u64,
    /// When the last was.
    pub(crate) at: u64,
    /// The bodies given up on since `since`.
    pub(crate) given_up: u64,
    /// The attempts the last one had.
    pub(crate) attempts: u32,
    /// Why its last attempt failed.
    pub(crate) last_error: String,
}

impl ReceiverProblem {
    /// The problem in one line, for a person.
    pub(crate) fn what(&self) -> String {
        format!(
            "notifications to {} fail: {} ({} attempts); {} given up since {}",
            self.receiver,
            self.last_error,
            self.attempts,
            self.given_up,
            mesh_store::clock::rfc3339(self.since)
        )
    }
}

/// One receiver's queue and what its task found.
#[derive(Debug)]
pub(crate) struct Lane {
    pub(crate) receiver: Receiver,
    capacity: usize,
    queue: Mutex<VecDeque<String>>,
    wake: tokio::sync::Notify,
    dropped: AtomicU64,
    problem: Mutex<Option<ReceiverProblem>>,
}

impl Lane {
    pub(crate) fn new(receiver: Receiver, capacity: usize) -> Lane {
        Lane {
            receiver,
            capacity: capacity.max(1),
            queue: Mutex::new(VecDeque::new()),
            wake: tokio::sync::Notify::new(),
            dropped: AtomicU64::new(0),
            problem: Mutex::new(None),
        }
    }

    /// Queues a body; a full queue drops its oldest. Never waits.
    pub(crate) fn push(&self, body: String) {
        {
            let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            if queue.len() >= self.capacity {
                queue.pop_front();
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            queue.push_back(body);
        }
        self.wake.notify_one();
    }

    /// Bodies dropped from a full queue.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The receiver's problem, while it keeps failing.
    pub(crate) fn problem(&self) -> Option<ReceiverProblem> {
        self.problem
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn pop(&self) -> Option<String> {
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front()
    }

    fn gave_up(&self, attempts: u32, last_error: String) {
        let now = mesh_store::clock::now();
        let mut problem = self.problem.lock().unwrap_or_else(PoisonError::into_inner);
        let (since, given_up) = problem.as_ref().map_or((now, 0), |p| (p.since, p.given_up));
        *problem = Some(ReceiverProblem {
            receiver: self.receiver.name.clone(),
            since,
            at: now,
            given_up: given_up + 1,
            attempts,
            last_error,
        });
    }

    fn taken(&self) {
        *self.problem.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// The lane's task: posts each body in turn, for as long as the lane lives.
pub(crate) async fn run(lane: Arc<Lane>, client: reqwest::Client, options: SendOptions) {
    loop {
        let Some(body) = lane.pop() else {
            lane.wake.notified().await;
            continue;
        };
        deliver(&lane, &client, &options, &body).await;
    }
}

async fn deliver(lane: &Lane, client: &reqwest::Client, options: &SendOptions, body: &str) {
    let started = Instant::now();
    let mut backoff = options.first_backoff;
    let mut attempts = 0;
    loop {
        attempts += 1;
        match post(&lane.receiver, client, options.attempt_timeout, body).await {
            Ok(()) => return lane.taken(),
            Err(why) => {
                let out_of_time = started.elapsed() + backoff >= options.give_up_after;
                if attempts >= options.max_attempts || out_of_time {
                    return lane.gave_up(attempts, why);
                }
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(options.max_backoff);
    }
}

/// One attempt: the body posted, signed when the receiver has a key; any answer but 2xx is a
/// failure. The error never names the URL.
async fn post(
    receiver: &Receiver,
    client: &reqwest::Client,
    timeout: Duration,
    body: &str,
) -> Result<(), String> {
    let mut request = client
        .post(&receiver.url)
        .timeout(timeout)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_owned());
    if let Some(key) = &receiver.key {
        request = request.header(SIGNATURE_HEADER, signature(key, body.as_bytes()));
    }
    let response = request.send().await.map_err(|e| {
        if e.is_timeout() {
            "no answer in time".to_owned()
        } else if e.is_connect() {
            "cannot connect".to_owned()
        } else {
            e.without_url().to_string()
        }
    })?;
    let status = response.status();
    match status.is_success() {
        true => Ok(()),
        false => Err(format!("answered {status}")),
    }
}

/// `sha256=` and the HMAC-SHA256 of `body` under `key`, in hex: the signature header's value.
pub(crate) fn signature(key: &[u8], body: &[u8]) -> String {
    // HMAC takes a key of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}
