//! Accounts and groups of the machine under the root prefix, and group memberships (the rule “A
//! group membership is its own resource”).
//!
//! Under the real root (`/`) names are resolved through the system's name service (`nix`'s
//! `User::from_name` and `Group::from_name`: whatever nsswitch says — the files, LDAP, sssd), so
//! an account that lives only in a directory service is an account. Under a root prefix the
//! name service cannot answer (it answers for this process's machine, never for a prefix), so
//! the prefix's `etc/passwd` and `etc/group` are parsed. Changing a membership runs
//! shadow-utils' `gpasswd [--root DIR]`, so `etc/group` and `etc/gshadow` stay consistent and
//! locked the way the system's own tools lock them. Nothing here ever rewrites an account's list
//! of groups: only one membership is added or removed at a time.

use mesh_model::declaration::AccountSpec;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

/// An account in `etc/passwd`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserEntry {
    /// Its uid.
    pub uid: u32,
    /// Its primary group's gid.
    pub gid: u32,
}

/// A group in `etc/group`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEntry {
    /// Its gid.
    pub gid: u32,
    /// Its listed (supplementary) members.
    pub members: BTreeSet<String>,
}

/// Where an [`AccountDatabase`] answers from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AccountSource {
    /// The parsed `etc/passwd` and `etc/group` of a root prefix. The default.
    #[default]
    Files,
    /// The system's name service (nsswitch): the real root's accounts, wherever they live.
    NameService,
}

/// The accounts and groups of a machine, as read at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccountDatabase {
    /// Accounts by name (the parsed files; empty when answered by the name service).
    pub users: BTreeMap<String, UserEntry>,
    /// Groups by name (likewise).
    pub groups: BTreeMap<String, GroupEntry>,
    /// Where names are resolved.
    pub source: AccountSource,
}

impl AccountDatabase {
    /// The database of the real root: every name resolved through the system's name service
    /// when asked.
    pub fn name_service() -> Self {
        AccountDatabase {
            source: AccountSource::NameService,
            ..AccountDatabase::default()
        }
    }

    /// Where accounts are looked up, for messages: `etc/passwd` or `the name service`.
    pub fn where_accounts(&self) -> &'static str {
        match self.source {
            AccountSource::Files => "etc/passwd",
            AccountSource::NameService => "the name service",
        }
    }

    /// Where groups are looked up, for messages: `etc/group` or `the name service`.
    pub fn where_groups(&self) -> &'static str {
        match self.source {
            AccountSource::Files => "etc/group",
            AccountSource::NameService => "the name service",
        }
    }

    /// An account by name. A name-service lookup that fails (a directory service down) is no
    /// account: what depends on it fails and is tried again.
    pub fn user(&self, name: &str) -> Option<UserEntry> {
        match self.source {
            AccountSource::Files => self.users.get(name).cloned(),
            AccountSource::NameService => {
                nix::unistd::User::from_name(name)
                    .ok()
                    .flatten()
                    .map(|user| UserEntry {
                        uid: user.uid.as_raw(),
                        gid: user.gid.as_raw(),
                    })
            }
        }
    }

    /// A group by name (as [`AccountDatabase::user`]).
    pub fn group(&self, name: &str) -> Option<GroupEntry> {
        match self.source {
            AccountSource::Files => self.groups.get(name).cloned(),
            AccountSource::NameService => {
                nix::unistd::Group::from_name(name)
                    .ok()
                    .flatten()
                    .map(|group| GroupEntry {
                        gid: group.gid.as_raw(),
                        members: group.mem.into_iter().collect(),
                    })
            }
        }
    }

    /// Parses `etc/passwd` and `etc/group` text (malformed lines are ignored, as libc does).
    pub fn parse(passwd: &str, group: &str) -> Self {
        let mut db = AccountDatabase::default();
        for line in passwd.lines() {
            let fields: Vec<&str> = line.split(':').collect();
            if let [name, _, uid, gid, ..] = fields.as_slice() {
                if let (Ok(uid), Ok(gid)) = (uid.parse(), gid.parse()) {
                    db.users.insert((*name).to_owned(), UserEntry { uid, gid });
                }
            }
        }
        for line in group.lines() {
            let fields: Vec<&str> = line.split(':').collect();
            if let [name, _, gid, members] = fields.as_slice() {
                if let Ok(gid) = gid.parse() {
                    let members = members
                        .split(',')
                        .filter(|m| !m.is_empty())
                        .map(str::to_owned)
                        .collect();
                    db.groups
                        .insert((*name).to_owned(), GroupEntry { gid, members });
                }
            }
        }
        db
    }

    /// The uid of an account. `root` is uid 0 even where the root holds no `etc/passwd` (an
    /// empty sandbox root).
    pub fn uid(&self, name: &str) -> Option<u32> {
        match self.user(name) {
            Some(user) => Some(user.uid),
            None if name == "root" => Some(0),
            None => None,
        }
    }

    /// The gid of a group. `root` is gid 0 even where the root holds no `etc/group`.
    pub fn gid(&self, name: &str) -> Option<u32> {
        match self.group(name) {
            Some(group) => Some(group.gid),
            None if name == "root" => Some(0),
            None => None,
        }
    }

    /// The name of the account with uid `uid`, if there is one.
    pub fn user_with_uid(&self, uid: u32) -> Option<String> {
        match self.source {
            AccountSource::Files => self
                .users
                .iter()
                .find(|(_, user)| user.uid == uid)
                .map(|(name, _)| name.clone()),
            AccountSource::NameService => nix::unistd::User::from_uid(uid.into())
                .ok()
                .flatten()
                .map(|user| user.name),
        }
    }

    /// The name of the group with gid `gid`, if there is one.
    pub fn group_with_gid(&self, gid: u32) -> Option<String> {
        match self.source {
            AccountSource::Files => self
                .groups
                .iter()
                .find(|(_, group)| group.gid == gid)
                .map(|(name, _)| name.clone()),
            AccountSource::NameService => nix::unistd::Group::from_gid(gid.into())
                .ok()
                .flatten()
                .map(|group| group.name),
        }
    }

    /// Whether `account` is in `group`, as a listed member or by its primary group.
    pub fn is_member(&self, account: &str, group: &str) -> bool {
        let Some(entry) = self.group(group) else {
            return false;
        };
        entry.members.contains(account) || self.user(account).is_some_and(|u| u.gid == entry.gid)
    }

    /// Why `account` cannot be put in `group`, if it cannot.
    pub fn membership_problem(&self, account: &str, group: &str) -> Option<String> {
        if self.user(account).is_none() {
            Some(format!(
                "account `{account}` does not exist ({})",
                self.where_accounts()
            ))
        } else if self.group(group).is_none() {
            Some(format!(
                "group `{group}` does not exist ({})",
                self.where_groups()
            ))
        } else {
            None
        }
    }
}

