//! Records larger than a bucket's message: [`ChunkedRecords`] keeps any record over
//! [`CHUNK_SIZE`] as a small manifest at its key and its bytes in chunks of at most
//! [`CHUNK_SIZE`], each its own record (`chunked/<key>/<sha256 hex>`), so no value the bucket
//! holds is above 64 KiB — far under the bus's 1 MiB `max_payload` — however large the record
//! (an inventory of 10,000 nodes is about 1.2 MB).
//!
//! It wraps any [`RecordStore`]; the controller and the collector wrap the bus's bucket with
//! it. A record at or under [`CHUNK_SIZE`] is stored as it is, so a store written before
//! reads the same.
//!
//! # Guarantees
//! - A reader sees a record whole or not at all: the chunks are written (content-addressed)
//!   before the manifest naming them, and checked against the manifest's digest when read.
//! - Compare-and-set and update act on the manifest, so they keep the inner store's
//!   guarantees; the chunks of the version replaced are removed after the swap (a reader that
//!   was reading them reads the record again).
//! - A `put` of a record at or under [`CHUNK_SIZE`] is one write, nothing read first (the
//!   records a fleet writes per node are small): the chunks of a larger version it replaces
//!   are left to [`ChunkedRecords::collect_orphans`]. A larger `put` reads the manifest it
//!   replaces and removes the chunks no longer named.
//! - The chunk records are hidden from [`RecordStore::list`] and [`RecordStore::keys_under`].
//!
//! What it never does: remove a chunk another version of the record still names, or a chunk
//! younger than the grace [`ChunkedRecords::collect_orphans`] is given (a write under way
//! writes its chunks before the manifest naming them). The chunks of a write that lost its
//! compare-and-set are left (they name no record) until collected.

pub use crate::record_store::Collected;
use crate::record_store::{Change, RecordStat, RecordStore, RecordStoreError, Swap, Version};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::Arc;

/// The most bytes a record is stored whole, and the size of each chunk of a larger one.
pub const CHUNK_SIZE: usize = 60 * 1024;

/// Where the chunks of records are, one directory per record key.
pub const CHUNKS_DIR: &str = "chunked";

/// How a manifest starts: no record the mesh writes (JSON, TOML, a password) starts so.
const MAGIC: &[u8] = b"MESH-CHUNKED-RECORD 1\n";

/// How many times a read starts again when a chunk went while it read (replaced by a writer).
const READ_ATTEMPTS: usize = 5;

/// The manifest kept at a chunked record's key (after [`MAGIC`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Manifest {
    /// The record's size in bytes.
    size: u64,
    /// `sha256:<hex>` of the record's bytes.
    sha256: String,
    /// The chunks' digests (hex), in order.
    chunks: Vec<String>,
}

/// A [`RecordStore`] whose records may be larger than a value of the store under it (see the
/// module docs).
#[derive(Debug, Clone)]
pub struct ChunkedRecords {
    inner: Arc<dyn RecordStore>,
}

impl ChunkedRecords {
    /// Records in `inner`, a large one kept in chunks.
    pub fn new(inner: Arc<dyn RecordStore>) -> ChunkedRecords {
        ChunkedRecords { inner }
    }

    fn chunk_key(key: &str, hex: &str) -> String {
        format!("{CHUNKS_DIR}/{key}/{hex}")
    }

    /// The bytes to keep at `key` for `bytes`: themselves, or a manifest once the chunks are
    /// written.
    fn encode(
        &self,
        key: &str,
        bytes: &[u8],
    ) -> Result<(Vec<u8>, Option<Manifest>), RecordStoreError> {
        if bytes.len() <= CHUNK_SIZE && !bytes.starts_with(MAGIC) {
            return Ok((bytes.to_vec(), None));
        }
        let mut chunks = Vec::new();
        for chunk in bytes.chunks(CHUNK_SIZE) {
            let digest = sha256_digest(chunk);
            let hex = digest.trim_start_matches("sha256:").to_owned();
            self.inner.put(&Self::chunk_key(key, &hex), chunk)?;
            chunks.push(hex);
        }
        let manifest = Manifest {
            size: bytes.len() as u64,
            sha256: sha256_digest(bytes),
            chunks,
        };
        let mut out = MAGIC.to_vec();
        out.extend(serde_json::to_vec(&manifest).expect("a manifest serializes"));
        Ok((out, Some(manifest)))
    }

