//! The executor: the one place declarations leave the controller. `push` (embedded and over
//! the bus) and every rollout (`merge`, `plans resume`, `push --behind`, the daemon) send
//! through it, to a [`Fleet`], so the rules that guard a send hold on every path; and it
//! records what was sent and heard, whatever the fleet.
//!
//! Start at [`Executor`] (a fleet and the records: every send recorded, every report heard
//! recorded), then [`push()`] and [`roll_out`]. The fleets are [`crate::executor::fleet`]'s; a Rust
//! tool may bring its own.
//!
//! # Guarantees
//! - Grants before code: no declaration is sent to a node before [`Fleet::issue_grants`] for it
//!   answered; when the bus's users change, the node holding the bus is sent first and the rest
//!   only once its grants are confirmed ("Grants before code").
//! - A send that would give a running container another host directory at a mount it has is
//!   held unless its module is allowed to move ("A moved mount is held").
//! - A node is judged converged only from a settled report of the declaration it was sent.
//! - A send is written before it is made ([`crate::home::SentStore::record_sending`]), and what
//!   a fleet took is recorded sent after ([`crate::home::SentStore::record_confirmed`]): a
//!   controller stopped between the two leaves the send unconfirmed, never unrecorded. Every
//!   report heard is recorded ([`Home::record_report`]), here and nowhere else.
//!
//! What it must never do: send before grants, report a node converged from a report of another
//! declaration, or drop a node that did not answer (it is named "no report").

pub(crate) mod cancel;
pub(crate) mod fleet;

mod actions;
pub(crate) mod downgrade;
mod push;
pub(crate) mod retry;
mod rollout;
mod saved;
pub(crate) mod sealed;

pub use push::push;
pub(crate) use push::push_allowing;
pub(crate) use rollout::roll_out;
pub(crate) use sealed::HostStateDir;

use crate::bus::users::{users_sent, with_users_file, USERS_MODULE};
use crate::error::Result;
use crate::executor::cancel::Cancel;
use crate::executor::fleet::{Fleet, Grants, ReportHeard};
use crate::home::Home;
use mesh_model::declaration::{Declaration, Outgoing};
use mesh_model::report::{MachineState, Report};
use mesh_plan::PushDecision;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// A fleet and the records: what leaves through it is recorded sent once the fleet took it, and
/// every report heard through it is recorded, so every fleet — a tool's own too — keeps the
/// records the same way. It carries where progress goes and the modules allowed to move.
pub(crate) struct Executor<'a> {
    home: &'a Home,
    fleet: &'a mut dyn Fleet,
    progress: &'a dyn crate::Progress,
    moves: &'a BTreeSet<String>,
    cancel: Option<&'a Cancel>,
    drop_settings: Option<&'a BTreeSet<String>>,
}

