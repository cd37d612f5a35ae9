//! Where the controller's records are, and moving them onto a fleet's bus.
//!
//! Without `--bus` the records are files under the mesh home; with `--bus` they are the bus's
//! records bucket ([`mesh_bus::records::KvRecords`]), so any machine that reaches the bus, with
//! the controller's password, runs the same controller (see [`crate::home`] for the keys).
//!
//! `records import` moves a home made by `init` onto the bus: every record is copied, the
//! inventory last (a half-done import holds no mesh and is refused by every command, so it can
//! simply be run again), and the home is marked as moved, so a later command on it without
//! `--bus` is refused instead of reading records that are no longer kept up to date.
//!
//! # Invariants
//! - An import never overwrites a mesh: a bus that already holds an inventory is refused and
//!   nothing is copied.
//! - The controller's own password and seed never go onto the bus (they are what opens the
//!   bus).

pub(crate) mod backup;

pub use backup::{export, import as restore, Exported, Restored};

use crate::bus::credentials::{self, BusConfig};
use crate::error::{bus_error, file_error, Error, Result};
use crate::home::{Home, MOVED_FILE};
use mesh_bus::records::KvRecords;
use mesh_bus::NatsOptions;
use mesh_model::inventory::INVENTORY_FILE;
use mesh_store::record_store::{DirRecords, RecordStore, Swap};
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;

/// How long opening the records keeps trying a bus that refuses or does not answer (a server
/// restarting or reloading its users) before it fails.
pub(crate) const OPEN_RETRY_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The home at `root`, its records on the bus when `bus` is given.
///
/// # Errors
/// When the bus cannot be reached, refuses the controller's password, or its records bucket
/// can be neither opened nor made.
pub fn open_home(root: &Path, bus: Option<&BusConfig>) -> Result<Home> {
    let local = Home::new(root);
    let Some(bus) = bus else {
        return Ok(local);
    };
    let options = NatsOptions {
        name: Some("mesh-controller records".to_owned()),
        ..credentials::controller_options(&local, bus)?
    };
    // A bus reloading its users refuses logins for a moment (nats-server answers
    // "authorization violation" while the reload is under way): try again for a while before
    // saying so, as a send does.
    let deadline = std::time::Instant::now() + OPEN_RETRY_LIMIT;
    let records = loop {
        match KvRecords::open(&options) {
            Ok(records) => match bus.retry_limit {
                Some(limit) => break records.with_retry_limit(limit),
                None => break records,
            },
            // Not a moment's refusal: trying again changes nothing.
            Err(
                error @ (mesh_bus::NatsError::Untrusted { .. }
                | mesh_bus::NatsError::TlsNotOffered { .. }
                | mesh_bus::NatsError::Secret { .. }
                | mesh_bus::NatsError::Url { .. }),
            ) => {
                return Err(bus_error(|| {
                    format!("opening the controller's records on {}", bus.url)
                })(error))
            }
            Err(error) if std::time::Instant::now() < deadline => {
                tracing::debug!(%error, "the records could not be opened; trying again");
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            Err(error) => {
                return Err(bus_error(|| {
                    format!(
                        "opening the controller's records on {} (tried for {} s)",
                        bus.url,
                        OPEN_RETRY_LIMIT.as_secs()
                    )
                })(error))
            }
        }
    };
    // Each top-level directory's bucket made while the bus is whole, not at a first write
    // that may come while a server of a cluster is down.
    records
        .make_directories(&top_directories())
        .map_err(bus_error(|| {
            format!("making the controller's record buckets on {}", bus.url)
        }))?;
    let migrated = records.migrated();
    let records = Arc::new(records);
    let reports = StreamReports(Arc::clone(&records));
    // A record larger than a bucket's value (an inventory of thousands of nodes) is kept in
    // chunks, none above 64 KiB.
    let chunked = Arc::new(mesh_store::chunked::ChunkedRecords::new(records));
    let home = Home::on_bus(root, chunked, Some(Arc::new(reports)));
    if migrated > 0 {
        home.note_migration(format!(
            "{}: {migrated} records moved to layout 3 (a bucket per top-level directory, each \
             directory below it a subject token, so a listing reads only its directory)",
            home.records().name()
        ));
    }
    Ok(home)
}

/// The top-level directories of the controller's records: those a home holds
/// ([`crate::home::keys::RECORD_DIRS`]), the plans lease's and the chunks'. On a bus each is a
/// bucket of its own (`mesh_bus::records::directory_bucket`), made when the records are opened.
pub fn top_directories() -> Vec<&'static str> {
    let mut tops: Vec<&'static str> = crate::home::keys::RECORD_DIRS
        .iter()
        .chain(&[
            mesh_store::lease::PLANS_LEASE,
            mesh_store::chunked::CHUNKS_DIR,
        ])
        .map(|dir| dir.split('/').next().unwrap_or(dir))
        .collect();
    tops.sort_unstable();
    tops.dedup();
    tops
}

