//! Merges make plans, and plans are driven: tier by tier, each module built, then rolled out one
//! machine first (rules 13–20, ADR 0218, issue 6).
//!
//! Start at [`merge`]: it reads the changed paths since the repository's last planned commit
//! from git, attributes them to modules (rule 17), supersedes older open plans of the same
//! repository and branch, folding in their unfinished modules (rule 16), orders the affected
//! modules in tiers and saves the plan. [`drive`] carries a plan out: [`crate::builds`] builds
//! each module of a tier; each module's rollout is the pure state machine
//! [`mesh_plan::rollout::step`], whose actions are carried out here against the in-process bus
//! with one host agent per node.
//!
//! # Layout
//! `<home>/plans/<id>.json`: a [`PlanRecord`] (ids `plan-1`, `plan-2`, … in the order plans are
//! made), rewritten after every step of a rollout so that a controller stopped mid-rollout
//! resumes where it was (`plans resume`, or the next `merge`). `<home>/plans/.lock` keeps two
//! controllers from planning or driving at once.
//!
//! # Guarantees
//! - A merge heard twice (same repository, branch and commit) makes one plan (rule 18).
//! - No node is sent a declaration before its grants were answered (in the embedded default the
//!   in-process bus has no permissions, so they are answered at once, in order).
//! - A plan that is not open (done, stopped, superseded, closed) is never driven again.

use crate::builds::{self, short_commit};
use crate::error::{bad_record, file_error, Context, Error, Result};
use crate::executor::Fleet;
use crate::home::Home;
use crate::repos::{self, RepoRecord};
use mesh_model::build::Build;
use mesh_model::module::CatalogueSource;
use mesh_model::plan::{Plan, PlanState, RolloutOutcome};
use mesh_plan::rollout::{BusFirst, NodeProgress, RolloutParts};
use mesh_store::store::ArchiveStore;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The format version of a plan record.
pub const PLAN_FORMAT: u32 = 2;

/// The format version of a node's record of a rollout.
pub const ROLLOUT_NODE_FORMAT: u32 = 1;

/// A plan as the controller keeps it (disk format, version [`PLAN_FORMAT`]): the plan itself
/// and the work behind it — builds, each rollout's policy and where it stands — so it can be
/// resumed. Each node's part of a rollout is a record of its own ([`RolloutNodeRecord`]), so
/// this one does not grow with the fleet.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PlanRecord {
    /// Format version.
    pub format: u32,
    /// The plan.
    pub plan: Plan,
    /// The commit the changed paths were read from (`None`: the repository's first merge,
    /// which plans every module).
    pub previous_commit: Option<String>,
    /// How many paths the merge changed.
    pub changed_paths: usize,
    /// Changed paths that belong to no one module (each meant every module).
    pub shared_paths: Vec<String>,
    /// Modules taken over from older plans this one superseded: module → that plan's id.
    pub folded: BTreeMap<String, String>,
    /// Per module, the work done for it.
    pub work: BTreeMap<String, ModuleWork>,
    /// Modules held back because a module they are built from stopped (and those that stopped).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub held: BTreeSet<String>,
    /// Modules this merge forgot (rule 22, seed issue 253): built from this repository and
    /// gone from its catalogue at the plan's commit. The mesh no longer holds them: they keep
    /// nothing, so the next sweep lets their archives go, and they are no longer deployed.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub forgotten: BTreeSet<String>,
}

/// The work behind one module of a plan.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ModuleWork {
    /// The build, once made.
    pub build: Option<Build>,
    /// Set when the build is byte-identical to the module's deployed build: not redeployed
    /// (rule 20).
    #[serde(default)]
    pub not_redeployed: bool,
    /// The rollout once begun: its policy, fixed then, and where it stands, without its nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutKept>,
    /// Nodes sent back what they ran before (`on-failure = "revert"`, the first node only):
    /// node → the digest of the declaration sent back.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reverted: BTreeMap<String, String>,
}

/// A module's rollout as its plan record keeps it: constant in size, whatever the fleet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RolloutKept {
    /// One node first, or every node together.
    pub upgrade: mesh_model::module::Upgrade,
    /// What a failed first node does.
    pub on_failure: mesh_model::module::OnFailure,
    /// Seconds a node has, from its send, to report.
    pub deadline_secs: u64,
    /// How many nodes after the first are in flight at once.
    pub max_parallel: Option<u32>,
    /// The node holding the bus, sent first, when the rollout changes the bus's users.
    pub bus_first: Option<BusFirst>,
    /// Where it stands, its nodes aside.
    pub state: RolloutParts,
}

/// One node's part of one module's rollout (disk format, version [`ROLLOUT_NODE_FORMAT`]), at
/// `rollouts/<plan>/<module>/<node>.json`: written when its progress changes, so a step of a
/// rollout writes a constant number of small records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RolloutNodeRecord {
    /// Format version.
    pub format: u32,
    /// The node.
    pub node: String,
    /// Whether it runs (only running nodes are sent to).
    pub running: bool,
    /// The digest of the declaration it is sent (its report must name it).
    pub declaration: String,
    /// The digest of what it had been sent before this rollout (a revert sends it back; kept
    /// under `declarations/`).
    pub before: Option<String>,
    /// Where it stands.
    pub progress: NodeProgress,
}

