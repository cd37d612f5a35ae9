//! Catalogue repositories: the record `repo add` keeps, and reading a catalogue out of git at a
//! commit — with real `git`, straight from the object database: no checkout, no temporary
//! directory.
//!
//! Start at [`RepoRecord`] (`<home>/repos/<name>.json`), then [`catalogue_at`] (every module
//! directory's entries at a commit, from `git ls-tree` and `git cat-file --batch`) and
//! [`changed_paths`] (`git diff --name-only --no-renames -z`, read whole: the incident behind
//! “Changed paths name their modules”).
//!
//! # Invariants
//! - Git is only read: nothing here writes to a repository or its working tree.
//! - A symbolic link in git (mode `120000`) is read as [`EntryKind::Symlink`] and a submodule as
//!   [`EntryKind::Other`], so validation and archiving refuse them as they would on disk.

use crate::catalogue::remote::{self, Remote};
use crate::error::{BoxError, Error, Result};
use crate::home::Home;
use mesh_model::module::{CatalogueSource, EntryKind};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The format version of a repository record.
pub(crate) const REPO_FORMAT: u32 = 1;

/// A registered catalogue repository (disk format, version [`REPO_FORMAT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RepoRecord {
    /// Format version.
    pub format: u32,
    /// The name merges use (`merge NAME`).
    pub name: String,
    /// Where the repository is (absolute).
    pub path: PathBuf,
    /// The branch merges are heard on.
    pub branch: String,
    /// The directory holding the module directories, relative to the repository root.
    pub modules_dir: String,
    /// The commit of the newest plan made for this repository and branch (`None`: never
    /// planned; the first merge plans every module).
    pub last_planned: Option<String>,
    /// The file holding the secret its webhooks are signed with (`repo add
    /// --hook-secret-file`; mode 0600): read when a webhook comes, never copied into the
    /// records. `None`: it takes no webhooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_secret_file: Option<PathBuf>,
    /// Where it is fetched from, when it was registered by URL: `path` is then the bare clone
    /// the controller keeps under the home.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<Remote>,
}

/// The registered repositories' records ([`crate::home::keys`]): `repos/<name>.json`, one a
/// repository.
#[derive(Clone, Copy)]
pub struct RepoStore<'h> {
    home: &'h Home,
}

impl Home {
    /// The registered repositories' records.
    pub fn repos(&self) -> RepoStore<'_> {
        RepoStore { home: self }
    }
}

impl RepoStore<'_> {
    /// A registered repository, or an error naming the ones there are.
    pub fn get(&self, name: &str) -> Result<RepoRecord> {
        let found = if mesh_model::module::is_valid_name(name) {
            self.home
                .read_record(&repo_key(name), "a repository record", REPO_FORMAT)?
        } else {
            None
        };
        match found {
            Some(record) => Ok(record),
            None => {
                let known: Vec<String> = self.all()?.into_iter().map(|r| r.name).collect();
                Err(Error::invalid(format!(
                    "no repository `{name}` is registered (registered: {}); add it with `repo add {name} PATH`",
                    if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                )))
            }
        }
    }

    /// Every registered repository, by name.
    pub fn all(&self) -> Result<Vec<RepoRecord>> {
        self.home
            .json_stems("repos")?
            .iter()
            .map(|n| self.get(n))
            .collect()
    }

    /// Writes a repository record.
    pub fn write(&self, record: &RepoRecord) -> Result<()> {
        self.home.put_json(&repo_key(&record.name), record)
    }
}

fn repo_key(name: &str) -> String {
    format!("repos/{name}.json")
}

/// How a repository is registered (`repo add`), beyond its name and where it is.
#[derive(Debug, Clone, Default)]
pub struct AddOptions {
    /// The branch merges are heard on (default: the repository's current branch).
    pub branch: Option<String>,
    /// The directory holding the module directories, relative to the repository's root.
    pub modules_dir: String,
    /// The file holding its webhooks' secret (mode 0600: refused when others may read it).
    pub hook_secret_file: Option<PathBuf>,
    /// The daemon fetches it every so many seconds (the repository is then kept as a clone,
    /// as one given by URL is).
    pub poll_secs: Option<u64>,
    /// The SSH key it is fetched with (mode 0600).
    pub ssh_key_file: Option<PathBuf>,
    /// The token file it is fetched with over HTTPS (mode 0600).
    pub token_file: Option<PathBuf>,
}

/// The bare clone kept for repository `name` registered by URL.
pub(crate) fn clone_dir(home: &Home, name: &str) -> PathBuf {
    home.root().join("repos").join(format!("{name}.git"))
}

