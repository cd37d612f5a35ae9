//! The catalogue: the repositories modules come from and what the mesh made of them.
//!
//! In dependency order: [`remote`] (a repository registered by URL, cloned and fetched),
//! [`repos`] (the registered repositories and a catalogue read at a commit), [`builds`] (a
//! module's build, published and deployed, and the catalogue every send composes from),
//! [`newest`] (the newest version of a module the mesh knows) and [`heads`] (the catalogues a
//! command reads, named).
//!
//! What it must never do: read a catalogue without naming which one it read.

pub(crate) mod remote;

pub(crate) mod repos;

pub(crate) mod builds;

pub(crate) mod newest;

pub(crate) mod heads;

pub use builds::{
    build_module, effective_catalogue, short_commit, BuildSource, DeployedRecord, NotSent,
};
pub use heads::{read, Running};
pub use repos::{add, add_with, catalogue_at, changed_paths, resolve, AddOptions, RepoRecord};
