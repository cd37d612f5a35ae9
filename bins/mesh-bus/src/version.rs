//! A nats-server's version, and what the mesh does differently by it.
//!
//! The mesh runs on Debian's nats-server 2.9 and on current releases (2.10 and later). Where a
//! current server offers something better than 2.9's way, the mesh asks the server its version
//! — a client from the server's INFO ([`ServerVersion::of_client`]), the test kit from
//! `nats-server --version` — and chooses by it; nothing is
//! chosen by the version of the async-nats crate.
//!
//! What it must never do: take a version it cannot read for a new one. An unreadable version is
//! 2.9's behaviour (the oldest the mesh supports), which every later server also understands.

use std::fmt;

/// A nats-server release, `major.minor.patch` (a pre-release suffix is dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerVersion {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

impl ServerVersion {
    /// The oldest server the mesh supports (Debian's package): what an unreadable version is
    /// taken for.
    pub const OLDEST: ServerVersion = ServerVersion::new(2, 9, 0);

    /// The version `major.minor.patch`.
    pub const fn new(major: u32, minor: u32, patch: u32) -> ServerVersion {
        ServerVersion {
            major,
            minor,
            patch,
        }
    }

    /// Reads `2.9.10`, `v2.15.1`, `2.11.0-RC.2` or `nats-server: v2.9.10` (what `--version`
    /// prints); `None` when there is no `major.minor` in it.
    pub fn parse(text: &str) -> Option<ServerVersion> {
        let text = text.trim();
        let text = text.rsplit(' ').next().unwrap_or(text);
        let text = text.strip_prefix('v').unwrap_or(text);
        let core = text.split(['-', '+']).next().unwrap_or(text);
        let mut parts = core.split('.').map(|part| part.parse::<u32>().ok());
        let major = parts.next()??;
        let minor = parts.next()??;
        let patch = parts.next().flatten().unwrap_or(0);
        Some(ServerVersion::new(major, minor, patch))
    }

    /// The version the server a client is connected to said in its INFO; [`Self::OLDEST`]
    /// when it said none the mesh can read.
    pub fn of_client(client: &async_nats::Client) -> ServerVersion {
        ServerVersion::parse(&client.server_info().version).unwrap_or(ServerVersion::OLDEST)
    }

    /// Whether it is this release or a later one.
    pub fn at_least(self, major: u32, minor: u32) -> bool {
        self >= ServerVersion::new(major, minor, 0)
    }

    /// Whether its configuration takes `jetstream { sync_interval: always }` (2.10 and later;
    /// 2.9 refuses the field and does not start).
    pub fn has_sync_interval(self) -> bool {
        self.at_least(2, 10)
    }

    /// Whether each message the server removes from a stream (a subject past its limit, an
    /// expired one) costs a pass over **every** consumer of the stream: nats-server before
    /// 2.10.26 (its `stream.storeUpdates` calls every consumer's `decStreamPending`; 2.10.26
    /// matches them by subject). The declarations stream holds a consumer per node and 8
    /// declarations a node, so on such a server every send past a node's 8th costs time in
    /// proportion to the fleet: a module's rollout to N nodes then costs N² (measured: the
    /// book's performance page, "A fleet past 10,000 hosts").
    pub fn removal_visits_every_consumer(self) -> bool {
        self < ServerVersion::new(2, 10, 26)
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_servers_say() {
        assert_eq!(
            ServerVersion::parse("nats-server: v2.9.10\n"),
            Some(ServerVersion::new(2, 9, 10))
        );
        assert_eq!(
            ServerVersion::parse("2.15.1"),
            Some(ServerVersion::new(2, 15, 1))
        );
        assert_eq!(
            ServerVersion::parse("v2.11.0-RC.2"),
            Some(ServerVersion::new(2, 11, 0))
        );
        assert_eq!(ServerVersion::parse("garbage"), None);
        assert!(ServerVersion::new(2, 10, 0).has_sync_interval());
        assert!(!ServerVersion::new(2, 9, 10).has_sync_interval());
        assert!(ServerVersion::new(2, 10, 0) > ServerVersion::new(2, 9, 10));
        assert!(ServerVersion::new(2, 9, 10).removal_visits_every_consumer());
        assert!(ServerVersion::new(2, 10, 25).removal_visits_every_consumer());
        assert!(!ServerVersion::new(2, 10, 26).removal_visits_every_consumer());
        assert!(!ServerVersion::new(2, 15, 1).removal_visits_every_consumer());
    }
}
