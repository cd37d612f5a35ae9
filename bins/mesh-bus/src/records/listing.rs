//! Listing the records under a directory: one ordered consumer on the bucket's stream,
//! filtered on the directory's subjects, delivering the last value of each key.

use super::layout::record_key;
use super::LIST_QUIET;
use crate::subjects::{bucket_key_subject, RECORDS_BUCKET};
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

/// The last value of every subject matching `filter` in the bucket's stream, each once, by
/// record key — an ordered consumer delivering the last message per subject (headers only
/// unless `values`), read until it has none pending.
pub(super) async fn list_subjects(
    js: &async_nats::jetstream::Context,
    store: &kv::Store,
    filter: String,
    values: bool,
) -> Result<Vec<Listed>, async_nats::Error> {
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
    let making = store.stream.create_consumer(push::OrderedConfig {
        deliver_subject: js.client().new_inbox(),
        description: Some("mesh records listing".to_owned()),
        filter_subject: filter,
        headers_only: !values,
        replay_policy: ReplayPolicy::Instant,
        deliver_policy: DeliverPolicy::LastPerSubject,
        ..Default::default()
    });
    let consumer = tokio::time::timeout(LIST_QUIET, making)
        .await
        .map_err(|_| quiet())??;
    let mut found: std::collections::BTreeMap<String, Option<(u64, u64, Vec<u8>)>> =
        std::collections::BTreeMap::new();
    if consumer.cached_info().num_pending == 0 {
        return Ok(Vec::new());
    }
    let mut messages = consumer.messages().await?;
    let prefix = bucket_key_subject(RECORDS_BUCKET, "");
    loop {
        let message = match tokio::time::timeout(LIST_QUIET, messages.next()).await {
            Ok(Some(message)) => message?,
            Ok(None) => return Err("the listing's consumer ended".into()),
            Err(_) => return Err(quiet()),
        };
        let info = message.info()?;
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
        // The layout's own key is no record, nor what is left of the older layout (a key of
        // it removed when the bucket was moved: no bucket key holds a `/`).
        if let Some(key) = message
            .subject
            .strip_prefix(prefix.as_str())
            .filter(|raw| !raw.contains('/'))
            .map(record_key)
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
