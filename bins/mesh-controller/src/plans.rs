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

use crate::builds::{self, short_commit, DeployedRecord};
use crate::home::Home;
use crate::repos::{self, RepoRecord};
use anyhow::{bail, Context, Result};
use mesh_apply::HostConfig;
use mesh_bus::{subjects, Bus, InProcessBus, Subscription};
use mesh_model::build::Build;
use mesh_model::declaration::Declaration;
use mesh_model::inventory::Inventory;
use mesh_model::module::{load_catalogue, Catalogue, CatalogueSource, ModuleDefinition};
use mesh_model::plan::{ModuleRollout, Plan, PlanState, RolloutOutcome};
use mesh_model::report::{MachineState, Report};
use mesh_plan::rollout::{
    step, Action, BusFirst, Event, NodeProgress, RolloutNode, RolloutSpec, RolloutState, Stage,
    Verdict,
};
use mesh_store::store::ArchiveStore;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// The format version of a plan record.
pub const PLAN_FORMAT: u32 = 1;

/// A plan as the controller keeps it (disk format, version [`PLAN_FORMAT`]): the plan itself
/// and the work behind it — builds, rollout specs and states — so it can be resumed.
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
    /// The rollout's spec, fixed when it begins.
    pub spec: Option<RolloutSpec>,
    /// The rollout's state, after its latest step.
    pub state: Option<RolloutState>,
    /// What each node had been sent before this rollout (a revert sends it back).
    #[serde(default)]
    pub before: BTreeMap<String, Declaration>,
    /// Nodes sent back what they ran before (`on-failure = "revert"`): node → the digest of
    /// the declaration sent back.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reverted: BTreeMap<String, String>,
}

impl Home {
    /// A plan by id, or an error naming the plans there are.
    pub fn plan(&self, id: &str) -> Result<PlanRecord> {
        let found = match plan_number(id) {
            Some(_) => self.read_record(&plan_key(id), "a plan record", PLAN_FORMAT)?,
            None => None,
        };
        match found {
            Some(record) => Ok(record),
            None => {
                let known: Vec<String> = self.plans()?.into_iter().map(|p| p.plan.id).collect();
                bail!(
                    "there is no plan `{id}` (plans: {})",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                );
            }
        }
    }

    /// Every plan, in the order they were made.
    pub fn plans(&self) -> Result<Vec<PlanRecord>> {
        let mut found: Vec<(u64, String)> = self
            .json_stems("plans")?
            .into_iter()
            .filter_map(|id| Some((plan_number(&id)?, id)))
            .collect();
        found.sort();
        let mut plans = Vec::new();
        for (_, id) in found {
            plans.extend(self.read_record(&plan_key(&id), "a plan record", PLAN_FORMAT)?);
        }
        Ok(plans)
    }

