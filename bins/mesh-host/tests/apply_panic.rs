//! A panic in an apply ("a panic is silent"): the agent used to end at
//! `spawn_blocking(..).await.expect(..)`, its node reporting nothing ever again. Now the panic is
//! the report — every resource failed, naming it — and the agent goes on to the next
//! declaration.
//!
//! One test in this binary: it sets the fail point [`mesh_host::PANIC_IN_APPLY`] to panic (the
//! `fail` crate; the crate's tests build it with the `fail-points` feature), and removes it
//! only once the panicked report is heard.

use mesh_apply::{ContainerRuntimeChoice, HostConfig};
use mesh_bus::{subjects, Bus, InProcessBus};
use mesh_host::{ArchiveSource, PANIC_IN_APPLY};
use mesh_model::report::{MachineState, Outcome, Report};
use std::sync::Arc;
use std::time::Duration;

const DECLARATION: &str = r#"{"format":1,"node":"box","resources":[
  {"id":"demo/directory/etc","module":"demo","spec":{"kind":"directory","path":"/etc/demo","mode":493,"owner":"root","group":"root"}},
  {"id":"demo/file/conf","module":"demo","after":["demo/directory/etc"],"spec":{"kind":"file","path":"/etc/demo/demo.conf","content":"hello\n","mode":420,"owner":"root","group":"root"}}
]}"#;

/// A generous bound on a failure, never a wait for success.
const DEADLINE: Duration = Duration::from_secs(60);

async fn next_report(reports: &mut mesh_bus::Subscription) -> Report {
    let message = tokio::time::timeout(DEADLINE, reports.next())
        .await
        .expect("a report within the deadline")
        .expect("the report subscription is open");
    serde_json::from_slice(&message.payload).expect("a report parses")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_an_apply_is_a_failed_report_naming_it_and_the_agent_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (root, state) = (dir.path().join("root"), dir.path().join("state"));
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\n").unwrap();
    let config = HostConfig {
        root: root.clone(),
        state_dir: state.clone(),
        containers: ContainerRuntimeChoice::Unsupported,
        ..HostConfig::default()
    };
    let bus = InProcessBus::new();
    let mut reports = bus.subscribe(&subjects::report("box")).await.unwrap();
    let agent = mesh_host::start(
        Arc::new(bus.clone()),
        "box".to_owned(),
        config,
        ArchiveSource::cache_only(&state),
    )
    .await
    .unwrap();

    fail::cfg(
        PANIC_IN_APPLY,
        &format!("panic(fail point {PANIC_IN_APPLY})"),
    )
    .unwrap();
    bus.publish(&subjects::declaration("box"), DECLARATION.into())
        .await
        .unwrap();
    let report = next_report(&mut reports).await;
    fail::remove(PANIC_IN_APPLY);
    assert_eq!(report.machine, MachineState::Partial, "{report:#?}");
    assert_eq!(report.resources.len(), 2, "{report:#?}");
    for (id, outcome) in &report.resources {
        match outcome {
            Outcome::Failed { reason, .. } => assert!(
                reason.starts_with("the host's apply panicked: ")
                    && reason.contains(PANIC_IN_APPLY),
                "{id}: {reason}"
            ),
            other => panic!("{id} is {other:?}, not failed naming the panic"),
        }
    }
    assert!(!root.join("etc/demo").exists(), "nothing was applied");

    // The agent goes on: the same declaration again, no fail point, converges.
    assert!(!agent.is_finished(), "the agent ended at the panic");
    bus.publish(&subjects::declaration("box"), DECLARATION.into())
        .await
        .unwrap();
    let report = next_report(&mut reports).await;
    assert_eq!(report.machine, MachineState::Converged, "{report:#?}");
    assert_eq!(
        std::fs::read_to_string(root.join("etc/demo/demo.conf")).unwrap(),
        "hello\n"
    );
    agent.abort();
}
