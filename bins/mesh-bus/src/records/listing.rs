//! Listing the records under a directory: one ordered consumer on its top-level directory's
//! bucket, filtered on the directory's subjects, delivering the last value of each key — on a
//! cluster, placed on the stream's leader ([`super::leader`]).

use super::layout::record_key;
use super::leader::consumer_on_leader;
use super::LIST_QUIET;
use async_nats::jetstream::kv;
use futures_util::StreamExt as _;
use mesh_records::record_store::is_key;

/// A record listed: its key, when the bus stored its value (seconds since the epoch), its
/// size, and the value when it was asked for.
pub(super) struct Listed {
    pub(super) key: String,
    pub(super) written: u64,
    pub(super) size: u64,
    pub(super) value: Vec<u8>,
}

/// Which subjects of a bucket a listing reads, and how their keys are record keys.
pub(super) struct Reading {
    /// The subject filter.
    pub(super) filter: String,
    /// What each record key starts with (its top-level directory and `/`; `""` in the top
    /// bucket).
    pub(super) key_prefix: String,
    /// Whether the bucket is the top one, where only a key of one token is a record (one of
    /// more is what a move stopped part way left).
    pub(super) top: bool,
}

/// The last value of every subject matching `reading`'s filter in `store`'s stream, each once,
/// by record key — an ordered consumer delivering the last message per subject (headers only
/// unless `values`), read until it has none pending. The consumer is read from its first
/// message on, each in turn: on a cluster, one the client made again part way (its server
/// lost) would start over on another copy of the stream, and the listing fails instead (and is
/// asked again); on a single server it goes on (the same and only copy) however often it is
/// made again, since each time it starts past the last message delivered.
pub(super) async fn list_subjects(
    js: &async_nats::jetstream::Context,
    store: &kv::Store,
    reading: Reading,
    values: bool,
) -> Result<Vec<Listed>, async_nats::Error> {
    let Reading {
        filter,
        key_prefix,
        top,
    } = reading;
    use async_nats::jetstream::consumer::{push, DeliverPolicy, ReplayPolicy};
    // A listing that hears nothing for LIST_QUIET (its consumer placed on a server gone, or a
    // message counted as pending removed before it was delivered) is asked again.
    let quiet = || -> async_nats::Error {
        format!(
            "the listing heard nothing for {LIST_QUIET:?}: its consumer was placed on a server \
             that is gone and the cluster does not know it yet, or the bucket's stream has no \
             leader — a cluster that lost its quorum"
        )
        .into()
    };
    let config = push::OrderedConfig {
        deliver_subject: js.client().new_inbox(),
        description: Some("mesh records listing".to_owned()),
        filter_subject: filter,
        headers_only: !values,
        replay_policy: ReplayPolicy::Instant,
        deliver_policy: DeliverPolicy::LastPerSubject,
        ..Default::default()
    };
    let consumer = consumer_on_leader(js, store, config, quiet).await?;
    let mut found: std::collections::BTreeMap<String, Option<(u64, u64, Vec<u8>)>> =
        std::collections::BTreeMap::new();
    if consumer.cached_info().num_pending == 0 {
        return Ok(Vec::new());
    }
    let mut messages = consumer.messages().await?;
    let prefix = store.prefix.clone();
    let mut next_sequence = 1;
    // On a single server the stream has one copy: a consumer the client made again part way
    // (a message its subscription could not keep while the server was busy, seen listing a
    // million records at 100,000 hosts — more than 16 times in one listing) goes on from the
    // stream sequence after the last one delivered, reading the same copy in the same order,
    // each key's newest last; so the listing goes on with it as often as it is made again,
    // each time further along the stream (a consumer that started before the last message
    // delivered would be another copy: the listing fails).
    let single = !super::leader::clustered(store);
    let mut last_stream_sequence = 0;
    let mut restarts = 0_usize;
    loop {
        let message = match tokio::time::timeout(LIST_QUIET, messages.next()).await {
            Ok(Some(message)) => message?,
            Ok(None) => return Err("the listing's consumer ended".into()),
            Err(_) => return Err(quiet()),
        };
        let info = message.info()?;
        if info.consumer_sequence != next_sequence {
            if single && info.consumer_sequence == 1 && info.stream_sequence > last_stream_sequence
            {
                restarts += 1;
                tracing::info!(stream = %store.stream_name, restarts,
                    at = info.stream_sequence,
                    "the listing's consumer was made again part way; the listing goes on");
            } else {
                return Err(format!(
                    "the listing's consumer of stream `{}` was made again part way (message {} \
                     where {next_sequence} was next): its server was lost",
                    store.stream_name, info.consumer_sequence
                )
                .into());
            }
        }
        last_stream_sequence = info.stream_sequence;
        next_sequence = info.consumer_sequence + 1;
        let pending = info.pending;
        let written = u64::try_from(info.published.unix_timestamp()).unwrap_or(0);
        let header = |name: &str| {
            message
                .headers
                .as_ref()
                .and_then(|headers| headers.get(name))
                .map(|value| value.as_str().to_owned())
        };
        let removed =
            header("KV-Operation").is_some_and(|op| matches!(op.as_str(), "DEL" | "PURGE"));
        // Headers only: the server says the value's size in `Nats-Msg-Size`.
        let size = match header("Nats-Msg-Size") {
            Some(size) if !values => size.parse().unwrap_or(0),
            Some(_) | None => message.payload.len() as u64,
        };
        // The layout's own key is no record, nor what is left of the older layouts (a key of
        // layout 1 removed when the bucket was moved: no bucket key holds a `/`; one of layout
        // 2 in the top bucket, under a directory).
        if let Some(key) = message
            .subject
            .strip_prefix(prefix.as_str())
            .filter(|raw| !(raw.contains('/') || (top && raw.contains('.'))))
            .map(|raw| format!("{key_prefix}{}", record_key(raw)))
            .filter(|key| is_key(key))
        {
            let value = (!removed).then(|| {
                (
                    written,
                    size,
                    if values {
                        message.payload.to_vec()
                    } else {
                        Vec::new()
                    },
                )
            });
            found.insert(key, value);
        }
        if pending == 0 {
            break;
        }
    }
    Ok(found
        .into_iter()
        .filter_map(|(key, value)| {
            value.map(|(written, size, value)| Listed {
                key,
                written,
                size,
                value,
            })
        })
        .collect())
}
