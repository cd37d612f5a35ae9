//! The subjects the mesh uses, in one place.
//!
//! Every subject the controller, the hosts and the grants name comes from here, so a grant
//! ([`crate::grants`]) allows exactly what the code uses. Node names are single subject tokens
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

/// Every mesh event (the events stream holds these).
pub const ALL_EVENTS: &str = "mesh.event.>";

/// Everything the mesh itself publishes: no module may be granted a subject overlapping it.
pub const MESH: &str = "mesh.>";
