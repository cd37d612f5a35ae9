//! Simulated hosts behind the executor's [`Fleet`] seam: each declaration is answered at once
//! with a converged report naming every resource applied; what each node was sent is kept in
//! order. Shared by `tests/executor.rs` and the benches (`benches/support` includes it by
//! `#[path]`).

use mesh_controller::Fleet;
use mesh_controller::Grants;
use mesh_controller::ReportHeard;
use mesh_model::declaration::{Declaration, Outgoing};
use mesh_model::inventory::Inventory;
use mesh_model::module::Catalogue;
use mesh_model::report::{MachineState, Outcome, Report};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Hosts that answer each declaration at once — or, `silent`, never; `sent` names the nodes
/// sent to, in order.
#[derive(Default)]
pub struct Simulated {
    answers: VecDeque<Report>,
    pub sent: Arc<Mutex<Vec<String>>>,
    /// Hosts that take every declaration and never report (a first machine that never comes
    /// back).
    pub silent: bool,
}

#[async_trait::async_trait]
impl Fleet for Simulated {
    fn prepare(&mut self, _: &Catalogue, _: &Inventory) -> mesh_controller::Result<()> {
        Ok(())
    }

    fn users_change(&self, _: bool) -> Option<String> {
        None
    }

    fn users_file(&self) -> Option<mesh_controller::bus::UsersFile> {
        None
    }

    async fn issue_grants(&mut self, _: &[String]) -> mesh_controller::Result<Grants> {
        Ok(Grants::Issued("simulated".into()))
    }

    async fn send(&mut self, declaration: &Outgoing) -> mesh_controller::Result<()> {
        self.sent
            .lock()
            .unwrap()
            .push(declaration.node().to_owned());
        if !self.silent {
            // As a host, the report names the send it answers.
            let mut report = converged(declaration.declaration());
            report.send = declaration.send().map(str::to_owned);
            self.answers.push_back(report);
        }
        Ok(())
    }

    async fn next_report(
        &mut self,
        wait: Duration,
    ) -> mesh_controller::Result<Option<ReportHeard>> {
        match self.answers.pop_front() {
            Some(report) => Ok(Some(ReportHeard::Report(report))),
            None => {
                // Nothing to hear: as a real fleet, wait (a little of) the time asked for.
                tokio::time::sleep(wait.min(Duration::from_millis(1))).await;
                Ok(None)
            }
        }
    }
}

/// A converged report of `declaration`, every resource applied.
pub fn converged(declaration: &Declaration) -> Report {
    let now = mesh_store::clock::now();
    Report {
        format: mesh_model::report::REPORT_FORMAT,
        node: declaration.node.clone(),
        declaration: declaration.digest(),
        machine: MachineState::Converged,
        resources: declaration
            .resources
            .iter()
            .map(|r| (r.id.clone(), Outcome::Applied { changed: vec![] }))
            .collect(),
        undeclared: Default::default(),
        findings: Vec::new(),
        windows: Vec::new(),
        resumed_from_mid_change: false,
        host_failure: None,
        started_at: now,
        finished_at: now,
        send: None,
        published_at: None,
        drift: Vec::new(),
    }
}
