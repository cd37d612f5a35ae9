//! The proof that the bus has the users in force, and the record of the ones it last
//! confirmed ([`CONFIRMED_KEY`]): when the users composed for a send differ from those, the node
//! holding the bus is sent them first, and no other node is sent anything until that node
//! reported the file in place and the server has every node's permissions in force, proven one
//! by one (`confirm_users`, [`mesh_bus::probe`]): "Grants before code".
//!
//! What it must never do: record users as confirmed that were not proven in force.

use super::{read_users_archive, USERS_RESOURCE};
use crate::bus::credentials::{password, probe_seed, BusConfig};
use crate::error::{bad_record, Error, Result};
use crate::home::Home;
use mesh_bus::grants;
use mesh_bus::probe;
use mesh_bus::{NatsOptions, NodeSecret};
use mesh_model::build::ArchiveRef;
use mesh_model::inventory::Inventory;
use mesh_model::report::{Outcome, Report};
use mesh_store::store::ArchiveStore;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The longest a push waits for the bus to have every node's permissions in force after the
/// bus node reported the users file in place (its server reloading).
pub const GRANTS_CONFIRM_LIMIT: Duration = Duration::from_secs(30);

/// The record of the users the bus last confirmed in force: a [`ConfirmedUsers`] (their
/// digest, and the archive in the store they can be read from), never the text.
pub(crate) const CONFIRMED_KEY: &str = "bus/authorization.json";

/// The record that held the confirmed users' whole text before [`CONFIRMED_KEY`]; read when
/// that one is absent, and removed once it is written.
pub(crate) const CONFIRMED_TEXT_KEY: &str = "bus/authorization.conf";

/// The format of [`ConfirmedUsers`].
pub(crate) const CONFIRMED_FORMAT: u32 = 1;

/// The users the bus last confirmed in force (record [`CONFIRMED_KEY`], format
/// [`CONFIRMED_FORMAT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct ConfirmedUsers {
    /// Always [`CONFIRMED_FORMAT`].
    pub format: u32,
    /// `sha256:<hex>` of the users file's text.
    pub users: String,
    /// The archive in the store holding the text ([`super::USERS_ARCHIVE_PATH`]).
    pub archive: ArchiveRef,
}

/// What the bus last confirmed: the users' digest, and either the archive holding them or (a
/// record of the format before [`CONFIRMED_KEY`]) their text.
pub(crate) enum Confirmed {
    Archived(ConfirmedUsers),
    Text(String),
}

impl Confirmed {
    fn digest(&self) -> String {
        match self {
            Confirmed::Archived(record) => record.users.clone(),
            Confirmed::Text(text) => mesh_model::sha256_digest(text.as_bytes()),
        }
    }
}

/// The users the bus last confirmed in force, if any.
pub(crate) fn confirmed(home: &Home) -> Result<Option<Confirmed>> {
    if let Some(bytes) = home.get(CONFIRMED_KEY)? {
        let record: ConfirmedUsers = serde_json::from_slice(&bytes).map_err(bad_record(
            home.records().locate(CONFIRMED_KEY),
            "a record of confirmed users",
        ))?;
        if record.format != CONFIRMED_FORMAT {
            return Err(Error::Format {
                location: home.records().locate(CONFIRMED_KEY),
                found: record.format.to_string(),
                expected: CONFIRMED_FORMAT,
            });
        }
        return Ok(Some(Confirmed::Archived(record)));
    }
    Ok(home
        .get(CONFIRMED_TEXT_KEY)?
        .map(|bytes| Confirmed::Text(String::from_utf8_lossy(&bytes).into_owned())))
}

/// The digest of the users the bus last confirmed in force, if any.
///
/// # Errors
/// The record cannot be read, or is not one.
pub(crate) fn confirmed_digest(home: &Home) -> Result<Option<String>> {
    Ok(confirmed(home)?.map(|confirmed| confirmed.digest()))
}

/// The text of the users the bus last confirmed, where it can be had: from the store, by the
/// archive the record names (checked against its digests), or from a record of the format
/// before. `None`, logged, when the store cannot give it.
pub(crate) async fn confirmed_text(
    confirmed: &Confirmed,
    store: &dyn ArchiveStore,
) -> Option<String> {
    let record = match confirmed {
        Confirmed::Text(text) => return Some(text.clone()),
        Confirmed::Archived(record) => record,
    };
    let read = async {
        let fetched = store.fetch(&record.archive).await?;
        let text = read_users_archive(&fetched.bytes, &record.archive)?;
        if mesh_model::sha256_digest(text.as_bytes()) != record.users {
            return Err(Error::BadRecord {
                location: format!("the bus's users archive {}", record.archive.digest),
                what: format!("the users {}", record.users),
                source: None,
            });
        }
        Ok::<_, Error>(text)
    };
    match read.await {
        Ok(text) => Some(text),
        Err(error) => {
            tracing::warn!(archive = %record.archive.digest, store = %store.name(),
                error = error.chain_line(),
                "the users the bus last confirmed cannot be read: only what the new ones \
                 allow is proven, not what they take away");
            None
        }
    }
}

