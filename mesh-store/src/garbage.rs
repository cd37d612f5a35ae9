//! What a garbage collection deleted, as every backend's collector reports it: the OCI
//! layout's own mark-and-sweep ([`crate::layout`]) and the registry's `garbage-collect`
//! ([`crate::collect`]).

use serde::Serialize;

/// What one garbage collection deleted (or would delete).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GarbageReport {
    /// Whether nothing was deleted.
    pub dry_run: bool,
    /// The blobs deleted (or eligible, on a dry run), by digest.
    pub deleted: Vec<String>,
    /// How many blobs were marked (kept by a manifest).
    pub blobs_marked: usize,
    /// The collector's own output (the registry's `garbage-collect`), for the record.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub output: String,
}
