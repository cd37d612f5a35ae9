//! The daemon keeps each node's last readable report current (`heard/<node>.json`,
//! [`crate::home::heard::LastReadable`]) as it hears the reports, so a long-running fleet keeps it
//! whether or not anybody reads `status`: a node whose reports turn unreadable (garbage, a newer
//! major format) keeps its last good one, even once it has published more than the reports
//! stream keeps of it (64).
//!
//! It listens on every node's report subject. A node's report that does not read, after one
//! that did (or the first heard of it), is looked at as `status` looks at it
//! ([`crate::home::Home::report_as_heard`]): the newest report that reads among those the stream
//! holds is written to the record — at once, while the stream still holds it. Reports that read
//! write nothing: the stream holds them, and the record is read only while the latest does not
//! read.
//!
//! # Guarantees
//! - A look runs on a blocking thread, several nodes' looks together; hearing goes on meanwhile.
//! - What a node publishes costs the daemon one look per turn from readable to unreadable, never
//!   one per message.

use crate::home::Home;
use mesh_bus::{subjects, Bus, NatsBus};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How long the listener gathers the reports heard, from the first, before it looks at the
/// nodes whose reports turned unreadable among them.
const GATHER: Duration = Duration::from_millis(100);

/// Listens for reports on `bus` until the bus is gone, keeping `home`'s last readable reports.
pub(super) fn spawn(home: Home, bus: NatsBus) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut reports = match bus.subscribe(subjects::ALL_REPORTS).await {
            Ok(reports) => reports,
            Err(error) => {
                tracing::error!(%error, "the reports could not be heard: the last readable \
                    reports are kept only when status reads them");
                return;
            }
        };
        // Whether each node's last report heard read (a node not heard yet: as if it did).
        let mut readable: BTreeMap<String, bool> = BTreeMap::new();
        let limit = home.report_limit();
        loop {
            let mut turned: BTreeSet<String> = BTreeSet::new();
            let Some(message) = reports.next().await else {
                return;
            };
            let until = tokio::time::Instant::now() + GATHER;
            let mut next = Some(message);
            while let Some(message) = next.take() {
                if let Some(node) = message.subject.strip_prefix(&subjects::report("")) {
                    if mesh_bus::probe::is_probe(&message.payload) {
                        // A permission probe: nobody's report.
                    } else {
                        let reads = matches!(
                            crate::home::heard::judge(node, &message.payload, 0, limit),
                            crate::home::heard::Heard::Read { .. }
                        );
                        let was = readable.insert(node.to_owned(), reads).unwrap_or(true);
                        if was && !reads {
                            turned.insert(node.to_owned());
                        }
                    }
                }
                if turned.len() < 64 {
                    next = tokio::time::timeout_at(until, reports.next())
                        .await
                        .ok()
                        .flatten();
                }
            }
            if turned.is_empty() {
                continue;
            }
            let home = home.clone();
            let looked = tokio::task::spawn_blocking(move || {
                for node in turned {
                    if let Err(error) = home.reports().as_heard(&node) {
                        tracing::warn!(
                            node,
                            error = error.chain_line(),
                            "the last readable report could not be kept"
                        );
                    }
                }
            })
            .await;
            if let Err(error) = looked {
                tracing::error!(%error, "keeping the last readable reports");
            }
        }
    })
}
