//! The executor: the one place declarations leave the controller. `push` (embedded and over
//! the bus) and every rollout (`merge`, `plans resume`, `push --behind`, the daemon) send
//! through it, to a [`Fleet`], so the rules that guard a send hold on every path.
//!
//! Start at [`Fleet`] (the seam: prepare, issue grants, send, next report), then [`push`] and
//! [`roll_out`]. Two fleets: [`crate::in_process::InProcessFleet`] (the embedded default: one
//! host agent per node in this process) and [`crate::fleet::NatsFleet`] (a fleet's real hosts
//! over NATS, with real grants). A Rust tool may bring its own.
//!
//! # Guarantees
//! - Grants before code: no declaration is sent to a node before [`Fleet::issue_grants`] for it
//!   answered; when the bus's users change, the node holding the bus is sent first and the rest
//!   only once its grants are confirmed (rule 13, ADR 0218 §1, issue 249).
//! - A send that would give a running container another host directory at a mount it has is
//!   held unless its module is allowed to move (rule 12).
//! - A node is judged converged only from a settled report of the declaration it was sent.
//!
//! What it must never do: send before grants, report a node converged from a report of another
//! declaration, or drop a node that did not answer (it is named "no report").

use crate::builds::{self, DeployedRecord};
use crate::error::{Context, Error, Result};
use crate::home::Home;
use crate::plans::{Ctx, PlanRecord, RolloutKept, RolloutNodeRecord, ROLLOUT_NODE_FORMAT};
use crate::push::{Checked, PushResult};
use mesh_model::build::Build;
use mesh_model::declaration::Declaration;
use mesh_model::inventory::Inventory;
use mesh_model::module::{load_catalogue, Catalogue, ModuleDefinition};
use mesh_model::plan::ModuleRollout;
use mesh_model::report::{MachineState, Report};
use mesh_plan::rollout::{
    step, Action, BusFirst, Event, NodeProgress, RolloutNode, RolloutSpec, RolloutState, Stage,
    Verdict,
};
use mesh_plan::PushDecision;
use mesh_store::problems::ProblemKind;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// The hosts the executor sends to: the seam between the controller's decisions and the
/// machines.
///
/// # Guarantees (what an implementation must keep)
/// - [`Fleet::send`] returns once the declaration is on its way for certain (stored by the bus)
///   and recorded sent in the home ([`Home::record_sent`]); sending the same declaration twice
///   is harmless (a host's apply is idempotent).
/// - [`Fleet::next_report`] records every report it returns ([`Home::record_report`]) and
///   returns only reports published by their own node.
/// - [`Fleet::issue_grants`] answers `Ok(Err(why))` for a grant that failed (the caller tries it
///   again or fails the send), never sends code.
#[async_trait::async_trait]
pub trait Fleet: Send {
    /// Fixes what the sends composed from `catalogue` and `inventory` need of the fleet (over
    /// NATS: the bus's users and granted buckets).
    ///
    /// # Errors
    /// The grants cannot be composed (every problem named).
    fn prepare(&mut self, home: &Home, catalogue: &Catalogue, inventory: &Inventory) -> Result<()>;

    /// Why the sends change the bus's users, if they do, so that the node holding the bus goes
    /// first. `grants_change` says whether a rolled-out module's own grants change (in process,
    /// where there is nothing confirmed to compare with, that is the test).
    fn users_change(&self, home: &Home, grants_change: bool) -> Option<String>;

    /// The node holding the bus and the users file every declaration sent to it names (from
    /// its archive in the store, [`crate::fleet::with_users_file`]).
    fn users_file(&self) -> Option<crate::fleet::UsersFile>;

    /// Issues the grants of `nodes`: `Ok(Ok(what was done))`, or `Ok(Err(why not))`.
    ///
    /// # Errors
    /// The home cannot be read or written.
    async fn issue_grants(
        &mut self,
        home: &Home,
        nodes: &[String],
    ) -> Result<std::result::Result<String, String>>;

    /// Sends `declaration` to its node and records it sent.
    ///
    /// # Errors
    /// The bus did not take it; the home cannot be written.
    async fn send(&mut self, home: &Home, declaration: &Declaration) -> Result<()>;

