//! The fleet on a three-server nats cluster: servers killed and started again mid-rollout, quorum
//! lost and back.
//!
//! One test target for the area, as cargo's `testsuite` is one: linked once, each file a
//! module whose tests are named `<module>::<test>`.

#[path = "../support/mod.rs"]
mod support;

mod fleet_cluster;
mod fleet_cluster_rollout;
