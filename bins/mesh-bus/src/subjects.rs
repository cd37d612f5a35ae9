//! The subjects the mesh uses, in one place.

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
