//! A module's rollout: the pure state machine [`mesh_plan::rollout::step`] driven against a
//! fleet, one machine first, its actions carried out through the [`Executor`] and the plan
//! saved after every step.

use super::saved::{
    expected_declaration, placeholder_definition, read_back, save_rollout, set_expected_declaration,
};
use super::{decide, list_moves, some_nodes, Executor};
use crate::builds::{self, DeployedRecord};
use crate::error::{Context, Error, Result};
use crate::fleet::Grants;
use crate::home::Home;
use crate::plans::{PlanRecord, RolloutNodeRecord, ROLLOUT_NODE_FORMAT};
use mesh_model::build::Build;
use mesh_model::declaration::Declaration;
use mesh_model::inventory::Inventory;
use mesh_model::module::{load_catalogue, Catalogue, ModuleDefinition};
use mesh_model::report::MachineState;
use mesh_plan::rollout::{
    step, Action, BusFirst, Event, NodeProgress, RolloutNode, RolloutSpec, RolloutState, Stage,
    Verdict,
};
use mesh_plan::PushDecision;
use mesh_store::store::ArchiveStore;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// Where `state` stands, for [`crate::Progress::rollout`]: counters only, never a walk of the
/// nodes (a step stays constant-time at 10,000 nodes).
fn rollout_progress(plan: &str, module: &str, state: &RolloutState) -> crate::RolloutProgress {
    crate::RolloutProgress::of_parts(plan, module, &state.parts())
}

/// What the check before a rollout's send decided.
enum SendCheck {
    /// Send it.
    Send(Declaration),
    /// Not sent: the event says why (held for a move, or composing failed).
    Not(Event),
}

/// Checks `node`'s composed declaration for `module`'s rollout before it is sent: held when it
/// would move a running container's data and the module may not move (`--move`, rule 12);
/// the event when it is not to be sent. The digest is noted as the one its report must name.
///
/// # Errors
/// What the node was sent cannot be read.
fn checked_send(
    executor: &Executor<'_>,
    spec: &mut RolloutSpec,
    module: &str,
    node: &str,
    composed: std::result::Result<Declaration, String>,
) -> Result<SendCheck> {
    let declaration = match composed {
        Ok(declaration) => declaration,
        Err(reason) => {
            return Ok(SendCheck::Not(Event::SendFailed {
                node: node.to_owned(),
                reason: format!("composing its declaration failed: {reason}"),
            }))
        }
    };
    set_expected_declaration(spec, node, &declaration);
    if let PushDecision::Hold { moves } = decide(executor.home(), &declaration, executor.moves())? {
        executor.progress().line(&format!(
            "  `{module}`: `{node}` held: its data would move ({}); the others go on",
            list_moves(&moves)
        ));
        return Ok(SendCheck::Not(Event::Held {
            node: node.to_owned(),
            moves,
        }));
    }
    Ok(SendCheck::Send(declaration))
}

/// Sends `node` its composed declaration for `module`'s rollout, one at a time, through the
/// check of [`checked_send`]; the events returned answer the send (held, or composing failed).
///
/// # Errors
/// The home cannot be read; the fleet did not take the declaration.
async fn send_composed(
    executor: &mut Executor<'_>,
    spec: &mut RolloutSpec,
    module: &str,
    node: &str,
    composed: std::result::Result<Declaration, String>,
    which: &str,
) -> Result<Vec<Event>> {
    let declaration = match checked_send(executor, spec, module, node, composed)? {
        SendCheck::Send(declaration) => declaration,
        SendCheck::Not(event) => return Ok(vec![event]),
    };
    executor.send(&declaration).await?;
    crate::fail::point(&format!("sent:{module}:{node}"));
    executor.progress().line(&format!(
        "  `{module}`: sent `{node}`{which} declaration {}",
        mesh_host::short(&declaration.digest())
    ));
    Ok(Vec::new())
}

/// Issues the grants of `nodes` for `module`'s rollout, as the event that answers
/// [`Action::IssueGrants`].
async fn grants_event(
    executor: &mut Executor<'_>,
    module: &str,
    nodes: Vec<String>,
) -> Result<Event> {
    Ok(match executor.issue_grants(&nodes).await? {
        Grants::Issued(note) => {
            executor.progress().line(&format!(
                "  `{module}`: grants for {} ({note})",
                some_nodes(&nodes)
            ));
            Event::GrantsIssued { nodes }
        }
        Grants::Failed(reason) => Event::GrantsFailed { nodes, reason },
    })
}

