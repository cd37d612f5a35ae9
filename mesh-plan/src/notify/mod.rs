//! Which changes of state are worth a message to a person, and to whom: a [`Notifier`] is fed
//! what the controller observed and returns the [`Notice`]s to send; a [`Filter`] says which of
//! them a receiver takes. [`format`] writes them as a webhook's JSON or a chat line.
//!
//! Start at [`Notifier::observe`]. It performs no IO and reads no clock: `now` is an argument,
//! and sending is the caller's.
//!
//! # The rules it keeps
//! - **Changes of state only.** A plan started, a wave done, a plan done; a rollout stopped,
//!   and by what; a budget exceeded; nodes failing, and recovering; the daemon going silent,
//!   and coming back. Everything else a rollout does (a send, a pause, a window) says nothing.
//! - **Said once.** The same state observed again sends nothing. The [`Notifier`] is a value
//!   the caller keeps in its records (it serializes): a restarted daemon that observes the
//!   states it observed before sends nothing (argocd-notifications#179 notified about all 130
//!   applications after a restart).
//! - **Coalesced.** One observation gives at most one notice per kind of change: a wave's
//!   failures are one notice naming its nodes, the nodes that began failing since the last
//!   observation one notice naming them all (notification-controller#158 sent 22 messages in
//!   3 s).
//! - **Names and digests only.** A notice holds names, counts, digests and the reasons hosts
//!   gave; never a setting's value.

pub mod format;

#[cfg(test)]
mod tests;

use crate::waves::progress::{FailedNode, WaveAction};
use mesh_model::selector::{Labels, Selector};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The version of [`Notifier`]'s serialized form this crate writes and reads.
pub const NOTIFIER_FORMAT: u32 = 1;

/// How much a notice asks of a person, least first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// Something went as it should: a plan started or done, a wave done, a node recovered.
    Info,
    /// Something failed that the rollout carried on past: nodes failing, a wave done with
    /// failures within its budget.
    Warning,
    /// Something stopped and waits on a person: a rollout stopped, a budget exceeded, the
    /// daemon silent.
    Critical,
}

impl Severity {
    /// The severity as written in configuration and messages.
    pub fn word(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }

    /// Reads `info`, `warning` or `critical`.
    ///
    /// # Errors
    /// Any other word, named.
    pub fn parse(text: &str) -> Result<Severity, UnknownSeverity> {
        match text {
            "info" => Ok(Severity::Info),
            "warning" => Ok(Severity::Warning),
            "critical" => Ok(Severity::Critical),
            _ => Err(UnknownSeverity {
                given: text.to_owned(),
            }),
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.word())
    }
}

/// A severity that is none of `info`, `warning`, `critical`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown severity `{given}`: expected info, warning or critical")]
pub struct UnknownSeverity {
    /// The word given.
    pub given: String,
}

/// What stopped a rollout (other than its budget, which is [`What::BudgetExceeded`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cause", rename_all = "kebab-case")]
pub enum StopCause {
    /// The machine that went first failed; the rest were not sent.
    FirstNode {
        /// The node.
        node: String,
        /// Why it failed.
        reason: String,
        /// The digest it was sent back to, when it was reverted.
        reverted: Option<String>,
    },
    /// A person aborted the rollout.
    Operator {
        /// Who.
        actor: String,
        /// Why.
        reason: String,
    },
    /// A newer plan took over.
    Superseded {
        /// The plan that took over.
        by: String,
    },
}

/// How a plan ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlanOutcome {
    /// Every rollout of it is done: the fleet runs it.
    Done,
    /// A rollout of it stopped and the plan was closed.
    Stopped,
    /// A newer plan took over.
    Superseded,
}

impl PlanOutcome {
    /// The outcome as a word.
    pub fn word(self) -> &'static str {
        match self {
            PlanOutcome::Done => "done",
            PlanOutcome::Stopped => "stopped",
            PlanOutcome::Superseded => "superseded",
        }
    }
}