/// The record key of a node's part of a rollout.
pub fn rollout_node_key(plan: &str, module: &str, node: &str) -> String {
    format!("rollouts/{plan}/{module}/{node}.json")
}

impl Home {
    /// A plan by id, or an error naming the plans there are.
    ///
    /// # Errors
    /// No such plan; a record that cannot be read.
    pub fn plan(&self, id: &str) -> Result<PlanRecord> {
        let found = match plan_number(id) {
            Some(_) => self.read_plan(id)?,
            None => None,
        };
        match found {
            Some(record) => Ok(record),
            None => {
                let known: Vec<String> = self.plans()?.into_iter().map(|p| p.plan.id).collect();
                Err(Error::invalid(format!(
                    "there is no plan `{id}` (plans: {})",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                )))
            }
        }
    }

    /// Every plan, in the order they were made.
    ///
    /// # Errors
    /// A record that cannot be read.
    pub fn plans(&self) -> Result<Vec<PlanRecord>> {
        let mut found: Vec<(u64, String)> = self
            .json_stems("plans")?
            .into_iter()
            .filter_map(|id| Some((plan_number(&id)?, id)))
            .collect();
        found.sort();
        let mut plans = Vec::new();
        for (_, id) in found {
            plans.extend(self.read_plan(&id)?);
        }
        Ok(plans)
    }

    /// A plan record, migrated from format 1 (every node's rollout inside it) on first read,
    /// saying so.
    fn read_plan(&self, id: &str) -> Result<Option<PlanRecord>> {
        let key = plan_key(id);
        let Some(value) = self.get_json(&key)? else {
            return Ok(None);
        };
        if value.get("format").and_then(Value::as_u64) == Some(1) {
            let old: v1::PlanRecord = serde_json::from_value(value)
                .map_err(bad_record(self.records().locate(&key), "a plan record"))?;
            let record = v1::migrate(self, old)?;
            self.put_json(&key, &record)?;
            self.note_migration(format!(
                "{}: migrated from format 1 (each node's part of its rollouts is now a record of \
                 its own under rollouts/{id}/)",
                self.records().locate(&key)
            ));
            return Ok(Some(record));
        }
        self.read_record(&key, "a plan record", PLAN_FORMAT)
    }

    /// Writes a plan record — unless this controller's plans lease on the bus was taken over.
    ///
    /// # Errors
    /// The lease was taken over; the record cannot be written.
    pub fn write_plan(&self, record: &PlanRecord) -> Result<()> {
        self.check_lease()?;
        self.put_json(&plan_key(&record.plan.id), record)
    }

    /// Writes a node's part of a rollout — unless the plans lease was taken over.
    ///
    /// # Errors
    /// The lease was taken over; the record cannot be written.
    pub fn write_rollout_node(
        &self,
        plan: &str,
        module: &str,
        record: &RolloutNodeRecord,
    ) -> Result<()> {
        self.check_lease()?;
        self.put(
            &rollout_node_key(plan, module, &record.node),
            &serde_json::to_vec(record)?,
        )
    }

    /// Writes nodes' parts of a rollout, the lease checked once for them all — unless the
    /// plans lease was taken over.
    ///
    /// # Errors
    /// The lease was taken over (nothing is written); a record cannot be written.
    pub fn write_rollout_nodes<'r>(
        &self,
        plan: &str,
        module: &str,
        records: impl IntoIterator<Item = &'r RolloutNodeRecord>,
    ) -> Result<()> {
        self.check_lease()?;
        let mut batch = Vec::new();
        for record in records {
            batch.push((
                rollout_node_key(plan, module, &record.node),
                serde_json::to_vec(record)?,
            ));
        }
        self.put_many(&batch)
    }

    /// Every node's part of a module's rollout in a plan, by node name.
    ///
    /// # Errors
    /// A record that cannot be read.
    pub fn rollout_nodes(&self, plan: &str, module: &str) -> Result<Vec<RolloutNodeRecord>> {
        let dir = format!("rollouts/{plan}/{module}");
        let mut out = Vec::new();
        // One listing with the values, not a read per node.
        for (key, bytes) in self.records().values_under(&dir)? {
            if key.matches('/').count() != 3 || !key.ends_with(".json") {
                continue;
            }
            let location = self.records().locate(&key);
            let value: Value =
                serde_json::from_slice(&bytes).map_err(bad_record(location.clone(), "JSON"))?;
            match value.get("format").and_then(Value::as_u64) {
                Some(found) if found == u64::from(ROLLOUT_NODE_FORMAT) => {}
                found => {
                    return Err(Error::Format {
                        location,
                        found: found.map_or("none".to_owned(), |f| f.to_string()),
                        expected: ROLLOUT_NODE_FORMAT,
                    })
                }
            }
            out.push(
                serde_json::from_value::<RolloutNodeRecord>(value)
                    .map_err(bad_record(location, "a node's record of a rollout"))?,
            );
        }
        out.sort_by(|a, b| a.node.cmp(&b.node));
        Ok(out)
    }
}

