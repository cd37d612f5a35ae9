//! Plans: what a merge changed, in tiers, and the work behind each module — its build and
//! where its rollout stands — kept so that a plan is resumed where it stood.
//!
//! Start at [`PlanRecord`]. [`merge`] makes a plan from a merge: it reads the changed paths
//! since the repository's last planned commit from git, attributes them to modules ("Changed
//! paths name their modules"), supersedes older open plans of the same repository and branch,
//! folding in their unfinished modules ("A newer merge takes over an older plan"), orders the
//! affected modules in tiers and saves the plan. [`build`] builds the modules a plan names.
//! Driving a plan — its builds, then each module's rollout through the executor — is
//! [`crate::runtime`]'s.
//!
//! # Layout
//! `<home>/plans/<id>.json`: a [`PlanRecord`] (ids `plan-1`, `plan-2`, … in the order plans are
//! made), rewritten after every step of a rollout so that a controller stopped mid-rollout
//! resumes where it was (`plans resume`, or the next `merge`); the nodes' parts of a rollout
//! are kept beside it, a record a step ([`nodes`]). [`PlansLock`] keeps two controllers from
//! planning or driving at once.
//!
//! # Guarantees
//! - A merge heard twice (same repository, branch and commit) makes one plan ("A merge heard
//!   twice makes one plan").
//! - A plan that is not open (done, stopped, superseded, closed) is never driven again.

pub(crate) mod build;
pub(crate) mod fold;
pub(crate) mod holds;
mod lock;
pub(crate) mod merge;
pub(crate) mod nodes;
mod v1;

pub use fold::KEEP_PLANS;

pub use build::{build_named, NamedBuild};
pub(crate) use lock::PlansLock;
pub use merge::MergeOutcome;
pub use nodes::{RolloutNodeRecord, RunningNode, ROLLOUT_NODE_FORMAT};

use crate::catalogue::builds::short_commit;
use crate::catalogue::repos;
use crate::error::{bad_record, Context, Error, Result};
use crate::home::Home;
use mesh_model::build::Build;
use mesh_model::module::CatalogueSource;
use mesh_model::plan::{Plan, RolloutOutcome};
use mesh_plan::rollout::{BusFirst, RolloutParts};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The format version of a plan record.
pub const PLAN_FORMAT: u32 = 2;

/// A plan as the controller keeps it (disk format, version [`PLAN_FORMAT`]): the plan itself
/// and the work behind it — builds, each rollout's policy and where it stands — so it can be
/// resumed. The nodes' parts of a rollout are records of their own ([`nodes`]), so
/// this one does not grow with the fleet.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
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
    /// Modules this merge forgot (the rules “What the mesh keeps, for a reason” and “An archive is
    /// published with a manifest that holds it”): built from this repository and gone from its
    /// catalogue at the plan's commit. The mesh no longer holds them: they keep nothing, so the
    /// next sweep lets their archives go, and they are no longer deployed.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub forgotten: BTreeSet<String>,
    /// Set once the plan ended and its nodes' records were folded into each module's
    /// [`ModuleWork::summary`] and removed ([`fold`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nodes_folded: bool,
}

/// The work behind one module of a plan.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ModuleWork {
    /// The build, once made.
    pub build: Option<Build>,
    /// Set when the build is byte-identical to the module's deployed build: not redeployed
    /// The rule “A byte-identical build is not redeployed”.
    #[serde(default)]
    pub not_redeployed: bool,
    /// The rollout once begun: its policy, fixed then, and where it stands, without its nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutKept>,
    /// Nodes sent back what they ran before (`on-failure = "revert"`, the first node only):
    /// node → the digest of the declaration sent back.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reverted: BTreeMap<String, String>,
    /// Once the plan ended: its rollout's nodes, folded ([`fold`]); their records are gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<fold::RolloutSummary>,
}