impl<'a> Executor<'a> {
    /// An executor sending through `fleet`, recording in `home`; progress goes to `progress`,
    /// and the held nodes of the modules in `moves` are sent ("A moved mount is held").
    pub(crate) fn new(
        home: &'a Home,
        fleet: &'a mut dyn Fleet,
        progress: &'a dyn crate::Progress,
        moves: &'a BTreeSet<String>,
    ) -> Executor<'a> {
        Executor {
            home,
            fleet,
            progress,
            moves,
            cancel: None,
            drop_settings: None,
        }
    }

    /// The executor sending the nodes of `modules` that their new version would hold for
    /// orphaned settings, those settings dropped (`--drop-settings`).
    pub(crate) fn dropping_settings(self, modules: &'a BTreeSet<String>) -> Executor<'a> {
        Executor {
            drop_settings: Some(modules),
            ..self
        }
    }

    /// Whether `module`'s orphaned settings are to be dropped (`--drop-settings`).
    pub(crate) fn drops_settings_of(&self, module: &str) -> bool {
        self.drop_settings.is_some_and(|m| m.contains(module))
    }

    /// The executor heeding `cancel`: a rollout stops at its next step, saved, once it is
    /// asked for.
    pub(crate) fn cancelled_by(self, cancel: &'a Cancel) -> Executor<'a> {
        Executor {
            cancel: Some(cancel),
            ..self
        }
    }

    /// Whether its work was cancelled.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancel.is_some_and(Cancel::is_cancelled)
    }

    /// The home it records in.
    pub(crate) fn home(&self) -> &'a Home {
        self.home
    }

    /// The fleet it sends through.
    pub(crate) fn fleet(&self) -> &dyn Fleet {
        self.fleet
    }

    /// Where progress goes.
    pub(crate) fn progress(&self) -> &'a dyn crate::Progress {
        self.progress
    }

    /// The modules whose held nodes are sent.
    pub(crate) fn moves(&self) -> &'a BTreeSet<String> {
        self.moves
    }

    /// As [`Fleet::prepare`].
    ///
    /// # Errors
    /// As [`Fleet::prepare`].
    pub(crate) fn prepare(
        &mut self,
        catalogue: &mesh_model::module::Catalogue,
        inventory: &mesh_model::inventory::Inventory,
    ) -> Result<()> {
        self.fleet.prepare(catalogue, inventory)
    }

    /// Issues the grants of `nodes` ([`Fleet::issue_grants`]).
    ///
    /// # Errors
    /// As [`Fleet::issue_grants`].
    pub(crate) async fn issue_grants(&mut self, nodes: &[String]) -> Result<Grants> {
        self.fleet.issue_grants(nodes).await
    }

    /// Sends `declaration` and records it sent: written as about to be sent before it is
    /// published, recorded sent once the fleet took it (a controller stopped between the two
    /// leaves it unconfirmed, never unrecorded: [`crate::home::SentStore::unconfirmed`]).
    ///
    /// # Errors
    /// The fleet did not take it; the records cannot be written.
    pub(crate) async fn send(&mut self, declaration: &Outgoing) -> Result<()> {
        let fleet = &*self.fleet;
        let to_send = sealed::for_its_node(
            self.home,
            &|node| fleet.host_state_dir(node),
            &mut None,
            declaration,
        )?;
        about_to_send(self.home, &[declaration])?;
        self.fleet.send(&to_send).await?;
        crate::fail::point(&format!("published:{}", declaration.node()));
        recorded_sent(self.home, &[declaration]).await
    }

    /// Sends several declarations (to distinct nodes), overlapped as the fleet can, and records
    /// those it took as sent, together (not a round trip per node).
    ///
    /// # Errors
    /// The first send that failed (those taken are recorded all the same); the records cannot
    /// be written.
    pub(crate) async fn send_many(&mut self, declarations: &[Outgoing]) -> Result<()> {
        if !declarations.iter().any(|d| d.declaration().holds_secrets()) {
            let all: Vec<&Outgoing> = declarations.iter().collect();
            about_to_send(self.home, &all)?;
            let sent = self.fleet.send_many(&all).await;
            let taken: Vec<&Outgoing> = sent.taken.iter().map(|i| &declarations[*i]).collect();
            published(&taken);
            recorded_sent(self.home, &taken).await?;
            return sent.failed.map_or(Ok(()), Err);
        }
        // Each node's secrets sealed to its own key; one that cannot be is not sent, and its
        // refusal is the error once the others are.
        let mut refused = None;
        let mut to_send = Vec::with_capacity(declarations.len());
        let mut index_of = Vec::with_capacity(declarations.len());
        let fleet = &*self.fleet;
        let sealed =
            sealed_for_their_nodes(self.home, &|node| fleet.host_state_dir(node), declarations);
        for (index, declaration) in sealed.into_iter().enumerate() {
            match declaration {
                Ok(declaration) => {
                    to_send.push(declaration);
                    index_of.push(index);
                }
                Err(error) => {
                    refused.get_or_insert(error);
                }
            }
        }
        let to_send: Vec<&Outgoing> = to_send.iter().map(AsRef::as_ref).collect();
        let about: Vec<&Outgoing> = index_of.iter().map(|i| &declarations[*i]).collect();
        about_to_send(self.home, &about)?;
        let sent = self.fleet.send_many(&to_send).await;
        let taken: Vec<&Outgoing> = sent
            .taken
            .iter()
            .map(|i| &declarations[index_of[*i]])
            .collect();
        published(&taken);
        recorded_sent(self.home, &taken).await?;
        match (sent.failed, refused) {
            (Some(error), _) | (None, Some(error)) => Err(error),
            (None, None) => Ok(()),
        }
    }

    /// The next report heard within `wait`, readable or not; one that reads is recorded.
    ///
    /// # Errors
    /// The fleet's reports ended; the records cannot be written.
    pub(crate) async fn next_heard(&mut self, wait: Duration) -> Result<Option<ReportHeard>> {
        let heard = self.fleet.next_report(wait).await?;
        if let Some(ReportHeard::Report(report)) = &heard {
            self.home.reports().record(report)?;
        }
        Ok(heard)
    }

    /// The next report of a node `wanted` says yes to, heard within `wait`, as
    /// [`Executor::next_heard`]. Where the reports are read from the bus
    /// ([`Home::reports_from_bus`]: nothing is recorded of them here) every other report heard
    /// meanwhile is passed over unread ([`Fleet::next_report_of`]); in the embedded default,
    /// where each report heard is recorded, every report is heard and recorded as before and
    /// only a wanted one returned.
    ///
    /// # Errors
    /// As [`Executor::next_heard`].
    pub(crate) async fn next_heard_of(
        &mut self,
        wait: Duration,
        wanted: &(dyn for<'n> Fn(&'n str) -> bool + Sync),
    ) -> Result<Option<ReportHeard>> {
        if self.home.reports_from_bus() {
            return self.fleet.next_report_of(wait, wanted).await;
        }
        let until = tokio::time::Instant::now() + wait;
        loop {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            match self.next_heard(left).await? {
                Some(heard) if wanted(heard.node()) => return Ok(Some(heard)),
                Some(_) => {}
                None => return Ok(None),
            }
        }
    }

    /// The next readable report heard within `wait`, recorded ([`Executor::next_heard`]; one
    /// that does not read is passed over here: a push's wait names the node it did not hear).
    ///
    /// # Errors
    /// As [`Executor::next_heard`].
    pub(crate) async fn next_report(&mut self, wait: Duration) -> Result<Option<Report>> {
        Ok(match self.next_heard(wait).await? {
            Some(ReportHeard::Report(report)) => Some(report),
            Some(ReportHeard::Unreadable { .. }) | None => None,
        })
    }
}

