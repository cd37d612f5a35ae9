//! The names the mesh uses on the bus, in one place: subjects, users and their inboxes,
//! streams and their consumers, buckets.
//!
//! Every name the controller, the hosts and the grants use comes from here, so a grant
//! ([`crate::grants`]) allows exactly what the code uses. This module depends on nothing else
//! in the crate. Node names are single subject tokens
//! (`[A-Za-z0-9_-]`, checked where grants are composed).

/// Where a node's declaration is sent.
pub fn declaration(node: &str) -> String {
    format!("mesh.declaration.{node}")
}

/// Where a node publishes its reports.
pub fn report(node: &str) -> String {
    format!("mesh.report.{node}")
}

/// Every node's reports.
pub const ALL_REPORTS: &str = "mesh.report.*";

/// Every node's declarations (the declarations stream holds these).
pub const ALL_DECLARATIONS: &str = "mesh.declaration.*";

/// Where merges to a module repository are announced (see [`crate::jetstream::publish_merge`]).
pub const MERGES: &str = "mesh.event.merge";

/// Where build outcomes are announced.
pub const BUILDS: &str = "mesh.event.build";

/// Where `mesh-controller serve` publishes its heartbeat: its loop's last turn, the merges
/// waiting on its consumer and the plans it drives. Core NATS, in no stream: the controller
/// keeps the last one in its records, for `status` and the status page.
pub const CONTROLLER_HEARTBEAT: &str = "mesh.heartbeat.controller";

/// Every mesh event (the events stream holds these).
pub const ALL_EVENTS: &str = "mesh.event.>";

/// Everything the mesh itself publishes: no module may be granted a subject overlapping it.
pub const MESH: &str = "mesh.>";

/// The subject whose publish proves `users` (a text [`crate::grants::users_config`] made) in
/// force: `mesh.probe.<the first 16 hex digits of its sha256>`.
pub fn probe_subject_for(users: &str) -> String {
    use sha2::{Digest as _, Sha256};
    let digest = Sha256::digest(users.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("mesh.probe.{hex}")
}

// Users, and the inboxes their grants let them hear.

/// The first token of every reply inbox (NATS's convention): a request's answer comes back on
/// `_INBOX.<something>`.
pub const INBOX_PREFIX: &str = "_INBOX";

/// The controller's user on the bus.
pub const CONTROLLER_USER: &str = "controller";

/// `node`'s user on the bus.
pub fn node_user(node: &str) -> String {
    format!("node-{node}")
}

/// The prefix of `node`'s reply inboxes; its grants let it hear only those. (A generated inbox
/// token never holds `-`, so no other client's inbox can fall under it.)
pub fn node_inbox_prefix(node: &str) -> String {
    format!("{INBOX_PREFIX}.{}", node_user(node))
}

/// The user the controller proves a users file in force with, when it cannot sign as the
/// nodes themselves (an enrolled node's seed never leaves its host): an NKey user whose key
/// the controller derives from its own secret ([`crate::keys::derived_user_seed`]) and whose
/// one permission names the file it belongs to ([`crate::grants::probe_permissions`]). A
/// server that lets it publish on that subject has loaded that very file, and with it every
/// node's permissions (a reload puts the whole file in force at once).
pub const PROBE_USER: &str = "mesh-probe";

/// The prefix of the probe user's reply inboxes (its round trip through the server).
pub fn probe_inbox_prefix() -> String {
    format!("{INBOX_PREFIX}.{PROBE_USER}")
}

// Streams and their consumers.

/// The stream holding every node's declarations (`mesh.declaration.<node>`), a few per node.
pub const DECLARATIONS_STREAM: &str = "MESH_DECLARATIONS";
/// The stream holding every node's reports (`mesh.report.<node>`).
pub const REPORTS_STREAM: &str = "MESH_REPORTS";
/// The stream holding the mesh's events: merges and builds (`mesh.event.>`).
pub const EVENTS_STREAM: &str = "MESH_EVENTS";
/// The stream holding the mesh's audit log, every entry for ever ([`AUDIT_SUBJECT`]).
pub const AUDIT_STREAM: &str = "MESH_AUDIT";
/// The subject the audit log's entries are appended on: the controller's alone (no node is
/// ever granted it).
pub const AUDIT_SUBJECT: &str = "mesh.audit";

/// The name of the durable consumer through which a host of an earlier mesh read `node`'s
/// declarations from [`DECLARATIONS_STREAM`] (made by an earlier controller; none is made now,
/// and its grants still name it for such a host).
pub fn declaration_consumer(node: &str) -> String {
    format!("host-{node}")
}

// Key-value buckets.

/// The bucket holding the controller's records.
pub const RECORDS_BUCKET: &str = "mesh-records";

/// The stream JetStream keeps `bucket` in.
pub fn bucket_stream_name(bucket: &str) -> String {
    format!("KV_{bucket}")
}

/// Every key of `bucket`, as the subjects its stream holds.
pub fn bucket_all(bucket: &str) -> String {
    format!("$KV.{bucket}.>")
}

/// The subject of `key` (already laid out as subject tokens) in `bucket`.
pub fn bucket_key_subject(bucket: &str, key: &str) -> String {
    format!("$KV.{bucket}.{key}")
}
