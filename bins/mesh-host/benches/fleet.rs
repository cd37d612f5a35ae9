//! The fleet path, end to end on loopback: a declaration sent on JetStream → the host
//! daemon ([`mesh_host::serve::serve`]) hears it on its subject → a no-op apply → its report
//! heard by the controller, against a raw NATS request/reply round trip measured in the same
//! run; then one declaration to each of 200 hosts at once, until every report is heard; then
//! the same fan-out of a changed declaration just after the server was restarted (every host
//! connecting, subscribing and asking again), against one with the bus up.
//!
//! Every host is a real daemon with its own NATS connection, root and state directory, in this
//! one process (50, then 200 of them); the server is a loopback `nats-server` this benchmark
//! starts. Run:
//!
//! ```text
//! cargo bench -p mesh-host --bench fleet
//! ```
//!
//! It prints p50/p90/p99 for each way, the ratio of the p50s (the target is at most 3×), the
//! fan-out's time to the last report, and the median ratio of a fan-out after a restart to one
//! with the bus up.

use futures_util::StreamExt;
use mesh_apply::HostConfig;
use mesh_bus::{jetstream, subjects, NatsBus, NatsOptions};
use mesh_model::declaration::{Declaration, FileSpec, Resource, Spec};
use mesh_model::report::{MachineState, Report};
use mesh_test_support::nats_server::NatsServer;
use std::path::Path;
use std::time::{Duration, Instant};

const HOSTS: usize = 50;
const FAN_OUT: usize = 200;
const ROUNDS: usize = 20; // each round sends once to every one of the 50 hosts, one at a time
const RAW: usize = 1000;
const RESTARTS: usize = 5;

fn summarize(mut samples: Vec<Duration>) -> (Duration, Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.9), at(0.99))
}

fn show(name: &str, (p50, p90, p99): (Duration, Duration, Duration)) {
    println!("{name:<44} p50 {p50:>9.1?}  p90 {p90:>9.1?}  p99 {p99:>9.1?}");
}

fn node(i: usize) -> String {
    format!("n{i:03}")
}

/// One small file: the apply opens it and finds it as declared.
fn declaration(node: &str) -> Declaration {
    saying(node, format!("{node}, managed by mesh\n"))
}

/// The same file, holding `content`.
fn saying(node: &str, content: String) -> Declaration {
    Declaration::new(
        node,
        vec![Resource {
            id: "base/file/motd".into(),
            module: "base".into(),
            together: None,
            after: Vec::new(),
            spec: Spec::File(FileSpec {
                path: "/etc/motd".into(),
                content: Some(content),
                source: None,
                sealed: None,
                mode: 0o644,
                owner: "root".into(),
                group: "root".into(),
            }),
        }],
    )
}

fn sandbox(dir: &Path) {
    std::fs::create_dir_all(dir.join("etc")).unwrap();
    std::fs::write(dir.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    std::fs::write(dir.join("etc/group"), "root:x:0:\n").unwrap();
}

/// Starts `count` host daemons; returns the signal that stops them.
async fn start_hosts(
    url: &str,
    dir: &Path,
    count: usize,
) -> (
    tokio::sync::watch::Sender<bool>,
    Vec<tokio::task::JoinHandle<()>>,
) {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for i in 0..count {
        let name = node(i);
        let root = dir.join("roots").join(&name);
        sandbox(&root);
        let config = mesh_host::serve::ServeConfig {
            node: name.clone(),
            bus_url: url.to_owned(),
            secret: mesh_bus::NodeSecret::Password("unused".into()),
            bus_tls: mesh_bus::BusTls::default(),
            host: HostConfig {
                root,
                state_dir: dir.join("state").join(&name),
                containers: mesh_apply::ContainerRuntimeChoice::Unsupported,
                ..HostConfig::default()
            },
            archives: mesh_host::ArchiveSource::cache_only(&dir.join("state").join(&name)),
            heartbeat: Duration::from_secs(3600),
            reconcile: Duration::from_secs(3600),
            full_check: Duration::from_secs(86_400),
        };
        let mut stopped = stopped.clone();
        tasks.push(tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            };
            mesh_host::serve::serve(config, shutdown).await.unwrap();
        }));
    }
    (stop, tasks)
}

