//! What was last sent to each node: `sent/<node>.json` names the digest of its declaration,
//! which is kept once under `declarations/<hex>.json` ([`SentStore`]).
//!
//! A send is written before it is made: `sent/sending/<node>.json` names what is about to be
//! published ([`SentStore::record_sending`]), and `sent/<node>.json` is written once the bus took
//! it. A controller stopped between the two (killed, or its publish refused) leaves a send
//! unconfirmed ([`SentStore::unconfirmed`]): `status` reads it as sent, unconfirmed, until the
//! node's report names it (then the node runs it) or a later send is confirmed.

use super::Home;
use crate::error::{bad_record, Error, Result};
use mesh_model::declaration::Declaration;
use serde::{Deserialize, Serialize};

/// The format version of a `sent/<node>.json` record.
pub(crate) const SENT_FORMAT: u32 = 1;

/// What was last sent to a node: the digest of its declaration, which is kept once under
/// `declarations/` (disk format, version [`SENT_FORMAT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct SentRecord {
    /// Format version.
    pub format: u32,
    /// The digest of the declaration sent.
    pub declaration: String,
}

/// The format version of a `sent/sending/<node>.json` record.
pub(crate) const SENDING_FORMAT: u32 = 1;

/// What is about to be sent to a node, written before it is published (disk format, version
/// [`SENDING_FORMAT`]): the declaration's digest (the declaration kept under `declarations/`
/// first), the send's id and when it was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SendingRecord {
    /// Format version.
    pub format: u32,
    /// The digest of the declaration about to be sent.
    pub declaration: String,
    /// The send's id (the message id it is published with), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send: Option<String>,
    /// When it was written (seconds since the epoch, the controller's clock).
    pub at: u64,
}

/// The record of what is about to be sent to `node`.
fn sending_key(node: &str) -> String {
    format!("sent/sending/{node}.json")
}

/// The record key of the declaration with `digest` (`sha256:<hex>` → `declarations/<hex>.json`).
pub fn declaration_key(digest: &str) -> String {
    format!(
        "declarations/{}.json",
        digest.strip_prefix("sha256:").unwrap_or(digest)
    )
}

/// Whether `text` is a declaration's digest: `sha256:` and 64 lower-case hex digits.
fn is_digest(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// What was sent to each node ([`crate::home::keys`]): `sent/<node>.json` naming a digest, and
/// the declarations kept once by digest under `declarations/`.
#[derive(Clone, Copy)]
pub struct SentStore<'h> {
    home: &'h Home,
}

impl Home {
    /// What was sent to each node, and the declarations kept by digest.
    pub fn sent(&self) -> SentStore<'_> {
        SentStore { home: self }
    }
}

