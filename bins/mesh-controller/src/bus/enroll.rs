//! Enrolling a node's NKey (the rule “Secrets never leave their owner”): `node enroll NODE
//! PUBLIC-KEY` records the public key `mesh-host keygen` printed on that node, so the bus's users
//! file carries its key and permissions and no secret, and drops the node's bus password from the
//! records.
//!
//! Start at [`enroll`]. What the controller composes from it: [`node_credentials`] (the key of
//! an enrolled node, else its password) for every node's user in the users file
//! ([`crate::bus::users::authorization`]), and [`nodes_on_passwords`] for `status`.
//!
//! Records: `bus/nkeys/<node>` holds the node's public key (`U…`, no secret); a node without
//! one is still on its password (`bus/passwords/<node>`), which keeps working until it is
//! enrolled (an existing home goes on as it was).
//!
//! What it must never do: take a seed for a public key (it is refused without being echoed),
//! change anything when the node or the key is refused, or keep an enrolled node's password.

use crate::bus::credentials::{password, password_key};
use crate::error::{Context, Error, Result};
use crate::home::Home;
use mesh_bus::grants::UserCredential;
use mesh_model::inventory::Inventory;
use serde::Serialize;

/// The record key of `node`'s enrolled public key.
pub(crate) fn nkey_key(node: &str) -> String {
    format!("bus/nkeys/{node}")
}

/// What [`enroll`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Enrolled {
    /// The node.
    pub node: String,
    /// Its public key, now recorded.
    pub public_key: String,
    /// The key it replaced, when the node was enrolled already (the same key when it was
    /// enrolled again with it).
    pub replaced: Option<String>,
    /// Whether a bus password of the node was dropped from the records now.
    pub password_dropped: bool,
    /// The node's age key, when one was recorded with it ([`enroll_with_age_key`]).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub age: Option<AgeKeyRecorded>,
}

/// A node's age key recorded as it was enrolled ([`enroll_with_age_key`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct AgeKeyRecorded {
    /// The age public key, now recorded.
    pub age_key: String,
    /// The age key it replaced, if another.
    pub age_key_replaced: Option<String>,
}

/// `node enroll NODE PUBLIC-KEY`: records `public_key` as `node`'s NKey and drops its bus
/// password from the records. The next send to the node holding the bus carries the key in
/// the users file (a changed users file: that node is sent first, the rule “Grants before code”);
/// from then on the node's host signs with its seed (`mesh-host serve` without `--password-file`),
/// and the old password, or a replaced key, is refused.
///
/// # Guarantees
/// Nothing is changed when the node is not the mesh's or the key is not an NKey user public
/// key; a seed given by mistake is never echoed. Idempotent: enrolling the same key again
/// changes nothing but says it replaced itself.
///
/// # Errors
/// The node is not in the inventory; the key is a seed or not a user public key (the error
/// says which, and names the node); the records cannot be read or written.
pub fn enroll(home: &Home, node: &str, public_key: &str) -> Result<Enrolled> {
    let inventory = home.inventory()?;
    crate::push::require_node(&inventory, node)
        .for_node(node, || "nothing was enrolled".to_owned())?;
    let public_key = public_key.trim();
    mesh_bus::keys::check_user_public_key(public_key)
        .for_node(node, || format!("enrolling `{node}`: nothing was enrolled"))?;
    let replaced = enrolled_key(home, node)?;
    home.put(&nkey_key(node), format!("{public_key}\n").as_bytes())?;
    let password_dropped = home.get(&password_key(node))?.is_some();
    if password_dropped {
        home.records()
            .delete(&password_key(node))
            .for_node(node, || {
                format!("dropping `{node}`'s bus password from the records")
            })?;
    }
    Ok(Enrolled {
        node: node.to_owned(),
        public_key: public_key.to_owned(),
        replaced,
        password_dropped,
        age: None,
    })
}

/// `node enroll NODE PUBLIC-KEY --age-key KEY`: [`enroll`], and `age_key` recorded as the
/// node's age public key ([`crate::secrets::enroll_age_key`]); answers what was enrolled and the
/// age key it replaced, if another ([`Enrolled::age`]).
///
/// # Guarantees
/// The age key is checked before anything is recorded: one that is not an age public key
/// changes nothing, the NKey neither.
///
/// # Errors
/// Those of [`enroll`] and [`crate::secrets::enroll_age_key`].
pub fn enroll_with_age_key(
    home: &Home,
    node: &str,
    public_key: &str,
    age_key: &str,
) -> Result<Enrolled> {
    age_key
        .parse::<mesh_secrets::Recipient>()
        .map_err(crate::secrets::secrets_error(format!(
            "reading the age key of `{node}`"
        )))?;
    let enrolled = enroll(home, node, public_key)?;
    let replaced = crate::secrets::enroll_age_key(home, node, age_key)?;
    Ok(Enrolled {
        age: Some(AgeKeyRecorded {
            age_key: age_key.to_owned(),
            age_key_replaced: replaced,
        }),
        ..enrolled
    })
}

