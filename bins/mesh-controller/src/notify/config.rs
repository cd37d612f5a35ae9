//! The receivers of notifications, read from `notify.toml` in the mesh home: each
//! `[[notify]]` entry a URL, its kind (`webhook` or `slack`), an optional secret file whose
//! key signs each body, and its filter (a least severity, a selector of nodes).
//!
//! Reading it checks every entry and names every problem at once (entry, key); the secret
//! files are read then, through mesh-store's `read_secret` (refused when others may read
//! them). A receiver's URL may itself hold a token (a Slack webhook's does): it is never in a
//! problem, an error or a `Debug`; a receiver is named by its `name`, or by its host.

use mesh_model::selector::Selector;
use mesh_plan::notify::{Filter, Severity};
use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

/// The file, in the mesh home, that lists the receivers.
pub(crate) const NOTIFY_FILE: &str = "notify.toml";

/// `notify.toml` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct NotifyFile {
    source: Option<String>,
    status_url: Option<String>,
    #[serde(default)]
    notify: Vec<EntryFile>,
}

/// One `[[notify]]` entry as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct EntryFile {
    name: Option<String>,
    url: String,
    kind: String,
    secret_file: Option<PathBuf>,
    severity: Option<String>,
    select: Option<String>,
}

/// How a receiver reads a notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReceiverKind {
    /// A generic webhook: the notice's JSON, with a CDEvents-style `type`.
    Webhook,
    /// A Slack- or Mattermost-compatible incoming webhook: `{"text": …}`, one line.
    Slack,
}

/// One receiver, read and checked.
pub(crate) struct Receiver {
    /// What names it in problems: its `name`, else `notify[N] (host)`.
    pub(crate) name: String,
    /// Where its notices are posted (never shown: it may hold a token).
    pub(crate) url: String,
    /// How it reads them.
    pub(crate) kind: ReceiverKind,
    /// The key its bodies are signed with, from its secret file.
    pub(crate) key: Option<Zeroizing<Vec<u8>>>,
    /// Which notices it takes.
    pub(crate) filter: Filter,
}

impl fmt::Debug for Receiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("signed", &self.key.is_some())
            .field("filter", &self.filter)
            .finish_non_exhaustive()
    }
}

/// Every receiver, with where the messages say they come from.
#[derive(Debug)]
pub(crate) struct NotifyConfig {
    /// The messages' `source`: the file's `source`, else `mesh`.
    pub(crate) source: String,
    /// The status page each message links to, when the file gives it.
    pub(crate) status_url: Option<String>,
    /// The receivers, in the file's order.
    pub(crate) receivers: Vec<Receiver>,
}

/// Why `notify.toml` could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotifyConfigError {
    /// The file is there and cannot be read.
    #[error("{}: cannot read it", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It is not the TOML expected.
    #[error("{}: {source}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Where and why.
        #[source]
        source: Box<toml::de::Error>,
    },
    /// The HTTP client the receivers are posted with cannot be made (its TLS roots).
    #[error("cannot make the notifications' HTTP client: {reason}")]
    Client {
        /// Why.
        reason: String,
    },
    /// Entries are wrong: each problem names its entry and key.
    #[error("{}: {}", path.display(), problems.join("; "))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every problem found.
        problems: Vec<String>,
    },
}

impl NotifyConfig {
    /// Reads `notify.toml` in `home`: `None` when there is none (nothing is sent). A relative
    /// `secret-file` is under `home`.
    ///
    /// # Errors
    /// [`NotifyConfigError`]: the file unreadable or not TOML; else every wrong entry at once
    /// (an unknown kind or severity, a selector that does not parse, a URL that is not http or
    /// https, a secret file missing, empty or readable by others).
    pub(crate) fn read(home: &Path) -> Result<Option<NotifyConfig>, NotifyConfigError> {
        let path = home.join(NOTIFY_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(NotifyConfigError::Read { path, source }),
        };
        NotifyConfig::parse(&text, home, &path).map(Some)
    }

    /// Reads the text of a `notify.toml` found at `path`; a relative secret file is under
    /// `home`.
    pub(crate) fn parse(
        text: &str,
        home: &Path,
        path: &Path,
    ) -> Result<NotifyConfig, NotifyConfigError> {
        let file: NotifyFile = toml::from_str(text).map_err(|e| NotifyConfigError::Parse {
            path: path.to_owned(),
            source: Box::new(e),
        })?;
        let mut problems = Vec::new();
        let mut receivers = Vec::new();
        for (at, entry) in file.notify.into_iter().enumerate() {
            if let Some(receiver) = receiver(at, entry, home, &mut problems) {
                receivers.push(receiver);
            }
        }
        if !problems.is_empty() {
            return Err(NotifyConfigError::Invalid {
                path: path.to_owned(),
                problems,
            });
        }
        Ok(NotifyConfig {
            source: file.source.unwrap_or_else(|| "mesh".to_owned()),
            status_url: file.status_url,
            receivers,
        })
    }
}

/// One entry checked, its problems added to `problems` (all of them, each naming the entry).
fn receiver(
    at: usize,
    entry: EntryFile,
    home: &Path,
    problems: &mut Vec<String>,
) -> Option<Receiver> {
    let host = reqwest::Url::parse(&entry.url)
        .ok()
        .filter(|url| matches!(url.scheme(), "http" | "https"))
        .and_then(|url| url.host_str().map(str::to_owned));
    let name = match (&entry.name, &host) {
        (Some(name), _) => name.clone(),
        (None, Some(host)) => format!("notify[{at}] ({host})"),
        (None, None) => format!("notify[{at}]"),
    };
    let before = problems.len();
    let mut problem = |key: &str, what: String| problems.push(format!("{name}: `{key}` {what}"));
    if host.is_none() {
        problem(
            "url",
            "is not an http or https address with a host".to_owned(),
        );
    }
    let kind = match entry.kind.as_str() {
        "webhook" => Some(ReceiverKind::Webhook),
        "slack" => Some(ReceiverKind::Slack),
        other => {
            problem("kind", format!("`{other}` is not `webhook` or `slack`"));
            None
        }
    };
    let severity = match entry.severity.as_deref().map(Severity::parse).transpose() {
        Ok(severity) => severity,
        Err(e) => {
            problem("severity", e.to_string());
            None
        }
    };
    let select = match entry.select.as_deref().map(Selector::parse).transpose() {
        Ok(select) => select,
        Err(e) => {
            problem("select", e.to_string());
            None
        }
    };
    let key = match &entry.secret_file {
        None => None,
        Some(file) => match mesh_store::secret::read_secret(&home.join(file)) {
            Ok(text) => Some(Zeroizing::new(text.into_bytes())),
            Err(e) => {
                problem("secret-file", e.to_string());
                None
            }
        },
    };
    if problems.len() > before {
        return None;
    }
    Some(Receiver {
        name,
        url: entry.url,
        kind: kind?,
        key,
        filter: Filter { severity, select },
    })
}
