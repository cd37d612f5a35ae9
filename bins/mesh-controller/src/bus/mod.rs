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

pub mod credentials;

pub mod enroll;

pub mod users;

pub mod broker;

pub mod runtimes;

pub mod announce;

pub mod heartbeat;
