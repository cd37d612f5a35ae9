//! JetStream: the mesh's streams, durable consumers made from now, key-value buckets, and merge
//! announcements heard once.
//!
//! Start at [`ensure_streams`] (the controller runs it on start), then
//! [`ensure_consumer_from_now`] for every durable consumer on a history stream (the rule “A durable
//! consumer starts from now”, ), and [`consumer_reset`] for `mesh-controller broker consumer-reset
//! STREAM CONSUMER`. Declarations travel as [`publish_declaration`] / [`last_declaration`]
//! (`declarations`), reports are read by a [`ReportReader`] (`reports`), merges as
//! [`publish_merge`] / [`MergeListener`] (`merges`); key-value buckets are made by
//! [`ensure_bucket`] (`buckets`).
//!
//! What it must never do: re-make a consumer that exists (it would lose its place), make one with
//! the server's default deliver policy (*all*: a week of history replayed), or reset a work
//! queue's consumer (what it holds pending is work). One `filter_subject` per consumer (2.9
//! ignores `filter_subjects`; no mesh consumer needs two), and a reset is read, delete, create
//! on every server: 2.14's reset API (NATS's own ADR-60, in
//! nats-io/nats-architecture-and-design) refuses to move a deliver-*new* consumer's floor
//! (`invalid reset: not allowed`, 10204, on 2.15.1) and only resets it to its ack floor, which
//! keeps the backlog a reset is for.
//!
//! Replicas: streams and buckets are made with [`replicas_for`] copies (1 on a single server,
//! 3 on a cluster); one found with fewer is said in the log and listed by
//! [`replica_shortfalls`], and [`raise_replicas`] raises it.

mod buckets;
mod declarations;
mod merges;
mod reports;

pub(crate) use buckets::open_or_make_bucket;
pub use buckets::{bucket_stream, ensure_bucket, ensure_bucket_with, BUCKET_DEDUPLICATION_WINDOW};
pub use declarations::{
    declarations_stream, last_declaration, publish_declaration, DeclarationPublished,
    LastDeclaration,
};
pub use merges::{
    merge_consumer, merges_waiting, publish_merge, HeardMerge, MergeAnnouncement, MergeListener,
    MergePublished, MergesWaiting, MERGES_REMEMBERED,
};
pub use reports::{ReportReader, Stored};

use crate::nats::NatsError;
use crate::subjects::{self, DECLARATIONS_STREAM, EVENTS_STREAM, REPORTS_STREAM};
use async_nats::jetstream::consumer::{self, pull, DeliverPolicy, PullConsumer};
use async_nats::jetstream::stream::{self, RetentionPolicy};
use async_nats::jetstream::{Context, ErrorCode};
use futures_util::StreamExt;
use std::time::Duration;

/// How long the events stream remembers a merge's message id: a merge announced again within
/// it is not stored again (the incident behind “A merge heard twice makes one plan” saw repeats 0.5
/// to 30 seconds apart).
pub const MERGE_DEDUPLICATION_WINDOW: Duration = Duration::from_secs(60 * 60);

/// The reports stream: the last 64 reports of each node, for at most a week.
pub fn reports_stream() -> stream::Config {
    stream::Config {
        name: REPORTS_STREAM.to_owned(),
        description: Some("what each node last did".to_owned()),
        subjects: vec![subjects::ALL_REPORTS.to_owned()],
        max_messages_per_subject: 64,
        max_age: Duration::from_secs(7 * 24 * 60 * 60),
        storage: stream::StorageType::File,
        ..Default::default()
    }
}

/// The events stream: merges and build outcomes for a week, merges deduplicated by message id
/// over [`MERGE_DEDUPLICATION_WINDOW`].
pub fn events_stream() -> stream::Config {
    stream::Config {
        name: EVENTS_STREAM.to_owned(),
        description: Some("merges and builds".to_owned()),
        subjects: vec![subjects::ALL_EVENTS.to_owned()],
        max_age: Duration::from_secs(7 * 24 * 60 * 60),
        duplicate_window: MERGE_DEDUPLICATION_WINDOW,
        storage: stream::StorageType::File,
        ..Default::default()
    }
}