/// `declaration` named for a send of its own ([`Outgoing::with_send`]): the message id it goes
/// out with — its node, its digest and a random part made for this send
/// (as `fleet::nats` makes one) — which the report answering it names, and the
/// rollout gate judges it by (the rule “The gate judges each node from its own send”). A
/// declaration already named keeps its name (a publish tried again is the same send).
///
/// # Errors
/// No random bytes could be read.
pub(crate) fn named_send(declaration: Outgoing) -> Result<Outgoing> {
    if declaration.send().is_some() {
        return Ok(declaration);
    }
    let random = crate::bus::credentials::random_hex(8, "a send's id")?;
    let send = fleet::nats::declaration_message_id(&declaration, &random);
    Ok(declaration.with_send(send))
}

/// Each of `declarations` as its node is sent it, in order: each secret it uses sealed again
/// to that node's age key alone, the mesh's keys read once for all (what
/// [`Executor::send_many`] does before the fleet takes them, `host_state_dir` being the
/// fleet's [`Fleet::host_state_dir`]); a node that cannot be sent its secrets gets the error
/// saying why (no age key enrolled, naming its modules).
pub fn sealed_for_their_nodes<'d>(
    home: &Home,
    host_state_dir: HostStateDir<'_>,
    declarations: &'d [Outgoing],
) -> Vec<Result<std::borrow::Cow<'d, Outgoing>>> {
    let mut keys = None;
    declarations
        .iter()
        .map(|declaration| sealed::for_its_node(home, host_state_dir, &mut keys, declaration))
        .collect()
}

/// Writes `declarations` as about to be sent, before any is published (their declarations
/// kept by digest, [`crate::home::SentStore::record_sending`]); then the fail point
/// `sending:<node>` of each, the step between writing a send and making it.
///
/// # Errors
/// The records cannot be written (nothing is sent).
fn about_to_send(home: &Home, declarations: &[&Outgoing]) -> Result<()> {
    if declarations.is_empty() {
        return Ok(());
    }
    home.sent()
        .record_sending(declarations, mesh_store::clock::now())?;
    for declaration in declarations {
        crate::fail::point(&format!("sending:{}", declaration.node()));
    }
    Ok(())
}

/// The fail point `published:<node>` of each declaration the fleet took, the step between
/// making a send and recording it made.
fn published(declarations: &[&Outgoing]) {
    for declaration in declarations {
        crate::fail::point(&format!("published:{}", declaration.node()));
    }
}

/// Records `declarations` sent (together; their declarations were kept when they were written
/// as about to be sent), then says the users archive one names was sent (the store's record of
/// the bus's users keeps it, [`users_sent`]).
async fn recorded_sent(home: &Home, declarations: &[&Outgoing]) -> Result<()> {
    if declarations.is_empty() {
        return Ok(());
    }
    home.sent().record_confirmed(declarations)?;
    for declaration in declarations {
        if let Some(archive) = declaration.declaration().archives.get(USERS_MODULE) {
            users_sent(home, archive).await?;
        }
    }
    Ok(())
}

