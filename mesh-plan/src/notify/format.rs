//! A [`Notice`] as its receivers read it: a generic webhook's JSON body, with a CDEvents-style
//! `type`, and a Slack- or Mattermost-compatible incoming webhook's body, one line of text with
//! a link to the status page.
//!
//! Both are written from the notice alone, which holds names, counts, digests and the reasons
//! hosts gave: no setting's value can reach a body. Signing a body is the sender's.
//!
//! # The types
//! CDEvents' vocabulary (`dev.cdevents.<subject>.<predicate>`), without its version suffix:
//!
//! | notice                         | `type`                              |
//! |--------------------------------|-------------------------------------|
//! | a plan started                 | `dev.cdevents.pipelinerun.started`  |
//! | a wave done                    | `dev.cdevents.taskrun.finished`     |
//! | a plan done                    | `dev.cdevents.service.deployed`     |
//! | a rollback plan done           | `dev.cdevents.service.rolledback`   |
//! | a plan stopped or superseded   | `dev.cdevents.pipelinerun.finished` |
//! | a rollout stopped, reverted    | `dev.cdevents.service.rolledback`   |
//! | a rollout stopped, a budget    | `dev.cdevents.incident.detected`    |
//! | nodes failing, daemon silent   | `dev.cdevents.incident.detected`    |
//! | nodes recovered, daemon back   | `dev.cdevents.incident.resolved`    |

use super::{Notice, PlanOutcome, StopCause, What};
use crate::waves::progress::FailedNode;
use serde_json::json;
use std::fmt::Write as _;

/// The version of the webhook body this crate writes (its `format` field).
pub const WEBHOOK_FORMAT: u32 = 1;

/// The most nodes a line names; the rest are counted.
pub const NODES_NAMED: usize = 10;

/// Where the messages come from.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    /// The mesh that sends them (the CDEvents `source`): its name or its controller's address.
    pub source: &'a str,
    /// The status page, linked from each message when given.
    pub status_url: Option<&'a str>,
}

/// The notice's CDEvents-style type (see the module's table).
pub fn event_type(what: &What) -> &'static str {
    match what {
        What::PlanStarted { .. } => "dev.cdevents.pipelinerun.started",
        What::WaveDone { .. } => "dev.cdevents.taskrun.finished",
        What::PlanDone {
            outcome: PlanOutcome::Done,
            rollback: false,
            ..
        } => "dev.cdevents.service.deployed",
        What::PlanDone {
            outcome: PlanOutcome::Done,
            rollback: true,
            ..
        } => "dev.cdevents.service.rolledback",
        What::PlanDone {
            outcome: PlanOutcome::Stopped | PlanOutcome::Superseded,
            ..
        } => "dev.cdevents.pipelinerun.finished",
        What::RolloutStopped {
            by: StopCause::FirstNode {
                reverted: Some(_), ..
            },
            ..
        } => "dev.cdevents.service.rolledback",
        What::RolloutStopped { .. }
        | What::BudgetExceeded { .. }
        | What::NodesFailing { .. }
        | What::DaemonSilent { .. } => "dev.cdevents.incident.detected",
        What::NodesRecovered { .. } | What::DaemonBack { .. } => "dev.cdevents.incident.resolved",
    }
}

