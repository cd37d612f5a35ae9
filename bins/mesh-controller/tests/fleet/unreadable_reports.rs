//! No node can blind the fleet: whatever one node publishes as its report — garbage, a report
//! cut off, one of a newer major format, one of 1 MiB, one naming another node — is that node's
//! problem. Over a real TLS nats-server with a real `mesh-controller serve --http` and real
//! `mesh-host serve` on the other nodes, published as `b` itself, on its own subject, with its
//! own key: what a compromised host, or one upgraded first, can do. A merge announcement that
//! does not read is its publisher's problem likewise.
//!
//! Nothing here waits on time: each check waits for the condition it needs.
//!
//! The controller is called as a library, in process, on the bed's bus (`Bed::library`,
//! `Bed::library`): pushes, the repository registered, status (with a report limit of its
//! own, as `--report-limit` gives it) and the records. The binary is run for the daemon
//! (`serve --http`) and for `status` as a person reads an unreadable report in it.

use crate::support;
use serde_json::Value;
use std::io::{Read as _, Write as _};
use std::time::Duration;
use support::daemon::{commit_base, start_serve};
use support::fleet::Bed;
use support::in_process::Library;
use support::{wait_for, Repo};

/// `GET path` from `base` (`http://ADDR/`): status code and body.
fn get(base: &str, path: &str) -> std::io::Result<(u16, String)> {
    let addr = base
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let mut stream = std::net::TcpStream::connect(&addr)?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let answer = String::from_utf8_lossy(&answer);
    let not_http = || std::io::Error::other(format!("not an HTTP answer: {answer:?}"));
    let (head, body) = answer.split_once("\r\n\r\n").ok_or_else(not_http)?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(not_http)?;
    Ok((status, body.to_owned()))
}

fn node_of(overview: &Value, name: &str) -> Value {
    overview["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no node {name} in {overview}"))
}

/// `status --output json` (with `--report-limit BYTES` before it when `report_limit` says),
/// in process on the bed's bus: the exit code it ends with and what it prints.
fn status(bed: &Bed, report_limit: Option<usize>) -> Result<(u8, Value), String> {
    let mut options = bed.mesh_options();
    options.report_limit = report_limit;
    let status = Library::open(bed.home.path(), options)?.try_status()?;
    Ok((status.code, status.json))
}

/// `push NODE… --timeout 120`: every node converged (`push` exits 0).
fn push(bed: &Bed, nodes: &[&str]) {
    let pushed = bed
        .library()
        .push_within(nodes, &[], Duration::from_secs(120))
        .unwrap();
    assert_eq!(pushed.code(), 0, "{}\n{:#}", pushed.lines, pushed.json);
}

/// The problems `status --output json` shows whose `what` holds `needle` (what `status`
/// prints under "problems (shown until resolved):").
fn problems_saying(overview: &Value, needle: &str) -> Vec<Value> {
    overview["problems"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p["what"].as_str().is_some_and(|what| what.contains(needle)))
        .collect()
}

