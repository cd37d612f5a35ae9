//! Grants as bus permissions (the rule “Grants before code”): the NATS server's
//! `authorization { users = [...] }` block, composed from the nodes and what their modules are
//! granted.
//!
//! Start at [`users_config`]: a pure function from [`BusUsers`] to the text the node holding the
//! bus includes in its server configuration (and reloads). Each user proves itself with an
//! NKey ([`UserCredential::Nkey`]: the file then holds its public key only, no secret; the rule
//! “Secrets never leave their owner”) or, until its node is enrolled, a password
//! ([`UserCredential::Password`]); [`users_on_passwords`] names those still on one.
//! [`authorization_config`] is the same for password users ([`BusAuthorization`]).
//! [`node_permissions`] says what one node may do; [`bus_users`] is the list of users, which the
//! controller compares to know whether the bus node must be sent first.
//!
//! What it must never do: read a clock, a file or the network (the output is a function of its
//! input alone, byte for byte), or let a node near another node's declarations or reports — a
//! module's grant that overlaps the mesh's own subjects or the server's APIs is refused.
//!
//! What a node may do:
//! - hear its own declarations (`mesh.declaration.<node>`), and ask the declarations stream for
//!   the last one on its own subject (a direct get naming the subject:
//!   `$JS.API.DIRECT.GET.MESH_DECLARATIONS.mesh.declaration.<node>`, the only form it may send —
//!   the form carrying the subject in its body could name another node's);
//! - read its own durable consumer there (`host-<node>`), which a host of an earlier mesh read
//!   its declarations through and a fleet upgraded from one still has (none is made now);
//! - publish its own reports (`mesh.report.<node>`);
//! - hear (and publish to) its own reply inboxes only (`_INBOX.node-<node>.>`: it must connect
//!   with [`node_inbox_prefix`], as [`crate::NatsOptions::for_node`] does), and answer requests
//!   it heard (`allow_responses`);
//! - answer discovery (`$SRV.>`);
//! - use each state bucket it is granted (`$KV.<bucket>.>` and the JetStream API subjects a
//!   key-value store needs: stream info, direct and stored gets, watches) and publish and hear
//!   each event subject it is granted.
//!
//! The controller's user may do everything.

use crate::is_valid_subject;
use crate::subjects::{
    self, declaration_consumer, node_inbox_prefix, node_user, probe_inbox_prefix,
    probe_subject_for, CONTROLLER_USER, DECLARATIONS_STREAM, PROBE_USER,
};
use std::collections::BTreeSet;

/// Who may use the bus: the controller and every node with what its modules are granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusAuthorization {
    /// The controller's password, as the server configuration holds it: plain, or a bcrypt
    /// hash (`$2a$…`).
    pub controller_password: String,
    /// Every node.
    pub nodes: Vec<NodeGrants>,
}

/// One node's user and what its modules are granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGrants {
    /// The node (a subject token: `[A-Za-z0-9_-]`).
    pub node: String,
    /// Its password, plain or a bcrypt hash.
    pub password: String,
    /// The state buckets its modules read and write.
    pub buckets: Vec<String>,
    /// The event subjects its modules publish and hear.
    pub subjects: Vec<String>,
}

/// How a user proves itself, as the server's users file holds it. `Debug` never shows a
/// password.
#[derive(Clone, PartialEq, Eq)]
pub enum UserCredential {
    /// A password, plain or a bcrypt hash (`$2a$…`): the file then holds it.
    Password(String),
    /// An NKey user public key (`U…`): the file holds no secret; the user signs with its
    /// seed, which never leaves its machine.
    Nkey(String),
}

impl std::fmt::Debug for UserCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UserCredential::Password(_) => f.write_str("Password(<hidden>)"),
            UserCredential::Nkey(key) => f.debug_tuple("Nkey").field(key).finish(),
        }
    }
}

/// Who may use the bus, each user with its own credential: the controller and every node
/// with what its modules are granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusUsers {
    /// The controller's credential.
    pub controller: UserCredential,
    /// Every node.
    pub nodes: Vec<NodeUser>,
}

/// One node's credential and what its modules are granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeUser {
    /// The node (a subject token: `[A-Za-z0-9_-]`).
    pub node: String,
    /// How it proves itself.
    pub credential: UserCredential,
    /// The state buckets its modules read and write.
    pub buckets: Vec<String>,
    /// The event subjects its modules publish and hear.
    pub subjects: Vec<String>,
}

