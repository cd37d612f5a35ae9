//! Where the mesh's records are kept, shared by the store (mesh-store) and the bus (mesh-bus)
//! so that neither brings the other in: a bus needs the record trait, not an OCI client.
//!
//! In dependency order:
//! - [`files`] writes a file whole (temporary file, fsync, rename) and locks one for a
//!   read-modify-write;
//! - [`secret`] reads and writes every file that holds a secret (0600, refused when others may
//!   read it);
//! - [`record_store`] is the one trait over the records ([`record_store::RecordStore`]) and
//!   its embedded kind, files under the mesh home ([`record_store::DirRecords`]); the bus's
//!   bucket is the other kind (mesh-bus's `KvRecords`);
//! - [`chunked`] keeps a record larger than a bucket's value in chunks;
//! - [`lease`] is a lock across machines kept in the records;
//! - [`audit`] keeps the audit log: entries appended, each sealed with the digest of the one
//!   before, in a file ([`audit::FileAuditLog`]) or the bus's audit stream (mesh-bus).
//!
//! # Invariants
//! - A record is written whole; a read-modify-write loses no concurrent writer's change.
//! - No error, log line or `Debug` holds a secret: messages name the file it came from.
//! - Nothing here knows what a record means: keys and bytes only (the lease's own record
//!   aside).
//! - The audit log is only appended to, its sequences without a gap.

pub mod audit;
pub mod chunked;
pub mod files;
pub mod lease;
pub mod record_store;
pub mod secret;
