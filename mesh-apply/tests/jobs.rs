//! Jobs under real podman: a container run to its end that must exit 0 before what comes after
//! it, run again only when what it runs changes, retried with backoff as any resource; and a
//! container run as a module account's fixed ids. Needs podman configured as
//! `scripts/podman-env.sh` does; fails, never skips, without it.

mod common;

use common::*;
use mesh_apply::{apply, ContainerRuntimeChoice};
use mesh_model::declaration::{Mount, Resource};
use mesh_model::report::{Outcome, Report};
use mesh_test_support::podman::*;
use std::process::Command;

const T0: u64 = 1_800_000_000;

fn sandbox() -> Sandbox {
    let mut sandbox = Sandbox::new();
    sandbox.config.containers = ContainerRuntimeChoice::Podman(podman_config());
    sandbox
}

fn run_at(sandbox: &Sandbox, resources: Vec<Resource>, now: u64) -> Report {
    apply(&sandbox.config, &declaration(resources), now).expect("the apply runs")
}

fn outcome<'a>(report: &'a Report, id: &str) -> &'a Outcome {
    report
        .resources
        .get(id)
        .unwrap_or_else(|| panic!("no outcome for {id} in {report:#?}"))
}

fn applied(report: &Report, id: &str) -> Vec<String> {
    match outcome(report, id) {
        Outcome::Applied { changed } => changed.clone(),
        other => panic!("{id} did not apply: {other:?}"),
    }
}

fn failed(report: &Report, id: &str) -> String {
    match outcome(report, id) {
        Outcome::Failed { reason, .. } => reason.clone(),
        other => panic!("{id} did not fail: {other:?}"),
    }
}

/// The migration's resources: its data directory, the file it runs again on, the job (which
/// writes a line to `/data/runs` each time it runs, then runs `then`), and the service after
/// it.
fn migration(job_name: &str, service_name: &str, then: &str, conf: &str) -> Vec<Resource> {
    let mut migrate = job(
        "app",
        "migrate",
        job_name,
        &format!("echo ran >> /data/runs; {then}"),
    );
    let spec = job_mut(&mut migrate);
    spec.run.mounts = vec![Mount {
        place: "data".to_owned(),
        source: "/srv/app".to_owned(),
        at: "/data".to_owned(),
        read_only: false,
    }];
    spec.rerun_on = vec!["app/file/conf".to_owned()];
    vec![
        directory("app", "data", "/srv/app", 0o755),
        file("app", "conf", "/etc/app/conf", conf),
        after(after(migrate, "app/file/conf"), "app/directory/data"),
        after(container("app", "web", service_name), "app/job/migrate"),
    ]
}

/// How many times the job ran: the lines it wrote.
fn runs(sandbox: &Sandbox) -> usize {
    if !sandbox.exists("/srv/app/runs") {
        return 0;
    }
    sandbox.read("/srv/app/runs").lines().count()
}

