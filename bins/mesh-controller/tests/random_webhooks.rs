//! A webhook's body and proof are what anyone who reaches the listener sends: fed random
//! bytes and changed valid pushes. The property: no panic; a body is a push of a branch to a
//! commit id (40 or 64 lowercase hex digits), or another ref, or refused with why; a proof
//! verifies only the body it was made for.
//!
//! CI runs 64 cases per property; `PROPTEST_CASES` asks for more.

use mesh_controller::daemon::forge_push as push;
use mesh_controller::daemon::verify;
use mesh_controller::daemon::Proof;
use mesh_controller::daemon::Push;
use mesh_test_support::mutate::{byte_edits, cases, edit_bytes, edit_value, value_edits};
use proptest::prelude::*;

const PUSH: &str = r#"{"ref":"refs/heads/main","before":"0000000000000000000000000000000000000000","after":"3623230a1b2c3d4e5f60718293a4b5c6d7e8f901","commits":[],"repository":{"full_name":"ops/cat"}}"#;

/// What a push read from any bytes must be.
fn well_formed(read: &Result<Push, String>) -> Result<(), TestCaseError> {
    if let Ok(Push::Branch { commit, .. }) = read {
        prop_assert!(matches!(commit.len(), 40 | 64), "{commit}");
        prop_assert!(commit
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]

    #[test]
    fn random_bytes_are_a_push_or_refused(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        well_formed(&push(&bytes))?;
    }

    #[test]
    fn a_push_with_bytes_changed_is_a_push_or_refused(edits in byte_edits()) {
        well_formed(&push(&edit_bytes(PUSH.as_bytes(), &edits)))?;
    }

    #[test]
    fn a_push_with_values_changed_is_a_push_or_refused(edits in value_edits()) {
        well_formed(&push(&edit_value(PUSH, &edits)))?;
    }

    #[test]
    fn a_signature_verifies_only_its_own_body(
        edits in byte_edits(),
        proof in prop::collection::vec(any::<u8>(), 0..80),
    ) {
        let secret = b"a webhook secret";
        let changed = edit_bytes(PUSH.as_bytes(), &edits);
        let hex = {
            use hmac::Mac as _;
            let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret).unwrap();
            mac.update(PUSH.as_bytes());
            hex::encode(mac.finalize().into_bytes())
        };
        let signed = Proof::HmacSha256Hex(hex);
        prop_assert!(verify(secret, PUSH.as_bytes(), &signed));
        prop_assert_eq!(verify(secret, &changed, &signed), changed == PUSH.as_bytes());
        let random = Proof::HmacSha256Hex(String::from_utf8_lossy(&proof).into_owned());
        prop_assert!(!verify(secret, PUSH.as_bytes(), &random) || proof.len() == 64);
        let token = Proof::Token(String::from_utf8_lossy(&proof).into_owned());
        prop_assert_eq!(verify(secret, b"", &token), proof == secret);
    }
}
