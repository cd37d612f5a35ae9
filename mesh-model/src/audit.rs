//! What an audit entry says: who did what, to what, when, with what outcome and why. The log
//! that keeps the entries (appended, sealed, verified) is mesh-records' `audit`; this is the
//! meaning of one.
//!
//! A secret's value never appears in an entry: a setting's `before` and `after` are its keyed
//! digest (mesh-secrets), never the value.

use serde::{Deserialize, Serialize};

/// The format of an entry this build writes.
pub const AUDIT_FORMAT: u32 = 1;

/// Who an act is recorded against when a command runs it: `--actor` when given, else
/// `MESH_ACTOR`, else `user@machine`, else `unknown`. A webhook's act is the forge's pusher's,
/// and the daemon's own decisions are [`DAEMON`]'s (their callers name them).
pub fn actor(
    given: Option<&str>,
    environment: Option<&str>,
    user: Option<&str>,
    machine: Option<&str>,
) -> String {
    fn named(text: Option<&str>) -> Option<&str> {
        text.map(str::trim).filter(|t| !t.is_empty())
    }
    if let Some(actor) = named(given).or(named(environment)) {
        return actor.to_owned();
    }
    match (named(user), named(machine)) {
        (Some(user), Some(machine)) => format!("{user}@{machine}"),
        (Some(user), None) => user.to_owned(),
        (None, Some(machine)) => format!("unknown@{machine}"),
        (None, None) => "unknown".to_owned(),
    }
}

/// The actor of the daemon's own decisions (a plan superseded, a budget stop, a revert).
pub const DAEMON: &str = "daemon";

/// What was done: every act that changes what the fleet runs or may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// A merge made a plan.
    Merge,
    /// A push sent declarations by hand.
    Push,
    /// A module sent back to an earlier build.
    Rollback,
    /// A module pinned to a build.
    Pin,
    /// A pin released.
    Unpin,
    /// A wave waiting on an approval let go.
    PlanApprove,
    /// A rollout held at its next wave.
    PlanPause,
    /// A paused rollout let go on.
    PlanResume,
    /// A rollout stopped where it stood.
    PlanAbort,
    /// A plan closed.
    PlanClose,
    /// A stopped plan opened again where it stopped.
    PlanRetry,
    /// A held move of a container's data let go.
    PlanRelease,
    /// A setting set.
    SettingsSet,
    /// A secret setting set (its keyed digest recorded, never its value).
    SettingsSetSecret,
    /// A setting cleared.
    SettingsClear,
    /// A setting renamed.
    SettingsRename,
    /// A settings layer put back from its history.
    SettingsRestore,
    /// The secrets key rotated.
    SecretsRotate,
    /// The operators who may read secrets changed.
    SecretsRecipients,
    /// A node's key enrolled on the bus.
    NodeEnroll,
    /// A node added to the fleet.
    NodeAdd,
    /// A node removed from the fleet.
    NodeRemove,
    /// A repository registered.
    RepoAdd,
    /// A repository's options changed.
    RepoSet,
    /// A repository removed.
    RepoRemove,
    /// Drift acknowledged.
    StatusAck,
    /// The daemon: a newer plan of a branch took over an older one.
    Supersede,
    /// The daemon: a rollout stopped at its failure budget.
    BudgetStop,
    /// The daemon: nodes sent back to what they ran before.
    Revert,
    /// An act a newer mesh recorded, which this build does not know.
    #[serde(other)]
    Unknown,
}

/// How the act ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// It was done.
    Done,
    /// It was refused, or held: nothing changed.
    Refused,
    /// It was tried and failed part way or whole.
    Failed,
    /// An outcome a newer mesh recorded.
    #[serde(other)]
    Unknown,
}

/// One act, as the audit log records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AuditEntry {
    /// [`AUDIT_FORMAT`].
    pub format: u32,
    /// When (RFC 3339, UTC), as the caller's clock said.
    pub at: String,
    /// Who ([`actor`], the forge's pusher, or [`DAEMON`]).
    pub actor: String,
    /// What.
    pub action: Action,
    /// The module it concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// The node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// The commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// A digest of what was there before (a build, a declaration, a secret's keyed digest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// A digest of what is there after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// How it ended.
    pub outcome: Outcome,
    /// Why: the reason given, or what stopped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Why an entry read back is not one this build can read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EntryError {
    /// Not an audit entry.
    #[error("not an audit entry: {0}")]
    Malformed(String),
    /// A format this build does not read.
    #[error("an audit entry of format {found}; this build reads format {AUDIT_FORMAT}")]
    Format {
        /// The entry's format.
        found: u32,
    },
}