/// Something the controller observed, fed to [`Notifier::observe`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "observed", rename_all = "kebab-case")]
pub enum Observation {
    /// A plan began its rollouts.
    PlanStarted {
        /// The plan.
        plan: String,
        /// The repository it was merged in.
        repository: String,
        /// The commit it carries.
        commit: String,
        /// The modules it rolls out.
        modules: Vec<String>,
        /// Whether it is a rollback to an earlier build.
        rollback: bool,
    },
    /// A module's wave rollout did this (every [`WaveAction`] may be given; only those that
    /// change a rollout's state say anything).
    Wave {
        /// The plan.
        plan: String,
        /// The module.
        module: String,
        /// What the wave machine returned.
        action: WaveAction,
    },
    /// A module's rollout stopped for a reason other than its budget.
    RolloutStopped {
        /// The plan.
        plan: String,
        /// The module.
        module: String,
        /// What stopped it.
        by: StopCause,
    },
    /// A plan ended.
    PlanDone {
        /// The plan.
        plan: String,
        /// How.
        outcome: PlanOutcome,
        /// Whether it was a rollback to an earlier build.
        rollback: bool,
    },
    /// Every node failing now, with why (the whole set: a node left out is not failing).
    Nodes {
        /// The failing nodes.
        failing: Vec<FailedNode>,
    },
    /// The daemon as its heartbeat shows it: silent since a time, or heard.
    Daemon {
        /// When it went silent (its last heartbeat), or `None` when it is heard.
        silent_since: Option<u64>,
    },
}

/// What a notice is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum What {
    /// A plan began its rollouts.
    PlanStarted {
        /// The plan.
        plan: String,
        /// The repository.
        repository: String,
        /// The commit.
        commit: String,
        /// Its modules.
        modules: Vec<String>,
        /// Whether it is a rollback.
        rollback: bool,
    },
    /// A wave of a module's rollout is done, within its budget.
    WaveDone {
        /// The plan.
        plan: String,
        /// The module.
        module: String,
        /// The wave's index (0 first).
        wave: usize,
        /// How many of its nodes applied.
        applied: usize,
        /// Those that failed, within the budget.
        failed: Vec<FailedNode>,
    },
    /// A wave's failures exceeded its budget: the module's rollout stopped.
    BudgetExceeded {
        /// The plan.
        plan: String,
        /// The module.
        module: String,
        /// The wave's index.
        wave: usize,
        /// The wave's name.
        name: String,
        /// The budget's failed share, as written (`"10%"`).
        budget: String,
        /// How many of its nodes had answered.
        answered: usize,
        /// Its failed nodes.
        failed: Vec<FailedNode>,
    },
    /// A module's rollout stopped, by what.
    RolloutStopped {
        /// The plan.
        plan: String,
        /// The module.
        module: String,
        /// What stopped it.
        by: StopCause,
    },
    /// A plan ended.
    PlanDone {
        /// The plan.
        plan: String,
        /// How.
        outcome: PlanOutcome,
        /// Whether it was a rollback.
        rollback: bool,
    },
    /// Nodes that began failing since the last observation.
    NodesFailing {
        /// Each, with why.
        nodes: Vec<FailedNode>,
    },
    /// Nodes that were failing and no longer are.
    NodesRecovered {
        /// Their names.
        nodes: Vec<String>,
    },
    /// The daemon's heartbeat stopped.
    DaemonSilent {
        /// Its last heartbeat.
        since: u64,
    },
    /// The daemon is heard again.
    DaemonBack {
        /// When it had gone silent.
        silent_since: u64,
    },
}

/// One message to send: what it is about, how severe, when it was decided, and a key that
/// names it (the same for the same change, so a receiver can de-duplicate too).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Notice {
    /// What names it: `plan-7/started`, `plan-7/web/wave-0/done`, `nodes/failing/1765155600`.
    pub key: String,
    /// When it was decided (the controller's clock, seconds since the epoch).
    pub at: u64,
    /// How severe.
    pub severity: Severity,
    /// What it is about.
    pub what: What,
}

impl Notice {
    /// The nodes it names: `None` for a notice about a plan or the daemon as a whole.
    pub fn nodes(&self) -> Option<Vec<&str>> {
        match &self.what {
            What::WaveDone { failed, .. } if !failed.is_empty() => {
                Some(failed.iter().map(|f| f.node.as_str()).collect())
            }
            What::BudgetExceeded { failed, .. } | What::NodesFailing { nodes: failed } => {
                Some(failed.iter().map(|f| f.node.as_str()).collect())
            }
            What::NodesRecovered { nodes } => Some(nodes.iter().map(String::as_str).collect()),
            What::RolloutStopped {
                by: StopCause::FirstNode { node, .. },
                ..
            } => Some(vec![node.as_str()]),
            What::WaveDone { .. }
            | What::PlanStarted { .. }
            | What::RolloutStopped { .. }
            | What::PlanDone { .. }
            | What::DaemonSilent { .. }
            | What::DaemonBack { .. } => None,
        }
    }
}

