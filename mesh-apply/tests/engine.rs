//! The engine on a sandbox root: real files, real `gpasswd --root`.

mod common;

use common::*;
use mesh_apply::{
    apply, apply_with, AccountDatabase, Accounts, AccountsError, NoContainerRuntime, Seams,
    ShadowUtils,
};
use mesh_model::declaration::{resource_id, ContainerSpec, Resource, Spec};
use mesh_model::report::{MachineState, Outcome, Report};
use std::fs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const T0: u64 = 1_800_000_000;

fn run(sandbox: &Sandbox, resources: Vec<Resource>, now: u64) -> Report {
    apply(&sandbox.config, &declaration(resources), now).expect("the apply runs")
}

fn outcome<'a>(report: &'a Report, id: &str) -> &'a Outcome {
    report
        .resources
        .get(id)
        .unwrap_or_else(|| panic!("no outcome for {id} in {report:#?}"))
}

fn applied(changed: &[&str]) -> Outcome {
    Outcome::Applied {
        changed: changed.iter().map(|s| (*s).to_owned()).collect(),
    }
}

/// Every leftover temp file under the root.
fn leftovers(sandbox: &Sandbox) -> Vec<String> {
    fn walk(dir: &std::path::Path, out: &mut Vec<String>) {
        for entry in fs::read_dir(dir).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".mesh-new") || name.ends_with(".mesh-old") {
                out.push(entry.path().display().to_string());
            }
            if entry.file_type().unwrap().is_dir() {
                walk(&entry.path(), out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&sandbox.config.root, &mut out);
    out
}

// ---- files and directories ----

#[test]
fn first_apply_creates_files_and_directories_and_the_second_reports_unchanged() {
    let sandbox = Sandbox::new();
    let resources = vec![
        directory("app", "data", "/srv/app", 0o750),
        file_as(
            "app",
            "config",
            "/srv/app/config.toml",
            "port = 80\n",
            0o640,
            "alice",
            "docker",
        ),
        file("motd", "motd", "/etc/motd", "welcome\n"),
    ];
    let first = run(&sandbox, resources.clone(), T0);
    assert_eq!(first.machine, MachineState::Converged, "{first:#?}");
    assert_eq!(first.declaration, declaration(resources.clone()).digest());
    for outcome in first.resources.values() {
        assert_eq!(outcome, &applied(&["created"]));
    }
    assert_eq!(sandbox.read("/srv/app/config.toml"), "port = 80\n");
    assert_eq!(sandbox.mode("/srv/app/config.toml"), 0o640);
    assert_eq!(sandbox.owner("/srv/app/config.toml"), (1000, 20));
    assert_eq!(sandbox.mode("/srv/app"), 0o750);
    assert_eq!(sandbox.read("/etc/motd"), "welcome\n");
    assert!(leftovers(&sandbox).is_empty());
    assert!(!mesh_apply::is_mid_change(&sandbox.config.state_dir).unwrap());

    let state_file = sandbox.config.state_dir.join("state.json");
    let written = fs::metadata(&state_file).unwrap().modified().unwrap();
    let second = run(&sandbox, resources, T0 + 60);
    assert_eq!(
        fs::metadata(&state_file).unwrap().modified().unwrap(),
        written,
        "an apply that changes nothing writes no state"
    );
    assert_eq!(second.machine, MachineState::Converged);
    assert!(
        second.resources.values().all(|o| o == &Outcome::Unchanged),
        "{second:#?}"
    );
    assert!(second.undeclared.is_empty());
}

#[test]
fn a_changed_file_names_what_differed() {
    let sandbox = Sandbox::new();
    run(&sandbox, vec![file("m", "f", "/etc/f", "one\n")], T0);
    let content = run(&sandbox, vec![file("m", "f", "/etc/f", "two\n")], T0);
    assert_eq!(outcome(&content, "m/file/f"), &applied(&["content"]));
    let mode_owner = run(
        &sandbox,
        vec![file_as("m", "f", "/etc/f", "two\n", 0o600, "bob", "wheel")],
        T0,
    );
    assert_eq!(
        outcome(&mode_owner, "m/file/f"),
        &applied(&["mode", "owner", "group"])
    );
    assert_eq!(sandbox.owner("/etc/f"), (1001, 10));
    assert_eq!(sandbox.mode("/etc/f"), 0o600);
}

#[test]
fn an_unknown_owner_fails_the_file_with_a_clear_reason_and_writes_nothing() {
    let sandbox = Sandbox::new();
    let report = run(
        &sandbox,
        vec![file_as(
            "m",
            "f",
            "/srv/f",
            "x",
            0o644,
            "nobody-here",
            "root",
        )],
        T0,
    );
    match outcome(&report, "m/file/f") {
        Outcome::Failed {
            reason,
            attempts,
            since,
        } => {
            assert!(
                reason.contains("`nobody-here` is not an account"),
                "{reason}"
            );
            assert_eq!((*attempts, *since), (1, T0));
        }
        other => panic!("expected failed, got {other:?}"),
    }
    assert_eq!(report.machine, MachineState::Partial);
    assert!(!sandbox.exists("/srv/f"));
    assert!(
        !sandbox.exists("/srv"),
        "no parent is made for a file that cannot be written"
    );
}

#[test]
fn report_of_a_mixed_apply() {
    let sandbox = Sandbox::new();
    let container = Resource {
        id: resource_id("web", "container", "web"),
        module: "web".to_owned(),
        together: None,
        after: Vec::new(),
        spec: Spec::Container(Box::new(ContainerSpec {
            name: "web".to_owned(),
            image: "localhost/busybox:latest".to_owned(),
            command: vec!["httpd".to_owned()],
            env: Default::default(),
            mounts: Vec::new(),
            restart_on: vec!["web/file/conf".to_owned()],
            settle_ms: None,
            health: None,
            ..ContainerSpec::default()
        })),
    };
    let report = run(
        &sandbox,
        vec![
            file("web", "conf", "/etc/web.conf", "listen 80\n"),
            container,
            file_as(
                "broken",
                "a",
                "/etc/broken-a",
                "a",
                0o644,
                "nobody-here",
                "root",
            ),
            after(file("broken", "b", "/etc/broken-b", "b"), "broken/file/a"),
            membership("audio", "bob", "docker"),
        ],
        T0,
    );
    insta::assert_json_snapshot!(report);
}

// ---- ownership: made, found, give-back (the rule “The host never destroys what it did not make”)
// ----

#[test]
fn undeclare_gives_back_a_file_the_mesh_wrote_over_byte_for_byte_with_mode() {
    // The rule “The host never destroys what it did not make”: what the mesh wrote over is given
    // back.
    let sandbox = Sandbox::new();
    let original: Vec<u8> = (0..=255u8).chain([0xff, 0xfe, 0x00, b'\n']).collect();
    let path = sandbox.path("/etc/app.conf");
    fs::write(&path, &original).unwrap();
    set_mode(&path, 0o604);
    std::os::unix::fs::chown(&path, Some(1000), Some(29)).unwrap();

    let report = run(
        &sandbox,
        vec![file("app", "conf", "/etc/app.conf", "mesh\n")],
        T0,
    );
    assert_eq!(
        outcome(&report, "app/file/conf"),
        &applied(&["content", "mode", "owner", "group"])
    );
    assert_eq!(sandbox.read("/etc/app.conf"), "mesh\n");

    let report = run(&sandbox, vec![], T0 + 1);
    assert!(
        matches!(report.undeclared["app/file/conf"], Outcome::Removed { .. }),
        "{report:#?}"
    );
    assert_eq!(fs::read(&path).unwrap(), original);
    assert_eq!(sandbox.mode("/etc/app.conf"), 0o604);
    assert_eq!(sandbox.owner("/etc/app.conf"), (1000, 29));
    // The kept copy is let go once given back.
    let found = sandbox.config.state_dir.join("found");
    assert_eq!(fs::read_dir(found).unwrap().count(), 0);
}

#[test]
fn undeclare_removes_a_file_the_mesh_made_and_the_parents_it_made() {
    let sandbox = Sandbox::new();
    run(
        &sandbox,
        vec![file("m", "f", "/opt/new/deep/f.txt", "x")],
        T0,
    );
    assert_eq!(sandbox.read("/opt/new/deep/f.txt"), "x");
    let report = run(&sandbox, vec![], T0);
    assert!(matches!(
        report.undeclared["m/file/f"],
        Outcome::Removed { .. }
    ));
    assert!(
        !sandbox.exists("/opt"),
        "the parents the mesh made are gone again"
    );
    assert_eq!(report.machine, MachineState::Converged);
}

#[test]
fn undeclare_keeps_a_directory_that_holds_data() {
    // The rule “The host never destroys what it did not make”: a directory's data outlives its
    // declaration.
    let sandbox = Sandbox::new();
    let resources = vec![
        directory("db", "data", "/srv/db", 0o700),
        file("db", "conf", "/srv/db/db.conf", "x"),
    ];
    run(&sandbox, resources, T0);
    sandbox.write("/srv/db/tables.dat", "rows the mesh did not write", 0o600);

    let report = run(&sandbox, vec![], T0);
    match &report.undeclared["db/directory/data"] {
        Outcome::Removed { detail } => assert!(detail.contains("holds data"), "{detail}"),
        other => panic!("{other:?}"),
    }
    assert!(
        !sandbox.exists("/srv/db/db.conf"),
        "the file the mesh made is removed"
    );
    assert_eq!(
        sandbox.read("/srv/db/tables.dat"),
        "rows the mesh did not write"
    );
}

#[test]
fn undeclare_gives_back_a_found_directorys_mode_and_never_removes_it() {
    let sandbox = Sandbox::new();
    fs::create_dir_all(sandbox.path("/srv/shared")).unwrap();
    set_mode(&sandbox.path("/srv/shared"), 0o775);
    run(
        &sandbox,
        vec![directory("m", "shared", "/srv/shared", 0o700)],
        T0,
    );
    assert_eq!(sandbox.mode("/srv/shared"), 0o700);
    run(&sandbox, vec![], T0);
    assert_eq!(sandbox.mode("/srv/shared"), 0o775);
}

#[test]
fn a_resource_moved_to_another_path_gives_back_the_old_one() {
    let sandbox = Sandbox::new();
    sandbox.write("/etc/old.conf", "theirs", 0o644);
    run(
        &sandbox,
        vec![file("m", "conf", "/etc/old.conf", "ours")],
        T0,
    );
    let report = run(
        &sandbox,
        vec![file("m", "conf", "/etc/new.conf", "ours")],
        T0,
    );
    assert_eq!(outcome(&report, "m/file/conf"), &applied(&["created"]));
    assert!(matches!(
        report.undeclared["m/file/conf"],
        Outcome::Removed { .. }
    ));
    assert_eq!(sandbox.read("/etc/old.conf"), "theirs");
    assert_eq!(sandbox.read("/etc/new.conf"), "ours");
}

// ---- symbolic links (the rule “No symbolic links to move data”) ----

#[test]
fn a_declared_path_through_a_symbolic_link_is_refused_and_nothing_is_written() {
    // The rule “No symbolic links to move data”: no symbolic links as a way to move data.
    let sandbox = Sandbox::new();
    fs::create_dir_all(sandbox.path("/srv/real")).unwrap();
    std::os::unix::fs::symlink("real", sandbox.path("/srv/link")).unwrap();
    sandbox.write("/srv/real/target", "untouched", 0o644);
    std::os::unix::fs::symlink("real/target", sandbox.path("/srv/direct")).unwrap();

    let report = run(
        &sandbox,
        vec![
            file("m", "through", "/srv/link/x.conf", "x"),
            file("m", "direct", "/srv/direct", "y"),
        ],
        T0,
    );
    match outcome(&report, "m/file/through") {
        Outcome::Failed { reason, .. } => {
            assert!(reason.contains("symbolic link `/srv/link`"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    match outcome(&report, "m/file/direct") {
        Outcome::Failed { reason, .. } => {
            assert!(reason.contains("is a symbolic link"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert!(!sandbox.path("/srv/real/x.conf").exists());
    assert_eq!(sandbox.read("/srv/real/target"), "untouched");
    assert!(sandbox
        .path("/srv/direct")
        .symlink_metadata()
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(leftovers(&sandbox).is_empty());
}

// ---- gating (the rule “An apply is not a transaction”) ----

#[test]
fn a_resource_after_a_failed_one_is_skipped_naming_it_and_the_others_apply() {
    // The rule “An apply is not a transaction” (the incident behind “Resources declared together
    // apply all-or-nothing” and “An apply is not a transaction”): every resource attempted, a gated
    // one says by what.
    let sandbox = Sandbox::new();
    sandbox.write(
        "/srv/blocker",
        "a file where a directory is declared",
        0o644,
    );
    let report = run(
        &sandbox,
        vec![
            directory("m", "dir", "/srv/blocker", 0o755),
            file("m", "inside", "/srv/blocker/f", "x"),
            after(file("m", "later", "/etc/later", "x"), "m/directory/dir"),
            file("m", "free", "/etc/free", "x"),
        ],
        T0,
    );
    assert!(matches!(
        outcome(&report, "m/directory/dir"),
        Outcome::Failed { .. }
    ));
    let gated = Outcome::Skipped {
        gated_by: "m/directory/dir".to_owned(),
    };
    assert_eq!(outcome(&report, "m/file/inside"), &gated);
    assert_eq!(outcome(&report, "m/file/later"), &gated);
    assert_eq!(outcome(&report, "m/file/free"), &applied(&["created"]));
    assert!(!sandbox.exists("/etc/later"));
}

// ---- memberships (the rule “A group membership is its own resource”) ----

#[test]
fn a_membership_the_mesh_added_is_removed_on_undeclare_and_other_groups_are_untouched() {
    // The rule “A group membership is its own resource”: one membership added, the account's other
    // groups untouched.
    let sandbox = Sandbox::new();
    let before = sandbox.groups_of("alice");
    assert_eq!(before, ["audio", "docker"]);
    let report = run(&sandbox, vec![membership("admin", "alice", "wheel")], T0);
    assert_eq!(
        outcome(&report, "admin/membership/alice-wheel"),
        &applied(&["added"])
    );
    assert_eq!(sandbox.groups_of("alice"), ["audio", "docker", "wheel"]);
    assert_eq!(sandbox.groups()["wheel"], "bob,alice", "bob stays in wheel");
    assert!(report
        .findings
        .iter()
        .any(|f| f.resource == "admin/membership/alice-wheel" && f.message.contains("new login")));
    let gshadow = fs::read_to_string(sandbox.path("/etc/gshadow")).unwrap();
    assert!(
        gshadow.contains("wheel:!::bob,alice"),
        "gshadow kept consistent: {gshadow}"
    );

    let again = run(&sandbox, vec![membership("admin", "alice", "wheel")], T0);
    assert_eq!(
        outcome(&again, "admin/membership/alice-wheel"),
        &Outcome::Unchanged
    );
    assert!(again.findings.is_empty());

    let report = run(&sandbox, vec![], T0);
    assert!(matches!(
        report.undeclared["admin/membership/alice-wheel"],
        Outcome::Removed { .. }
    ));
    assert_eq!(sandbox.groups_of("alice"), before);
    assert_eq!(sandbox.groups()["wheel"], "bob");
}

#[test]
fn a_membership_the_account_had_before_survives_undeclare() {
    // The rule “A group membership is its own resource”: undeclare removes only a membership the
    // mesh added.
    let sandbox = Sandbox::new();
    let report = run(&sandbox, vec![membership("dev", "alice", "docker")], T0);
    assert_eq!(
        outcome(&report, "dev/membership/alice-docker"),
        &Outcome::Unchanged
    );
    let report = run(&sandbox, vec![], T0);
    match &report.undeclared["dev/membership/alice-docker"] {
        Outcome::Removed { detail } => assert!(detail.contains("before the mesh"), "{detail}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(sandbox.groups_of("alice"), ["audio", "docker"]);
}

#[test]
fn a_membership_of_an_unknown_account_fails_naming_it() {
    let sandbox = Sandbox::new();
    let report = run(&sandbox, vec![membership("m", "carol", "wheel")], T0);
    match outcome(&report, "m/membership/carol-wheel") {
        Outcome::Failed { reason, .. } => assert!(reason.contains("`carol` does not exist")),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        fs::read_to_string(sandbox.path("/etc/group")).unwrap(),
        GROUP
    );
}

// ---- stuck (the rule “A resource that keeps failing is stuck”) ----

#[test]
fn a_resource_failing_repeatedly_becomes_stuck_with_its_attempts_and_first_failure() {
    // The rule “A resource that keeps failing is stuck”: a resource that keeps failing raises its
    // hand as stuck.
    let sandbox = Sandbox::new();
    let broken = || {
        vec![file_as(
            "m",
            "f",
            "/etc/f",
            "x",
            0o644,
            "nobody-here",
            "root",
        )]
    };
    let policy = sandbox.config.retry;
    let mut now = T0;
    let mut attempts = 0;
    loop {
        let report = run(&sandbox, broken(), now);
        attempts += 1;
        match outcome(&report, "m/file/f") {
            Outcome::Failed {
                attempts: a, since, ..
            } => {
                assert_eq!((*a, *since), (attempts, T0));
                assert!(!policy.is_stuck(attempts, T0, now));
            }
            Outcome::Stuck {
                attempts: a,
                since,
                last_reason,
            } => {
                assert_eq!((*a, *since), (attempts, T0));
                assert!(last_reason.contains("nobody-here"));
                break;
            }
            other => panic!("{other:?}"),
        }
        // Before the backoff has elapsed it is not tried again.
        let early = run(&sandbox, broken(), now + 1);
        assert!(matches!(
            outcome(&early, "m/file/f"),
            Outcome::Waiting { attempts: a, .. } if *a == attempts
        ));
        now += policy.backoff_secs(attempts);
        assert!(attempts < 20, "never became stuck");
    }
    assert!(attempts >= policy.stuck_after_attempts);
    // It stays stuck while it waits.
    let waiting = run(&sandbox, broken(), now + 1);
    assert!(matches!(
        outcome(&waiting, "m/file/f"),
        Outcome::Stuck { .. }
    ));
    // A changed declaration starts afresh.
    let changed = run(
        &sandbox,
        vec![file_as(
            "m",
            "f",
            "/etc/f",
            "y",
            0o644,
            "nobody-here",
            "root",
        )],
        now + 2,
    );
    assert!(matches!(
        outcome(&changed, "m/file/f"),
        Outcome::Failed { attempts: 1, .. }
    ));
    // Undeclared, its failure is forgotten: declared again later, it starts afresh.
    let state = fs::read_to_string(sandbox.config.state_dir.join("state.json")).unwrap();
    assert!(state.contains("m/file/f"));
    run(&sandbox, vec![], now + 3);
    let state = fs::read_to_string(sandbox.config.state_dir.join("state.json")).unwrap();
    assert!(!state.contains("m/file/f"), "{state}");
    // And success clears it.
    let fixed = run(&sandbox, vec![file("m", "f", "/etc/f", "y")], now + 3);
    assert_eq!(outcome(&fixed, "m/file/f"), &applied(&["created"]));
    let later = run(&sandbox, vec![file("m", "f", "/etc/f", "y")], now + 4);
    assert_eq!(outcome(&later, "m/file/f"), &Outcome::Unchanged);
}

#[test]
fn the_default_retry_policy_backs_off_and_calls_stuck_as_documented() {
    // The numbers book/src/host-engine.md states.
    let policy = mesh_apply::RetryPolicy::default();
    let waits: Vec<u64> = (1..=9).map(|n| policy.backoff_secs(n)).collect();
    assert_eq!(waits, [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]);
    assert!(!policy.is_stuck(4, T0, T0 + 10_000), "too few attempts");
    assert!(!policy.is_stuck(5, T0, T0 + 599), "too recent");
    assert!(policy.is_stuck(5, T0, T0 + 600));
}

// ---- together groups (the rule “Resources declared together apply all-or-nothing”) ----

#[test]
fn a_together_pair_whose_second_member_fails_leaves_the_first_as_it_was() {
    // The incident behind “Resources declared together apply all-or-nothing”: a watcher must never
    // observe the new first with the old second.
    let sandbox = Sandbox::new();
    let members = 200;
    let old = |i: usize| format!("old {i}\n");
    let path = |i: usize| format!("/srv/pair/m{i:03}.conf");
    for i in 0..members {
        sandbox.write(&path(i), &old(i), 0o644);
    }
    let resources: Vec<Resource> = (0..members)
        .map(|i| {
            let (owner, content) = if i == members - 1 {
                ("nobody-here", format!("new {i}\n"))
            } else {
                ("root", format!("new {i}\n"))
            };
            together(
                file_as(
                    "pair",
                    &format!("m{i:03}"),
                    &path(i),
                    &content,
                    0o644,
                    owner,
                    "root",
                ),
                "pair",
            )
        })
        .collect();

    let done = Arc::new(AtomicBool::new(false));
    let root = sandbox.config.root.clone();
    let watcher = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut seen_new = Vec::new();
            let mut looks = 0;
            while !done.load(Ordering::SeqCst) || looks == 0 {
                for i in 0..members {
                    let text = fs::read_to_string(root.join(path(i).trim_start_matches('/')))
                        .expect("a member is never missing");
                    if text != old(i) {
                        seen_new.push(text);
                    }
                }
                looks += 1;
            }
            seen_new
        })
    };
    let report = run(&sandbox, resources, T0);
    done.store(true, Ordering::SeqCst);
    let seen_new = watcher.join().unwrap();
    assert!(
        seen_new.is_empty(),
        "the watcher saw new members: {seen_new:?}"
    );

    for i in 0..members {
        assert_eq!(sandbox.read(&path(i)), old(i));
    }
    let breaker = "pair/file/m199";
    match outcome(&report, "pair/file/m000") {
        Outcome::Failed { reason, .. } => {
            assert!(reason.contains("together group `pair/pair`"), "{reason}");
            assert!(reason.contains(breaker), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(outcome(&report, breaker), Outcome::Failed { .. }));
    assert!(leftovers(&sandbox).is_empty(), "{:?}", leftovers(&sandbox));
}

/// Real accounts whose adding always fails: a commit step that breaks after others committed.
struct AddingFails(ShadowUtils);

impl Accounts for AddingFails {
    fn read(&self) -> Result<AccountDatabase, AccountsError> {
        self.0.read()
    }
    fn add_membership(&self, account: &str, group: &str) -> Result<(), AccountsError> {
        Err(AccountsError::Command {
            command: format!("gpasswd -a {account} {group}"),
            status: "exit status: 1".to_owned(),
            stderr: "injected".to_owned(),
        })
    }
    fn remove_membership(&self, account: &str, group: &str) -> Result<(), AccountsError> {
        self.0.remove_membership(account, group)
    }
}

#[test]
fn a_together_group_whose_commit_breaks_puts_back_what_was_committed() {
    // The rule “Resources declared together apply all-or-nothing”: a commit step that fails puts
    // back what was committed.
    let sandbox = Sandbox::new();
    sandbox.write("/etc/sudo.conf", "before\n", 0o640);
    let accounts = AddingFails(ShadowUtils::new(&sandbox.config.root));
    let seams = Seams {
        accounts: &accounts,
        containers: &NoContainerRuntime,
        progress: &mesh_apply::NoProgress,
    };
    let resources = vec![
        directory("admin", "dir", "/etc/admin.d", 0o755),
        together(directory("admin", "dir", "/etc/admin.d", 0o755), "grant"),
        together(file("admin", "conf", "/etc/sudo.conf", "after\n"), "grant"),
        together(
            file("admin", "new", "/etc/admin.d/new.conf", "new\n"),
            "grant",
        ),
        together(membership("admin", "alice", "wheel"), "grant"),
    ];
    let resources = resources.into_iter().skip(1).collect::<Vec<_>>();
    let report = apply_with(&sandbox.config, &declaration(resources), T0, &seams).unwrap();
    for id in ["admin/directory/dir", "admin/file/conf", "admin/file/new"] {
        match outcome(&report, id) {
            Outcome::Failed { reason, .. } => {
                assert!(
                    reason.contains("`admin/membership/alice-wheel` failed"),
                    "{reason}"
                )
            }
            other => panic!("{id}: {other:?}"),
        }
    }
    assert_eq!(sandbox.read("/etc/sudo.conf"), "before\n");
    assert_eq!(sandbox.mode("/etc/sudo.conf"), 0o640);
    assert!(!sandbox.exists("/etc/admin.d"));
    assert_eq!(sandbox.groups_of("alice"), ["audio", "docker"]);
    assert!(leftovers(&sandbox).is_empty(), "{:?}", leftovers(&sandbox));
    assert!(report.findings.is_empty(), "{:?}", report.findings);
}

#[test]
fn a_together_group_applies_whole_and_reports_each_member() {
    let sandbox = Sandbox::new();
    sandbox.write("/etc/a.conf", "old a", 0o644);
    let resources = vec![
        together(file("pair", "a", "/etc/a.conf", "new a"), "pair"),
        together(file("pair", "b", "/etc/b.conf", "new b"), "pair"),
        together(membership("pair", "alice", "wheel"), "pair"),
    ];
    let report = run(&sandbox, resources.clone(), T0);
    assert_eq!(outcome(&report, "pair/file/a"), &applied(&["content"]));
    assert_eq!(outcome(&report, "pair/file/b"), &applied(&["created"]));
    assert_eq!(
        outcome(&report, "pair/membership/alice-wheel"),
        &applied(&["added"])
    );
    assert_eq!(
        (sandbox.read("/etc/a.conf"), sandbox.read("/etc/b.conf")),
        ("new a".into(), "new b".into())
    );
    assert!(leftovers(&sandbox).is_empty());
    let again = run(&sandbox, resources, T0);
    assert!(again.resources.values().all(|o| o == &Outcome::Unchanged));
    run(&sandbox, vec![], T0);
    assert_eq!(sandbox.read("/etc/a.conf"), "old a");
    assert!(!sandbox.exists("/etc/b.conf"));
    assert_eq!(sandbox.groups_of("alice"), ["audio", "docker"]);
}

// ---- containers: a seam for later ----

#[test]
fn a_container_in_a_together_group_fails_the_group_before_anything_changes() {
    let sandbox = Sandbox::new();
    let container = Resource {
        id: resource_id("web", "container", "web"),
        module: "web".to_owned(),
        together: Some("site".to_owned()),
        after: Vec::new(),
        spec: Spec::Container(Box::new(ContainerSpec {
            name: "web".to_owned(),
            image: "localhost/busybox:latest".to_owned(),
            command: Vec::new(),
            env: Default::default(),
            mounts: Vec::new(),
            restart_on: vec!["web/file/conf".to_owned()],
            settle_ms: None,
            health: None,
            ..ContainerSpec::default()
        })),
    };
    let report = run(
        &sandbox,
        vec![
            together(file("web", "conf", "/etc/web.conf", "x"), "site"),
            container,
        ],
        T0,
    );
    match outcome(&report, "web/container/web") {
        Outcome::Failed { reason, .. } => assert_eq!(reason, "not supported yet"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        outcome(&report, "web/file/conf"),
        Outcome::Failed { .. }
    ));
    assert!(!sandbox.exists("/etc/web.conf"));
}

// ---- mid-change and the state directory ----

#[test]
fn an_interrupted_apply_is_reported_mid_change_and_the_next_apply_says_so() {
    // The rule “Resources declared together apply all-or-nothing”: mid-change is a state of its
    // own, said by the next apply.
    let sandbox = Sandbox::new();
    run(&sandbox, vec![file("m", "f", "/etc/f", "x")], T0);
    // What a host killed mid-apply leaves: the marker, and maybe a staged temp file.
    let marker = sandbox.config.state_dir.join("in-progress.json");
    fs::write(
        &marker,
        r#"{"format":1,"declaration":"sha256:00","started-at":1}"#,
    )
    .unwrap();
    sandbox.write("/etc/.f.mesh-new", "half a fi", 0o600);
    assert!(mesh_apply::is_mid_change(&sandbox.config.state_dir).unwrap());

    let report = run(&sandbox, vec![file("m", "f", "/etc/f", "x")], T0);
    assert!(report.resumed_from_mid_change);
    assert!(report
        .findings
        .iter()
        .any(|f| f.message.contains("interrupted")));
    assert_eq!(report.machine, MachineState::Converged);
    assert!(!mesh_apply::is_mid_change(&sandbox.config.state_dir).unwrap());
    assert!(leftovers(&sandbox).is_empty());
    let next = run(&sandbox, vec![file("m", "f", "/etc/f", "x")], T0);
    assert!(!next.resumed_from_mid_change);
}

#[test]
fn a_state_directory_that_cannot_be_written_changes_nothing_under_the_root() {
    let sandbox = Sandbox::new();
    let blocked = sandbox.config.root.parent().unwrap().join("not-a-dir");
    fs::write(&blocked, "a file").unwrap();
    let config = mesh_apply::HostConfig {
        state_dir: blocked,
        ..sandbox.config.clone()
    };
    let error = apply(
        &config,
        &declaration(vec![file("m", "f", "/etc/f", "x")]),
        T0,
    )
    .unwrap_err();
    assert!(
        error.to_string().contains("cannot write the host state"),
        "{error}"
    );
    assert!(!sandbox.exists("/etc/f"));
}

#[test]
fn an_invalid_declaration_is_refused_and_changes_nothing() {
    let sandbox = Sandbox::new();
    let mut declaration = declaration(vec![file("m", "f", "/etc/f", "x")]);
    declaration.resources[0]
        .after
        .push("m/file/missing".to_owned());
    let error = apply(&sandbox.config, &declaration, T0).unwrap_err();
    assert!(error.to_string().contains("m/file/missing"), "{error}");
    assert!(!sandbox.exists("/etc/f"));
    assert!(!sandbox.config.state_dir.exists());
}

#[test]
fn a_dependency_cycle_fails_its_members_and_nothing_else() {
    let sandbox = Sandbox::new();
    let report = run(
        &sandbox,
        vec![
            after(file("m", "a", "/etc/a", "a"), "m/file/b"),
            after(file("m", "b", "/etc/b", "b"), "m/file/a"),
            file("m", "c", "/etc/c", "c"),
        ],
        T0,
    );
    assert!(
        matches!(outcome(&report, "m/file/a"), Outcome::Failed { reason, .. } if reason.contains("cycle"))
    );
    assert!(matches!(
        outcome(&report, "m/file/b"),
        Outcome::Failed { .. }
    ));
    assert_eq!(outcome(&report, "m/file/c"), &applied(&["created"]));
}

// ---- live mid-change (the rule “Mid-change is said before anything changes”) ----

/// Remembers every mid-change report it is told, and what `/etc/motd` held at that moment.
struct Watching<'a> {
    sandbox: &'a Sandbox,
    told: std::sync::Mutex<Vec<(Report, String)>>,
}

impl mesh_apply::ApplyProgress for Watching<'_> {
    fn changing(&self, report: &Report) {
        let held = fs::read_to_string(self.sandbox.path("/etc/motd")).unwrap_or_default();
        self.told.lock().unwrap().push((report.clone(), held));
    }
}

#[test]
fn an_apply_says_mid_change_once_before_it_changes_anything_and_a_no_op_says_nothing() {
    let sandbox = Sandbox::new();
    sandbox.write("/etc/motd", "before\n", 0o644);
    let watching = Watching {
        sandbox: &sandbox,
        told: Default::default(),
    };
    let resources = vec![
        file("motd", "motd", "/etc/motd", "after\n"),
        file("motd", "issue", "/etc/issue", "hello\n"),
    ];
    let live = |now| {
        mesh_apply::apply_archived_live(
            &sandbox.config,
            &declaration(resources.clone()),
            &Default::default(),
            now,
            &watching,
        )
        .unwrap()
    };
    let report = live(T0);
    assert_eq!(report.machine, MachineState::Converged, "{report:#?}");
    let told = std::mem::take(&mut *watching.told.lock().unwrap());
    assert_eq!(told.len(), 1, "{told:#?}");
    let (said, held) = &told[0];
    assert_eq!(said.machine, MachineState::MidChange);
    assert_eq!(said.declaration, report.declaration);
    assert_eq!(said.started_at, T0);
    assert_eq!(held, "before\n", "told only after the file changed");

    let again = live(T0 + 1);
    assert_eq!(again.machine, MachineState::Converged);
    assert!(
        watching.told.lock().unwrap().is_empty(),
        "a no-op said mid-change"
    );
}

// ---- drift (the rule “Drift is seen, and reported even when corrected”) ----

#[test]
fn drift_is_examined_changing_nothing_and_content_is_hashed_only_when_a_stamp_changed() {
    let sandbox = Sandbox::new();
    let resources = vec![
        file("motd", "motd", "/etc/motd", "hello\n"),
        file("motd", "issue", "/etc/issue", "world\n"),
    ];
    let report = run(&sandbox, resources.clone(), T0);
    let declaration = declaration(resources);
    let mut examiner = mesh_apply::drift::Examiner::open(&sandbox.config.state_dir);
    let mut examine = |full| {
        let drift = examiner.examine(
            &sandbox.config,
            &declaration,
            &report,
            &NoContainerRuntime,
            T0 + 1,
            full,
        );
        (drift, examiner.hashed)
    };
    assert_eq!(
        examine(false),
        (Vec::new(), 0),
        "the apply kept each file's stamp as it wrote it: the first look hashes none"
    );
    assert_eq!(
        examine(false),
        (Vec::new(), 0),
        "unchanged stamps are not hashed"
    );
    assert_eq!(
        examine(true),
        (Vec::new(), 2),
        "a full check hashes every file"
    );
    fs::write(sandbox.path("/etc/motd"), "changed\n").unwrap();
    let (drift, hashed) = examine(false);
    assert_eq!(hashed, 1);
    assert_eq!(drift.len(), 1, "{drift:?}");
    assert_eq!(drift[0].resource, "motd/file/motd");
    assert_eq!(drift[0].field, "content");
    assert_eq!(drift[0].found, mesh_model::sha256_digest(b"changed\n"));
    assert_eq!(
        sandbox.read("/etc/motd"),
        "changed\n",
        "examining changes nothing"
    );
    // The cache outlives the examiner: a new one does not hash what it saw.
    let mut again = mesh_apply::drift::Examiner::open(&sandbox.config.state_dir);
    again.examine(
        &sandbox.config,
        &declaration,
        &report,
        &NoContainerRuntime,
        T0 + 2,
        false,
    );
    assert_eq!(again.hashed, 0);
}
