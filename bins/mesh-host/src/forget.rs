//! `mesh-host forget`: gives back everything the mesh holds on this machine — a host leaving
//! the fleet, or a quick-start home thrown away. It is the apply of a declaration with nothing
//! in it, so the rules of undeclaring hold: what the mesh made is removed (containers stopped
//! and removed, files deleted), what it found is given back as it was, a directory that holds
//! data the mesh did not put there is kept, and nothing the mesh did not make is touched.
//!
//! Start at [`holdings`] (what it would give back, changing nothing) and [`forget`].

use mesh_apply::state::{Origin, Record};
use mesh_apply::{ApplyError, HostConfig};
use mesh_model::declaration::Declaration;
use mesh_model::report::Report;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// One resource the host holds, for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Holding {
    /// The resource id (`<module>/<kind>/<name>`).
    pub id: String,
    /// What on the machine it is, in words (`file /etc/web.conf`).
    pub what: String,
    /// `made` (removed when forgotten) or `found` (given back as it was).
    pub origin: &'static str,
}

/// What the host whose state directory is `state_dir` holds, and so what [`forget`] gives
/// back. Changes nothing.
///
/// # Errors
/// The state cannot be read.
pub fn holdings(state_dir: &Path) -> Result<Vec<Holding>, ApplyError> {
    Ok(mesh_apply::state::held(state_dir)?
        .into_iter()
        .map(|(id, record)| Holding {
            what: what_of(&record),
            origin: match record.origin {
                Origin::Made => "made",
                _ => "found",
            },
            id,
        })
        .collect())
}

/// A target in words, from its disk form (`{"file": {"path": "/etc/motd"}}` → `file
/// /etc/motd`), so a kind added later reads as well.
fn what_of(record: &Record) -> String {
    match serde_json::to_value(&record.target) {
        Ok(serde_json::Value::Object(kind)) => kind
            .into_iter()
            .map(|(kind, fields)| {
                let fields: Vec<String> = match fields {
                    serde_json::Value::Object(fields) => fields
                        .into_iter()
                        .map(|(_, value)| match value {
                            serde_json::Value::String(value) => value,
                            other => other.to_string(),
                        })
                        .collect(),
                    other => vec![other.to_string()],
                };
                format!("{kind} {}", fields.join(" "))
            })
            .collect::<Vec<_>>()
            .join(", "),
        Ok(other) => other.to_string(),
        Err(e) => format!("(unreadable: {e})"),
    }
}

/// `forget` without `--yes`, for people: what it would give back.
pub fn render_holdings(holdings: &[Holding]) -> String {
    if holdings.is_empty() {
        return "the mesh holds nothing on this machine: nothing to forget\n".to_owned();
    }
    let mut out = format!(
        "forget would give back the {} resource{} the mesh holds here \
         (made: removed; found: given back as it was; a directory holding data the mesh did \
         not put there is kept):\n",
        holdings.len(),
        if holdings.len() == 1 { "" } else { "s" }
    );
    for holding in holdings {
        let _ = writeln!(
            out,
            "  {:<6} {}  ({})",
            holding.origin, holding.what, holding.id
        );
    }
    out.push_str("run it again with --yes to do it (stop `mesh-host serve` first)\n");
    out
}

/// Gives back everything the host holds: applies a declaration for `node` with nothing in it,
/// at `now`. The report says what was removed, given back or kept.
///
/// # Errors
/// As [`mesh_apply::apply`]: the state cannot be read or written; nothing is changed then.
pub fn forget(config: &HostConfig, node: &str, now: u64) -> Result<Report, ApplyError> {
    mesh_apply::apply(config, &Declaration::new(node, Vec::new()), now)
}