    /// Sends several declarations (to distinct nodes), as [`Fleet::send`] each; a fleet that
    /// can overlaps them (bounded). The default sends one after another.
    ///
    /// # Errors
    /// As [`Fleet::send`], for the first that failed (the others may have been sent).
    async fn send_many(&mut self, home: &Home, declarations: &[Declaration]) -> Result<()> {
        for declaration in declarations {
            self.send(home, declaration).await?;
        }
        Ok(())
    }

    /// The next report heard within `wait`, recorded in the home.
    ///
    /// # Errors
    /// The home cannot be written; the fleet's reports ended.
    async fn next_report(&mut self, home: &Home, wait: Duration) -> Result<Option<Report>>;
}

/// `declaration` as it is sent: the node holding the bus carries the bus's users file.
fn dressed(fleet: &dyn Fleet, declaration: Declaration) -> Declaration {
    match fleet.users_file() {
        Some(users) if users.bus_node == declaration.node => {
            crate::fleet::with_users_file(declaration, &users)
        }
        Some(_) | None => declaration,
    }
}

/// Whether `declaration` may be sent now or is held because it would move a running
/// container's data (rule 12), against what its node was last sent.
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
    let sent = home.sent(&declaration.node)?;
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
/// As [`Fleet::next_report`].
pub async fn wait_for_reports(
    home: &Home,
    fleet: &mut dyn Fleet,
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
        let Some(report) = fleet.next_report(home, deadline - now).await? else {
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
pub fn push_progress(total: usize, settled: usize) -> crate::RolloutProgress {
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

/// Sends every named node its declaration through `fleet`, grants first, and waits (up to
/// `timeout`) for each node's settled report.
///
/// # Guarantees
/// - Nothing is sent when the catalogue or inventory has a problem (every problem named).
/// - A node whose declaration would move a running container's data is held, unless its module
///   is in `allowed_moves`; the other nodes go ahead (rule 12).
/// - Grants before code: when the bus's users change, the node holding the bus is sent first
///   (named or not) and no other node is sent anything until its grants are confirmed; a grant
///   that fails fails the push (rule 13).
/// - What was sent is recorded as it is sent; every report heard is recorded.
/// - A held node and a grant that fails are recorded as problems for `status` (rule 26:
///   [`ProblemKind::HeldPush`], [`ProblemKind::Grants`], the node their subject) until a later
///   send to that node; each node sent clears its own.
///
/// # Errors
/// A grant that fails ("grants not issued: …; nothing else was sent"); a bus that does not
/// take a declaration; a home that cannot be read or written.
pub async fn push(
    home: &Home,
    fleet: &mut dyn Fleet,
    checked: &Checked,
    nodes: &[String],
    allowed_moves: &BTreeSet<String>,
    timeout: Duration,
) -> Result<Vec<PushResult>> {
    push_telling(
        home,
        fleet,
        checked,
        nodes,
        allowed_moves,
        timeout,
        &crate::Quiet,
    )
    .await
}

/// [`push`], saying how many nodes were heard of all as the reports come
/// ([`crate::Progress::rollout`], [`push_progress`]).
///
/// # Errors
/// As [`push`].
pub async fn push_telling(
    home: &Home,
    fleet: &mut dyn Fleet,
    checked: &Checked,
    nodes: &[String],
    allowed_moves: &BTreeSet<String>,
    timeout: Duration,
    progress: &dyn crate::Progress,
) -> Result<Vec<PushResult>> {
    let inventory = home.inventory()?;
    fleet.prepare(home, &checked.0, &inventory)?;
    let bus_node = inventory.file.bus_node.clone();
    let users_change = fleet.users_change(home, false);
    let mut named: Vec<String> = nodes.to_vec();
    if users_change.is_some() && !named.contains(&bus_node) {
        named.push(bus_node.clone());
    }
    let mut held: BTreeMap<String, Vec<mesh_plan::Move>> = BTreeMap::new();
    let mut declarations = Vec::new();
    for declaration in crate::push::compose_nodes(home, checked, &named)? {
        let declaration = dressed(fleet, declaration);
        match decide(home, &declaration, allowed_moves)? {
            PushDecision::Send { .. } => declarations.push(declaration),
            PushDecision::Hold { moves } => {
                held.insert(declaration.node.clone(), moves);
            }
        }
    }
    let now = mesh_host::now();
    for (node, moves) in &held {
        home.record_problem(
            ProblemKind::HeldPush,
            node,
            &format!(
                "a push to `{node}` is held: it would move a running container's data; push \
                 again with --move MODULE to move it"
            ),
            moves.iter().map(ToString::to_string).collect(),
            now,
        )?;
    }
    let deadline = tokio::time::Instant::now() + timeout;
    let mut heard: BTreeMap<String, Report> = BTreeMap::new();
    if users_change.is_some() {
        // Grants before code: the bus node first, then its server must let everyone in.
        let Some(position) = declarations.iter().position(|d| d.node == bus_node) else {
            return Err(Error::refused(format!(
                "the bus's users changed and `{bus_node}`, which holds the bus, is held \
                 (see `plan {bus_node} --diff`); nothing was sent"
            )));
        };
        let first = declarations.remove(position);
        if let Err(reason) = fleet
            .issue_grants(home, std::slice::from_ref(&bus_node))
            .await?
        {
            record_grants_failed(home, std::slice::from_ref(&bus_node), &reason, now)?;
            return Err(Error::refused(format!(
                "grants not issued: {reason}; nothing was sent"
            )));
        }
        fleet.send(home, &first).await?;
        clear_push_problems(home, std::slice::from_ref(&first))?;
        let waiting = BTreeMap::from([(bus_node.clone(), first.digest())]);
        let mut first_heard =
            wait_for_reports(home, fleet, &waiting, deadline, &crate::Quiet).await?;
        let Some(report) = first_heard.remove(&bus_node) else {
            let reason = format!(
                "`{bus_node}`, which holds the bus, sent no report within {}s of being sent \
                 the bus's users",
                timeout.as_secs()
            );
            let others: Vec<String> = declarations.iter().map(|d| d.node.clone()).collect();
            record_grants_failed(home, &others, &reason, now)?;
            return Err(Error::refused(format!(
                "grants not issued: {reason}; nothing else was sent"
            )));
        };
        heard.insert(bus_node.clone(), report);
        declarations.insert(position, first);
    }
    let rest: Vec<&Declaration> = declarations
        .iter()
        .filter(|d| !heard.contains_key(&d.node))
        .collect();
    if !rest.is_empty() {
        let rest_nodes: Vec<String> = rest.iter().map(|d| d.node.clone()).collect();
        if let Err(reason) = fleet.issue_grants(home, &rest_nodes).await? {
            record_grants_failed(home, &rest_nodes, &reason, now)?;
            return Err(Error::refused(format!(
                "grants not issued: {reason}; nothing else was sent"
            )));
        }
    }
    let waiting: BTreeMap<String, String> =
        rest.iter().map(|d| (d.node.clone(), d.digest())).collect();
    let rest: Vec<Declaration> = rest.into_iter().cloned().collect();
    fleet.send_many(home, &rest).await?;
    clear_push_problems(home, &rest)?;
    heard.extend(wait_for_reports(home, fleet, &waiting, deadline, progress).await?);
    Ok(crate::push::results(held, &declarations, heard, timeout))
}

/// Records that `nodes`' grants failed on a push, for `status` until a send to each.
fn record_grants_failed(home: &Home, nodes: &[String], reason: &str, now: u64) -> Result<()> {
    for node in nodes {
        home.record_problem(
            ProblemKind::Grants,
            node,
            &format!("a push to `{node}` was not sent: grants not issued: {reason}"),
            Vec::new(),
            now,
        )?;
    }
    Ok(())
}

/// Clears the held-push and grants problems of the nodes just sent (one listing of the
/// problems, then only the ones recorded are removed).
fn clear_push_problems(home: &Home, sent: &[Declaration]) -> Result<()> {
    let recorded = home.problems()?;
    if recorded.is_empty() {
        return Ok(());
    }
    let sent: BTreeSet<&str> = sent.iter().map(|d| d.node.as_str()).collect();
    for problem in recorded {
        if matches!(problem.kind, ProblemKind::HeldPush | ProblemKind::Grants)
            && sent.contains(problem.subject.as_str())
        {
            home.clear_problem(problem.kind, &problem.subject)?;
        }
    }
    Ok(())
}

/// Where `state` stands, for [`crate::Progress::rollout`]: counters only, never a walk of the
/// nodes (a step stays constant-time at 10,000 nodes).
fn rollout_progress(plan: &str, module: &str, state: &RolloutState) -> crate::RolloutProgress {
    crate::RolloutProgress::of_parts(plan, module, &state.parts())
}

/// The moves, one after another, as a person reads them.
fn list_moves(moves: &[mesh_plan::Move]) -> String {
    moves
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
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
    ctx: &Ctx<'_>,
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
    if let PushDecision::Hold { moves } = decide(ctx.home, &declaration, &ctx.moves)? {
        ctx.progress.line(&format!(
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
    ctx: &Ctx<'_>,
    fleet: &mut dyn Fleet,
    spec: &mut RolloutSpec,
    module: &str,
    node: &str,
    composed: std::result::Result<Declaration, String>,
    which: &str,
) -> Result<Vec<Event>> {
    let declaration = match checked_send(ctx, spec, module, node, composed)? {
        SendCheck::Send(declaration) => declaration,
        SendCheck::Not(event) => return Ok(vec![event]),
    };
    fleet.send(ctx.home, &declaration).await?;
    crate::fail::point(&format!("sent:{module}:{node}"));
    ctx.progress.line(&format!(
        "  `{module}`: sent `{node}`{which} declaration {}",
        mesh_host::short(&declaration.digest())
    ));
    Ok(Vec::new())
}

/// Issues the grants of `nodes` for `module`'s rollout, as the event that answers
/// [`Action::IssueGrants`].
async fn grants_event(
    ctx: &Ctx<'_>,
    fleet: &mut dyn Fleet,
    module: &str,
    nodes: Vec<String>,
) -> Result<Event> {
    Ok(match fleet.issue_grants(ctx.home, &nodes).await? {
        Ok(note) => {
            ctx.progress.line(&format!(
                "  `{module}`: grants for {} ({note})",
                some_nodes(&nodes)
            ));
            Event::GrantsIssued { nodes }
        }
        Err(reason) => Event::GrantsFailed { nodes, reason },
    })
}

/// How many nodes a progress line names before it counts the rest.
const NODES_NAMED: usize = 5;

/// `nodes` as a progress line names them: all of a few, or the first [`NODES_NAMED`] and how
/// many more (a batch of grants on a fleet is thousands of nodes: one line, not a page).
fn some_nodes(nodes: &[String]) -> String {
    match nodes.len().checked_sub(NODES_NAMED) {
        None | Some(0) => nodes.join(", "),
        Some(rest) => format!("{} and {rest} more", nodes[..NODES_NAMED].join(", ")),
    }
}

/// The catalogue a rollout composes from: what is deployed (or in the home's catalogue), with
/// `module` taken from its new build; and the inventory without assignments of modules that are
/// in neither (they reach their nodes with their own rollouts).
pub async fn rollout_catalogue(
    ctx: &Ctx<'_>,
    module: &str,
    build: &Build,
) -> Result<(Catalogue, Inventory, Option<ModuleDefinition>)> {
    let mut source = builds::effective_source(ctx.home, ctx.store).await?;
    let (running, _) = load_catalogue(&source);
    let old = running.module(module).map(|m| m.definition.clone());
    let archive = ctx
        .store
        .fetch(&build.archive)
        .await
        .for_module(module, || {
            format!(
                "reading the build of `{module}` ({}) from {}",
                build.archive.digest,
                ctx.store.name()
            )
        })?;
    let tree = mesh_store::archive::unpack_archive(&archive.bytes, Some(&build.archive))
        .for_module(module, || format!("the build of `{module}`"))?;
    source.modules.insert(module.to_owned(), tree);
    source
        .archives
        .insert(module.to_owned(), build.archive.clone());
    let (catalogue, _) = load_catalogue(&source);
    let mut inventory = ctx.home.inventory()?;
    inventory
        .file
        .assignments
        .retain(|m, _| catalogue.module(m).is_some() || m == module);
    Ok((catalogue, inventory, old))
}

/// Rolls one module out with the state machine ([`mesh_plan::rollout::step`]), carrying out
/// its actions on `fleet` until it is done or stopped; saves the plan after every step, so a
/// controller stopped anywhere resumes here from the record.
///
/// # Guarantees
/// Grants before code (every send follows the grants issued for its node), the bus node first
/// when the bus's users change, one machine first (rules 13–15). What was sent is recorded as it
/// is sent.
///
/// # Errors
/// The home, the store or the bus failed; a failed node is not an error but a stopped rollout.
pub async fn roll_out(
    ctx: &Ctx<'_>,
    fleet: &mut dyn Fleet,
    record: &mut PlanRecord,
    module: &str,
) -> Result<()> {
    let home = ctx.home;
    let id = record.plan.id.clone();
    let build = record.work[module]
        .build
        .clone()
        .ok_or_else(|| Error::internal(format!("`{module}` is rolled out before it was built")))?;
    let (catalogue, inventory, old_definition) = rollout_catalogue(ctx, module, &build).await?;
    fleet.prepare(home, &catalogue, &inventory)?;
    // Over a fleet's bus, the node holding it is sent the bus's users with every declaration.
    let users_file = fleet.users_file();
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
                        crate::fleet::with_users_file(declaration, users)
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
                events.push_back(grants_event(ctx, fleet, module, resume.grants).await?);
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
                            ctx,
                            fleet,
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
            if state.stage == Stage::Held && ctx.moves.contains(module) {
                ctx.progress.line(&format!(
                    "  `{module}`: the held nodes are sent (--move {module})"
                ));
                events.push_back(Event::Release);
            }
            ctx.progress
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
            let users_change = fleet.users_change(home, grants_change);
            let bus_first = if let (Some(why), true) = (users_change, bus_node_running) {
                ctx.progress.line(&format!(
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
            ctx.progress
                .rollout(&rollout_progress(&plan_id, module, &state));
            for action in actions {
                match action {
                    Action::IssueGrants { nodes } => {
                        events.push_back(grants_event(ctx, fleet, module, nodes).await?);
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
                        match checked_send(ctx, &mut spec, module, &node, declaration)? {
                            SendCheck::Send(declaration) => {
                                batch.push((which.to_owned(), declaration));
                            }
                            SendCheck::Not(event) => events.push_back(event),
                        }
                    }
                    Action::Held { nodes, .. } => ctx.progress.line(&format!(
                        "  `{module}`: every other node applied; {nodes} node(s) held: their \
                         data would move (`--move {module}` on `plans resume`, `merge` or \
                         `push --behind` sends them)"
                    )),
                    Action::SendFailed {
                        node,
                        reason,
                        retry_at,
                        ..
                    } => ctx.progress.line(&format!(
                        "  `{module}`: not sent to `{node}`: {reason}; tried again at {}",
                        mesh_host::format_time(retry_at)
                    )),
                    Action::Stop { node, reason, .. } => ctx.progress.line(&format!(
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
                                    decide(home, before, &ctx.moves)?
                                {
                                    ctx.progress.line(&format!(
                                        "  `{module}`: `{node}` is not sent back what it ran: \
                                         its data would move ({}); `--move {module}` allows it",
                                        list_moves(&moves)
                                    ));
                                    continue;
                                }
                                fleet.send(home, before).await?;
                                ctx.progress.line(&format!(
                                    "  `{module}`: sent `{node}` back what it ran before ({})",
                                    mesh_host::short(&digest)
                                ));
                                if let Some(work) = record.work.get_mut(module) {
                                    work.reverted.insert(node.clone(), digest.clone());
                                }
                                reverted = Some((node, digest));
                            }
                            None => ctx.progress.line(&format!(
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
                        ctx.progress.line(&format!(
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
            fleet.send_many(home, &declarations).await?;
            for (which, declaration) in &batch {
                let node = &declaration.node;
                crate::fail::point(&format!("sent:{module}:{node}"));
                // The digest its report must name, noted when it was checked.
                let digest = expected_declaration(&spec, node);
                ctx.progress.line(&format!(
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
            let Some(report) = fleet.next_report(home, wait).await? else {
                break;
            };
            wait = Duration::ZERO;
            let expected = expected_declaration(&spec, &report.node);
            if !expected.is_empty() {
                let judged = mesh_plan::merge::module_report(&report, module);
                if judged.verdict == Verdict::Pending && judged.declaration == expected {
                    ctx.progress.line(&format!(
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
            if let Some(report) = fleet.next_report(home, Duration::from_secs(1)).await? {
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

/// The digest a node's report must name: its own declaration, or the bus node's when it goes
/// first without running the module (empty: the rollout does not wait on the node).
fn expected_declaration(spec: &RolloutSpec, node: &str) -> String {
    match (spec.nodes.get(node), &spec.bus_first) {
        (Some(entry), _) => entry.declaration.clone(),
        (None, Some(bus)) if bus.node == node => bus.declaration.clone(),
        (None, Some(_) | None) => String::new(),
    }
}

/// Records the declaration a node is sent as the one its report must name.
fn set_expected_declaration(spec: &mut RolloutSpec, node: &str, declaration: &Declaration) {
    if let Some(entry) = spec.nodes.get_mut(node) {
        entry.declaration = declaration.digest();
    }
    if let Some(bus) = spec.bus_first.as_mut() {
        if bus.node == node {
            bus.declaration = declaration.digest();
        }
    }
}

/// Saves a rollout after a step: the record of each node whose progress changed (a constant
/// number per step), then the plan record with the rollout's parts (constant in size).
///
/// # Errors
/// The plans lease was taken over; the records cannot be written.
pub(crate) fn save_rollout(
    home: &Home,
    record: &mut PlanRecord,
    module: &str,
    spec: &RolloutSpec,
    state: &mut RolloutState,
    befores: &BTreeMap<String, Option<String>>,
) -> Result<()> {
    let mut changed = Vec::new();
    for node in state.nodes.take_changed() {
        let (Some(entry), Some(progress)) = (spec.nodes.get(&node), state.nodes.get(&node)) else {
            continue;
        };
        changed.push(RolloutNodeRecord {
            format: ROLLOUT_NODE_FORMAT,
            node: node.clone(),
            running: entry.running,
            declaration: entry.declaration.clone(),
            before: befores.get(&node).cloned().flatten(),
            progress: progress.clone(),
        });
    }
    home.write_rollout_nodes(&record.plan.id, module, &changed)?;
    let work = record.work.entry(module.to_owned()).or_default();
    work.rollout = Some(RolloutKept {
        upgrade: spec.upgrade,
        on_failure: spec.on_failure,
        deadline_secs: spec.deadline_secs,
        max_parallel: spec.max_parallel,
        bus_first: spec.bus_first.clone(),
        state: state.parts(),
    });
    let build = work.build.as_ref().map(|b| b.archive.clone());
    let rollout: ModuleRollout = state.record(build);
    record.plan.rollouts.insert(module.to_owned(), rollout);
    home.write_plan(record)
}

/// A rollout read back from its plan record and its nodes' records (a controller resumed).
fn read_back(
    home: &Home,
    plan: &str,
    module: &str,
    kept: RolloutKept,
    befores: &mut BTreeMap<String, Option<String>>,
) -> Result<(RolloutSpec, RolloutState)> {
    let records = home.rollout_nodes(plan, module)?;
    let mut nodes = BTreeMap::new();
    let mut progress = Vec::new();
    for record in records {
        befores.insert(record.node.clone(), record.before);
        if record.running {
            progress.push((record.node.clone(), record.progress));
        }
        nodes.insert(
            record.node,
            RolloutNode {
                running: record.running,
                declaration: record.declaration,
            },
        );
    }
    let spec = RolloutSpec {
        module: module.to_owned(),
        upgrade: kept.upgrade,
        on_failure: kept.on_failure,
        deadline_secs: kept.deadline_secs,
        max_parallel: kept.max_parallel,
        nodes,
        bus_first: kept.bus_first,
    };
    Ok((spec, RolloutState::assemble(kept.state, progress)))
}

/// A definition for a module that does not validate in the rollout's catalogue: the defaults
/// (its sends fail when composed, which stops the rollout naming why).
pub(crate) fn placeholder_definition(module: &str) -> mesh_model::module::ModuleDefinition {
    let text = format!("name = \"{module}\"\n");
    toml::from_str(&text).unwrap_or_else(|_| panic!("a minimal definition parses"))
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
