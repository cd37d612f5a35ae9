//! Modules built for the plans that name them (`build MODULE...`), and a build recorded in its
//! plan.

use super::merge::module_dirs_at;
use super::{outcome_of, record_built, PlansLock};
use crate::catalogue::builds;
use crate::catalogue::repos;
use crate::error::{Error, Result};
use crate::home::Home;
use mesh_model::build::Build;
use mesh_store::store::ArchiveStore;
use serde::Serialize;

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
/// archives and answers the digest only: nothing is published, recorded or planned (the rule “A
/// merge heard twice makes one plan”).
///
/// Builds go to `store`.
///
/// # Errors
/// A module no registered repository holds, or one that does not validate, naming it.
pub async fn build_named(
    home: &Home,
    store: &dyn ArchiveStore,
    modules: &[String],
    dry_run: bool,
) -> Result<Vec<NamedBuild>> {
    let _lock = PlansLock::acquire(home, &format!("build {}", modules.join(" ")))?;
    let mut out = Vec::new();
    for module in modules {
        let mut plans = home.plans().all()?;
        let plan = plans
            .iter_mut()
            .rev()
            .find(|p| p.plan.state.is_open() && p.plan.modules.contains(module));
        let (repo, commit) = match &plan {
            Some(plan) => (
                home.repos().get(&plan.plan.repository)?,
                plan.plan.commit.clone(),
            ),
            None => {
                let mut found = None;
                for repo in home.repos().all()? {
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
            store,
            &builds::BuildSource {
                repository: &repo.name,
                commit: &commit,
                source: &source,
            },
            module,
            mesh_store::clock::now(),
            dry_run,
        )
        .await?;
        let plan_id = plan.as_ref().map(|p| p.plan.id.clone());
        if let (Some(plan), false) = (plan, dry_run) {
            if outcome_of(plan, module).is_none() {
                let still = super::still_to_send(home, store, &built.build).await?;
                record_built(home, plan, &built.build, &still)?;
                home.plans().write(plan)?;
            }
        }
        out.push(NamedBuild {
            build: built.build,
            plan: plan_id,
        });
    }
    Ok(out)
}