/// What has been said, kept by the caller between observations (and across restarts: it is
/// serializable, versioned by [`NOTIFIER_FORMAT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Notifier {
    /// Always [`NOTIFIER_FORMAT`].
    pub format: u32,
    /// The keys of the plans' notices already returned.
    said: BTreeSet<String>,
    /// The nodes failing at the last observation, with why.
    failing: BTreeMap<String, String>,
    /// The daemon's silence at the last observation.
    daemon_silent_since: Option<u64>,
}

impl Default for Notifier {
    fn default() -> Notifier {
        Notifier {
            format: NOTIFIER_FORMAT,
            said: BTreeSet::new(),
            failing: BTreeMap::new(),
            daemon_silent_since: None,
        }
    }
}

impl Notifier {
    /// A notifier that has said nothing.
    pub fn new() -> Notifier {
        Notifier::default()
    }

    /// The notices `observation` calls for at `now`, in order; remembers them, so the same
    /// observation again returns none.
    ///
    /// # Guarantees
    /// - An observation that changes nothing returns nothing.
    /// - At most one notice per kind of change: one for the nodes that began failing, one for
    ///   those that recovered, one for a wave, one for a rollout's stop.
    pub fn observe(&mut self, observation: Observation, now: u64) -> Vec<Notice> {
        match observation {
            Observation::PlanStarted {
                plan,
                repository,
                commit,
                modules,
                rollback,
            } => self.once(
                format!("{plan}/started"),
                now,
                Severity::Info,
                What::PlanStarted {
                    plan,
                    repository,
                    commit,
                    modules,
                    rollback,
                },
            ),
            Observation::Wave {
                plan,
                module,
                action,
            } => self.wave(plan, module, action, now),
            Observation::RolloutStopped { plan, module, by } => self.once(
                format!("{plan}/{module}/stopped"),
                now,
                Severity::Critical,
                What::RolloutStopped { plan, module, by },
            ),
            Observation::PlanDone {
                plan,
                outcome,
                rollback,
            } => {
                let severity = match outcome {
                    PlanOutcome::Done | PlanOutcome::Superseded => Severity::Info,
                    PlanOutcome::Stopped => Severity::Critical,
                };
                self.once(
                    format!("{plan}/done"),
                    now,
                    severity,
                    What::PlanDone {
                        plan,
                        outcome,
                        rollback,
                    },
                )
            }
            Observation::Nodes { failing } => self.nodes(failing, now),
            Observation::Daemon { silent_since } => self.daemon(silent_since, now),
        }
    }

    /// Forgets what was said about `plan`: call it when the plan's records are folded, or
    /// when a stopped plan is opened again (its changes are new changes then).
    pub fn forget_plan(&mut self, plan: &str) {
        let prefix = format!("{plan}/");
        self.said.retain(|key| !key.starts_with(&prefix));
    }

    /// The nodes failing at the last observation.
    pub fn failing(&self) -> impl Iterator<Item = &str> {
        self.failing.keys().map(String::as_str)
    }

    fn once(&mut self, key: String, now: u64, severity: Severity, what: What) -> Vec<Notice> {
        if !self.said.insert(key.clone()) {
            return Vec::new();
        }
        vec![Notice {
            key,
            at: now,
            severity,
            what,
        }]
    }

    fn wave(&mut self, plan: String, module: String, action: WaveAction, now: u64) -> Vec<Notice> {
        match action {
            WaveAction::WaveDone {
                wave,
                applied,
                failed,
            } => {
                let severity = match failed.is_empty() {
                    true => Severity::Info,
                    false => Severity::Warning,
                };
                self.once(
                    format!("{plan}/{module}/wave-{wave}/done"),
                    now,
                    severity,
                    What::WaveDone {
                        plan,
                        module,
                        wave,
                        applied,
                        failed,
                    },
                )
            }
            WaveAction::BudgetExceeded {
                wave,
                name,
                budget,
                answered,
                failed,
            } => self.once(
                format!("{plan}/{module}/stopped"),
                now,
                Severity::Critical,
                What::BudgetExceeded {
                    plan,
                    module,
                    wave,
                    name,
                    budget: budget.failed.to_string(),
                    answered,
                    failed,
                },
            ),
            WaveAction::Aborted { actor, reason, .. } => self.once(
                format!("{plan}/{module}/stopped"),
                now,
                Severity::Critical,
                What::RolloutStopped {
                    plan,
                    module,
                    by: StopCause::Operator { actor, reason },
                },
            ),
            // A wave begun, a send, a wait, a pause or a resume changes what the rollout does
            // next, not what a person must know; a module done is said by its plan done.
            WaveAction::WaveStarted { .. }
            | WaveAction::Send { .. }
            | WaveAction::AwaitApproval { .. }
            | WaveAction::Approved { .. }
            | WaveAction::PauseUntil { .. }
            | WaveAction::WaitForWindow { .. }
            | WaveAction::Paused { .. }
            | WaveAction::HeldByOperator { .. }
            | WaveAction::Resumed { .. }
            | WaveAction::Done => Vec::new(),
        }
    }