/// The catalogue a rollout composes from: what is deployed (or in the home's catalogue), with
/// `module` taken from its new build; and the inventory without assignments of modules that are
/// in neither (they reach their nodes with their own rollouts).
pub async fn rollout_catalogue(
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
    inventory
        .file
        .assignments
        .retain(|m, _| catalogue.module(m).is_some() || m == module);
    Ok((catalogue, inventory, old))
}

/// Rolls one module out with the state machine ([`mesh_plan::rollout::step`]), carrying out
/// its actions through `executor` until it is done or stopped; saves the plan after every step,
/// so a controller stopped anywhere resumes here from the record. The build is read from
/// `store`.
///
/// # Guarantees
/// Grants before code (every send follows the grants issued for its node), the bus node first
/// when the bus's users change, one machine first (rules 13–15). What was sent is recorded as it
/// is sent.
///
/// # Errors
/// The home, the store or the bus failed; a failed node is not an error but a stopped rollout.
pub async fn roll_out(
    executor: &mut Executor<'_>,
    store: &dyn ArchiveStore,
    record: &mut PlanRecord,
    module: &str,
) -> Result<()> {
    let home = executor.home();
    let id = record.plan.id.clone();
    let build = record.work[module]
        .build
        .clone()
        .ok_or_else(|| Error::internal(format!("`{module}` is rolled out before it was built")))?;
    let (catalogue, inventory, old_definition) =
        rollout_catalogue(home, store, module, &build).await?;
    executor.prepare(&catalogue, &inventory)?;
    // Over a fleet's bus, the node holding it is sent the bus's users with every declaration.
    let users_file = executor.fleet().users_file();
    let compose = |node: &str| -> Result<Declaration, String> {
        match catalogue.module(module) {
            None => Err(format!(
                "`{module}` does not validate against what the mesh runs (`check` lists why)"
            )),
            Some(_) => {
                let declaration =
                    mesh_plan::compose(&catalogue, &inventory, node).map_err(|e| e.to_string())?;
                Ok(match &users_file {
                    Some(users) if users.bus_node == node => {
                        crate::users::with_users_file(declaration, users)
                    }
                    Some(_) | None => declaration,
                })
            }
        }
    };
    let mut events: VecDeque<Event> = VecDeque::new();
    // The declarations composed when the rollout began, by node, until each is sent.
    let mut composed: BTreeMap<String, std::result::Result<Declaration, String>> = BTreeMap::new();
    let plan_id = record.plan.id.clone();
    // What each node had been sent before this rollout (a revert sends it back), by digest.
    let mut befores: BTreeMap<String, Option<String>> = BTreeMap::new();
    let (mut spec, mut state) = match record.work[module].rollout.clone() {
        Some(kept) => {
            let (mut spec, state) = read_back(home, &plan_id, module, kept, &mut befores)?;
            // Resumed: the one resume path is mesh-plan's; a node sent and not yet heard is
            // heard from its last report, else sent again through the checked send.
            let resume = state.to_resume();
            if !resume.grants.is_empty() {
                events.push_back(grants_event(executor, module, resume.grants).await?);
            }
            for node in &resume.sent {
                let expected = expected_declaration(&spec, node);
                match home.report(node)? {
                    Some(report) if report.declaration == expected => {
                        events.push_back(Event::Report(mesh_plan::merge::module_report(
                            &report, module,
                        )));
                    }
                    Some(_) | None => {
                        let sent = send_composed(
                            executor,
                            &mut spec,
                            module,
                            node,
                            compose(node),
                            " again (resumed)",
                        )
                        .await?;
                        events.extend(sent);
                    }
                }
            }
            if state.stage == Stage::Held && executor.moves().contains(module) {
                executor.progress().line(&format!(
                    "  `{module}`: the held nodes are sent (--move {module})"
                ));
                events.push_back(Event::Release);
            }
            executor
                .progress()
                .line(&format!("  `{module}`: resumed at stage {:?}", state.stage));
            (spec, state)
        }
        None => {
            let definition = &catalogue
                .module(module)
                .map(|m| m.definition.clone())
                .unwrap_or_else(|| placeholder_definition(module));
            let mut nodes = BTreeMap::new();
            // What every node was sent, in one listing.
            let mut sent_before = home.sent_digests()?;
            for node in inventory
                .file
                .assignments
                .get(module)
                .cloned()
                .unwrap_or_default()
            {
                let running = inventory.file.nodes.get(&node).is_some_and(|n| n.running);
                let declaration_of_node = compose(&node);
                let declaration = declaration_of_node
                    .as_ref()
                    .map(Declaration::digest)
                    .unwrap_or_default();
                if running {
                    // Composed once: its send takes it from here.
                    composed.insert(node.clone(), declaration_of_node);
                }
                befores.insert(node.clone(), sent_before.remove(&node));
                if !running {
                    // Never sent to: its record is written once, here.
                    home.write_rollout_node(
                        &plan_id,
                        module,
                        &RolloutNodeRecord {
                            format: ROLLOUT_NODE_FORMAT,
                            node: node.clone(),
                            running,
                            declaration: declaration.clone(),
                            before: befores[&node].clone(),
                            progress: NodeProgress::Waiting,
                        },
                    )?;
                }
                nodes.insert(
                    node,
                    RolloutNode {
                        running,
                        declaration,
                    },
                );
            }
            // Grants before code: when the bus's users change, the node holding the bus goes
            // first (in the embedded default there are no permissions to issue, and the order
            // is kept all the same).
            let bus_node = &inventory.file.bus_node;
            let bus_node_running = inventory
                .file
                .nodes
                .get(bus_node)
                .is_some_and(|n| n.running);
            let grants_change =
                mesh_plan::merge::changes_bus_users(old_definition.as_ref(), definition);
            let users_change = executor.fleet().users_change(grants_change);
            let bus_first = if let (Some(why), true) = (users_change, bus_node_running) {
                executor.progress().line(&format!(
                    "  `{module}`: {why}: `{bus_node}`, holding the bus, goes first"
                ));
                Some(BusFirst {
                    node: bus_node.clone(),
                    declaration: compose(bus_node).map(|d| d.digest()).unwrap_or_default(),
                })
            } else {
                None
            };
            events.push_back(Event::Start);
            (
                RolloutSpec::new(definition, nodes, bus_first),
                RolloutState::new(),
            )
        }
    };
    let mut reverted: Option<(String, String)> = None;
    let mut last_tick = tokio::time::Instant::now();
    loop {
        // Every event at hand is stepped, then the sends they decided go out together (the
        // fleet overlaps them, bounded) and the rollout is saved once: a step's sends were
        // granted by an earlier event, so grants before code holds, and a report heard with
        // a hundred others costs one save, not a hundred.
        let mut batch: Vec<(String, Declaration)> = Vec::new();
        let mut heard: Vec<String> = Vec::new();
        let mut stepped = false;
        while let Some(event) = events.pop_front() {
            stepped = true;
            match &event {
                Event::Report(report) => heard.push(report.node.clone()),
                Event::Start
                | Event::GrantsIssued { .. }
                | Event::GrantsFailed { .. }
                | Event::SendFailed { .. }
                | Event::Held { .. }
                | Event::Release
                | Event::Tick => {}
            }
            let actions = step(&spec, &mut state, event, mesh_host::now());
            executor
                .progress()
                .rollout(&rollout_progress(&plan_id, module, &state));
            for action in actions {
                match action {
                    Action::IssueGrants { nodes } => {
                        events.push_back(grants_event(executor, module, nodes).await?);
                    }
                    Action::SendBusNode { node } | Action::Send { node, .. } => {
                        let which = match state.stage {
                            Stage::BusNode => " (holding the bus, first)",
                            Stage::FirstNode if state.first.as_deref() == Some(node.as_str()) => {
                                " (first)"
                            }
                            Stage::NotStarted
                            | Stage::FirstNode
                            | Stage::Rest
                            | Stage::Held
                            | Stage::Done
                            | Stage::Stopped => "",
                        };
                        let declaration = composed
                            .remove(&node)
                            .unwrap_or_else(|| compose(&node));
                        match checked_send(executor, &mut spec, module, &node, declaration)? {
                            SendCheck::Send(declaration) => {
                                batch.push((which.to_owned(), declaration));
                            }
                            SendCheck::Not(event) => events.push_back(event),
                        }
                    }
                    Action::Held { nodes, .. } => executor.progress().line(&format!(
                        "  `{module}`: every other node applied; {nodes} node(s) held: their \
                         data would move (`--move {module}` on `plans resume`, `merge` or \
                         `push --behind` sends them)"
                    )),
                    Action::SendFailed {
                        node,
                        reason,
                        retry_at,
                        ..
                    } => executor.progress().line(&format!(
                        "  `{module}`: not sent to `{node}`: {reason}; tried again at {}",
                        mesh_host::format_time(retry_at)
                    )),
                    Action::Stop { node, reason, .. } => executor.progress().line(&format!(
                        "  `{module}`: stopped at `{node}`: {reason}; the other nodes keep what they ran"
                    )),
                    Action::Revert { node, .. } => {
                        let before = match befores.get(&node).cloned().flatten() {
                            Some(digest) => Some(home.declaration(&digest)?.ok_or_else(|| {
                                Error::Node {
                                    node: node.clone(),
                                    doing: format!("reverting `{node}`"),
                                    source: Box::new(Error::BadRecord {
                                        location: home
                                            .records()
                                            .locate(&crate::home::declaration_key(&digest)),
                                        what: format!(
                                            "kept: `{node}` ran {digest} before this rollout"
                                        ),
                                        source: None,
                                    }),
                                }
                            })?),
                            None => None,
                        };
                        match before.as_ref() {
                            Some(before) => {
                                let digest = before.digest();
                                if let PushDecision::Hold { moves } =
                                    decide(home, before, executor.moves())?
                                {
                                    executor.progress().line(&format!(
                                        "  `{module}`: `{node}` is not sent back what it ran: \
                                         its data would move ({}); `--move {module}` allows it",
                                        list_moves(&moves)
                                    ));
                                    continue;
                                }
                                executor.send(before).await?;
                                executor.progress().line(&format!(
                                    "  `{module}`: sent `{node}` back what it ran before ({})",
                                    mesh_host::short(&digest)
                                ));
                                if let Some(work) = record.work.get_mut(module) {
                                    work.reverted.insert(node.clone(), digest.clone());
                                }
                                reverted = Some((node, digest));
                            }
                            None => executor.progress().line(&format!(
                                "  `{module}`: nothing to send `{node}` back to: it was never sent before"
                            )),
                        }
                    }
                    Action::Done { .. } => {
                        let deployed = DeployedRecord {
                            format: builds::DEPLOYED_FORMAT,
                            module: module.to_owned(),
                            repository: build.repository.clone(),
                            commit: build.commit.clone(),
                            archive: build.archive.clone(),
                            plan: id.clone(),
                            at: mesh_host::now(),
                        };
                        builds::deploy(home, &deployed).await?;
                        crate::fail::point(&format!("deployed:{module}"));
                        executor.progress().line(&format!(
                            "  `{module}`: done on {} node(s); its build {} is deployed",
                            state.applied,
                            mesh_host::short(&build.archive.digest)
                        ));
                    }
                }
            }
        }
        if !batch.is_empty() {
            let declarations: Vec<Declaration> = batch.iter().map(|(_, d)| d.clone()).collect();
            executor.send_many(&declarations).await?;
            for (which, declaration) in &batch {
                let node = &declaration.node;
                crate::fail::point(&format!("sent:{module}:{node}"));
                // The digest its report must name, noted when it was checked.
                let digest = expected_declaration(&spec, node);
                executor.progress().line(&format!(
                    "  `{module}`: sent `{node}`{which} declaration {}",
                    mesh_host::short(&digest)
                ));
            }
        }
        if stepped {
            save_rollout(home, record, module, &spec, &mut state, &befores)?;
        }
        for node in heard {
            crate::fail::point(&format!("heard:{module}:{node}"));
        }
        match state.stage {
            Stage::Done | Stage::Stopped | Stage::Held => break,
            Stage::NotStarted | Stage::BusNode | Stage::FirstNode | Stage::Rest => {}
        }
        // One report waited for (up to a second), then every other one already at hand.
        let mut wait = Duration::from_secs(1);
        for _ in 0..REPORTS_PER_STEP {
            let Some(report) = executor.next_report(wait).await? else {
                break;
            };
            wait = Duration::ZERO;
            let expected = expected_declaration(&spec, &report.node);
            if !expected.is_empty() {
                let judged = mesh_plan::merge::module_report(&report, module);
                if judged.verdict == Verdict::Pending && judged.declaration == expected {
                    executor.progress().line(&format!(
                        "  `{module}`: `{}` reported it {}, not yet applied: waiting for its next report, up to {} s from its send",
                        report.node,
                        mesh_host::machine_word(report.machine),
                        spec.deadline_secs
                    ));
                }
                events.push_back(Event::Report(judged));
            }
        }
        // Deadlines are judged at least once a second, however busy the reports keep the
        // loop (a fleet's hosts send heartbeats).
        if last_tick.elapsed() >= Duration::from_secs(1) {
            last_tick = tokio::time::Instant::now();
            events.push_back(Event::Tick);
        }
    }
    if let Some((node, digest)) = reverted {
        // Hear the reverted node's report of what it was sent back, so status shows what it
        // runs now. Not any report of the node: a fleet host's heartbeat repeating its report
        // of the failed declaration may be heard first.
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
    }
    Ok(())
}

/// How many reports a rollout takes in at most before it steps them (and saves once).
const REPORTS_PER_STEP: usize = 256;