impl SentStore<'_> {
    /// The digest of the declaration last sent to `node`, without reading the declaration.
    ///
    /// # Errors
    /// The record cannot be read, or is neither format.
    pub fn digest(&self, node: &str) -> Result<Option<String>> {
        Ok(self.record_of(node)?.map(|(digest, _)| digest))
    }

    /// The digest of the declaration last sent to each node that was sent one, by node: one
    /// listing of `sent/`, not a read per node (a record of the format before [`SENT_FORMAT`]
    /// is read, and migrated, as [`Home::sent_digest`] does).
    ///
    /// # Errors
    /// The records cannot be listed, or a record is neither format.
    pub fn digests(&self) -> Result<std::collections::BTreeMap<String, String>> {
        let mut digests = std::collections::BTreeMap::new();
        for (key, bytes) in self.home.records.values_under("sent")? {
            let Some(node) = key
                .strip_prefix("sent/")
                .and_then(|name| name.strip_suffix(".json"))
                .filter(|node| !node.contains('/'))
            else {
                continue;
            };
            let digest = match serde_json::from_slice::<SentRecord>(&bytes) {
                Ok(record) if record.format == SENT_FORMAT => Some(record.declaration),
                Ok(_) | Err(_) => self.digest(node)?,
            };
            if let Some(digest) = digest {
                digests.insert(node.to_owned(), digest);
            }
        }
        Ok(digests)
    }

    /// The declaration last sent to `node`.
    ///
    /// # Errors
    /// The records cannot be read; the pointer names a declaration that is not kept.
    pub fn get(&self, node: &str) -> Result<Option<Declaration>> {
        let Some((digest, whole)) = self.record_of(node)? else {
            return Ok(None);
        };
        if let Some(declaration) = whole {
            return Ok(Some(declaration));
        }
        match self.declaration(&digest)? {
            Some(declaration) => Ok(Some(declaration)),
            None => Err(Error::BadRecord {
                location: self.home.records.locate(&format!("sent/{node}.json")),
                what: format!(
                    "readable: it names declaration {digest}, which is not kept ({})",
                    self.home.records.locate(&declaration_key(&digest))
                ),
                source: None,
            }),
        }
    }

    /// `sent/<node>.json` read: the digest, and the declaration when the record held it whole
    /// (the format before [`SENT_FORMAT`], migrated here on first read, saying so).
    fn record_of(&self, node: &str) -> Result<Option<(String, Option<Declaration>)>> {
        let key = format!("sent/{node}.json");
        let Some(bytes) = self.home.get(&key)? else {
            return Ok(None);
        };
        if let Ok(record) = serde_json::from_slice::<SentRecord>(&bytes) {
            if record.format == SENT_FORMAT {
                // The digest becomes a key: one that is not a digest is this record's fault,
                // named as such, never a look-up of some other key.
                if !is_digest(&record.declaration) {
                    return Err(Error::BadRecord {
                        location: self.home.records.locate(&key),
                        what: format!(
                            "readable: it names `{}`, which is not a declaration's digest \
                             (sha256:<64 hex>)",
                            record.declaration.escape_debug()
                        ),
                        source: None,
                    });
                }
                return Ok(Some((record.declaration, None)));
            }
        }
        let declaration = Declaration::from_json(&bytes).map_err(bad_record(
            self.home.records.locate(&key),
            &format!("a declaration (what was sent to `{node}`)"),
        ))?;
        // Migrated: the declaration kept once by digest, the record made a pointer.
        self.record(&declaration)?;
        self.home.note_migration(format!(
            "{}: the whole declaration was kept in it; it now names {} (kept once by digest)",
            self.home.records.locate(&key),
            self.home
                .records
                .locate(&declaration_key(&declaration.digest()))
        ));
        Ok(Some((declaration.digest(), Some(declaration))))
    }

    /// The declaration with `digest`, if it is kept.
    ///
    /// # Errors
    /// The record cannot be read or does not read as a declaration.
    pub fn declaration(&self, digest: &str) -> Result<Option<Declaration>> {
        let key = declaration_key(digest);
        let Some(bytes) = self.home.get(&key)? else {
            return Ok(None);
        };
        Declaration::from_json(&bytes)
            .map(Some)
            .map_err(bad_record(self.home.records.locate(&key), "a declaration"))
    }

    /// Keeps `declaration` once by its digest ([`Declaration::digest`], what its host reports
    /// it by): the key is the content's digest, so writing it again writes the same bytes — but
    /// for its secrets' ciphertexts, which count by their keyed digests (sealed again to other
    /// operators' keys, the same declaration).
    ///
    /// # Errors
    /// The records cannot be written.
    pub fn keep_declaration(&self, declaration: &Declaration) -> Result<String> {
        let bytes = declaration.canonical_json();
        // The digest its host reports it by: of its bytes, except that a secret counts by its
        // keyed digest (whichever key its ciphertext is sealed to).
        let digest = declaration.digest();
        self.home.put(&declaration_key(&digest), &bytes)?;
        Ok(digest)
    }

    /// Records what was sent to `node`: the declaration kept by digest, then the node's record
    /// naming it.
    ///
    /// # Errors
    /// The records cannot be written.
    pub fn record(&self, declaration: &Declaration) -> Result<()> {
        let digest = self.keep_declaration(declaration)?;
        self.home.put_json(
            &format!("sent/{}.json", declaration.node),
            &SentRecord {
                format: SENT_FORMAT,
                declaration: digest,
            },
        )
    }

    /// Records that `declarations` are about to be sent, before any is published: each
    /// declaration kept by digest, then `sent/sending/<node>.json` naming it with its send's
    /// id, at `at`. Once the bus took them, [`SentStore::record_many`] records them sent; a
    /// controller stopped between the two leaves them unconfirmed ([`SentStore::unconfirmed`]).
    ///
    /// # Errors
    /// The records cannot be written.
    pub fn record_sending(
        &self,
        declarations: &[&mesh_model::declaration::Outgoing],
        at: u64,
    ) -> Result<()> {
        let mut kept = Vec::with_capacity(declarations.len());
        let mut named = Vec::with_capacity(declarations.len());
        for declaration in declarations {
            let digest = declaration.digest();
            named.push((
                sending_key(declaration.node()),
                serde_json::to_vec_pretty(&SendingRecord {
                    format: SENDING_FORMAT,
                    declaration: digest.to_owned(),
                    send: declaration.send().map(str::to_owned),
                    at,
                })?,
            ));
            kept.push((declaration_key(digest), declaration.json().to_vec()));
        }
        self.home.put_many(&kept)?;
        self.home.put_many(&named)
    }

    /// The sends written as about to be made and never recorded made, by node, given what
    /// each node was last recorded sent (`sent`, [`SentStore::digests`]): one listing of
    /// `sent/sending/`. A node whose record names the digest it was last recorded sent is not
    /// among them (that send was made, or one of the same declaration was). A record that does
    /// not read is passed over: it only ever adds to what `status` says.
    ///
    /// # Errors
    /// The records cannot be listed.
    pub fn unconfirmed(
        &self,
        sent: &std::collections::BTreeMap<String, String>,
    ) -> Result<std::collections::BTreeMap<String, SendingRecord>> {
        let mut unconfirmed = std::collections::BTreeMap::new();
        for (key, bytes) in self.home.records.values_under("sent/sending")? {
            let Some(node) = key
                .strip_prefix("sent/sending/")
                .and_then(|name| name.strip_suffix(".json"))
                .filter(|node| !node.contains('/'))
            else {
                continue;
            };
            let Ok(record) = serde_json::from_slice::<SendingRecord>(&bytes) else {
                continue;
            };
            if record.format == SENDING_FORMAT
                && sent.get(node) != Some(&record.declaration)
                && is_digest(&record.declaration)
            {
                unconfirmed.insert(node.to_owned(), record);
            }
        }
        Ok(unconfirmed)
    }

    /// Records what was sent to each node of `declarations`, as [`Home::record_sent`] does,
    /// together: every declaration kept by digest first, then the nodes' records naming them.
    ///
    /// # Errors
    /// The records cannot be written.
    pub fn record_many(&self, declarations: &[&mesh_model::declaration::Outgoing]) -> Result<()> {
        let mut kept = Vec::with_capacity(declarations.len());
        let mut named = Vec::with_capacity(declarations.len());
        for declaration in declarations {
            let digest = declaration.digest();
            named.push((
                format!("sent/{}.json", declaration.node()),
                serde_json::to_vec_pretty(&SentRecord {
                    format: SENT_FORMAT,
                    declaration: digest.to_owned(),
                })?,
            ));
            kept.push((declaration_key(digest), declaration.json().to_vec()));
        }
        self.home.put_many(&kept)?;
        self.home.put_many(&named)
    }

    /// Records each of `declarations` sent — the nodes' `sent/<node>.json` naming them — once
    /// the bus took them, after [`SentStore::record_sending`] kept them (their declarations are
    /// not written again).
    ///
    /// # Errors
    /// The records cannot be written.
    pub fn record_confirmed(
        &self,
        declarations: &[&mesh_model::declaration::Outgoing],
    ) -> Result<()> {
        let mut named = Vec::with_capacity(declarations.len());
        for declaration in declarations {
            named.push((
                format!("sent/{}.json", declaration.node()),
                serde_json::to_vec_pretty(&SentRecord {
                    format: SENT_FORMAT,
                    declaration: declaration.digest().to_owned(),
                })?,
            ));
        }
        self.home.put_many(&named)
    }
}