    /// The manifest in `raw`, if it is one.
    fn manifest(&self, key: &str, raw: &[u8]) -> Result<Option<Manifest>, RecordStoreError> {
        let Some(json) = raw.strip_prefix(MAGIC) else {
            return Ok(None);
        };
        serde_json::from_slice(json)
            .map(Some)
            .map_err(|e| RecordStoreError::new("read", self.inner.locate(key), e))
    }

    /// The record's bytes from `raw` (what the inner store holds at `key`): `Ok(None)` when a
    /// chunk is gone (a writer replaced the record meanwhile: read again).
    fn assemble(&self, key: &str, raw: Vec<u8>) -> Result<Option<Vec<u8>>, RecordStoreError> {
        let Some(manifest) = self.manifest(key, &raw)? else {
            return Ok(Some(raw));
        };
        // The size is what the manifest claims, not what is there: never allocated beyond what
        // its chunks can hold (a damaged manifest must be refused, not abort the process).
        let claimed = usize::try_from(manifest.size).unwrap_or(usize::MAX);
        let mut bytes =
            Vec::with_capacity(claimed.min(manifest.chunks.len().saturating_mul(CHUNK_SIZE)));
        for hex in &manifest.chunks {
            match self.inner.get(&Self::chunk_key(key, hex))? {
                Some(chunk) => bytes.extend(chunk),
                None => return Ok(None),
            }
        }
        if sha256_digest(&bytes) != manifest.sha256 {
            return Err(RecordStoreError::new(
                "read",
                self.inner.locate(key),
                format!(
                    "its chunks are not the record its manifest names ({})",
                    manifest.sha256
                ),
            ));
        }
        Ok(Some(bytes))
    }

    /// Removes the chunks `old` names that `new` does not.
    fn remove_replaced(&self, key: &str, old: Option<Manifest>, new: Option<&Manifest>) {
        let Some(old) = old else { return };
        let kept: BTreeSet<&String> = new.map(|m| m.chunks.iter().collect()).unwrap_or_default();
        for hex in old.chunks.iter().filter(|hex| !kept.contains(hex)) {
            if let Err(error) = self.inner.delete(&Self::chunk_key(key, hex)) {
                tracing::warn!(%error, "a chunk of a replaced record could not be removed");
            }
        }
    }

    /// Removes every chunk that the record it belongs to no longer names (left by a smaller
    /// `put` over a chunked record, or by a write that lost its compare-and-set) and that was
    /// written at least `grace_secs` before `now` (seconds since the epoch, the store's clock):
    /// a younger one may belong to a write under way, whose manifest is not written yet.
    ///
    /// # Errors
    /// When the chunks cannot be listed, a record read, or a chunk removed.
    pub fn collect_orphans(
        &self,
        now: u64,
        grace_secs: u64,
    ) -> Result<Collected, RecordStoreError> {
        let mut by_record: std::collections::BTreeMap<String, Vec<RecordStat>> =
            std::collections::BTreeMap::new();
        for stat in self.inner.stat_under(CHUNKS_DIR)? {
            let Some((record, _hex)) = stat
                .key
                .strip_prefix(&format!("{CHUNKS_DIR}/"))
                .and_then(|rest| rest.rsplit_once('/'))
            else {
                continue;
            };
            by_record.entry(record.to_owned()).or_default().push(stat);
        }
        let mut collected = Collected::default();
        for (record, chunks) in by_record {
            let named: BTreeSet<String> = self
                .current_manifest(&record)?
                .map(|manifest| manifest.chunks.into_iter().collect())
                .unwrap_or_default();
            for chunk in chunks {
                let hex = chunk.key.rsplit('/').next().unwrap_or_default();
                if named.contains(hex) {
                    continue;
                }
                if chunk.written.saturating_add(grace_secs) > now {
                    collected.young += 1;
                    continue;
                }
                self.inner.delete(&chunk.key)?;
                collected.count += 1;
                collected.bytes += chunk.size;
            }
        }
        Ok(collected)
    }

