//! `/metrics`: the Prometheus text exposition (format 0.0.4), written by prometheus-client's
//! encoder from a registry made for each scrape, every label value escaped by it.

use super::counts::{
    drifted, nodes_by_state, plans_by_state, resources_by_outcome, rollouts_by_state, SendTally,
    LATENCY_BUCKETS,
};
use super::snapshot::Snapshot;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// The `Content-Type` of `/metrics`.
pub(crate) const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Gauges of one metric by the value of one label, in the order given (prometheus-client's
/// `Family` would write them in a hash map's order).
#[derive(Debug)]
struct Labelled {
    label: &'static str,
    values: Vec<(String, i64)>,
}

impl Labelled {
    fn of<K: ToString>(label: &'static str, counts: impl IntoIterator<Item = (K, usize)>) -> Self {
        Labelled {
            label,
            values: counts
                .into_iter()
                .map(|(key, count)| (key.to_string(), gauge(count as u64)))
                .collect(),
        }
    }
}

impl EncodeMetric for Labelled {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (value, gauge) in &self.values {
            encoder
                .encode_family(&[(self.label, value.as_str())])?
                .encode_gauge(gauge)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }
}

/// Each node's state word as a gauge of 1 labelled with both
/// ([`crate::status::pending::node_states`]).
#[derive(Debug)]
struct NodeStates(Vec<(String, &'static str)>);

impl EncodeMetric for NodeStates {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (node, state) in &self.0 {
            encoder
                .encode_family(&[("node", node.as_str()), ("state", state)])?
                .encode_gauge(&1i64)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }
}

/// The send latency histogram, its buckets counted already ([`SendTally`]).
#[derive(Debug)]
struct Latencies(SendTally);

impl EncodeMetric for Latencies {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let buckets: Vec<(f64, u64)> = LATENCY_BUCKETS
            .iter()
            .zip(self.0.buckets)
            .map(|(bound, count)| (*bound as f64, count))
            .collect();
        encoder.encode_histogram::<NoLabelSet>(
            self.0.latency_sum as f64,
            self.0.applied,
            &buckets,
            None,
        )
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// A count or a time as a gauge's value (saturating: no count comes near).
fn gauge(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn one(value: u64) -> ConstGauge {
    ConstGauge::new(gauge(value))
}

/// The Prometheus text exposition (format 0.0.4) of `snapshot`.
pub fn metrics(snapshot: &Snapshot) -> String {
    let overview = &snapshot.overview;
    let mut registry = Registry::default();
    registry.register(
        "mesh_status_timestamp_seconds",
        "When this status was read (seconds since the epoch)",
        one(snapshot.now),
    );
    registry.register(
        "mesh_fleet_verdict",
        "What status comes to, one series a verdict, 1 for the one it is: settled (exit 0), in-progress (exit 4: something under way, nothing wrong) or needs-attention (exit 3)",
        Labelled::of(
            "verdict",
            crate::status::Health::ALL
                .iter()
                .map(|health| {
                    let is = usize::from(*health == snapshot.verdict.health);
                    (health.word(), is)
                })
                .collect::<Vec<_>>(),
        ),
    );
    let by_kind = snapshot.verdict.reasons_by_kind();
    registry.register(
        "mesh_fleet_verdict_reasons",
        "The reasons for the verdict by kind (every kind, 0 when there is none): what status lists under needs attention and in progress",
        Labelled::of(
            "kind",
            crate::status::ReasonKind::ALL
                .iter()
                .map(|kind| {
                    (kind.word(), by_kind.get(kind).copied().unwrap_or(0))
                })
                .collect::<Vec<_>>(),
        ),
    );
    registry.register(
        "mesh_nodes",
        "Nodes by state: their last report's machine state, silent (unheard for three heartbeats), unreadable (their last report could not be read) or no-report",
        Labelled::of("state", nodes_by_state(overview)),
    );
    registry.register(
        "mesh_nodes_current",
        "Nodes whose last report is of the declaration last sent them",
        one(overview.nodes.iter().filter(|n| n.current).count() as u64),
    );
    registry.register(
        "mesh_nodes_attention",
        "Nodes whose last report needs a person: stuck, mid-change, a window open, drift, silent, unreadable",
        one(overview.attention.len() as u64),
    );
    registry.register(
        "mesh_nodes_pending",
        "Nodes whose intent (what they should run now) differs from what they were last sent, whether or not an open plan will send it",
        one(overview.pending.len() as u64),
    );
    registry.register(
        "mesh_node_state",
        "Each node's state, one series a node (value 1): current, pending (its intent differs from what it was sent and nothing will send it), in-progress, attention, silent or never-sent",
        NodeStates(
            crate::status::pending::node_states(overview)
                .into_iter()
                .map(|(node, state)| (node.to_owned(), state))
                .collect(),
        ),
    );
    registry.register(
        "mesh_resources",
        "Resources by outcome over every node's last report",
        Labelled::of("outcome", resources_by_outcome(overview)),
    );
    registry.register(
        "mesh_resources_drifted",
        "Managed resources found changed by hand in the nodes' last reports",
        one(drifted(overview) as u64),
    );
    registry.register(
        "mesh_plans",
        "Plans by state",
        Labelled::of("state", plans_by_state(&snapshot.plans)),
    );
    registry.register(
        "mesh_rollouts",
        "Module rollouts of every plan by state (left: its plan superseded or closed first)",
        Labelled::of("state", rollouts_by_state(&snapshot.plans)),
    );
    registry.register(
        "mesh_rollouts_stopped",
        "Stopped rollouts status lists (until a later plan finishes the module or a person closes it)",
        one(overview.stopped.len() as u64),
    );
    registry.register(
        "mesh_nodes_held",
        "Nodes an open plan's rollout held because their running container's data would move",
        one(overview.held.len() as u64),
    );
    registry.register(
        "mesh_problems",
        "Failures recorded where they were seen, until resolved",
        one(overview.problems.len() as u64),
    );
    if let Some(daemon) = &overview.daemon {
        daemon_metrics(&mut registry, daemon);
    }
    registry.register(
        "mesh_drives_failing",
        "Plans whose drive by the daemon failed and is tried again with backoff (a problem each)",
        one(overview
            .problems
            .iter()
            .filter(|p| p.kind == mesh_store::problems::ProblemKind::Drive)
            .count() as u64),
    );
    // A counter's name is written with `_total` after it.
    registry.register(
        "mesh_sends",
        "Nodes sent a rollout's declaration, over every plan",
        ConstCounter::new(snapshot.sends.sends),
    );
    registry.register(
        "mesh_send_latency_seconds",
        "From a rollout's send to a node to the report that applied it",
        Latencies(snapshot.sends.clone()),
    );
    let heard: Vec<(&str, u64)> = overview
        .nodes
        .iter()
        .filter_map(|node| Some((node.node.as_str(), node.heard_at?)))
        .collect();
    registry.register(
        "mesh_node_report_timestamp_seconds",
        "When each node's last report was heard (seconds since the epoch; heartbeats count)",
        Labelled {
            label: "node",
            values: heard
                .iter()
                .map(|(node, at)| ((*node).to_owned(), gauge(*at)))
                .collect(),
        },
    );
    registry.register(
        "mesh_node_report_age_seconds",
        "Seconds since each node's last report was heard, when this status was read",
        Labelled {
            label: "node",
            values: heard
                .iter()
                .map(|(node, at)| ((*node).to_owned(), gauge(snapshot.now.saturating_sub(*at))))
                .collect(),
        },
    );
    let mut out = String::with_capacity(256 + overview.nodes.len() * 120);
    // Writing to a String does not fail.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry);
    out
}

/// The daemon's heartbeat as metrics: its last turn, whether it is silent, the merges waiting
/// on its consumer and the oldest one's wait, the plans it drives.
fn daemon_metrics(registry: &mut Registry, daemon: &crate::bus::heartbeat::DaemonSeen) {
    registry.register(
        "mesh_daemon_last_turn_timestamp_seconds",
        "When the daemon's loop last turned, as its last heartbeat says",
        one(daemon.heartbeat.turn_at),
    );
    registry.register(
        "mesh_daemon_silent",
        "1 when no heartbeat of the daemon came within three of its intervals",
        one(u64::from(daemon.silent)),
    );
    registry.register(
        "mesh_daemon_driving",
        "Plans the daemon drives, as its last heartbeat says",
        one(daemon.heartbeat.driving.len() as u64),
    );
    registry.register(
        "mesh_merges_waiting",
        "Merges announced and not yet acknowledged by the daemon's consumer",
        one(daemon.merges_waiting.count),
    );
    registry.register(
        "mesh_merge_oldest_waiting_seconds",
        "Seconds the oldest merge waiting on the daemon's consumer has waited (0: none waits)",
        one(daemon.oldest_merge_waiting_secs.unwrap_or(0)),
    );
}