/// Plan records of format 1, read to be migrated.
mod v1 {
    use super::{ModuleWork as Work, PlanRecord as Record, RolloutKept, RolloutNodeRecord};
    use crate::error::Result;
    use crate::home::Home;
    use mesh_model::build::Build;
    use mesh_model::declaration::Declaration;
    use mesh_model::plan::Plan;
    use mesh_plan::rollout::{NodeProgress, RolloutSpec, RolloutState};
    use serde::Deserialize;
    use std::collections::{BTreeMap, BTreeSet};

    #[derive(Deserialize)]
    #[serde(rename_all = "kebab-case")]
    pub(super) struct PlanRecord {
        plan: Plan,
        previous_commit: Option<String>,
        changed_paths: usize,
        shared_paths: Vec<String>,
        folded: BTreeMap<String, String>,
        work: BTreeMap<String, ModuleWork>,
        #[serde(default)]
        held: BTreeSet<String>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "kebab-case")]
    struct ModuleWork {
        build: Option<Build>,
        #[serde(default)]
        not_redeployed: bool,
        spec: Option<RolloutSpec>,
        state: Option<RolloutState>,
        #[serde(default)]
        before: BTreeMap<String, Declaration>,
        #[serde(default)]
        reverted: BTreeMap<String, String>,
    }

    /// The record in format 2, each node's part of each rollout written as its own record and
    /// what each node ran before kept by digest.
    pub(super) fn migrate(home: &Home, old: PlanRecord) -> Result<Record> {
        let mut work = BTreeMap::new();
        for (module, old_work) in old.work {
            let rollout = match (old_work.spec, old_work.state) {
                (Some(spec), Some(state)) => {
                    for (node, entry) in &spec.nodes {
                        let before = match old_work.before.get(node) {
                            Some(declaration) => Some(home.keep_declaration(declaration)?),
                            None => None,
                        };
                        let progress = state
                            .nodes
                            .get(node)
                            .cloned()
                            .unwrap_or(NodeProgress::Waiting);
                        home.write_rollout_node(
                            &old.plan.id,
                            &module,
                            &RolloutNodeRecord {
                                format: super::ROLLOUT_NODE_FORMAT,
                                node: node.clone(),
                                running: entry.running,
                                declaration: entry.declaration.clone(),
                                before,
                                progress,
                            },
                        )?;
                    }
                    Some(RolloutKept {
                        upgrade: spec.upgrade,
                        on_failure: spec.on_failure,
                        deadline_secs: spec.deadline_secs,
                        max_parallel: spec.max_parallel,
                        bus_first: spec.bus_first.clone(),
                        state: mesh_plan::rollout::RolloutParts {
                            sent: state
                                .nodes
                                .iter()
                                .filter(|(_, p)| {
                                    matches!(
                                        p,
                                        NodeProgress::Sent { .. } | NodeProgress::Applied { .. }
                                    )
                                })
                                .count(),
                            ..state.parts()
                        },
                    })
                }
                (Some(_), None) | (None, Some(_)) | (None, None) => None,
            };
            work.insert(
                module,
                Work {
                    build: old_work.build,
                    not_redeployed: old_work.not_redeployed,
                    rollout,
                    reverted: old_work.reverted,
                },
            );
        }
        let mut plan = old.plan;
        for rollout in plan.rollouts.values_mut() {
            rollout.sent = rollout.sends.len();
            rollout.sends.clear();
        }
        Ok(Record {
            format: super::PLAN_FORMAT,
            plan,
            previous_commit: old.previous_commit,
            changed_paths: old.changed_paths,
            shared_paths: old.shared_paths,
            folded: old.folded,
            work,
            held: old.held,
            forgotten: BTreeSet::new(),
        })
    }
}

fn plan_key(id: &str) -> String {
    format!("plans/{id}.json")
}

fn plan_number(id: &str) -> Option<u64> {
    id.strip_prefix("plan-")?.parse().ok()
}

/// An exclusive lock on the mesh's plans, held while planning or driving: a `flock` on
/// `<home>/plans/.lock` when the records are the home's, a lease in the records on the bus
/// (`mesh_store::lease`) when they are the bus's, so that controllers on two machines exclude
/// each other too.
pub struct PlansLock {
    /// The home's lock file, held.
    _file: Option<std::fs::File>,
    /// The bus's lease, held.
    _lease: Option<mesh_store::lease::Lease>,
}