/// How many copies of each stream and bucket the mesh keeps on a server that reports no cluster.
pub const SINGLE_SERVER_REPLICAS: usize = 1;

/// How many copies of each stream and bucket the mesh keeps, by default, on a cluster: R3
/// survives one server lost (R5, given with `wanted`, two).
pub const CLUSTER_REPLICAS: usize = 3;

/// How many copies of each stream and bucket to make on the server `client` is connected to:
/// `wanted` when given (`--bus-replicas N`), else [`CLUSTER_REPLICAS`] when the server reports
/// a cluster (its INFO's `cluster`) and [`SINGLE_SERVER_REPLICAS`] when it does not.
pub fn replicas_for(client: &async_nats::Client, wanted: Option<usize>) -> usize {
    wanted.unwrap_or_else(|| {
        if client.server_info().cluster.is_some() {
            CLUSTER_REPLICAS
        } else {
            SINGLE_SERVER_REPLICAS
        }
    })
}

/// Makes the mesh's three streams, or opens them as they are, with [`replicas_for`] the server
/// (1 on a single server, 3 on a cluster).
///
/// # Guarantees
/// As [`ensure_streams_with`].
///
/// # Errors
/// As [`ensure_streams_with`].
pub async fn ensure_streams(js: &Context) -> Result<(), NatsError> {
    ensure_streams_with(js, replicas_for(&js.client(), None)).await
}

/// Makes the mesh's three streams with `replicas` copies each, or opens them as they are.
///
/// # Guarantees
/// Idempotent: a stream that exists is left with its configuration (an operator's change to
/// it stands). One with fewer copies than `replicas` is said in the log; it is raised only by
/// [`raise_replicas`], a person's act ([`replica_shortfalls`] lists them).
///
/// # Errors
/// [`NatsError::Stream`] naming the stream that could not be made or opened (on a cluster of
/// fewer servers than `replicas`, the server says it has not enough of them).
pub async fn ensure_streams_with(js: &Context, replicas: usize) -> Result<(), NatsError> {
    for mut config in [declarations_stream(), reports_stream(), events_stream()] {
        config.num_replicas = replicas;
        ensure_stream(js, config).await?;
    }
    Ok(())
}

/// Makes a stream, or opens it as it is (saying in the log when it has fewer copies than
/// `config` asks).
///
/// # Errors
/// [`NatsError::Stream`] when it can be neither made nor opened.
pub async fn ensure_stream(
    js: &Context,
    config: stream::Config,
) -> Result<stream::Stream, NatsError> {
    let name = config.name.clone();
    let wanted = config.num_replicas;
    let allow_direct = config.allow_direct;
    let stream = make_stream_patiently(js, config)
        .await
        .map_err(|source| NatsError::Stream {
            stream: name.clone(),
            source,
        })?;
    let stream = allow_direct_gets(js, stream, allow_direct).await;
    let has = stream.cached_info().config.num_replicas.max(1);
    if has < wanted {
        tracing::warn!(
            stream = %name,
            replicas = has,
            wanted,
            "the stream has fewer copies than the mesh keeps: `mesh-controller broker raise-replicas` \
             raises it"
        );
    }
    Ok(stream)
}

/// How long making a stream (a bucket's too) is tried again while the cluster answers that
/// JetStream is "temporarily unavailable" (10008), or does not answer in time: a cluster just
/// formed, or one busy, whose new stream has not yet elected its leader.
pub const STREAM_MAKE_PATIENCE: Duration = Duration::from_secs(30);