impl AuditEntry {
    /// An entry of `action` by `actor` at `at`, done, naming nothing yet.
    pub fn new(at: &str, actor: &str, action: Action) -> AuditEntry {
        AuditEntry {
            format: AUDIT_FORMAT,
            at: at.to_owned(),
            actor: actor.to_owned(),
            action,
            module: None,
            node: None,
            plan: None,
            commit: None,
            before: None,
            after: None,
            outcome: Outcome::Done,
            reason: None,
        }
    }

    /// The entry as the log is given it: a JSON object.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// An entry read back from the log (the `entry` of a sealed line).
    ///
    /// # Errors
    /// Not an entry, or of another format.
    pub fn from_value(value: &serde_json::Value) -> Result<AuditEntry, EntryError> {
        let format = value
            .get("format")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| EntryError::Malformed("it has no `format`".to_owned()))?;
        if format != u64::from(AUDIT_FORMAT) {
            return Err(EntryError::Format {
                found: u32::try_from(format).unwrap_or(u32::MAX),
            });
        }
        serde_json::from_value(value.clone()).map_err(|e| EntryError::Malformed(e.to_string()))
    }

    /// Whether the entry names `node`, `module` or `plan` as given (each `None`: any).
    pub fn concerns(&self, module: Option<&str>, node: Option<&str>, plan: Option<&str>) -> bool {
        let matches = |wanted: Option<&str>, has: &Option<String>| {
            wanted.is_none_or(|wanted| has.as_deref() == Some(wanted))
        };
        matches(module, &self.module) && matches(node, &self.node) && matches(plan, &self.plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_actor_is_the_flag_then_the_environment_then_user_at_machine() {
        let cases = [
            ((Some("ana"), Some("bo"), Some("root"), Some("ctl")), "ana"),
            ((None, Some("bo"), Some("root"), Some("ctl")), "bo"),
            (
                (Some("  "), Some(""), Some("root"), Some("ctl")),
                "root@ctl",
            ),
            ((None, None, Some("root"), None), "root"),
            ((None, None, None, Some("ctl")), "unknown@ctl"),
            ((None, None, None, None), "unknown"),
        ];
        for ((given, environment, user, machine), expected) in cases {
            assert_eq!(actor(given, environment, user, machine), expected);
        }
    }

    #[test]
    fn an_entry_reads_back_as_written_with_its_keys_in_kebab_case() {
        let mut entry = AuditEntry::new("2026-12-08T01:00:00Z", "ana@ctl", Action::PlanApprove);
        entry.plan = Some("plan-7".to_owned());
        entry.module = Some("web".to_owned());
        entry.reason = Some("canaries look fine".to_owned());
        let value: serde_json::Value = serde_json::from_slice(&entry.to_json()).unwrap();
        assert_eq!(value["action"], "plan-approve");
        assert_eq!(value["outcome"], "done");
        assert!(value.get("node").is_none(), "{value}");
        assert_eq!(AuditEntry::from_value(&value).unwrap(), entry);
        assert!(entry.concerns(Some("web"), None, Some("plan-7")));
        assert!(!entry.concerns(None, Some("a"), None));
    }

    #[test]
    fn an_act_a_newer_mesh_recorded_reads_as_unknown_and_another_format_is_refused() {
        let newer = serde_json::json!({
            "format": 1, "at": "t", "actor": "a", "action": "teleport", "outcome": "maybe"
        });
        let entry = AuditEntry::from_value(&newer).unwrap();
        assert_eq!(
            (entry.action, entry.outcome),
            (Action::Unknown, Outcome::Unknown)
        );
        let other = serde_json::json!({"format": 2, "at": "t"});
        assert_eq!(
            AuditEntry::from_value(&other),
            Err(EntryError::Format { found: 2 })
        );
        assert!(matches!(
            AuditEntry::from_value(&serde_json::json!([1])),
            Err(EntryError::Malformed(_))
        ));
    }
}