    fn current_manifest(&self, key: &str) -> Result<Option<Manifest>, RecordStoreError> {
        match self.inner.get(key)? {
            Some(raw) => self.manifest(key, &raw),
            None => Ok(None),
        }
    }
}

fn hidden(key: &str) -> bool {
    key == CHUNKS_DIR || key.starts_with(&format!("{CHUNKS_DIR}/"))
}

impl RecordStore for ChunkedRecords {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn locate(&self, key: &str) -> String {
        self.inner.locate(key)
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, RecordStoreError> {
        for _ in 0..READ_ATTEMPTS {
            let Some(raw) = self.inner.get(key)? else {
                return Ok(None);
            };
            if let Some(bytes) = self.assemble(key, raw)? {
                return Ok(Some(bytes));
            }
        }
        Err(RecordStoreError::new(
            "read",
            self.inner.locate(key),
            "its chunks kept changing while it was read",
        ))
    }

    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), RecordStoreError> {
        if bytes.len() <= CHUNK_SIZE && !bytes.starts_with(MAGIC) {
            // Kept as it is, in one write: the chunks of a larger version replaced are left to
            // collect_orphans.
            return self.inner.put(key, bytes);
        }
        let old = self.current_manifest(key)?;
        let (raw, manifest) = self.encode(key, bytes)?;
        self.inner.put(key, &raw)?;
        self.remove_replaced(key, old, manifest.as_ref());
        Ok(())
    }

    /// The small records written together by the store under, a larger one on its own.
    fn put_many(&self, records: &[(String, Vec<u8>)]) -> Result<(), RecordStoreError> {
        let small = |bytes: &[u8]| bytes.len() <= CHUNK_SIZE && !bytes.starts_with(MAGIC);
        if records.iter().all(|(_, bytes)| small(bytes)) {
            return self.inner.put_many(records);
        }
        for (key, bytes) in records {
            self.put(key, bytes)?;
        }
        Ok(())
    }

    fn delete(&self, key: &str) -> Result<(), RecordStoreError> {
        let old = self.current_manifest(key)?;
        self.inner.delete(key)?;
        self.remove_replaced(key, old, None);
        Ok(())
    }

    /// The records removed together, without reading each first: the chunks of one that was
    /// chunked are left to [`ChunkedRecords::collect_orphans`] (no record names them any more).
    fn delete_many(&self, keys: &[String]) -> Result<(), RecordStoreError> {
        self.inner.delete_many(keys)
    }