    fn nodes(&mut self, failing: Vec<FailedNode>, now: u64) -> Vec<Notice> {
        let now_failing: BTreeMap<String, String> =
            failing.into_iter().map(|f| (f.node, f.reason)).collect();
        let began: Vec<FailedNode> = now_failing
            .iter()
            .filter(|(node, _)| !self.failing.contains_key(*node))
            .map(|(node, reason)| FailedNode {
                node: node.clone(),
                reason: reason.clone(),
            })
            .collect();
        let recovered: Vec<String> = self
            .failing
            .keys()
            .filter(|node| !now_failing.contains_key(*node))
            .cloned()
            .collect();
        self.failing = now_failing;
        let mut notices = Vec::new();
        if !began.is_empty() {
            notices.push(Notice {
                key: format!("nodes/failing/{now}"),
                at: now,
                severity: Severity::Warning,
                what: What::NodesFailing { nodes: began },
            });
        }
        if !recovered.is_empty() {
            notices.push(Notice {
                key: format!("nodes/recovered/{now}"),
                at: now,
                severity: Severity::Info,
                what: What::NodesRecovered { nodes: recovered },
            });
        }
        notices
    }

    fn daemon(&mut self, silent_since: Option<u64>, now: u64) -> Vec<Notice> {
        let before = std::mem::replace(&mut self.daemon_silent_since, silent_since);
        match (before, silent_since) {
            (None, Some(since)) => vec![Notice {
                key: format!("daemon/silent/{since}"),
                at: now,
                severity: Severity::Critical,
                what: What::DaemonSilent { since },
            }],
            (Some(since), None) => vec![Notice {
                key: format!("daemon/back/{now}"),
                at: now,
                severity: Severity::Info,
                what: What::DaemonBack {
                    silent_since: since,
                },
            }],
            // Still silent (its last heartbeat read again) or still heard.
            (Some(_), Some(_)) | (None, None) => Vec::new(),
        }
    }
}

/// Which notices one receiver takes: those at or above a severity, and, when a selector is
/// given, those about the nodes it matches.
///
/// A notice that names nodes goes to a receiver with a selector only when one of them matches,
/// and then names only those; a notice about a plan or the daemon as a whole names no node and
/// goes to every receiver its severity admits.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Filter {
    /// The least severity taken (every one when `None`).
    pub severity: Option<Severity>,
    /// The nodes taken, by name and labels (every one when `None`).
    pub select: Option<Selector>,
}

impl Filter {
    /// The notice as this receiver takes it (narrowed to the nodes it selects), or `None`.
    /// `labels` are the nodes' labels; a node not in it has none.
    pub fn admit(&self, notice: &Notice, labels: &BTreeMap<String, Labels>) -> Option<Notice> {
        if self.severity.is_some_and(|least| notice.severity < least) {
            return None;
        }
        let Some(select) = &self.select else {
            return Some(notice.clone());
        };
        if notice.nodes().is_none() {
            return Some(notice.clone());
        }
        let none = Labels::new();
        let keep = |node: &str| select.matches(node, labels.get(node).unwrap_or(&none));
        let mut narrowed = notice.clone();
        match &mut narrowed.what {
            What::WaveDone { failed, .. }
            | What::BudgetExceeded { failed, .. }
            | What::NodesFailing { nodes: failed } => failed.retain(|f| keep(&f.node)),
            What::NodesRecovered { nodes } => nodes.retain(|node| keep(node)),
            What::RolloutStopped {
                by: StopCause::FirstNode { node, .. },
                ..
            } if !keep(node) => return None,
            What::RolloutStopped { .. }
            | What::PlanStarted { .. }
            | What::PlanDone { .. }
            | What::DaemonSilent { .. }
            | What::DaemonBack { .. } => {}
        }
        // A notice about nodes whose every node was narrowed away is not this receiver's.
        match narrowed.nodes() {
            Some(nodes) if !nodes.is_empty() => Some(narrowed),
            Some(_) | None => None,
        }
    }
}
