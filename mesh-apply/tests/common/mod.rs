//! Shared fixtures: a sandbox root with its own accounts, and resource builders.
#![allow(dead_code)]

use mesh_apply::HostConfig;
use mesh_model::declaration::{
    resource_id, Declaration, DirectorySpec, FileSpec, MembershipSpec, Resource, Spec,
};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

/// A sandbox: a root with `etc/passwd`, `etc/group`, `etc/gshadow`, `etc/shadow`, and a state
/// directory beside it.
pub struct Sandbox {
    _dir: tempfile::TempDir,
    pub config: HostConfig,
}

pub const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\
alice:x:1000:1000::/home/alice:/bin/sh\n\
bob:x:1001:1001::/home/bob:/bin/sh\n";
pub const GROUP: &str = "root:x:0:\nwheel:x:10:bob\ndocker:x:20:alice\naudio:x:29:alice,bob\n\
alice:x:1000:\nbob:x:1001:\n";
pub const GSHADOW: &str = "root:*::\nwheel:!::bob\ndocker:!::alice\naudio:!::alice,bob\n\
alice:!::\nbob:!::\n";
pub const SHADOW: &str = "root:*:19000:0:99999:7:::\nalice:!:19000:0:99999:7:::\n\
bob:!:19000:0:99999:7:::\n";

impl Sandbox {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temp dir");
        let root = dir.path().join("root");
        fs::create_dir_all(root.join("etc")).unwrap();
        fs::write(root.join("etc/passwd"), PASSWD).unwrap();
        fs::write(root.join("etc/group"), GROUP).unwrap();
        fs::write(root.join("etc/gshadow"), GSHADOW).unwrap();
        fs::write(root.join("etc/shadow"), SHADOW).unwrap();
        let config = HostConfig {
            root,
            state_dir: dir.path().join("state"),
            // These tests exercise the engine; containers under real podman are in podman.rs.
            containers: mesh_apply::ContainerRuntimeChoice::Unsupported,
            ..HostConfig::default()
        };
        Sandbox { _dir: dir, config }
    }

    /// A path under the root, from a machine path.
    pub fn path(&self, machine_path: &str) -> PathBuf {
        self.config.root.join(machine_path.trim_start_matches('/'))
    }

    pub fn write(&self, machine_path: &str, content: &str, mode: u32) {
        let path = self.path(machine_path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, content).unwrap();
        set_mode(&path, mode);
    }

    pub fn read(&self, machine_path: &str) -> String {
        fs::read_to_string(self.path(machine_path)).unwrap()
    }

    pub fn mode(&self, machine_path: &str) -> u32 {
        fs::metadata(self.path(machine_path)).unwrap().mode() & 0o7777
    }

    pub fn owner(&self, machine_path: &str) -> (u32, u32) {
        let meta = fs::metadata(self.path(machine_path)).unwrap();
        (meta.uid(), meta.gid())
    }

    pub fn exists(&self, machine_path: &str) -> bool {
        self.path(machine_path).symlink_metadata().is_ok()
    }

    /// The members listed for each group in the root's etc/group.
    pub fn groups(&self) -> BTreeMap<String, String> {
        fs::read_to_string(self.path("/etc/group"))
            .unwrap()
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f[0].to_owned(), f[3].to_owned())
            })
            .collect()
    }

    /// The groups `account` is listed in.
    pub fn groups_of(&self, account: &str) -> Vec<String> {
        self.groups()
            .into_iter()
            .filter(|(_, members)| members.split(',').any(|m| m == account))
            .map(|(g, _)| g)
            .collect()
    }
}

pub fn set_mode(path: &Path, mode: u32) {
    fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
}

pub fn file(module: &str, name: &str, path: &str, content: &str) -> Resource {
    file_as(module, name, path, content, 0o644, "root", "root")
}

pub fn file_as(
    module: &str,
    name: &str,
    path: &str,
    content: &str,
    mode: u32,
    owner: &str,
    group: &str,
) -> Resource {
    Resource {
        id: resource_id(module, "file", name),
        module: module.to_owned(),
        together: None,
        after: Vec::new(),
        spec: Spec::File(FileSpec {
            path: path.to_owned(),
            content: Some(content.to_owned()),
            source: None,
            sealed: None,
            mode,
            owner: owner.to_owned(),
            group: group.to_owned(),
        }),
    }
}

pub fn directory(module: &str, name: &str, path: &str, mode: u32) -> Resource {
    Resource {
        id: resource_id(module, "directory", name),
        module: module.to_owned(),
        together: None,
        after: Vec::new(),
        spec: Spec::Directory(DirectorySpec {
            path: path.to_owned(),
            mode,
            owner: "root".to_owned(),
            group: "root".to_owned(),
        }),
    }
}

pub fn membership(module: &str, account: &str, group: &str) -> Resource {
    Resource {
        id: resource_id(module, "membership", &format!("{account}-{group}")),
        module: module.to_owned(),
        together: None,
        after: Vec::new(),
        spec: Spec::Membership(MembershipSpec {
            account: account.to_owned(),
            group: group.to_owned(),
        }),
    }
}

pub fn together(mut resource: Resource, group: &str) -> Resource {
    resource.together = Some(group.to_owned());
    resource
}

pub fn after(mut resource: Resource, id: &str) -> Resource {
    resource.after.push(id.to_owned());
    resource
}

pub fn declaration(resources: Vec<Resource>) -> Declaration {
    Declaration::new("node-a", resources)
}

/// A small seeded generator (splitmix64), so that a failing run names a seed that repeats it.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// Waits until `child`, run with a fail point ([`mesh_apply::progress::pause_at`]) whose release
/// file is `release`, waits at it (its `.reached` marker exists). Panics, naming `what`, when the
/// child ends first or has not reached it within five minutes (a deadline that only bounds a
/// failure).
pub fn wait_until_paused(child: &mut Child, release: &Path, what: &str) {
    let reached = mesh_apply::progress::reached_marker(release);
    let deadline = Instant::now() + Duration::from_secs(300);
    while !reached.exists() {
        if let Some(exit) = child.try_wait().unwrap() {
            panic!("the host ended ({exit}) without reaching {what}");
        }
        assert!(Instant::now() < deadline, "the host never reached {what}");
        // Only paces the looks at the condition above; the deadline bounds a failure.
        std::thread::sleep(Duration::from_millis(10));
    }
}
