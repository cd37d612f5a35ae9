//! `/metrics`: the Prometheus text exposition, every label value escaped.

use super::counts::{
    drifted, nodes_by_state, plans_by_state, resources_by_outcome, rollouts_by_state,
    LATENCY_BUCKETS,
};
use super::pages::Snapshot;
use std::fmt::Write as _;

/// A Prometheus label value, escaped (backslash, double quote, newline).
pub(super) fn label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The Prometheus text exposition (format 0.0.4) of `snapshot`.
pub fn metrics(snapshot: &Snapshot) -> String {
    let overview = &snapshot.overview;
    let mut out = String::with_capacity(256 + overview.nodes.len() * 120);
    family(
        &mut out,
        "mesh_status_timestamp_seconds",
        "gauge",
        "When this status was read (seconds since the epoch).",
    );
    let _ = writeln!(out, "mesh_status_timestamp_seconds {}", snapshot.now);
    family(
        &mut out,
        "mesh_nodes",
        "gauge",
        "Nodes by state: their last report's machine state, silent (unheard for three heartbeats), unreadable (their last report could not be read) or no-report.",
    );
    for (state, count) in nodes_by_state(overview) {
        let _ = writeln!(out, "mesh_nodes{{state=\"{state}\"}} {count}");
    }
    family(
        &mut out,
        "mesh_nodes_current",
        "gauge",
        "Nodes whose last report is of the declaration last sent them.",
    );
    let current = overview.nodes.iter().filter(|n| n.current).count();
    let _ = writeln!(out, "mesh_nodes_current {current}");
    family(
        &mut out,
        "mesh_nodes_attention",
        "gauge",
        "Nodes whose last report needs a person: stuck, mid-change, a window open, drift, silent, unreadable.",
    );
    let _ = writeln!(out, "mesh_nodes_attention {}", overview.attention.len());
    family(
        &mut out,
        "mesh_resources",
        "gauge",
        "Resources by outcome over every node's last report.",
    );
    for (outcome, count) in resources_by_outcome(overview) {
        let _ = writeln!(out, "mesh_resources{{outcome=\"{outcome}\"}} {count}");
    }
    family(
        &mut out,
        "mesh_resources_drifted",
        "gauge",
        "Managed resources found changed by hand in the nodes' last reports.",
    );
    let _ = writeln!(out, "mesh_resources_drifted {}", drifted(overview));
    family(&mut out, "mesh_plans", "gauge", "Plans by state.");
    for (state, count) in plans_by_state(&snapshot.plans) {
        let _ = writeln!(out, "mesh_plans{{state=\"{state}\"}} {count}");
    }
    family(
        &mut out,
        "mesh_rollouts",
        "gauge",
        "Module rollouts of every plan by state (left: its plan superseded or closed first).",
    );
    for (state, count) in rollouts_by_state(&snapshot.plans) {
        let _ = writeln!(out, "mesh_rollouts{{state=\"{state}\"}} {count}");
    }
    family(
        &mut out,
        "mesh_rollouts_stopped",
        "gauge",
        "Stopped rollouts status lists (until a later plan finishes the module or a person closes it).",
    );
    let _ = writeln!(out, "mesh_rollouts_stopped {}", overview.stopped.len());
    family(
        &mut out,
        "mesh_nodes_held",
        "gauge",
        "Nodes an open plan's rollout held because their running container's data would move.",
    );
    let _ = writeln!(out, "mesh_nodes_held {}", overview.held.len());
    family(
        &mut out,
        "mesh_problems",
        "gauge",
        "Failures recorded where they were seen, until resolved.",
    );
    let _ = writeln!(out, "mesh_problems {}", overview.problems.len());
    if let Some(daemon) = &overview.daemon {
        daemon_metrics(&mut out, daemon);
    }
    family(
        &mut out,
        "mesh_drives_failing",
        "gauge",
        "Plans whose drive by the daemon failed and is tried again with backoff (a problem each).",
    );
    let _ = writeln!(
        out,
        "mesh_drives_failing {}",
        overview
            .problems
            .iter()
            .filter(|p| p.kind == mesh_store::problems::ProblemKind::Drive)
            .count()
    );
    family(
        &mut out,
        "mesh_sends_total",
        "counter",
        "Nodes sent a rollout's declaration, over every plan.",
    );
    let _ = writeln!(out, "mesh_sends_total {}", snapshot.sends.sends);
    family(
        &mut out,
        "mesh_send_latency_seconds",
        "histogram",
        "From a rollout's send to a node to the report that applied it.",
    );
    let mut cumulative = 0;
    for (bound, count) in LATENCY_BUCKETS.iter().zip(snapshot.sends.buckets) {
        cumulative += count;
        let _ = writeln!(
            out,
            "mesh_send_latency_seconds_bucket{{le=\"{bound}\"}} {cumulative}"
        );
    }
    let _ = writeln!(
        out,
        "mesh_send_latency_seconds_bucket{{le=\"+Inf\"}} {}",
        snapshot.sends.applied
    );
    let _ = writeln!(
        out,
        "mesh_send_latency_seconds_sum {}",
        snapshot.sends.latency_sum
    );
    let _ = writeln!(
        out,
        "mesh_send_latency_seconds_count {}",
        snapshot.sends.applied
    );
    family(
        &mut out,
        "mesh_node_report_timestamp_seconds",
        "gauge",
        "When each node's last report was heard (seconds since the epoch; heartbeats count).",
    );
    for node in &overview.nodes {
        if let Some(at) = node.heard_at {
            let _ = writeln!(
                out,
                "mesh_node_report_timestamp_seconds{{node=\"{}\"}} {at}",
                label(&node.node)
            );
        }
    }
    family(
        &mut out,
        "mesh_node_report_age_seconds",
        "gauge",
        "Seconds since each node's last report was heard, when this status was read.",
    );
    for node in &overview.nodes {
        if let Some(at) = node.heard_at {
            let _ = writeln!(
                out,
                "mesh_node_report_age_seconds{{node=\"{}\"}} {}",
                label(&node.node),
                snapshot.now.saturating_sub(at)
            );
        }
    }
    out
}

