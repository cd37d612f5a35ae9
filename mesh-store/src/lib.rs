//! Module archives and the OCI store that holds them.
//!
//! What a build is in the store, in reading order:
//! - [`tree`] reads a module directory into a [`mesh_model::module::ModuleTree`];
//! - [`archive`] makes it a deterministic archive ([`archive::archive_tree`]) and back
//!   ([`archive::unpack_archive`]);
//! - [`manifest`] is the manifest that holds an archive, a pure function of its digest and size
//!   ([`manifest::holding_manifest`], the rule “An archive is published with a manifest that holds
//!   it”);
//! - [`store`] is the one trait over both backends ([`store::ArchiveStore`]), how a store is
//!   named ([`store::StoreSpec`]) and [`store::publish`]; [`layout`] (an OCI image layout
//!   directory) and [`registry`] (an OCI registry) implement it, and [`open`] is the one place
//!   a backend is chosen ([`open_store`]);
//! - [`records`] is what the mesh holds (one versioned record per module in the mesh's
//!   [`record_store`]: files under the mesh home, or a bucket on a fleet),
//!   [`keep`] what it therefore keeps and why (the rule “What the mesh keeps, for a reason”);
//! - [`sweep`] holds every kept archive and then lets the rest go, [`collect`] deletes what
//!   nothing holds (the rule “The sweep holds before it lets go”), each backend reporting a
//!   [`garbage::GarbageReport`]; [`lock`] keeps publishing and collecting apart;
//! - [`problems`] are the failures kept in the records until resolved;
//! - [`collector`] is a whole run of the collector (`mesh-collector sweep` and `collect`):
//!   the store opened and locked, the keep set read from the records, the sweep or the
//!   collection, and the problem it leaves for `status`.
//!
//! Beside them, [`clock`] is the one clock and date format every binary of the mesh uses.
//!
//! The record store, its chunking, the lease and secret files are mesh-records' (the bus
//! shares them without the OCI client), re-exported here.
//!
//! # Invariants
//! - Reading a tree never follows a symbolic link; an archive never holds one.
//! - An archive is never published bare: [`store::publish`] puts its holding manifest before
//!   it returns (the incident behind “An archive is published with a manifest that holds it”).
//! - Nothing is let go or collected on a partial view, and nothing is collected for real while
//!   any kept archive is unheld.
//! - Never `garbage-collect --delete-untagged`.
//! - [`keep`] and [`manifest`] do no IO.

pub mod archive;
pub mod clock;
pub mod collect;
pub mod collector;
pub mod garbage;
pub mod keep;
pub mod layout;
pub mod lock;
pub mod manifest;
pub mod open;
pub mod problems;
pub mod records;
pub mod registry;
pub mod store;
pub mod sweep;
pub mod tree;

/// The record store, its chunking, the lease and secret files live in mesh-records, which the
/// bus shares without the OCI client; they are re-exported here because the store's records
/// ([`records`], [`problems`]) take a [`record_store::RecordStore`] in their signatures.
pub use mesh_records::{chunked, lease, record_store, secret};
pub use open::{open_store, open_store_with};
