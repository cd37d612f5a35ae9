//! A chunked record's manifest fed random bytes and changed valid ones. The manifest says which
//! chunks make the record and how large it is, and a later write removes the chunks it no
//! longer names, so the property is: no panic and no allocation of what it merely claims; a read
//! is refused naming the record, or gives a record whose digest is the manifest's; and nothing
//! outside the record's own chunks is ever removed — not another record, not a file beside the
//! store.
//!
//! CI runs proptest's default number of cases; `scripts/fuzz` runs 10,000 (`PROPTEST_CASES`).

use mesh_records::chunked::{ChunkedRecords, CHUNK_SIZE};
use mesh_records::record_store::{DirRecords, RecordStore};
use mesh_test_support::mutate::{byte_edits, cases, edit_bytes, edit_value, value_edits};
use proptest::prelude::*;
use std::path::PathBuf;
use std::sync::Arc;

const KEY: &str = "inventory.toml";
const OTHER: &str = "settings/web/mesh.json";

/// A store holding a chunked record at [`KEY`], a small record beside it, and a canary file
/// beside the store's directory.
struct Store {
    _dir: tempfile::TempDir,
    inner: Arc<DirRecords>,
    chunked: ChunkedRecords,
    canary: PathBuf,
    /// The raw manifest at [`KEY`], as a good write left it.
    manifest: Vec<u8>,
}

fn large(seed: u8) -> Vec<u8> {
    (0..CHUNK_SIZE * 2 + 100)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

impl Store {
    fn new() -> Store {
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(DirRecords::new(dir.path().join("records")));
        let chunked = ChunkedRecords::new(inner.clone());
        chunked.put(KEY, &large(1)).unwrap();
        chunked.put(OTHER, b"{\"port\": 9090}").unwrap();
        let canary = dir.path().join("canary");
        std::fs::write(&canary, "beside the store\n").unwrap();
        let manifest = inner.get(KEY).unwrap().unwrap();
        Store {
            _dir: dir,
            inner,
            chunked,
            canary,
            manifest,
        }
    }

    /// The manifest's first line (how every manifest starts) and its JSON.
    fn manifest_parts(&self) -> (Vec<u8>, String) {
        let end = self.manifest.iter().position(|b| *b == b'\n').unwrap() + 1;
        (
            self.manifest[..end].to_vec(),
            String::from_utf8(self.manifest[end..].to_vec()).unwrap(),
        )
    }

    /// Puts `raw` at [`KEY`] under the chunking, then reads, writes over and collects it.
    fn over(&self, raw: &[u8]) -> Result<(), TestCaseError> {
        self.inner.put(KEY, raw).unwrap();
        match self.chunked.get(KEY) {
            Ok(Some(bytes)) => {
                // Accepted: either raw itself (not a manifest) or chunks that make a record.
                prop_assert!(
                    bytes == raw || bytes == large(1),
                    "a record nobody wrote was read"
                );
            }
            Ok(None) => {}
            Err(error) => {
                let said = error.to_string();
                prop_assert!(
                    said.contains(KEY),
                    "the refusal does not name `{KEY}`: {said}"
                );
            }
        }
        // A write over it removes only chunks of this record.
        let _ = self.chunked.put(KEY, &large(2));
        let _ = self.chunked.put(KEY, b"small again");
        let _ = self.chunked.collect_orphans(u64::MAX, 0);
        prop_assert!(self.canary.exists(), "the canary beside the store is gone");
        prop_assert_eq!(
            self.chunked.get(OTHER).unwrap(),
            Some(b"{\"port\": 9090}".to_vec()),
            "another record was touched"
        );
        Ok(())
    }
}

#[test]
fn a_good_manifest_reads_its_record() {
    let store = Store::new();
    assert_eq!(store.chunked.get(KEY).unwrap(), Some(large(1)));
    store.over(&store.manifest.clone()).unwrap();
}

/// A manifest that claims a record of 2^64 - 1 bytes is refused, not allocated.
#[test]
fn a_manifest_claiming_any_size_is_not_allocated() {
    let store = Store::new();
    let (magic, json) = store.manifest_parts();
    let mut value: serde_json::Value = serde_json::from_str(&json).unwrap();
    value["size"] = serde_json::json!(u64::MAX);
    let mut raw = magic;
    raw.extend(serde_json::to_vec(&value).unwrap());
    store.over(&raw).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]

    #[test]
    fn a_manifest_of_random_bytes_is_refused_or_read_whole(
        as_manifest in any::<bool>(),
        bytes in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let store = Store::new();
        let mut raw = if as_manifest { store.manifest_parts().0 } else { Vec::new() };
        raw.extend(bytes);
        store.over(&raw)?;
    }

    #[test]
    fn a_manifest_with_bytes_changed_is_refused_or_read_whole(edits in byte_edits()) {
        let store = Store::new();
        store.over(&edit_bytes(&store.manifest.clone(), &edits))?;
    }

    #[test]
    fn a_manifest_with_values_changed_is_refused_or_read_whole(edits in value_edits()) {
        let store = Store::new();
        let (mut raw, json) = store.manifest_parts();
        raw.extend(edit_value(&json, &edits));
        store.over(&raw)?;
    }
}
