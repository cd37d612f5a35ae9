//! A module's rollout: the pure state machine [`mesh_plan::rollout::step`] driven against a
//! fleet, one machine first, each of its actions carried out through the [`Executor`]
//! (`actions`, one function per action) and the plan saved after every step.

use super::saved::{
    expected_declaration, placeholder_definition, read_back, save_rollout, NodesKept,
};
use super::Executor;
use crate::bus::users::UsersFile;
use crate::catalogue::builds;
use crate::error::{Context, Error, Result};
use crate::executor::fleet::ReportHeard;
use crate::home::Home;
use crate::plans::{PlanRecord, RolloutNodeRecord, RunningNode, ROLLOUT_NODE_FORMAT};
use mesh_model::build::Build;
use mesh_model::declaration::{Declaration, Outgoing};
use mesh_model::inventory::Inventory;
use mesh_model::module::{load_catalogue, Catalogue, ModuleDefinition};
use mesh_model::report::MachineState;
use mesh_plan::rollout::{
    step, BusFirst, Event, NodeProgress, RolloutNode, RolloutSpec, RolloutState, Stage, Verdict,
};
use mesh_store::store::ArchiveStore;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// How many reports a rollout takes in at most before it steps them (and saves once).
const REPORTS_PER_STEP: usize = 256;

/// A module's rollout under way: what it composes from, where the state machine stands, and
/// what the step being carried out decided.
pub(super) struct Rollout {
    /// The module.
    pub(super) module: String,
    /// The plan's id.
    pub(super) plan: String,
    /// The module's build.
    pub(super) build: Build,
    /// The catalogue the declarations are composed from.
    pub(super) catalogue: Catalogue,
    /// The inventory they are composed for.
    pub(super) inventory: Inventory,
    /// Over a fleet's bus: the users file the node holding it is sent with every declaration.
    users_file: Option<UsersFile>,
    /// What this version orphans of the layers as they are at this drive (the rule "an
    /// orphaned setting is a removal"): a node whose layers hold one is held, and a node held
    /// for one whose layers no longer hold it is checked again.
    pub(super) orphans: mesh_plan::Orphans,
    /// The rollout's policy and nodes.
    pub(super) spec: RolloutSpec,
    /// Where it stands.
    pub(super) state: RolloutState,
    /// What each node had been sent before this rollout (a revert sends it back), by digest.
    pub(super) befores: BTreeMap<String, Option<String>>,
    /// What the rollout keeps of its nodes' records.
    pub(super) kept: NodesKept,
    /// The events to step.
    pub(super) events: VecDeque<Event>,
    /// This step's sends, each with how its progress line names it, sent together.
    pub(super) batch: Vec<(String, Outgoing)>,
    /// The node sent back what it ran before, and that declaration's digest.
    pub(super) reverted: Option<(String, String)>,
}

/// The catalogue a rollout composes from: what is deployed (or in the home's catalogue), with
/// `module` taken from its new build; and the inventory without assignments of modules that are
/// in neither (they reach their nodes with their own rollouts).
pub(crate) async fn rollout_catalogue(
    home: &Home,
    store: &dyn ArchiveStore,
    module: &str,
    build: &Build,
) -> Result<(Catalogue, Inventory, Option<ModuleDefinition>)> {
    let mut source = builds::effective_source(home, store).await?;
    let (running, _) = load_catalogue(&source);
    let old = running.module(module).map(|m| m.definition.clone());
    let archive = store.fetch(&build.archive).await.for_module(module, || {
        format!(
            "reading the build of `{module}` ({}) from {}",
            build.archive.digest,
            store.name()
        )
    })?;
    let tree = mesh_store::archive::unpack_archive(&archive.bytes, Some(&build.archive))
        .for_module(module, || format!("the build of `{module}`"))?;
    source.modules.insert(module.to_owned(), tree);
    source
        .archives
        .insert(module.to_owned(), build.archive.clone());
    let (catalogue, _) = load_catalogue(&source);
    let mut inventory = home.inventory()?;
    inventory.retain_assignments(|m| catalogue.module(m).is_some() || m == module);
    Ok((catalogue, inventory, old))
}

