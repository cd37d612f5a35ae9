//! Accounts from the name service: with root `/` the host read `etc/passwd`
//! and `etc/group` itself, so an account from LDAP or sssd was "not an account on this machine".
//! Under `/` names now go through the system's name service; under a root prefix the prefix's
//! files are read as before.
//!
//! The name service is pointed at other content than this machine's `/etc/passwd` with
//! nss_wrapper (Debian's `libnss-wrapper`, `LD_PRELOAD`ed into a child process with
//! `NSS_WRAPPER_PASSWD` and `NSS_WRAPPER_GROUP`): an account that only it knows stands for a
//! directory-service account. This binary runs without the test harness: run plainly it is the
//! test; with `MESH_NSS_CHILD` set it is the child that asks. Nothing under this machine's
//! `/etc` is read for the answer or written.

mod common;

use common::*;
use mesh_apply::{apply, Accounts, ContainerRuntimeChoice, HostConfig, ShadowUtils};
use mesh_model::report::{MachineState, Outcome};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const CHILD: &str = "MESH_NSS_CHILD";
const ACCOUNT: &str = "mesh-directory-only";
const GROUP_NAME: &str = "mesh-directory-group";

fn nss_wrapper() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("libnss_wrapper.so"))
        .chain([PathBuf::from("/usr/lib/libnss_wrapper.so")])
        .find(|path| path.is_file());
    found.unwrap_or_else(|| {
        panic!("libnss_wrapper.so is not installed: install the Debian package `libnss-wrapper`")
    })
}

/// The child: asked through the name service nss_wrapper answers for.
fn child(dir: &Path) {
    let machine_passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    assert!(
        !machine_passwd.contains(ACCOUNT),
        "this machine's /etc/passwd must not hold `{ACCOUNT}`, or the test proves nothing"
    );
    // The real root's accounts: what the name service says.
    let db = ShadowUtils::new(Path::new("/")).read().unwrap();
    assert_eq!(db.uid(ACCOUNT), Some(4242), "{db:?}");
    assert_eq!(db.gid(GROUP_NAME), Some(4343));
    assert!(db.is_member(ACCOUNT, GROUP_NAME));
    assert!(db.is_member(ACCOUNT, ACCOUNT), "by its primary group");
    assert_eq!(db.membership_problem(ACCOUNT, GROUP_NAME), None);

    // An apply under `/` (its one path inside this test's directory) owns a file by them.
    let owned = dir.join("owned");
    let config = HostConfig {
        root: PathBuf::from("/"),
        state_dir: dir.join("state"),
        containers: ContainerRuntimeChoice::Unsupported,
        ..HostConfig::default()
    };
    let resource = file_as(
        "directory",
        "owned",
        owned.to_str().unwrap(),
        "owned by a directory account\n",
        0o640,
        ACCOUNT,
        GROUP_NAME,
    );
    let report = apply(&config, &declaration(vec![resource]), 1_800_000_000).unwrap();
    assert_eq!(report.machine, MachineState::Converged, "{report:#?}");
    let meta = std::fs::metadata(&owned).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (4242, 4343));

    // Under a prefix the prefix's files answer, not the name service.
    let sandbox = Sandbox::new();
    let prefixed = ShadowUtils::new(&sandbox.config.root).read().unwrap();
    assert_eq!(prefixed.uid(ACCOUNT), None);
    assert_eq!(
        prefixed.uid("alice"),
        Some(1000),
        "the prefix's own account"
    );
    let resource = file_as(
        "directory",
        "owned",
        "/srv/owned",
        "x\n",
        0o640,
        ACCOUNT,
        GROUP_NAME,
    );
    let report = apply(&sandbox.config, &declaration(vec![resource]), 1_800_000_000).unwrap();
    match report.resources.values().next() {
        Some(Outcome::Failed { reason, .. }) => assert!(
            reason.contains(&format!("owner `{ACCOUNT}` is not an account")),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
}

fn an_account_known_only_to_the_name_service_owns_a_file_under_the_real_root() {
    let dir = tempfile::tempdir().unwrap();
    let passwd = dir.path().join("passwd");
    let group = dir.path().join("group");
    std::fs::write(
        &passwd,
        format!("root:x:0:0:root:/root:/bin/sh\n{ACCOUNT}:x:4242:4242::/nonexistent:/bin/false\n"),
    )
    .unwrap();
    std::fs::write(
        &group,
        format!("root:x:0:\n{ACCOUNT}:x:4242:\n{GROUP_NAME}:x:4343:{ACCOUNT}\n"),
    )
    .unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .env(CHILD, dir.path())
        .env("LD_PRELOAD", nss_wrapper())
        .env("NSS_WRAPPER_PASSWD", &passwd)
        .env("NSS_WRAPPER_GROUP", &group)
        .output()
        .expect("the test binary re-runs itself");
    assert!(
        out.status.success(),
        "the child failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn main() {
    if let Some(dir) = std::env::var_os(CHILD) {
        child(Path::new(&dir));
        return;
    }
    mesh_test_support::harness::run(&[(
        "an_account_known_only_to_the_name_service_owns_a_file_under_the_real_root",
        an_account_known_only_to_the_name_service_owns_a_file_under_the_real_root,
    )]);
}