impl PlansLock {
    /// Takes the lock for `doing` (said to whoever waits for it), waiting while another
    /// controller holds it.
    ///
    /// # Errors
    /// When the lock file cannot be made or locked, or the lease cannot be read or written.
    pub fn acquire(home: &Home, doing: &str) -> Result<PlansLock> {
        if home.records_on_bus() {
            let lease =
                mesh_store::lease::Lease::acquire(home.records_shared(), doing, home.lease_slot())?;
            return Ok(PlansLock {
                _file: None,
                _lease: Some(lease),
            });
        }
        let dir = home.root().join("plans");
        std::fs::create_dir_all(&dir).map_err(file_error("creating", &dir))?;
        let path = dir.join(".lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(file_error("opening", &path))?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|errno| file_error("locking", &path)(errno.into()))?;
        Ok(PlansLock {
            _file: Some(file),
            _lease: None,
        })
    }
}

/// The controller's context for plan work.
pub struct Ctx<'a> {
    /// The mesh home.
    pub home: &'a Home,
    /// The archive store.
    pub store: &'a dyn ArchiveStore,
    /// Where progress goes.
    pub progress: &'a dyn crate::Progress,
    /// A fleet's bus: rollouts go to its real hosts (`None`: the embedded default, one host
    /// agent per node in this process).
    pub bus: Option<crate::fleet::BusArgs>,
    /// Modules whose running containers' data may move (`--move MODULE`): their held nodes are
    /// sent (rule 12). Empty: every move is held.
    pub moves: BTreeSet<String>,
    /// A fleet the caller brings (a Rust tool's own hosts, a simulation): every rollout sends
    /// through it. `None`: the bus's real hosts when `bus` is named, else one host agent per
    /// node in this process.
    pub fleet: Option<GivenFleet>,
}

/// What hearing a merge did.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum MergeOutcome {
    /// A plan was already made for this repository, branch and commit; none was made.
    AlreadyPlanned {
        /// That plan.
        plan: Plan,
    },
    /// A plan was made (and, unless asked not to, driven).
    Planned {
        /// The plan as it stands.
        plan: Plan,
        /// Older plans it superseded.
        superseded: Vec<String>,
        /// Modules it forgot: gone from the repository's catalogue at this commit, so they
        /// keep nothing in the store from now on.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        forgotten: Vec<String>,
    },
}

/// Hears a merge to a registered repository: makes its plan and, unless `plan_only`, drives it
/// and then any other open plan.
///
/// # Errors
/// When git cannot be read, the affected modules depend on each other in a cycle (named), or a
/// plan cannot be saved; a failed build or rollout is not an error but a stopped plan.
pub async fn merge(
    ctx: &Ctx<'_>,
    name: &str,
    commit: Option<&str>,
    plan_only: bool,
) -> Result<MergeOutcome> {
    let home = ctx.home;
    let mut repo = home.repo(name)?;
    let commit = repos::resolve(&repo.path, commit.unwrap_or(&repo.branch))
        .for_repo(name, || format!("repository `{name}`"))?;
    let _lock = PlansLock::acquire(home, &format!("merge {name}"))?;
    let plans = home.plans()?;
    if let Some(existing) = plans.iter().find(|p| {
        p.plan.repository == repo.name && p.plan.branch == repo.branch && p.plan.commit == commit
    }) {
        return Ok(MergeOutcome::AlreadyPlanned {
            plan: existing.plan.clone(),
        });
    }
    let (mut record, superseded) = make_plan(ctx, &repo, &commit, &plans)?;
    // A merge of this repository the daemon could not plan is resolved by this one.
    home.clear_problem(mesh_store::problems::ProblemKind::Merge, &repo.name)?;
    repo.last_planned = Some(commit.clone());
    home.write_repo(&repo)?;
    if !plan_only {
        drive(ctx, &mut record, DriveMode::All).await?;
        for mut other in home.plans()? {
            if other.plan.id != record.plan.id && other.plan.state.is_open() {
                ctx.progress
                    .line(&format!("resuming the open plan {}", other.plan.id));
                drive(ctx, &mut other, DriveMode::All).await?;
            }
        }
    }
    Ok(MergeOutcome::Planned {
        plan: record.plan,
        superseded,
        forgotten: record.forgotten.into_iter().collect(),
    })
}

