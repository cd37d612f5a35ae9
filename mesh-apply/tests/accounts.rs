//! Accounts a module declares, made with real shadow-utils (`useradd --prefix`) under a sandbox
//! root: fixed ids, files owned by them from the first apply, an account there adopted or
//! refused, and undeclaring that removes only what the mesh made and what owns nothing else.

mod common;

use common::*;
use mesh_apply::apply;
use mesh_model::declaration::{resource_id, AccountSpec, Resource, Spec};
use mesh_model::report::{Outcome, Report};
use std::os::unix::fs::MetadataExt as _;

const T0: u64 = 1_800_000_000;

fn run(sandbox: &Sandbox, resources: Vec<Resource>) -> Report {
    apply(&sandbox.config, &declaration(resources), T0).expect("the apply runs")
}

fn account(name: &str, ids: Option<(u32, u32)>, home: Option<&str>) -> Resource {
    Resource {
        id: resource_id("svc", "account", name),
        module: "svc".to_owned(),
        together: None,
        after: Vec::new(),
        spec: Spec::Account(AccountSpec {
            name: name.to_owned(),
            uid: ids.map(|(uid, _)| uid),
            gid: ids.map(|(_, gid)| gid),
            home: home.map(str::to_owned),
            shell: None,
        }),
    }
}

fn outcome<'a>(report: &'a Report, id: &str) -> &'a Outcome {
    report
        .resources
        .get(id)
        .or_else(|| report.undeclared.get(id))
        .unwrap_or_else(|| panic!("no outcome for {id} in {report:#?}"))
}

fn failed(report: &Report, id: &str) -> String {
    match outcome(report, id) {
        Outcome::Failed { reason, .. } => reason.clone(),
        other => panic!("{id} did not fail: {other:?}"),
    }
}

fn removed(report: &Report, id: &str) -> String {
    match outcome(report, id) {
        Outcome::Removed { detail } => detail.clone(),
        other => panic!("{id} was not given back: {other:?}"),
    }
}

#[test]
fn an_account_with_fixed_ids_is_made_and_owns_the_modules_files_from_the_first_apply() {
    let sandbox = Sandbox::new();
    let resources = || {
        vec![
            account("svc", Some((2345, 2345)), None),
            after(
                file_as("svc", "conf", "/etc/svc.conf", "x\n", 0o640, "svc", "svc"),
                "svc/account/svc",
            ),
        ]
    };
    let first = run(&sandbox, resources());
    assert_eq!(
        outcome(&first, "svc/account/svc"),
        &Outcome::Applied {
            changed: vec!["created".to_owned()]
        }
    );
    assert!(
        sandbox
            .read("/etc/passwd")
            .contains("svc:x:2345:2345::/nonexistent:/usr/sbin/nologin"),
        "{}",
        sandbox.read("/etc/passwd")
    );
    assert!(sandbox.read("/etc/group").contains("svc:x:2345:"));
    assert_eq!(sandbox.owner("/etc/svc.conf"), (2345, 2345));

    let second = run(&sandbox, resources());
    assert_eq!(outcome(&second, "svc/account/svc"), &Outcome::Unchanged);
    assert_eq!(outcome(&second, "svc/file/conf"), &Outcome::Unchanged);
}

#[test]
fn an_account_there_with_other_ids_is_refused_naming_both_and_left_as_it_was() {
    let sandbox = Sandbox::new();
    let before = sandbox.read("/etc/passwd");
    let report = run(&sandbox, vec![account("alice", Some((2345, 2345)), None)]);
    let reason = failed(&report, "svc/account/alice");
    assert!(
        reason.contains("account `alice` is there with uid 1000 and gid 1000"),
        "{reason}"
    );
    assert!(
        reason.contains("the module declares uid 2345 and gid 2345"),
        "{reason}"
    );
    assert_eq!(sandbox.read("/etc/passwd"), before);

    // Undeclared, it is still alice's own.
    let after_it = run(&sandbox, Vec::new());
    assert!(after_it.undeclared.is_empty(), "{after_it:#?}");
    assert_eq!(sandbox.read("/etc/passwd"), before);
}

#[test]
fn an_account_there_with_its_ids_is_adopted_and_never_removed() {
    let sandbox = Sandbox::new();
    let before = sandbox.read("/etc/passwd");
    let report = run(&sandbox, vec![account("alice", Some((1000, 1000)), None)]);
    assert_eq!(outcome(&report, "svc/account/alice"), &Outcome::Unchanged);
    let undeclared = run(&sandbox, Vec::new());
    let detail = removed(&undeclared, "svc/account/alice");
    assert!(
        detail.contains("kept account `alice`: it was there before the mesh"),
        "{detail}"
    );
    assert_eq!(sandbox.read("/etc/passwd"), before);
}

#[test]
fn ids_another_account_or_group_holds_are_refused_naming_it() {
    let sandbox = Sandbox::new();
    let report = run(
        &sandbox,
        vec![
            account("svc", Some((1001, 2345)), None),
            account("web", Some((2346, 29)), None),
        ],
    );
    let reason = failed(&report, "svc/account/svc");
    assert!(
        reason.contains("asks uid 1001, which is the account `bob`'s"),
        "{reason}"
    );
    let reason = failed(&report, "svc/account/web");
    assert!(
        reason.contains("asks gid 29, which is the group `audio`'s"),
        "{reason}"
    );
    assert!(!sandbox.read("/etc/passwd").contains("svc:"));
    assert!(!sandbox.read("/etc/group").contains("web:"));
}

#[test]
fn undeclaring_removes_an_account_the_mesh_made_only_when_it_owns_nothing_else() {
    let sandbox = Sandbox::new();
    let first = run(
        &sandbox,
        vec![
            account("svc", Some((2345, 2345)), Some("/srv/svc")),
            account("tmp", Some((2346, 2346)), None),
        ],
    );
    assert!(first.resources.values().all(Outcome::took), "{first:#?}");
    // Its home holds something the mesh did not put there.
    sandbox.write("/srv/svc/notes", "mine\n", 0o600);
    std::os::unix::fs::chown(sandbox.path("/srv/svc"), Some(2345), Some(2345)).unwrap();
    std::os::unix::fs::chown(sandbox.path("/srv/svc/notes"), Some(2345), Some(2345)).unwrap();

    let undeclared = run(&sandbox, Vec::new());
    let kept = removed(&undeclared, "svc/account/svc");
    assert!(
        kept.contains("kept account `svc`, which the mesh made: it owns its home `/srv/svc`"),
        "{kept}"
    );
    assert!(sandbox.read("/etc/passwd").contains("svc:x:2345:"));
    assert_eq!(
        std::fs::metadata(sandbox.path("/srv/svc/notes"))
            .unwrap()
            .uid(),
        2345
    );
    let gone = removed(&undeclared, "svc/account/tmp");
    assert!(
        gone.contains("removed account `tmp` and its group"),
        "{gone}"
    );
    assert!(!sandbox.read("/etc/passwd").contains("tmp:"));
    assert!(!sandbox.read("/etc/group").contains("tmp:"));
}
