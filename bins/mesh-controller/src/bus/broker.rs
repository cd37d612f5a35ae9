//! `broker`: looking after the bus — a stuck durable consumer made again from now (the rule “A
//! durable consumer starts from now”, ); how many copies the mesh's streams and buckets keep
//! (`--bus-replicas`, recorded at [`REPLICAS_KEY`]), the ones with fewer (`broker replicas`) and
//! raising them (`broker raise-replicas`, a person's act).

use crate::bus::credentials::{connect, BusConfig};
use crate::error::{bus_error, Error, Result};
use crate::home::Home;
use mesh_bus::jetstream;
use serde::{Deserialize, Serialize};

/// What `broker consumer-reset` did.
#[derive(Debug, Clone, Serialize)]
pub struct ResetLine {
    /// The stream.
    pub stream: String,
    /// The consumer.
    pub consumer: String,
    /// Messages it held pending before.
    pub pending_before: u64,
    /// Messages it held pending after (0).
    pub pending_after: u64,
    /// Messages delivered and not acknowledged before.
    pub ack_pending_before: usize,
}

/// `broker consumer-reset STREAM CONSUMER` (the rule “A durable consumer starts from now”):
/// `Ok(None)` when refused because the stream is a work queue (the error is printed by the caller
/// from the message).
pub async fn consumer_reset(
    home: &Home,
    bus_config: &BusConfig,
    stream: &str,
    consumer: &str,
) -> Result<std::result::Result<ResetLine, String>> {
    let bus = connect(home, bus_config).await?;
    match jetstream::consumer_reset(&bus.jetstream(), stream, consumer).await {
        Ok(reset) => Ok(Ok(ResetLine {
            stream: stream.to_owned(),
            consumer: consumer.to_owned(),
            pending_before: reset.before.num_pending,
            pending_after: reset.after.num_pending,
            ack_pending_before: reset.before.num_ack_pending,
        })),
        Err(error @ mesh_bus::NatsError::WorkQueue { .. }) => Ok(Err(error.to_string())),
        Err(error) => Err(error.into()),
    }
}

/// The record of how many copies the mesh's streams and buckets keep (`--bus-replicas N`,
/// written when given, so a controller started later without it keeps the same number).
pub(crate) const REPLICAS_KEY: &str = "bus/replicas.json";

/// The format of [`REPLICAS_KEY`].
const REPLICAS_FORMAT: u32 = 1;

/// The record at [`REPLICAS_KEY`] (a disk format of its own).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ReplicasRecord {
    format: u32,
    replicas: usize,
}

/// The number of copies recorded at [`REPLICAS_KEY`], if any.
///
/// # Errors
/// The record cannot be read or is not a replicas record of a known format.
pub(crate) fn recorded_replicas(home: &Home) -> Result<Option<usize>> {
    Ok(home
        .read_record::<ReplicasRecord>(REPLICAS_KEY, "a replicas record", REPLICAS_FORMAT)?
        .map(|record| record.replicas))
}

/// Records `replicas` at [`REPLICAS_KEY`] (written only when it differs from the record).
///
/// # Errors
/// The record cannot be read or written.
pub(crate) fn record_replicas(home: &Home, replicas: usize) -> Result<()> {
    if recorded_replicas(home)? == Some(replicas) {
        return Ok(());
    }
    home.put_json(
        REPLICAS_KEY,
        &ReplicasRecord {
            format: REPLICAS_FORMAT,
            replicas,
        },
    )
}

/// Where the number of copies the mesh keeps came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicasSource {
    /// `--bus-replicas N` (recorded by this run).
    Given,
    /// The record [`REPLICAS_KEY`] an earlier `--bus-replicas` wrote.
    Recorded,
    /// The server: it reports a cluster (3).
    Cluster,
    /// The server: it reports no cluster (1).
    SingleServer,
}

/// How many copies the mesh's streams and buckets keep, and why: `--bus-replicas N` (then
/// recorded), else the recorded number, else 3 when the server `bus` is connected to
/// reports a cluster and 1 when it does not.
///
/// # Errors
/// `--bus-replicas 0`; the record cannot be read or written.
pub(crate) fn wanted_replicas_from(
    home: &Home,
    bus_config: &BusConfig,
    bus: &mesh_bus::NatsBus,
) -> Result<(usize, ReplicasSource)> {
    if let Some(given) = bus_config.replicas {
        if given == 0 {
            return Err(Error::Given {
                option: crate::error::Given::Replicas,
                value: Some(given.to_string()),
                why: "a stream keeps at least one copy".to_owned(),
            });
        }
        if home.records_on_bus() {
            record_replicas(home, given)?;
        }
        return Ok((given, ReplicasSource::Given));
    }
    if let Some(recorded) = recorded_replicas(home)? {
        return Ok((recorded, ReplicasSource::Recorded));
    }
    let replicas = jetstream::replicas_for(bus.client(), None);
    Ok(if replicas == jetstream::SINGLE_SERVER_REPLICAS {
        (replicas, ReplicasSource::SingleServer)
    } else {
        (replicas, ReplicasSource::Cluster)
    })
}