/// Makes and saves the plan for `commit`, superseding older open plans of the same repository
/// and branch (saved too); returns it with the ids of the plans it superseded.
fn make_plan(
    ctx: &Ctx<'_>,
    repo: &RepoRecord,
    commit: &str,
    plans: &[PlanRecord],
) -> Result<(PlanRecord, Vec<String>)> {
    let home = ctx.home;
    let source = repos::catalogue_at(&repo.path, commit, &repo.modules_dir)
        .for_repo(&repo.name, || {
            format!("reading `{}` at {}", repo.name, short_commit(commit))
        })?;
    let repository_modules: BTreeSet<String> = source.modules.keys().cloned().collect();
    // The commit changes are read from: the newest plan's for this repository and branch (so a
    // controller stopped between saving a plan and its repository record loses nothing).
    let kept: Vec<Plan> = plans.iter().map(|p| p.plan.clone()).collect();
    let last_planned = mesh_plan::merge::previous_commit(&kept, &repo.name, &repo.branch)
        .or_else(|| repo.last_planned.clone());
    let (changed, changed_paths, shared_paths) = match &last_planned {
        None => (repository_modules.clone(), 0, Vec::new()),
        Some(last) => {
            let paths =
                repos::changed_paths(&repo.path, last, commit).for_repo(&repo.name, || {
                    format!(
                        "reading what `{}` changed from {} to {}",
                        repo.name,
                        short_commit(last),
                        short_commit(commit)
                    )
                })?;
            let known = module_dirs_at(repo, last)?;
            let attribution = mesh_plan::attribute(&paths, &repo.modules_dir, &known);
            (
                attribution.changed_modules(&repository_modules),
                paths.len(),
                attribution.shared.clone(),
            )
        }
    };
    let id = format!(
        "plan-{}",
        plans
            .iter()
            .filter_map(|p| plan_number(&p.plan.id))
            .max()
            .unwrap_or(0)
            + 1
    );
    let mut plan = Plan {
        id: id.clone(),
        repository: repo.name.clone(),
        branch: repo.branch.clone(),
        commit: commit.to_owned(),
        // Supersede orders plans by when they were made, a tie (two in one second) by number.
        made_at: mesh_host::now(),
        modules: changed.iter().cloned().collect(),
        tiers: Vec::new(),
        rollouts: BTreeMap::new(),
        state: PlanState::Building,
    };
    let supersession = mesh_plan::supersede(&plan, &kept);
    let mut folded = BTreeMap::new();
    for older in &supersession.superseded {
        for module in older.unbuilt.iter().chain(&older.unsent) {
            if !changed.contains(module) {
                folded
                    .entry(module.clone())
                    .or_insert_with(|| older.id.clone());
            }
        }
    }
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    for module in &supersession.modules {
        if repository_modules.contains(module) {
            wanted.insert(module.clone());
        } else {
            ctx.progress.line(&format!(
                "{id}: `{module}` (from {}) is no longer in `{}` at {}: not planned",
                folded.get(module).map_or("this merge", String::as_str),
                repo.name,
                short_commit(commit)
            ));
            folded.remove(module);
        }
    }
    let graph = lenient_dependency_graph(&source);
    let tiers = mesh_plan::tiers(&graph, &wanted).map_err(|error| {
        Error::refused(format!(
            "`{}` at {}: {error}; no plan was made",
            repo.name,
            short_commit(commit)
        ))
    })?;
    let affected: BTreeSet<String> = tiers.tiers.iter().flatten().cloned().collect();
    plan.modules = affected.into_iter().collect();
    plan.tiers = tiers.tiers;
    if plan.modules.is_empty() {
        plan.state = PlanState::Done;
    }
    let record = PlanRecord {
        format: PLAN_FORMAT,
        work: plan
            .modules
            .iter()
            .map(|m| (m.clone(), ModuleWork::default()))
            .collect(),
        plan,
        previous_commit: last_planned,
        changed_paths,
        shared_paths,
        folded,
        held: BTreeSet::new(),
        forgotten: BTreeSet::new(),
    };
    for older in &supersession.superseded {
        let mut older_record = plans
            .iter()
            .find(|p| p.plan.id == older.id)
            .cloned()
            .ok_or_else(|| {
                Error::internal(format!(
                    "the superseded plan {} is not among the plans",
                    older.id
                ))
            })?;
        older_record.plan.state = older.state.clone();
        home.write_plan(&older_record)?;
        ctx.progress.line(&format!(
            "{}: superseded by {id} (it had not built: {}; not rolled out: {})",
            older.id,
            list_or_none(&older.unbuilt),
            list_or_none(&older.unsent)
        ));
    }
    let mut record = record;
    record.forgotten = forget_removed_modules(home, &repo.name, &repository_modules)?;
    home.write_plan(&record)?;
    crate::fail::point("plan-saved");
    for module in &record.forgotten {
        ctx.progress.line(&format!(
            "{id}: `{module}` is no longer in `{}` at {}: forgotten, it keeps nothing in the \
             store (the next sweep lets its archives go)",
            repo.name,
            short_commit(commit)
        ));
    }
    ctx.progress.line(&format!(
        "{id}: `{}` {} at {}: {} module(s) in {} tier(s){}",
        repo.name,
        repo.branch,
        short_commit(commit),
        record.plan.modules.len(),
        record.plan.tiers.len(),
        match &record.previous_commit {
            None => " (the first merge plans every module)".to_owned(),
            Some(previous) => format!(
                " ({} path(s) changed since {})",
                record.changed_paths,
                short_commit(previous)
            ),
        }
    ));
    for (index, tier) in record.plan.tiers.iter().enumerate() {
        ctx.progress
            .line(&format!("  tier {index}: {}", tier.join(", ")));
    }
    let superseded = supersession
        .superseded
        .iter()
        .map(|older| older.id.clone())
        .collect();
    Ok((record, superseded))
}

