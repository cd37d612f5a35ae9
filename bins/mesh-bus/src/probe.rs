//! Proving a node's bus permissions in force, one by one (the rule “Grants before code”: grants
//! before code).
//!
//! A server that let a node's user log in has not necessarily reloaded what that user may do:
//! a change of permissions alone (a module newly granted a state bucket, an event subject taken
//! away) leaves the list of users as it was. Before the controller sends code that needs a
//! grant, it connects as each node's user and asks the server itself.
//!
//! Start at [`prove_permissions`]: it connects as the node, tries every [`Check`] that
//! [`checks`] derives from what the node must be allowed (and what was taken from it), and
//! tries again until every one holds or the deadline passes; what does not hold is said as an
//! [`Unproven`] naming the user, the permission and what the server said.
//!
//! How a check is tried:
//! - a subscription is made and a round trip made through the server ([`crate::nats::round_trip`]);
//!   the server answers a refused one with `Permissions Violation for Subscription to "…"`
//!   ([`Refusal::Subscribe`]);
//! - a publish is made on a subject the permission covers (its wildcards replaced by
//!   [`PROBE_TOKEN`]), with the payload [`PROBE_PAYLOAD`] and the header
//!   `Nats-Expected-Stream: mesh-permission-probe`, so that JetStream stores it in no stream
//!   and no JetStream API takes it as a request it can act on (an empty or JSON request);
//! - after a round trip the connection is drained ([`NatsBus::drain_heard`]): the server answers
//!   a connection in order and the client hands on its events in order, so once the drain is
//!   heard every refusal has been. Nothing is tried only to be refused, so a users change whose
//!   permissions are all in force leaves no error in the server's log.
//!
//! What it must never do: publish where someone may be listening for a module's events — a
//! permission the node both publishes and hears (its event subjects, its inboxes) is proven by
//! the subscription alone; a reload puts a user's publish and subscribe permissions in force
//! together. Its one publish a mesh process hears is the node's own report subject, which the
//! controller reads past ([`is_probe`]).

use crate::grants::Permissions;
use crate::nats::{round_trip, Credentials, Refusal};
use crate::{subject_matches, NatsBus, NatsOptions};
use std::time::Duration;
use tokio::sync::broadcast;

/// The token a probe puts where a permission has a wildcard (`$KV.media.>` is probed on
/// `$KV.media.mesh-permission-probe`).
pub const PROBE_TOKEN: &str = "mesh-permission-probe";

/// The payload of every probe's publish: neither JSON nor empty, so no JetStream API acts on
/// it, and no acknowledgement.
pub const PROBE_PAYLOAD: &[u8] = b"mesh permission probe";

/// The stream a probe's publish says it expects (`Nats-Expected-Stream`): none has the name,
/// so JetStream stores the message nowhere.
const PROBE_STREAM: &str = "mesh-permission-probe";

/// How long a probe waits, after its round trip, for its connection's drain to be heard (and so
/// every refusal the server sent).
pub const REFUSAL_WAIT: Duration = Duration::from_secs(2);

/// How long [`prove_permissions`] waits between tries.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Whether a message's payload is a probe's (the controller reads past these on the reports'
/// subject).
pub fn is_probe(payload: &[u8]) -> bool {
    payload == PROBE_PAYLOAD
}

/// What a check does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    /// Publishes on a subject.
    Publish,
    /// Subscribes to a subject.
    Subscribe,
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Operation::Publish => "publish to",
            Operation::Subscribe => "subscribe to",
        })
    }
}

/// One permission to prove: an operation the server must allow, or must refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What is tried.
    pub operation: Operation,
    /// The permission as granted (or taken away): a subject, wildcards allowed.
    pub permission: String,
    /// The subject tried: the permission itself for a subscription that must be allowed, else
    /// the permission with its wildcards replaced by [`PROBE_TOKEN`] ([`probe_subject`]).
    pub subject: String,
    /// Whether the server must allow it (`false`: it must refuse it).
    pub allowed: bool,
}

/// A permission not (yet) in force, as the server showed it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unproven {
    /// The user could not log in at all.
    #[error("`{user}` cannot log in: {reason}")]
    Login {
        /// The user.
        user: String,
        /// What the connection said.
        reason: String,
    },
    /// A permission the user must have was refused.
    #[error(
        "`{user}` may not yet {operation} `{permission}` (tried on `{subject}`): the server \
         said: {said}"
    )]
    Refused {
        /// The user.
        user: String,
        /// What was tried.
        operation: Operation,
        /// The permission.
        permission: String,
        /// The subject tried.
        subject: String,
        /// The server's words.
        said: String,
    },
    /// A permission the user must not have (taken away, or never granted) was allowed.
    #[error(
        "`{user}` may still {operation} `{permission}` (tried on `{subject}`), which it must \
         not: the server allowed it"
    )]
    Allowed {
        /// The user.
        user: String,
        /// What was tried.
        operation: Operation,
        /// The permission.
        permission: String,
        /// The subject tried.
        subject: String,
    },
    /// The probe itself could not be made (the connection failed midway).
    #[error("`{user}`'s permissions could not be tried: {reason}")]
    Probe {
        /// The user.
        user: String,
        /// What failed.
        reason: String,
    },
}

