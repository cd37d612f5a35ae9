//! The test kit: the real components the mesh's tests and benchmarks run, started on loopback
//! by the test and removed when it ends. A dev-dependency only — no release binary takes it
//! (`cargo tree -e normal` of the binaries names neither it nor `tempfile`).
//!
//! In dependency order:
//! - [`code_map`]: a crate's top-level modules and the `use` lines between them, so a crate's
//!   test holds it to no cycle;
//! - [`wait`]: waiting on a condition (never on time) and a free loopback port;
//! - [`harness`]: the runner of a test binary with `harness = false`, answering `--list` and
//!   `--exact` as libtest does, so `cargo nextest` runs it too;
//! - [`pki`]: a CA made for one test and the server and client certificates it signs;
//! - [`nats_server`]: a loopback `nats-server` (TLS too; `$MESH_NATS_SERVER` chooses the
//!   binary, its version the configuration), and [`nats_cluster`]: a loopback cluster of them;
//! - [`registry`]: a loopback `docker-registry` (TLS and htpasswd users too), stopped and
//!   started again by the test or by shell commands an operator's service manager would run;
//! - [`mutate`]: changes to a valid input, for the property tests that feed every parser
//!   random bytes;
//! - [`podman`]: the podman sandbox (configured by `scripts/podman-env.sh`, containers named
//!   per test and removed when it ends);
//! - [`sealed`]: declarations that use secrets, as the secrets tests and benches send them.
//!
//! # Invariants
//! - Everything listens on loopback only, in a directory of its own removed on drop.
//! - A missing component fails the test, saying what to install; no test is skipped.
//! - Nothing waits on time before asserting: a wait is on a condition, bounded only for the
//!   failure's sake.

pub mod code_map;
pub mod harness;
pub mod mutate;
pub mod nats_cluster;
pub mod nats_server;
pub mod pki;
pub mod podman;
pub mod registry;
pub mod sealed;
pub mod wait;
