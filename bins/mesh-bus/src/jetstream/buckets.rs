//! Key-value buckets: the stream each is kept in (the key-value convention's), made with the
//! mesh's copies and opened as it is when it exists.

use super::{make_stream_patiently, replicas_for, SINGLE_SERVER_REPLICAS};
use crate::nats::NatsError;
use crate::subjects;
use async_nats::jetstream::stream;
use async_nats::jetstream::{kv, Context};
use std::time::Duration;

/// How long a bucket remembers a put's message id (the server's default, said here): a put sent
/// again within it, after its server was lost before it answered, is not stored again.
pub const BUCKET_DEDUPLICATION_WINDOW: Duration = Duration::from_secs(120);

/// The stream configuration of key-value bucket `bucket`, as the key-value convention has it
/// (`KV_<bucket>` over `$KV.<bucket>.>`, direct gets, roll-ups, `history` values per key), one
/// copy (set `num_replicas` for more).
pub fn bucket_stream(bucket: &str, history: i64) -> stream::Config {
    stream::Config {
        name: subjects::bucket_stream_name(bucket),
        description: Some(format!("state bucket {bucket}")),
        subjects: vec![subjects::bucket_all(bucket)],
        max_messages_per_subject: history.clamp(1, 64),
        discard: stream::DiscardPolicy::New,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        num_replicas: SINGLE_SERVER_REPLICAS,
        // A put retried after its server was lost is recognised by its message id for this
        // long, and not stored twice (see crate::records).
        duplicate_window: BUCKET_DEDUPLICATION_WINDOW,
        storage: stream::StorageType::File,
        ..Default::default()
    }
}

/// Makes a key-value bucket (a module's state) keeping 8 values per key, with [`replicas_for`]
/// the server, or opens it as it is.
///
/// # Errors
/// As [`ensure_bucket_with`].
pub async fn ensure_bucket(js: &Context, bucket: &str) -> Result<kv::Store, NatsError> {
    ensure_bucket_with(js, bucket, replicas_for(&js.client(), None)).await
}

/// Makes a key-value bucket (a module's state) keeping 8 values per key with `replicas`
/// copies, or opens it as it is (one with fewer copies is said in the log, as in
/// [`ensure_stream`](super::ensure_stream)).
///
/// The bucket's stream is made here rather than by async-nats' `create_key_value`, which asks
/// the account's limits in a shape a 2.9 server does not answer.
///
/// # Errors
/// [`NatsError::Bucket`] when it can be neither opened nor made.
pub async fn ensure_bucket_with(
    js: &Context,
    bucket: &str,
    replicas: usize,
) -> Result<kv::Store, NatsError> {
    let mut config = bucket_stream(bucket, 8);
    config.num_replicas = replicas;
    open_or_make_bucket(js, bucket, config).await
}

/// Opens bucket `bucket`, or makes its stream from `config` first when there is none.
pub(crate) async fn open_or_make_bucket(
    js: &Context,
    bucket: &str,
    config: stream::Config,
) -> Result<kv::Store, NatsError> {
    let bucket_error = |source: async_nats::Error| NatsError::Bucket {
        bucket: bucket.to_owned(),
        source,
    };
    let wanted = config.num_replicas;
    let store = match js.get_key_value(bucket).await {
        Ok(store) => store,
        Err(_) => {
            make_stream_patiently(js, config)
                .await
                .map_err(bucket_error)?;
            js.get_key_value(bucket)
                .await
                .map_err(|source| bucket_error(source.into()))?
        }
    };
    let stream = subjects::bucket_stream_name(bucket);
    if let Ok(mut handle) = js.get_stream(&stream).await {
        if let Ok(info) = handle.info().await {
            let has = info.config.num_replicas.max(1);
            if has < wanted {
                tracing::warn!(
                    bucket,
                    replicas = has,
                    wanted,
                    "the bucket has fewer copies than the mesh keeps: `mesh-controller broker \
                     raise-replicas` raises it"
                );
            }
        }
    }
    Ok(store)
}