/// Sends `node` its declaration and waits for its report of it.
async fn send(
    js: &async_nats::jetstream::Context,
    reports: &mut async_nats::Subscriber,
    name: &str,
    payload: &bytes::Bytes,
    digest: &str,
) -> Duration {
    let start = Instant::now();
    let ack = js
        .publish(subjects::declaration(name), payload.clone())
        .await
        .unwrap();
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), reports.next())
            .await
            .expect("a report within 10 s")
            .unwrap();
        let report = Report::from_json(&message.payload).unwrap();
        // A first apply says `mid-change` before it writes: its settled report follows.
        if report.node == name
            && report.declaration == digest
            && report.machine != MachineState::MidChange
        {
            assert_eq!(report.machine, MachineState::Converged);
            break;
        }
    }
    let elapsed = start.elapsed();
    ack.await.unwrap();
    elapsed
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}

async fn run() {
    let mut server = NatsServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    let controller = NatsBus::connect(&NatsOptions::new(&url)).await.unwrap();
    let js = controller.jetstream();
    jetstream::ensure_streams(&js).await.unwrap();
    let client = controller.client().clone();

    // The raw baseline: request/reply between two connections.
    let responder = async_nats::connect(&url).await.unwrap();
    let mut echo = responder.subscribe("bench.echo").await.unwrap();
    let answering = responder.clone();
    tokio::spawn(async move {
        while let Some(message) = echo.next().await {
            if let Some(reply) = message.reply {
                answering.publish(reply, message.payload).await.unwrap();
            }
        }
    });
    responder.flush().await.unwrap();
    mesh_bus::nats::round_trip(&responder).await.unwrap();

    // JetStream alone: a publish stored and handed to a waiting pull consumer, one hop each way.
    let stream = js
        .create_stream(async_nats::jetstream::stream::Config {
            name: "BENCH".into(),
            subjects: vec!["bench.js".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let _made: async_nats::jetstream::consumer::PullConsumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("bench".into()),
            ack_policy: async_nats::jetstream::consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .unwrap();
    let reader = async_nats::connect(&url).await.unwrap();
    let consumer: async_nats::jetstream::consumer::PullConsumer =
        async_nats::jetstream::new(reader)
            .get_consumer_from_stream("bench", "BENCH")
            .await
            .unwrap();
    drop(stream);
    let mut messages = consumer.messages().await.unwrap();
    let mut jetstream_hops = Vec::new();
    for _ in 0..300 {
        let start = Instant::now();
        let ack = js.publish("bench.js", "x".into()).await.unwrap();
        let message = messages.next().await.unwrap().unwrap();
        jetstream_hops.push(start.elapsed());
        message.ack().await.unwrap();
        ack.await.unwrap();
    }

    let dir = tempfile::tempdir().unwrap();
    let declarations: Vec<(bytes::Bytes, String)> = (0..FAN_OUT)
        .map(|i| {
            let d = declaration(&node(i));
            (d.canonical_json().into(), d.digest())
        })
        .collect();
    let mut reports = client.subscribe(subjects::ALL_REPORTS).await.unwrap();
    mesh_bus::nats::round_trip(&client).await.unwrap();

    // 50 hosts: one declaration at a time, each to the next host.
    let (stop, tasks) = start_hosts(&url, dir.path(), HOSTS).await;
    for (i, (payload, digest)) in declarations.iter().take(HOSTS).enumerate() {
        // The first apply writes the file; every later one is a no-op.
        send(&js, &mut reports, &node(i), payload, digest).await;
    }
    let payload = bytes::Bytes::from(vec![b'x'; 256]);
    let mut raw = Vec::new();
    let mut fleet = Vec::new();
    for _ in 0..ROUNDS {
        // Alternate blocks, so drift on the machine touches both alike.
        for _ in 0..RAW / ROUNDS {
            let start = Instant::now();
            client.request("bench.echo", payload.clone()).await.unwrap();
            raw.push(start.elapsed());
        }
        for (i, (payload, digest)) in declarations.iter().take(HOSTS).enumerate() {
            fleet.push(send(&js, &mut reports, &node(i), payload, digest).await);
        }
    }
    // The host's own share: the same no-op apply, called directly.
    let config = HostConfig {
        root: dir.path().join("roots").join(node(0)),
        state_dir: dir.path().join("state").join(node(0)),
        containers: mesh_apply::ContainerRuntimeChoice::Unsupported,
        ..HostConfig::default()
    };
    let payload0 = declarations[0].0.clone();
    let applies: Vec<Duration> = (0..200)
        .map(|_| {
            let start = Instant::now();
            let report = mesh_host::handle_declaration(&config, &node(0), &payload0, 0);
            assert_eq!(report.machine, MachineState::Converged);
            start.elapsed()
        })
        .collect();
    let raw = summarize(raw);
    let fleet = summarize(fleet);
    let applies = summarize(applies);
    println!(
        "{HOSTS} hosts on loopback, {} sends, {RAW} raw round trips",
        ROUNDS * HOSTS
    );
    show("raw NATS request/reply", raw);
    show("declaration → no-op apply → report heard", fleet);
    show("  of which the no-op apply alone", applies);
    show(
        "JetStream publish → pull consumer (one way)",
        summarize(jetstream_hops),
    );
    println!(
        "ratio (p50): {:.2}×  (target ≤ 3×); without the apply: {:.2}×",
        fleet.0.as_secs_f64() / raw.0.as_secs_f64(),
        (fleet.0.as_secs_f64() - applies.0.as_secs_f64()) / raw.0.as_secs_f64()
    );
    stop.send(true).unwrap();
    for task in tasks {
        task.await.unwrap();
    }

    // Fan-out: 200 hosts, one declaration each, all at once.
    let (stop, tasks) = start_hosts(&url, dir.path(), FAN_OUT).await;
    for round in 0..3 {
        let elapsed = fan_out(&js, &mut reports, &declarations).await;
        // Round 0 applies for the first time on hosts 50..200 (files written).
        println!(
            "fan-out to {FAN_OUT} hosts, round {round}{}: every report heard in {elapsed:.1?} \
             ({:.2?} per host)",
            if round == 0 {
                " (first apply on 150)"
            } else {
                " (no-op)"
            },
            elapsed / FAN_OUT as u32
        );
    }

    // A bus restart: every host connects again, subscribes anew and asks the stream for what
    // was sent meanwhile. A changed declaration to every host just after the server is back,
    // against the same fan-out of a changed declaration with the bus up, in the same run.
    let changed = |round: usize| -> Vec<(bytes::Bytes, String)> {
        (0..FAN_OUT)
            .map(|i| {
                let d = saying(&node(i), format!("{}, change {round}\n", node(i)));
                (d.canonical_json().into(), d.digest())
            })
            .collect()
    };
    let mut up = Vec::new();
    let mut restarted = Vec::new();
    for round in 0..RESTARTS {
        let steady = fan_out(&js, &mut reports, &changed(2 * round)).await;
        server.restart().unwrap();
        // The controller's own connection back first: the sends are not what is measured.
        let back = Instant::now();
        mesh_bus::nats::round_trip(&client).await.unwrap();
        let after = fan_out(&js, &mut reports, &changed(2 * round + 1)).await;
        println!(
            "restart {round}: changed fan-out {steady:.1?} with the bus up, {after:.1?} just after \
             it came back (controller back in {:.1?})",
            back.elapsed()
        );
        up.push(steady);
        restarted.push(after);
    }
    up.sort();
    restarted.sort();
    println!(
        "ratio (median): a fan-out just after a bus restart ÷ one with the bus up: {:.2}×",
        restarted[RESTARTS / 2].as_secs_f64() / up[RESTARTS / 2].as_secs_f64()
    );
    stop.send(true).unwrap();
    for task in tasks {
        task.await.unwrap();
    }
}

/// Publishes every one of `declarations` (each to its node) at once and waits until each is
/// reported settled; how long that took (the stream's acknowledgements are awaited after).
async fn fan_out(
    js: &async_nats::jetstream::Context,
    reports: &mut async_nats::Subscriber,
    declarations: &[(bytes::Bytes, String)],
) -> Duration {
    let start = Instant::now();
    let mut acks = Vec::with_capacity(declarations.len());
    for (i, (payload, _)) in declarations.iter().enumerate() {
        acks.push(
            js.publish(subjects::declaration(&node(i)), payload.clone())
                .await
                .unwrap(),
        );
    }
    let mut waiting: std::collections::BTreeSet<&str> = declarations
        .iter()
        .map(|(_, digest)| digest.as_str())
        .collect();
    while !waiting.is_empty() {
        let message = tokio::time::timeout(Duration::from_secs(60), reports.next())
            .await
            .expect("every report within 60 s")
            .unwrap();
        let report = Report::from_json(&message.payload).unwrap();
        if report.machine != MachineState::MidChange {
            waiting.remove(report.declaration.as_str());
        }
    }
    let elapsed = start.elapsed();
    for ack in acks {
        ack.await.unwrap();
    }
    elapsed
}
