//! Module archives and the OCI store that holds them.
//!
//! What a build is in the store, in reading order:
//! - [`tree`] reads a module directory into a [`mesh_model::module::ModuleTree`];
//! - [`archive`] makes it a deterministic archive ([`archive::archive_tree`]) and back
//!   ([`archive::unpack_archive`]);
//! - [`manifest`] is the manifest that holds an archive, a pure function of its digest and size
//!   ([`manifest::holding_manifest`], rule 21);
//! - [`store`] is the one trait over both backends ([`store::ArchiveStore`]: [`layout`] an OCI
//!   image layout directory, [`registry`] an OCI registry), how a store is named
//!   ([`store::StoreSpec`], [`store::open_store`]) and [`store::publish`];
//! - [`records`] is what the mesh holds (one versioned record per module in the mesh's
//!   [`record_store`]: files under the mesh home, or a bucket on a fleet),
//!   [`keep`] what it therefore keeps and why (rule 22);
//! - [`sweep`] holds every kept archive and then lets the rest go, [`collect`] deletes what
//!   nothing holds (rule 23); [`lock`] keeps publishing and collecting apart;
//! - [`secret`] reads and writes the files that hold a secret (0600, refused when others may
//!   read them).
//!
//! # Invariants
//! - Reading a tree never follows a symbolic link; an archive never holds one.
//! - An archive is never published bare: [`store::publish`] puts its holding manifest before
//!   it returns (seed issue 253).
//! - Nothing is let go or collected on a partial view, and nothing is collected for real while
//!   any kept archive is unheld.
//! - Never `garbage-collect --delete-untagged`.
//! - [`keep`] and [`manifest`] do no IO.

pub mod archive;
pub mod chunked;
pub mod collect;
pub mod keep;
pub mod layout;
pub mod lease;
pub mod lock;
pub mod manifest;
pub mod problems;
pub mod record_store;
pub mod records;
pub mod registry;
pub mod secret;
pub mod store;
pub mod sweep;
pub mod tree;
