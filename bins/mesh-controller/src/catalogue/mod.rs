//! The catalogue: the repositories modules come from and what the mesh made of them.
//!
//! In dependency order: [`remote`] (a repository registered by URL, cloned and fetched),
//! [`repos`] (the registered repositories and a catalogue read at a commit), [`builds`] (a
//! module's build, published and deployed, and the catalogue every send composes from),
//! [`newest`] (the newest version of a module the mesh knows) and [`heads`] (the catalogues a
//! command reads, named).
//!
//! What it must never do: read a catalogue without naming which one it read.

pub mod remote;

pub mod repos;

pub mod builds;

pub mod newest;

pub mod heads;
