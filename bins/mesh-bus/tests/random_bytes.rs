//! What another party puts on the bus, fed random bytes and changed valid ones: a merge
//! announcement (anyone granted the merges subject may publish one) and a node's public key
//! as `node enroll` is given it. The property: no panic; an announcement accepted reads back the
//! same from its own bytes and keeps its message id (a merge heard twice makes one plan); a key
//! accepted is an NKey user key.
//!
//! CI runs proptest's default number of cases; `scripts/fuzz` runs 10,000 (`PROPTEST_CASES`).

use mesh_bus::jetstream::MergeAnnouncement;
use mesh_bus::keys::check_user_public_key;
use mesh_test_support::mutate::{byte_edits, cases, edit_bytes, edit_value, value_edits};
use proptest::prelude::*;

fn valid() -> MergeAnnouncement {
    MergeAnnouncement {
        repository: "catalogue".to_owned(),
        branch: "main".to_owned(),
        commit: "3f786850e387550fdab836ed7e6dc881de23001b".to_owned(),
    }
}

fn announcement_holds(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(heard) = MergeAnnouncement::from_bytes(bytes) {
        let again = MergeAnnouncement::from_bytes(&heard.to_bytes())
            .map_err(|e| TestCaseError::fail(format!("its own bytes are refused: {e}")))?;
        prop_assert_eq!(again.message_id(), heard.message_id());
        prop_assert_eq!(again, heard);
    }
    Ok(())
}

#[test]
fn a_valid_announcement_reads_back() {
    let bytes = valid().to_bytes();
    assert_eq!(MergeAnnouncement::from_bytes(&bytes).unwrap(), valid());
    let error = MergeAnnouncement::from_bytes(b"{\"version\":2}").unwrap_err();
    assert!(error.to_string().contains("merge"), "{error}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    #[test]
    fn an_announcement_of_random_bytes_is_refused_or_reads_back(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        announcement_holds(&bytes)?;
    }

    #[test]
    fn an_announcement_with_bytes_changed_is_refused_or_reads_back(edits in byte_edits()) {
        announcement_holds(&edit_bytes(&valid().to_bytes(), &edits))?;
    }

    #[test]
    fn an_announcement_with_values_changed_is_refused_or_reads_back(edits in value_edits()) {
        let valid = String::from_utf8(valid().to_bytes()).unwrap();
        announcement_holds(&edit_value(&valid, &edits))?;
    }

    #[test]
    fn a_public_key_of_any_text_is_refused_or_is_a_user_key(key in ".{0,80}", user in "U[A-Z2-7]{55}") {
        for candidate in [key.as_str(), user.as_str()] {
            if check_user_public_key(candidate).is_ok() {
                prop_assert!(candidate.starts_with('U') && candidate.len() == 56, "{candidate}");
            }
        }
    }
}