    /// Writes a plan record — unless this controller's plans lease on the bus was taken over.
    pub fn write_plan(&self, record: &PlanRecord) -> Result<()> {
        self.check_lease()?;
        self.put_json(&plan_key(&record.plan.id), record)
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
                mesh_store::lease::Lease::acquire(home.records_shared(), doing, home.lease_slot())
                    .context("taking the plans lock on the bus")?;
            return Ok(PlansLock {
                _file: None,
                _lease: Some(lease),
            });
        }
        let dir = home.root().join("plans");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(".lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .with_context(|| format!("locking {}", path.display()))?;
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
        .with_context(|| format!("repository `{name}`"))?;
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
        .with_context(|| format!("reading `{}` at {}", repo.name, short_commit(commit)))?;
    let repository_modules: BTreeSet<String> = source.modules.keys().cloned().collect();
    // The commit changes are read from: the newest plan's for this repository and branch (so a
    // controller stopped between saving a plan and its repository record loses nothing).
    let kept: Vec<Plan> = plans.iter().map(|p| p.plan.clone()).collect();
    let last_planned = mesh_plan::merge::previous_commit(&kept, &repo.name, &repo.branch)
        .or_else(|| repo.last_planned.clone());
    let (changed, changed_paths, shared_paths) = match &last_planned {
        None => (repository_modules.clone(), 0, Vec::new()),
        Some(last) => {
            let paths = repos::changed_paths(&repo.path, last, commit).with_context(|| {
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
        // Strictly after every plan made before it: supersede orders plans by `made_at`, and
        // two made within one second would otherwise tie.
        made_at: plans
            .iter()
            .map(|p| p.plan.made_at + 1)
            .max()
            .unwrap_or(0)
            .max(mesh_host::now()),
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
        anyhow::anyhow!(
            "`{}` at {}: {error}; no plan was made",
            repo.name,
            short_commit(commit)
        )
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
    };
    for older in &supersession.superseded {
        let mut older_record = plans
            .iter()
            .find(|p| p.plan.id == older.id)
            .cloned()
            .context("a superseded plan is among the plans")?;
        older_record.plan.state = older.state.clone();
        home.write_plan(&older_record)?;
        ctx.progress.line(&format!(
            "{}: superseded by {id} (it had not built: {}; not rolled out: {})",
            older.id,
            list_or_none(&older.unbuilt),
            list_or_none(&older.unsent)
        ));
    }
    home.write_plan(&record)?;
    crate::fail::point("plan-saved");
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

/// The hosts a rollout's actions go to: the seam between the state machine's decisions and
/// the machines. Two of them: [`InProcessFleet`] (the embedded default: one host agent per node
/// in this process, on the in-process bus) and [`crate::fleet::RolloutBus`] (a fleet's real
/// hosts over NATS, with real grants).
enum Fleet {
    /// The embedded default.
    InProcess(InProcessFleet),
    /// A fleet's bus.
    Nats(Box<crate::fleet::RolloutBus>),
}

impl Fleet {
    /// The fleet of `ctx`: over its bus when one is named, else in process.
    async fn start(ctx: &Ctx<'_>) -> Result<Fleet> {
        Ok(match &ctx.bus {
            Some(bus) => Fleet::Nats(Box::new(
                crate::fleet::RolloutBus::start(ctx.home, bus).await?,
            )),
            None => Fleet::InProcess(
                InProcessFleet::start(ctx.home, &ctx.home.inventory()?, ctx.store).await?,
            ),
        })
    }

    /// Fixes what one module's rollout needs of the fleet (over NATS: the bus's users).
    fn prepare(&mut self, home: &Home, catalogue: &Catalogue, inventory: &Inventory) -> Result<()> {
        match self {
            Fleet::InProcess(_) => Ok(()),
            Fleet::Nats(bus) => bus.prepare(home, catalogue, inventory),
        }
    }

    /// Why the rollout changes the bus's users, when it does, so that the node holding the bus
    /// goes first (rule 13). In process: the module's grants changed; over NATS: the users
    /// composed differ from the ones the bus last confirmed.
    fn users_change(
        &self,
        home: &Home,
        old: Option<&ModuleDefinition>,
        new: &ModuleDefinition,
    ) -> Option<&'static str> {
        match self {
            Fleet::InProcess(_) => mesh_plan::merge::changes_bus_users(old, new)
                .then_some("its grants change the bus's users"),
            Fleet::Nats(bus) => bus
                .users_change(home)
                .then_some("the bus's users differ from the ones it confirmed"),
        }
    }

    /// The node holding the bus and the users file every declaration sent to it carries.
    fn users_file(&self) -> Option<(String, String)> {
        match self {
            Fleet::InProcess(_) => None,
            Fleet::Nats(bus) => bus.users_file(),
        }
    }

    /// Issues the grants of `nodes`, as the event that answers [`Action::IssueGrants`].
    async fn issue_grants(
        &mut self,
        ctx: &Ctx<'_>,
        module: &str,
        nodes: Vec<String>,
    ) -> Result<Event> {
        let answer = match self {
            Fleet::InProcess(_) => Ok("the in-process bus has no permissions to issue".to_owned()),
            Fleet::Nats(bus) => bus.issue_grants(ctx.home, &nodes).await?,
        };
        Ok(match answer {
            Ok(note) => {
                ctx.progress.line(&format!(
                    "  `{module}`: grants for {} ({note})",
                    nodes.join(", ")
                ));
                Event::GrantsIssued { nodes }
            }
            Err(reason) => Event::GrantsFailed { nodes, reason },
        })
    }

    async fn send(&mut self, home: &Home, declaration: &Declaration) -> Result<()> {
        match self {
            Fleet::InProcess(fleet) => fleet.send(home, declaration).await,
            Fleet::Nats(bus) => bus.send(home, declaration).await,
        }
    }

    /// The next report heard within `wait`, recorded in the home.
    async fn next_report(&mut self, home: &Home, wait: Duration) -> Result<Option<Report>> {
        match self {
            Fleet::InProcess(fleet) => fleet.next_report(home, wait).await,
            Fleet::Nats(bus) => bus.next_report(home, wait).await,
        }
    }
}

/// The in-process fleet: a bus with one host agent per node.
struct InProcessFleet {
    bus: Arc<dyn Bus>,
    reports: Subscription,
    agents: Vec<tokio::task::JoinHandle<()>>,
}

impl InProcessFleet {
    async fn start(
        home: &Home,
        inventory: &Inventory,
        store: &dyn ArchiveStore,
    ) -> Result<InProcessFleet> {
        let store = builds::store_spec(store)?;
        let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new());
        let reports = bus.subscribe(subjects::ALL_REPORTS).await?;
        let mut agents = Vec::new();
        for node in inventory.file.nodes.keys() {
            let config = HostConfig {
                root: home.node_root(node, inventory),
                state_dir: home.node_state_dir(node),
                ..HostConfig::default()
            };
            std::fs::create_dir_all(&config.root)
                .with_context(|| format!("creating the root of `{node}`"))?;
            let archives = builds::host_archives(home, node, &store)?;
            agents.push(mesh_host::start(Arc::clone(&bus), node.clone(), config, archives).await?);
        }
        Ok(InProcessFleet {
            bus,
            reports,
            agents,
        })
    }

    async fn send(&self, home: &Home, declaration: &Declaration) -> Result<()> {
        self.bus
            .publish(
                &subjects::declaration(&declaration.node),
                declaration.canonical_json(),
            )
            .await
            .with_context(|| format!("sending `{}` its declaration", declaration.node))?;
        home.record_sent(declaration)
    }

    /// The next report heard within `wait`, recorded in the home.
    async fn next_report(&mut self, home: &Home, wait: Duration) -> Result<Option<Report>> {
        match tokio::time::timeout(wait, self.reports.next()).await {
            Ok(Some(message)) => match Report::from_json(&message.payload) {
                Ok(report) => {
                    home.record_report(&report)?;
                    Ok(Some(report))
                }
                Err(error) => {
                    tracing::warn!(subject = %message.subject, %error, "an unreadable report");
                    Ok(None)
                }
            },
            Ok(None) => bail!("the bus closed"),
            Err(_) => Ok(None),
        }
    }
}

impl Drop for InProcessFleet {
    fn drop(&mut self) {
        for agent in &self.agents {
            agent.abort();
        }
    }
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
    let mut fleet: Option<Fleet> = None;
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
                        let reason = format!("{error:#}");
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
            if fleet.is_none() {
                fleet = Some(Fleet::start(ctx).await?);
            }
            let fleet = fleet.as_mut().context("started above")?;
            record.plan.state = PlanState::RollingOut;
            home.write_plan(record)?;
            ctx.progress
                .line(&format!("{id} tier {index}: rolling out `{module}`"));
            roll_out(ctx, fleet, record, module).await?;
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
    repos::catalogue_at(&repo.path, &record.plan.commit, &repo.modules_dir).with_context(|| {
        format!(
            "reading `{}` at {}",
            repo.name,
            short_commit(&record.plan.commit)
        )
    })
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

/// The catalogue a rollout composes from: what is deployed (or in the home's catalogue), with
/// `module` taken from its new build; and the inventory without assignments of modules that are
/// in neither (they reach their nodes with their own rollouts).
async fn rollout_catalogue(
    ctx: &Ctx<'_>,
    module: &str,
    build: &Build,
) -> Result<(Catalogue, Inventory, Option<ModuleDefinition>)> {
    let mut source = builds::effective_source(ctx.home, ctx.store).await?;
    let (running, _) = load_catalogue(&source);
    let old = running.module(module).map(|m| m.definition.clone());
    let archive = ctx.store.fetch(&build.archive).await.with_context(|| {
        format!(
            "reading the build of `{module}` ({}) from {}",
            build.archive.digest,
            ctx.store.name()
        )
    })?;
    let tree = mesh_store::archive::unpack_archive(&archive.bytes, Some(&build.archive))
        .with_context(|| format!("the build of `{module}`"))?;
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

/// Rolls one module out with the state machine, carrying out its actions until it is done or
/// stopped; saves the plan after every step.
async fn roll_out(
    ctx: &Ctx<'_>,
    fleet: &mut Fleet,
    record: &mut PlanRecord,
    module: &str,
) -> Result<()> {
    let home = ctx.home;
    let id = record.plan.id.clone();
    let build = record.work[module]
        .build
        .clone()
        .context("a module is built before it is rolled out")?;
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
                    Some((bus_node, users)) if bus_node == node => {
                        crate::fleet::with_users_file(declaration, users)
                    }
                    Some(_) | None => declaration,
                })
            }
        }
    };
    let mut events: VecDeque<Event> = VecDeque::new();
    let (mut spec, mut state) = match (&record.work[module].spec, &record.work[module].state) {
        (Some(spec), Some(state)) => {
            let (mut spec, state) = (spec.clone(), state.clone());
            // Resumed: grants asked and not answered are asked again; a node sent and not yet
            // heard is heard from its last report, else sent its declaration again (an apply
            // is idempotent; the controller may have stopped before the send left it).
            let bus_node = match (&state.bus_node, state.stage) {
                (Some((node, progress)), Stage::BusNode) => Some((node, progress)),
                (Some(_) | None, _) => None,
            };
            for (node, progress) in bus_node.into_iter().chain(state.nodes.iter()) {
                match progress {
                    NodeProgress::Granting { .. } => {
                        events.push_back(fleet.issue_grants(ctx, module, vec![node.clone()]).await?)
                    }
                    NodeProgress::Sent { .. } => {
                        let expected = expected_declaration(&spec, node);
                        match home.report(node)? {
                            Some(report) if report.declaration == expected => {
                                events.push_back(Event::Report(mesh_plan::merge::module_report(
                                    &report, module,
                                )));
                            }
                            Some(_) | None => match compose(node) {
                                Ok(declaration) => {
                                    set_expected_declaration(&mut spec, node, &declaration);
                                    ctx.progress.line(&format!(
                                        "  `{module}`: sent `{node}` again (resumed) declaration {}",
                                        mesh_host::short(&declaration.digest())
                                    ));
                                    fleet.send(home, &declaration).await?;
                                }
                                Err(reason) => events.push_back(Event::SendFailed {
                                    node: node.clone(),
                                    reason: format!("composing its declaration failed: {reason}"),
                                }),
                            },
                        }
                    }
                    NodeProgress::Waiting
                    | NodeProgress::GrantRetry { .. }
                    | NodeProgress::Applied { .. } => {}
                }
            }
            ctx.progress
                .line(&format!("  `{module}`: resumed at stage {:?}", state.stage));
            (spec, state)
        }
        (Some(_), None) | (None, Some(_)) | (None, None) => {
            let definition = &catalogue
                .module(module)
                .map(|m| m.definition.clone())
                .unwrap_or_else(|| placeholder_definition(module));
            let mut nodes = BTreeMap::new();
            let work = record.work.entry(module.to_owned()).or_default();
            for node in inventory
                .file
                .assignments
                .get(module)
                .cloned()
                .unwrap_or_default()
            {
                let running = inventory.file.nodes.get(&node).is_some_and(|n| n.running);
                let declaration = compose(&node).map(|d| d.digest()).unwrap_or_default();
                if let Some(before) = home.sent(&node)? {
                    work.before.insert(node.clone(), before);
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
            let users_change = fleet.users_change(home, old_definition.as_ref(), definition);
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
        while let Some(event) = events.pop_front() {
            let heard = match &event {
                Event::Report(report) => Some(report.node.clone()),
                Event::Start
                | Event::GrantsIssued { .. }
                | Event::GrantsFailed { .. }
                | Event::SendFailed { .. }
                | Event::Tick => None,
            };
            let actions = step(&spec, &mut state, event, mesh_host::now());
            for action in actions {
                match action {
                    Action::IssueGrants { nodes } => {
                        events.push_back(fleet.issue_grants(ctx, module, nodes).await?);
                    }
                    Action::SendBusNode { node } | Action::Send { node, .. } => {
                        match compose(&node) {
                            Ok(declaration) => {
                                set_expected_declaration(&mut spec, &node, &declaration);
                                let which = match state.stage {
                                    Stage::BusNode => " (holding the bus, first)",
                                    Stage::FirstNode
                                        if state.first.as_deref() == Some(node.as_str()) =>
                                    {
                                        " (first)"
                                    }
                                    Stage::NotStarted
                                    | Stage::FirstNode
                                    | Stage::Rest
                                    | Stage::Done
                                    | Stage::Stopped => "",
                                };
                                fleet.send(home, &declaration).await?;
                                crate::fail::point(&format!("sent:{module}:{node}"));
                                ctx.progress.line(&format!(
                                    "  `{module}`: sent `{node}`{which} declaration {}",
                                    mesh_host::short(&declaration.digest())
                                ));
                            }
                            Err(reason) => events.push_back(Event::SendFailed {
                                node,
                                reason: format!("composing its declaration failed: {reason}"),
                            }),
                        }
                    }
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
                        match record.work[module].before.get(&node) {
                            Some(before) => {
                                let digest = before.digest();
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
            save_rollout(record, module, &spec, &state);
            home.write_plan(record)?;
            if let Some(node) = heard {
                crate::fail::point(&format!("heard:{module}:{node}"));
            }
        }
        match state.stage {
            Stage::Done | Stage::Stopped => break,
            Stage::NotStarted | Stage::BusNode | Stage::FirstNode | Stage::Rest => {}
        }
        if let Some(report) = fleet.next_report(home, Duration::from_secs(1)).await? {
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

fn save_rollout(record: &mut PlanRecord, module: &str, spec: &RolloutSpec, state: &RolloutState) {
    let work = record.work.entry(module.to_owned()).or_default();
    work.spec = Some(spec.clone());
    work.state = Some(state.clone());
    let build = work.build.as_ref().map(|b| b.archive.clone());
    let rollout: ModuleRollout = state.record(build);
    record.plan.rollouts.insert(module.to_owned(), rollout);
}

/// A definition for a module that does not validate in the rollout's catalogue: the defaults
/// (its sends fail when composed, which stops the rollout naming why).
fn placeholder_definition(module: &str) -> mesh_model::module::ModuleDefinition {
    let text = format!("name = \"{module}\"\n");
    toml::from_str(&text).unwrap_or_else(|_| panic!("a minimal definition parses"))
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
            bail!(
                "plan `{id}` is not open (it is {}); a plan that ended is never resumed",
                mesh_plan::plans::state_word(&record.plan.state)
            );
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
                found.with_context(|| {
                    format!("no registered repository holds a module `{module}`")
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