/// The bus's reports stream as the source of each node's latest report (the rule “Every report is
/// heard, from one source”): every report a host publishes is there, whether or not a controller
/// was listening.
#[derive(Debug)]
struct StreamReports(Arc<KvRecords>);

impl crate::home::ReportSource for StreamReports {
    /// Tries again for up to [`OPEN_RETRY_LIMIT`] while the stream cannot be read: a server
    /// reloading its users answers for a moment that the stream does not exist.
    fn latest(&self, node: &str) -> Result<Option<(Vec<u8>, u64)>> {
        let deadline = std::time::Instant::now() + OPEN_RETRY_LIMIT;
        loop {
            match self.0.last_message(
                mesh_bus::subjects::REPORTS_STREAM,
                &mesh_bus::subjects::report(node),
            ) {
                Ok(latest) => return Ok(latest),
                Err(error) if std::time::Instant::now() < deadline => {
                    tracing::debug!(%error, node, "the reports stream could not be read; trying again");
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
                Err(error) => {
                    return Err(bus_error(|| {
                        format!("reading the last report of `{node}` from the reports stream")
                    })(error))
                }
            }
        }
    }

    fn history(&self, node: &str, after: u64) -> Result<Vec<(Vec<u8>, u64, u64)>> {
        self.0
            .messages(
                mesh_bus::subjects::REPORTS_STREAM,
                &mesh_bus::subjects::report(node),
                after + 1,
                Self::HISTORY,
            )
            .map_err(bus_error(|| {
                format!("reading the reports of `{node}` the reports stream keeps")
            }))
    }
}

impl StreamReports {
    /// The most reports of one node the history is read for: the reports stream keeps 64 a
    /// subject.
    const HISTORY: usize = 64;
}

/// What `records import` copied.
#[derive(Debug, Serialize)]
pub struct Imported {
    /// The home the records came from.
    pub home: String,
    /// Where they are now.
    pub records: String,
    /// Every key copied, in the order copied.
    pub keys: Vec<String>,
}

/// Copies the records of the home at `root` onto `target` (the bus's records), inventory last,
/// and marks the home as moved.
///
/// # Errors
/// When the home holds no mesh or was moved already, the bus already holds a mesh (nothing is
/// copied), or a record cannot be read or written (run it again: nothing is a mesh on the bus
/// until the inventory is copied, last).
pub fn import(root: &Path, target: &Home, bus_url: &str) -> Result<Imported> {
    let local = Home::new(root);
    local.require()?;
    if target.get(INVENTORY_FILE)?.is_some() {
        return Err(Error::refused(format!(
            "{} already holds a mesh ({INVENTORY_FILE}); nothing was copied",
            target.records().name()
        )));
    }
    // No controller on this home plans or drives while its records are copied.
    let _lock = crate::plans::PlansLock::acquire(&local, "records import")?;
    let source = DirRecords::new(root);
    let mut keys = Vec::new();
    let controller_password = format!("bus/passwords/{}", mesh_bus::subjects::CONTROLLER_USER);
    for dir in crate::home::keys::RECORD_DIRS {
        keys.extend(source.keys_under(dir)?.into_iter().filter(|key| {
            *key != controller_password && key.as_str() != credentials::CONTROLLER_SEED_FILE
        }));
    }
    keys.push(INVENTORY_FILE.to_owned());
    for key in &keys {
        let bytes = source.get(key)?.ok_or_else(|| Error::BadRecord {
            location: source.locate(key),
            what: "there any more: it vanished while it was copied".to_owned(),
            source: None,
        })?;
        target.put(key, &bytes)?;
    }
    let moved = root.join(MOVED_FILE);
    crate::home::write_atomic(&moved, format!("{bus_url}\n").as_bytes())?;
    Ok(Imported {
        home: root.display().to_string(),
        records: target.records().name(),
        keys,
    })
}

/// `records get`: the record at `key`, as its bytes.
///
/// # Errors
/// When there is no such record ("there is no record …", naming where it would be), or it
/// cannot be read.
pub fn get(home: &Home, key: &str) -> Result<Vec<u8>> {
    home.require()?;
    home.get(key)?.ok_or_else(|| crate::Error::Invalid {
        what: format!("there is no record {}", home.records().locate(key)),
        source: None,
    })
}

/// What `records put` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PutOutcome {
    /// The inventory is the file's now.
    Replaced,
    /// The inventory is no longer the `--base` the edit started from (another operator
    /// changed it): nothing was changed.
    BaseChanged,
}

