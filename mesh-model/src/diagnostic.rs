//! A validation problem, naming the file, module and key it is about.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One problem found while validating a catalogue or an inventory.
///
/// Validation collects every diagnostic before answering (never only the first).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Diagnostic {
    /// The file the problem is in, relative to the catalogue or mesh home.
    pub file: String,
    /// The module concerned, when there is one.
    pub module: Option<String>,
    /// The key (dotted path) concerned, when there is one.
    pub key: Option<String>,
    /// What is wrong, lower-case, no trailing period.
    pub message: String,
}

impl Diagnostic {
    /// A diagnostic about `file`, optionally a module and a key.
    pub fn new(
        file: impl Into<String>,
        module: Option<&str>,
        key: Option<&str>,
        message: impl Into<String>,
    ) -> Self {
        Diagnostic {
            file: file.into(),
            module: module.map(str::to_owned),
            key: key.map(str::to_owned),
            message: message.into(),
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(module) = &self.module {
            write!(f, ": module `{module}`")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": `{key}`")?;
        }
        write!(f, ": {}", self.message)
    }
}
