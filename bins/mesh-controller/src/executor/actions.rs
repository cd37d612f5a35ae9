//! What a rollout does for each action of the state machine ([`mesh_plan::rollout::Action`]):
//! one function per action, each turning it into fleet calls through the [`Executor`] (which
//! records them), progress lines, and the events that answer it.

use super::rollout::Rollout;
use super::saved::set_expected_declaration;
use super::{decide, list_moves, some_nodes, Executor};
use crate::catalogue::builds::{self, DeployedRecord};
use crate::error::{Error, Result};
use crate::executor::fleet::Grants;
use crate::plans::PlanRecord;
use mesh_model::declaration::{Declaration, Outgoing};
use mesh_plan::rollout::{Action, Event, Stage};
use mesh_plan::PushDecision;

/// The most declarations a rollout's step holds composed before it sends them: a batch this
/// size is sent (its publishes overlapped, [`crate::executor::fleet::nats::SEND_CONCURRENCY`] at a
/// time) and recorded, then let go, before the next is composed. Eight rounds of the fleet's
/// publishes in flight, so the bus stays busy, while what a step holds stays some megabytes
/// whatever the fleet's size (a declaration of 30 file resources is about 15 KiB in memory).
pub(super) const SENDS_HELD: usize = 512;

/// What the check before a rollout's send decided.
pub(super) enum SendCheck {
    /// Send it.
    Send(Outgoing),
    /// Not sent: the event says why (held for a move, or composing failed).
    Not(Event),
}

impl Rollout {
    /// Carries out `action`, one function per action.
    ///
    /// # Errors
    /// The records cannot be read or written; the fleet did not take a declaration sent back.
    pub(super) async fn act(
        &mut self,
        executor: &mut Executor<'_>,
        record: &mut PlanRecord,
        action: Action,
    ) -> Result<()> {
        match action {
            Action::IssueGrants { nodes } => self.issue_grants(executor, nodes).await,
            Action::SendBusNode { node } => self.send_bus_node(executor, node).await,
            Action::Send { node, .. } => self.send(executor, node).await,
            Action::Held { nodes, .. } => {
                self.held(executor, nodes);
                Ok(())
            }
            Action::SendFailed {
                node,
                reason,
                retry_at,
                ..
            } => {
                self.send_failed(executor, &node, &reason, retry_at);
                Ok(())
            }
            Action::Stop { node, reason, .. } => {
                self.stop(executor, &node, &reason);
                Ok(())
            }
            Action::Revert { node, .. } => self.revert(executor, record, node).await,
            Action::Done { .. } => self.done(executor).await,
        }
    }

    /// [`Action::IssueGrants`]: issues the grants of `nodes`; the answer is the next event.
    ///
    /// # Errors
    /// As [`Executor::issue_grants`].
    pub(super) async fn issue_grants(
        &mut self,
        executor: &mut Executor<'_>,
        nodes: Vec<String>,
    ) -> Result<()> {
        let module = &self.module;
        let event = match executor.issue_grants(&nodes).await? {
            Grants::Issued(note) => {
                executor.progress().line(&format!(
                    "  `{module}`: grants for {} ({note})",
                    some_nodes(&nodes)
                ));
                Event::GrantsIssued { nodes }
            }
            Grants::Failed(reason) => Event::GrantsFailed { nodes, reason },
        };
        self.events.push_back(event);
        Ok(())
    }

    /// [`Action::SendBusNode`]: the node holding the bus sent first, as [`Rollout::send`].
    ///
    /// # Errors
    /// As [`Rollout::send`].
    async fn send_bus_node(&mut self, executor: &mut Executor<'_>, node: String) -> Result<()> {
        self.send(executor, node).await
    }

    /// [`Action::Send`]: `node`'s declaration composed, checked ([`Rollout::checked_send`]) and
    /// put in this step's batch, sent together once every event at hand is stepped — or at once
    /// when the batch holds [`SENDS_HELD`] (a fleet's first step after its first machine sends
    /// every other node: the declarations a step holds stay bounded).
    ///
    /// # Errors
    /// What the node was sent cannot be read; a batch sent at once failed as
    /// [`Rollout::send_batch`].
    async fn send(&mut self, executor: &mut Executor<'_>, node: String) -> Result<()> {
        let which = match self.state.stage {
            Stage::BusNode => " (holding the bus, first)",
            Stage::FirstNode if self.state.first.as_deref() == Some(node.as_str()) => " (first)",
            Stage::NotStarted
            | Stage::FirstNode
            | Stage::Rest
            | Stage::Held
            | Stage::Done
            | Stage::Stopped => "",
        };
        let declaration = self.compose(&node);
        match self.checked_send(executor, &node, declaration)? {
            SendCheck::Send(declaration) => self.batch.push((which.to_owned(), declaration)),
            SendCheck::Not(event) => self.events.push_back(event),
        }
        if self.batch.len() >= SENDS_HELD {
            self.send_batch(executor).await?;
        }
        Ok(())
    }

