//! Failures that reach `status` (the rule “Nothing fails silently”): a merge
//! the daemon cannot plan was a log line and then acknowledged. It is a problem of its
//! repository, shown by `status` (text and JSON) until a merge of that repository is planned.
//!
//! The library is called in process, on the fleet's bus (`support::in_process`, `Bed::library`);
//! the binary is run for the daemon (`serve`, stopped and woken by signals) and for `status` as
//! a person reads it.

use crate::support;
use std::process::Stdio;
use std::time::Duration;
use support::fleet::{runtime, write, Bed, BASE_MODULE};
use support::git;

/// Killed if the test fails before it stops the daemon itself.
struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `status --output json`'s problems; `Err` with the error when it answered none (a bus
/// reloading its users refuses the controller's login for a moment).
fn try_problems(bed: &Bed) -> Result<Vec<serde_json::Value>, String> {
    let status = bed.try_library()?.try_status()?.json;
    Ok(status["problems"].as_array().cloned().unwrap_or_default())
}

/// `plans --output json`.
fn plans(bed: &Bed) -> Vec<serde_json::Value> {
    serde_json::from_value(bed.library().plans()).unwrap()
}

/// `status --output json` once it is judged settled (`status` exits 0).
fn settled(bed: &Bed, what: &str) -> serde_json::Value {
    support::wait_for(what, Duration::from_secs(120), || {
        let status = bed.try_library()?.try_status()?;
        match status.code {
            0 => Ok(status.json),
            _ => Err(format!("{}", status.json)),
        }
    })
}

/// `status --output json`'s problems.
fn problems(bed: &Bed) -> Vec<serde_json::Value> {
    try_problems(bed).unwrap_or_else(|e| panic!("{e}"))
}

/// Waits until `done` holds of the problems `status` answers (a deadline bounds only a
/// failure; a status that answered no JSON is looked at again).
fn wait_until(what: &str, bed: &Bed, mut done: impl FnMut(&[serde_json::Value]) -> bool) {
    support::wait_for(what, Duration::from_secs(60), || {
        let problems = try_problems(bed)?;
        if done(&problems) {
            Ok(())
        } else {
            Err(format!("{problems:?}"))
        }
    });
}