/// Whether `error` is JetStream's 10008, "JetStream system temporarily unavailable": what a
/// cluster answers while a stream (or its metadata) has no leader.
pub(crate) fn temporarily_unavailable(error: &dyn std::fmt::Display) -> bool {
    error.to_string().contains("temporarily unavailable")
}

/// Makes (or opens) the stream of `config`, tried again for up to [`STREAM_MAKE_PATIENCE`]
/// while the server answers "temporarily unavailable", or does not answer within the client's
/// request timeout (a busy cluster still electing the new stream's leader: a make that did take
/// is found made by the next try, which opens it); any other refusal is returned at once.
pub(crate) async fn make_stream_patiently(
    js: &Context,
    config: stream::Config,
) -> Result<stream::Stream, async_nats::Error> {
    use async_nats::jetstream::context::CreateStreamErrorKind;
    let until = tokio::time::Instant::now() + STREAM_MAKE_PATIENCE;
    loop {
        match js.get_or_create_stream(config.clone()).await {
            Ok(stream) => return Ok(stream),
            Err(error)
                if (temporarily_unavailable(&error)
                    || error.kind() == CreateStreamErrorKind::TimedOut)
                    && tokio::time::Instant::now() < until =>
            {
                tracing::info!(stream = %config.name, %error,
                    "the bus has no leader yet for the new stream, or did not answer; trying again");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// `stream` made to answer direct gets when `wanted` and it does not: the declarations stream an
/// earlier mesh made (its hosts read durable consumers; this mesh's read their last declaration
/// by a direct get). Changed once, said in the log; a server that refuses leaves it as it is,
/// said in the log (hosts then cannot read what was sent while they were away).
async fn allow_direct_gets(js: &Context, stream: stream::Stream, wanted: bool) -> stream::Stream {
    if !wanted || stream.cached_info().config.allow_direct {
        return stream;
    }
    let mut config = stream.cached_info().config.clone();
    let name = config.name.clone();
    config.allow_direct = true;
    match js.update_stream(&config).await {
        Ok(_) => tracing::info!(stream = %name,
            "the stream made by an earlier mesh now answers direct gets: hosts read their last \
             declaration by one"),
        Err(error) => tracing::warn!(stream = %name, %error,
            "the stream could not be made to answer direct gets: a host cannot read what was \
             sent to it while it was away"),
    }
    stream
}

/// A stream or bucket of the mesh with fewer copies than it should have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaShortfall {
    /// The stream (a bucket's is `KV_<bucket>`).
    pub stream: String,
    /// How many copies it has.
    pub replicas: usize,
    /// How many it should have.
    pub wanted: usize,
}

/// Whether a stream is one the mesh makes: its three streams and its key-value buckets (the
/// records and every module's state).
pub fn is_mesh_stream(name: &str) -> bool {
    [DECLARATIONS_STREAM, REPORTS_STREAM, EVENTS_STREAM].contains(&name)
        || name.starts_with(&subjects::bucket_stream_name(""))
}

/// Every stream of the mesh ([`is_mesh_stream`]) on the server with fewer than `wanted`
/// copies, by name.
///
/// # Errors
/// [`NatsError::Stream`] when the streams cannot be listed.
pub async fn replica_shortfalls(
    js: &Context,
    wanted: usize,
) -> Result<Vec<ReplicaShortfall>, NatsError> {
    let mut streams = js.streams();
    let mut short = Vec::new();
    while let Some(info) = streams.next().await {
        let info = info.map_err(|source| NatsError::Stream {
            stream: "(listing the streams)".to_owned(),
            source: source.into(),
        })?;
        let replicas = info.config.num_replicas.max(1);
        if is_mesh_stream(&info.config.name) && replicas < wanted {
            short.push(ReplicaShortfall {
                stream: info.config.name.clone(),
                replicas,
                wanted,
            });
        }
    }
    short.sort_by(|a, b| a.stream.cmp(&b.stream));
    Ok(short)
}

/// What [`raise_replicas`] found and left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicasRaised {
    /// The copies it had.
    pub before: usize,
    /// The copies it has now (`before` when it already had as many as asked).
    pub after: usize,
}

/// Raises stream `stream` (a bucket's is `KV_<bucket>`) to `replicas` copies, every other
/// setting kept (`mesh-controller broker raise-replicas`, a person's act as a consumer reset is).
///
/// # Guarantees
/// - Never lowers: a stream with as many copies or more is left as it is.
/// - The new copies are made by the servers from the existing one, while the stream goes on
///   taking writes; this returns once the server has taken the new configuration, not once the
///   copies have caught up (its info's cluster replicas say when they are current).
///
/// # Errors
/// [`NatsError::Stream`] when the stream cannot be read or the server refuses the change (on
/// a cluster of fewer servers than `replicas`, it says it has not enough of them).
pub async fn raise_replicas(
    js: &Context,
    stream: &str,
    replicas: usize,
) -> Result<ReplicasRaised, NatsError> {
    let stream_error = |source: async_nats::Error| NatsError::Stream {
        stream: stream.to_owned(),
        source,
    };
    let mut handle = open_stream(js, stream).await?;
    let info = handle
        .info()
        .await
        .map_err(|source| stream_error(source.into()))?;
    let before = info.config.num_replicas.max(1);
    if before >= replicas {
        return Ok(ReplicasRaised {
            before,
            after: before,
        });
    }
    let mut config = info.config.clone();
    config.num_replicas = replicas;
    let updated = js
        .update_stream(config)
        .await
        .map_err(|source| stream_error(source.into()))?;
    Ok(ReplicasRaised {
        before,
        after: updated.config.num_replicas.max(1),
    })
}

/// Whether [`ensure_consumer_from_now`] made the consumer or found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    /// It did not exist: it was made from now.
    Made,
    /// It existed: it was kept as it was, where it was.
    Kept,
}

/// Makes a durable pull consumer **from now**, or opens the one that exists, unchanged (the rule “A
/// durable consumer starts from now”).
///
/// `config` must name the consumer (`durable_name`); its `deliver_policy` is set to
/// [`DeliverPolicy::New`] whatever it said, so the consumer never starts with the server's
/// default (*all*, the incident behind “A durable consumer starts from now”). Give it one
/// `filter_subject`: 2.9 ignores `filter_subjects`.
///
/// # Guarantees
/// - A consumer that exists is never re-made: it keeps its place and its configuration, even
///   where they differ from `config` (a stuck one is for [`consumer_reset`], a person's act).
/// - A consumer made here holds none of the stream's past and does hold the next message.
///
/// # Errors
/// [`NatsError::ConsumerName`] without a durable name; [`NatsError::Stream`] when the stream
/// cannot be opened; [`NatsError::Consumer`] when the consumer can be neither read nor made.
pub async fn ensure_consumer_from_now(
    js: &Context,
    stream: &str,
    mut config: pull::Config,
) -> Result<(PullConsumer, Ensured), NatsError> {
    let Some(name) = config.durable_name.clone() else {
        return Err(NatsError::ConsumerName {
            stream: stream.to_owned(),
        });
    };
    config.deliver_policy = DeliverPolicy::New;
    let consumer_error = |source: async_nats::Error| NatsError::Consumer {
        stream: stream.to_owned(),
        consumer: name.clone(),
        source,
    };
    // Asked of the consumer itself, not through the stream's info first: one request when it
    // exists, two when it is made (the stream's info was a third, and at a fleet's first send
    // there is one of these a node).
    match js
        .get_consumer_from_stream::<pull::Config, _, _>(&name, stream)
        .await
    {
        Ok(consumer) => Ok((consumer, Ensured::Kept)),
        Err(error) => match jetstream_code(&error) {
            Some(code) if code == ErrorCode::CONSUMER_NOT_FOUND => {
                let consumer = js
                    .create_consumer_on_stream(config, stream)
                    .await
                    .map_err(|source| consumer_error(source.into()))?;
                Ok((consumer, Ensured::Made))
            }
            Some(code) if code == ErrorCode::STREAM_NOT_FOUND => Err(NatsError::Stream {
                stream: stream.to_owned(),
                source: error.into(),
            }),
            Some(_) | None => Err(consumer_error(error.into())),
        },
    }
}

/// The JetStream error code of a consumer request's error, when the server answered with one.
fn jetstream_code(error: &async_nats::jetstream::stream::ConsumerError) -> Option<ErrorCode> {
    match error.kind() {
        async_nats::jetstream::stream::ConsumerErrorKind::JetStream(error) => {
            Some(error.error_code())
        }
        _ => None,
    }
}

async fn open_stream(js: &Context, stream: &str) -> Result<stream::Stream, NatsError> {
    js.get_stream(stream)
        .await
        .map_err(|source| NatsError::Stream {
            stream: stream.to_owned(),
            source: source.into(),
        })
}

/// What [`consumer_reset`] found and left.
#[derive(Debug, Clone)]
pub struct ConsumerReset {
    /// The consumer as it was: its configuration, place and backlog.
    pub before: consumer::Info,
    /// The consumer as it is now: the same configuration but deliver policy *new*, nothing
    /// pending.
    pub after: consumer::Info,
}

/// Re-makes a stuck durable consumer **from now**, its configuration otherwise kept
/// (`mesh-controller broker consumer-reset STREAM CONSUMER`, the rule “A durable consumer starts
/// from now”).
///
/// The consumer's configuration is read, the consumer deleted, and made again with deliver
/// policy *new* (any start sequence or time dropped). 2.9 has no reset API; the one of 2.14
/// and later cannot move a deliver-*new* consumer's floor to now (see the module's doc), so
/// this is the way on every server.
///
/// # Guarantees
/// - Every setting but the deliver policy is as it was (filter, ack wait, max deliver, max ack
///   pending, description, …).
/// - Afterwards nothing is pending: what the stream held is not delivered; the next message is.
/// - A work queue's consumer is never touched.
/// - A client still holding a message of the old consumer cannot acknowledge it into the new
///   one: the process reading the consumer (the controller) should be restarted after a reset.
///
/// # Errors
/// [`NatsError::WorkQueue`] for a consumer on a work-queue stream; [`NatsError::Stream`] when
/// the stream cannot be read; [`NatsError::Consumer`] when the consumer cannot be read, deleted
/// or made again — if making it again failed after the delete, the message says so and the
/// configuration read is in the log.
pub async fn consumer_reset(
    js: &Context,
    stream: &str,
    consumer: &str,
) -> Result<ConsumerReset, NatsError> {
    let consumer_error = |source: async_nats::Error| NatsError::Consumer {
        stream: stream.to_owned(),
        consumer: consumer.to_owned(),
        source,
    };
    let handle = open_stream(js, stream).await?;
    let stream_info = handle
        .get_info()
        .await
        .map_err(|source| NatsError::Stream {
            stream: stream.to_owned(),
            source: source.into(),
        })?;
    if stream_info.config.retention == RetentionPolicy::WorkQueue {
        return Err(NatsError::WorkQueue {
            stream: stream.to_owned(),
            consumer: consumer.to_owned(),
        });
    }
    let before = handle
        .consumer_info(consumer)
        .await
        .map_err(|source| consumer_error(source.into()))?;
    let mut config = before.config.clone();
    config.deliver_policy = DeliverPolicy::New;
    handle
        .delete_consumer(consumer)
        .await
        .map_err(|source| consumer_error(source.into()))?;
    let made: consumer::Consumer<consumer::Config> = match handle.create_consumer(config).await {
        Ok(made) => made,
        Err(source) => {
            tracing::error!(
                stream,
                consumer,
                config = ?before.config,
                "consumer deleted for a reset and not made again"
            );
            return Err(consumer_error(
                format!("deleted for the reset, and not made again: {source}").into(),
            ));
        }
    };
    let after = made.cached_info().clone();
    Ok(ConsumerReset { before, after })
}

/// How long [`leaderless`] waits for a stream's servers to answer.
pub const LEADER_PROBE: Duration = Duration::from_secs(5);

/// Why `stream` takes no message now when the reason is that it has no leader — a cluster that
/// lost its quorum (fewer than a majority of the stream's servers up) — for an error to say
/// so; `None` when a leader answers for it (or it is on a single server that answers).
///
/// Asked of the servers within [`LEADER_PROBE`]: a stream whose info no server gives in that
/// time is taken as leaderless (its servers down, or none reachable), and said so.
pub async fn leaderless(js: &Context, stream: &str) -> Option<String> {
    let info = tokio::time::timeout(LEADER_PROBE, async {
        let mut handle = js.get_stream(stream).await.map_err(|e| e.to_string())?;
        handle
            .info()
            .await
            .map(|info| info.cluster.clone())
            .map_err(|e| e.to_string())
    })
    .await;
    let lost = "a cluster that lost its quorum (fewer than a majority of its servers up)";
    match info {
        Ok(Ok(Some(cluster))) if cluster.leader.is_none() => {
            Some(format!("the stream `{stream}` has no leader: {lost}"))
        }
        Ok(Ok(_)) => None,
        Ok(Err(error)) => Some(format!(
            "no server answered for the stream `{stream}` ({error}): {lost}, or no server \
             reachable"
        )),
        Err(_) => Some(format!(
            "no server answered for the stream `{stream}` within {LEADER_PROBE:?}: {lost}, or \
             no server reachable"
        )),
    }
}

/// Whether a consumer's copies are on a cluster that has not elected its leader yet. A pull
/// sent to such a consumer is lost on nats-server 2.9 — nothing answers it, not even a
/// heartbeat — and a reader would find out only when the heartbeats are missed (30 s by
/// default): readers open their message stream once the info names a leader.
pub fn awaits_leader(info: &async_nats::jetstream::consumer::Info) -> bool {
    info.cluster
        .as_ref()
        .is_some_and(|cluster| cluster.name.is_some() && cluster.leader.is_none())
}

#[cfg(test)]
mod leader_tests {
    use super::awaits_leader;
    use async_nats::jetstream::consumer::Info;

    /// A consumer's info as a server sends it, its `cluster` as given.
    fn info(cluster: serde_json::Value) -> Info {
        serde_json::from_value(serde_json::json!({
            "stream_name": "MESH_DECLARATIONS",
            "name": "host-bus",
            "created": "2026-12-06T03:54:45.946200Z",
            "config": {
                "durable_name": "host-bus",
                "deliver_policy": "all",
                "ack_policy": "explicit",
                "ack_wait": 30_000_000_000_u64,
                "max_deliver": -1,
                "replay_policy": "instant",
                "max_waiting": 512,
                "max_ack_pending": 1000,
                "num_replicas": 0
            },
            "delivered": {"consumer_seq": 0, "stream_seq": 0},
            "ack_floor": {"consumer_seq": 0, "stream_seq": 0},
            "num_ack_pending": 0,
            "num_redelivered": 0,
            "num_waiting": 0,
            "num_pending": 0,
            "cluster": cluster,
        }))
        .unwrap()
    }

    #[test]
    fn a_consumer_of_a_cluster_without_its_leader_is_not_read_yet() {
        assert!(awaits_leader(&info(serde_json::json!({"name": "c"}))));
        assert!(!awaits_leader(&info(
            serde_json::json!({"name": "c", "leader": "c-2"})
        )));
        // A single server: no cluster's name, its one copy the leader.
        assert!(!awaits_leader(&info(serde_json::json!({"leader": "n"}))));
        assert!(!awaits_leader(&info(serde_json::Value::Null)));
    }
}
