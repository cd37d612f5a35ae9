//! `secrets rotate`'s part in git: every module file marked `secret = true` in the home's
//! catalogue and in each registered repository with a working tree, sealed again to the next
//! mesh key (and the operators' keys), and committed — those files alone — on the branch the
//! repository is registered with (the rule “A secret is readable only where it is used”).
//!
//! A repository registered by URL (a bare clone under the home) is not written: when its head
//! holds a secret file the next key does not open, it is [`Pending`], and `secrets rotate`
//! keeps the old key (the rotation stays under way, `secrets/mesh.key.next`) until a run finds
//! none. A run stopped midway is run again: what it sealed to the next key is opened with it.
//!
//! What it must never do: commit anything but the files it re-sealed, or leave a file sealed
//! to a key that is gone.

use crate::catalogue::repos::git;
use crate::error::{Error, Result};
use crate::home::{write_atomic, Home};
use mesh_model::secret::SecretValue;
use std::path::{Path, PathBuf};

/// What a rotation did in one repository.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Resealed {
    /// The repository (`catalogue` for the home's, else its registered name).
    pub repository: String,
    /// The files re-sealed, relative to the repository's root.
    pub files: Vec<String>,
    /// The commit holding them, when they were committed.
    pub commit: Option<String>,
}

/// A repository a rotation could not finish, and why (the old key is kept for it).
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Pending {
    /// The repository.
    pub repository: String,
    /// Why, and what to do.
    pub reason: String,
}

/// Re-seals every secret file of the home's catalogue and of each registered repository with
/// a working tree with `each` (opening with the old or next key, sealing to the next).
///
/// # Errors
/// A module definition or secret file that cannot be read or written; git failing.
pub(crate) fn reseal_repositories(
    home: &Home,
    each: &mut dyn FnMut(&SecretValue) -> Result<SecretValue>,
    opens_with_next: &dyn Fn(&SecretValue) -> bool,
) -> Result<(Vec<Resealed>, Vec<Pending>)> {
    let mut done = Vec::new();
    let mut pending = Vec::new();
    let mut places: Vec<(String, PathBuf, String, Option<String>)> = vec![(
        "catalogue".into(),
        home.root().join("catalogue"),
        "modules".into(),
        None,
    )];
    for repo in home.repos().all()? {
        if repo.remote.is_some() {
            let stale = sealed_to_another_key(&repo, opens_with_next)?;
            if !stale.is_empty() {
                pending.push(Pending {
                    repository: repo.name.clone(),
                    reason: format!(
                        "registered by URL, its head holds {} sealed to the old key: encrypt \
                         them again in a clone (`secrets encrypt FILE`), commit and push them, \
                         then run `secrets rotate` again",
                        stale.join(", ")
                    ),
                });
            }
            continue;
        }
        places.push((repo.name, repo.path, repo.modules_dir, Some(repo.branch)));
    }
    for (name, root, modules_dir, branch) in places {
        let files = reseal_tree(&root.join(&modules_dir), &modules_dir, each)?;
        if files.is_empty() {
            continue;
        }
        let commit = commit_files(&root, branch.as_deref(), &files)?;
        done.push(Resealed {
            repository: name,
            files,
            commit,
        });
    }
    Ok((done, pending))
}

/// The secret files at the head of a repository registered by URL that the next key does not
/// open (relative to the repository's root).
fn sealed_to_another_key(
    repo: &crate::catalogue::repos::RepoRecord,
    opens_with_next: &dyn Fn(&SecretValue) -> bool,
) -> Result<Vec<String>> {
    let commit = crate::catalogue::repos::head(repo)?;
    let source = crate::catalogue::repos::catalogue_at(&repo.path, &commit, &repo.modules_dir)?;
    let mut stale = Vec::new();
    for (module, tree) in &source.modules {
        for (path, entry) in &tree.entries {
            let mesh_model::module::EntryKind::File { bytes, .. } = entry else {
                continue;
            };
            if let Ok(secret) = SecretValue::from_file(bytes) {
                if !opens_with_next(&secret) {
                    stale.push(format!("{}/{module}/{path}", repo.modules_dir));
                }
            }
        }
    }
    Ok(stale)
}

/// Re-seals the sealed secret files of every module under `modules`; answers them relative
/// to the repository's root (`prefix` is `modules` relative to it).
fn reseal_tree(
    modules: &Path,
    prefix: &str,
    each: &mut dyn FnMut(&SecretValue) -> Result<SecretValue>,
) -> Result<Vec<String>> {
    let mut files = Vec::new();
    for file in crate::secrets::secret_files::secret_files_under(modules)? {
        let Ok(bytes) = std::fs::read(&file.path) else {
            continue;
        };
        // A file still in clear is not at rest sealed to any key: `check` names it.
        let Ok(sealed) = SecretValue::from_file(&bytes) else {
            continue;
        };
        let again = each(&sealed)?;
        write_atomic(&file.path, again.to_file().as_bytes())?;
        files.push(format!("{prefix}/{}/{}", file.module, file.source));
    }
    Ok(files)
}

/// Commits `files` alone in the working tree at `root`, on `branch` when one is registered;
/// `None` when `root` is not a git working tree.
fn commit_files(root: &Path, branch: Option<&str>, files: &[String]) -> Result<Option<String>> {
    let inside = git(root, &["rev-parse", "--is-inside-work-tree"]).ok();
    if inside
        .as_deref()
        .map(|out| String::from_utf8_lossy(out).trim() == "true")
        != Some(true)
    {
        return Ok(None);
    }
    if let Some(branch) = branch {
        let head = git(root, &["rev-parse", "--abbrev-ref", "HEAD"])?;
        let head = String::from_utf8_lossy(&head).trim().to_owned();
        if head != branch {
            return Err(Error::refused(format!(
                "{} has `{head}` checked out, not `{branch}`, the branch it is registered \
                 with: check out `{branch}` and run `secrets rotate` again",
                root.display()
            )));
        }
    }
    let mut args = vec!["add", "--"];
    args.extend(files.iter().map(String::as_str));
    git(root, &args)?;
    let mut args = vec![
        "commit",
        "-q",
        "-m",
        "secrets rotate: secret files encrypted to the new mesh key",
        "--",
    ];
    args.extend(files.iter().map(String::as_str));
    git(root, &args)?;
    let commit = git(root, &["rev-parse", "HEAD"])?;
    Ok(Some(String::from_utf8_lossy(&commit).trim().to_owned()))
}
