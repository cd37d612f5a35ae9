//! The stat cache: a no-op apply and a drift examination read a file's content only
//! when its size, mtime, ctime or inode changed since it was last read or written as declared;
//! a file changed by hand keeps none of them unchanged — not even when its mtime is set back,
//! for its ctime moves (it cannot be set from user space).

mod common;

use common::*;
use mesh_apply::drift::Examiner;
use mesh_apply::{apply, NoContainerRuntime};
use mesh_model::report::{DriftAction, Outcome};
use std::fs;
use std::os::unix::fs::MetadataExt as _;

/// Far after the files' ctimes: every stamp is out of the racy margin (`stamps::RACY_NS`).
const T0: u64 = 1_800_000_000;

#[test]
fn a_file_changed_by_hand_with_its_mtime_set_back_is_still_seen_and_put_back() {
    let sandbox = Sandbox::new();
    let declaration = declaration(vec![file("app", "conf", "/etc/app.conf", "value = 1\n")]);
    let first = apply(&sandbox.config, &declaration, T0).unwrap();
    assert!(matches!(
        first.resources["app/file/conf"],
        Outcome::Applied { .. }
    ));
    let report = apply(&sandbox.config, &declaration, T0 + 60).unwrap();
    assert_eq!(report.resources["app/file/conf"], Outcome::Unchanged);

    // Unchanged: the examiner trusts the stamp the apply kept and reads nothing.
    let mut examiner = Examiner::open(&sandbox.config.state_dir);
    let drift = examiner.examine(
        &sandbox.config,
        &declaration,
        &report,
        &NoContainerRuntime,
        T0 + 61,
        false,
    );
    assert_eq!(drift, Vec::new());
    assert_eq!(
        examiner.hashed, 0,
        "a file whose stamp is unchanged is not read"
    );

    // Changed by hand in place: the same size, the same inode, the mtime set back.
    let path = sandbox.path("/etc/app.conf");
    let before = fs::metadata(&path).unwrap();
    {
        use std::io::{Seek as _, Write as _};
        let mut file = fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.seek(std::io::SeekFrom::Start(0)).unwrap();
        file.write_all(b"value = 2\n").unwrap();
        file.set_modified(before.modified().unwrap()).unwrap();
    }
    let after = fs::metadata(&path).unwrap();
    assert_eq!(
        (after.len(), after.ino(), after.mtime(), after.mtime_nsec()),
        (
            before.len(),
            before.ino(),
            before.mtime(),
            before.mtime_nsec()
        ),
        "only the ctime tells"
    );
    assert_ne!(
        (after.ctime(), after.ctime_nsec()),
        (before.ctime(), before.ctime_nsec())
    );

    let drift = examiner.examine(
        &sandbox.config,
        &declaration,
        &report,
        &NoContainerRuntime,
        T0 + 62,
        false,
    );
    assert_eq!(examiner.hashed, 1);
    assert_eq!(drift.len(), 1, "{drift:#?}");
    assert_eq!(drift[0].resource, "app/file/conf");
    assert_eq!(drift[0].field, "content");
    assert_eq!(drift[0].action, DriftAction::Corrected);

    // The no-op apply sees it too (its stamp no longer matches) and puts it back.
    let corrected = apply(&sandbox.config, &declaration, T0 + 63).unwrap();
    assert_eq!(
        corrected.resources["app/file/conf"],
        Outcome::Applied {
            changed: vec!["content".into()]
        }
    );
    assert_eq!(sandbox.read("/etc/app.conf"), "value = 1\n");
}

#[test]
fn a_full_check_reads_every_file_whatever_its_stamp() {
    let sandbox = Sandbox::new();
    let declaration = declaration(vec![
        file("app", "a", "/etc/a.conf", "a\n"),
        file("app", "b", "/etc/b.conf", "b\n"),
    ]);
    apply(&sandbox.config, &declaration, T0).unwrap();
    let report = apply(&sandbox.config, &declaration, T0 + 60).unwrap();
    let mut examiner = Examiner::open(&sandbox.config.state_dir);
    let examine = |examiner: &mut Examiner, full| {
        examiner.examine(
            &sandbox.config,
            &declaration,
            &report,
            &NoContainerRuntime,
            T0 + 61,
            full,
        )
    };
    assert_eq!(examine(&mut examiner, false), Vec::new());
    assert_eq!(examiner.hashed, 0);
    assert_eq!(examine(&mut examiner, true), Vec::new());
    assert_eq!(examiner.hashed, 2);
}
