//! Each node's last report, as the home reads it: from the bus's reports stream on a fleet (a
//! [`ReportSource`]), from the `reports/` records in the embedded default; through
//! [`crate::home::heard`], so a report that cannot be read is its node's problem.

use super::Home;
use crate::error::Result;
use crate::home::heard::{self, Heard, LastReadable, LAST_READABLE_FORMAT};
use mesh_model::report::Report;

/// Where each node's latest report is read when it is not one of the records: on a fleet, the
/// bus's reports stream itself, which holds every report a host publishes, heartbeats included
/// — the one source `status`, the rollout gate and a resumed rollout read (the rule “Every report
/// is heard, from one source”).
pub trait ReportSource: Send + Sync + std::fmt::Debug {
    /// `node`'s latest report as it was published, and when the bus stored it (seconds since
    /// the epoch).
    ///
    /// # Errors
    /// The source cannot be read.
    fn latest(&self, node: &str) -> Result<Option<(Vec<u8>, u64)>>;

    /// The reports of `node` the source still holds after its sequence `after`, oldest first,
    /// each as it was published with when it was stored and its sequence — read only when the
    /// latest is unreadable, to find the last that reads. By default none.
    ///
    /// # Errors
    /// The source cannot be read.
    fn history(&self, _node: &str, _after: u64) -> Result<Vec<(Vec<u8>, u64, u64)>> {
        Ok(Vec::new())
    }
}

impl Home {
    /// This home with `limit` as the most bytes a node's report may hold (a larger one is
    /// `unreadable`, naming its node).
    #[must_use]
    pub fn with_report_limit(mut self, limit: usize) -> Home {
        self.report_limit = limit;
        self
    }

    /// The most bytes a node's report may hold ([`Home::with_report_limit`]).
    pub fn report_limit(&self) -> usize {
        self.report_limit
    }

    /// Whether the latest reports are the bus's stream, which every report reaches without
    /// the controller (then [`Home::record_report`] keeps nothing).
    pub fn reports_from_bus(&self) -> bool {
        self.reports.is_some()
    }
}

/// Each node's last report ([`crate::home::keys`]): read from the bus's reports stream on a
/// fleet, from `reports/<node>.json` in the embedded default, with the last that read kept
/// under `heard/<node>.json`.
#[derive(Clone, Copy)]
pub struct ReportStore<'h> {
    home: &'h Home,
}

impl Home {
    /// Each node's last report.
    pub fn reports(&self) -> ReportStore<'_> {
        ReportStore { home: self }
    }
}

impl ReportStore<'_> {
    /// The last report heard from `node`, if it reads (one that does not is
    /// [`Home::report_as_heard`]'s to show: here it is as none heard).
    ///
    /// # Errors
    /// The record or stream cannot be read.
    pub fn get(&self, node: &str) -> Result<Option<Report>> {
        Ok(self.heard(node)?.map(|(report, _)| report))
    }

    /// The last report heard from `node`, if it reads, and when it was heard (seconds since the
    /// epoch): on a fleet, when the bus stored it (a heartbeat repeating a report is heard
    /// anew); in the embedded default, when the apply it reports finished.
    ///
    /// # Errors
    /// The record or stream cannot be read.
    pub fn heard(&self, node: &str) -> Result<Option<(Report, u64)>> {
        Ok(match self.as_heard(node)? {
            Some(Heard::Read { report, heard_at }) => Some((report, heard_at)),
            Some(Heard::Unreadable(_)) | None => None,
        })
    }

    /// The last report heard from `node` as heard: readable, or unreadable with why — a
    /// report of garbage, of a newer major format, over the report limit
    /// ([`crate::home::heard::MAX_REPORT_BYTES`] by default), or naming another node is that node's
    /// problem, never an error of the reader. An unreadable one carries the node's last
    /// readable report when one is kept (`Home::last_readable`).
    ///
    /// # Errors
    /// The record or stream cannot be read.
    pub fn as_heard(&self, node: &str) -> Result<Option<Heard>> {
        if let Some(source) = &self.home.reports {
            let Some((bytes, heard_at)) = source.latest(node)? else {
                return Ok(None);
            };
            return Ok(Some(
                match heard::judge(node, &bytes, heard_at, self.home.report_limit) {
                    Heard::Unreadable(mut unreadable) => {
                        unreadable.last_readable = self.last_readable(source.as_ref(), node)?;
                        Heard::Unreadable(unreadable)
                    }
                    read => read,
                },
            ));
        }
        let key = format!("reports/{node}.json");
        let Some(bytes) = self.home.get(&key)? else {
            return Ok(None);
        };
        // In the embedded default a report is heard when the apply it reports finished; an
        // unreadable one has no such time, and is dated 0 (never silent: nothing is heard
        // in the embedded default between applies).
        let finished = mesh_model::report::Report::from_json(&bytes)
            .map(|r| r.finished_at)
            .unwrap_or(0);
        Ok(Some(heard::judge(
            node,
            &bytes,
            finished,
            self.home.report_limit,
        )))
    }

    /// `node`'s last readable report, while its latest is not: the newest that reads among
    /// those `source` holds, remembered in the record [`heard::last_readable_key`] (so it is
    /// kept after the source let it go: a node publishing garbage faster than the stream keeps
    /// reports). Each look reads only what the source holds past the last one it read, so a
    /// node publishing garbage costs a status a few reads, not the stream's whole history.
    ///
    /// # Errors
    /// The source cannot be read, or the record written.
    fn last_readable(&self, source: &dyn ReportSource, node: &str) -> Result<Option<LastReadable>> {
        let key = heard::last_readable_key(node);
        // A record that does not read is a cache of the stream's: looked for again whole.
        let remembered = self
            .home
            .get(&key)?
            .and_then(|bytes| serde_json::from_slice::<LastReadable>(&bytes).ok());
        let after = remembered.as_ref().map_or(0, |kept| kept.through_sequence);
        let history = source.history(node, after)?;
        let Some(through) = history.last().map(|(_, _, sequence)| *sequence) else {
            return Ok(remembered);
        };
        let found = history.into_iter().rev().find_map(|(bytes, at, _)| {
            match heard::judge(node, &bytes, at, self.home.report_limit) {
                Heard::Read { report, heard_at } => Some((report, heard_at)),
                Heard::Unreadable(_) => None,
            }
        });
        let kept = match (found, remembered) {
            (Some((report, heard_at)), _) => LastReadable {
                format: LAST_READABLE_FORMAT,
                heard_at,
                report,
                through_sequence: through,
            },
            (None, Some(kept)) => LastReadable {
                through_sequence: through,
                ..kept
            },
            (None, None) => return Ok(None),
        };
        self.home.put_json(&key, &kept)?;
        Ok(Some(kept))
    }

    /// Records a node's report — on a fleet the reports stream already holds it, so nothing is
    /// written (one source).
    ///
    /// # Errors
    /// The record cannot be written.
    pub fn record(&self, report: &Report) -> Result<()> {
        if self.home.reports.is_some() {
            return Ok(());
        }
        self.home
            .put_json(&format!("reports/{}.json", report.node), report)
    }
}
