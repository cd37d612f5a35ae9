//! Containers that serve, under real podman: published ports, a port another program holds,
//! limits and the rest of how a container runs. Needs podman configured as
//! `scripts/podman-env.sh` does; fails, never skips, without it.

mod common;

use common::*;
use mesh_apply::{apply, ContainerRuntimeChoice};
use mesh_model::declaration::{Limits, PortMapping, Resource, NETWORK_BRIDGE, NETWORK_HOST};
use mesh_model::report::{Outcome, Report};
use mesh_test_support::podman::*;
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

const T0: u64 = 1_800_000_000;

fn sandbox() -> Sandbox {
    let mut sandbox = Sandbox::new();
    sandbox.config.containers = ContainerRuntimeChoice::Podman(podman_config());
    sandbox
}

fn run(sandbox: &Sandbox, resources: Vec<Resource>) -> Report {
    apply(&sandbox.config, &declaration(resources), T0).expect("the apply runs")
}

fn outcome<'a>(report: &'a Report, id: &str) -> &'a Outcome {
    report
        .resources
        .get(id)
        .unwrap_or_else(|| panic!("no outcome for {id} in {report:#?}"))
}

use mesh_test_support::wait::free_port;

/// Busybox's httpd serving `/` on `port` inside the container.
fn httpd(name: &str, machine_name: &str, port: u16) -> Resource {
    let mut resource = container("web", name, machine_name);
    spec_mut(&mut resource).command = ["httpd", "-f", "-p", &port.to_string()]
        .map(str::to_owned)
        .to_vec();
    resource
}

/// What `podman container inspect --format FORMAT name` says.
fn inspect(name: &str, format: &str) -> String {
    let output = Command::new("podman")
        .args(["container", "inspect", "--format", format, name])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

#[test]
fn a_published_port_answers_a_tcp_connect_from_the_host() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let name = names.name("publish");
    let port = free_port();
    let mut web = httpd("site", &name, 80);
    let spec = spec_mut(&mut web);
    spec.network = Some(NETWORK_BRIDGE.to_owned());
    spec.ports = vec![PortMapping::parse(&format!("127.0.0.1:{port}:80/tcp")).unwrap()];

    let report = run(&sandbox, vec![web]);
    assert_eq!(
        outcome(&report, "web/container/site"),
        &Outcome::Applied {
            changed: vec!["created".to_owned()]
        }
    );
    // Podman's forwarding may come up a moment after the container runs: waited on (the
    // test kit's wait on a condition), the last try's error said if it never answers.
    mesh_test_support::wait::wait_for(
        &format!("something to answer on 127.0.0.1:{port}"),
        Duration::from_secs(10),
        || TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string()),
    );
    assert_eq!(
        inspect(&name, "{{.HostConfig.NetworkMode}}"),
        NETWORK_BRIDGE
    );
}

#[test]
fn a_port_another_program_holds_fails_the_container_naming_the_port_and_the_program() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let published = names.name("held-bridge");
    let listening = names.name("held-host");
    // This test is the other program: it holds both ports.
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let held_too = TcpListener::bind("0.0.0.0:0").unwrap();
    let host_port = held_too.local_addr().unwrap().port();

    let mut on_bridge = httpd("bridge", &published, 80);
    let spec = spec_mut(&mut on_bridge);
    spec.network = Some(NETWORK_BRIDGE.to_owned());
    spec.ports = vec![PortMapping::parse(&format!("127.0.0.1:{port}:80")).unwrap()];
    // On host networking busybox's httpd, finding its port taken, would exit 0.
    let mut on_host = httpd("host", &listening, host_port);
    let spec = spec_mut(&mut on_host);
    spec.network = Some(NETWORK_HOST.to_owned());
    spec.ports = vec![PortMapping::parse(&format!("{host_port}:{host_port}")).unwrap()];

    let report = run(&sandbox, vec![on_bridge, on_host]);
    let us = format!("(pid {})", std::process::id());
    for (id, port) in [
        ("web/container/bridge", format!("127.0.0.1:{port}/tcp")),
        ("web/container/host", format!("*:{host_port}/tcp")),
    ] {
        let Outcome::Failed { reason, .. } = outcome(&report, id) else {
            panic!("{id} did not fail: {report:#?}");
        };
        assert!(
            reason.contains(&format!("host port {port} is held by another program")),
            "{reason}"
        );
        assert!(reason.contains(&us), "{reason}");
        assert!(!reason.contains("exited with code"), "{reason}");
    }
    assert!(status(&sandbox.config.root, &published).is_none());
    assert!(status(&sandbox.config.root, &listening).is_none());
    drop((held, held_too));
}