/// Rolls one module out with the state machine ([`mesh_plan::rollout::step`]), carrying out
/// its actions through `executor` until it is done or stopped; saves the plan after every step,
/// so a controller stopped anywhere resumes here from the record. The build is read from
/// `store`. Cancelled ([`Executor::cancelled_by`]), it returns after the step it is on, saved.
///
/// # Guarantees
/// Grants before code (every send follows the grants issued for its node), the bus node first
/// when the bus's users change, one machine first (the rules “Grants before code”, “One machine
/// first” and “The gate judges each node from its own send”). What was sent is recorded as it is
/// sent.
///
/// # Errors
/// The home, the store or the bus failed; a failed node is not an error but a stopped rollout.
pub(crate) async fn roll_out(
    executor: &mut Executor<'_>,
    store: &dyn ArchiveStore,
    record: &mut PlanRecord,
    module: &str,
) -> Result<()> {
    let mut rollout = Rollout::begin(executor, store, record, module).await?;
    let mut last_tick = tokio::time::Instant::now();
    loop {
        // Every event at hand is stepped, then the sends they decided go out together (the
        // fleet overlaps them, bounded) and the rollout is saved once: a step's sends were
        // granted by an earlier event, so grants before code holds, and a report heard with
        // a hundred others costs one save, not a hundred.
        let mut heard: Vec<String> = Vec::new();
        let mut stepped = false;
        while let Some(event) = rollout.events.pop_front() {
            stepped = true;
            if let Event::Report(report) = &event {
                heard.push(report.node.clone());
            }
            let actions = step(
                &rollout.spec,
                &mut rollout.state,
                event,
                mesh_store::clock::now(),
            );
            executor
                .progress()
                .rollout(&crate::RolloutProgress::of_parts(
                    &rollout.plan,
                    module,
                    &rollout.state.parts(),
                ));
            for action in actions {
                rollout.act(executor, record, action).await?;
            }
        }
        rollout.send_batch(executor).await?;
        if stepped {
            save_rollout(
                executor.home(),
                record,
                module,
                &rollout.spec,
                &mut rollout.state,
                &rollout.befores,
                &mut rollout.kept,
            )?;
        }
        for node in heard {
            crate::fail::point(&format!("heard:{module}:{node}"));
        }
        match rollout.state.stage {
            Stage::Done | Stage::Stopped | Stage::Held => break,
            Stage::NotStarted | Stage::BusNode | Stage::FirstNode | Stage::Rest => {}
        }
        // A step boundary: everything done is saved.
        if executor.is_cancelled() {
            return Ok(());
        }
        rollout.hear(executor).await?;
        // Deadlines are judged at least once a second, however busy the reports keep the
        // loop (a fleet's hosts send heartbeats).
        if last_tick.elapsed() >= Duration::from_secs(1) {
            last_tick = tokio::time::Instant::now();
            rollout.events.push_back(Event::Tick);
        }
    }
    rollout.hear_reverted(executor).await
}

impl Rollout {
    /// The rollout of `module`: read back from its plan when it had begun (a controller
    /// resumed), else begun.
    async fn begin(
        executor: &mut Executor<'_>,
        store: &dyn ArchiveStore,
        record: &PlanRecord,
        module: &str,
    ) -> Result<Rollout> {
        let home = executor.home();
        let build = record.work[module].build.clone().ok_or_else(|| {
            Error::internal(format!("`{module}` is rolled out before it was built"))
        })?;
        let (catalogue, inventory, old_definition) =
            rollout_catalogue(home, store, module, &build).await?;
        executor.prepare(&catalogue, &inventory)?;
        let orphans = mesh_plan::orphaned_settings(
            old_definition.as_ref(),
            &catalogue
                .module(module)
                .map(|m| m.definition.clone())
                .unwrap_or_else(|| placeholder_definition(module)),
            &inventory.layers,
        );
        let mut rollout = Rollout {
            orphans,
            module: module.to_owned(),
            plan: record.plan.id.clone(),
            build,
            catalogue,
            inventory,
            users_file: executor.fleet().users_file(),
            spec: RolloutSpec::new(&placeholder_definition(module), BTreeMap::new(), None),
            state: RolloutState::new(),
            befores: BTreeMap::new(),
            kept: NodesKept::default(),
            events: VecDeque::new(),
            batch: Vec::new(),
            reverted: None,
        };
        match record.work[module].rollout.clone() {
            Some(kept) => {
                let (spec, state) = read_back(
                    home,
                    &rollout.plan,
                    module,
                    kept,
                    &mut rollout.befores,
                    &mut rollout.kept,
                )?;
                rollout.spec = spec;
                rollout.state = state;
                rollout.resume(executor).await?;
            }
            None => rollout.start(executor, old_definition.as_ref())?,
        }
        Ok(rollout)
    }