/// `records put`: replaces the inventory with the file's (`-`: standard input) after reading
/// it as one; any other key is refused. Nothing is changed on an error.
///
/// With `base` (the inventory as it was read when the edit began, e.g. by `records get`), the
/// put is compare-and-set: it replaces the inventory only while it still holds exactly `base`,
/// so an edit never silently undoes another operator's change made since.
///
/// # Guarantees
/// The inventory is replaced in one write, never over a change made between this put's own
/// read and its write ([`RecordStore::compare_and_set`]); with `base`, never over any change
/// made since `base` was read.
///
/// # Errors
/// When the key is not the inventory, a file cannot be read, or it is not an inventory.
pub fn put_by_hand(home: &Home, key: &str, file: &Path, base: Option<&Path>) -> Result<PutOutcome> {
    home.require()?;
    if key != INVENTORY_FILE {
        return Err(Error::refused(format!(
            "only {INVENTORY_FILE} is replaced by hand; settings layers are changed with \
             `settings set`, and every other record is the controller's own; nothing was changed"
        )));
    }
    let read = |file: &Path| -> Result<String> {
        if file == Path::new("-") {
            std::io::read_to_string(std::io::stdin())
                .map_err(file_error("reading", "standard input"))
        } else {
            std::fs::read_to_string(file).map_err(file_error("reading", file))
        }
    };
    let text = read(file)?;
    toml::from_str::<mesh_model::inventory::InventoryFile>(&text).map_err(|source| {
        Error::Invalid {
            what: format!(
                "{} is not an inventory; nothing was changed",
                if file == Path::new("-") {
                    "standard input".to_owned()
                } else {
                    file.display().to_string()
                }
            ),
            source: Some(Box::new(source)),
        }
    })?;
    let base = base.map(read).transpose()?;
    let records = home.records();
    for _ in 0..crate::home::LAYER_TRIES {
        let (current, version) = match records.get_versioned(key)? {
            Some((bytes, version)) => (Some(bytes), Some(version)),
            None => (None, None),
        };
        if let Some(base) = &base {
            if current.as_deref() != Some(base.as_bytes()) {
                return Ok(PutOutcome::BaseChanged);
            }
        }
        match records.compare_and_set(key, version.as_ref(), Some(text.as_bytes()))? {
            Swap::Done => return Ok(PutOutcome::Replaced),
            // Changed between this read and the write: read it again (with a base, that
            // refuses).
            Swap::Stale => continue,
        }
    }
    Err(Error::refused(format!(
        "{} was changed by other writers {} times in a row; nothing was changed",
        records.locate(key),
        crate::home::LAYER_TRIES
    )))
}

/// How long a declaration no record names is kept after it was written, unless
/// [`collect_declarations`] is given another grace: a push writes a declaration before the
/// record naming it (`sent/<node>.json`), so a collection running between the two must not take
/// it.
pub(crate) const DECLARATION_GRACE: std::time::Duration = std::time::Duration::from_secs(10 * 60);

/// What `records collect` did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct DeclarationsCollected {
    /// The declarations removed: no record names them, and they are older than the grace.
    pub collected: mesh_store::chunked::Collected,
    /// Declarations kept because a record names them.
    pub named: u64,
    /// How many nodes' last sends named declarations.
    pub sent_nodes: u64,
    /// The open plans whose rollouts named declarations (what each node is sent, what it ran
    /// before, what it was sent back).
    pub open_plans: Vec<String>,
    /// The grace, in seconds.
    pub grace_secs: u64,
    /// The chunks of replaced records removed (on a fleet's bus, where a record over 60 KiB is
    /// kept in chunks).
    pub chunks: mesh_store::chunked::Collected,
    /// The plans that ended whose nodes' records were folded and removed, and the older plans
    /// removed ([`crate::plans::fold`]).
    pub plans: crate::plans::fold::Folded,
}

