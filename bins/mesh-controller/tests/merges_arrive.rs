//! Merges reach the daemon by themselves: announced by `merge NAME --announce` (what a git
//! `post-receive` hook runs), each heard once and planned by a real `mesh-controller serve`
//! over a real nats-server, rolled out to a real `mesh-host serve`, read from real git.

mod support;

use support::daemon::{commit_base, plans, start_serve, wait_for_plan_done};
use support::fleet::Bed;
use support::Repo;

#[test]
fn merge_announce_is_planned_by_the_daemon_once() {
    let mut bed = Bed::new(&[]);
    bed.start_host("bus");
    let repo = Repo::new();
    let first = commit_base(&repo, "hello\n");
    bed.expect(&["repo", "add", "cat", repo.path().to_str().unwrap()], 0);

    // No daemon has ever heard merges on this bus: refused, nothing announced.
    let refused = bed.run(&["merge", "cat", "--announce"]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("no daemon hears merges on the bus")
            && said.contains("nothing was announced"),
        "{said}"
    );

    let (_daemon, _) = start_serve(&bed, &[], |_| true);
    let rt = support::fleet::runtime();
    let bus = bed.controller_bus(&rt);
    support::fleet::wait_for_merge_consumer(&rt, &bus);

    let announced: serde_json::Value =
        serde_json::from_str(&bed.expect(&["merge", "cat", "--announce", "--output", "json"], 0))
            .unwrap();
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
    let again = bed.expect(&["merge", "cat", "--announce"], 0);
    assert!(
        again.starts_with("already announced the merge of `cat` main at "),
        "{again}"
    );
    assert_eq!(plans(&bed).len(), 1);

    // A new commit, announced as a post-receive hook would: planned and rolled out.
    let second = commit_base(&repo, "hello again\n");
    let text = bed.expect(&["merge", "cat", "--announce"], 0);
    assert!(
        text.starts_with("announced the merge of `cat` main at "),
        "{text}"
    );
    let done = wait_for_plan_done(&bed, &second);
    assert_eq!(done.len(), 2, "{done:?}");
}
