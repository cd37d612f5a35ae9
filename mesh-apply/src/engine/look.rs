//! What a drift examination looks with ([`crate::drift::Examiner`]), shared by each kind's drift:
//! the machine under the root, its accounts, the stat cache and the container runtime. Nothing
//! here changes the machine.

use crate::accounts::AccountDatabase;
use crate::containers::ContainerRuntime;
use crate::paths::RootPaths;
use crate::stamps::StatCache;
use sha2::{Digest as _, Sha256};
use std::fs;
use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

/// What a drift examination looks with.
pub(crate) struct Look<'l> {
    /// Machine paths under the root.
    pub(crate) paths: RootPaths,
    /// The accounts, when they could be read.
    pub(crate) accounts: Option<AccountDatabase>,
    /// What each file was when last seen as declared.
    pub(crate) cache: &'l mut StatCache,
    /// How many files were hashed.
    pub(crate) hashed: usize,
    /// Every file is hashed, whatever its stamp.
    pub(crate) full: bool,
    /// Now, in seconds since the epoch.
    pub(crate) now: u64,
    /// The containers' runtime.
    pub(crate) containers: &'l dyn ContainerRuntime,
    /// The host's prefix before a container's declared name.
    pub(crate) container_prefix: &'l str,
    /// Containers (by their names on this machine) an open window holds still.
    pub(crate) held: &'l [String],
}

/// A drift found: the field, what was left there, and what is found.
pub(crate) type Say<'s> = dyn FnMut(&str, String, String) + 's;

impl Look<'_> {
    /// The digest of the file at `full_path` (machine path `path`), hashed only when its stamp
    /// changed or every file is hashed.
    pub(crate) fn digest_of(
        &mut self,
        path: &str,
        full_path: &Path,
        meta: &fs::Metadata,
    ) -> std::io::Result<String> {
        if !self.full {
            if let Some(digest) = self.cache.known_digest(path, meta) {
                return Ok(digest.to_owned());
            }
        }
        let mut file = fs::File::open(full_path)?;
        let meta = file.metadata()?;
        let mut hasher = Sha256::new();
        let mut buffer = [0u8; 64 * 1024];
        loop {
            let n = file.read(&mut buffer)?;
            if n == 0 {
                break;
            }
            hasher.update(&buffer[..n]);
        }
        self.hashed += 1;
        let digest = mesh_model::sha256_text(hasher.finalize().into());
        self.cache.record(path, &meta, &digest, self.now);
        Ok(digest)
    }
}

/// Says a differing mode, owner or group of `meta` against what is declared.
pub(crate) fn drift_of_mode_owner(
    meta: &fs::Metadata,
    (mode, owner, group): (u32, &str, &str),
    accounts: &Option<AccountDatabase>,
    say: &mut Say<'_>,
) {
    let found = meta.mode() & 0o7777;
    if found != mode & 0o7777 {
        say("mode", format!("{mode:04o}"), format!("{found:04o}"));
    }
    let Some(db) = accounts else {
        return;
    };
    if let Some(uid) = db.uid(owner).filter(|uid| *uid != meta.uid()) {
        say(
            "owner",
            format!("{owner} ({uid})"),
            format!("uid {}", meta.uid()),
        );
    }
    if let Some(gid) = db.gid(group).filter(|gid| *gid != meta.gid()) {
        say(
            "group",
            format!("{group} ({gid})"),
            format!("gid {}", meta.gid()),
        );
    }
}
