//! The controller's status over HTTP (`mesh-controller serve --http ADDR`): a read-only page
//! for people (`/`), the Prometheus text exposition (`/metrics`) and the document
//! `status --output json` prints (`/status.json`, byte for byte).
//!
//! Start at [`Pages`]: it reads a [`Snapshot`] — [`crate::status::overview_of_plans`] and the
//! plan records, at one moment — and renders it ([`page`], [`metrics`],
//! `Overview::json_document`). [`Pages::respond`] answers one [`Page`]; [`router`] is the
//! axum router over it (with tower-http's limits on a body and a request's time), and [`bind`]
//! and [`serve`] serve it (hyper's HTTP/1.1, on a loopback address unless told otherwise, behind
//! rustls when given a certificate). [`Routes`] mounts the webhooks ([`crate::hooks`]) beside
//! the pages, or alone on a listener of their own.
//!
//! # Invariants
//! - The pages decide nothing: every number and word is read from the status and plan values the
//!   library returns; it never writes a record and never sends.
//! - Everything rendered from a record is escaped by construction: the page is written in
//!   maud's `html!`, which escapes every value spliced into text or attributes; `/metrics` is
//!   written by prometheus-client's encoder, which escapes label values.
//! - Cheap at 10,000 nodes: the page lists the nodes needing attention and counts the rest by
//!   state; the whole list is behind `?nodes=all`, a page of [`NODES_PER_PAGE`] at a time. The
//!   send latencies of a finished rollout are read once and kept.
//! - A non-loopback address is refused unless TLS is given or `public` says so.
//!
//! The files, in dependency order (none uses one after it): `counts` (what the page and
//! `/metrics` both count), `snapshot` (what the pages show, and the page's query), `metrics`
//! (prometheus-client), `html` (the page, in maud), `pages` (reading a snapshot, and the answer
//! for a page), `routes` (axum, tower-http) and `server` (the listener, TLS, hyper).

mod counts;
mod html;
mod metrics;
mod pages;
mod routes;
mod server;
mod snapshot;

pub use metrics::metrics;
pub(crate) use pages::Answer;
pub use pages::{MergesWaitingSource, Pages};
pub(crate) use routes::BODY_LIMIT;
pub use routes::{Mounted, Routes};
pub(crate) use server::Bound;
pub use server::{bind, serve, Listen, Tls};

#[cfg(test)]
mod tests;
