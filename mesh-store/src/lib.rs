//! Module archives and the OCI store that holds them.
//!
//! Start with [`tree`]: reading a module directory into a [`mesh_model::module::ModuleTree`].
//!
//! # Invariants
//! - Reading a tree never follows a symbolic link: links are recorded as links, so validation
//!   can refuse them.

pub mod tree;
