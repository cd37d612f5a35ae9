//! Each node's last report, as the home reads it: from the bus's reports stream on a fleet (a
//! [`ReportSource`]), from the `reports/` records in the embedded default; through
//! [`crate::heard`], so a report that cannot be read is its node's problem.

use super::Home;
use crate::error::Result;
use crate::heard::{self, Heard, MAX_REPORT_BYTES};
use mesh_model::report::Report;

/// Where each node's latest report is read when it is not one of the records: on a fleet, the
/// bus's reports stream itself, which holds every report a host publishes, heartbeats included
/// — the one source `status`, the rollout gate and a resumed rollout read (the rule “Every report is heard, from one source”).
pub trait ReportSource: Send + Sync + std::fmt::Debug {
    /// `node`'s latest report as it was published, and when the bus stored it (seconds since
    /// the epoch).
    ///
    /// # Errors
    /// The source cannot be read.
    fn latest(&self, node: &str) -> Result<Option<(Vec<u8>, u64)>>;
}

impl Home {
    /// The last report heard from `node`, if it reads (one that does not is
    /// [`Home::report_as_heard`]'s to show: here it is as none heard).
    ///
    /// # Errors
    /// The record or stream cannot be read.
    pub fn report(&self, node: &str) -> Result<Option<Report>> {
        Ok(self.report_heard(node)?.map(|(report, _)| report))
    }

    /// The last report heard from `node`, if it reads, and when it was heard (seconds since the
    /// epoch): on a fleet, when the bus stored it (a heartbeat repeating a report is heard
    /// anew); in the embedded default, when the apply it reports finished.
    ///
    /// # Errors
    /// The record or stream cannot be read.
    pub fn report_heard(&self, node: &str) -> Result<Option<(Report, u64)>> {
        Ok(match self.report_as_heard(node)? {
            Some(Heard::Read { report, heard_at }) => Some((report, heard_at)),
            Some(Heard::Unreadable(_)) | None => None,
        })
    }

    /// The last report heard from `node` as heard: readable, or unreadable with why — a
    /// report of garbage, of a newer major format, over [`MAX_REPORT_BYTES`], or naming
    /// another node is that node's problem, never an error of the reader.
    ///
    /// # Errors
    /// The record or stream cannot be read.
    pub fn report_as_heard(&self, node: &str) -> Result<Option<Heard>> {
        if let Some(source) = &self.reports {
            let Some((bytes, heard_at)) = source.latest(node)? else {
                return Ok(None);
            };
            return Ok(Some(heard::judge(node, &bytes, heard_at, MAX_REPORT_BYTES)));
        }
        let key = format!("reports/{node}.json");
        let Some(bytes) = self.get(&key)? else {
            return Ok(None);
        };
        // In the embedded default a report is heard when the apply it reports finished; an
        // unreadable one has no such time, and is dated 0 (never silent: nothing is heard
        // in the embedded default between applies).
        let finished = mesh_model::report::Report::from_json(&bytes)
            .map(|r| r.finished_at)
            .unwrap_or(0);
        Ok(Some(heard::judge(node, &bytes, finished, MAX_REPORT_BYTES)))
    }

    /// Whether the latest reports are the bus's stream, which every report reaches without
    /// the controller (then [`Home::record_report`] keeps nothing).
    pub fn reports_from_bus(&self) -> bool {
        self.reports.is_some()
    }

    /// Records a node's report — on a fleet the reports stream already holds it, so nothing is
    /// written (one source).
    ///
    /// # Errors
    /// The record cannot be written.
    pub fn record_report(&self, report: &Report) -> Result<()> {
        if self.reports.is_some() {
            return Ok(());
        }
        self.put_json(&format!("reports/{}.json", report.node), report)
    }
}
