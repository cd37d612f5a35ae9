//! What a host does with drift: a managed resource changed by hand between declarations.
//!
//! A module's `module.toml` names its [`DriftPolicy`] (`drift = "correct" | "report"`), a
//! node's inventory may set it per module, and the declaration carries it to the host, so the
//! three share it from here.

use serde::{Deserialize, Serialize};

/// What a host does with drift: a managed resource changed by hand between declarations
/// (*drift is seen, and reported even when corrected*). Either way the drift is reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DriftPolicy {
    /// Put it back as declared (and report what was found).
    #[default]
    Correct,
    /// Report it and leave it as found.
    Report,
}
