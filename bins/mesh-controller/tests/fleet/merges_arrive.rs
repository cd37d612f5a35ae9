//! Merges reach the daemon by themselves: announced by `merge NAME --announce` (what a git
//! `post-receive` hook runs), each heard once and planned by a real `mesh-controller serve`
//! over a real nats-server, rolled out to a real `mesh-host serve`, read from real git.
//!
//! The controller is called as a library, in process, on the bed's bus (`Bed::library`,
//! `Bed::library`): repositories registered and listed, merges announced, status. The
//! binary is run for the daemon (`serve`) and for one announcement as a post-receive hook runs
//! it, read as a person reads it.

use crate::support;
use mesh_controller::catalogue;

use std::time::Duration;
use support::daemon::{commit_base, plans, start_serve, wait_for_plan_done};
use support::fleet::Bed;
use support::{wait_for, Repo};

#[test]
fn merge_announce_is_planned_by_the_daemon_once() {
    let mut bed = Bed::new(&[]);
    bed.start_host("bus");
    let repo = Repo::new();
    let first = commit_base(&repo, "hello\n");
    bed.library().repo_add("cat", repo.path()).unwrap();

    // No daemon has ever heard merges on this bus: refused, nothing announced (an error:
    // `merge --announce` exits 1 saying it).
    let Err(said) = bed.library().merge_announce("cat") else {
        panic!("announced with no daemon hearing merges");
    };
    assert!(
        said.contains("no daemon hears merges on the bus")
            && said.contains("nothing was announced"),
        "{said}"
    );

    let (_daemon, _) = start_serve(&bed, &[], |_| true);
    let rt = support::fleet::runtime();
    let bus = bed.controller_bus(&rt);
    support::fleet::wait_for_merge_consumer(&rt, &bus);

    let announced = serde_json::to_value(bed.library().merge_announce("cat").unwrap()).unwrap();
    assert_eq!(announced["repository"], "cat");
    assert_eq!(announced["branch"], "main");
    assert_eq!(announced["commit"], first.as_str());
    assert_eq!(announced["already-announced"], false);
    let done = wait_for_plan_done(&bed, &first);
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(
        std::fs::read_to_string(bed.root("bus").join("etc/mesh/hello")).unwrap(),
        "hello\n"
    );

    // Announced again: the stream has it already, so nothing is stored and nothing planned.
    // What `merge --announce` prints as "already announced the merge of `cat` main at …".
    let again = bed.library().merge_announce("cat").unwrap();
    assert!(
        again.already_announced && again.repository == "cat" && again.branch == "main",
        "{again:?}"
    );
    assert_eq!(plans(&bed).len(), 1);

    // A new commit, announced as a post-receive hook would, running the binary (as a person
    // reads it): planned and rolled out.
    let second = commit_base(&repo, "hello again\n");
    let text = bed.expect(&["merge", "cat", "--announce"], 0);
    assert!(
        text.starts_with("announced the merge of `cat` main at "),
        "{text}"
    );
    let done = wait_for_plan_done(&bed, &second);
    assert_eq!(done.len(), 2, "{done:?}");
}

#[test]
fn a_new_commit_in_a_polled_repository_is_planned_with_no_hook() {
    use std::os::unix::fs::PermissionsExt as _;
    let mut bed = Bed::new(&[]);
    bed.start_host("bus");
    let upstream = Repo::new();
    let first = commit_base(&upstream, "polled\n");
    let url = format!("file://{}", upstream.path().display());

    // A fetch credential others may read is refused: nothing registered, no clone left.
    let scratch = tempfile::tempdir().unwrap();
    let token = scratch.path().join("token");
    std::fs::write(&token, "a token\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    // An error: `repo add` exits 1 saying it.
    let Err(said) = bed.library().repo_add_with(
        "cat",
        std::path::Path::new(&url),
        &catalogue::AddOptions {
            modules_dir: "modules".to_owned(),
            poll_secs: Some(1),
            token_file: Some(token.clone()),
            ..Default::default()
        },
    ) else {
        panic!("registered with a token others may read");
    };
    assert!(
        said.contains("readable by others") && !said.contains("a token"),
        "{said}"
    );
    assert_eq!(bed.library().repo_list().unwrap(), serde_json::json!([]));
    assert!(!bed.home.path().join("repos/cat.git").exists());

    // Registered by URL: kept as a clone under the home, fetched every second by the daemon.
    let added = bed
        .library()
        .repo_add_with(
            "cat",
            std::path::Path::new(&url),
            &catalogue::AddOptions {
                branch: Some("main".to_owned()),
                modules_dir: "modules".to_owned(),
                poll_secs: Some(1),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(added["remote"]["url"], url.as_str());
    assert_eq!(added["remote"]["poll-secs"], 1);
    let clone = std::path::PathBuf::from(added["path"].as_str().unwrap());
    assert_eq!(clone, bed.home.path().join("repos/cat.git"));

    let (_daemon, _) = start_serve(&bed, &[], |_| true);
    // Its head is planned with nothing announcing it, and so is the next commit.
    let done = wait_for_plan_done(&bed, &first);
    assert_eq!(done.len(), 1, "{done:?}");
    let second = commit_base(&upstream, "polled again\n");
    let done = wait_for_plan_done(&bed, &second);
    assert_eq!(done.len(), 2, "{done:?}");
    assert_eq!(
        std::fs::read_to_string(bed.root("bus").join("etc/mesh/hello")).unwrap(),
        "polled again\n"
    );
    // The commit came by git fetch into the clone.
    support::git(&clone, &["cat-file", "-e", &format!("{second}^{{commit}}")]);

    // The remote gone: the failing fetch is a problem of the repository in `status`, with
    // git's own message, until a fetch succeeds again.
    let moved = scratch.path().join("moved");
    std::fs::rename(upstream.path(), &moved).unwrap();
    let problems = |bed: &Bed| -> Result<Vec<serde_json::Value>, String> {
        let status = bed.try_library()?.try_status()?.json;
        Ok(status["problems"].as_array().cloned().unwrap_or_default())
    };
    let found = wait_for(
        "the failing fetch in status",
        Duration::from_secs(60),
        || {
            let found = problems(&bed)?;
            if found.is_empty() {
                Err("no problem yet".to_owned())
            } else {
                Ok(found)
            }
        },
    );
    assert_eq!(found[0]["subject"], "cat", "{found:?}");
    let what = found[0]["what"].as_str().unwrap();
    assert!(
        what.starts_with("polling `cat`: the fetch failed"),
        "{what}"
    );
    std::fs::rename(&moved, upstream.path()).unwrap();
    wait_for(
        "the problem cleared by a fetch",
        Duration::from_secs(60),
        || {
            let found = problems(&bed)?;
            if found.is_empty() {
                Ok(())
            } else {
                Err(format!("{found:?}"))
            }
        },
    );
}