/// `declaration` as it is sent: the node holding the bus carries the bus's users file.
pub(crate) fn dressed(fleet: &dyn Fleet, declaration: Declaration) -> Declaration {
    match fleet.users_file() {
        Some(users) if users.bus_node == declaration.node => with_users_file(declaration, &users),
        Some(_) | None => declaration,
    }
}

/// Whether `declaration` may be sent now or is held because it would move a running
/// container's data (the rule “A moved mount is held”), against what its node was last sent.
///
/// # Errors
/// What the node was sent cannot be read.
pub fn decide(
    home: &Home,
    declaration: &Declaration,
    allowed_moves: &BTreeSet<String>,
) -> Result<PushDecision> {
    if !mesh_plan::could_move(declaration) {
        // Nothing in it can move, whatever was sent: nothing to read.
        return Ok(PushDecision::Send {
            acknowledged: Vec::new(),
        });
    }
    let sent = home.sent().get(&declaration.node)?;
    Ok(mesh_plan::decide_push(
        sent.as_ref(),
        declaration,
        allowed_moves,
    ))
}

/// Waits until every node in `waiting` (node → digest sent) has a settled report (not
/// mid-change) of that digest, or `deadline`; the last report of the digest heard for each
/// node is returned (a mid-change one when that is all there was).
///
/// Where it stands goes to `progress` as a push's ([`push_progress`]) after each report.
///
/// # Errors
/// As [`Executor::next_report`].
pub(crate) async fn wait_for_reports(
    executor: &mut Executor<'_>,
    waiting: &BTreeMap<String, String>,
    deadline: tokio::time::Instant,
    progress: &dyn crate::Progress,
) -> Result<BTreeMap<String, Report>> {
    let mut heard: BTreeMap<String, Report> = BTreeMap::new();
    let mut settled = 0;
    progress.rollout(&push_progress(waiting.len(), settled));
    while settled < waiting.len() {
        let now = tokio::time::Instant::now();
        if now >= deadline {
            break;
        }
        let Some(report) = executor.next_report(deadline - now).await? else {
            continue;
        };
        if waiting.get(&report.node) != Some(&report.declaration) {
            continue;
        }
        let was_settled = heard
            .get(&report.node)
            .is_some_and(|r| r.machine != MachineState::MidChange);
        if was_settled {
            continue;
        }
        if report.machine != MachineState::MidChange {
            settled += 1;
            progress.rollout(&push_progress(waiting.len(), settled));
        }
        heard.insert(report.node.clone(), report);
    }
    Ok(heard)
}

/// Where a push stands: `settled` of `total` nodes heard (its plan is `push`, its module empty).
pub(crate) fn push_progress(total: usize, settled: usize) -> crate::RolloutProgress {
    crate::RolloutProgress {
        plan: "push".to_owned(),
        module: String::new(),
        total,
        applied: settled,
        in_flight: total - settled,
        held: 0,
        waiting_on: None,
        stage: if settled == total { "done" } else { "rest" },
    }
}

/// The moves, one after another, as a person reads them.
pub(crate) fn list_moves(moves: &[mesh_plan::Move]) -> String {
    moves
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// How many nodes a progress line names before it counts the rest.
const NODES_NAMED: usize = 5;

/// `nodes` as a progress line names them: all of a few, or the first [`NODES_NAMED`] and how
/// many more (a batch of grants on a fleet is thousands of nodes: one line, not a page).
pub(crate) fn some_nodes(nodes: &[String]) -> String {
    match nodes.len().checked_sub(NODES_NAMED) {
        None | Some(0) => nodes.join(", "),
        Some(rest) => format!("{} and {rest} more", nodes[..NODES_NAMED].join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("n{i:05}")).collect()
    }

    #[test]
    fn a_progress_line_names_a_few_nodes_and_counts_the_rest_of_a_fleet() {
        assert_eq!(some_nodes(&names(1)), "n00001");
        assert_eq!(
            some_nodes(&names(5)),
            "n00001, n00002, n00003, n00004, n00005"
        );
        assert_eq!(
            some_nodes(&names(10_000)),
            "n00001, n00002, n00003, n00004, n00005 and 9995 more"
        );
    }
}
