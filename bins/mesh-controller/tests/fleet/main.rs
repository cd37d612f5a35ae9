//! A real fleet: nats-server, `mesh-host serve` daemons, podman and the controller, each test a
//! module of its own. The test command runs these on both nats-servers.
//!
//! One test target for the area, as cargo's `testsuite` is one: linked once, each file a
//! module whose tests are named `<module>::<test>`.

#[path = "../support/mod.rs"]
mod support;

mod clock_skew;
mod fleet;
mod fleet_containers;
mod fleet_discovery;
mod fleet_merges;
mod fleet_scale;
mod fleet_secrets;
mod fleet_secrets_shown;
mod fleet_watch;
mod guards_with_daemon;
mod merges_arrive;
mod problems;
mod retry;
mod revert;
mod sends_unconfirmed;
mod status_page;
mod takeover;
mod unreadable_reports;
mod webhooks;