    /// `node`'s declaration composed for this rollout (the node holding the bus carrying the
    /// bus's users), or why it cannot be.
    pub(super) fn compose(&self, node: &str) -> std::result::Result<Declaration, String> {
        compose_for(
            &self.catalogue,
            &self.inventory,
            self.users_file.as_ref(),
            &self.module,
            node,
        )
    }

    /// A node held for orphaned settings whose layers hold none of them now, or for a required
    /// setting a layer sets now, if any.
    fn orphans_ended(&self) -> Option<String> {
        self.state
            .nodes
            .iter()
            .find_map(|(node, progress)| match progress {
                NodeProgress::Held { orphans, .. }
                    if !orphans.is_empty() && self.orphans.for_node(node).is_empty() =>
                {
                    Some(node.clone())
                }
                NodeProgress::Held { unset, .. } if !unset.is_empty() => {
                    let now = mesh_plan::unset_required(&self.catalogue, &self.inventory, node);
                    unset
                        .iter()
                        .any(|key| !now.contains(key))
                        .then(|| node.clone())
                }
                _ => None,
            })
    }

    /// A rollout read back, resumed: the one resume path is mesh-plan's; a node sent and not
    /// yet heard is heard from its last report, else sent again through the checked send.
    async fn resume(&mut self, executor: &mut Executor<'_>) -> Result<()> {
        let home = executor.home();
        let module = self.module.clone();
        let resume = self.state.to_resume();
        if !resume.grants.is_empty() {
            self.issue_grants(executor, resume.grants).await?;
        }
        for node in &resume.sent {
            let expected = expected_declaration(&self.spec, node);
            match home.reports().get(node)? {
                Some(report) if report.declaration == expected => {
                    self.events
                        .push_back(Event::Report(mesh_plan::merge::module_report(
                            &report, &module,
                        )));
                }
                Some(_) | None => self.send_now(executor, node, " again (resumed)").await?,
            }
        }
        if self.state.stage == Stage::Held && executor.moves().contains(&module) {
            executor.progress().line(&format!(
                "  `{module}`: the held nodes are sent (their data allowed to move)"
            ));
            self.events.push_back(Event::Release);
        } else if self.state.stage == Stage::Held && executor.drops_settings_of(&module) {
            executor.progress().line(&format!(
                "  `{module}`: the held nodes are checked again (their orphaned settings allowed to \
                 drop)"
            ));
            self.events.push_back(Event::Release);
        } else if let Some(node) = self.orphans_ended() {
            // The hold is ended by the layers themselves (`settings rename`, `settings set
            // --replace`): the held nodes are checked again, and those still held stay so.
            executor.progress().line(&format!(
                "  `{module}`: `{node}`'s layers no longer hold a setting this version orphans, \
                 or now set one it requires: the held nodes are checked again"
            ));
            self.events.push_back(Event::Release);
        }
        executor.progress().line(&format!(
            "  `{module}`: resumed at stage {:?}",
            self.state.stage
        ));
        Ok(())
    }

