//! A module build: the archive of a module's directory at a commit.

use serde::{Deserialize, Serialize};

/// The digest and size of an archive in the store.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ArchiveRef {
    /// `sha256:<hex>` of the archive bytes.
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
}

/// A record of one build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Build {
    /// The module built.
    pub module: String,
    /// The repository it came from.
    pub repository: String,
    /// The commit built.
    pub commit: String,
    /// The archive.
    pub archive: ArchiveRef,
    /// When it was built (seconds since the epoch).
    pub at: u64,
    /// A dry run: never recorded, never sent.
    pub dry_run: bool,
}