#[test]
fn limits_and_how_it_runs_show_in_podman_inspect_and_a_change_names_its_field() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let name = names.name("limited");
    let limited = |memory: &str| {
        let mut resource = container("app", "limited", &name);
        let spec = spec_mut(&mut resource);
        spec.entrypoint = Some(vec!["sleep".to_owned()]);
        spec.command = vec!["1000".to_owned()];
        spec.user = Some("65534:65534".to_owned());
        spec.limits = Limits {
            memory: Some(memory.to_owned()),
            cpus: Some("0.5".to_owned()),
            pids: Some(50),
        };
        spec.cap_drop = vec!["NET_RAW".to_owned()];
        spec.read_only_root = true;
        spec.workdir = Some("/tmp".to_owned());
        spec.labels = [("team".to_owned(), "media".to_owned())].into();
        spec.stop_timeout = Some(3);
        spec.restart = Some("on-failure".to_owned());
        resource
    };

    let first = run(&sandbox, vec![limited("64m")]);
    assert_eq!(
        outcome(&first, "app/container/limited"),
        &Outcome::Applied {
            changed: vec!["created".to_owned()]
        }
    );
    let shown = inspect(
        &name,
        "{{.HostConfig.Memory}} {{.HostConfig.NanoCpus}} {{.HostConfig.PidsLimit}} \
         {{.HostConfig.ReadonlyRootfs}} {{.Config.StopTimeout}} \
         {{.HostConfig.RestartPolicy.Name}} {{.Config.User}} {{.Config.WorkingDir}} \
         {{index .Config.Labels \"team\"}} {{.HostConfig.CapDrop}}",
    );
    assert_eq!(
        shown,
        "67108864 500000000 50 true 3 on-failure 65534:65534 /tmp media [CAP_NET_RAW]"
    );

    let second = run(&sandbox, vec![limited("64m")]);
    assert_eq!(
        outcome(&second, "app/container/limited"),
        &Outcome::Unchanged
    );
    let third = run(&sandbox, vec![limited("96m")]);
    assert_eq!(
        outcome(&third, "app/container/limited"),
        &Outcome::Applied {
            changed: vec!["memory".to_owned()]
        }
    );
    assert_eq!(inspect(&name, "{{.HostConfig.Memory}}"), "100663296");
}

/// Removes the podman networks it names when dropped, whoever made them.
struct Networks(Vec<String>);

impl Networks {
    fn name(&mut self, what: &str) -> String {
        let name = format!("mesh-test-{what}-{}", std::process::id());
        self.0.push(name.clone());
        remove_network(&name);
        name
    }
}

impl Drop for Networks {
    fn drop(&mut self) {
        for name in &self.0 {
            remove_network(name);
        }
    }
}

fn remove_network(name: &str) {
    let _ = Command::new("podman")
        .args(["network", "rm", "--force", name])
        .output();
}

fn network_exists(name: &str) -> bool {
    Command::new("podman")
        .args(["network", "exists", name])
        .status()
        .unwrap()
        .success()
}

fn network(module: &str, name: &str, machine_name: &str) -> Resource {
    Resource {
        id: mesh_model::declaration::resource_id(module, "network", name),
        module: module.to_owned(),
        together: None,
        after: Vec::new(),
        spec: mesh_model::declaration::Spec::Network(mesh_model::declaration::NetworkSpec {
            name: machine_name.to_owned(),
        }),
    }
}