/// Errors reading accounts or changing a membership.
#[derive(Debug, thiserror::Error)]
pub enum AccountsError {
    /// An account file could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A shadow-utils command could not be started.
    #[error("cannot run `{program}`")]
    Spawn {
        /// The program.
        program: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A shadow-utils command failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// What it said.
        stderr: String,
    },
}

/// The seam for accounts: read the database, add or remove one membership.
///
/// # Guarantees (of every implementation)
/// `add_membership` and `remove_membership` change only the one membership named; the account's
/// other groups and every other account are left as they were.
pub trait Accounts {
    /// The accounts and groups as they are now.
    ///
    /// # Errors
    /// When the account files exist but cannot be read.
    fn read(&self) -> Result<AccountDatabase, AccountsError>;
    /// Adds `account` to `group`.
    ///
    /// # Errors
    /// When the change could not be made.
    fn add_membership(&self, account: &str, group: &str) -> Result<(), AccountsError>;
    /// Removes `account` from `group`.
    ///
    /// # Errors
    /// When the change could not be made.
    fn remove_membership(&self, account: &str, group: &str) -> Result<(), AccountsError>;
    /// Makes the system account `spec.name` and its group `spec.name`, with the ids declared.
    /// The default, for a seam that cannot: an error.
    ///
    /// # Errors
    /// When it could not be made.
    fn create_account(&self, spec: &AccountSpec) -> Result<(), AccountsError> {
        Err(AccountsError::Command {
            command: format!("useradd {}", spec.name),
            status: "not run".to_owned(),
            stderr: "these accounts cannot make an account".to_owned(),
        })
    }
    /// Removes the account `name` and its group `name`. The default: an error.
    ///
    /// # Errors
    /// When it could not be removed.
    fn remove_account(&self, name: &str) -> Result<(), AccountsError> {
        Err(AccountsError::Command {
            command: format!("userdel {name}"),
            status: "not run".to_owned(),
            stderr: "these accounts cannot remove an account".to_owned(),
        })
    }
}

/// The real [`Accounts`]: under `/` the system's name service, under a root prefix plain
/// parsing of its `etc/passwd` and `etc/group`; `gpasswd --root ROOT -a|-d ACCOUNT GROUP` for
/// changes (`--root` is omitted for `/`).
#[derive(Debug, Clone)]
pub struct ShadowUtils {
    root: PathBuf,
}

