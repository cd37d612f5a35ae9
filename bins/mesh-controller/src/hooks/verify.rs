//! Checking a webhook's proof against the repository's secret, in constant time: the HMAC
//! checks are the `hmac` crate's `verify_slice`, the token check `subtle`'s `ct_eq`. Nothing
//! here is hand-written cryptography, and nothing here logs or returns the secret.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The proof a forge sent with a webhook, as read from its headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    /// The hex HMAC-SHA256 of the body keyed by the secret (Forgejo's `X-Forgejo-Signature`,
    /// Gitea's `X-Gitea-Signature`; GitHub's `X-Hub-Signature-256` after its `sha256=`).
    HmacSha256Hex(String),
    /// The secret itself (GitLab's `X-Gitlab-Token`).
    Token(String),
}

/// Whether `proof` shows that whoever sent `body` holds `secret`.
///
/// # Guarantees
/// The comparison takes the same time wherever the proof first differs (a proof that is not
/// hex of the right length is refused without comparing).
pub fn verify(secret: &[u8], body: &[u8], proof: &Proof) -> bool {
    match proof {
        Proof::HmacSha256Hex(hex_mac) => {
            let Ok(sent) = hex::decode(hex_mac.trim()) else {
                return false;
            };
            let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
                return false;
            };
            mac.update(body);
            mac.verify_slice(&sent).is_ok()
        }
        Proof::Token(token) => token.as_bytes().ct_eq(secret).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GitHub's documented example: secret "It's a Secret to Everybody", payload "Hello,
    /// World!" ("Validating webhook deliveries", docs.github.com).
    #[test]
    fn githubs_documented_example_verifies_and_a_changed_byte_does_not() {
        let secret = b"It's a Secret to Everybody";
        let proof = Proof::HmacSha256Hex(
            "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17".to_owned(),
        );
        assert!(verify(secret, b"Hello, World!", &proof));
        assert!(!verify(secret, b"Hello, World?", &proof));
        assert!(!verify(b"another secret", b"Hello, World!", &proof));
        assert!(!verify(
            secret,
            b"Hello, World!",
            &Proof::HmacSha256Hex("zz".to_owned())
        ));
        assert!(!verify(
            secret,
            b"Hello, World!",
            &Proof::HmacSha256Hex(String::new())
        ));
    }

    #[test]
    fn a_token_is_the_secret_itself() {
        assert!(verify(b"s3cret", b"{}", &Proof::Token("s3cret".to_owned())));
        assert!(!verify(b"s3cret", b"{}", &Proof::Token("s3cre".to_owned())));
        assert!(!verify(
            b"s3cret",
            b"{}",
            &Proof::Token("s3cret\0".to_owned())
        ));
        assert!(!verify(b"s3cret", b"{}", &Proof::Token(String::new())));
    }
}
