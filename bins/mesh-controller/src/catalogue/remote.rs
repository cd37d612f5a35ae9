//! A repository registered by its URL (`repo add NAME URL`): the controller keeps a bare clone
//! of its branch under the home and fetches it with real `git` — when the daemon polls it
//! (`--poll SECS`, [`crate::hooks::poll`]), and when a merge names a commit the clone has not got
//! yet.
//!
//! Start at [`Remote`] (kept in the repository's record) and [`fetch`].
//!
//! # Invariants
//! - Only the registered branch is fetched, into the clone's branch of the same name; nothing
//!   is ever pushed.
//! - A credential is a file (an SSH key, or a token; mode 0600, refused otherwise). Its path is
//!   recorded, never its contents; a token reaches git through its environment (never its
//!   command line), and git is never allowed to prompt.

use crate::error::{Error, Result};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where a repository registered by URL is fetched from, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Remote {
    /// The URL (`https://`, `ssh://`, `file://`, or an absolute path).
    pub url: String,
    /// The daemon fetches it every so many seconds and announces a new head (`None`: fetched
    /// only when a merge needs a commit it has not got).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_secs: Option<u64>,
    /// The SSH private key it is fetched with (mode 0600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_key_file: Option<PathBuf>,
    /// The file holding a token it is fetched with over HTTPS (mode 0600), sent as HTTP basic
    /// authentication's password (user `oauth2`, which GitLab asks for and GitHub, Forgejo and
    /// Gitea accept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
}

/// Whether `location` is a URL (`scheme://…`) rather than a path.
pub(crate) fn is_url(location: &str) -> bool {
    location.contains("://")
}

/// Checks `remote`'s credential files (mode 0600, not empty).
///
/// # Errors
/// [`Error::Invalid`] naming the repository and the file.
pub(crate) fn check_credentials(repo: &str, remote: &Remote) -> Result<()> {
    for file in [&remote.ssh_key_file, &remote.token_file]
        .into_iter()
        .flatten()
    {
        mesh_store::secret::read_secret(file).map_err(|source| Error::Invalid {
            what: format!("the fetch credential of repository `{repo}`"),
            source: Some(Box::new(source)),
        })?;
    }
    Ok(())
}

/// Runs git in `dir` with `remote`'s credential, never prompting; standard output.
fn git(dir: &Path, remote: &Remote, args: &[&str]) -> Result<Vec<u8>> {
    let mut command = Command::new("git");
    command
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .env("GIT_TERMINAL_PROMPT", "0");
    if let Some(key) = &remote.ssh_key_file {
        mesh_store::secret::check_secret_mode(key).map_err(|source| Error::Invalid {
            what: format!("the SSH key {}", key.display()),
            source: Some(Box::new(source)),
        })?;
        let quoted = key.display().to_string().replace('\'', "'\\''");
        command.env(
            "GIT_SSH_COMMAND",
            format!("ssh -i '{quoted}' -o IdentitiesOnly=yes -o BatchMode=yes"),
        );
    }
    if let Some(file) = &remote.token_file {
        let token =
            zeroize::Zeroizing::new(mesh_store::secret::read_secret(file).map_err(|source| {
                Error::Invalid {
                    what: format!("the token {}", file.display()),
                    source: Some(Box::new(source)),
                }
            })?);
        let basic = zeroize::Zeroizing::new(
            base64::engine::general_purpose::STANDARD.encode(format!("oauth2:{}", *token)),
        );
        command
            .env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "http.extraHeader")
            .env(
                "GIT_CONFIG_VALUE_0",
                format!("Authorization: Basic {}", *basic),
            );
    }
    let out = command.output().map_err(|source| Error::Git {
        repo: dir.to_owned(),
        doing: format!("running git in {}", dir.display()),
        source: Some(Box::new(source)),
    })?;
    if !out.status.success() {
        return Err(Error::Git {
            repo: dir.to_owned(),
            doing: format!(
                "`git {}` in {} failed: {}",
                args.first().copied().unwrap_or_default(),
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            source: None,
        });
    }
    Ok(out.stdout)
}

/// The branch `remote`'s `HEAD` names (what `repo add URL` registers without `--branch`).
///
/// # Errors
/// [`Error::Git`] when it cannot be listed or names none.
pub(crate) fn default_branch(dir: &Path, remote: &Remote) -> Result<String> {
    let listed = git(dir, remote, &["ls-remote", "--symref", &remote.url, "HEAD"])?;
    String::from_utf8_lossy(&listed)
        .lines()
        .find_map(|line| {
            line.strip_prefix("ref: refs/heads/")
                .and_then(|rest| rest.split('\t').next())
                .map(str::to_owned)
        })
        .ok_or_else(|| Error::Given {
            option: crate::error::Given::Branch,
            value: None,
            why: format!("{} names no default branch", remote.url),
        })
}

/// Held while a clone is fetched.
static FETCHING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Fetches `branch` of `remote` into the bare clone `dir` (made when it is not there, so a
/// controller on another machine than `repo add` ran on makes its own), and answers the
/// commit the branch now points at.
///
/// # Errors
/// [`Error::Git`] with git's own message when the clone cannot be made or the fetch fails;
/// [`Error::Invalid`] when a credential file is refused.
pub(crate) fn fetch(dir: &Path, remote: &Remote, branch: &str) -> Result<String> {
    // The daemon's poller and a merge may fetch one clone at once: git would refuse the
    // second's ref update. Fetches are rare; they take turns.
    let _turn = FETCHING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !dir.join("HEAD").is_file() {
        std::fs::create_dir_all(dir).map_err(|source| Error::Git {
            repo: dir.to_owned(),
            doing: format!("making the clone {}", dir.display()),
            source: Some(Box::new(source)),
        })?;
        git(dir, remote, &["init", "--bare", "--quiet"])?;
    }
    let refspec = format!("+refs/heads/{branch}:refs/heads/{branch}");
    git(
        dir,
        remote,
        &["fetch", "--quiet", "--no-tags", "--", &remote.url, &refspec],
    )?;
    let head = git(
        dir,
        remote,
        &[
            "rev-parse",
            "--verify",
            &format!("refs/heads/{branch}^{{commit}}"),
        ],
    )?;
    Ok(String::from_utf8_lossy(&head).trim().to_owned())
}

/// Whether the clone `dir` has `commit`.
pub(crate) fn has_commit(dir: &Path, commit: &str) -> bool {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}
