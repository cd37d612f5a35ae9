//! A stopped rollout is retried and recovered: a port held on a machine after the first stops
//! `app`'s rollout there (`max-parallel = 1`); with `on-failure = "revert"` that machine is sent
//! back what it ran, whichever it was; once the port is freed, `plans retry` sends the machine
//! the new build again and the rollout goes on — to the next machine, whose port is held too,
//! which is sent back in its turn — and, its port freed, completes. The machines that applied
//! are not sent again.
//!
//! A real nats-server, real `mesh-host serve` daemons running their containers under this
//! machine's podman (`scripts/podman-env.sh`), a real git repository; the controller's library
//! in process (`Bed::library`), as the commands call it.

use crate::fleet_containers::{image, RunPrefix};
use crate::revert::{answer, sent_command};
use crate::support;
use serde_json::Value;
use std::net::TcpListener;
use support::fleet::{write, Bed};
use support::Repo;

/// The nodes `app` is assigned to, in the order its rollout sends them (the bus node runs no
/// container).
const NODES: [&str; 3] = ["a", "b", "c"];

/// `app`'s `module.toml`, one machine at a time, each failed machine sent back what it ran:
/// with `page`, busybox's httpd serving it on host port `{{port}}` (podman's bridge); without,
/// a container that serves nothing and holds no port.
fn app_module(page: Option<&str>) -> String {
    let (command, ports) = match page {
        Some(page) => (
            format!(
                "mkdir -p /www && echo {page} > /www/index.html && exec httpd -f -p 8080 -h /www"
            ),
            "ports = [\"127.0.0.1:{{port}}:8080/tcp\"]\n",
        ),
        None => (
            "trap 'exit 0' TERM; while true; do sleep 1; done".to_owned(),
            "",
        ),
    };
    format!(
        "name = \"app\"\non-failure = \"revert\"\nmax-parallel = 1\n\n[settings]\nport = 8080\n\n\
         [containers.web]\nimage = \"{}\"\ncommand = [\"sh\", \"-c\", \"{command}\"]\n{ports}",
        image()
    )
}