    /// A rollout begun: every assigned node in the spec, a node not running recorded once with
    /// the digest of the declaration it would be sent (what `push --behind` sends it when it
    /// runs again), and the node holding the bus first when the bus's users change. A running
    /// node's declaration is composed once, by its send, which names its digest from then on
    /// (in the spec, and in the node's record saved after the send): composing every node at
    /// the start as well was a second composition of the whole fleet's declarations a module.
    /// The rollout keeps what a step needs, not every node's declaration — at 10,000 nodes of
    /// 30 resources each, kept, they were some 150 MiB.
    fn start(
        &mut self,
        executor: &Executor<'_>,
        old_definition: Option<&ModuleDefinition>,
    ) -> Result<()> {
        let home = executor.home();
        let module = self.module.clone();
        let definition = &self
            .catalogue
            .module(&module)
            .map(|m| m.definition.clone())
            .unwrap_or_else(|| placeholder_definition(&module));
        let mut nodes = BTreeMap::new();
        home.plans().clear_rollout_nodes(&self.plan, &module)?;
        // What every node was sent, in one listing.
        let mut sent_before = home.sent().digests()?;
        let assigned: std::collections::BTreeSet<String> = self
            .inventory
            .nodes_of(&module)
            .into_iter()
            .map(str::to_owned)
            .collect();
        let (running, not_running): (Vec<String>, Vec<String>) =
            assigned.into_iter().partition(|node| {
                self.inventory
                    .file
                    .nodes
                    .get(node)
                    .is_some_and(|n| n.running)
            });
        // The digests of the nodes not running (on the machine's cores when they are many).
        let digests = digests_of(
            &self.catalogue,
            &self.inventory,
            self.users_file.as_ref(),
            &module,
            &not_running,
        );
        // A node not running is never sent to: its record is written once, here.
        let mut not_sent = Vec::with_capacity(not_running.len());
        for (node, declaration) in not_running.into_iter().zip(digests) {
            let before = sent_before.remove(&node);
            self.befores.insert(node.clone(), before.clone());
            not_sent.push(RolloutNodeRecord {
                format: ROLLOUT_NODE_FORMAT,
                node: node.clone(),
                running: false,
                declaration: declaration.clone(),
                before,
                progress: NodeProgress::Waiting,
            });
            nodes.insert(
                node,
                RolloutNode {
                    running: false,
                    declaration,
                },
            );
        }
        self.kept.write_step(home, &self.plan, &module, not_sent)?;
        // The running nodes in one record, with what each ran before, written before any
        // send: a step's record names a node once its progress is more than waiting.
        let mut kept_running = Vec::with_capacity(running.len());
        for node in running {
            let before = sent_before.remove(&node);
            self.befores.insert(node.clone(), before.clone());
            kept_running.push(RunningNode {
                node: node.clone(),
                before,
            });
            nodes.insert(
                node,
                RolloutNode {
                    running: true,
                    declaration: String::new(),
                },
            );
        }
        home.plans()
            .write_rollout_running(&self.plan, &module, kept_running)?;
        // Grants before code: when the bus's users change, the node holding the bus goes
        // first (in the embedded default there are no permissions to issue, and the order is
        // kept all the same).
        let bus_node = self.inventory.file.bus_node.clone();
        let bus_node_running = self
            .inventory
            .file
            .nodes
            .get(&bus_node)
            .is_some_and(|n| n.running);
        let grants_change = mesh_plan::merge::changes_bus_users(old_definition, definition);
        let users_change = executor.fleet().users_change(grants_change);
        let bus_first = if let (Some(why), true) = (users_change, bus_node_running) {
            executor.progress().line(&format!(
                "  `{module}`: {why}: `{bus_node}`, holding the bus, goes first"
            ));
            Some(BusFirst {
                declaration: self
                    .compose(&bus_node)
                    .map(|d| d.digest())
                    .unwrap_or_default(),
                node: bus_node,
            })
        } else {
            None
        };
        self.events.push_back(Event::Start);
        self.spec = RolloutSpec::new(definition, nodes, bus_first);
        self.state = RolloutState::new();
        Ok(())
    }

    /// Sends this step's batch together (the fleet overlaps them, bounded), each line naming
    /// the digest its report must name; the declarations are let go once sent.
    ///
    /// # Errors
    /// As [`Executor::send_many`].
    pub(super) async fn send_batch(&mut self, executor: &mut Executor<'_>) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let (which, declarations): (Vec<String>, Vec<Outgoing>) =
            std::mem::take(&mut self.batch).into_iter().unzip();
        executor.send_many(&declarations).await?;
        let module = &self.module;
        for (which, declaration) in which.iter().zip(&declarations) {
            let node = declaration.node();
            crate::fail::point(&format!("sent:{module}:{node}"));
            // The digest its report must name, noted when it was checked.
            let digest = expected_declaration(&self.spec, node);
            executor.progress().line(&format!(
                "  `{module}`: sent `{node}`{which} declaration {}",
                mesh_host::short(&digest)
            ));
        }
        Ok(())
    }

