//! A merge heard: its plan made and saved, older open plans of the same repository and branch
//! superseded and their unfinished modules taken in ("A newer merge takes over an older plan").

use super::{plan_number, ModuleWork, PlanRecord, PLAN_FORMAT};
use crate::catalogue::builds::short_commit;
use crate::catalogue::repos::{self, RepoRecord};
use crate::error::{Context, Error, Result};
use crate::home::Home;
use mesh_model::module::CatalogueSource;
use mesh_model::plan::{Plan, PlanState};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// What hearing a merge did.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum MergeOutcome {
    /// A plan was already made for this repository, branch and commit; none was made. Still
    /// open, and not `--plan-only`, it was driven with the merge's flags (`--move`), as the
    /// next merge drives every open plan.
    AlreadyPlanned {
        /// That plan, as it stands.
        plan: Plan,
        /// Whether this merge drove it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        driven: bool,
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

impl MergeOutcome {
    /// Whether the merge left its plan stopped (a build failed, or a rollout stopped at a
    /// node): a plan it made and drove, or an open plan of the same commit it drove. A plan
    /// made before and not driven now says nothing of this merge. `merge` exits 3 then.
    pub fn stopped(&self) -> bool {
        match self {
            MergeOutcome::Planned { plan, .. }
            | MergeOutcome::AlreadyPlanned { plan, driven: true } => {
                matches!(plan.state, PlanState::Stopped { .. })
            }
            MergeOutcome::AlreadyPlanned { driven: false, .. } => false,
        }
    }
}

/// What [`merge`] made of a merge.
#[derive(Debug)]
pub(crate) enum Heard {
    /// A plan was already made for this repository, branch and commit; none was made.
    AlreadyPlanned(Plan),
    /// The plan made and saved.
    Planned {
        /// Its record.
        record: PlanRecord,
        /// The older plans it superseded.
        superseded: Vec<String>,
    },
}

/// Hears a merge of `repo` at `commit` (resolved): makes and saves its plan — unless one was
/// made for this repository, branch and commit — and records the commit as the repository's
/// last planned. The caller holds the plans lock ([`super::PlansLock`]); progress goes to
/// `progress`.
///
/// # Errors
/// When git cannot be read, the affected modules depend on each other in a cycle (named), or a
/// record cannot be read or written.
pub(crate) fn merge(
    home: &Home,
    progress: &dyn crate::Progress,
    mut repo: RepoRecord,
    commit: &str,
) -> Result<Heard> {
    let plans = finish_supersessions(home, progress)?;
    if let Some(existing) = plans.iter().find(|p| {
        p.plan.repository == repo.name && p.plan.branch == repo.branch && p.plan.commit == commit
    }) {
        return Ok(Heard::AlreadyPlanned(existing.plan.clone()));
    }
    let (record, superseded) = make_plan(home, progress, &repo, commit, &plans)?;
    // A merge of this repository the daemon could not plan is resolved by this one.
    home.problems()
        .clear(mesh_store::problems::ProblemKind::Merge, &repo.name)?;
    repo.last_planned = Some(commit.to_owned());
    home.repos().write(&repo)?;
    Ok(Heard::Planned { record, superseded })
}

/// Finishes every supersede a controller was killed in the middle of: an open plan older than a
/// plan of the same repository and branch is one that plan superseded (a merge marks every such
/// plan superseded right after saving its own, whose modules take in theirs), so it is marked
/// superseded by it now — each, once, in the order the plans were made, saying so. Returns
/// every plan as it then stands; the caller holds the plans lock.
///
/// # Errors
/// The plans cannot be read or written.
pub(crate) fn finish_supersessions(
    home: &Home,
    progress: &dyn crate::Progress,
) -> Result<Vec<PlanRecord>> {
    let mut records = home.plans().all()?;
    for index in 0..records.len() {
        let newer = records[index].plan.clone();
        let kept: Vec<Plan> = records.iter().map(|r| r.plan.clone()).collect();
        for older in mesh_plan::supersede(&newer, &kept).superseded {
            let Some(older_record) = records.iter_mut().find(|r| r.plan.id == older.id) else {
                continue;
            };
            older_record.plan.state = older.state.clone();
            home.plans().write(older_record)?;
            progress.line(&format!(
                "{}: superseded by {} (its supersede was interrupted; {} holds what it had not \
                 built: {}; not rolled out: {})",
                older.id,
                newer.id,
                newer.id,
                list_or_none(&older.unbuilt),
                list_or_none(&older.unsent)
            ));
        }
    }
    Ok(records)
}

/// Makes and saves the plan for `commit`, superseding older open plans of the same repository
/// and branch (saved too); returns it with the ids of the plans it superseded.
fn make_plan(
    home: &Home,
    progress: &dyn crate::Progress,
    repo: &RepoRecord,
    commit: &str,
    plans: &[PlanRecord],
) -> Result<(PlanRecord, Vec<String>)> {
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
        made_at: mesh_store::clock::now(),
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
            progress.line(&format!(
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
        nodes_folded: false,
    };
    // Crash-safe takeover: the new plan, holding the older plans' unfinished modules, is
    // durable before any older plan is marked superseded by it. Killed in between, the older
    // plans are still open and the new plan holds their modules; the next drive or merge
    // finishes the supersede ([`finish_supersessions`]). Never an older plan superseded by a
    // plan that is not there.
    let mut record = record;
    record.forgotten = forget_removed_modules(home, &repo.name, &repository_modules)?;
    home.plans().write(&record)?;
    crate::fail::point("plan-saved");
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
        home.plans().write(&older_record)?;
        crate::fail::point(&format!("superseded:{}", older.id));
        progress.line(&format!(
            "{}: superseded by {id} (it had not built: {}; not rolled out: {})",
            older.id,
            list_or_none(&older.unbuilt),
            list_or_none(&older.unsent)
        ));
    }
    for module in &record.forgotten {
        progress.line(&format!(
            "{id}: `{module}` is no longer in `{}` at {}: forgotten, it keeps nothing in the \
             store (the next sweep lets its archives go)",
            repo.name,
            short_commit(commit)
        ));
    }
    progress.line(&format!(
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
        progress.line(&format!("  tier {index}: {}", tier.join(", ")));
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
pub(crate) fn module_dirs_at(repo: &RepoRecord, commit: &str) -> Result<BTreeSet<String>> {
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
pub(crate) fn lenient_dependency_graph(source: &CatalogueSource) -> BTreeMap<String, Vec<String>> {
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