/// The notice in one line, for a person.
pub fn line(notice: &Notice) -> String {
    let text = match &notice.what {
        What::PlanStarted {
            plan,
            repository,
            commit,
            modules,
            rollback,
        } => format!(
            "{} {plan} started: {} from {repository} at {}",
            match rollback {
                true => "rollback",
                false => "plan",
            },
            named(modules.iter().map(String::as_str), modules.len()),
            short(commit)
        ),
        What::WaveDone {
            plan,
            module,
            wave,
            applied,
            failed,
        } => {
            let mut text = format!("{plan}: {module} wave {wave} done, {applied} applied");
            if !failed.is_empty() {
                let _ = write!(
                    text,
                    ", {} failed within the budget: {}",
                    failed.len(),
                    failures(failed)
                );
            }
            text
        }
        What::BudgetExceeded {
            plan,
            module,
            name,
            budget,
            answered,
            failed,
            ..
        } => format!(
            "{plan}: {module} stopped: wave {name} failed {} of {answered} answered, over its \
             budget of {budget}: {}",
            failed.len(),
            failures(failed)
        ),
        What::RolloutStopped { plan, module, by } => match by {
            StopCause::FirstNode {
                node,
                reason,
                reverted,
            } => {
                let mut text = format!(
                    "{plan}: {module} stopped: its first node {node} failed ({})",
                    one_line(reason)
                );
                if let Some(digest) = reverted {
                    let _ = write!(text, ", reverted to {}", short(digest));
                }
                text
            }
            StopCause::Operator { actor, reason } => {
                format!("{plan}: {module} aborted by {actor}: {}", one_line(reason))
            }
            StopCause::Superseded { by } => format!("{plan}: {module} stopped: {by} took over"),
        },
        What::PlanDone {
            plan,
            outcome,
            rollback,
        } => format!(
            "{} {plan} {}",
            match rollback {
                true => "rollback",
                false => "plan",
            },
            outcome.word()
        ),
        What::NodesFailing { nodes } => format!(
            "{} {} failing: {}",
            nodes.len(),
            plural(nodes.len(), "node", "nodes"),
            failures(nodes)
        ),
        What::NodesRecovered { nodes } => format!(
            "{} {} recovered: {}",
            nodes.len(),
            plural(nodes.len(), "node", "nodes"),
            named(nodes.iter().map(String::as_str), nodes.len())
        ),
        What::DaemonSilent { since } => {
            format!("the daemon is silent since {}", timestamp(*since))
        }
        What::DaemonBack { silent_since } => format!(
            "the daemon is heard again (silent since {})",
            timestamp(*silent_since)
        ),
    };
    format!("[{}] {text}", notice.severity)
}

/// The generic webhook's body: one JSON object with `type` (CDEvents-style), `id` (the notice's
/// key), `source`, `timestamp`, `severity`, `subject` (the notice's fields), `text` (its line)
/// and, when the origin has one, `link`.
pub fn webhook_body(notice: &Notice, origin: &Origin<'_>) -> String {
    let mut body = json!({
        "format": WEBHOOK_FORMAT,
        "type": event_type(&notice.what),
        "id": notice.key,
        "source": origin.source,
        "timestamp": timestamp(notice.at),
        "severity": notice.severity,
        "subject": notice.what,
        "text": line(notice),
    });
    if let (Some(url), Some(object)) = (origin.status_url, body.as_object_mut()) {
        object.insert("link".to_owned(), json!(url));
    }
    serde_json::to_string_pretty(&body).unwrap_or_default()
}

/// The Slack- or Mattermost-compatible incoming webhook's body: `{"text": …}`, one line with
/// the status page's address after it when the origin has one.
pub fn chat_body(notice: &Notice, origin: &Origin<'_>) -> String {
    let text = match origin.status_url {
        Some(url) => format!("{} {url}", line(notice)),
        None => line(notice),
    };
    json!({ "text": text }).to_string()
}

/// The failed nodes, those with the same reason together, first reasons first: `a, b (why)`.
fn failures(failed: &[FailedNode]) -> String {
    let mut reasons: Vec<(String, Vec<&str>)> = Vec::new();
    for f in failed.iter().take(NODES_NAMED) {
        let reason = one_line(&f.reason);
        match reasons.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, nodes)) => nodes.push(&f.node),
            None => reasons.push((reason, vec![&f.node])),
        }
    }
    let shown = failed.len().min(NODES_NAMED);
    let text = reasons
        .into_iter()
        .map(|(reason, nodes)| format!("{} ({reason})", nodes.join(", ")))
        .collect::<Vec<_>>()
        .join(", ");
    match failed.len() > shown {
        true => format!("{text} and {} more", failed.len() - shown),
        false => text,
    }
}

fn named<'a>(names: impl Iterator<Item = &'a str>, count: usize) -> String {
    with_more(names.take(NODES_NAMED).map(str::to_owned).collect(), count)
}

fn with_more(shown: Vec<String>, count: usize) -> String {
    let mut text = shown.join(", ");
    if count > shown.len() {
        let _ = write!(text, " and {} more", count - shown.len());
    }
    text
}

fn plural(count: usize, one: &'static str, many: &'static str) -> &'static str {
    match count {
        1 => one,
        _ => many,
    }
}

/// A commit or digest shortened to 12 characters of its hash, its algorithm kept.
fn short(id: &str) -> String {
    match id.split_once(':') {
        Some((algorithm, hash)) => format!("{algorithm}:{}", first_chars(hash, 12)),
        None => first_chars(id, 12),
    }
}

fn first_chars(text: &str, count: usize) -> String {
    text.chars().take(count).collect()
}

/// A host's reason on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn timestamp(at: u64) -> String {
    i64::try_from(at)
        .ok()
        .and_then(|secs| jiff::Timestamp::from_second(secs).ok())
        .map_or_else(|| at.to_string(), |t| t.to_string())
}