/// Whatever `b` publishes as its last report is `b`'s problem, shown on `b` with the reason,
/// its size and first bytes, and beside it `b`'s last readable report, kept. `status` exits 3,
/// not 1, and shows every other node as usual; the page and `/metrics` answer; the daemon
/// rolls a merge out to the other nodes meanwhile. A newer minor version's unknown field is
/// read. The size limit is the controller's to set.
#[test]
fn an_unreadable_report_is_its_nodes_problem_and_blinds_no_one() {
    let mut bed = Bed::new(&["a", "b"]);
    for node in ["bus", "a"] {
        bed.start_host(node);
    }
    push(&bed, &["bus", "a"]);
    let (_, overview) = status(&bed, None).unwrap();
    let a_report = node_of(&overview, "a")["report"].clone();
    assert_eq!(a_report["machine"], "converged", "{overview}");
    let as_b = |node: &str, mut report: Value| {
        report["node"] = Value::from(node);
        serde_json::to_vec(&report).unwrap()
    };
    let mut newer = a_report.clone();
    newer["format"] = Value::from(99);
    let mut unknown_field = a_report.clone();
    unknown_field["uptime"] = serde_json::json!({"secs": 3});
    let whole = as_b("b", a_report.clone());

    let repo = Repo::new();
    let v1 = commit_base(&repo, "v1 while b is unreadable\n");
    bed.library().repo_add("cat", repo.path()).unwrap();
    let (_daemon, lines) = start_serve(&bed, &["--http", "127.0.0.1:0"], |lines| !lines.is_empty());
    let url = lines[0]
        .strip_prefix("serving the status page on ")
        .unwrap_or_else(|| panic!("serve did not say where its page is: {lines:?}"))
        .to_owned();
    wait_for(
        "the status page to answer",
        Duration::from_secs(60),
        || match get(&url, "/") {
            Ok((200, _)) => Ok(()),
            Ok((code, body)) => Err(format!("{code}: {body}")),
            Err(error) => Err(error.to_string()),
        },
    );
    let rt = support::fleet::runtime();
    let b = rt
        .block_on(mesh_bus::NatsBus::connect(&bed.node_options("b")))
        .unwrap();
    let publish = |payload: Vec<u8>| {
        rt.block_on(async {
            b.client()
                .publish(mesh_bus::subjects::report("b"), payload.into())
                .await
                .unwrap();
            b.client().flush().await.unwrap();
        })
    };

    // A readable report of b first: what is kept once its latest is not.
    publish(whole.clone());
    wait_for("b's report to be read", Duration::from_secs(60), || {
        let (_, overview) = status(&bed, None)?;
        match node_of(&overview, "b")["report"]["machine"].as_str() {
            Some("converged") => Ok(()),
            _ => Err(format!("b shows {}", node_of(&overview, "b"))),
        }
    });
    // The limit is the controller's: under a limit of 100 bytes b's report is over it.
    let (code, overview) = status(&bed, Some(100)).unwrap();
    assert_eq!(code, 3, "{overview}");
    let reason = node_of(&overview, "b")["unreadable"]["reason"].clone();
    assert!(
        reason
            .as_str()
            .is_some_and(|r| r.ends_with("bytes, over the limit of 100 a report may hold")),
        "{reason}"
    );

    let cases: [(&str, Vec<u8>, &str); 5] = [
        (
            "garbage",
            b"\x00\xffnot a report\n".to_vec(),
            "not a report: ",
        ),
        (
            "a report cut off",
            whole[..whole.len() / 2].to_vec(),
            "not a report: EOF while parsing",
        ),
        (
            "a newer major format",
            as_b("b", newer),
            "`b` runs a newer mesh-host (report format 99; this controller reads up to 2)",
        ),
        (
            "a report of 1 MiB",
            vec![b' '; 1024 * 1024],
            "1048576 bytes, over the limit of 262144 a report may hold",
        ),
        (
            "a report naming another node",
            as_b("a", a_report.clone()),
            "published as `b`, it names another node, `a`",
        ),
    ];
    for (what, payload, reason) in cases {
        let size = payload.len();
        publish(payload);
        let (code, overview) = wait_for(
            &format!("`status` to show b's {what}"),
            Duration::from_secs(60),
            || {
                let (code, overview) = status(&bed, None)?;
                let shown = node_of(&overview, "b")["unreadable"]["reason"].clone();
                match shown.as_str() {
                    Some(said) if said.contains(reason) => Ok((code, overview)),
                    _ => Err(format!("b shows {shown}")),
                }
            },
        );
        assert_eq!(code, 3, "{what}: {overview}");
        let b_shown = node_of(&overview, "b");
        assert_eq!(b_shown["unreadable"]["size"], size, "{what}");
        assert!(b_shown["report"].is_null(), "{what}: {b_shown}");
        let kept = &b_shown["unreadable"]["last-readable"]["report"];
        assert_eq!(kept["machine"], "converged", "{what}: {b_shown}");
        assert_eq!(kept["declaration"], a_report["declaration"], "{what}");
        assert_eq!(node_of(&overview, "a")["report"]["machine"], "converged");
        assert_eq!(node_of(&overview, "bus")["report"]["machine"], "converged");
        // As a person reads it, in `status`.
        let text = bed.run(&["status"]);
        assert_eq!(text.status.code(), Some(3), "{what}: {text:?}");
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.contains("b: unreadable report: "), "{what}:\n{text}");
        assert!(text.contains(reason), "{what}:\n{text}");
        assert!(
            text.contains("its last readable report, heard "),
            "{what}:\n{text}"
        );
        assert!(text.contains("a: converged"), "{what}:\n{text}");
        let (code, metrics) = get(&url, "/metrics").unwrap();
        assert_eq!(code, 200, "{what}: {metrics}");
        assert!(
            metrics.contains("mesh_nodes{state=\"unreadable\"} 1"),
            "{what}:\n{metrics}"
        );
        assert!(
            metrics.contains("mesh_nodes{state=\"converged\"} 2"),
            "{what}:\n{metrics}"
        );
        let (code, page) = get(&url, "/").unwrap();
        assert_eq!(code, 200, "{what}");
        assert!(page.contains("unreadable report: "), "{what}:\n{page}");
    }

    // More garbage than the reports stream keeps of a node (64): b's last readable report is
    // the controller's own record now, and still shown.
    for n in 0..70 {
        publish(format!("garbage {n}").into_bytes());
    }
    wait_for(
        "b's last garbage to be shown, its last readable report kept",
        Duration::from_secs(60),
        || {
            let (_, overview) = status(&bed, None)?;
            let b_shown = node_of(&overview, "b");
            let unreadable = &b_shown["unreadable"];
            match unreadable["head"].as_str() {
                Some("garbage 69")
                    if unreadable["last-readable"]["report"]["machine"] == "converged" =>
                {
                    Ok(())
                }
                _ => Err(format!("b shows {b_shown}")),
            }
        },
    );
    assert!(bed.record("heard/b.json").is_some());

    // The daemon rolls a merge out to the other nodes meanwhile: `a` first, then `bus`,
    // each converged on what it was sent; `b`, whose reports do not read, is `b`'s problem.
    let before = node_of(&status(&bed, None).unwrap().1, "a")["sent"].clone();
    let bus = bed.controller_bus(&rt);
    support::fleet::wait_for_merge_consumer(&rt, &bus);
    let js = {
        let _in = rt.enter();
        bus.jetstream()
    };
    // A merge announcement that does not read is its publisher's problem too: named in
    // `status`, and the daemon hears the next one at once.
    rt.block_on(async {
        js.publish(
            mesh_bus::subjects::MERGES,
            b"\x00not a merge".to_vec().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    });
    wait_for(
        "the unreadable announcement in status",
        Duration::from_secs(60),
        || {
            let (_, overview) = status(&bed, None)?;
            let named = problems_saying(&overview, "an unreadable merge announcement (sequence ");
            if named.iter().any(|p| {
                p["what"]
                    .as_str()
                    .unwrap()
                    .contains(r#"12 bytes: "\x00not a merge")"#)
            }) {
                Ok(())
            } else {
                Err(format!("{overview:#}"))
            }
        },
    );
    rt.block_on(mesh_bus::jetstream::publish_merge(&js, "cat", "main", &v1))
        .unwrap();
    let overview = wait_for(
        "the daemon to roll the merge out to a and bus",
        Duration::from_secs(120),
        || {
            let (_, overview) = status(&bed, None)?;
            for node in ["a", "bus"] {
                let shown = node_of(&overview, node);
                let converged = shown["report"]["machine"] == "converged";
                if shown["sent"] == before || shown["current"] != true || !converged {
                    return Err(format!("{node} shows {shown}"));
                }
            }
            // The bus node may be current on another send first (its users file): the merge
            // has reached it once its file says v1.
            let hello = std::fs::read_to_string(bed.root("bus").join("etc/mesh/hello"))
                .map_err(|e| e.to_string())?;
            if hello != "v1 while b is unreadable\n" {
                return Err(format!("bus's file says {hello:?}"));
            }
            Ok(overview)
        },
    );
    assert!(
        node_of(&overview, "b")["unreadable"]["reason"].is_string(),
        "{overview}"
    );
    let (_, overview) = status(&bed, None).unwrap();
    assert!(
        problems_saying(&overview, "unreadable merge announcement").is_empty(),
        "{overview:#}"
    );
    let hello = std::fs::read_to_string(bed.root("bus").join("etc/mesh/hello")).unwrap();
    assert_eq!(hello, "v1 while b is unreadable\n");

    // A newer minor version: a field this controller does not know is read, and ignored.
    publish(as_b("b", unknown_field));
    wait_for(
        "b's report with an unknown field to be read",
        Duration::from_secs(60),
        || {
            let (_, overview) = status(&bed, None)?;
            let b_shown = node_of(&overview, "b");
            match b_shown["report"]["machine"].as_str() {
                Some("converged") if b_shown["unreadable"].is_null() => Ok(()),
                _ => Err(format!("b shows {b_shown}")),
            }
        },
    );
}

/// The rollout gate takes an unreadable report as its node's answer: a first machine whose
/// report does not read stops the module's rollout at once, naming the node and why — not at
/// the rollout's deadline, minutes later — and the other nodes keep what they ran. Over a real
/// nats-server with the daemon and real hosts on `b` and `bus`; `a`, first by name, is the
/// test publishing on `a`'s subject with `a`'s key. The daemon then keeps `a`'s last readable
/// report in the records (`heard/a.json`) as soon as its reports turn unreadable, with no
/// `status` run.
#[test]
fn a_first_machine_whose_report_does_not_read_stops_the_rollout_at_once_naming_it() {
    let mut bed = Bed::new(&["a", "b"]);
    for node in ["bus", "b"] {
        bed.start_host(node);
    }
    push(&bed, &["bus", "b"]);
    let repo = Repo::new();
    let v1 = commit_base(&repo, "v1 that a never reads\n");
    bed.library().repo_add("cat", repo.path()).unwrap();
    let (_daemon, _) = start_serve(&bed, &[], |_| true);
    let rt = support::fleet::runtime();
    let a = rt
        .block_on(mesh_bus::NatsBus::connect(&bed.node_options("a")))
        .unwrap();
    let bus = bed.controller_bus(&rt);
    support::fleet::wait_for_merge_consumer(&rt, &bus);
    let js = {
        let _in = rt.enter();
        bus.jetstream()
    };
    rt.block_on(mesh_bus::jetstream::publish_merge(&js, "cat", "main", &v1))
        .unwrap();
    wait_for("`a` to be sent first", Duration::from_secs(120), || {
        bed.record("sent/a.json")
            .ok_or_else(|| "not yet".to_owned())
    });
    rt.block_on(async {
        a.client()
            .publish(
                mesh_bus::subjects::report("a"),
                b"\x00not a report".to_vec().into(),
            )
            .await
            .unwrap();
        a.client().flush().await.unwrap();
    });
    let plan = wait_for(
        "the rollout to stop at `a`",
        Duration::from_secs(60),
        || {
            let plans = support::daemon::plans(&bed);
            match plans.iter().find(|p| p["commit"] == v1.as_str()) {
                Some(plan) if plan["state"]["state"] == "stopped" => Ok(plan.clone()),
                other => Err(format!("{other:?}")),
            }
        },
    );
    assert_eq!(plan["state"]["node"], "a", "{plan}");
    let reason = plan["state"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("unreadable report: not a report: ")
            && reason.contains(r#"(13 bytes: "\x00not a report")"#),
        "{plan}"
    );
    // The others were not sent the new version.
    let hello = std::fs::read_to_string(bed.root("b").join("etc/mesh/hello")).unwrap();
    assert_eq!(hello, "hello, fleet\n");
    let (code, overview) = status(&bed, None).unwrap();
    assert_eq!(code, 3, "{overview}");
    assert!(
        node_of(&overview, "a")["unreadable"]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("not a report: ")),
        "{overview}"
    );
    // No readable report of `a` yet: nothing kept.
    assert_eq!(bed.record("heard/a.json"), None);

    // The daemon keeps a node's last readable report by itself, as it hears its reports turn
    // unreadable: no `status` runs from here until the record is there.
    let mut readable = node_of(&overview, "b")["report"].clone();
    readable["node"] = Value::from("a");
    for payload in [serde_json::to_vec(&readable).unwrap(), b"garbage".to_vec()] {
        rt.block_on(async {
            a.client()
                .publish(mesh_bus::subjects::report("a"), payload.into())
                .await
                .unwrap();
            a.client().flush().await.unwrap();
        });
    }
    let kept = wait_for(
        "the daemon to keep a's last readable report",
        Duration::from_secs(60),
        || {
            let kept = bed.record("heard/a.json").ok_or("not yet")?;
            let kept: Value = serde_json::from_str(&kept).map_err(|e| e.to_string())?;
            if kept["report"]["declaration"] == readable["declaration"] {
                Ok(kept)
            } else {
                Err(format!("{kept}"))
            }
        },
    );
    assert_eq!(kept["report"]["node"], "a", "{kept}");
    // As a person reads it, in `status`.
    let text = bed.run(&["status"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("a: "), "{text}");
    assert!(text.contains("its last readable report, heard "), "{text}");
}
