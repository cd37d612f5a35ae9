//! What each forge sends: which forge signed a webhook and how (its headers), which event it
//! is, and the branch and commit of a push (its body).
//!
//! Forgejo, Gitea and GitHub send GitHub's push body (`ref`, `before`, `after`, …); GitLab its
//! own (`object_kind: "push"`, `ref`, `before`, `after`, …). Both name the ref pushed and the
//! commit it now points at the same way, which is all a merge needs.

use super::verify::Proof;
use hyper::HeaderMap;

/// The forge a webhook says it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Forge {
    /// Forgejo (`X-Forgejo-Signature`, `X-Forgejo-Event`).
    Forgejo,
    /// Gitea (`X-Gitea-Signature`, `X-Gitea-Event`).
    Gitea,
    /// GitHub (`X-Hub-Signature-256`, `X-GitHub-Event`).
    GitHub,
    /// GitLab (`X-Gitlab-Token`, `X-Gitlab-Event`).
    GitLab,
}

impl Forge {
    /// Its name, for answers and logs.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Forge::Forgejo => "Forgejo",
            Forge::Gitea => "Gitea",
            Forge::GitHub => "GitHub",
            Forge::GitLab => "GitLab",
        }
    }

    /// The header naming the event, and the value a push has there.
    fn push_event(self) -> (&'static str, &'static str) {
        match self {
            Forge::Forgejo => ("x-forgejo-event", "push"),
            Forge::Gitea => ("x-gitea-event", "push"),
            Forge::GitHub => ("x-github-event", "push"),
            Forge::GitLab => ("x-gitlab-event", "Push Hook"),
        }
    }

    /// The event the headers name, when it is not a push (`None`: a push, or not named).
    pub(crate) fn other_event(self, headers: &HeaderMap) -> Option<String> {
        let (header, push) = self.push_event();
        let event = headers.get(header)?.to_str().ok()?.trim();
        (!event.eq_ignore_ascii_case(push)).then(|| event.chars().take(64).collect())
    }
}

/// Which forge signed a webhook and its proof, from the headers (Forgejo's and Gitea's own
/// headers first, as they also send GitHub's); `None` when it carries none.
pub(crate) fn proof(headers: &HeaderMap) -> Option<(Forge, Proof)> {
    let text = |name: &str| {
        headers
            .get(name)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
    };
    if let Some(signature) = text("x-forgejo-signature") {
        return Some((Forge::Forgejo, Proof::HmacSha256Hex(signature)));
    }
    if let Some(signature) = text("x-gitea-signature") {
        return Some((Forge::Gitea, Proof::HmacSha256Hex(signature)));
    }
    if let Some(signature) = text("x-hub-signature-256") {
        // Without its `sha256=` it is not GitHub's proof: nothing verifies against it.
        let hex = signature.strip_prefix("sha256=").unwrap_or_default();
        return Some((Forge::GitHub, Proof::HmacSha256Hex(hex.to_owned())));
    }
    if let Some(token) = text("x-gitlab-token") {
        return Some((Forge::GitLab, Proof::Token(token)));
    }
    None
}

/// A push, as its body says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Push {
    /// A branch now points at a commit.
    Branch {
        /// The branch (`refs/heads/` taken off).
        branch: String,
        /// The commit (40 or 64 hex digits).
        commit: String,
    },
    /// A branch was deleted.
    Deleted {
        /// The branch.
        branch: String,
    },
    /// A ref that is not a branch (a tag).
    NotABranch {
        /// The ref.
        reference: String,
    },
}

/// The push a body tells of (any forge's format).
///
/// # Errors
/// Why the body is not a push: not JSON, no `ref` or `after`, or `after` not a commit id.
pub fn push(body: &[u8]) -> Result<Push, String> {
    #[derive(serde::Deserialize)]
    struct Body {
        #[serde(rename = "ref")]
        reference: String,
        after: String,
    }
    let body: Body = serde_json::from_slice(body)
        .map_err(|error| format!("the body is not a push event's JSON: {error}"))?;
    let Some(branch) = body.reference.strip_prefix("refs/heads/") else {
        return Ok(Push::NotABranch {
            reference: body.reference.chars().take(200).collect(),
        });
    };
    let branch: String = branch.chars().take(200).collect();
    let after = body.after.to_ascii_lowercase();
    let is_hex = after.bytes().all(|b| b.is_ascii_hexdigit());
    if !is_hex || !matches!(after.len(), 40 | 64) {
        return Err(format!(
            "`after` is not a commit id: {:?}",
            body.after.chars().take(80).collect::<String>()
        ));
    }
    if after.bytes().all(|b| b == b'0') {
        return Ok(Push::Deleted { branch });
    }
    Ok(Push::Branch {
        branch,
        commit: after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn forgejos_own_header_is_read_before_the_github_one_it_also_sends() {
        let sent = headers(&[
            ("X-Hub-Signature-256", "sha256=ab"),
            ("X-Forgejo-Signature", "cd"),
        ]);
        assert_eq!(
            proof(&sent),
            Some((Forge::Forgejo, Proof::HmacSha256Hex("cd".to_owned())))
        );
        assert_eq!(
            proof(&headers(&[("X-Hub-Signature-256", "ab")])),
            Some((Forge::GitHub, Proof::HmacSha256Hex(String::new())))
        );
        assert_eq!(proof(&headers(&[("X-Hub-Signature", "sha1=ab")])), None);
    }

    #[test]
    fn a_ping_is_another_event_and_a_push_is_not() {
        let ping = headers(&[("X-GitHub-Event", "ping")]);
        assert_eq!(Forge::GitHub.other_event(&ping).as_deref(), Some("ping"));
        let push = headers(&[("X-Gitlab-Event", "Push Hook")]);
        assert_eq!(Forge::GitLab.other_event(&push), None);
        assert_eq!(Forge::Gitea.other_event(&HeaderMap::new()), None);
    }

    #[test]
    fn a_push_names_its_branch_and_commit_and_anything_else_is_malformed() {
        let commit = "a".repeat(40);
        let body = format!(
            r#"{{"ref":"refs/heads/main","before":"{}","after":"{commit}"}}"#,
            "0".repeat(40)
        );
        assert_eq!(
            push(body.as_bytes()),
            Ok(Push::Branch {
                branch: "main".to_owned(),
                commit
            })
        );
        let deleted = format!(r#"{{"ref":"refs/heads/old","after":"{}"}}"#, "0".repeat(40));
        assert_eq!(
            push(deleted.as_bytes()),
            Ok(Push::Deleted {
                branch: "old".to_owned()
            })
        );
        let tag = format!(r#"{{"ref":"refs/tags/v1","after":"{}"}}"#, "b".repeat(40));
        assert_eq!(
            push(tag.as_bytes()),
            Ok(Push::NotABranch {
                reference: "refs/tags/v1".to_owned()
            })
        );
        assert!(push(b"not json").is_err());
        assert!(push(br#"{"ref":"refs/heads/main"}"#).is_err());
        assert!(push(br#"{"ref":"refs/heads/main","after":"HEAD"}"#).is_err());
    }
}
