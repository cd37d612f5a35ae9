//! The controller on a fleet's bus: its own credential, the nodes enrolled with their NKeys,
//! the bus's users and their proof, looking after the server, who is there, merges announced
//! to the daemon and the daemon's heartbeat.
//!
//! In dependency order: [`credentials`] (the controller's credential and a connection to the
//! bus), [`enroll`] (a node's NKey recorded and its password dropped), [`users`] (the bus's
//! users, written and confirmed), [`broker`] (looking after the bus), [`runtimes`] (who is
//! there), [`announce`] (a merge announced to the daemon), [`heartbeat`] (the daemon's
//! heartbeat).
//!
//! What it must never do: hold a node's secret key, or write a secret into a server's
//! configuration, a record or a log.

pub(crate) mod credentials;

pub(crate) mod enroll;

pub(crate) mod users;

pub(crate) mod broker;

pub(crate) mod runtimes;

pub(crate) mod announce;

pub(crate) mod heartbeat;

pub use announce::{announce_head, Announced, MERGE_CONSUMER};
pub use broker::{
    consumer_reset, raise_replicas, replicas, RaisedLine, ReplicasAnswer, ReplicasSource, ResetLine,
};
pub use credentials::{connect, controller_keygen, BusConfig, Keygen};
pub use enroll::{enroll, enroll_with_age_key, node_password, nodes_on_passwords, Enrolled};
pub use heartbeat::{last, Heartbeat};
pub use runtimes::{compare_with_inventory, runtimes, Missing, Runtimes};
pub use users::confirm::{record_confirmed, GRANTS_CONFIRM_LIMIT};
pub use users::{users_archive, users_text, UsersFile};