    /// Hears one report of a node the rollout waits on (waiting up to a second), then every
    /// other one already at hand, each queued as an event.
    async fn hear(&mut self, executor: &mut Executor<'_>) -> Result<()> {
        let module = &self.module;
        let mut wait = Duration::from_secs(1);
        for _ in 0..REPORTS_PER_STEP {
            // Only a node sent and not yet answered: a report of any other (a heartbeat of a
            // node done) cannot change the rollout, and over the bus it is passed over unread.
            let heard = {
                let state = &self.state;
                let awaited = |node: &str| state.awaits_report(node);
                executor.next_heard_of(wait, &awaited).await?
            };
            let report = match heard {
                None => break,
                Some(ReportHeard::Report(report)) => report,
                // Its node's problem: a node sent and not yet answered is judged at once.
                Some(ReportHeard::Unreadable { node, report }) => {
                    wait = Duration::ZERO;
                    if !expected_declaration(&self.spec, &node).is_empty() {
                        self.events.push_back(Event::Unreadable {
                            node,
                            reason: report.to_string(),
                        });
                    }
                    continue;
                }
            };
            wait = Duration::ZERO;
            let expected = expected_declaration(&self.spec, &report.node);
            if expected.is_empty() {
                continue;
            }
            let judged = mesh_plan::merge::module_report(&report, module);
            if judged.verdict == Verdict::Pending && judged.declaration == expected {
                executor.progress().line(&format!(
                    "  `{module}`: `{}` reported it {}, not yet applied: waiting for its next \
                     report, up to {} s from its send",
                    report.node,
                    mesh_host::machine_word(report.machine),
                    self.spec.deadline_secs
                ));
            }
            self.events.push_back(Event::Report(judged));
        }
        Ok(())
    }

    /// Hears the reverted node's report of what it was sent back, so status shows what it runs
    /// now. Not any report of the node: a fleet host's heartbeat repeating its report of the
    /// failed declaration may be heard first.
    async fn hear_reverted(&mut self, executor: &mut Executor<'_>) -> Result<()> {
        let Some((node, digest)) = self.reverted.take() else {
            return Ok(());
        };
        let until = tokio::time::Instant::now() + Duration::from_secs(30);
        while tokio::time::Instant::now() < until {
            if let Some(report) = executor.next_report(Duration::from_secs(1)).await? {
                if report.node == node
                    && report.declaration == digest
                    && report.machine != MachineState::MidChange
                {
                    break;
                }
            }
        }
        Ok(())
    }
}

/// `node`'s declaration composed from `catalogue` for `inventory` (the node holding the bus
/// carrying `users_file`), or why it cannot be.
fn compose_for(
    catalogue: &Catalogue,
    inventory: &Inventory,
    users_file: Option<&UsersFile>,
    module: &str,
    node: &str,
) -> std::result::Result<Declaration, String> {
    if catalogue.module(module).is_none() {
        return Err(format!(
            "`{module}` does not validate against what the mesh runs (`check` lists why)"
        ));
    }
    let declaration = mesh_plan::compose(catalogue, inventory, node).map_err(|e| e.to_string())?;
    Ok(match users_file {
        Some(users) if users.bus_node == node => {
            crate::bus::users::with_users_file(declaration, users)
        }
        Some(_) | None => declaration,
    })
}

/// From how many nodes a rollout's start composes their digests on more than one thread.
const PARALLEL_DIGESTS: usize = 256;

/// The digest of each of `nodes`' declarations ([`compose_for`]; empty for one that cannot be
/// composed), in their order: composed on as many threads as the machine has cores (at most
/// 4) from [`PARALLEL_DIGESTS`] nodes on — at 10,000 nodes a rollout's start is otherwise one
/// core composing every node's whole declaration while the others wait.
fn digests_of(
    catalogue: &Catalogue,
    inventory: &Inventory,
    users_file: Option<&UsersFile>,
    module: &str,
    nodes: &[String],
) -> Vec<String> {
    let digest = |node: &String| {
        compose_for(catalogue, inventory, users_file, module, node)
            .as_ref()
            .map(Declaration::digest)
            .unwrap_or_default()
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    if threads <= 1 || nodes.len() < PARALLEL_DIGESTS {
        return nodes.iter().map(digest).collect();
    }
    let digest = &digest;
    std::thread::scope(|scope| {
        let parts: Vec<_> = nodes
            .chunks(nodes.len().div_ceil(threads))
            .map(|part| scope.spawn(move || part.iter().map(digest).collect::<Vec<_>>()))
            .collect();
        parts
            .into_iter()
            .flat_map(|part| {
                part.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}
