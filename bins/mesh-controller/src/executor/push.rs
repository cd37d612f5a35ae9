//! A push: every named node sent its declaration, grants first, and each node's settled
//! report waited for.

use super::{decide, dressed, wait_for_reports, Executor};
use crate::error::{Error, Result};
use crate::executor::fleet::{Fleet, Grants};
use crate::home::Home;
use crate::push::{Checked, PushResult};
use mesh_model::declaration::{Declaration, Outgoing};
use mesh_model::report::Report;
use mesh_plan::rollout::GRANT_RETRY_SECS;
use mesh_plan::PushDecision;
use mesh_store::problems::ProblemKind;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Sends every named node its declaration through `fleet`, grants first, and waits (up to
/// `timeout`) for each node's settled report.
///
/// # Guarantees
/// - Nothing is sent when the catalogue or inventory has a problem (every problem named).
/// - A node whose declaration would move a running container's data is held, unless its module
///   is in `allowed_moves`; the other nodes go ahead (the rule “A moved mount is held”).
/// - Grants before code: when the bus's users change, the node holding the bus is sent first
///   (named or not) and no other node is sent anything until its grants are confirmed; a grant
///   that fails is tried again every [`GRANT_RETRY_SECS`] within `timeout`, as a rollout does,
///   and one that still fails fails the push (the rule “Grants before code”).
/// - What was sent is recorded as it is sent; every report heard is recorded.
/// - A held node and a grant that fails are recorded as problems for `status` (the rule “Nothing
///   fails silently”: [`ProblemKind::HeldPush`], [`ProblemKind::Grants`], the node their subject)
///   until a later send to that node; each node sent clears its own.
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
/// ([`crate::Progress::rollout`], [`super::push_progress`]).
///
/// # Errors
/// As [`push`].
pub(crate) async fn push_telling(
    home: &Home,
    fleet: &mut dyn Fleet,
    checked: &Checked,
    nodes: &[String],
    allowed_moves: &BTreeSet<String>,
    timeout: Duration,
    progress: &dyn crate::Progress,
) -> Result<Vec<PushResult>> {
    push_allowing(
        home,
        fleet,
        checked,
        nodes,
        (allowed_moves, &BTreeSet::new()),
        timeout,
        progress,
    )
    .await
}

/// [`push_telling`], the modules in `allowed_downgrades` sent to nodes that run a newer build
/// of them (a stopped rollout's, [`crate::push::Downgrade`]); any other such node is held, naming
/// both builds.
///
/// # Errors
/// As [`push`].
pub(crate) async fn push_allowing(
    home: &Home,
    fleet: &mut dyn Fleet,
    checked: &Checked,
    nodes: &[String],
    (allowed_moves, allowed_downgrades): (&BTreeSet<String>, &BTreeSet<String>),
    timeout: Duration,
    progress: &dyn crate::Progress,
) -> Result<Vec<PushResult>> {
    let builds = super::downgrade::Builds::read(home)?;
    let mut executor = Executor::new(home, fleet, progress, allowed_moves);
    let inventory = home.inventory()?;
    executor.prepare(&checked.0, &inventory)?;
    let bus_node = inventory.file.bus_node.clone();
    let users_change = executor.fleet().users_change(false);
    let mut named: Vec<String> = nodes.to_vec();
    if users_change.is_some() && !named.contains(&bus_node) {
        named.push(bus_node.clone());
    }
    let mut held: BTreeMap<String, crate::push::Held> = BTreeMap::new();
    let mut declarations = Vec::new();
    for declaration in crate::push::compose_nodes(home, checked, &named)? {
        let declaration = dressed(executor.fleet(), declaration);
        let downgrades: Vec<crate::push::Downgrade> = match home.sent().get(&declaration.node)? {
            Some(sent) => builds
                .downgrades(&sent, &declaration)
                .into_iter()
                .filter(|d| !allowed_downgrades.contains(&d.module))
                .collect(),
            None => Vec::new(),
        };
        match decide(home, &declaration, allowed_moves)? {
            PushDecision::Send { .. } if downgrades.is_empty() => {
                declarations.push(super::named_send(Outgoing::new(declaration))?);
            }
            PushDecision::Send { .. } => {
                held.insert(
                    declaration.node.clone(),
                    crate::push::Held {
                        moves: Vec::new(),
                        downgrades,
                    },
                );
            }
            PushDecision::Hold { moves } => {
                held.insert(
                    declaration.node.clone(),
                    crate::push::Held { moves, downgrades },
                );
            }
        }
    }
    let now = mesh_store::clock::now();
    for (node, hold) in &held {
        let why = match (hold.moves.is_empty(), hold.downgrades.is_empty()) {
            (false, true) => "it would move a running container's data; push again allowing \
                              its module's move to move it"
                .to_owned(),
            (true, false) => "it would take a module back to an older build than it runs; \
                              push again allowing that module's downgrade to send it"
                .to_owned(),
            _ => "it would move a running container's data and take a module back to an older \
                  build; push again allowing both to send it"
                .to_owned(),
        };
        home.problems().record(
            ProblemKind::HeldPush,
            node,
            &format!("a push to `{node}` is held: {why}"),
            hold.moves
                .iter()
                .map(ToString::to_string)
                .chain(hold.downgrades.iter().map(ToString::to_string))
                .collect(),
            now,
        )?;
    }
    let deadline = tokio::time::Instant::now() + timeout;
    let mut heard: BTreeMap<String, Report> = BTreeMap::new();
    if users_change.is_some() {
        // Grants before code: the bus node first, then its server must let everyone in.
        let Some(position) = declarations.iter().position(|d| d.node() == bus_node) else {
            return Err(Error::refused(format!(
                "the bus's users changed and `{bus_node}`, which holds the bus, is held \
                 (its diff, `plan {bus_node}`, says why); nothing was sent"
            )));
        };
        let first = declarations.remove(position);
        if let Err(reason) =
            grants_within(&mut executor, std::slice::from_ref(&bus_node), deadline).await?
        {
            record_grants_failed(home, std::slice::from_ref(&bus_node), &reason, now)?;
            return Err(Error::refused(format!(
                "grants not issued: {reason}; nothing was sent"
            )));
        }
        executor.send(&first).await?;
        clear_push_problems(home, std::slice::from_ref(&first))?;
        let waiting = BTreeMap::from([(bus_node.clone(), first.digest().to_owned())]);
        let mut first_heard =
            wait_for_reports(&mut executor, &waiting, deadline, &crate::Quiet).await?;
        let Some(report) = first_heard.remove(&bus_node) else {
            let reason = format!(
                "`{bus_node}`, which holds the bus, sent no report within {}s of being sent \
                 the bus's users",
                timeout.as_secs()
            );
            let others: Vec<String> = declarations.iter().map(|d| d.node().to_owned()).collect();
            record_grants_failed(home, &others, &reason, now)?;
            return Err(Error::refused(format!(
                "grants not issued: {reason}; nothing else was sent"
            )));
        };
        heard.insert(bus_node.clone(), report);
        declarations.insert(position, first);
    }
    let rest: Vec<&Outgoing> = declarations
        .iter()
        .filter(|d| !heard.contains_key(d.node()))
        .collect();
    if !rest.is_empty() {
        let rest_nodes: Vec<String> = rest.iter().map(|d| d.node().to_owned()).collect();
        if let Err(reason) = grants_within(&mut executor, &rest_nodes, deadline).await? {
            record_grants_failed(home, &rest_nodes, &reason, now)?;
            return Err(Error::refused(format!(
                "grants not issued: {reason}; nothing else was sent"
            )));
        }
    }
    let waiting: BTreeMap<String, String> = rest
        .iter()
        .map(|d| (d.node().to_owned(), d.digest().to_owned()))
        .collect();
    let rest: Vec<Outgoing> = rest.into_iter().cloned().collect();
    executor.send_many(&rest).await?;
    clear_push_problems(home, &rest)?;
    heard.extend(wait_for_reports(&mut executor, &waiting, deadline, progress).await?);
    let declarations: Vec<Declaration> = declarations
        .into_iter()
        .map(Outgoing::into_declaration)
        .collect();
    Ok(crate::push::results(held, &declarations, heard, timeout))
}

/// Issues the grants of `nodes`, a grant that fails tried again every [`GRANT_RETRY_SECS`]
/// while the push's time lasts, as a rollout does; the last failure's reason when the time
/// ran out first.
///
/// # Errors
/// As [`Executor::issue_grants`].
async fn grants_within(
    executor: &mut Executor<'_>,
    nodes: &[String],
    deadline: tokio::time::Instant,
) -> Result<std::result::Result<(), String>> {
    loop {
        let reason = match executor.issue_grants(nodes).await? {
            Grants::Issued(_) => return Ok(Ok(())),
            Grants::Failed(reason) => reason,
        };
        let again = tokio::time::Instant::now() + Duration::from_secs(GRANT_RETRY_SECS);
        if again >= deadline {
            return Ok(Err(reason));
        }
        executor.progress().line(&format!(
            "grants for {} not issued: {reason}; trying again in {GRANT_RETRY_SECS} s, \
             within the push's timeout",
            super::some_nodes(nodes)
        ));
        tokio::time::sleep_until(again).await;
    }
}

/// Records that `nodes`' grants failed on a push, for `status` until a send to each.
fn record_grants_failed(home: &Home, nodes: &[String], reason: &str, now: u64) -> Result<()> {
    for node in nodes {
        home.problems().record(
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
fn clear_push_problems(home: &Home, sent: &[Outgoing]) -> Result<()> {
    let recorded = home.problems().all()?;
    if recorded.is_empty() {
        return Ok(());
    }
    let sent: BTreeSet<&str> = sent.iter().map(Outgoing::node).collect();
    for problem in recorded {
        if matches!(problem.kind, ProblemKind::HeldPush | ProblemKind::Grants)
            && sent.contains(problem.subject.as_str())
        {
            home.problems().clear(problem.kind, &problem.subject)?;
        }
    }
    Ok(())
}