#[test]
fn a_declared_network_is_made_joined_and_given_back_and_a_foreign_one_is_left_alone() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let mut networks = Networks(Vec::new());
    let ours = networks.name("net");
    let theirs = networks.name("foreign-net");
    let joined = names.name("joins");
    let stranded = names.name("stranded");
    let joining = |name: &str, machine_name: &str, net: &str| {
        let mut resource = after(
            container("app", name, machine_name),
            &format!("app/network/{net}"),
        );
        spec_mut(&mut resource).network = Some(if net == "backend" {
            ours.clone()
        } else {
            theirs.clone()
        });
        resource
    };
    let made_by_hand = Command::new("podman")
        .args(["network", "create", &theirs])
        .output()
        .unwrap();
    assert!(made_by_hand.status.success(), "{made_by_hand:?}");

    let first = run(
        &sandbox,
        vec![
            network("app", "backend", &ours),
            network("app", "front", &theirs),
            joining("joins", &joined, "backend"),
            joining("stranded", &stranded, "front"),
        ],
    );
    assert_eq!(
        outcome(&first, "app/network/backend"),
        &Outcome::Applied {
            changed: vec!["created".to_owned()]
        }
    );
    assert_eq!(
        outcome(&first, "app/container/joins"),
        &Outcome::Applied {
            changed: vec!["created".to_owned()]
        }
    );
    assert!(
        inspect(
            &joined,
            "{{range $name, $_ := .NetworkSettings.Networks}}{{$name}} {{end}}"
        )
        .split_whitespace()
        .any(|n| n == ours),
        "the container joins the network"
    );
    let Outcome::Failed { reason, .. } = outcome(&first, "app/network/front") else {
        panic!("a foreign network was taken: {first:#?}");
    };
    assert!(
        reason.contains(&format!(
            "a network named `{theirs}` exists that the mesh did not make"
        )),
        "{reason}"
    );
    assert_eq!(
        outcome(&first, "app/container/stranded"),
        &Outcome::Skipped {
            gated_by: "app/network/front".to_owned()
        }
    );

    // Undeclared: the container goes, then the network it made; the foreign one stays.
    let second = run(&sandbox, Vec::new());
    let Some(Outcome::Removed { detail }) = second.undeclared.get("app/network/backend") else {
        panic!("the network was not given back: {second:#?}");
    };
    assert!(detail.contains("removed network"), "{detail}");
    assert!(!network_exists(&ours));
    assert!(
        network_exists(&theirs),
        "a network the mesh did not make is left alone"
    );
}

#[test]
fn a_device_mapping_is_visible_inside_the_container() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let name = names.name("device");
    let mut resource = container("app", "device", &name);
    spec_mut(&mut resource).devices = vec![mesh_model::declaration::Device {
        source: "/dev/null".to_owned(),
        at: "/dev/x".to_owned(),
        permissions: Some("rw".to_owned()),
    }];
    let report = run(&sandbox, vec![resource]);
    assert_eq!(
        outcome(&report, "app/container/device"),
        &Outcome::Applied {
            changed: vec!["created".to_owned()]
        }
    );
    let inside = Command::new("podman")
        .args(["exec", &name, "sh", "-c", "test -c /dev/x && echo a device"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&inside.stdout).trim(),
        "a device",
        "{inside:?}"
    );
    assert_eq!(
        inspect(
            &name,
            "{{range .HostConfig.Devices}}{{.PathOnHost}}:{{.PathInContainer}} {{end}}"
        ),
        "/dev/null:/dev/x"
    );
}

#[test]
fn a_crash_under_a_restart_policy_is_still_reported_with_its_exit_code_and_log() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let name = names.name("crashing");
    for policy in ["always", "on-failure"] {
        let mut crashing = container("app", "crashing", &name);
        let spec = spec_mut(&mut crashing);
        spec.command = ["sh", "-c", "echo 'cannot open the library'; exit 2"]
            .map(str::to_owned)
            .to_vec();
        spec.restart = Some(policy.to_owned());
        let report = run(&sandbox, vec![crashing]);
        match outcome(&report, "app/container/crashing") {
            Outcome::Failed { reason, .. } => {
                assert!(reason.contains("exited with code 2"), "{policy}: {reason}");
                assert!(
                    reason.contains("cannot open the library"),
                    "{policy}: {reason}"
                );
            }
            other => panic!("{policy}: a crash was not reported: {other:?}"),
        }
        // Undeclared between the two, so the second policy makes it afresh.
        run(&sandbox, Vec::new());
    }
}