/// The daemon's heartbeat as metrics: its last turn, whether it is silent, the merges waiting
/// on its consumer and the oldest one's wait, the plans it drives.
fn daemon_metrics(out: &mut String, daemon: &crate::heartbeat::DaemonSeen) {
    family(
        out,
        "mesh_daemon_last_turn_timestamp_seconds",
        "gauge",
        "When the daemon's loop last turned, as its last heartbeat says.",
    );
    let _ = writeln!(
        out,
        "mesh_daemon_last_turn_timestamp_seconds {}",
        daemon.heartbeat.turn_at
    );
    family(
        out,
        "mesh_daemon_silent",
        "gauge",
        "1 when no heartbeat of the daemon came within three of its intervals.",
    );
    let _ = writeln!(out, "mesh_daemon_silent {}", u8::from(daemon.silent));
    family(
        out,
        "mesh_daemon_driving",
        "gauge",
        "Plans the daemon drives, as its last heartbeat says.",
    );
    let _ = writeln!(
        out,
        "mesh_daemon_driving {}",
        daemon.heartbeat.driving.len()
    );
    family(
        out,
        "mesh_merges_waiting",
        "gauge",
        "Merges announced and not yet acknowledged by the daemon's consumer.",
    );
    let _ = writeln!(out, "mesh_merges_waiting {}", daemon.merges_waiting.count);
    family(
        out,
        "mesh_merge_oldest_waiting_seconds",
        "gauge",
        "Seconds the oldest merge waiting on the daemon's consumer has waited (0: none waits).",
    );
    let _ = writeln!(
        out,
        "mesh_merge_oldest_waiting_seconds {}",
        daemon.oldest_merge_waiting_secs.unwrap_or(0)
    );
}
