//! Public keys a secret is encrypted to ([`Recipient`], `age1…`), and the operators' file
//! that lists the keys every secret at rest is also encrypted to, so a person can open one in
//! an emergency: one key a line, `#` comments and blank lines ignored.

use crate::SecretsError;
use std::path::Path;
use std::str::FromStr;

/// An age X25519 public key.
#[derive(Clone, PartialEq, Eq)]
pub struct Recipient {
    pub(crate) inner: age::x25519::Recipient,
}

impl FromStr for Recipient {
    type Err = SecretsError;

    fn from_str(text: &str) -> Result<Recipient, SecretsError> {
        age::x25519::Recipient::from_str(text.trim())
            .map(|inner| Recipient { inner })
            .map_err(|_| SecretsError::NotARecipient {
                text: text.trim().to_owned(),
            })
    }
}

/// `age1…`.
impl std::fmt::Display for Recipient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.inner)
    }
}

impl std::fmt::Debug for Recipient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Recipient({})", self.inner)
    }
}

impl PartialOrd for Recipient {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Recipient {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.to_string().cmp(&other.to_string())
    }
}

/// Reads the operators' recipients from `text`, every line that is not one named at once.
///
/// # Errors
/// The lines that are not keys, each by number.
pub fn parse_recipients(text: &str) -> Result<Vec<Recipient>, String> {
    let mut keys = Vec::new();
    let mut problems = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match Recipient::from_str(line) {
            Ok(key) => keys.push(key),
            Err(error) => problems.push(format!("line {}: {error}", number + 1)),
        }
    }
    if problems.is_empty() {
        Ok(keys)
    } else {
        Err(problems.join("; "))
    }
}

/// Reads the operators' recipients file; none when it is absent.
///
/// # Errors
/// [`SecretsError::Recipients`] naming the file and every line that is not a key.
pub fn read_recipients(path: &Path) -> Result<Vec<Recipient>, SecretsError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => {
            return Err(SecretsError::Recipients {
                path: path.to_owned(),
                reason: error.to_string(),
            })
        }
    };
    parse_recipients(&text).map_err(|reason| SecretsError::Recipients {
        path: path.to_owned(),
        reason,
    })
}

/// The recipients file's text for `keys` (sorted, one a line, under a comment saying what it
/// is).
pub fn recipients_text(keys: &[Recipient]) -> String {
    let mut keys = keys.to_vec();
    keys.sort();
    keys.dedup();
    let mut text = String::from(
        "# The operators' age keys: every secret at rest is also encrypted to each of these.\n",
    );
    for key in keys {
        text.push_str(&key.to_string());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a_key() -> Recipient {
        Recipient {
            inner: age::x25519::Identity::generate().to_public(),
        }
    }

    #[test]
    fn a_recipients_file_reads_back_and_names_every_bad_line() {
        let a = a_key();
        let b = a_key();
        let text = recipients_text(&[b.clone(), a.clone(), a.clone()]);
        let mut expected = vec![a, b];
        expected.sort();
        assert_eq!(parse_recipients(&text).unwrap(), expected);
        let bad = format!("{text}\nnot-a-key\nage1x\n");
        let problems = parse_recipients(&bad).unwrap_err();
        assert!(problems.contains("line 5: `not-a-key`"), "{problems}");
        assert!(problems.contains("line 6: `age1x`"), "{problems}");
    }

    #[test]
    fn an_absent_recipients_file_is_no_recipients() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_recipients(&dir.path().join("none"))
            .unwrap()
            .is_empty());
    }
}