    /// The store under removes the directory its own way (the bus: one filtered purge, where
    /// the default is a removal per record); the chunks of a chunked record among them are
    /// left to [`ChunkedRecords::collect_orphans`], as [`RecordStore::delete_many`] leaves
    /// them. The whole store, or the chunks' own directory, is removed as the default does:
    /// by the keys this store shows.
    fn delete_under(&self, dir: &str) -> Result<usize, RecordStoreError> {
        if dir.is_empty() || hidden(dir) {
            let keys = self.keys_under(dir)?;
            self.delete_many(&keys)?;
            return Ok(keys.len());
        }
        self.inner.delete_under(dir)
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, RecordStoreError> {
        let mut names = self.inner.list(dir)?;
        if dir.is_empty() {
            names.retain(|name| name.trim_end_matches('/') != CHUNKS_DIR);
        }
        Ok(names)
    }

    fn keys_under(&self, dir: &str) -> Result<Vec<String>, RecordStoreError> {
        let mut keys = self.inner.keys_under(dir)?;
        keys.retain(|key| !hidden(key));
        Ok(keys)
    }

    /// One listing of the store under; a chunked record among them is assembled (its chunks
    /// read).
    fn values_under(&self, dir: &str) -> Result<Vec<(String, Vec<u8>)>, RecordStoreError> {
        let mut values = Vec::new();
        for (key, raw) in self.inner.values_under(dir)? {
            if hidden(&key) {
                continue;
            }
            if raw.starts_with(MAGIC) {
                // A manifest: the record read whole, as a get reads it.
                if let Some(bytes) = self.get(&key)? {
                    values.push((key, bytes));
                }
            } else {
                values.push((key, raw));
            }
        }
        Ok(values)
    }

    /// The chunks no record names ([`ChunkedRecords::collect_orphans`]).
    fn collect_leftovers(&self, now: u64, grace_secs: u64) -> Result<Collected, RecordStoreError> {
        self.collect_orphans(now, grace_secs)
    }

    /// A chunked record's size is its manifest's.
    fn stat_under(&self, dir: &str) -> Result<Vec<RecordStat>, RecordStoreError> {
        let mut stats = self.inner.stat_under(dir)?;
        stats.retain(|stat| !hidden(&stat.key));
        Ok(stats)
    }

    fn update(&self, key: &str, change: &mut Change<'_>) -> Result<Vec<u8>, RecordStoreError> {
        let mut replaced: Option<Manifest> = None;
        let mut written: Option<(Vec<u8>, Option<Manifest>)> = None;
        self.inner.update(key, &mut |raw| {
            replaced = match raw {
                Some(raw) => self.manifest(key, raw).map_err(|e| e.to_string())?,
                None => None,
            };
            let current = match raw {
                Some(raw) => Some(
                    self.assemble(key, raw.to_vec())
                        .map_err(|e| e.to_string())?
                        .ok_or_else(|| "its chunks changed while it was read".to_owned())?,
                ),
                None => None,
            };
            let new = change(current.as_deref())?;
            let (raw, manifest) = self.encode(key, &new).map_err(|e| e.to_string())?;
            written = Some((new, manifest));
            Ok(raw)
        })?;
        let (new, manifest) = written.expect("an update that wrote called its change");
        self.remove_replaced(key, replaced, manifest.as_ref());
        Ok(new)
    }

    fn get_versioned(&self, key: &str) -> Result<Option<(Vec<u8>, Version)>, RecordStoreError> {
        for _ in 0..READ_ATTEMPTS {
            let Some((raw, version)) = self.inner.get_versioned(key)? else {
                return Ok(None);
            };
            if let Some(bytes) = self.assemble(key, raw)? {
                return Ok(Some((bytes, version)));
            }
        }
        Err(RecordStoreError::new(
            "read",
            self.inner.locate(key),
            "its chunks kept changing while it was read",
        ))
    }

    fn compare_and_set(
        &self,
        key: &str,
        expected: Option<&Version>,
        new: Option<&[u8]>,
    ) -> Result<Swap, RecordStoreError> {
        let old = match self.inner.get_versioned(key)? {
            Some((raw, version)) if Some(&version) == expected => self.manifest(key, &raw)?,
            Some(_) | None => None,
        };
        let encoded = new.map(|new| self.encode(key, new)).transpose()?;
        let swap = self.inner.compare_and_set(
            key,
            expected,
            encoded.as_ref().map(|(raw, _)| raw.as_slice()),
        )?;
        if swap == Swap::Done {
            self.remove_replaced(key, old, encoded.as_ref().and_then(|(_, m)| m.as_ref()));
        }
        Ok(swap)
    }
}

/// `sha256:<hex>` of `bytes`, as mesh-model writes every digest.
fn sha256_digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record_store::DirRecords;

    fn stores() -> (tempfile::TempDir, Arc<dyn RecordStore>, ChunkedRecords) {
        let dir = tempfile::tempdir().unwrap();
        let inner: Arc<dyn RecordStore> = Arc::new(DirRecords::new(dir.path()));
        let chunked = ChunkedRecords::new(Arc::clone(&inner));
        (dir, inner, chunked)
    }

    fn big(seed: u8, size: usize) -> Vec<u8> {
        (0..size).map(|i| (i % 251) as u8 ^ seed).collect()
    }