/// `node`'s enrolled public key, if it is enrolled.
///
/// # Errors
/// The record cannot be read, or does not hold a user public key (naming the record).
pub(crate) fn enrolled_key(home: &Home, node: &str) -> Result<Option<String>> {
    let key = nkey_key(node);
    let Some(bytes) = home.get(&key)? else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&bytes).trim().to_owned();
    if !mesh_bus::keys::is_user_public_key(&text) {
        return Err(Error::BadRecord {
            location: home.records().locate(&key),
            what: "an NKey user public key; enroll the node again".to_owned(),
            source: None,
        });
    }
    Ok(Some(text))
}

/// How each of `nodes` proves itself, as the users file holds it — its enrolled key, else its
/// password (made the first time it is asked for, [`crate::bus::credentials::password`]) —
/// read at once: one listing
/// of the enrolled keys and one of the passwords, whatever the number of nodes; a password is
/// made (one record) only for a node that has neither.
///
/// # Errors
/// As [`enrolled_key`], naming the node's record; a password that cannot be read or made.
pub(crate) fn node_credentials<'a>(
    home: &Home,
    nodes: impl IntoIterator<Item = &'a String>,
) -> Result<std::collections::BTreeMap<String, UserCredential>> {
    let records = home.records();
    let listed = |dir: &str| -> Result<std::collections::BTreeMap<String, Vec<u8>>> {
        let prefix = format!("{dir}/");
        Ok(records
            .values_under(dir)?
            .into_iter()
            .filter_map(|(key, bytes)| Some((key.strip_prefix(&prefix)?.to_owned(), bytes)))
            .collect())
    };
    let keys = listed("bus/nkeys")?;
    let passwords = if home.records_on_bus() {
        listed("bus/passwords")?
    } else {
        // The embedded default keeps them as files of the home (credentials::password).
        std::collections::BTreeMap::new()
    };
    let mut credentials = std::collections::BTreeMap::new();
    for node in nodes {
        let credential = match (keys.get(node), passwords.get(node)) {
            (Some(bytes), _) => {
                let text = String::from_utf8_lossy(bytes).trim().to_owned();
                if !mesh_bus::keys::is_user_public_key(&text) {
                    return Err(Error::BadRecord {
                        location: records.locate(&nkey_key(node)),
                        what: "an NKey user public key; enroll the node again".to_owned(),
                        source: None,
                    });
                }
                UserCredential::Nkey(text)
            }
            (None, Some(bytes)) => {
                let text = String::from_utf8(bytes.clone()).map_err(crate::error::bad_record(
                    records.locate(&password_key(node)),
                    "text",
                ))?;
                UserCredential::Password(text.trim_end_matches(['\n', '\r']).to_owned())
            }
            (None, None) => UserCredential::Password(password(home, node)?),
        };
        credentials.insert(node.clone(), credential);
    }
    Ok(credentials)
}

/// The nodes of `inventory` not enrolled, by name: still on a bus password. One listing of
/// the enrolled keys, whatever the number of nodes.
///
/// # Errors
/// The records cannot be listed.
pub fn nodes_on_passwords(home: &Home, inventory: &Inventory) -> Result<Vec<String>> {
    let enrolled: std::collections::BTreeSet<String> = home
        .records()
        .list("bus/nkeys")?
        .into_iter()
        .map(|name| name.trim_end_matches('/').to_owned())
        .collect();
    Ok(inventory
        .file
        .nodes
        .keys()
        .filter(|node| !enrolled.contains(*node))
        .cloned()
        .collect())
}

/// `broker password NODE`: the node's bus password, for its host's `--password-file` (made if
/// it has none).
///
/// # Errors
/// The node is enrolled with an NKey (it has no password: its host signs with its seed);
/// the password cannot be read or made.
pub fn node_password(home: &Home, node: &str) -> Result<String> {
    if enrolled_key(home, node)?.is_some() {
        return Err(Error::refused(format!(
            "`{node}` is enrolled with an NKey and has no bus password: its host signs with the \
             seed `mesh-host keygen` made, and is served with no password file"
        )));
    }
    password(home, node)
}
