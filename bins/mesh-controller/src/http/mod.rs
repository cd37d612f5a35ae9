//! The controller's status over HTTP (`mesh-controller serve --http ADDR`): a read-only page
//! for people (`/`), the Prometheus text exposition (`/metrics`) and the document
//! `status --output json` prints (`/status.json`, byte for byte).
//!
//! Start at [`Pages`]: it reads a [`Snapshot`] — [`crate::status::overview_of_plans`] and the
//! plan records, at one moment — and renders it ([`page`], [`metrics`],
//! [`Overview::json_document`]). [`Pages::respond`] answers a request line's method and target
//! with any HTTP stack; [`bind`] and [`serve`] are the one the controller uses (hyper, on a
//! loopback address unless told otherwise, behind TLS when given a certificate). [`Routes`]
//! mounts the webhooks ([`crate::hooks`]) beside the pages, or alone on a listener of their own.
//!
//! # Invariants
//! - The pages decide nothing: every number and word is read from the status and plan values the
//!   library returns; it never writes a record and never sends.
//! - Everything rendered from a record is escaped (HTML text and attributes; Prometheus label
//!   values).
//! - Cheap at 10,000 nodes: the page lists the nodes needing attention and counts the rest by
//!   state; the whole list is behind `?nodes=all`, a page of [`NODES_PER_PAGE`] at a time. The
//!   send latencies of a finished rollout are read once and kept.
//! - A non-loopback address is refused unless TLS is given or `public` says so.
//!
//! The files: `counts` (what the page and `/metrics` both count), `pages` (the snapshot and
//! the answer to a request), `metrics`, `html` (the page) and `server` (hyper, TLS, routes).

mod counts;
mod html;
mod metrics;
mod pages;
mod server;

pub use counts::{
    drifted, node_state, nodes_by_state, plans_by_state, resources_by_outcome, rollouts,
    rollouts_by_state, RolloutView, SendTally, FINISHED_PLANS_SHOWN, LATENCY_BUCKETS,
    NODES_LISTED_UNASKED, NODES_PER_PAGE, NODE_STATES, REFRESH_SECS, RESOURCE_OUTCOMES,
    ROLLOUT_STATES,
};
pub use html::{age, escape, page, utc};
pub use metrics::metrics;
pub use pages::{Answer, MergesWaitingSource, PageQuery, Pages, Snapshot};
pub use server::{answer, bind, check_listen, route, serve, Bound, Listen, Mounted, Routes, Tls};

#[cfg(test)]
mod tests;