/// `records collect`: removes every declaration (`declarations/<hex>.json`, kept once by
/// digest) that no record names any more and that was written at least `grace` before `now`
/// (seconds since the epoch; the records' store dates what it holds), and the chunks of
/// replaced records no record names. Named are what each node was last sent
/// (`sent/<node>.json`) and, for every open plan, what each node of its rollouts is sent,
/// what it ran before (a revert sends it back) and what it was sent back.
///
/// # Guarantees
/// - Holds the plans lock while it runs: no rollout writes records meanwhile (it waits for one
///   under way to finish).
/// - A push writes a declaration before the record naming it; a declaration younger than
///   `grace` is kept whether named or not, so a push under way never loses its declaration.
/// - Nothing named is removed; a record that cannot be read stops the collection before
///   anything is removed.
///
/// # Errors
/// The home holds no mesh; a record cannot be read (nothing is removed) or a declaration cannot
/// be removed (those before it were).
pub fn collect_declarations(
    home: &Home,
    now: u64,
    grace: std::time::Duration,
) -> Result<DeclarationsCollected> {
    collect(home, now, grace, crate::plans::fold::KEEP_PLANS)
}

/// `records collect`: [`collect_declarations`], keeping the newest `keep_plans` plans whole.
///
/// # Errors
/// As [`collect_declarations`].
pub fn collect(
    home: &Home,
    now: u64,
    grace: std::time::Duration,
    keep_plans: usize,
) -> Result<DeclarationsCollected> {
    home.require()?;
    let _lock = crate::plans::PlansLock::acquire(home, "collecting records")?;
    collect_held(home, now, grace, keep_plans, &[])
}

/// [`collect_declarations`] with the plans lock held by the caller (the daemon's runtime),
/// keeping the newest `keep_plans` plans whole; the plans in `driving` (being driven now) are
/// not folded, their drives' own records being written.
///
/// First every plan that ended is folded ([`crate::plans::fold::fold_ended`]): its nodes'
/// records removed, what they named is no longer named. Then the declarations are removed
/// together ([`mesh_store::record_store::RecordStore::delete_many`]).
///
/// # Errors
/// As [`collect_declarations`].
pub(crate) fn collect_held(
    home: &Home,
    now: u64,
    grace: std::time::Duration,
    keep_plans: usize,
    driving: &[String],
) -> Result<DeclarationsCollected> {
    let plans = crate::plans::fold::fold_ended(home, keep_plans, driving)?;
    let mut named: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let sent = home.sent().digests()?;
    let sent_nodes = sent.len() as u64;
    named.extend(sent.into_values());
    let mut open_plans = Vec::new();
    for record in home.plans().all()? {
        if !record.plan.state.is_open() {
            continue;
        }
        for (module, work) in &record.work {
            named.extend(work.reverted.values().cloned());
            if let Some(rollout) = &work.rollout {
                named.extend(rollout.bus_first.iter().map(|bus| bus.declaration.clone()));
            }
            for node in home.plans().rollout_nodes(&record.plan.id, module)? {
                named.extend(Some(node.declaration).filter(|digest| !digest.is_empty()));
                named.extend(node.before);
            }
        }
        open_plans.push(record.plan.id.clone());
    }
    let grace_secs = grace.as_secs();
    let records = home.records();
    let mut collected = mesh_store::chunked::Collected::default();
    let mut kept = 0;
    let mut gone = Vec::new();
    for stat in records.stat_under("declarations")? {
        let Some(hex) = stat
            .key
            .strip_prefix("declarations/")
            .and_then(|name| name.strip_suffix(".json"))
        else {
            continue;
        };
        if named.contains(&format!("sha256:{hex}")) {
            kept += 1;
        } else if stat.written.saturating_add(grace_secs) > now {
            collected.young += 1;
        } else {
            gone.push(stat.key);
            collected.count += 1;
            collected.bytes += stat.size;
        }
    }
    home.check_lease()?;
    records.delete_many(&gone)?;
    let chunks = records.collect_leftovers(now, grace_secs)?;
    Ok(DeclarationsCollected {
        collected,
        named: kept,
        sent_nodes,
        open_plans,
        grace_secs,
        chunks,
        plans,
    })
}
