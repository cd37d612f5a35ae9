//! Merges reach the daemon by themselves: announced by `merge NAME --announce` (what a git
//! `post-receive` hook runs), each heard once and planned by a real `mesh-controller serve`
//! over a real nats-server, rolled out to a real `mesh-host serve`, read from real git.

mod support;

use std::io::BufRead as _;
use std::process::{Child, Stdio};
use std::time::Duration;
use support::fleet::{Bed, BASE_MODULE};
use support::{wait_for, Repo};

/// The daemon, killed if the test fails before it ends.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `serve` with `flags`; returns it and the lines it printed before `ready` said it
/// had printed enough (`ready` is asked after each line).
fn start_serve(
    bed: &Bed,
    flags: &[&str],
    ready: impl Fn(&[String]) -> bool,
) -> (Daemon, Vec<String>) {
    let mut args = vec!["serve"];
    args.extend_from_slice(flags);
    let mut child = bed
        .command(&args)
        .env("MESH_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let daemon = Daemon(child);
    let mut stdout = std::io::BufReader::new(stdout);
    let mut lines = Vec::new();
    while !ready(&lines) {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "serve ended after {lines:?}"
        );
        lines.push(line.trim().to_owned());
    }
    // Whatever else it prints is read, so it is never told its standard output went away.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    (daemon, lines)
}

/// A repository holding `base`, its file saying `hello`; the commit.
fn commit_base(repo: &Repo, hello: &str) -> String {
    repo.write(&[
        ("modules/base/module.toml", BASE_MODULE),
        ("modules/base/files/hello", hello),
    ]);
    repo.git(&["add", "."]);
    repo.git(&["commit", "-qm", hello.trim()]);
    repo.git(&["rev-parse", "HEAD"])
}

/// The plans, as `plans --output json` lists them.
fn plans(bed: &Bed) -> Vec<serde_json::Value> {
    serde_json::from_str(&bed.expect(&["plans", "--output", "json"], 0)).unwrap()
}

/// Waits until a plan of `commit` is done; returns every plan then.
fn wait_for_plan_done(bed: &Bed, commit: &str) -> Vec<serde_json::Value> {
    wait_for(
        &format!("a plan of {commit} done"),
        Duration::from_secs(120),
        || {
            let plans = plans(bed);
            let state = plans
                .iter()
                .find(|p| p["commit"] == commit)
                .map(|p| p["state"]["state"].clone());
            match state {
                Some(state) if state == "done" => Ok(plans),
                state => Err(format!("its plan is {state:?}: {plans:?}")),
            }
        },
    )
}

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
