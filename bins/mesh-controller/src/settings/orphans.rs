//! The orphaned settings a coming version would leave (the rule "an orphaned setting is a
//! removal"): what `check` names for the next merge of each registered repository, and what
//! `plan NODE --diff` names for the open plans that have yet to roll a module out.
//!
//! Start at [`at_heads`] and [`in_open_plans`]. Each reads a catalogue from git at a commit
//! (no checkout) and asks [`mesh_plan::orphaned_settings`] about every module the mesh runs
//! there, against the version the nodes run now (`checked`: the home's catalogue overlaid with
//! the deployed builds). Nothing is written.

use crate::catalogue::repos;
use crate::error::{Context, Result};
use crate::home::Home;
use crate::push::Checked;
use mesh_model::module::load_catalogue;
use mesh_plan::Orphans;
use serde::Serialize;
use std::collections::BTreeSet;

/// Where a coming version of a module is read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "from", rename_all = "kebab-case")]
pub enum Coming {
    /// A registered repository's head: what its next merge would deploy.
    Head {
        /// The repository's name.
        repository: String,
        /// The head's commit.
        commit: String,
    },
    /// An open plan that has yet to roll the module out.
    Plan {
        /// The plan's id.
        plan: String,
        /// Its commit.
        commit: String,
    },
}

impl std::fmt::Display for Coming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Coming::Head { repository, commit } => write!(
                f,
                "the next merge of `{repository}` (its head {})",
                short(commit)
            ),
            Coming::Plan { plan, commit } => write!(f, "{plan} (at {})", short(commit)),
        }
    }
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

/// One module's orphaned settings under a coming version.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct ComingOrphans {
    /// Where the version comes from.
    #[serde(flatten)]
    pub coming: Coming,
    /// What it orphans.
    #[serde(flatten)]
    pub orphans: Orphans,
}

impl ComingOrphans {
    /// What a person reads for the orphans of `node` (every node's when `None`).
    pub fn render_text(&self, node: Option<&str>) -> String {
        let orphans = match node {
            Some(node) => self.orphans.for_node(node),
            None => self.orphans.orphans.iter().collect(),
        };
        if orphans.is_empty() {
            return String::new();
        }
        format!(
            "{} would orphan settings of `{}`:\n{}",
            self.coming,
            self.orphans.module,
            self.orphans.render_text(&orphans, "  ")
        )
    }
}

/// The orphans of `modules` (those the mesh runs) in the catalogue of `repo` at `commit`.
fn at_commit(
    home: &Home,
    checked: &Checked,
    repo: &repos::RepoRecord,
    commit: &str,
    modules: &BTreeSet<String>,
    coming: &Coming,
) -> Result<Vec<ComingOrphans>> {
    let source = repos::catalogue_at(&repo.path, commit, &repo.modules_dir)?;
    let (catalogue, _) = load_catalogue(&source);
    let inventory = home.inventory()?;
    Ok(modules
        .iter()
        .filter_map(|module| {
            let definition = &catalogue.module(module)?.definition;
            let previous = checked.0.module(module).map(|m| &m.definition);
            let orphans = mesh_plan::orphaned_settings(previous, definition, &inventory.layers);
            (!orphans.is_empty()).then(|| ComingOrphans {
                coming: coming.clone(),
                orphans,
            })
        })
        .collect())
}

/// What the next merge of each registered repository would orphan: its head's version of
/// every module the inventory assigns, against the version the nodes run.
///
/// # Errors
/// A record or a repository cannot be read.
pub(crate) fn at_heads(
    home: &Home,
    checked: &Checked,
    heads: &[crate::catalogue::heads::Head],
) -> Result<Vec<ComingOrphans>> {
    let inventory = home.inventory()?;
    let assigned: BTreeSet<String> = inventory
        .assigned_modules()
        .into_iter()
        .map(str::to_owned)
        .collect();
    let mut out = Vec::new();
    for repo in home.repos().all()? {
        // The commit `heads` read (fetched first when the repository is registered by URL).
        let commit = match heads.iter().find(|head| head.repository == repo.name) {
            Some(head) => head.commit.clone(),
            None => repos::resolve(&repo.path, &repo.branch).for_repo(&repo.name, || {
                format!("reading the head of `{}`", repo.branch)
            })?,
        };
        let coming = Coming::Head {
            repository: repo.name.clone(),
            commit: commit.clone(),
        };
        out.extend(
            at_commit(home, checked, &repo, &commit, &assigned, &coming)
                .for_repo(&repo.name, || format!("reading its catalogue at {commit}"))?,
        );
    }
    Ok(out)
}

/// What the open plans would orphan for `node`: each module behind (an open plan has yet to
/// build or roll it out) that the node runs, at that plan's commit.
///
/// # Errors
/// A record or a repository cannot be read.
pub fn in_open_plans(home: &Home, checked: &Checked, node: &str) -> Result<Vec<ComingOrphans>> {
    let inventory = home.inventory()?;
    let runs: BTreeSet<&str> = inventory.modules_of(node);
    let records = home.plans().all()?;
    let plans: Vec<_> = records.iter().map(|r| r.plan.clone()).collect();
    let mut out = Vec::new();
    for record in &records {
        let modules: BTreeSet<String> = mesh_plan::behind(&plans)
            .into_iter()
            .filter(|b| b.plan == record.plan.id && runs.contains(b.module.as_str()))
            .map(|b| b.module)
            .collect();
        if modules.is_empty() {
            continue;
        }
        let repo = home.repos().get(&record.plan.repository)?;
        let coming = Coming::Plan {
            plan: record.plan.id.clone(),
            commit: record.plan.commit.clone(),
        };
        let found = at_commit(home, checked, &repo, &record.plan.commit, &modules, &coming)
            .for_plan(&record.plan.id, || "reading its catalogue".to_owned())?;
        out.extend(
            found
                .into_iter()
                .filter(|c| !c.orphans.for_node(node).is_empty()),
        );
    }
    Ok(out)
}
