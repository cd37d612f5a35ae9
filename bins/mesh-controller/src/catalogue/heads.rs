//! The catalogues a command reads, named (the rule "A command says which catalogue it read"):
//! the home's `catalogue/modules` overlaid with each module's deployed build (what the nodes
//! run: what `push`, `plan` and `check` compose from), and each registered repository's head
//! (what its next merge would build and deploy: what `check` also validates).
//!
//! Start at [`read`] and [`check_heads`]. Reads the records and git (no checkout); writes
//! nothing but a repository registered by URL, whose clone is fetched first ([`head_of`]).

use crate::catalogue::repos;
use crate::error::{Context, Result};
use crate::home::Home;
use mesh_model::module::load_catalogue;
use mesh_model::Diagnostic;
use serde::Serialize;
use std::collections::BTreeSet;

/// A module the nodes run from a build, not from the home's catalogue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct DeployedFrom {
    /// The module.
    pub module: String,
    /// The repository it was built from.
    pub repository: String,
    /// The commit built.
    pub commit: String,
}

/// What the version the nodes run is read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Running {
    /// The home's catalogue directory (relative to the home), when there is one.
    pub home_catalogue: Option<String>,
    /// The modules whose deployed build is read instead.
    pub deployed: Vec<DeployedFrom>,
}

impl std::fmt::Display for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.home_catalogue {
            Some(dir) => write!(f, "the home's {dir}")?,
            None => f.write_str("no catalogue of the home's own")?,
        }
        if !self.deployed.is_empty() {
            let builds: Vec<String> = self
                .deployed
                .iter()
                .map(|d| {
                    format!(
                        "`{}` ({} at {})",
                        d.module,
                        d.repository,
                        crate::catalogue::builds::short_commit(&d.commit)
                    )
                })
                .collect();
            write!(
                f,
                " overlaid with the deployed builds of {}",
                builds.join(", ")
            )?;
        }
        Ok(())
    }
}

/// What the nodes run is read from: the home's catalogue and the deployed builds.
///
/// # Errors
/// A record cannot be read.
pub fn read(home: &Home) -> Result<Running> {
    let dir = home.modules_dir();
    Ok(Running {
        home_catalogue: dir.is_dir().then(|| {
            dir.strip_prefix(home.root())
                .unwrap_or(&dir)
                .display()
                .to_string()
        }),
        deployed: home
            .deployed()
            .all()?
            .into_iter()
            .map(|d| DeployedFrom {
                module: d.module,
                repository: d.repository,
                commit: d.commit,
            })
            .collect(),
    })
}

/// Where a head's commit was read: a repository registered by URL is fetched first, as its next
/// merge would be, so `check` reads what that merge would deploy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "read", rename_all = "kebab-case")]
pub enum HeadRead {
    /// A repository on this machine: its branch as it is.
    Local,
    /// Fetched from its URL just now.
    Fetched {
        /// Where from.
        url: String,
    },
    /// The fetch failed: the commit is the last one fetched, which the next merge may not
    /// deploy.
    LastFetched {
        /// Where it is fetched from.
        url: String,
        /// Why the fetch failed, as git said it.
        why: String,
    },
}

/// One registered repository's head, checked: what its next merge would build.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Head {
    /// The repository's name.
    pub repository: String,
    /// The branch merges are heard on.
    pub branch: String,
    /// The head's commit.
    pub commit: String,
    /// Where the commit was read: fetched, or the last fetched when the fetch failed.
    #[serde(flatten)]
    pub read: HeadRead,
    /// The modules the inventory assigns that the head holds.
    pub modules: Vec<String>,
    /// Their problems at the head (each file named under the repository's modules directory).
    pub problems: Vec<Diagnostic>,
}

impl std::fmt::Display for Head {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` {} at {}",
            self.repository,
            self.branch,
            crate::catalogue::builds::short_commit(&self.commit)
        )?;
        match &self.read {
            HeadRead::Local => Ok(()),
            HeadRead::Fetched { url } => write!(f, " (fetched from {url})"),
            HeadRead::LastFetched { url, why } => write!(
                f,
                " (the commit last fetched: fetching {url} failed: {why})"
            ),
        }
    }
}

/// The commit `repo`'s next merge would build, and where it was read: a repository registered
/// by URL is fetched first (as a merge is); when the fetch fails, the commit last fetched,
/// saying so.
///
/// # Errors
/// The branch cannot be read in the repository (or in its clone).
pub(crate) fn head_of(repo: &repos::RepoRecord) -> Result<(String, HeadRead)> {
    let fetched = repo.remote.as_ref().map(|remote| {
        (
            remote.url.clone(),
            crate::catalogue::remote::fetch(&repo.path, remote, &repo.branch),
        )
    });
    match fetched {
        Some((url, Ok(commit))) => Ok((commit, HeadRead::Fetched { url })),
        fetched => {
            let commit = repos::resolve(&repo.path, &repo.branch).for_repo(&repo.name, || {
                format!("reading the head of `{}`", repo.branch)
            })?;
            let read = match fetched {
                Some((url, Err(error))) => HeadRead::LastFetched {
                    url,
                    why: error.chain_line(),
                },
                Some((_, Ok(_))) | None => HeadRead::Local,
            };
            Ok((commit, read))
        }
    }
}

/// Each registered repository's head, with the problems of every module the inventory assigns
/// that it holds (as a merge validates a module before building it); one registered by URL is
/// fetched first ([`head_of`]).
///
/// # Errors
/// A record cannot be read; a repository's head or catalogue cannot be read (naming it).
pub(crate) fn check_heads(home: &Home) -> Result<Vec<Head>> {
    let inventory = home.inventory()?;
    let assigned: BTreeSet<&str> = inventory.assigned_modules();
    let mut out = Vec::new();
    for repo in home.repos().all()? {
        let (commit, read) = head_of(&repo)?;
        let source = repos::catalogue_at(&repo.path, &commit, &repo.modules_dir)
            .for_repo(&repo.name, || format!("reading its catalogue at {commit}"))?;
        let modules: Vec<String> = source
            .modules
            .keys()
            .filter(|m| assigned.contains(m.as_str()))
            .cloned()
            .collect();
        let (_, diagnostics) = load_catalogue(&source);
        let mut problems: Vec<Diagnostic> = diagnostics
            .into_iter()
            .filter(|d| {
                modules.iter().any(|m| {
                    d.module.as_deref() == Some(m.as_str())
                        || d.file.starts_with(&format!("{}/{m}/", source.prefix))
                })
            })
            .collect();
        problems.sort();
        problems.dedup();
        out.push(Head {
            repository: repo.name.clone(),
            branch: repo.branch.clone(),
            commit,
            read,
            modules,
            problems,
        });
    }
    Ok(out)
}
