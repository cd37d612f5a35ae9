//! A host whose clock is an hour behind: its `mesh-host serve` runs under libfaketime (Debian's
//! `faketime`; `FAKETIME=-1h`, its monotonic clock left real so that tokio's timers are not
//! faked). It applied every declaration, and every rollout stopped at it — "no report of the
//! new declaration applied within 30 s of its send" — because the gate compared the host's
//! finish time with the controller's send time. Now the gate reads the send a report names:
//! a merge rolls out one machine first through that host, and `status` names its clock, as NTP
//! monitoring would.

use crate::support;
use serde_json::Value;
use support::fleet::Bed;
use support::Repo;

/// libfaketime, from Debian's package `faketime` (scripts/test installs it).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The environment that sets a process's clock an hour behind, its monotonic clock real.
fn an_hour_behind() -> [(&'static str, &'static str); 3] {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: install Debian's package `faketime` (scripts/test does)"
    );
    [
        ("LD_PRELOAD", LIBFAKETIME),
        ("FAKETIME", "-1h"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ]
}

/// `base` writing `hello` to `/etc/mesh/hello`, its rollout's deadline 30 s (as where it was
/// found: a host the gate never hears stops it then).
fn commit_base(repo: &Repo, hello: &str) {
    repo.write(&[
        (
            "modules/base/module.toml",
            "name = \"base\"\ndeadline-secs = 30\n\n[files.hello]\nsource = \"files/hello\"\n\
             path = \"/etc/mesh/hello\"\n",
        ),
        ("modules/base/files/hello", hello),
    ]);
    repo.commit(&format!("base: {hello}"));
}

/// The node `node` of `status --output json`'s `list`.
fn named<'v>(status: &'v Value, list: &str, node: &str) -> Option<&'v Value> {
    status[list]
        .as_array()?
        .iter()
        .find(|entry| entry["node"] == node)
}

#[test]
fn a_host_an_hour_behind_does_not_stop_a_rollout_and_status_names_its_clock() {
    let mut bed = Bed::new(&["a", "b"]);
    bed.start_host("bus");
    bed.start_host_env("a", &[], &an_hour_behind());
    bed.start_host("b");
    let repo = Repo::new();
    commit_base(&repo, "v1\n");
    bed.library().repo_add("cat", repo.path()).unwrap();
    // The first merge: the bus node first (its users are new), then `a` and `b`.
    bed.library().merge_expecting("cat", 0);

    // The second: `a`, first by name, goes first, and the others only once its report opened
    // the gate.
    commit_base(&repo, "v2\n");
    let out = bed.library().merge_expecting("cat", 0);
    assert!(out.contains("`base`: sent `a` (first)"), "{out}");
    for node in ["bus", "a", "b"] {
        assert_eq!(
            std::fs::read_to_string(bed.root(node).join("etc/mesh/hello")).unwrap(),
            "v2\n",
            "{node}"
        );
    }
    let plan = bed.library().plan("plan-2").unwrap();
    assert_eq!(plan["plan"]["state"]["state"], "done", "{plan:#}");
    assert_eq!(plan["plan"]["rollouts"]["base"]["first"], "a", "{plan:#}");

    // Its reports say its clock, an hour behind the bus's: `status` names it under "needs
    // attention" (exit 3); `b`'s is in time.
    let (status, code) = support::wait_for(
        "`status` naming `a`'s clock",
        std::time::Duration::from_secs(30),
        || {
            let said = bed.try_library()?.try_status()?;
            match named(&said.json, "attention", "a") {
                Some(a) if a["clock-skew-secs"].is_i64() => Ok((said.json, said.code)),
                _ => Err(said.document),
            }
        },
    );
    let skew = named(&status, "attention", "a").unwrap()["clock-skew-secs"]
        .as_i64()
        .unwrap();
    assert!((-3610..=-3590).contains(&skew), "{skew}");
    assert_eq!(code, 3, "{status:#}");
    let b = named(&status, "nodes", "b").unwrap();
    assert!(
        b["clock_offset_secs"].as_i64().unwrap().abs() <= 60,
        "{b:#}"
    );
    assert!(named(&status, "attention", "b").is_none(), "{status:#}");
    // As a person reads it.
    let text = bed.command(&["status"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.lines()
            .any(|line| line.contains("a: its clock is 3") && line.contains("s behind the bus's")),
        "{text}"
    );
}