/// [`wanted_replicas_from`]'s number.
///
/// # Errors
/// As [`wanted_replicas_from`].
pub(crate) fn wanted_replicas(
    home: &Home,
    bus_config: &BusConfig,
    bus: &mesh_bus::NatsBus,
) -> Result<usize> {
    Ok(wanted_replicas_from(home, bus_config, bus)?.0)
}

/// A stream or bucket with fewer copies than the mesh keeps.
#[derive(Debug, Clone, Serialize)]
pub struct ShortLine {
    /// The stream (a bucket's is `KV_<bucket>`).
    pub stream: String,
    /// The copies it has.
    pub replicas: usize,
    /// The copies the mesh keeps.
    pub wanted: usize,
}

/// What `broker replicas` found.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicasAnswer {
    /// The copies the mesh keeps.
    pub wanted: usize,
    /// Where that number came from.
    pub source: ReplicasSource,
    /// Whether the server the controller reached reports a cluster, and its name.
    pub cluster: Option<String>,
    /// The mesh's streams and buckets with fewer copies, by name.
    pub short: Vec<ShortLine>,
}

/// `broker replicas`: the mesh's streams and buckets with fewer copies than it keeps. Changes
/// nothing (except recording `--bus-replicas` when given).
///
/// # Errors
/// The bus cannot be reached or its streams listed.
pub async fn replicas(home: &Home, bus_config: &BusConfig) -> Result<ReplicasAnswer> {
    let bus = connect(home, bus_config).await?;
    let (wanted, source) = wanted_replicas_from(home, bus_config, &bus)?;
    let short = jetstream::replica_shortfalls(&bus.jetstream(), wanted)
        .await
        .map_err(bus_error(|| {
            "listing the mesh's streams and their copies".to_owned()
        }))?;
    Ok(ReplicasAnswer {
        wanted,
        source,
        cluster: bus.client().server_info().cluster.clone(),
        short: short
            .into_iter()
            .map(|short| ShortLine {
                stream: short.stream,
                replicas: short.replicas,
                wanted: short.wanted,
            })
            .collect(),
    })
}

/// One stream `broker raise-replicas` raised (or found with enough).
#[derive(Debug, Clone, Serialize)]
pub struct RaisedLine {
    /// The stream (a bucket's is `KV_<bucket>`).
    pub stream: String,
    /// The copies it had.
    pub before: usize,
    /// The copies it has now.
    pub after: usize,
}

/// `broker raise-replicas [STREAM…]`: raises the named streams (every one `broker replicas`
/// lists, when none is named) to the copies the mesh keeps — a person's act, as a consumer
/// reset is.
///
/// # Guarantees
/// Never lowers a stream's copies, changes no other setting; the new copies catch up from the
/// existing ones while the stream goes on taking writes. A stream that is not the mesh's is
/// refused, and nothing is changed.
///
/// # Errors
/// A named stream that is not the mesh's; the bus cannot be reached; the server refuses (a
/// cluster of fewer servers than the copies asked says so, naming the stream) — the streams
/// raised before it stay raised, and are listed in the log.
pub async fn raise_replicas(
    home: &Home,
    bus_config: &BusConfig,
    streams: &[String],
) -> Result<Vec<RaisedLine>> {
    if let Some(other) = streams.iter().find(|name| !jetstream::is_mesh_stream(name)) {
        return Err(Error::Refused {
            reason: format!(
                "`{other}` is not one of the mesh's streams or buckets (MESH_DECLARATIONS, \
                 MESH_REPORTS, MESH_EVENTS, KV_…); nothing was changed"
            ),
        });
    }
    let bus = connect(home, bus_config).await?;
    let js = bus.jetstream();
    let wanted = wanted_replicas(home, bus_config, &bus)?;
    let names: Vec<String> = if streams.is_empty() {
        jetstream::replica_shortfalls(&js, wanted)
            .await
            .map_err(bus_error(|| {
                "listing the mesh's streams and their copies".to_owned()
            }))?
            .into_iter()
            .map(|short| short.stream)
            .collect()
    } else {
        streams.to_vec()
    };
    let mut raised = Vec::new();
    for stream in names {
        let done = jetstream::raise_replicas(&js, &stream, wanted)
            .await
            .map_err(bus_error(|| {
                format!("raising `{stream}` to {wanted} copies")
            }))?;
        tracing::info!(%stream, before = done.before, after = done.after, "copies raised");
        raised.push(RaisedLine {
            stream,
            before: done.before,
            after: done.after,
        });
    }
    Ok(raised)
}
