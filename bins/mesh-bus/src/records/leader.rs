//! Reads answered by a bucket's stream leader. On a cluster, a bucket's stream has copies on
//! several servers, and a copy on a server that was just restarted is still catching up: a
//! direct get (which any copy at least 90% caught up may answer) or a listing's consumer (which
//! the cluster places on any copy) would read that copy's older state — a record missing, or
//! an older value of it — and say nothing. The records are read from the leader instead, which
//! holds every write the bucket acknowledged.

use super::LIST_QUIET;
use async_nats::jetstream::consumer::push;
use async_nats::jetstream::consumer::Consumer;
use async_nats::jetstream::kv;
use async_nats::jetstream::stream::LastRawMessageErrorKind;

/// How many times a listing's consumer is made again when the cluster placed it on a copy of
/// its stream other than the leader. The cluster places a consumer of one copy at random among
/// the servers up: with three, the chance of missing the leader this many times is (2/3)^16,
/// under 0.2%, and the read is then asked again whole (within the records' retry limit).
const PLACEMENTS: usize = 16;

/// Whether `store`'s server is one of a cluster (its stream's copies may then differ).
pub(super) fn clustered(store: &kv::Store) -> bool {
    store
        .stream
        .cached_info()
        .cluster
        .as_ref()
        .is_some_and(|cluster| cluster.name.is_some())
}

/// The last entry of `key` in `store` (a removal's too), `None` when it has none: on a cluster
/// from the stream's leader, on a single server as the key-value convention reads it (a direct
/// get).
pub(super) async fn last_entry(
    store: &kv::Store,
    key: &str,
) -> Result<Option<kv::Entry>, async_nats::Error> {
    if !clustered(store) {
        return Ok(store.entry(key).await?);
    }
    let subject = format!("{}{key}", store.prefix);
    match store.stream.get_last_raw_message_by_subject(&subject).await {
        Ok(message) => {
            let operation = match message
                .headers
                .get("KV-Operation")
                .map(|value| value.as_str())
            {
                Some("DEL") => kv::Operation::Delete,
                Some("PURGE") => kv::Operation::Purge,
                _ => kv::Operation::Put,
            };
            Ok(Some(kv::Entry {
                bucket: store.name.clone(),
                key: key.to_owned(),
                value: message.payload,
                revision: message.sequence,
                delta: 0,
                created: message.time,
                operation,
                seen_current: false,
            }))
        }
        Err(error) if error.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
        Err(error) => Err(error.into()),
    }
}

/// The value `key` holds in `store`, `None` when it has none or was removed (see
/// [`last_entry`]).
pub(super) async fn last_value(
    store: &kv::Store,
    key: &str,
) -> Result<Option<bytes::Bytes>, async_nats::Error> {
    Ok(last_entry(store, key)
        .await?
        .filter(|entry| entry.operation == kv::Operation::Put)
        .map(|entry| entry.value))
}

/// An ordered consumer of `store`'s stream made from `config`, placed on the stream's leader:
/// on a cluster, one placed on another copy is removed and made again, up to [`PLACEMENTS`]
/// times.
pub(super) async fn consumer_on_leader(
    js: &async_nats::jetstream::Context,
    store: &kv::Store,
    config: push::OrderedConfig,
    quiet: impl Fn() -> async_nats::Error,
) -> Result<Consumer<push::OrderedConfig>, async_nats::Error> {
    let mut placed = Vec::new();
    for _ in 0..PLACEMENTS {
        let consumer =
            tokio::time::timeout(LIST_QUIET, store.stream.create_consumer(config.clone()))
                .await
                .map_err(|_| quiet())??;
        let host = consumer
            .cached_info()
            .cluster
            .as_ref()
            .filter(|cluster| cluster.name.is_some())
            .and_then(|cluster| cluster.leader.clone());
        let Some(host) = host else {
            // A single server: its stream has one copy.
            return Ok(consumer);
        };
        let stream = tokio::time::timeout(LIST_QUIET, js.get_stream(&store.stream_name))
            .await
            .map_err(|_| quiet())??;
        let leader = stream
            .cached_info()
            .cluster
            .as_ref()
            .and_then(|cluster| cluster.leader.clone());
        if leader.as_deref() == Some(host.as_str()) {
            return Ok(consumer);
        }
        // Removed at once; one whose removal is lost goes by itself once inactive.
        let name = consumer.cached_info().name.clone();
        let _ = tokio::time::timeout(LIST_QUIET, store.stream.delete_consumer(&name)).await;
        placed.push(format!(
            "{host} (leader {})",
            leader.as_deref().unwrap_or("none")
        ));
    }
    Err(format!(
        "the listing's consumer of stream `{}` was placed {PLACEMENTS} times on a copy other \
         than the stream's leader, which may not have caught up: on {}",
        store.stream_name,
        placed.join(", ")
    )
    .into())
}