/// A module's rollout as its plan record keeps it: constant in size, whatever the fleet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RolloutKept {
    /// One node first, or every node together.
    pub upgrade: mesh_model::module::Upgrade,
    /// What a failed node does.
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

/// The plans' records ([`crate::home::keys`]): `plans/<id>.json`, one a plan, and what each
/// rollout keeps of its nodes under `rollouts/<plan>/<module>/` ([`crate::plans::nodes`]).
#[derive(Clone, Copy)]
pub struct PlanStore<'h> {
    home: &'h Home,
}

impl Home {
    /// The plans' records.
    pub fn plans(&self) -> PlanStore<'_> {
        PlanStore { home: self }
    }
}

impl PlanStore<'_> {
    /// A plan by id, or an error naming the plans there are.
    ///
    /// # Errors
    /// No such plan; a record that cannot be read.
    pub fn get(&self, id: &str) -> Result<PlanRecord> {
        let found = match plan_number(id) {
            Some(_) => self.read(id)?,
            None => None,
        };
        match found {
            Some(record) => Ok(record),
            None => {
                let known: Vec<String> = self.all()?.into_iter().map(|p| p.plan.id).collect();
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
    pub fn all(&self) -> Result<Vec<PlanRecord>> {
        let mut found: Vec<(u64, String)> = self
            .home
            .json_stems("plans")?
            .into_iter()
            .filter_map(|id| Some((plan_number(&id)?, id)))
            .collect();
        found.sort();
        let mut plans = Vec::new();
        for (_, id) in found {
            plans.extend(self.read(&id)?);
        }
        Ok(plans)
    }

    /// A plan record, migrated from format 1 (every node's rollout inside it) on first read,
    /// saying so.
    fn read(&self, id: &str) -> Result<Option<PlanRecord>> {
        let key = plan_key(id);
        let Some(value) = self.home.get_json(&key)? else {
            return Ok(None);
        };
        let location = self.home.records().locate(&key);
        if value.get("format").and_then(Value::as_u64) == Some(1) {
            let old: v1::PlanRecord =
                serde_json::from_value(value).map_err(bad_record(&location, "a plan record"))?;
            // Checked whole before the migration writes a record.
            let (plan, names) = old.names();
            check_names(&location, id, plan, names)?;
            let record = v1::migrate(self.home, old)?;
            self.home.put_json(&key, &record)?;
            self.home.note_migration(format!(
                "{}: migrated from format 1 (each node's part of its rollouts is now a record of \
                 its own under rollouts/{id}/)",
                self.home.records().locate(&key)
            ));
            return Ok(Some(record));
        }
        let record: PlanRecord = self
            .home
            .versioned(&key, value, "a plan record", PLAN_FORMAT)?;
        check_names(&location, id, &record.plan.id, module_names(&record))?;
        Ok(Some(record))
    }

    /// Writes a plan record — unless this controller's plans lease on the bus was taken over.
    ///
    /// # Errors
    /// The lease was taken over; the record cannot be written.
    pub fn write(&self, record: &PlanRecord) -> Result<()> {
        self.home.check_lease()?;
        self.home.put_json(&plan_key(&record.plan.id), record)
    }
}

/// Every module a plan record names.
fn module_names(record: &PlanRecord) -> impl Iterator<Item = &str> {
    let plan = &record.plan;
    plan.modules
        .iter()
        .chain(plan.tiers.iter().flatten())
        .chain(plan.rollouts.keys())
        .chain(record.work.keys())
        .map(String::as_str)
}

/// The names in a plan record become record keys (`rollouts/<plan>/<module>/…`): its plan must
/// be the one its key names and each module and node a plain name, or the record is refused
/// naming itself — never read as a look-up, or a write, of some other key.
fn check_names<'a>(
    location: &str,
    id: &str,
    plan: &str,
    mut names: impl Iterator<Item = &'a str>,
) -> Result<()> {
    let refused = |what: String| Error::BadRecord {
        location: location.to_owned(),
        what,
        source: None,
    };
    if plan != id {
        return Err(refused(format!(
            "the record of plan `{id}`: it names plan `{}`",
            plan.escape_debug()
        )));
    }
    let plain = |name: &str| !name.contains('/') && mesh_store::record_store::is_key(name);
    match names.find(|name| !plain(name)) {
        Some(name) => Err(refused(format!(
            "a plan record: `{}` is not a name (letters, digits, `-`, `_`, `.`)",
            name.escape_debug()
        ))),
        None => Ok(()),
    }
}

fn plan_key(id: &str) -> String {
    format!("plans/{id}.json")
}

pub(crate) fn plan_number(id: &str) -> Option<u64> {
    id.strip_prefix("plan-")?.parse().ok()
}

/// Records a module's build in a plan; a build byte-identical to the module's deployed one is
/// not redeployed (the rule “A byte-identical build is not redeployed”) when every node assigned
/// the module was sent that build: its rollout is done as it is. One that some node was not
/// sent — a stopped rollout's node runs another build, a revert brings the deployed one back —
/// is rolled out as any build, one machine first ([`still_to_send`] names them). Returns
/// whether it was identical and its rollout done at once.
///
/// # Errors
/// The deployed record cannot be read.
pub(crate) fn record_built(
    home: &Home,
    record: &mut PlanRecord,
    build: &Build,
    still_to_send: &[String],
) -> Result<bool> {
    let module = &build.module;
    let identical = still_to_send.is_empty() && identical_to_deployed(home, build)?;
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

/// Whether `build` is byte-identical to its module's deployed build.
///
/// # Errors
/// The deployed record cannot be read.
pub(crate) fn identical_to_deployed(home: &Home, build: &Build) -> Result<bool> {
    Ok(home
        .deployed()
        .get(&build.module)?
        .is_some_and(|d| d.archive == build.archive))
}

/// The nodes a build byte-identical to its module's deployed one must still be sent: those
/// assigned the module whose part of it, as sent, differs from their intent
/// ([`crate::intent::nodes_differing_on`]); none for a build that is not identical
/// (its rollout sends every node).
///
/// # Errors
/// As [`crate::intent::nodes_differing_on`].
pub(crate) async fn still_to_send(
    home: &Home,
    store: &dyn mesh_store::store::ArchiveStore,
    build: &Build,
) -> Result<Vec<String>> {
    if !identical_to_deployed(home, build)? {
        return Ok(Vec::new());
    }
    crate::intent::nodes_differing_on(home, store, &build.module).await
}

pub(crate) fn outcome_of<'r>(record: &'r PlanRecord, module: &str) -> Option<&'r RolloutOutcome> {
    record
        .plan
        .rollouts
        .get(module)
        .and_then(|r| r.outcome.as_ref())
}

/// Whether any of `plans` (those a drive left: `plans resume`, `push --behind`,
/// `build --behind`) stopped; those commands exit 3 then.
pub fn any_stopped(plans: &[Plan]) -> bool {
    plans
        .iter()
        .any(|plan| matches!(plan.state, mesh_model::plan::PlanState::Stopped { .. }))
}

/// Closes an open plan by hand; it is never resumed.
///
/// # Errors
/// When there is no such plan, or it is not open.
pub fn close(home: &Home, id: &str, note: &str) -> Result<PlanRecord> {
    let _lock = PlansLock::acquire(home, &format!("plans close {id}"))?;
    let mut record = home.plans().get(id)?;
    record.plan.state = mesh_plan::close(&record.plan, note)?;
    home.plans().write(&record)?;
    Ok(record)
}

/// The catalogue at a plan's commit, from its repository.
///
/// # Errors
/// The repository is not registered, or git cannot be read.
pub(crate) fn plan_source(home: &Home, record: &PlanRecord) -> Result<CatalogueSource> {
    let repo = home.repos().get(&record.plan.repository)?;
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
