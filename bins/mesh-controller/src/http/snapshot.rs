//! What the pages show and what they were asked for: the [`Snapshot`] read at one moment, and
//! the [`PageQuery`] of `/`. The page and `/metrics` render them; [`super::Pages`] reads them.

use super::counts::SendTally;
use crate::plans::PlanRecord;
use crate::status::Overview;

/// What the pages show, read at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// When (seconds since the epoch).
    pub now: u64,
    /// What `status` shows.
    pub overview: Overview,
    /// Every plan record, oldest first.
    pub plans: Vec<PlanRecord>,
    /// The rollouts' sends.
    pub sends: SendTally,
    /// What the overview comes to at `now` (a node mid-change judged against the default
    /// deadline), and why.
    pub verdict: crate::status::Verdict,
}

/// What `/` was asked for: the query of its request (`?nodes=all&page=N`), read by axum's
/// `Query`; what it does not know is ignored, a page that is not a number is the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(from = "PageParams")]
pub struct PageQuery {
    /// `?nodes=all`: list every node, a page at a time.
    pub all_nodes: bool,
    /// `?page=N` (from 1) of the node list.
    pub page: usize,
}

impl Default for PageQuery {
    fn default() -> PageQuery {
        PageQuery {
            all_nodes: false,
            page: 1,
        }
    }
}

/// The query's words as given.
#[derive(serde::Deserialize)]
struct PageParams {
    nodes: Option<String>,
    page: Option<String>,
}

impl From<PageParams> for PageQuery {
    fn from(params: PageParams) -> PageQuery {
        PageQuery {
            all_nodes: params.nodes.as_deref() == Some("all"),
            page: params.page.and_then(|n| n.parse().ok()).unwrap_or(1).max(1),
        }
    }
}