    /// [`Action::Held`]: every other node applied, and `nodes` are held for a move.
    fn held(&self, executor: &Executor<'_>, nodes: usize) {
        let module = &self.module;
        executor.progress().line(&format!(
            "  `{module}`: every other node applied; {nodes} node(s) held: their data would move \
             (resuming the plan with `{module}`'s move allowed sends them)"
        ));
    }

    /// [`Action::SendFailed`]: `node` was not sent, and is tried again at `retry_at`.
    fn send_failed(&self, executor: &Executor<'_>, node: &str, reason: &str, retry_at: u64) {
        executor.progress().line(&format!(
            "  `{}`: not sent to `{node}`: {reason}; tried again at {}",
            self.module,
            mesh_store::clock::rfc3339(retry_at)
        ));
    }

    /// [`Action::Stop`]: the rollout stopped at `node`.
    fn stop(&self, executor: &Executor<'_>, node: &str, reason: &str) {
        executor.progress().line(&format!(
            "  `{}`: stopped at `{node}`: {reason}; the other nodes keep what they ran",
            self.module
        ));
    }

    /// [`Action::Revert`]: `node` sent back what it ran before this rollout, its grants issued
    /// first (one that fails is a grants problem and nothing is sent) — unless that would move
    /// its data and the module may not move — and the revert kept in the plan.
    ///
    /// # Errors
    /// What it ran before is not kept; the fleet did not take it; the records cannot be read.
    async fn revert(
        &mut self,
        executor: &mut Executor<'_>,
        record: &mut PlanRecord,
        node: String,
    ) -> Result<()> {
        let home = executor.home();
        let module = self.module.clone();
        let before = match self.befores.get(&node).cloned().flatten() {
            Some(digest) => Some(home.sent().declaration(&digest)?.ok_or_else(|| {
                Error::Node {
                    node: node.clone(),
                    doing: format!("reverting `{node}`"),
                    source: Box::new(Error::BadRecord {
                        location: home
                            .records()
                            .locate(&crate::home::declaration_key(&digest)),
                        what: format!("kept: `{node}` ran {digest} before this rollout"),
                        source: None,
                    }),
                }
            })?),
            None => None,
        };
        let Some(before) = before else {
            executor.progress().line(&format!(
                "  `{module}`: nothing to send `{node}` back to: it was never sent before"
            ));
            return Ok(());
        };
        let before = super::named_send(Outgoing::new(before))?;
        let digest = before.digest().to_owned();
        if let PushDecision::Hold { moves } = decide(home, before.declaration(), executor.moves())?
        {
            executor.progress().line(&format!(
                "  `{module}`: `{node}` is not sent back what it ran: its data would move ({}); \
                 allowing `{module}`'s move lets it",
                list_moves(&moves)
            ));
            return Ok(());
        }
        // Grants before code: a revert is a send like any other.
        match executor.issue_grants(std::slice::from_ref(&node)).await? {
            Grants::Issued(note) => executor.progress().line(&format!(
                "  `{module}`: grants for `{node}` before it is sent back ({note})"
            )),
            Grants::Failed(reason) => {
                let what = format!(
                    "`{node}` was not sent back what it ran before the rollout of `{module}` \
                     stopped: grants not issued: {reason}"
                );
                executor.progress().line(&format!("  `{module}`: {what}"));
                home.problems().record(
                    mesh_store::problems::ProblemKind::Grants,
                    &node,
                    &what,
                    Vec::new(),
                    mesh_store::clock::now(),
                )?;
                return Ok(());
            }
        }
        executor.send(&before).await?;
        executor.progress().line(&format!(
            "  `{module}`: sent `{node}` back what it ran before ({})",
            mesh_host::short(&digest)
        ));
        if let Some(work) = record.work.get_mut(&module) {
            work.reverted.insert(node.clone(), digest.clone());
        }
        self.reverted = Some((node, digest));
        Ok(())
    }

    /// [`Action::Done`]: the module's build recorded deployed.
    ///
    /// # Errors
    /// The deployed record cannot be written.
    async fn done(&self, executor: &mut Executor<'_>) -> Result<()> {
        let module = &self.module;
        let deployed = DeployedRecord {
            format: builds::DEPLOYED_FORMAT,
            module: module.clone(),
            repository: self.build.repository.clone(),
            commit: self.build.commit.clone(),
            archive: self.build.archive.clone(),
            plan: self.plan.clone(),
            at: mesh_store::clock::now(),
            // A node not running was never sent: behind on the module until it is.
            not_running: self
                .spec
                .nodes
                .iter()
                .filter(|(_, node)| !node.running)
                .map(|(name, node)| {
                    let sent = builds::NotSent {
                        before: self.befores.get(name).cloned().flatten(),
                        declaration: node.declaration.clone(),
                    };
                    (name.clone(), sent)
                })
                .collect(),
        };
        builds::deploy(executor.home(), &deployed).await?;
        crate::fail::point(&format!("deployed:{module}"));
        executor.progress().line(&format!(
            "  `{module}`: done on {} node(s); its build {} is deployed",
            self.state.applied,
            mesh_host::short(&self.build.archive.digest)
        ));
        Ok(())
    }