impl From<&BusAuthorization> for BusUsers {
    fn from(authorization: &BusAuthorization) -> BusUsers {
        BusUsers {
            controller: UserCredential::Password(authorization.controller_password.clone()),
            nodes: authorization
                .nodes
                .iter()
                .map(|grants| NodeUser {
                    node: grants.node.clone(),
                    credential: UserCredential::Password(grants.password.clone()),
                    buckets: grants.buckets.clone(),
                    subjects: grants.subjects.clone(),
                })
                .collect(),
        }
    }
}

/// What one user may publish and hear, sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permissions {
    /// Subjects it may publish on.
    pub publish: Vec<String>,
    /// Subjects it may subscribe to.
    pub subscribe: Vec<String>,
}

/// Why a set of grants cannot be made a server configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantProblem {
    /// A node's name is not a single subject token of `[A-Za-z0-9_-]`.
    #[error("node `{node}`: its name must be letters, digits, `-` or `_`")]
    NodeName {
        /// The node.
        node: String,
    },
    /// The same node is listed twice.
    #[error("node `{node}` is listed twice")]
    DuplicateNode {
        /// The node.
        node: String,
    },
    /// A user has no password.
    #[error("user `{user}` has an empty password")]
    EmptyPassword {
        /// The user.
        user: String,
    },
    /// A user's NKey is not a user public key (`U…`); a seed given by mistake is never echoed.
    #[error("user `{user}`: its nkey is not an NKey user public key (U…, 56 characters)")]
    Nkey {
        /// The user.
        user: String,
    },
    /// A password holds a character the configuration cannot carry (a control character).
    #[error("user `{user}`: its password holds a control character")]
    Password {
        /// The user.
        user: String,
    },
    /// A bucket's name is not `[A-Za-z0-9_-]`.
    #[error("node `{node}`: bucket `{bucket}` must be named with letters, digits, `-` or `_`")]
    BucketName {
        /// The node.
        node: String,
        /// The bucket.
        bucket: String,
    },
    /// A bucket that is the mesh's own: the controller's records, which hold every node's
    /// password.
    #[error(
        "node `{node}`: bucket `{bucket}` is the mesh controller's records and is never granted"
    )]
    ReservedBucket {
        /// The node.
        node: String,
        /// The bucket.
        bucket: String,
    },
    /// An event subject is not valid NATS syntax.
    #[error("node `{node}`: `{subject}` is not a valid subject")]
    Subject {
        /// The node.
        node: String,
        /// The subject.
        subject: String,
    },
    /// An event subject reaches into the mesh's own subjects or the server's APIs.
    #[error(
        "node `{node}`: subject `{subject}` overlaps `{reserved}`, which no module is granted"
    )]
    ReservedSubject {
        /// The node.
        node: String,
        /// The subject.
        subject: String,
        /// The reserved subjects it overlaps.
        reserved: String,
    },
}

/// Subjects no module may be granted: the mesh's own and the server's.
pub const RESERVED_SUBJECTS: [&str; 9] = [
    subjects::MESH,
    "$JS.>",
    "$KV.>",
    "$O.>",
    "$SRV.>",
    "$SYS.>",
    "$NRG.>",
    "_INBOX.>",
    "$JSC.>",
];

fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Whether some subject matches both patterns.
pub fn patterns_overlap(a: &str, b: &str) -> bool {
    let a: Vec<&str> = a.split('.').collect();
    let b: Vec<&str> = b.split('.').collect();
    let mut i = 0;
    loop {
        match (a.get(i), b.get(i)) {
            (Some(&">"), Some(_)) | (Some(_), Some(&">")) => return true,
            (Some(x), Some(y)) if *x == "*" || *y == "*" || x == y => i += 1,
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// What `grants.node` may publish and hear (see the module's documentation).
///
/// Buckets and subjects are sorted and deduplicated; the result does not depend on their order.
pub fn node_permissions(grants: &NodeGrants) -> Permissions {
    permissions_of(&grants.node, &grants.buckets, &grants.subjects)
}

/// What `user.node` may publish and hear: [`node_permissions`] whatever its credential.
pub fn node_user_permissions(user: &NodeUser) -> Permissions {
    permissions_of(&user.node, &user.buckets, &user.subjects)
}

fn permissions_of(node: &str, buckets: &[String], subjects: &[String]) -> Permissions {
    let consumer = declaration_consumer(node);
    let declarations = DECLARATIONS_STREAM;
    let mut publish = BTreeSet::from([
        subjects::report(node),
        format!(
            "$JS.API.DIRECT.GET.{declarations}.{}",
            subjects::declaration(node)
        ),
        // A host of an earlier mesh reads its durable consumer, made by an earlier controller.
        format!("$JS.API.CONSUMER.INFO.{declarations}.{consumer}"),
        format!("$JS.API.CONSUMER.MSG.NEXT.{declarations}.{consumer}"),
        format!("$JS.ACK.{declarations}.{consumer}.>"),
        // Its own inboxes: a round trip through the server (see `NatsBus::round_trip`).
        format!("{}.>", node_inbox_prefix(node)),
    ]);
    let mut subscribe = BTreeSet::from([
        subjects::declaration(node),
        format!("{}.>", node_inbox_prefix(node)),
        "$SRV.>".to_owned(),
    ]);
    for bucket in buckets {
        let stream = subjects::bucket_stream_name(bucket);
        publish.extend([
            subjects::bucket_all(bucket),
            format!("$JS.API.STREAM.INFO.{stream}"),
            format!("$JS.API.STREAM.MSG.GET.{stream}"),
            format!("$JS.API.DIRECT.GET.{stream}"),
            format!("$JS.API.DIRECT.GET.{stream}.>"),
            format!("$JS.API.CONSUMER.CREATE.{stream}"),
            format!("$JS.API.CONSUMER.CREATE.{stream}.>"),
            format!("$JS.API.CONSUMER.INFO.{stream}.>"),
            format!("$JS.API.CONSUMER.DELETE.{stream}.>"),
            format!("$JS.FC.{stream}.>"),
        ]);
    }
    for subject in subjects {
        publish.insert(subject.clone());
        subscribe.insert(subject.clone());
    }
    Permissions {
        publish: publish.into_iter().collect(),
        subscribe: subscribe.into_iter().collect(),
    }
}

/// Every problem with a set of grants, at once (none: it can be composed).
pub fn check(authorization: &BusAuthorization) -> Vec<GrantProblem> {
    check_users(&BusUsers::from(authorization))
}

/// Every problem with a set of users, at once (none: it can be composed).
pub fn check_users(users: &BusUsers) -> Vec<GrantProblem> {
    let mut problems = Vec::new();
    let mut credential = |user: String, credential: &UserCredential| match credential {
        UserCredential::Password(password) if password.is_empty() => {
            problems.push(GrantProblem::EmptyPassword { user });
        }
        UserCredential::Password(password) if password.chars().any(char::is_control) => {
            problems.push(GrantProblem::Password { user });
        }
        UserCredential::Password(_) => {}
        UserCredential::Nkey(key) => {
            if !crate::keys::is_user_public_key(key) {
                problems.push(GrantProblem::Nkey { user });
            }
        }
    };
    credential(CONTROLLER_USER.to_owned(), &users.controller);
    for user in &users.nodes {
        credential(node_user(&user.node), &user.credential);
    }
    let mut seen = BTreeSet::new();
    for grants in &users.nodes {
        let node = &grants.node;
        if !is_name(node) {
            problems.push(GrantProblem::NodeName { node: node.clone() });
        }
        if !seen.insert(node.as_str()) {
            problems.push(GrantProblem::DuplicateNode { node: node.clone() });
        }
        for bucket in &grants.buckets {
            if !is_name(bucket) {
                problems.push(GrantProblem::BucketName {
                    node: node.clone(),
                    bucket: bucket.clone(),
                });
            } else if crate::records::is_records_bucket(bucket) {
                problems.push(GrantProblem::ReservedBucket {
                    node: node.clone(),
                    bucket: bucket.clone(),
                });
            }
        }
        for subject in &grants.subjects {
            if !is_valid_subject(subject, true) || subject.contains('"') {
                problems.push(GrantProblem::Subject {
                    node: node.clone(),
                    subject: subject.clone(),
                });
            } else if let Some(reserved) = RESERVED_SUBJECTS
                .iter()
                .find(|reserved| patterns_overlap(subject, reserved))
            {
                problems.push(GrantProblem::ReservedSubject {
                    node: node.clone(),
                    subject: subject.clone(),
                    reserved: (*reserved).to_owned(),
                });
            }
        }
    }
    problems
}

/// The bus's users, sorted: the controller's and one per node. When this list changes, the
/// node holding the bus is sent first (the rule “Grants before code”).
pub fn bus_users(authorization: &BusAuthorization) -> Vec<String> {
    users_of(&BusUsers::from(authorization))
}

/// The users of a [`BusUsers`], sorted, as [`bus_users`].
pub fn users_of(users: &BusUsers) -> Vec<String> {
    let mut names: Vec<String> = std::iter::once(CONTROLLER_USER.to_owned())
        .chain(users.nodes.iter().map(|n| node_user(&n.node)))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The users still proving themselves with a password (not yet enrolled with an NKey), sorted:
/// what `status` names.
pub fn users_on_passwords(users: &BusUsers) -> Vec<String> {
    let mut names: Vec<String> = std::iter::once((CONTROLLER_USER.to_owned(), &users.controller))
        .chain(
            users
                .nodes
                .iter()
                .map(|n| (node_user(&n.node), &n.credential)),
        )
        .filter(|(_, credential)| matches!(credential, UserCredential::Password(_)))
        .map(|(name, _)| name)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// A user's opening lines in the users file: its name and credential. An NKey user is known
/// to the server by its key alone (it takes no `user`), so its name is a comment the mesh
/// reads back ([`permissions_in_config`]).
fn user_entry(out: &mut String, user: &str, credential: &UserCredential) {
    match credential {
        UserCredential::Password(password) => out.push_str(&format!(
            "      user: {}\n      password: {}\n",
            quoted(user),
            quoted(password)
        )),
        UserCredential::Nkey(key) => out.push_str(&format!(
            "      # user: {}\n      nkey: {}\n",
            quoted(user),
            quoted(key)
        )),
    }
}

fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn list(out: &mut String, key: &str, items: &[String]) {
    out.push_str(&format!("        {key}: {{\n          allow: [\n"));
    for item in items {
        out.push_str(&format!("            {}\n", quoted(item)));
    }
    out.push_str("          ]\n        }\n");
}

/// The server's `authorization` block: the controller may do everything, each node what
/// [`node_permissions`] says. The node holding the bus includes it in its server configuration
/// and reloads the server when it changes — with JetStream set in that configuration file, not
/// by the `-js` flag (see the test kit's `nats_server`).
///
/// # Guarantees
/// Pure and deterministic: the same grants give the same bytes whatever the order of nodes,
/// buckets and subjects, so two outputs compare equal exactly when the permissions are equal.
///
/// # Errors
/// Every [`GrantProblem`] at once (see [`check`]).
pub fn authorization_config(authorization: &BusAuthorization) -> Result<String, Vec<GrantProblem>> {
    users_config(&BusUsers::from(authorization))
}

/// The server's `authorization` block for `users`: the controller may do everything, each node
/// what [`node_permissions`] says; each user with its credential — an NKey's public key (no
/// secret in the file) or a password. With every user on an NKey, the file is no secret.
///
/// # Guarantees
/// Pure and deterministic, as [`authorization_config`]; for users all on passwords the bytes
/// are [`authorization_config`]'s.
///
/// # Errors
/// Every [`GrantProblem`] at once (see [`check_users`]).
pub fn users_config(users: &BusUsers) -> Result<String, Vec<GrantProblem>> {
    let problems = check_users(users);
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut nodes: Vec<&NodeUser> = users.nodes.iter().collect();
    nodes.sort_by(|a, b| a.node.cmp(&b.node));
    let mut out = String::from(
        "# The mesh's bus users and what each may do (grants before code), composed by mesh-controller.\n\
         # Do not edit: the next send replaces it.\n\
         authorization {\n  users = [\n",
    );
    out.push_str("    {\n");
    user_entry(&mut out, CONTROLLER_USER, &users.controller);
    out.push_str("    }\n");
    for user in nodes {
        let permissions = node_user_permissions(user);
        out.push_str("    {\n");
        user_entry(&mut out, &node_user(&user.node), &user.credential);
        out.push_str("      permissions: {\n");
        list(&mut out, "publish", &permissions.publish);
        list(&mut out, "subscribe", &permissions.subscribe);
        out.push_str("        allow_responses: true\n      }\n    }\n");
    }
    out.push_str("  ]\n}\n");
    Ok(out)
}

/// What the probe user may do in the file made from `users`: publish on
/// [`probe_subject_for`] and use its own inboxes.
pub fn probe_permissions(users: &str) -> Permissions {
    let inbox = format!("{}.>", probe_inbox_prefix());
    let mut publish = vec![inbox.clone(), probe_subject_for(users)];
    publish.sort();
    Permissions {
        publish,
        subscribe: vec![inbox],
    }
}

/// [`users_config`] with the probe user ([`PROBE_USER`], known by `probe_public_key`) added,
/// allowed what [`probe_permissions`] of the text without it says.
///
/// # Guarantees
/// Pure and deterministic, as [`users_config`]; the file holds no more secret than
/// [`users_config`]'s (the probe's public key only).
///
/// # Errors
/// Every [`GrantProblem`] at once, the probe's key among them.
pub fn users_config_with_probe(
    users: &BusUsers,
    probe_public_key: &str,
) -> Result<String, Vec<GrantProblem>> {
    let mut problems = check_users(users);
    if !crate::keys::is_user_public_key(probe_public_key) {
        problems.push(GrantProblem::Nkey {
            user: PROBE_USER.to_owned(),
        });
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let text = users_config(users)?;
    let permissions = probe_permissions(&text);
    let mut entry = String::from("    {\n");
    user_entry(
        &mut entry,
        PROBE_USER,
        &UserCredential::Nkey(probe_public_key.to_owned()),
    );
    entry.push_str("      permissions: {\n");
    list(&mut entry, "publish", &permissions.publish);
    list(&mut entry, "subscribe", &permissions.subscribe);
    entry.push_str("      }\n    }\n");
    let end = text
        .rfind("  ]\n}\n")
        .expect("users_config ends its list of users so");
    Ok(format!("{}{entry}{}", &text[..end], &text[end..]))
}

/// The text [`users_config_with_probe`] made, without the probe user: what
/// [`probe_subject_for`] is computed over.
pub fn without_probe(text: &str) -> String {
    let marker = format!("      # user: {}\n", quoted(PROBE_USER));
    let Some(at) = text.find(&marker) else {
        return text.to_owned();
    };
    let start = text[..at].rfind("    {\n").unwrap_or(at);
    let end = text[at..]
        .find("\n    }\n")
        .map_or(text.len(), |offset| at + offset + "\n    }\n".len());
    format!("{}{}", &text[..start], &text[end..])
}

/// The permissions of each user in a text [`authorization_config`] made: user → what it may
/// publish and hear, as the text lists them. The controller's user, allowed everything, has
/// none; a text this crate did not make gives what lines it recognises.
///
/// This is how the controller knows what the bus was sent (and what it last confirmed)
/// without composing it again: [`crate::probe`] proves each of these in force.
pub fn permissions_in_config(text: &str) -> std::collections::BTreeMap<String, Permissions> {
    enum List {
        Publish,
        Subscribe,
    }
    let mut users = std::collections::BTreeMap::new();
    let mut user: Option<String> = None;
    let mut list = None;
    let mut in_allow = false;
    for line in text.lines().map(str::trim) {
        if in_allow {
            if line == "]" {
                in_allow = false;
            } else if let (Some(user), Some(list), Some(item)) =
                (user.as_ref(), list.as_ref(), unquoted(line))
            {
                let permissions: &mut Permissions =
                    users.entry(user.clone()).or_insert_with(|| Permissions {
                        publish: Vec::new(),
                        subscribe: Vec::new(),
                    });
                match list {
                    List::Publish => permissions.publish.push(item),
                    List::Subscribe => permissions.subscribe.push(item),
                }
            }
        } else if let Some(rest) = line
            .strip_prefix("user:")
            .or_else(|| line.strip_prefix("# user:"))
        {
            user = unquoted(rest.trim());
            list = None;
        } else if line == "publish: {" {
            list = Some(List::Publish);
        } else if line == "subscribe: {" {
            list = Some(List::Subscribe);
        } else if line == "allow: [" {
            in_allow = true;
        }
    }
    for permissions in users.values_mut() {
        permissions.publish.sort();
        permissions.publish.dedup();
        permissions.subscribe.sort();
        permissions.subscribe.dedup();
    }
    users
}

/// The text of a string [`quoted`] made, or `None` when `text` is not one.
fn unquoted(text: &str) -> Option<String> {
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, buckets: &[&str], subjects: &[&str]) -> NodeGrants {
        NodeGrants {
            node: name.into(),
            password: format!("{name}-secret"),
            buckets: buckets.iter().map(|s| s.to_string()).collect(),
            subjects: subjects.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn the_config_is_the_same_whatever_the_order() {
        let one = BusAuthorization {
            controller_password: "c".into(),
            nodes: vec![
                node("home", &["media", "agent"], &["media.scan", "media.done"]),
                node("laptop", &[], &[]),
            ],
        };
        let two = BusAuthorization {
            controller_password: "c".into(),
            nodes: vec![
                node("laptop", &[], &[]),
                node(
                    "home",
                    &["agent", "media", "agent"],
                    &["media.done", "media.scan"],
                ),
            ],
        };
        let config = authorization_config(&one).unwrap();
        assert_eq!(config, authorization_config(&two).unwrap());
        insta::assert_snapshot!(config);
        assert_eq!(bus_users(&one), ["controller", "node-home", "node-laptop"]);
    }

    #[test]
    fn a_node_is_never_granted_another_nodes_subjects() {
        // Every problem at once, each naming node and subject or bucket.
        let problems = authorization_config(&BusAuthorization {
            controller_password: "".into(),
            nodes: vec![
                node(
                    "home",
                    &["bad.bucket"],
                    &["mesh.declaration.laptop", "*.report.x"],
                ),
                node("home", &[], &["_INBOX.>", ">", "media..x"]),
                node("lap top", &[], &[]),
            ],
        })
        .unwrap_err();
        insta::assert_snapshot!(problems
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join("\n"));
    }

    #[test]
    fn overlap_is_decided_token_by_token() {
        assert!(patterns_overlap("mesh.>", "*.declaration.x"));
        assert!(patterns_overlap(">", "a"));
        assert!(patterns_overlap("a.*.c", "a.b.*"));
        assert!(!patterns_overlap("mesh.>", "mesh"));
        assert!(!patterns_overlap("media.scan", "mesh.>"));
        assert!(!patterns_overlap("a.b", "a.b.c"));
    }

    #[test]
    fn the_permissions_are_read_back_from_the_config() {
        // A password holding `"` and `user:` does not confuse the reading.
        let config = authorization_config(&BusAuthorization {
            controller_password: "c\" user: \"x\"".into(),
            nodes: vec![
                node("home", &["media"], &["media.*"]),
                node("laptop", &[], &[]),
            ],
        })
        .unwrap();
        let read = permissions_in_config(&config);
        assert_eq!(
            read.keys().collect::<Vec<_>>(),
            ["node-home", "node-laptop"],
            "the controller, allowed everything, has no permissions block"
        );
        assert_eq!(
            read["node-home"],
            node_permissions(&node("home", &["media"], &["media.*"]))
        );
        assert_eq!(
            read["node-laptop"],
            node_permissions(&node("laptop", &[], &[]))
        );
        assert_eq!(unquoted(r#""a\"b\\c""#).as_deref(), Some(r#"a"b\c"#));
    }

    #[test]
    fn the_probe_user_names_the_file_it_belongs_to() {
        let users = BusUsers {
            controller: UserCredential::Password("c".into()),
            nodes: vec![NodeUser {
                node: "home".into(),
                credential: UserCredential::Nkey(nkeys::KeyPair::new_user().public_key()),
                buckets: vec![],
                subjects: vec![],
            }],
        };
        let probe = nkeys::KeyPair::new_user().public_key();
        let plain = users_config(&users).unwrap();
        let text = users_config_with_probe(&users, &probe).unwrap();
        assert!(text.contains(&probe));
        assert_eq!(without_probe(&text), plain);
        let read = permissions_in_config(&text);
        assert_eq!(read[PROBE_USER], probe_permissions(&plain));
        assert_eq!(
            read["node-home"],
            permissions_in_config(&plain)["node-home"]
        );
        assert!(read[PROBE_USER]
            .publish
            .contains(&probe_subject_for(&plain)));
        assert!(users_config_with_probe(&users, "SUNOTAKEY").is_err());
    }

    #[test]
    fn quotes_and_backslashes_are_escaped() {
        assert_eq!(quoted(r#"a"b\c"#), r#""a\"b\\c""#);
    }
}