/// Reads a webhook secret file: its text, after checking its mode (the error names the file,
/// never what it holds).
///
/// # Errors
/// [`Error::Invalid`] naming the repository and the file: others may read it, it is empty or
/// cannot be read.
pub(crate) fn read_hook_secret(repo: &str, file: &Path) -> Result<String> {
    mesh_store::secret::read_secret(file).map_err(|source| Error::Invalid {
        what: format!("the webhook secret of repository `{repo}`"),
        source: Some(Box::new(source)),
    })
}

/// Registers a repository: checks that it is a git repository with the branch, and records it.
pub fn add(
    home: &Home,
    name: &str,
    path: &Path,
    branch: Option<&str>,
    modules_dir: &str,
) -> Result<RepoRecord> {
    add_with(
        home,
        name,
        path,
        &AddOptions {
            branch: branch.map(str::to_owned),
            modules_dir: modules_dir.to_owned(),
            ..AddOptions::default()
        },
    )
}

/// As [`add`], with every option `repo add` takes.
pub fn add_with(home: &Home, name: &str, path: &Path, options: &AddOptions) -> Result<RepoRecord> {
    let (branch, modules_dir) = (options.branch.as_deref(), options.modules_dir.as_str());
    home.require()?;
    if modules_dir.trim_matches('/').is_empty() || modules_dir.split('/').any(|p| p == "..") {
        return Err(Error::invalid(format!(
            "`{modules_dir}` is not a directory inside the repository"
        )));
    }
    if !mesh_model::module::is_valid_name(name) {
        return Err(Error::invalid(format!(
            "`{name}` is not a repository name: use [a-z0-9][a-z0-9_-]*"
        )));
    }
    if home.get(&repo_key(name))?.is_some() {
        return Err(Error::refused(format!(
            "a repository `{name}` is already registered; nothing was changed"
        )));
    }
    let location = path.to_string_lossy().into_owned();
    if remote::is_url(&location) || options.poll_secs.is_some() {
        return add_remote(home, name, &location, options);
    }
    let path = std::fs::canonicalize(path).map_err(|source| Error::Invalid {
        what: format!("repository `{name}`: {} does not exist", path.display()),
        source: Some(Box::new(source)),
    })?;
    let branch = match branch {
        Some(branch) => branch.to_owned(),
        None => String::from_utf8(git(&path, &["symbolic-ref", "--short", "HEAD"])?)
            .map_err(|source| git_failed(&path, "the branch name is not UTF-8", source))?
            .trim()
            .to_owned(),
    };
    resolve(&path, &branch).map_err(|source| Error::Invalid {
        what: format!("repository `{name}` has no branch `{branch}`"),
        source: Some(Box::new(source)),
    })?;
    let record = RepoRecord {
        format: REPO_FORMAT,
        name: name.to_owned(),
        path,
        branch,
        modules_dir: modules_dir.trim_matches('/').to_owned(),
        last_planned: None,
        hook_secret_file: checked_hook_secret(name, options)?,
        remote: None,
    };
    home.repos().write(&record)?;
    Ok(record)
}

fn checked_hook_secret(name: &str, options: &AddOptions) -> Result<Option<PathBuf>> {
    let Some(file) = &options.hook_secret_file else {
        return Ok(None);
    };
    read_hook_secret(name, file)?;
    Ok(Some(std::fs::canonicalize(file).map_err(|source| {
        Error::Invalid {
            what: format!("repository `{name}`: {} does not exist", file.display()),
            source: Some(Box::new(source)),
        }
    })?))
}

/// Registers a repository by URL (or a path to poll): its branch fetched into a bare clone
/// under the home. A failure leaves no clone and no record.
fn add_remote(home: &Home, name: &str, location: &str, options: &AddOptions) -> Result<RepoRecord> {
    let absolute = |file: &Option<PathBuf>| -> Result<Option<PathBuf>> {
        file.as_ref()
            .map(|f| {
                std::fs::canonicalize(f).map_err(|source| Error::Invalid {
                    what: format!("repository `{name}`: {} does not exist", f.display()),
                    source: Some(Box::new(source)),
                })
            })
            .transpose()
    };
    let url = if remote::is_url(location) {
        location.to_owned()
    } else {
        absolute(&Some(PathBuf::from(location)))?
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    };
    if options.poll_secs == Some(0) {
        return Err(Error::Given {
            option: crate::error::Given::PollInterval,
            value: Some("0".to_owned()),
            why: "poll every 1 second or more".to_owned(),
        });
    }
    let remote = Remote {
        url,
        poll_secs: options.poll_secs,
        ssh_key_file: absolute(&options.ssh_key_file)?,
        token_file: absolute(&options.token_file)?,
    };
    remote::check_credentials(name, &remote)?;
    let hook_secret_file = checked_hook_secret(name, options)?;
    let dir = clone_dir(home, name);
    let made = (|| {
        let branch = match &options.branch {
            Some(branch) => branch.clone(),
            None => remote::default_branch(home.root(), &remote)?,
        };
        remote::fetch(&dir, &remote, &branch)?;
        Ok::<_, Error>(branch)
    })();
    let branch = match made {
        Ok(branch) => branch,
        Err(error) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(Error::Invalid {
                what: format!("repository `{name}` could not be fetched from {location}"),
                source: Some(Box::new(error)),
            });
        }
    };
    let record = RepoRecord {
        format: REPO_FORMAT,
        name: name.to_owned(),
        path: dir,
        branch,
        modules_dir: options.modules_dir.trim_matches('/').to_owned(),
        last_planned: None,
        hook_secret_file,
        remote: Some(remote),
    };
    home.repos().write(&record)?;
    Ok(record)
}