/// Records `users` (packed as `archive`) as the ones the bus confirmed in force, and removes a
/// record of the format before, which held the text.
///
/// # Errors
/// The records cannot be written.
pub fn record_confirmed(home: &Home, users: &str, archive: &ArchiveRef) -> Result<()> {
    home.put_json(
        CONFIRMED_KEY,
        &ConfirmedUsers {
            format: CONFIRMED_FORMAT,
            users: mesh_model::sha256_digest(users.as_bytes()),
            archive: archive.clone(),
        },
    )?;
    if home.get(CONFIRMED_TEXT_KEY)?.is_some() {
        home.records().delete(CONFIRMED_TEXT_KEY)?;
        tracing::info!(
            "the record of the confirmed users is now their digest ({CONFIRMED_KEY}); \
             {CONFIRMED_TEXT_KEY}, which held their text, is removed"
        );
    }
    Ok(())
}

/// Whether the bus node's report says the users file is in place.
pub(crate) fn users_file_in_place(report: &Report) -> Result<(), String> {
    match report.resources.get(USERS_RESOURCE) {
        Some(Outcome::Applied { .. } | Outcome::Unchanged) => Ok(()),
        Some(other) => Err(format!(
            "the users file is {}{}",
            other.word(),
            mesh_host::outcome_detail(other)
        )),
        None => Err("its report does not name the users file".to_owned()),
    }
}

/// Waits until the server has put every node's permissions in force (the bus node's server
/// has reloaded `users`), or [`GRANTS_CONFIRM_LIMIT`]: for each node, connected as its user,
/// every permission `users` gives it is allowed and every one `confirmed` (the users the bus
/// last confirmed) gave it and `users` does not is refused — one by one
/// ([`mesh_bus::probe::prove_permissions`]). A change of permissions alone, the users the
/// same, is so proven before any code that needs it is sent (the incident behind “Grants before
/// code”).
///
/// An enrolled node's seed is not the controller's to sign with: the probe user proves the
/// file in force first (its permission names the file, so every node's permissions in it
/// are in force with it); each node still on a password is then proven as that node.
///
/// # Errors
/// The first user whose permissions are not in force by the limit, with every permission not
/// proven: the permission and what the server said. A password that cannot be read.
pub(crate) async fn confirm_users(
    home: &Home,
    bus: &BusConfig,
    controller: &NodeSecret,
    inventory: &Inventory,
    users: &str,
    confirmed: Option<&str>,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + GRANTS_CONFIRM_LIMIT;
    let expected = grants::permissions_in_config(users);
    let previous = confirmed
        .map(grants::permissions_in_config)
        .unwrap_or_default();
    if let Some(permissions) = expected.get(mesh_bus::subjects::PROBE_USER) {
        let mut options = NatsOptions {
            credentials: Some(mesh_bus::nats::Credentials::Nkey {
                user: mesh_bus::subjects::PROBE_USER.to_owned(),
                seed: probe_seed(controller),
            }),
            name: Some("mesh-controller proving the bus's users".to_owned()),
            inbox_prefix: Some(mesh_bus::subjects::probe_inbox_prefix()),
            ..NatsOptions::new(&bus.url)
        }
        .with_tls(bus.tls.clone());
        options.connect_timeout = Duration::from_secs(2);
        // Its one permission names this file: allowed, it proves the file in force. The
        // previous file's is not tried: its refusal would only say the same, as an error in the
        // server's log.
        if let Err(unproven) = probe::prove_permissions(&options, permissions, None, deadline).await
        {
            return Err(Error::Bus {
                doing: format!(
                    "the bus has not put its new users in force {}s after they were sent",
                    GRANTS_CONFIRM_LIMIT.as_secs()
                ),
                source: Some(
                    unproven
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                        .into(),
                ),
            });
        }
    }
    let on_passwords = crate::bus::enroll::nodes_on_passwords(home, inventory)?;
    for node in &on_passwords {
        let user = mesh_bus::subjects::node_user(node);
        let Some(permissions) = expected.get(&user) else {
            return Err(Error::refused(format!(
                "the bus's users do not name `{user}`"
            )));
        };
        let mut options =
            NatsOptions::for_node(&bus.url, node, password(home, node)?).with_tls(bus.tls.clone());
        options.connect_timeout = Duration::from_secs(2);
        options.name = Some(format!("mesh-controller checking {node}'s grants"));
        if let Err(unproven) =
            probe::prove_permissions(&options, permissions, previous.get(&user), deadline).await
        {
            return Err(Error::Node {
                node: node.clone(),
                doing: format!(
                    "the bus has not put `{user}`'s permissions in force {}s after its users \
                     were sent",
                    GRANTS_CONFIRM_LIMIT.as_secs()
                ),
                source: Box::new(Error::bus(
                    unproven
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; "),
                )),
            });
        }
    }
    Ok(())
}
