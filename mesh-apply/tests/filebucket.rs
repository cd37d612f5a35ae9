//! The filebucket: a hand edit is never lost. Before the engine puts a managed file back as
//! declared over content someone changed, it keeps that content under the state directory;
//! a change the mesh itself made (a new declaration) keeps nothing, and what was found at a
//! newly declared path is kept as found, not twice.

mod common;

use common::*;
use mesh_apply::apply;
use mesh_apply::filebucket::{self, Limits};
use mesh_model::report::Outcome;

/// Far after the files' ctimes: every stamp is out of the racy margin (`stamps::RACY_NS`).
const T0: u64 = 1_800_000_000;

fn findings_of(report: &mesh_model::report::Report, resource: &str) -> Vec<String> {
    report
        .findings
        .iter()
        .filter(|f| f.resource == resource)
        .map(|f| f.message.clone())
        .collect()
}

#[test]
fn a_hand_edit_is_kept_before_it_is_put_back_and_a_declared_change_keeps_nothing() {
    let sandbox = Sandbox::new();
    let id = "web/file/conf";
    let v1 = declaration(vec![file("web", "conf", "/etc/web.conf", "port = 8080\n")]);
    let v2 = declaration(vec![file("web", "conf", "/etc/web.conf", "port = 8081\n")]);
    apply(&sandbox.config, &v1, T0).unwrap();

    // A new declaration changes the file: the mesh left what is there, nothing is kept.
    let report = apply(&sandbox.config, &v2, T0 + 10).unwrap();
    assert!(matches!(report.resources[id], Outcome::Applied { .. }));
    assert_eq!(sandbox.read("/etc/web.conf"), "port = 8081\n");
    assert_eq!(findings_of(&report, id), Vec::<String>::new());
    assert!(filebucket::list(&sandbox.config.state_dir)
        .unwrap()
        .entries
        .is_empty());

    // Changed by hand, then put back: what the person wrote is kept, and the report says where.
    sandbox.write("/etc/web.conf", "port = 9090\n", 0o644);
    let report = apply(&sandbox.config, &v2, T0 + 20).unwrap();
    assert!(matches!(report.resources[id], Outcome::Applied { .. }));
    assert_eq!(sandbox.read("/etc/web.conf"), "port = 8081\n");
    let index = filebucket::list(&sandbox.config.state_dir).unwrap();
    assert_eq!(index.entries.len(), 1);
    let kept = &index.entries[0];
    assert_eq!(
        (kept.resource.as_str(), kept.path.as_str(), kept.kept_at),
        (id, "/etc/web.conf", T0 + 20)
    );
    let findings = findings_of(&report, id);
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert!(
        findings[0].contains(&format!("kept as {}", kept.id)),
        "{findings:?}"
    );
    let (_, bytes) = filebucket::read(&sandbox.config.state_dir, &kept.id).unwrap();
    assert_eq!(bytes, b"port = 9090\n");

    // Applied again unchanged: nothing more is kept.
    apply(&sandbox.config, &v2, T0 + 30).unwrap();
    assert_eq!(
        filebucket::list(&sandbox.config.state_dir)
            .unwrap()
            .entries
            .len(),
        1
    );
}

#[test]
fn what_was_found_at_a_new_path_is_kept_as_found_not_in_the_bucket() {
    let sandbox = Sandbox::new();
    sandbox.write("/etc/motd", "the machine's own\n", 0o644);
    let report = apply(
        &sandbox.config,
        &declaration(vec![file("motd", "motd", "/etc/motd", "from the mesh\n")]),
        T0,
    )
    .unwrap();
    assert!(matches!(
        report.resources["motd/file/motd"],
        Outcome::Applied { .. }
    ));
    assert!(filebucket::list(&sandbox.config.state_dir)
        .unwrap()
        .entries
        .is_empty());
}

#[test]
fn a_hand_edit_over_the_limit_is_put_back_and_the_report_says_it_was_not_kept() {
    let sandbox = Sandbox::new();
    let id = "web/file/conf";
    let v1 = declaration(vec![file("web", "conf", "/etc/web.conf", "small\n")]);
    apply(&sandbox.config, &v1, T0).unwrap();
    let large = "x".repeat(usize::try_from(Limits::default().max_file).unwrap() + 1);
    sandbox.write("/etc/web.conf", &large, 0o644);
    let report = apply(&sandbox.config, &v1, T0 + 10).unwrap();
    assert_eq!(sandbox.read("/etc/web.conf"), "small\n");
    let findings = findings_of(&report, id);
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert!(findings[0].contains("is not kept"), "{findings:?}");
}

#[test]
fn a_filebucket_that_cannot_be_written_leaves_the_hand_edit_where_it_is() {
    let sandbox = Sandbox::new();
    let id = "web/file/conf";
    let v1 = declaration(vec![file("web", "conf", "/etc/web.conf", "declared\n")]);
    apply(&sandbox.config, &v1, T0).unwrap();
    sandbox.write("/etc/web.conf", "edited\n", 0o644);
    // A file where the bucket's directory goes: it cannot be made.
    std::fs::write(
        sandbox.config.state_dir.join(filebucket::BUCKET_DIR),
        b"not a directory",
    )
    .unwrap();
    let report = apply(&sandbox.config, &v1, T0 + 10).unwrap();
    let Outcome::Failed { reason, .. } = &report.resources[id] else {
        panic!("not failed: {:?}", report.resources[id]);
    };
    assert!(
        reason.contains("cannot keep the hand edit of `/etc/web.conf`"),
        "{reason}"
    );
    assert_eq!(sandbox.read("/etc/web.conf"), "edited\n");
}

#[test]
fn a_together_member_edited_by_hand_is_kept_too() {
    let sandbox = Sandbox::new();
    let a = "web/file/a";
    let v1 = declaration(vec![
        together(file("web", "a", "/etc/a.conf", "a\n"), "pair"),
        together(file("web", "b", "/etc/b.conf", "b\n"), "pair"),
    ]);
    apply(&sandbox.config, &v1, T0).unwrap();
    sandbox.write("/etc/a.conf", "a by hand\n", 0o644);
    let report = apply(&sandbox.config, &v1, T0 + 10).unwrap();
    assert_eq!(sandbox.read("/etc/a.conf"), "a\n");
    let index = filebucket::list(&sandbox.config.state_dir).unwrap();
    assert_eq!(index.entries.len(), 1, "{index:?}");
    assert_eq!(index.entries[0].resource, a);
    assert_eq!(findings_of(&report, a).len(), 1);
}

#[test]
fn declared_changes_right_after_a_write_keep_nothing() {
    // `now` before every file's ctime: no stamp is ever kept (the racy margin), so only what
    // the mesh remembers it left there tells a declared change from a hand edit.
    let sandbox = Sandbox::new();
    for (n, content) in ["a\n", "b\n", "c\n"].into_iter().enumerate() {
        let report = apply(
            &sandbox.config,
            &declaration(vec![file("web", "conf", "/etc/web.conf", content)]),
            1000 + n as u64,
        )
        .unwrap();
        assert_eq!(report.findings, Vec::new(), "{report:#?}");
    }
    assert!(filebucket::list(&sandbox.config.state_dir)
        .unwrap()
        .entries
        .is_empty());
}