impl ShadowUtils {
    /// Accounts of the machine under `root`.
    pub fn new(root: &Path) -> Self {
        ShadowUtils {
            root: root.to_path_buf(),
        }
    }

    fn read_text(&self, name: &str) -> Result<String, AccountsError> {
        let path = self.root.join("etc").join(name);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(text),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(String::new()),
            Err(source) => Err(AccountsError::Read { path, source }),
        }
    }

    /// Runs a shadow-utils program on the root (`--prefix ROOT`, omitted for `/`).
    fn shadow(&self, program: &str, args: &[&str]) -> Result<(), AccountsError> {
        let mut command = Command::new(program);
        if self.root != Path::new("/") {
            command.arg("--prefix").arg(&self.root);
        }
        command.args(args);
        let output = command.output().map_err(|source| AccountsError::Spawn {
            program: program.to_owned(),
            source,
        })?;
        if output.status.success() {
            Ok(())
        } else {
            Err(AccountsError::Command {
                command: format!("{program} {}", args.join(" ")),
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            })
        }
    }

    fn gpasswd(&self, flag: &str, account: &str, group: &str) -> Result<(), AccountsError> {
        let mut command = Command::new("gpasswd");
        if self.root != Path::new("/") {
            command.arg("--root").arg(&self.root);
        }
        command.args([flag, account, group]);
        let output = command.output().map_err(|source| AccountsError::Spawn {
            program: "gpasswd".to_owned(),
            source,
        })?;
        if output.status.success() {
            Ok(())
        } else {
            Err(AccountsError::Command {
                command: format!("gpasswd {flag} {account} {group}"),
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            })
        }
    }
}

impl Accounts for ShadowUtils {
    fn read(&self) -> Result<AccountDatabase, AccountsError> {
        if self.root == Path::new("/") {
            return Ok(AccountDatabase::name_service());
        }
        Ok(AccountDatabase::parse(
            &self.read_text("passwd")?,
            &self.read_text("group")?,
        ))
    }

    fn add_membership(&self, account: &str, group: &str) -> Result<(), AccountsError> {
        self.gpasswd("-a", account, group)
    }

    fn remove_membership(&self, account: &str, group: &str) -> Result<(), AccountsError> {
        self.gpasswd("-d", account, group)
    }

    fn create_account(&self, spec: &AccountSpec) -> Result<(), AccountsError> {
        let name = spec.name.as_str();
        let gid = spec.gid.map(|gid| gid.to_string());
        let mut group = vec!["--system"];
        if let Some(gid) = &gid {
            group.extend(["--gid", gid]);
        }
        group.push(name);
        self.shadow("groupadd", &group)?;
        let uid = spec.uid.map(|uid| uid.to_string());
        let home = spec.home.as_deref().unwrap_or("/nonexistent");
        let shell = spec.shell.as_deref().unwrap_or("/usr/sbin/nologin");
        let mut user = vec!["--system", "--no-create-home", "--gid", name];
        if let Some(uid) = &uid {
            user.extend(["--uid", uid]);
        }
        user.extend(["--home-dir", home, "--shell", shell, name]);
        if let Err(error) = self.shadow("useradd", &user) {
            // The group alone would be an account half made: it goes again.
            let _ = self.shadow("groupdel", &[name]);
            return Err(error);
        }
        Ok(())
    }

    fn remove_account(&self, name: &str) -> Result<(), AccountsError> {
        self.shadow("userdel", &[name])?;
        self.shadow("groupdel", &[name])
    }
}

#[cfg(test)]
mod tests {
    use super::AccountDatabase;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n\
                          broken line\n";
    const GROUP: &str = "root:x:0:\nalice:x:1000:\ndocker:x:20:alice,bob\nempty:x:30:\n";

    #[test]
    fn membership_is_listed_or_primary() {
        let db = AccountDatabase::parse(PASSWD, GROUP);
        assert!(db.is_member("alice", "docker"), "listed");
        assert!(db.is_member("alice", "alice"), "primary group");
        assert!(!db.is_member("alice", "empty"));
        assert!(!db.is_member("alice", "nogroup"));
        assert_eq!(db.users.len(), 2, "a malformed line is ignored");
    }

    #[test]
    fn root_resolves_even_without_account_files() {
        let db = AccountDatabase::parse("", "");
        assert_eq!((db.uid("root"), db.gid("root")), (Some(0), Some(0)));
        assert_eq!(db.uid("alice"), None);
        assert_eq!(
            db.membership_problem("alice", "docker").as_deref(),
            Some("account `alice` does not exist (etc/passwd)")
        );
    }
}