/// The commit a merge of `repo` names: `commit`, or the branch's head. A repository kept as a
/// clone is fetched first when it has not got the commit (or to read the head).
///
/// # Errors
/// [`Error::Git`] when the fetch fails or the commit is not one of the repository's.
pub(crate) fn resolve_merged(repo: &RepoRecord, commit: Option<&str>) -> Result<String> {
    if let Some(remote) = &repo.remote {
        match commit {
            None => return remote::fetch(&repo.path, remote, &repo.branch),
            Some(commit) if !remote::has_commit(&repo.path, commit) => {
                remote::fetch(&repo.path, remote, &repo.branch)?;
            }
            Some(_) => {}
        }
    }
    resolve(&repo.path, commit.unwrap_or(&repo.branch))
}

/// A git failure in `repo`: `doing` says what, `source` why.
fn git_failed(repo: &Path, doing: impl Into<String>, source: impl Into<BoxError>) -> Error {
    Error::Git {
        repo: repo.to_owned(),
        doing: doing.into(),
        source: Some(source.into()),
    }
}

/// A git failure in `repo` that git itself said (`doing` carries it).
fn git_said(repo: &Path, doing: String) -> Error {
    Error::Git {
        repo: repo.to_owned(),
        doing,
        source: None,
    }
}

/// Runs `git -C REPO ARGS`, returning standard output; an error carries git's own message.
///
/// # Errors
/// [`Error::Git`] when git cannot be run or fails.
pub(crate) fn git(repo: &Path, args: &[&str]) -> Result<Vec<u8>> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| git_failed(repo, format!("running git in {}", repo.display()), source))?;
    if !out.status.success() {
        return Err(git_said(
            repo,
            format!(
                "`git {}` in {} failed: {}",
                args.join(" "),
                repo.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    Ok(out.stdout)
}

/// The full commit id a revision names.
pub fn resolve(repo: &Path, revision: &str) -> Result<String> {
    let out = git(
        repo,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{revision}^{{commit}}"),
        ],
    )
    .map_err(|source| {
        git_failed(
            repo,
            format!("`{revision}` is not a commit of {}", repo.display()),
            source,
        )
    })?;
    Ok(String::from_utf8(out)
        .map_err(|source| git_failed(repo, "git named a commit that is not UTF-8", source))?
        .trim()
        .to_owned())
}

/// The commit a registered repository's branch points at (fetched first, for one kept as a
/// clone).
///
/// # Errors
/// [`Error::Git`] naming the repository when the branch cannot be read.
pub(crate) fn head(repo: &RepoRecord) -> Result<String> {
    resolve_merged(repo, None).map_err(|source| Error::Git {
        repo: repo.path.clone(),
        doing: format!(
            "reading the head of branch `{}` of repository `{}`",
            repo.branch, repo.name
        ),
        source: Some(Box::new(source)),
    })
}

/// Every path that differs between two commits (added, changed, removed; a rename is its old
/// and its new path), read whole.
pub fn changed_paths(repo: &Path, from: &str, to: &str) -> Result<Vec<String>> {
    let out = git(
        repo,
        &["diff", "--name-only", "--no-renames", "-z", from, to, "--"],
    )?;
    split_z(repo, &out)
}

fn split_z(repo: &Path, bytes: &[u8]) -> Result<Vec<String>> {
    bytes
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| {
            String::from_utf8(p.to_vec())
                .map_err(|source| git_failed(repo, "git named a path that is not UTF-8", source))
        })
        .collect()
}

/// The catalogue at `commit`: every directory under `modules_dir` is a module directory, read
/// from git's objects (`ls-tree -r -t -z` for the entries, one `cat-file --batch` for every
/// blob).
pub fn catalogue_at(repo: &Path, commit: &str, modules_dir: &str) -> Result<CatalogueSource> {
    let modules_dir = modules_dir.trim_end_matches('/');
    let listing = git(
        repo,
        &[
            "ls-tree",
            "-r",
            "-t",
            "-z",
            "--full-tree",
            commit,
            "--",
            &format!("{modules_dir}/"),
        ],
    )?;
    let prefix = format!("{modules_dir}/");
    let mut source = CatalogueSource {
        prefix: modules_dir.to_owned(),
        ..CatalogueSource::default()
    };
    // (module, relative path, mode, object) for every blob to read.
    let mut blobs: Vec<(String, String, String, String)> = Vec::new();
    for line in split_z(repo, &listing)? {
        let (meta, path) = line
            .split_once('\t')
            .ok_or_else(|| git_said(repo, format!("unexpected `git ls-tree` line: {line}")))?;
        let mut fields = meta.split(' ');
        let (Some(mode), Some(_kind), Some(object)) = (fields.next(), fields.next(), fields.next())
        else {
            return Err(git_said(
                repo,
                format!("unexpected `git ls-tree` line: {line}"),
            ));
        };
        let Some(rest) = path.strip_prefix(&prefix) else {
            continue;
        };
        let (module, relative) = match rest.split_once('/') {
            Some((module, relative)) => (module, relative),
            None => (rest, ""),
        };
        if relative.is_empty() {
            if mode == "040000" {
                source.modules.entry(module.to_owned()).or_default();
            }
            // A plain file beside the module directories (a README) is not a module.
            continue;
        }
        let tree = source.modules.entry(module.to_owned()).or_default();
        match mode {
            "040000" => {
                tree.entries
                    .insert(relative.to_owned(), EntryKind::Directory);
            }
            "100644" | "100755" | "120000" => blobs.push((
                module.to_owned(),
                relative.to_owned(),
                mode.to_owned(),
                object.to_owned(),
            )),
            _ => {
                tree.entries.insert(relative.to_owned(), EntryKind::Other);
            }
        }
    }
    let contents = cat_blobs(repo, blobs.iter().map(|(_, _, _, o)| o.as_str()))?;
    for ((module, relative, mode, _), bytes) in blobs.into_iter().zip(contents) {
        let entry = match mode.as_str() {
            "120000" => EntryKind::Symlink {
                target: String::from_utf8_lossy(&bytes).into_owned(),
            },
            _ => EntryKind::File {
                bytes,
                executable: mode == "100755",
            },
        };
        source
            .modules
            .entry(module)
            .or_default()
            .entries
            .insert(relative, entry);
    }
    Ok(source)
}

/// Reads blobs with one `git cat-file --batch`, in the order asked.
fn cat_blobs<'o>(repo: &Path, objects: impl Iterator<Item = &'o str>) -> Result<Vec<Vec<u8>>> {
    let input: String = objects.map(|o| format!("{o}\n")).collect();
    if input.is_empty() {
        return Ok(Vec::new());
    }
    let mut child = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["cat-file", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| {
            git_failed(
                repo,
                format!("running `git cat-file --batch` in {}", repo.display()),
                source,
            )
        })?;
    let reading = |source: std::io::Error| {
        git_failed(repo, "reading what `git cat-file --batch` answered", source)
    };
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| git_said(repo, "git's standard input was not made".to_owned()))?;
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| git_said(repo, "git's standard output was not made".to_owned()))?;
    let mut reader = BufReader::new(stdout);
    let mut out = Vec::new();
    let mut header = String::new();
    loop {
        header.clear();
        if reader.read_line(&mut header).map_err(reading)? == 0 {
            break;
        }
        let answered = || format!("`git cat-file --batch` answered `{}`", header.trim_end());
        let fields: Vec<&str> = header.trim_end().split(' ').collect();
        if fields.len() != 3 {
            return Err(git_said(repo, answered()));
        }
        let size: usize = fields[2]
            .parse()
            .map_err(|source| git_failed(repo, answered(), source))?;
        let mut bytes = vec![0; size + 1];
        reader.read_exact(&mut bytes).map_err(reading)?;
        bytes.pop();
        out.push(bytes);
    }
    writer
        .join()
        .map_err(|_| {
            git_said(
                repo,
                "writing to `git cat-file --batch` panicked".to_owned(),
            )
        })?
        .map_err(|source| git_failed(repo, "writing to `git cat-file --batch`", source))?;
    let status = child.wait().map_err(reading)?;
    if !status.success() {
        return Err(git_said(
            repo,
            format!("`git cat-file --batch` in {} failed", repo.display()),
        ));
    }
    Ok(out)
}