#[test]
fn a_merge_the_daemon_cannot_plan_is_shown_by_status_until_one_is_planned() {
    let mut bed = Bed::new(&[]);
    bed.start_host("bus");
    let repo = tempfile::tempdir().unwrap();
    write(&repo.path().join("modules/base/module.toml"), BASE_MODULE);
    write(&repo.path().join("modules/base/files/hello"), "hello\n");
    git(repo.path(), &["init", "-q", "-b", "main"]);
    git(repo.path(), &["add", "."]);
    git(repo.path(), &["commit", "-qm", "base"]);
    let commit = git(repo.path(), &["rev-parse", "HEAD"]);

    let _serve = Daemon(
        bed.command(&["serve"])
            .env("MESH_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let rt = runtime();
    let bus = bed.controller_bus(&rt);
    let announce = |commit: &str| {
        rt.block_on(async {
            mesh_bus::jetstream::publish_merge(&bus.jetstream(), "cat", "main", commit).await
        })
    };
    // The repository is not registered yet: the merge cannot be planned. It is announced once
    // the daemon's consumer is there (made from now, it hears nothing announced before).
    support::fleet::wait_for_merge_consumer(&rt, &bus);
    announce(&commit).unwrap();
    wait_until("the unplannable merge reaches status", &bed, |problems| {
        !problems.is_empty()
    });
    let found = problems(&bed);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["kind"], "merge");
    assert_eq!(found[0]["subject"], "cat");
    let what = found[0]["what"].as_str().unwrap();
    assert!(
        what.contains("`cat` main") && what.contains("could not be planned"),
        "{what}"
    );
    let text = bed.expect(&["status"], 3);
    assert!(text.contains("problems (shown until resolved):"), "{text}");
    assert!(
        text.contains("merge `cat`: the merge of `cat` main"),
        "{text}"
    );
    assert!(plans(&bed).is_empty());

    // Registered, the next merge (a merge is heard once per commit) is planned: the problem
    // is resolved.
    bed.library().repo_add("cat", repo.path()).unwrap();
    write(
        &repo.path().join("modules/base/files/hello"),
        "hello again\n",
    );
    git(repo.path(), &["commit", "-qam", "again"]);
    let next = git(repo.path(), &["rev-parse", "HEAD"]);
    announce(&next).unwrap();
    wait_until("a plan of `cat` clears its problem", &bed, |problems| {
        problems.is_empty()
    });
    let made = plans(&bed);
    assert_eq!(made.len(), 1, "{made:?}");
    // Once the plan has rolled out, nothing needs a person: exit 0. (While it rolls out, the
    // bus node applying its new users, `status` may rightly say otherwise: it is waited out,
    // not raced.)
    support::wait_for(
        "the plan of `cat` to roll out",
        Duration::from_secs(120),
        || {
            let plans = plans(&bed);
            match plans[0]["state"]["state"].as_str() {
                Some("done") => Ok(()),
                state => Err(format!("the plan is {state:?}")),
            }
        },
    );
    let status = settled(&bed, "status to settle once the plan is done");
    // What `status` shows as "problems (shown until resolved):" when there are any.
    let problems = status["problems"].as_array().cloned().unwrap_or_default();
    assert!(problems.is_empty(), "{status}");
}

/// A repository `cat` on `main` holding `base`, registered; its commit.
fn a_registered_repository(bed: &Bed) -> (tempfile::TempDir, String) {
    let repo = tempfile::tempdir().unwrap();
    write(&repo.path().join("modules/base/module.toml"), BASE_MODULE);
    write(&repo.path().join("modules/base/files/hello"), "hello\n");
    git(repo.path(), &["init", "-q", "-b", "main"]);
    git(repo.path(), &["add", "."]);
    git(repo.path(), &["commit", "-qm", "base"]);
    let commit = git(repo.path(), &["rev-parse", "HEAD"]);
    bed.library().repo_add("cat", repo.path()).unwrap();
    (repo, commit)
}

/// `mesh-controller serve` with `flags`, its log kept beside the home.
fn serve(bed: &Bed, flags: &[&str]) -> Daemon {
    let mut args = vec!["serve"];
    args.extend_from_slice(flags);
    Daemon(
        bed.command(&args)
            .env("MESH_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(bed.home.path().join("serve.log")).unwrap())
            .spawn()
            .unwrap(),
    )
}

fn serve_log(bed: &Bed) -> String {
    std::fs::read_to_string(bed.home.path().join("serve.log")).unwrap_or_default()
}

#[test]
fn a_drive_that_fails_is_a_problem_in_status_tried_again_until_the_plan_completes() {
    let mut bed = Bed::new(&[]);
    bed.start_host("bus");
    let (_repo, commit) = a_registered_repository(&bed);
    // The store answers 500 to the build's publish.
    bed.registry.break_storage();
    let _serve = serve(&bed, &[]);
    let rt = runtime();
    let bus = bed.controller_bus(&rt);
    support::fleet::wait_for_merge_consumer(&rt, &bus);
    rt.block_on(async {
        mesh_bus::jetstream::publish_merge(&bus.jetstream(), "cat", "main", &commit).await
    })
    .unwrap();

    // A problem of the plan, tried again by itself: a second attempt is counted.
    wait_until("the failed drive to be tried again", &bed, |problems| {
        problems
            .iter()
            .any(|p| p["kind"] == "drive" && p["attempts"].as_u64() >= Some(2))
    });
    let found = problems(&bed);
    assert_eq!(found.len(), 1, "{found:?}\n{}", serve_log(&bed));
    let drive = &found[0];
    assert_eq!(drive["subject"], "plan-1");
    assert_eq!(drive["plan"], "plan-1");
    assert_eq!(drive["module"], "base");
    let what = drive["what"].as_str().unwrap();
    assert!(
        what.contains("the drive of plan-1 failed")
            && what.contains("publishing `base`")
            && what.contains("code: 500"),
        "{what}"
    );
    assert!(drive["since"].as_u64().unwrap() <= drive["at"].as_u64().unwrap());
    let text = bed.expect(&["status"], 3);
    assert!(
        text.contains("drive `plan-1`: the drive of plan-1 failed"),
        "{text}"
    );
    assert!(text.contains("; at `base`; attempt "), "{text}");
    let made = plans(&bed);
    assert_eq!(made[0]["state"]["state"], "building", "{made:?}");

    // The store mended, the plan completes with no command, and the problem is gone.
    bed.registry.mend_storage();
    support::wait_for("plan-1 to roll out", Duration::from_secs(120), || {
        let plans = plans(&bed);
        match plans[0]["state"]["state"].as_str() {
            Some("done") => Ok(()),
            state => Err(format!("plan-1 is {state:?}\n{}", serve_log(&bed))),
        }
    });
    wait_until("the drive's problem to be cleared", &bed, |problems| {
        problems.is_empty()
    });
    assert_eq!(
        std::fs::read_to_string(bed.root("bus").join("etc/mesh/hello")).unwrap(),
        "hello\n"
    );
    settled(&bed, "status to settle");
}

/// `status --output json`'s daemon, when it answered.
fn daemon_seen(bed: &Bed) -> Result<serde_json::Value, String> {
    let status = bed.try_library()?.try_status()?.json;
    match &status["daemon"] {
        serde_json::Value::Null => Err(format!("no daemon in {status}")),
        daemon => Ok(daemon.clone()),
    }
}

fn signal(daemon: &Daemon, name: &str) {
    let sent = std::process::Command::new("kill")
        .args([name, &daemon.0.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

#[test]
fn a_stopped_daemon_is_named_silent_and_a_merge_announced_meanwhile_waiting() {
    let mut bed = Bed::new(&[]);
    bed.start_host("bus");
    let (_repo, commit) = a_registered_repository(&bed);
    let serve = serve(&bed, &["--heartbeat", "1"]);
    let rt = runtime();
    let bus = bed.controller_bus(&rt);
    support::fleet::wait_for_merge_consumer(&rt, &bus);
    support::wait_for("the daemon's heartbeat", Duration::from_secs(30), || {
        let daemon = daemon_seen(&bed)?;
        match daemon["silent"].as_bool() {
            Some(false) => Ok(()),
            _ => Err(format!("{daemon}")),
        }
    });

    signal(&serve, "-STOP");
    let stopped = std::time::Instant::now();
    let daemon = support::wait_for("the daemon named silent", Duration::from_secs(30), || {
        let daemon = daemon_seen(&bed)?;
        match daemon["silent"].as_bool() {
            Some(true) => Ok(daemon),
            _ => Err(format!("{daemon}")),
        }
    });
    println!(
        "the stopped daemon was named silent {:?} after SIGSTOP (heartbeat every 1 s)",
        stopped.elapsed()
    );
    assert!(daemon["unheard-secs"].as_u64().unwrap() > 3, "{daemon}");
    let text = bed.expect(&["status"], 3);
    assert!(text.contains("is silent: its loop last turned"), "{text}");

    rt.block_on(async {
        mesh_bus::jetstream::publish_merge(&bus.jetstream(), "cat", "main", &commit).await
    })
    .unwrap();
    let daemon = support::wait_for("the merge named waiting", Duration::from_secs(30), || {
        let daemon = daemon_seen(&bed)?;
        match daemon["merges-waiting"]["count"].as_u64() {
            Some(1) => Ok(daemon),
            _ => Err(format!("{daemon}")),
        }
    });
    assert!(daemon["oldest-merge-waiting-secs"].is_u64(), "{daemon}");
    let text = bed.expect(&["status"], 3);
    assert!(
        text.contains("; 1 merge(s) waiting, the oldest for "),
        "{text}"
    );

    // Woken, it beats again and plans the merge that waited.
    signal(&serve, "-CONT");
    support::wait_for("the daemon heard again", Duration::from_secs(60), || {
        let daemon = daemon_seen(&bed)?;
        match (
            daemon["silent"].as_bool(),
            daemon["merges-waiting"]["count"].as_u64(),
        ) {
            (Some(false), Some(0)) => Ok(()),
            _ => Err(format!("{daemon}\n{}", serve_log(&bed))),
        }
    });
    let made = plans(&bed);
    assert_eq!(made.len(), 1, "{made:?}");
}
