//! A container whose judgement failed stays failed until it passes: real `mesh-host serve`
//! daemons on a real nats-server, real podman, the controller's library in process (`status`,
//! and `/metrics` as `serve --http` answers it). The host's retries are driven by its own
//! backoff (`--first-retry 1`), and the host is started again in between; every wait is on a
//! report (a condition).
//! Needs podman configured as `scripts/podman-env.sh` does; fails, never skips, without it.

use crate::support;
use mesh_bus::Bus as _;
use mesh_model::report::{MachineState, Outcome, Report};
use std::time::Duration;
use support::fleet::{runtime, write, Bed};

/// Removes the test's container, whatever made it.
struct Removed(String);

impl Drop for Removed {
    fn drop(&mut self) {
        mesh_test_support::podman::remove(&self.0);
    }
}

/// Issue 41: after a container's health check failed, the host's retry reported the container
/// `unchanged` and the node converged, its port dead, and `mesh_resources{outcome="failed"}` was
/// 0 — "not judged again" was applied to a container that had never passed its judgement.
#[test]
fn a_container_whose_health_check_fails_stays_failed_in_every_report_of_the_hosts_retries() {
    mesh_test_support::podman::podman_config();
    let mut bed = Bed::new(&["a"]);
    bed.put_inventory(
        "bus-node = \"bus\"\n\n[nodes.bus]\n[nodes.a]\n\n[assignments]\nweb = [\"a\"]\n",
    );
    let prefix = format!("t{}-j-", std::process::id());
    let _removed = Removed(format!("{prefix}mesh-web-web"));
    write(
        &bed.home.path().join("catalogue/modules/web/module.toml"),
        &format!(
            "name = \"web\"\n\n[containers.web]\nimage = \"{}\"\ncommand = [\"sleep\", \"3600\"]\n\
             settle = \"100ms\"\nhealth = {{ command = [\"sh\", \"-c\", \"echo not listening; \
             exit 1\"], within = \"300ms\" }}\n",
            mesh_test_support::podman::image()
        ),
    );
    bed.start_host("bus");
    bed.start_host_with(
        "a",
        &[
            "--first-retry",
            "1",
            "--container-prefix",
            &prefix,
            "--podman-stop-timeout",
            "0",
        ],
    );
    let rt = runtime();
    let bus = bed.controller_bus(&rt);
    let mut reports = rt.block_on(bus.subscribe("mesh.report.a")).unwrap();
    let pushed = bed.push_all(60, 3);
    let digest = pushed["a"]["declaration"].as_str().unwrap().to_owned();

    // The host tries it again after each backoff, with no push: every report of the
    // declaration names it failed with its judgement's reason, the machine never converged,
    // until it has been judged three times.
    let judged = rt.block_on(async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        let mut seen = Vec::new();
        loop {
            let message = tokio::time::timeout_at(deadline, reports.next())
                .await
                .unwrap_or_else(|_| panic!("three judgements within 120 s; seen {seen:#?}"))
                .unwrap();
            let report = Report::from_json(&message.payload).unwrap();
            if report.declaration != digest {
                continue;
            }
            assert_ne!(report.machine, MachineState::Converged, "{report:#?}");
            if report.machine == MachineState::MidChange && report.resources.is_empty() {
                continue; // an apply under way says so first
            }
            match report.resources.get("web/container/web") {
                Some(Outcome::Failed {
                    reason, attempts, ..
                }) => {
                    assert!(reason.contains("not listening"), "{report:#?}");
                    seen.push(*attempts);
                    if *attempts >= 3 {
                        return report;
                    }
                }
                other => panic!("not failed after {seen:?}: {other:?}\n{report:#?}"),
            }
        }
    });
    assert_eq!(judged.machine, MachineState::Partial, "{judged:#?}");

    // A host started again keeps the failed judgement (it is in its state directory): it says
    // the container waits for its retry, naming why, then judges it again and it fails again.
    bed.start_host_with(
        "a",
        &[
            "--first-retry",
            "1",
            "--container-prefix",
            &prefix,
            "--podman-stop-timeout",
            "0",
        ],
    );
    rt.block_on(async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            let message = tokio::time::timeout_at(deadline, reports.next())
                .await
                .expect("a fourth judgement within 120 s of the host's restart")
                .unwrap();
            let report = Report::from_json(&message.payload).unwrap();
            if report.declaration != digest {
                continue;
            }
            assert_ne!(report.machine, MachineState::Converged, "{report:#?}");
            match report.resources.get("web/container/web") {
                None if report.machine == MachineState::MidChange => {}
                Some(Outcome::Waiting { last_reason, .. }) => {
                    assert!(last_reason.contains("not listening"), "{report:#?}");
                }
                Some(Outcome::Failed {
                    reason, attempts, ..
                }) => {
                    assert!(reason.contains("not listening"), "{report:#?}");
                    if *attempts >= 4 {
                        return;
                    }
                }
                other => panic!("after the restart, not failed: {other:?}\n{report:#?}"),
            }
        }
    });

    // `status` names it under attention, and `/metrics` counts it failed.
    let status = bed.library().status();
    assert_eq!(status.code, 3, "{:#}", status.json);
    let metrics = bed.library().metrics();
    let failed = metrics
        .lines()
        .find(|line| line.starts_with("mesh_resources{outcome=\"failed\"}"))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert_eq!(failed, "mesh_resources{outcome=\"failed\"} 1", "{metrics}");
}