/// Forgets every module the mesh holds that was built from `repository` and is not among its
/// modules now (its directory was deleted): it keeps nothing from the next sweep on, and its
/// deployed record goes (nothing composes from an archive the sweep will let go). Returns them.
///
/// A module built from another repository is left alone.
///
/// # Errors
/// When the module records cannot be read or written.
fn forget_removed_modules(
    home: &Home,
    repository: &str,
    modules_now: &BTreeSet<String>,
) -> Result<BTreeSet<String>> {
    let mut forgotten = BTreeSet::new();
    for record in mesh_store::records::read_module_records(home.records())
        .for_repo(repository, || {
            "reading what the mesh holds (the store's module records)".to_owned()
        })?
    {
        let from_here = record
            .builds
            .last()
            .is_some_and(|build| build.repository == repository);
        if !record.held || !from_here || modules_now.contains(&record.module) {
            continue;
        }
        mesh_store::records::forget_module(home.records(), &record.module)
            .for_module(&record.module, || format!("forgetting `{}`", record.module))?;
        home.records()
            .delete(&format!("deployed/{}.json", record.module))?;
        forgotten.insert(record.module);
    }
    Ok(forgotten)
}

fn list_or_none(modules: &[String]) -> String {
    if modules.is_empty() {
        "none".to_owned()
    } else {
        modules.join(", ")
    }
}

/// The module directories of a repository at a commit.
fn module_dirs_at(repo: &RepoRecord, commit: &str) -> Result<BTreeSet<String>> {
    let dir = repo.modules_dir.trim_end_matches('/');
    let out = repos::git(
        &repo.path,
        &[
            "ls-tree",
            "-d",
            "-z",
            "--name-only",
            "--full-tree",
            commit,
            "--",
            &format!("{dir}/"),
        ],
    )?;
    Ok(out
        .split(|b| *b == 0)
        .filter_map(|p| std::str::from_utf8(p).ok())
        .filter_map(|p| p.strip_prefix(&format!("{dir}/")).map(str::to_owned))
        .filter(|p| !p.is_empty())
        .collect())
}