#[test]
fn a_failed_job_gates_its_service_until_fixed_then_runs_once_and_again_only_on_its_files() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let job_name = names.name("job-migrate");
    let service = names.name("job-web");
    let failing = "echo 'no schema to migrate' >&2; exit 1";

    // It exits 1: failed with its exit code and log tail, its service skipped, named.
    let first = run_at(
        &sandbox,
        migration(&job_name, &service, failing, "a = 1\n"),
        T0,
    );
    let reason = failed(&first, "app/job/migrate");
    assert!(
        reason.contains(&format!("job `{job_name}` exited with code 1")),
        "{reason}"
    );
    assert!(reason.contains("no schema to migrate"), "{reason}");
    assert_eq!(
        outcome(&first, "app/container/web"),
        &Outcome::Skipped {
            gated_by: "app/job/migrate".to_owned()
        }
    );
    assert_eq!(status(&sandbox.config.root, &service), None);
    assert_eq!(status(&sandbox.config.root, &job_name), None, "removed");
    assert_eq!(runs(&sandbox), 1);

    // Within its backoff it is not run again, and the service still waits.
    let waiting = run_at(
        &sandbox,
        migration(&job_name, &service, failing, "a = 1\n"),
        T0 + 1,
    );
    assert!(
        matches!(
            outcome(&waiting, "app/job/migrate"),
            Outcome::Waiting { .. }
        ),
        "{waiting:#?}"
    );
    assert!(matches!(
        outcome(&waiting, "app/container/web"),
        Outcome::Skipped { .. }
    ));
    assert_eq!(runs(&sandbox), 1);

    // Fixed: it runs once, and the service starts.
    let fixed = "echo migrated";
    let second = run_at(
        &sandbox,
        migration(&job_name, &service, fixed, "a = 1\n"),
        T0 + 2,
    );
    let said = applied(&second, "app/job/migrate");
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("exit code 0"), "{said:?}");
    assert!(said[0].contains("migrated"), "{said:?}");
    assert_eq!(applied(&second, "app/container/web"), ["created"]);
    assert!(status(&sandbox.config.root, &service).unwrap().running);
    assert_eq!(runs(&sandbox), 2);

    // Unchanged: it does not run again.
    let third = run_at(
        &sandbox,
        migration(&job_name, &service, fixed, "a = 1\n"),
        T0 + 3,
    );
    assert_eq!(outcome(&third, "app/job/migrate"), &Outcome::Unchanged);
    assert_eq!(outcome(&third, "app/container/web"), &Outcome::Unchanged);
    assert_eq!(runs(&sandbox), 2);

    // A file it runs again on changes: it runs again, once.
    let fourth = run_at(
        &sandbox,
        migration(&job_name, &service, fixed, "a = 2\n"),
        T0 + 4,
    );
    assert!(applied(&fourth, "app/job/migrate")[0].contains("exit code 0"));
    assert_eq!(runs(&sandbox), 3);
    let fifth = run_at(
        &sandbox,
        migration(&job_name, &service, fixed, "a = 2\n"),
        T0 + 5,
    );
    assert_eq!(outcome(&fifth, "app/job/migrate"), &Outcome::Unchanged);
    assert_eq!(runs(&sandbox), 3);
}

#[test]
fn a_job_that_keeps_failing_is_retried_with_backoff_and_becomes_stuck() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let job_name = names.name("job-stuck");
    let resources = || vec![job("app", "migrate", &job_name, "echo broken; exit 3")];
    let mut now = T0;
    let mut last = run_at(&sandbox, resources(), now);
    for _ in 0..5 {
        // Each retry waits past its backoff (at most an hour).
        now += 3_700;
        last = run_at(&sandbox, resources(), now);
    }
    match outcome(&last, "app/job/migrate") {
        Outcome::Stuck {
            attempts,
            last_reason,
            ..
        } => {
            assert_eq!(*attempts, 6);
            assert!(last_reason.contains("exited with code 3"), "{last_reason}");
            assert!(last_reason.contains("broken"), "{last_reason}");
        }
        other => panic!("not stuck: {other:?}"),
    }
}

#[test]
fn a_job_still_running_after_its_timeout_is_stopped_and_failed() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let job_name = names.name("job-slow");
    let mut slow = job("app", "slow", &job_name, "echo started; sleep 1000");
    job_mut(&mut slow).timeout_secs = Some(2);
    let report = run_at(&sandbox, vec![slow], T0);
    let reason = failed(&report, "app/job/slow");
    assert!(
        reason.contains("still ran after its timeout of 2 s"),
        "{reason}"
    );
    assert!(reason.contains("started"), "{reason}");
    assert_eq!(status(&sandbox.config.root, &job_name), None, "removed");
}