    #[test]
    fn a_large_record_is_kept_in_chunks_none_above_the_chunk_size_and_read_back_whole() {
        let (_dir, inner, chunked) = stores();
        let record = big(1, 1_200_000);
        chunked.put("inventory.toml", &record).unwrap();
        assert_eq!(chunked.get("inventory.toml").unwrap().unwrap(), record);
        let keys = inner.keys_under("").unwrap();
        assert_eq!(
            keys.len(),
            1 + record.len().div_ceil(CHUNK_SIZE),
            "{keys:?}"
        );
        for key in &keys {
            assert!(
                inner.get(key).unwrap().unwrap().len() <= CHUNK_SIZE,
                "{key}"
            );
        }
        assert_eq!(chunked.keys_under("").unwrap(), vec!["inventory.toml"]);
        assert_eq!(chunked.list("").unwrap(), vec!["inventory.toml"]);
        // A small record is kept as it is.
        chunked.put("sent/a.json", b"{}").unwrap();
        assert_eq!(inner.get("sent/a.json").unwrap().unwrap(), b"{}");
    }

    #[test]
    fn replacing_or_removing_a_chunked_record_removes_the_chunks_it_no_longer_names() {
        let (_dir, inner, chunked) = stores();
        chunked.put("inventory.toml", &big(1, 200_000)).unwrap();
        let mut second = big(1, 200_000);
        second[150_000] ^= 0xff; // one chunk differs
        chunked.put("inventory.toml", &second).unwrap();
        assert_eq!(chunked.get("inventory.toml").unwrap().unwrap(), second);
        assert_eq!(inner.keys_under(CHUNKS_DIR).unwrap().len(), 4);
        chunked.put("inventory.toml", b"small now").unwrap();
        assert_eq!(
            chunked.get("inventory.toml").unwrap().unwrap(),
            b"small now"
        );
        // A small put reads nothing first: the chunks it no longer names are collected, once
        // older than the grace.
        assert_eq!(inner.keys_under(CHUNKS_DIR).unwrap().len(), 4);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let young = chunked.collect_orphans(now, 600).unwrap();
        assert_eq!((young.count, young.young), (0, 4));
        let old = chunked.collect_orphans(now + 601, 600).unwrap();
        assert_eq!((old.count, old.young), (4, 0));
        assert!(old.bytes > 150_000, "{old:?}");
        assert!(inner.keys_under(CHUNKS_DIR).unwrap().is_empty());
        chunked.put("inventory.toml", &second).unwrap();
        chunked.delete("inventory.toml").unwrap();
        assert!(inner.keys_under("").unwrap().is_empty());
        // Removed together, unread: the chunks are the collection's.
        chunked.put("inventory.toml", &second).unwrap();
        chunked.put("sent/a.json", b"{}").unwrap();
        chunked
            .delete_many(&["inventory.toml".to_owned(), "sent/a.json".to_owned()])
            .unwrap();
        assert!(chunked.keys_under("").unwrap().is_empty());
        let left = chunked.collect_orphans(now + 601, 600).unwrap();
        assert_eq!(left.count, 4);
        assert!(inner.keys_under("").unwrap().is_empty());
    }

    #[test]
    fn update_and_compare_and_set_act_on_the_whole_record() {
        let (_dir, inner, chunked) = stores();
        let first = big(2, 100_000);
        chunked
            .update("inventory.toml", &mut |current| {
                assert!(current.is_none());
                Ok(first.clone())
            })
            .unwrap();
        let (read, version) = chunked.get_versioned("inventory.toml").unwrap().unwrap();
        assert_eq!(read, first);
        let second = big(3, 130_000);
        assert_eq!(
            chunked
                .compare_and_set("inventory.toml", Some(&version), Some(&second))
                .unwrap(),
            Swap::Done
        );
        // The version read before is stale now: nothing is written.
        assert_eq!(
            chunked
                .compare_and_set("inventory.toml", Some(&version), Some(&first))
                .unwrap(),
            Swap::Stale
        );
        assert_eq!(chunked.get("inventory.toml").unwrap().unwrap(), second);
        let grown = chunked
            .update("inventory.toml", &mut |current| {
                let mut bytes = current.unwrap().to_vec();
                bytes.extend(b"more");
                Ok(bytes)
            })
            .unwrap();
        assert_eq!(grown.len(), 130_004);
        assert_eq!(chunked.get("inventory.toml").unwrap().unwrap(), grown);
        // The chunks of the record as it is now are left, and those of the write that lost
        // its compare-and-set (they name no record; removing them could race a writer of the
        // same bytes).
        assert_eq!(
            inner.keys_under(CHUNKS_DIR).unwrap().len(),
            grown.len().div_ceil(CHUNK_SIZE) + first.len().div_ceil(CHUNK_SIZE)
        );
    }