    /// Checks `node`'s composed declaration before it is sent: held when it would move a
    /// running container's data and the module may not move (`--move`, the rule “A moved mount is
    /// held”), or when the module's new version orphans a setting the node's layers hold (the rule
    /// "an orphaned setting is a removal"); the event when it is not to be sent. The digest is
    /// noted as the one its report must name.
    ///
    /// # Errors
    /// What the node was sent cannot be read.
    pub(super) fn checked_send(
        &mut self,
        executor: &Executor<'_>,
        node: &str,
        composed: std::result::Result<Declaration, String>,
    ) -> Result<SendCheck> {
        let declaration = match composed {
            Ok(declaration) => Outgoing::new(declaration),
            Err(reason) => {
                // A setting its modules require that no layer sets: held, never sent the
                // placeholder, until a layer sets it.
                let unset = mesh_plan::unset_required(&self.catalogue, &self.inventory, node);
                if !unset.is_empty() {
                    executor.progress().line(&format!(
                        "  `{}`: `{node}` held: {}; the others go on (a layer setting it sends \
                         it)",
                        self.module,
                        unset
                            .iter()
                            .map(|unset| format!("{unset} is required and no layer sets it"))
                            .collect::<Vec<_>>()
                            .join("; ")
                    ));
                    return Ok(SendCheck::Not(Event::Held {
                        node: node.to_owned(),
                        moves: Vec::new(),
                        orphans: Vec::new(),
                        unset,
                    }));
                }
                return Ok(SendCheck::Not(Event::SendFailed {
                    node: node.to_owned(),
                    reason: format!("composing its declaration failed: {reason}"),
                }));
            }
        };
        set_expected_declaration(&mut self.spec, node, declaration.digest());
        if let PushDecision::Hold { moves } =
            decide(executor.home(), declaration.declaration(), executor.moves())?
        {
            executor.progress().line(&format!(
                "  `{}`: `{node}` held: its data would move ({}); the others go on",
                self.module,
                list_moves(&moves)
            ));
            return Ok(SendCheck::Not(Event::Held {
                node: node.to_owned(),
                moves,
                orphans: Vec::new(),
                unset: Vec::new(),
            }));
        }
        let orphaned: Vec<mesh_plan::Orphan> =
            self.orphans.for_node(node).into_iter().cloned().collect();
        if !orphaned.is_empty() && executor.drops_settings_of(&self.module) {
            executor.progress().line(&format!(
                "  `{}`: `{node}` sent with these settings dropped, as allowed for `{}`: {}",
                self.module,
                self.module,
                orphaned
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        } else if !orphaned.is_empty() {
            executor.progress().line(&format!(
                "  `{}`: `{node}` held: this version orphans settings its layers hold ({}); the \
                 others go on (allowing `{}`'s settings to drop sends it without them)",
                self.module,
                orphaned
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
                self.module
            ));
            return Ok(SendCheck::Not(Event::Held {
                node: node.to_owned(),
                moves: Vec::new(),
                orphans: orphaned,
                unset: Vec::new(),
            }));
        }
        // Named for this send: the node's progress keeps the name, and only the report that
        // names it opens the gate (the rule “The gate judges each node from its own send”).
        let declaration = super::named_send(declaration)?;
        if let Some(send) = declaration.send() {
            self.state.name_send(node, send);
        }
        Ok(SendCheck::Send(declaration))
    }

    /// Sends `node` its composed declaration at once, through the check of
    /// [`Rollout::checked_send`] (a resumed rollout's send again); an event answering the send
    /// (held, or composing failed) is queued.
    ///
    /// # Errors
    /// The records cannot be read; the fleet did not take the declaration.
    pub(super) async fn send_now(
        &mut self,
        executor: &mut Executor<'_>,
        node: &str,
        which: &str,
    ) -> Result<()> {
        let composed = self.compose(node);
        let declaration = match self.checked_send(executor, node, composed)? {
            SendCheck::Send(declaration) => declaration,
            SendCheck::Not(event) => {
                self.events.push_back(event);
                return Ok(());
            }
        };
        executor.send(&declaration).await?;
        crate::fail::point(&format!("sent:{}:{node}", self.module));
        executor.progress().line(&format!(
            "  `{}`: sent `{node}`{which} declaration {}",
            self.module,
            mesh_host::short(declaration.digest())
        ));
        Ok(())
    }
}