/// Counts the `mid-change` reports an apply is told to publish.
#[derive(Default)]
struct MidChanges(std::sync::Mutex<usize>);

impl mesh_apply::ApplyProgress for MidChanges {
    fn changing(&self, _report: &Report) {
        *self.0.lock().unwrap() += 1;
    }
}

impl MidChanges {
    fn take(&self) -> usize {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// The rule “Mid-change is said before anything changes”, for a declaration sent again as it
/// was (a rollout's re-send, a redelivery): an apply that finds its network made and its
/// container running as declared changes nothing and never says `mid-change`, and one whose
/// container failed before on a port another program holds says the failure again (`waiting`
/// out its backoff, with its reason) without saying it either. Once the port is free and the
/// backoff over, the apply that makes the container says it, once.
#[test]
fn a_declaration_sent_again_says_mid_change_only_when_it_changes_something() {
    let sandbox = sandbox();
    let mut names = Containers::new();
    let mut networks = Networks(Vec::new());
    let net = networks.name("resent-net");
    let serving = names.name("resent-serving");
    let blocked = names.name("resent-blocked");
    let free = free_port();
    // This test is the other program holding the second container's port.
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = held.local_addr().unwrap().port();
    let publishing = |name: &str, machine_name: &str, port: u16| {
        let mut resource = after(httpd(name, machine_name, 80), "web/network/backend");
        let spec = spec_mut(&mut resource);
        spec.network = Some(net.clone());
        spec.ports = vec![PortMapping::parse(&format!("127.0.0.1:{port}:80/tcp")).unwrap()];
        resource
    };
    let resources = vec![
        network("web", "backend", &net),
        publishing("serving", &serving, free),
        publishing("blocked", &blocked, taken),
    ];
    let told = MidChanges::default();
    let apply_at = |now: u64| {
        mesh_apply::apply_archived_live(
            &sandbox.config,
            &declaration(resources.clone()),
            &Default::default(),
            now,
            &told,
        )
        .expect("the apply runs")
    };

    let first = apply_at(T0);
    assert_eq!(told.take(), 1, "the first apply makes things: {first:#?}");
    assert_eq!(
        outcome(&first, "web/container/serving"),
        &Outcome::Applied {
            changed: vec!["created".to_owned()]
        }
    );
    let Outcome::Failed { reason, .. } = outcome(&first, "web/container/blocked") else {
        panic!("the container on a held port did not fail: {first:#?}");
    };
    assert!(
        reason.contains(&format!("127.0.0.1:{taken}/tcp")),
        "{reason}"
    );

    // Sent again as it was, within the failed container's backoff.
    let again = apply_at(T0 + 1);
    assert_eq!(told.take(), 0, "a re-send said mid-change: {again:#?}");
    assert_eq!(again.machine, mesh_model::report::MachineState::Partial);
    assert_eq!(outcome(&again, "web/network/backend"), &Outcome::Unchanged);
    assert_eq!(
        outcome(&again, "web/container/serving"),
        &Outcome::Unchanged
    );
    let Outcome::Waiting { last_reason, .. } = outcome(&again, "web/container/blocked") else {
        panic!("the failed container is not waiting out its backoff: {again:#?}");
    };
    assert!(
        last_reason.contains(&format!("127.0.0.1:{taken}/tcp")),
        "{last_reason}"
    );

    // The port let go and the backoff over: the container is made, and that is said once.
    drop(held);
    let retry = sandbox.config.retry.backoff_secs(1);
    let made = apply_at(T0 + 1 + retry);
    assert_eq!(told.take(), 1, "{made:#?}");
    assert_eq!(
        outcome(&made, "web/container/blocked"),
        &Outcome::Applied {
            changed: vec!["created".to_owned()]
        }
    );
    assert_eq!(made.machine, mesh_model::report::MachineState::Converged);
    let settled = apply_at(T0 + 2 + retry);
    assert_eq!(told.take(), 0, "{settled:#?}");
    assert_eq!(settled.machine, mesh_model::report::MachineState::Converged);
}