    /// A store that removes a directory only as a whole: a removal per record fails, so a
    /// wrapper that fell back to the default `delete_under` (a listing, then each record)
    /// is caught. The bus's bucket is such a store in cost: one purge of the directory
    /// against a purge per record, which at 100,000 records of a plan's rollouts took most of
    /// an hour on nats-server 2.9.
    #[derive(Debug)]
    struct WholeDirectories(DirRecords);

    impl RecordStore for WholeDirectories {
        fn name(&self) -> String {
            self.0.name()
        }
        fn locate(&self, key: &str) -> String {
            self.0.locate(key)
        }
        fn get(&self, key: &str) -> Result<Option<Vec<u8>>, RecordStoreError> {
            self.0.get(key)
        }
        fn put(&self, key: &str, bytes: &[u8]) -> Result<(), RecordStoreError> {
            self.0.put(key, bytes)
        }
        fn delete(&self, key: &str) -> Result<(), RecordStoreError> {
            panic!("{key} removed on its own, not with its directory")
        }
        fn delete_many(&self, keys: &[String]) -> Result<(), RecordStoreError> {
            panic!("{keys:?} removed one by one, not with their directory")
        }
        fn delete_under(&self, dir: &str) -> Result<usize, RecordStoreError> {
            let keys = self.0.keys_under(dir)?;
            self.0.delete_many(&keys)?;
            Ok(keys.len())
        }
        fn list(&self, dir: &str) -> Result<Vec<String>, RecordStoreError> {
            self.0.list(dir)
        }
        fn keys_under(&self, dir: &str) -> Result<Vec<String>, RecordStoreError> {
            self.0.keys_under(dir)
        }
        fn stat_under(&self, dir: &str) -> Result<Vec<RecordStat>, RecordStoreError> {
            self.0.stat_under(dir)
        }
        fn update(&self, key: &str, change: &mut Change<'_>) -> Result<Vec<u8>, RecordStoreError> {
            self.0.update(key, change)
        }
        fn get_versioned(&self, key: &str) -> Result<Option<(Vec<u8>, Version)>, RecordStoreError> {
            self.0.get_versioned(key)
        }
        fn compare_and_set(
            &self,
            key: &str,
            expected: Option<&Version>,
            new: Option<&[u8]>,
        ) -> Result<Swap, RecordStoreError> {
            self.0.compare_and_set(key, expected, new)
        }
    }

    #[test]
    fn a_directory_is_removed_by_the_store_under_as_one_not_a_record_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let chunked = ChunkedRecords::new(Arc::new(WholeDirectories(DirRecords::new(dir.path()))));
        for i in 0..5 {
            chunked
                .put(&format!("rollouts/plan-1/m/n{i}.json"), b"r")
                .unwrap();
        }
        chunked
            .put("rollouts/plan-1/big.json", &big(2, 130_000))
            .unwrap();
        chunked.put("rollouts/plan-10/m/n.json", b"kept").unwrap();
        assert_eq!(chunked.delete_under("rollouts/plan-1").unwrap(), 6);
        assert_eq!(
            chunked.keys_under("rollouts").unwrap(),
            ["rollouts/plan-10/m/n.json"]
        );
        // The large record's chunks name no record now: left to the collection of orphans.
        assert_eq!(
            chunked.keys_under("").unwrap(),
            ["rollouts/plan-10/m/n.json"]
        );
    }
}