#[test]
fn a_container_whose_user_is_a_module_account_runs_as_its_ids() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let name = names.name("as-account");
    let account = Resource {
        id: "svc/account/svc".to_owned(),
        module: "svc".to_owned(),
        together: None,
        after: Vec::new(),
        spec: mesh_model::declaration::Spec::Account(mesh_model::declaration::AccountSpec {
            name: "svc".to_owned(),
            uid: Some(2345),
            gid: Some(2346),
            home: None,
            shell: None,
        }),
    };
    // What compose makes of `user = "svc"`: the account's ids, after it.
    let mut web = container("svc", "web", &name);
    spec_mut(&mut web).user = Some("2345:2346".to_owned());
    let report = run_at(&sandbox, vec![account, after(web, "svc/account/svc")], T0);
    assert_eq!(applied(&report, "svc/account/svc"), ["created"]);
    assert_eq!(applied(&report, "svc/container/web"), ["created"]);
    let id = |flag: &str| {
        let output = Command::new("podman")
            .args(["exec", &name, "id", flag])
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    };
    assert_eq!(id("-u"), "2345");
    assert_eq!(id("-g"), "2346");
}

#[test]
fn a_job_in_a_together_group_that_fails_puts_the_group_back_and_once_fixed_the_group_applies_whole()
{
    let sandbox = sandbox();
    let mut names = Containers::new();
    let job_name = names.name("job-grouped");
    let service = names.name("job-grouped-web");
    sandbox.write("/etc/app/conf", "old\n", 0o644);
    let group = |script: &str| {
        let mut migrate = job("app", "migrate", &job_name, script);
        job_mut(&mut migrate).rerun_on = vec!["app/file/conf".to_owned()];
        vec![
            together(file("app", "conf", "/etc/app/conf", "new\n"), "release"),
            together(after(migrate, "app/file/conf"), "release"),
            together(container("app", "web", &service), "release"),
        ]
    };
    let first = run_at(&sandbox, group("echo 'cannot migrate'; exit 1"), T0);
    let reason = failed(&first, "app/job/migrate");
    assert!(reason.contains("exited with code 1"), "{reason}");
    assert!(reason.contains("cannot migrate"), "{reason}");
    let put_back = failed(&first, "app/file/conf");
    assert!(
        put_back.contains("together group `app/release` did not apply"),
        "{put_back}"
    );
    // The file the job ran against is put back; the service was never made.
    assert_eq!(sandbox.read("/etc/app/conf"), "old\n");
    assert_eq!(status(&sandbox.config.root, &service), None);

    // Fixed, once the group's backoff has passed: it applies whole, the job ran against the
    // new file.
    let second = run_at(&sandbox, group("cat /dev/null; echo migrated"), T0 + 100);
    assert!(applied(&second, "app/job/migrate")[0].contains("migrated"));
    assert_eq!(applied(&second, "app/container/web"), ["created"]);
    assert_eq!(sandbox.read("/etc/app/conf"), "new\n");
    let third = run_at(&sandbox, group("cat /dev/null; echo migrated"), T0 + 101);
    assert_eq!(outcome(&third, "app/job/migrate"), &Outcome::Unchanged);
}

#[test]
fn a_job_that_ran_in_a_group_put_back_runs_again_with_the_group() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let job_name = names.name("job-kept");
    let service = names.name("job-kept-web");
    let group = |service_command: &str| {
        let mut web = container("app", "web", &service);
        spec_mut(&mut web).command =
            vec!["sh".to_owned(), "-c".to_owned(), service_command.to_owned()];
        vec![
            together(job("app", "migrate", &job_name, "echo migrated"), "release"),
            together(web, "release"),
        ]
    };
    // The job succeeds, the service exits at once: the group is put back.
    let first = run_at(&sandbox, group("exit 1"), T0);
    let reason = failed(&first, "app/job/migrate");
    assert!(
        reason.contains("together group `app/release` did not apply"),
        "{reason}"
    );
    // What it ran was not kept: with the group, it runs again.
    let second = run_at(&sandbox, group("sleep 1000"), T0 + 100);
    assert!(
        applied(&second, "app/job/migrate")[0].contains("migrated"),
        "{second:#?}"
    );
    assert_eq!(applied(&second, "app/container/web"), ["created"]);
}