#[test]
fn a_rollout_stopped_by_a_held_port_is_retried_once_freed_and_each_failed_machine_sent_back() {
    // Declared before the bed, so dropped after it: the hosts are killed first, then every
    // container they made is removed.
    let prefixes = RunPrefix::new();
    let mut bed = Bed::new(&NODES);
    let ports: Vec<u16> = NODES
        .iter()
        .map(|_| mesh_test_support::wait::free_port())
        .collect();
    let inventory = bed.record("inventory.toml").unwrap();
    bed.put_inventory(&format!("{inventory}app = [\"a\", \"b\", \"c\"]\n"));
    let v1 = app_module(None);
    write(
        &bed.home.path().join("catalogue/modules/app/module.toml"),
        &v1,
    );
    for (node, port) in NODES.iter().zip(&ports) {
        let answer = bed
            .library()
            .settings_set("app", Some(node), &format!("{{\"port\": {port}}}"))
            .unwrap();
        assert!(!answer.refused(), "{answer:?}");
    }
    for node in std::iter::once("bus").chain(NODES) {
        let prefix = prefixes.of(node);
        bed.start_host_with(
            node,
            &["--container-prefix", &prefix, "--podman-stop-timeout", "0"],
        );
    }
    bed.push_all(120, 0);
    let repo = Repo::new();
    repo.write(&[("modules/app/module.toml", &v1)]);
    repo.commit("app: v1, serving nothing");
    bed.library().repo_add("cat", repo.path()).unwrap();
    bed.library().merge_expecting("cat", 0);

    // v2 publishes the port, while another program holds the ports of `b` and `c`: `a` takes
    // it, `b` fails and is sent back v1 (which runs), and the rollout stops there; `c` is not
    // sent.
    let held_b = TcpListener::bind(("127.0.0.1", ports[1])).unwrap();
    let held_c = TcpListener::bind(("127.0.0.1", ports[2])).unwrap();
    repo.write(&[("modules/app/module.toml", &app_module(Some("v2")))]);
    repo.commit("app: v2, published");
    let out = bed.library().merge_expecting("cat", 3);
    assert!(out.contains("stopped at `b`"), "{out}");
    assert!(
        out.contains("`app`: sent `b` back what it ran before"),
        "{out}"
    );
    assert_eq!(answer(ports[0]).as_deref(), Some("v2"));
    assert!(
        sent_command(&bed, "b").contains("sleep"),
        "`b` was sent back v1"
    );
    assert!(
        sent_command(&bed, "c").contains("sleep"),
        "`c` was not sent v2"
    );
    let status = bed.library().status();
    assert_eq!(status.code, 3, "{:#}", status.json);

    // `b`'s port freed: the retry sends `b` v2 again, then `c`, whose port is still held: `c`
    // fails, is sent back v1, and the rollout stops there. `a` is not sent again.
    drop(held_b);
    let retried = bed.library().plans_retry("plan-2").unwrap();
    assert!(retried.stopped, "{}", retried.lines);
    assert!(
        retried.lines.contains("stopped at `c`"),
        "{}",
        retried.lines
    );
    assert!(
        retried
            .lines
            .contains("`app`: sent `c` back what it ran before"),
        "{}",
        retried.lines
    );
    assert!(!retried.lines.contains("sent `a`"), "{}", retried.lines);
    assert_eq!(answer(ports[1]).as_deref(), Some("v2"));
    assert!(
        sent_command(&bed, "c").contains("sleep"),
        "`c` was sent back v1"
    );

    // `c`'s port freed: retried again, it completes, every machine serves v2, and status is
    // settled.
    drop(held_c);
    let retried = bed.library().plans_retry("plan-2").unwrap();
    assert!(!retried.stopped, "{}", retried.lines);
    for port in &ports {
        assert_eq!(answer(*port).as_deref(), Some("v2"), "port {port}");
    }
    let status = bed.library().status();
    assert_eq!(status.code, 0, "{:#}", status.json);

    // v3 fails its health check on `b` alone: `a` takes it, `b` fails and is sent back v2,
    // and the rollout stops there. A push now would take `a` back to v2, the deployed build:
    // it is held, naming both builds, and the others go ahead; allowing `app`'s downgrade
    // sends it.
    repo.write(&[("modules/app/module.toml", &app_v3(ports[1]))]);
    repo.commit("app: v3, unhealthy on b");
    let out = bed.library().merge_expecting("cat", 3);
    assert!(out.contains("stopped at `b`"), "{out}");
    assert_eq!(answer(ports[0]).as_deref(), Some("v3"));
    let pushed = bed.library().push_all().unwrap();
    let a = result_of(&pushed.json, "a");
    assert_eq!(a["result"], "held", "{:#}", pushed.json);
    assert_eq!(a["downgrades"][0]["module"], "app", "{a:#}");
    assert_eq!(a["downgrades"][0]["runs-plan"], "plan-3", "{a:#}");
    assert_eq!(
        result_of(&pushed.json, "c")["result"],
        "reported",
        "{:#}",
        pushed.json
    );
    assert_eq!(
        answer(ports[0]).as_deref(),
        Some("v3"),
        "`a` was not sent v2"
    );
    let pushed = bed.library().push_all_downgrading(&["app"]).unwrap();
    assert_eq!(
        result_of(&pushed.json, "a")["result"],
        "reported",
        "{:#}",
        pushed.json
    );
    assert_eq!(
        answer(ports[0]).as_deref(),
        Some("v2"),
        "`a` was sent the deployed v2"
    );
}

/// `app` v3: serving v3, its health check failing on the node whose port is `unhealthy`.
fn app_v3(unhealthy: u16) -> String {
    format!(
        "{}health = {{ command = [\"sh\", \"-c\", \"test {{{{port}}}} -ne {unhealthy}\"], \
         within = \"10s\" }}\n",
        app_module(Some("v3"))
    )
}

/// What a push said of `node`.
fn result_of(pushed: &Value, node: &str) -> Value {
    pushed
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["node"] == node)
        .unwrap_or_else(|| panic!("no {node}: {pushed:#}"))
        .clone()
}