/// Each module directory's `depends`, read leniently from its definition (a module that does
/// not validate is still planned, and fails its build naming its problems).
fn lenient_dependency_graph(source: &CatalogueSource) -> BTreeMap<String, Vec<String>> {
    source
        .modules
        .iter()
        .map(|(name, tree)| {
            let depends = tree
                .file(mesh_model::module::DEFINITION_FILE)
                .and_then(|bytes| std::str::from_utf8(bytes).ok())
                .and_then(|text| text.parse::<toml::Table>().ok())
                .and_then(|table| table.get("depends").cloned())
                .and_then(|value| value.as_array().cloned())
                .map(|values| {
                    values
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            (name.clone(), depends)
        })
        .collect()
}

/// What driving a plan does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriveMode {
    /// Build and roll out, tier by tier.
    All,
    /// Only build what is not built (`build --behind`).
    BuildOnly,
    /// Only roll out what is built, tier by tier, up to the first module not built
    /// (`push --behind`).
    RolloutOnly,
}

/// A fleet a caller gives the plans to drive through ([`Ctx::fleet`]).
pub type GivenFleet = std::sync::Arc<tokio::sync::Mutex<Box<dyn Fleet>>>;

/// The fleet of `ctx` when it brings none: over its bus when one is named, else in process.
///
/// # Errors
/// The bus cannot be reached; the store cannot be named to the in-process hosts.
pub async fn start_fleet(ctx: &Ctx<'_>) -> Result<Box<dyn Fleet>> {
    Ok(match &ctx.bus {
        Some(bus) => Box::new(
            crate::fleet::NatsFleet::start(ctx.home, bus, &builds::store_spec(ctx.store)?).await?,
        ),
        None => Box::new(
            crate::in_process::InProcessFleet::start(builds::store_spec(ctx.store)?).await?,
        ),
    })
}

/// Carries a plan out as far as `mode` says, saving it after every step. A plan that is not
/// open is left as it is.
///
/// # Errors
/// When the home, the store or the bus fails; a failed build or a stopped rollout is recorded
/// in the plan (state `stopped`), not returned as an error.
pub async fn drive(ctx: &Ctx<'_>, record: &mut PlanRecord, mode: DriveMode) -> Result<()> {
    if !record.plan.state.is_open() {
        return Ok(());
    }
    let home = ctx.home;
    let id = record.plan.id.clone();
    let mut source: Option<CatalogueSource> = None;
    let mut own_fleet: Option<Box<dyn Fleet>> = None;
    let mut given_fleet = None;
    // Modules that stopped, and every module of the plan built from one: not built, not rolled
    // out. The others go on.
    let mut blocked: BTreeSet<String> = BTreeSet::new();
    if record
        .plan
        .rollouts
        .values()
        .any(|r| matches!(r.outcome, Some(RolloutOutcome::Stopped { .. })))
    {
        hold(ctx, record, &mut source, &mut blocked)?;
    }
    let tiers = record.plan.tiers.clone();
    for (index, tier) in tiers.iter().enumerate() {
        if mode != DriveMode::RolloutOnly {
            for module in tier {
                if blocked.contains(module)
                    || record.work[module].build.is_some()
                    || outcome_of(record, module).is_some()
                {
                    continue;
                }
                let catalogue = match &source {
                    Some(source) => source,
                    None => source.insert(plan_source(home, record)?),
                };
                record.plan.state = PlanState::Building;
                home.write_plan(record)?;
                let built = builds::build_module(
                    home,
                    ctx.store,
                    &builds::BuildSource {
                        repository: &record.plan.repository,
                        commit: &record.plan.commit,
                        source: catalogue,
                    },
                    module,
                    mesh_host::now(),
                    false,
                )
                .await;
                match built {
                    Ok(built) => {
                        let identical = record_built(home, record, &built.build)?;
                        ctx.progress.line(&format!(
                            "{id} tier {index}: built `{module}` {} ({} bytes){}",
                            mesh_host::short(&built.build.archive.digest),
                            built.build.archive.size,
                            if identical {
                                ", byte-identical to its deployed build: not redeployed"
                            } else {
                                ""
                            }
                        ));
                        home.write_plan(record)?;
                        crate::fail::point(&format!("built:{module}"));
                    }
                    Err(error) => {
                        let reason = error.chain_line();
                        ctx.progress.line(&format!(
                            "{id} tier {index}: the build of `{module}` failed: {reason}"
                        ));
                        record
                            .plan
                            .rollouts
                            .entry(module.clone())
                            .or_default()
                            .outcome = Some(RolloutOutcome::Stopped {
                            node: String::new(),
                            reason: format!("the build failed: {reason}"),
                        });
                        home.write_plan(record)?;
                        hold(ctx, record, &mut source, &mut blocked)?;
                    }
                }
            }
        }
        if mode == DriveMode::BuildOnly {
            continue;
        }
        for module in tier {
            if blocked.contains(module) || outcome_of(record, module).is_some() {
                continue;
            }
            if record.work[module].build.is_none() {
                ctx.progress.line(&format!(
                    "{id} tier {index}: `{module}` is not built yet; `build --behind` builds it"
                ));
                return end_drive(record, home, &blocked);
            }
            let fleet: &mut dyn Fleet = match &ctx.fleet {
                Some(given) => {
                    if given_fleet.is_none() {
                        given_fleet = Some(given.lock().await);
                    }
                    given_fleet
                        .as_mut()
                        .ok_or_else(|| Error::internal("the given fleet was not locked"))?
                        .as_mut()
                }
                None => {
                    if own_fleet.is_none() {
                        own_fleet = Some(start_fleet(ctx).await?);
                    }
                    own_fleet
                        .as_mut()
                        .ok_or_else(|| Error::internal("the fleet was not started"))?
                        .as_mut()
                }
            };
            record.plan.state = PlanState::RollingOut;
            home.write_plan(record)?;
            ctx.progress
                .line(&format!("{id} tier {index}: rolling out `{module}`"));
            crate::executor::roll_out(ctx, fleet, record, module)
                .await
                .for_plan(&id, || format!("{id}: rolling out `{module}`"))?;
            if let Some(RolloutOutcome::Stopped { .. }) = outcome_of(record, module) {
                hold(ctx, record, &mut source, &mut blocked)?;
            }
        }
    }
    end_drive(record, home, &blocked)
}

/// Ends a drive: the plan is done, or stopped, when nothing is left to do
/// ([`mesh_plan::merge::plan_end`]); otherwise it stays open, rolling out once everything not
/// held back is built.
fn end_drive(record: &mut PlanRecord, home: &Home, held: &BTreeSet<String>) -> Result<()> {
    record.held = held.clone();
    match mesh_plan::merge::plan_end(&record.plan, held) {
        Some(state) => record.plan.state = state,
        None => {
            let all_built = record
                .plan
                .modules
                .iter()
                .filter(|m| !held.contains(*m))
                .all(|m| record.work[m].build.is_some());
            if all_built {
                record.plan.state = PlanState::RollingOut;
            }
        }
    }
    home.write_plan(record)
}

fn plan_source(home: &Home, record: &PlanRecord) -> Result<CatalogueSource> {
    let repo = home.repo(&record.plan.repository)?;
    repos::catalogue_at(&repo.path, &record.plan.commit, &repo.modules_dir).for_repo(
        &repo.name,
        || {
            format!(
                "reading `{}` at {}",
                repo.name,
                short_commit(&record.plan.commit)
            )
        },
    )
}

/// Recomputes what the plan's stopped modules hold back ([`mesh_plan::merge::held_back`]),
/// saying which modules are newly held and from what.
fn hold(
    ctx: &Ctx<'_>,
    record: &PlanRecord,
    source: &mut Option<CatalogueSource>,
    held: &mut BTreeSet<String>,
) -> Result<()> {
    let source = match source {
        Some(source) => source,
        None => source.insert(plan_source(ctx.home, record)?),
    };
    let graph = lenient_dependency_graph(source);
    let now_held = mesh_plan::merge::held_back(&record.plan, &graph);
    for module in now_held.difference(held) {
        if outcome_of(record, module).is_some() {
            continue;
        }
        let from = graph
            .get(module)
            .and_then(|deps| deps.iter().find(|d| now_held.contains(*d)))
            .map_or("a module", String::as_str);
        ctx.progress.line(&format!(
            "{}: `{module}` is built from `{from}`, which stopped: left as it is",
            record.plan.id
        ));
    }
    *held = now_held;
    Ok(())
}

/// Records a module's build in a plan; a build byte-identical to the module's deployed one is
/// not redeployed (rule 20): its rollout is done as it is. Returns whether it was identical.
fn record_built(home: &Home, record: &mut PlanRecord, build: &Build) -> Result<bool> {
    let module = &build.module;
    let identical = home
        .deployed(module)?
        .is_some_and(|d| d.archive == build.archive);
    let rollout = record.plan.rollouts.entry(module.clone()).or_default();
    rollout.build = Some(build.archive.clone());
    if identical {
        rollout.outcome = Some(RolloutOutcome::Done);
    }
    let work = record.work.entry(module.clone()).or_default();
    work.build = Some(build.clone());
    work.not_redeployed = identical;
    Ok(identical)
}

fn outcome_of<'r>(record: &'r PlanRecord, module: &str) -> Option<&'r RolloutOutcome> {
    record
        .plan
        .rollouts
        .get(module)
        .and_then(|r| r.outcome.as_ref())
}