/// A subject `pattern` covers: its wildcards replaced by [`PROBE_TOKEN`].
pub fn probe_subject(pattern: &str) -> String {
    pattern
        .split('.')
        .map(|token| match token {
            "*" | ">" => PROBE_TOKEN,
            token => token,
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// What proves a node's permissions in force: every permission of `expected` allowed, and every
/// one of `previous` that `expected` no longer grants refused.
///
/// A publish permission the node may also hear is checked by its subscription alone (see the
/// module's documentation); so is one taken away. A permission taken away is tried on a
/// subject it covers ([`probe_subject`]), and not at all when the new permissions cover that
/// subject too (`media.scan` taken away, `media.*` granted): the server allows it.
///
/// # Guarantees
/// Pure; the checks come in the order of `expected` and `previous` (sorted, as
/// [`crate::grants::node_permissions`] gives them).
pub fn checks(expected: &Permissions, previous: Option<&Permissions>) -> Vec<Check> {
    let mut checks = Vec::new();
    for permission in &expected.subscribe {
        checks.push(Check {
            operation: Operation::Subscribe,
            permission: permission.clone(),
            subject: permission.clone(),
            allowed: true,
        });
    }
    for permission in &expected.publish {
        if !expected.subscribe.contains(permission) {
            checks.push(Check {
                operation: Operation::Publish,
                permission: permission.clone(),
                subject: probe_subject(permission),
                allowed: true,
            });
        }
    }
    if let Some(previous) = previous {
        for permission in &previous.subscribe {
            // On a subject the permission covers, not the pattern: the server lets a
            // subscription to `logs.>` through an allowed `logs.*`.
            let subject = probe_subject(permission);
            if !expected
                .subscribe
                .iter()
                .any(|granted| subject_matches(granted, &subject))
            {
                checks.push(Check {
                    operation: Operation::Subscribe,
                    permission: permission.clone(),
                    subject,
                    allowed: false,
                });
            }
        }
        for permission in &previous.publish {
            let subject = probe_subject(permission);
            if !previous.subscribe.contains(permission)
                && !expected
                    .publish
                    .iter()
                    .any(|granted| subject_matches(granted, &subject))
            {
                checks.push(Check {
                    operation: Operation::Publish,
                    permission: permission.clone(),
                    subject,
                    allowed: false,
                });
            }
        }
    }
    checks
}

fn refusal_of(check: &Check) -> Refusal {
    match check.operation {
        Operation::Publish => Refusal::Publish {
            subject: check.subject.clone(),
        },
        Operation::Subscribe => Refusal::Subscribe {
            subject: check.subject.clone(),
        },
    }
}

fn said(refusal: &Refusal) -> String {
    match refusal {
        Refusal::Publish { subject } => format!("Permissions Violation for Publish to {subject:?}"),
        Refusal::Subscribe { subject } => {
            format!("Permissions Violation for Subscription to {subject:?}")
        }
        Refusal::Other { error } => error.clone(),
    }
}

fn user_of(options: &NatsOptions) -> String {
    match &options.credentials {
        Some(credentials @ (Credentials::UserPassword { .. } | Credentials::Nkey { .. })) => {
            credentials.user().to_owned()
        }
        None => "(no user)".to_owned(),
    }
}

/// Tries every check once on a fresh connection: what did not hold (empty: every one held).
///
/// The refusals are read once the connection's drain is heard ([`NatsBus::drain_heard`]), which
/// tells that every one the server sent has been.
pub async fn try_checks(options: &NatsOptions, checks: &[Check]) -> Vec<Unproven> {
    let user = user_of(options);
    let probe_failed = |reason: String| {
        vec![Unproven::Probe {
            user: user.clone(),
            reason,
        }]
    };
    // A check may be refused until a reload, or on purpose (a permission taken away): no error
    // to log.
    let probing = NatsOptions {
        refusals_expected: true,
        ..options.clone()
    };
    let bus = match NatsBus::connect(&probing).await {
        Ok(bus) => bus,
        Err(error) => {
            return vec![Unproven::Login {
                user,
                reason: error.to_string(),
            }]
        }
    };
    let client = bus.client();
    let mut refusals = bus.refusals();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Expected-Stream", PROBE_STREAM);
    // Held until the end: a subscription dropped is unsubscribed.
    let mut subscriptions = Vec::new();
    for check in checks {
        let sent = match check.operation {
            Operation::Subscribe => client
                .subscribe(check.subject.clone())
                .await
                .map(|subscription| subscriptions.push(subscription))
                .map_err(|error| error.to_string()),
            Operation::Publish => client
                .publish_with_headers(
                    check.subject.clone(),
                    headers.clone(),
                    bytes::Bytes::from_static(PROBE_PAYLOAD),
                )
                .await
                .map_err(|error| error.to_string()),
        };
        if let Err(reason) = sent {
            return probe_failed(format!("{} `{}`: {reason}", check.operation, check.subject));
        }
    }
    if let Err(error) = round_trip(client).await {
        return probe_failed(error.to_string());
    }
    // The server answered every operation before the round trip's echo, and the client hands
    // its refusals on in order: once the drain is heard, every refusal is on `refusals`.
    match tokio::time::timeout(REFUSAL_WAIT, bus.drain_heard()).await {
        Ok(Ok(())) => {}
        Ok(Err(reason)) => return probe_failed(reason),
        Err(_) => {
            return probe_failed(format!(
                "the connection's drain was not heard within {} s",
                REFUSAL_WAIT.as_secs()
            ))
        }
    }
    let mut heard = Vec::new();
    loop {
        match refusals.try_recv() {
            Ok(refusal) => heard.push(refusal),
            Err(broadcast::error::TryRecvError::Lagged(missed)) => {
                return probe_failed(format!("{missed} of the server's refusals were missed"))
            }
            Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed) => {
                break
            }
        }
    }
    let mut unproven = Vec::new();
    for check in checks {
        let refusal = refusal_of(check);
        match (check.allowed, heard.contains(&refusal)) {
            (true, true) => unproven.push(Unproven::Refused {
                user: user.clone(),
                operation: check.operation,
                permission: check.permission.clone(),
                subject: check.subject.clone(),
                said: said(&refusal),
            }),
            (false, false) => unproven.push(Unproven::Allowed {
                user: user.clone(),
                operation: check.operation,
                permission: check.permission.clone(),
                subject: check.subject.clone(),
            }),
            (true, false) | (false, true) => {}
        }
    }
    for refusal in &heard {
        if let Refusal::Other { error } = refusal {
            tracing::warn!(%user, %error, "the nats server said something else while probing");
        }
    }
    unproven
}

/// Proves that the server has put a node's permissions in force: every permission of
/// `expected` allowed, every one taken away since `previous` refused (see [`checks`]).
/// Tries again, on a fresh connection each time, until every check holds or `deadline`
/// passes (the server reloading its users).
///
/// `options` connect as the node (see [`NatsOptions::for_node`]).
///
/// # Guarantees
/// Stores nothing and asks no JetStream API to act (see the module's documentation); every
/// connection it made is closed when it returns.
///
/// # Errors
/// What did not hold at the last try, each naming user, permission and what the server said.
pub async fn prove_permissions(
    options: &NatsOptions,
    expected: &Permissions,
    previous: Option<&Permissions>,
    deadline: tokio::time::Instant,
) -> Result<(), Vec<Unproven>> {
    let checks = checks(expected, previous);
    loop {
        let unproven = try_checks(options, &checks).await;
        if unproven.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() + RETRY_PAUSE >= deadline {
            return Err(unproven);
        }
        tracing::debug!(user = %user_of(options), unproven = unproven.len(),
            "permissions not yet in force; trying again");
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grants::{node_permissions, NodeGrants};

    fn grants(buckets: &[&str], subjects: &[&str]) -> Permissions {
        node_permissions(&NodeGrants {
            node: "home".into(),
            password: "secret".into(),
            buckets: buckets.iter().map(|b| b.to_string()).collect(),
            subjects: subjects.iter().map(|s| s.to_string()).collect(),
        })
    }

    fn listed(checks: &[Check]) -> String {
        checks
            .iter()
            .map(|check| {
                format!(
                    "{} {} {} (on {})",
                    if check.allowed { "allow " } else { "refuse" },
                    check.operation,
                    check.permission,
                    check.subject
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn every_permission_is_checked_and_what_was_taken_away_refused() {
        // The incident behind “Grants before code”: home gains the bucket `media` and loses the
        // event subject `media.done`.
        let before = grants(&["agent"], &["media.scan", "media.done", "logs.*"]);
        let after = grants(&["agent", "media"], &["media.scan", "logs.>"]);
        insta::assert_snapshot!(listed(&checks(&after, Some(&before))));
    }

    #[test]
    fn a_first_proof_asks_the_server_for_no_refusal() {
        // A refusal is an error in the server's log: a proof of permissions granted, nothing
        // taken away, tries only what must be allowed.
        let checks = checks(&grants(&[], &[]), None);
        assert!(!checks.is_empty());
        assert!(checks.iter().all(|check| check.allowed), "{checks:#?}");
    }

    #[test]
    fn a_probe_subject_is_covered_by_its_permission() {
        for pattern in ["$KV.media.>", "a.*.c", "mesh.report.home"] {
            let subject = probe_subject(pattern);
            assert!(crate::is_valid_subject(&subject, false), "{subject}");
            assert!(subject_matches(pattern, &subject), "{pattern} {subject}");
        }
    }
}