/// Closes an open plan by hand; it is never resumed.
///
/// # Errors
/// When there is no such plan, or it is not open.
pub fn close(home: &Home, id: &str, note: &str) -> Result<PlanRecord> {
    let _lock = PlansLock::acquire(home, &format!("plans close {id}"))?;
    let mut record = home.plan(id)?;
    record.plan.state = mesh_plan::close(&record.plan, note)?;
    home.write_plan(&record)?;
    Ok(record)
}

/// Drives every open plan (or the one named) as far as `mode` says.
///
/// # Errors
/// As [`drive`]; naming a plan that is not open is an error.
pub async fn drive_open(ctx: &Ctx<'_>, only: Option<&str>, mode: DriveMode) -> Result<Vec<Plan>> {
    let _lock = PlansLock::acquire(ctx.home, "driving the open plans")?;
    let mut out = Vec::new();
    if let Some(id) = only {
        let record = ctx.home.plan(id)?;
        if !record.plan.state.is_open() {
            return Err(Error::refused(format!(
                "plan `{id}` is not open (it is {}); a plan that ended is never resumed",
                mesh_plan::plans::state_word(&record.plan.state)
            )));
        }
    }
    for mut record in ctx.home.plans()? {
        if !record.plan.state.is_open() || only.is_some_and(|id| id != record.plan.id) {
            continue;
        }
        drive(ctx, &mut record, mode).await?;
        out.push(record.plan);
    }
    Ok(out)
}

/// One module built by `build MODULE...`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct NamedBuild {
    /// The build (a dry run's is never recorded).
    pub build: Build,
    /// The open plan it was built for, if one named the module.
    pub plan: Option<String>,
}

/// Builds the named modules: each at the commit of the newest open plan that names it (and for
/// that plan), else at its repository's last planned commit (else the branch head). A dry run
/// archives and answers the digest only: nothing is published, recorded or planned (rule 18).
///
/// # Errors
/// A module no registered repository holds, or one that does not validate, naming it.
pub async fn build_named(
    ctx: &Ctx<'_>,
    modules: &[String],
    dry_run: bool,
) -> Result<Vec<NamedBuild>> {
    let home = ctx.home;
    let _lock = PlansLock::acquire(home, &format!("build {}", modules.join(" ")))?;
    let mut out = Vec::new();
    for module in modules {
        let mut plans = home.plans()?;
        let plan = plans
            .iter_mut()
            .rev()
            .find(|p| p.plan.state.is_open() && p.plan.modules.contains(module));
        let (repo, commit) = match &plan {
            Some(plan) => (home.repo(&plan.plan.repository)?, plan.plan.commit.clone()),
            None => {
                let mut found = None;
                for repo in home.repos()? {
                    let commit = match &repo.last_planned {
                        Some(commit) => commit.clone(),
                        None => repos::resolve(&repo.path, &repo.branch)?,
                    };
                    if module_dirs_at(&repo, &commit)?.contains(module) {
                        found = Some((repo, commit));
                        break;
                    }
                }
                found.ok_or_else(|| {
                    Error::invalid(format!(
                        "no registered repository holds a module `{module}`"
                    ))
                })?
            }
        };
        let source = repos::catalogue_at(&repo.path, &commit, &repo.modules_dir)?;
        let built = builds::build_module(
            home,
            ctx.store,
            &builds::BuildSource {
                repository: &repo.name,
                commit: &commit,
                source: &source,
            },
            module,
            mesh_host::now(),
            dry_run,
        )
        .await?;
        let plan_id = plan.as_ref().map(|p| p.plan.id.clone());
        if let (Some(plan), false) = (plan, dry_run) {
            if outcome_of(plan, module).is_none() {
                record_built(home, plan, &built.build)?;
                home.write_plan(plan)?;
            }
        }
        out.push(NamedBuild {
            build: built.build,
            plan: plan_id,
        });
    }
    Ok(out)
}
