//! A fleet's real hosts over NATS (`--bus URL`): declarations published on each node's
//! subject to the declarations stream, reports read from the reports stream
//! (`reports`: nothing dropped however far behind the rollout falls), and the real grants — the
//! bus's users composed ([`crate::bus::users`]), the granted state buckets made, and, when the
//! users changed, the node holding the bus sent them first and the rest held until the bus has them
//! in force ([`crate::bus::users::confirm`]).
//!
//! What it must never do: answer a node's grants issued before its permissions are in force
//! when they changed, or take a report published on another node's subject for that node's.

use super::{Fleet, Grants, ReportHeard, Sent};
use crate::bus::credentials::{connect, controller_secret, random_hex, BusConfig};
use crate::bus::users::confirm::{
    confirm_users, confirmed, confirmed_digest, confirmed_text, record_confirmed,
    users_file_in_place,
};
use crate::bus::users::{
    authorization, granted_buckets, publish_users, users_archive, with_users_file, UsersFile,
    USERS_MODULE, USERS_RESOURCE,
};
use crate::error::{bus_error, Context, Error, Result};
use crate::home::Home;
use mesh_bus::jetstream;
use mesh_bus::probe;
use mesh_bus::{subjects, NatsBus, NodeSecret};
use mesh_model::declaration::{Declaration, Outgoing};
use mesh_model::inventory::Inventory;
use mesh_model::module::Catalogue;
use mesh_store::archive::Archive;
use mesh_store::store::ArchiveStore;
use std::collections::BTreeSet;
use std::time::Duration;

/// A report heard on the bus, published on `mesh.report.<node>` (a node's grants let it
/// publish only its own): one that reads and names that node, or what made it unreadable
/// ([`crate::home::heard::judge`], `limit` the most bytes a report may hold) — that node's problem,
/// passed on. A permission probe's message on a report subject ([`probe::is_probe`]) is passed
/// over quietly.
fn heard_report(subject: &str, payload: &[u8], limit: usize) -> Option<ReportHeard> {
    if probe::is_probe(payload) {
        return None;
    }
    let node = subject.strip_prefix(&subjects::report(""))?;
    match crate::home::heard::judge(node, payload, mesh_store::clock::now(), limit) {
        crate::home::heard::Heard::Read { report, .. } => Some(ReportHeard::Report(report)),
        crate::home::heard::Heard::Unreadable(report) => {
            tracing::warn!(%subject, reason = %report.reason,
                "an unreadable report: its node's problem");
            Some(ReportHeard::Unreadable {
                node: node.to_owned(),
                report,
            })
        }
    }
}

/// The `Nats-Msg-Id` one send of a declaration is published with: its node, its digest and
/// `send` (made once per send, before any attempt). A publish tried again within the send —
/// its answer lost, the bus restarting — is so stored once (JetStream drops a message whose
/// id it stored within the stream's duplicate window), while a later send of the same
/// declaration (a push again, a resumed rollout) is a new message the host applies again.
pub(crate) fn declaration_message_id(declaration: &Outgoing, send: &str) -> String {
    format!("{}:{}:{send}", declaration.node(), declaration.digest())
}

/// Publishes `declaration` on its node's subject through JetStream with the message id
/// `message_id` (stored when this returns); records nothing.
///
/// # Guarantees
/// Published again with the same `message_id` within the stream's duplicate window, the
/// declaration is stored once.
async fn publish(bus: &NatsBus, declaration: &Outgoing, message_id: &str) -> Result<()> {
    let node = declaration.node();
    jetstream::publish_declaration(
        &bus.jetstream(),
        node,
        declaration.json().to_vec(),
        message_id,
    )
    .await
    .map_err(bus_error(|| {
        format!("`{node}`: the declarations stream did not store it")
    }))?;
    Ok(())
}

/// [`publish`], tried again for up to [`SEND_RETRY_LIMIT`]: a server restarting, or one
/// reloading its users (nats-server 2.9 may answer for a moment that the stream does not
/// exist). Every attempt carries the same message id ([`declaration_message_id`]), so one stored
/// before its answer was lost is not stored again.
///
/// # Errors
/// The bus did not store it within the limit.
async fn publish_patiently(bus: &NatsBus, declaration: &Outgoing) -> Result<()> {
    // The send's id, named by the executor ([`crate::executor::named_send`]); one made here
    // for a declaration sent unnamed.
    let message_id = match declaration.send() {
        Some(send) => send.to_owned(),
        None => declaration_message_id(declaration, &random_hex(8, "a send's id")?),
    };
    let deadline = tokio::time::Instant::now() + SEND_RETRY_LIMIT;
    loop {
        match publish(bus, declaration, &message_id).await {
            Ok(()) => return Ok(()),
            Err(error) if tokio::time::Instant::now() < deadline => {
                tracing::warn!(node = %declaration.node(), error = error.chain_line(),
                    "the bus did not take a declaration; trying again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(error) => {
                // Said when it is why: the declarations' stream has no leader (its cluster lost
                // its quorum), so the operator is not left with a bare time-out.
                let why = jetstream::leaderless(
                    &bus.jetstream(),
                    mesh_bus::subjects::DECLARATIONS_STREAM,
                )
                .await
                .map(|why| {
                    format!(
                        " — {why}; it is not stored (a server that had not yet seen the \
                             quorum lost may hold it and store it once when quorum returns: \
                             its message id keeps a second copy out)"
                    )
                })
                .unwrap_or_default();
                return Err(error).for_node(declaration.node(), || {
                    format!(
                        "the bus did not take `{}`'s declaration within {} s{why}",
                        declaration.node(),
                        SEND_RETRY_LIMIT.as_secs()
                    )
                });
            }
        }
    }
}

/// How long making a granted state bucket is tried again (a server reloading its users)
/// before the grant fails.
pub(crate) const BUCKET_RETRY_LIMIT: Duration = Duration::from_secs(10);

/// How many declarations a send to many nodes keeps in flight at once. Each publish waits a
/// round trip and the server's store of the message (0.1–0.5 ms on loopback, more with an
/// fsync a write or over a network): awaited one after another, a send to 10,000 nodes would
/// wait 10,000 of them in a row while the server idles between. With 64 in flight the server
/// always has the next publishes at hand, and what is in flight stays bounded — 64
/// declarations' bytes, and 64 answers the client waits for.
pub(crate) const SEND_CONCURRENCY: usize = 64;

/// How long a send keeps trying a bus that does not take it (a server restarting or
/// reloading) before it fails; a rollout's plan keeps its place and `plans resume` sends again.
pub(crate) const SEND_RETRY_LIMIT: Duration = Duration::from_secs(60);

/// A fleet's real hosts over the bus (every send with `--bus`: `push`, `merge`, `plans resume`,
/// `push --behind`, the daemon): the real grants, declarations published to each node's
/// subject, reports read from the reports stream. The executor ([`crate::executor`]) drives it.
///
/// # Guarantees
/// - Grants before code: [`Fleet::issue_grants`] makes the granted state
///   buckets, and while the bus's users for the rollout differ from the ones the bus last
///   confirmed it answers only the bus node's grants (its declaration names the users file,
///   [`Fleet::users_file`]); any other node's grants fail until the bus node reported the
///   file in place and the server has every node's permissions in force, proven one by one
///   — then the users are recorded as confirmed.
/// - The bus node's declaration always names the users file, so no send takes it away; the
///   archive holding it is in the store, held and kept, before any declaration naming it is
///   sent (see [How the users file travels](self)).
/// - A send is stored by JetStream before it returns (and so before the executor records it
///   sent); a bus that does not take it is tried again for up to [`SEND_RETRY_LIMIT`], stored
///   once however often it is tried.
pub(crate) struct NatsFleet {
    home: Home,
    args: BusConfig,
    bus: NatsBus,
    store: Box<dyn ArchiveStore>,
    /// The reports stream read from the fleet's start ([`jetstream::ReportReader`]).
    reports: jetstream::ReportReader,
    controller: NodeSecret,
    /// The bus's users as this rollout's catalogue and inventory compose them.
    users: String,
    /// `sha256:<hex>` of [`NatsFleet::users`].
    users_digest: String,
    /// [`NatsFleet::users`] packed as an archive.
    users_archive: Option<Archive>,
    /// The users archives this fleet published to the store (by digest).
    published: BTreeSet<String>,
    buckets: BTreeSet<String>,
    inventory: Option<Inventory>,
    /// How many copies the streams and module state buckets this fleet makes keep.
    replicas: usize,
}

impl NatsFleet {
    /// Connects as the controller, makes the mesh's streams and listens for reports; the bus's
    /// users travel through `store` (the controller's archive store, reached with `store_access`).
    ///
    /// # Errors
    /// The bus cannot be reached, or the streams cannot be made; the store's client cannot be
    /// made.
    pub(crate) async fn start(
        home: &Home,
        args: &BusConfig,
        store: &mesh_store::store::StoreSpec,
        store_access: &mesh_store::store::StoreAccess,
    ) -> Result<NatsFleet> {
        let controller = controller_secret(home, args)?;
        let store = mesh_store::open_store_with(store, store_access)
            .for_module(USERS_MODULE, || {
                format!("opening the store {store} for the bus's users")
            })?;
        let bus = connect(home, args).await?;
        let replicas = crate::bus::broker::wanted_replicas(home, args, &bus)?;
        jetstream::ensure_streams_with(&bus.jetstream(), replicas)
            .await
            .map_err(bus_error(|| "making the mesh's streams".to_owned()))?;
        // A reports stream that does not answer yet (a cluster whose quorum just came back)
        // is read from now once it does: the reader makes its consumer then.
        let reports = jetstream::ReportReader::open(bus.jetstream())
            .await
            .map_err(bus_error(|| "reading the reports stream".to_owned()))?;
        Ok(NatsFleet {
            home: home.clone(),
            args: args.clone(),
            bus,
            store,
            reports,
            controller,
            users: String::new(),
            users_digest: String::new(),
            users_archive: None,
            published: BTreeSet::new(),
            buckets: BTreeSet::new(),
            inventory: None,
            replicas,
        })
    }

    /// Whether the users composed differ from the ones the bus last confirmed. A record that
    /// cannot be read counts as a change (the bus node goes first, which is always safe).
    fn users_differ(&self) -> bool {
        confirmed_digest(&self.home).ok().flatten().as_ref() != Some(&self.users_digest)
    }

    /// Publishes the users archive `declaration` names, if it names one this fleet has not
    /// published yet ([`publish_users`]).
    async fn publish_users_of(&mut self, declaration: &Declaration) -> Result<()> {
        let Some(named) = declaration.archives.get(USERS_MODULE) else {
            return Ok(());
        };
        if self.published.contains(&named.digest) {
            return Ok(());
        }
        let archive = self
            .users_archive
            .as_ref()
            .filter(|archive| &archive.reference == named)
            .ok_or_else(|| {
                Error::internal(format!(
                    "`{}`'s declaration names the users archive {}, which this rollout did not \
                     compose",
                    declaration.node, named.digest
                ))
            })?;
        publish_users(&self.home, self.store.as_ref(), archive).await?;
        self.published.insert(named.digest.clone());
        Ok(())
    }
}

#[async_trait::async_trait]
impl Fleet for NatsFleet {
    /// Fixes the bus's users (and the archive they travel in) and granted buckets for one
    /// module's rollout, from the catalogue and inventory it composes from.
    ///
    /// # Errors
    /// As [`authorization`].
    fn prepare(&mut self, catalogue: &Catalogue, inventory: &Inventory) -> Result<()> {
        let users = authorization(&self.home, catalogue, inventory, &self.controller)?;
        // Packed once while they stay the same: at 10,000 nodes the users are some 7 MB, and
        // each module of a merge composes them again, mostly unchanged.
        if self.users_archive.is_none() || users != self.users {
            self.users_digest = mesh_model::sha256_digest(users.as_bytes());
            self.users_archive = Some(users_archive(&users)?);
            self.users = users;
        }
        self.buckets = granted_buckets(catalogue, inventory);
        self.inventory = Some(inventory.clone());
        Ok(())
    }

    fn users_change(&self, _grants_change: bool) -> Option<String> {
        self.users_differ()
            .then(|| "the bus's users differ from the ones it confirmed".to_owned())
    }

    /// The node holding the bus and the users file (in its archive) it is sent with every
    /// declaration.
    fn users_file(&self) -> Option<UsersFile> {
        let inventory = self.inventory.as_ref()?;
        let archive = self.users_archive.as_ref()?;
        Some(UsersFile {
            bus_node: inventory.file.bus_node.clone(),
            archive: archive.reference.clone(),
            sha256: self.users_digest.clone(),
        })
    }

    /// Issues the grants of `nodes` (see the type's guarantees); [`Grants::Failed`] for a
    /// grant that failed (the state machine tries it again).
    ///
    /// # Errors
    /// The records cannot be read or written.
    async fn issue_grants(&mut self, nodes: &[String]) -> Result<Grants> {
        let home = &self.home;
        let js = self.bus.jetstream();
        for bucket in &self.buckets {
            // A server reloading its users answers for a moment "jetstream unavailable": try
            // again for a while before the grant fails.
            let deadline = tokio::time::Instant::now() + BUCKET_RETRY_LIMIT;
            loop {
                match jetstream::ensure_bucket_with(&js, bucket, self.replicas).await {
                    Ok(_) => break,
                    Err(error) if tokio::time::Instant::now() < deadline => {
                        tracing::debug!(bucket, %error, "a state bucket could not be made; trying again");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(error) => {
                        return Ok(Grants::Failed(format!(
                            "making state bucket `{bucket}`: {error}"
                        )))
                    }
                }
            }
        }
        let (Some(inventory), Some(users_file)) = (self.inventory.as_ref(), self.users_file())
        else {
            return Ok(Grants::Failed(
                "the rollout's users were not composed".to_owned(),
            ));
        };
        if !self.users_differ() {
            return Ok(Grants::Issued(format!(
                "state buckets made ({}); the bus's users are as it confirmed them",
                self.buckets.len()
            )));
        }
        let bus_node = &inventory.file.bus_node;
        if nodes.iter().all(|node| node == bus_node) {
            return Ok(Grants::Issued(format!(
                "the bus's users changed: `{bus_node}`, holding the bus, is sent them first"
            )));
        }
        // Everyone else waits for the bus node to have the users in place.
        let users_resource =
            with_users_file(Declaration::new(bus_node.clone(), Vec::new()), &users_file)
                .resources
                .into_iter()
                .find(|r| r.id == USERS_RESOURCE);
        let sent = home.sent().get(bus_node)?;
        match sent {
            Some(sent)
                if sent
                    .resources
                    .iter()
                    .any(|r| Some(r) == users_resource.as_ref()) =>
            {
                match home.reports().get(bus_node)? {
                    Some(report) if report.declaration == sent.digest() => {
                        if let Err(reason) = users_file_in_place(&report) {
                            return Ok(Grants::Failed(format!("on `{bus_node}`, {reason}")));
                        }
                    }
                    Some(_) | None => {
                        return Ok(Grants::Failed(format!(
                            "`{bus_node}`, holding the bus, has not reported the bus's new users in place"
                        )))
                    }
                }
            }
            Some(_) | None => {
                return Ok(Grants::Failed(format!(
                    "the bus's users changed and `{bus_node}`, holding the bus, was not sent them"
                )))
            }
        }
        let previous = match confirmed(home)? {
            Some(confirmed) => confirmed_text(&confirmed, self.store.as_ref()).await,
            None => None,
        };
        if let Err(error) = confirm_users(
            home,
            &self.args,
            &self.controller,
            inventory,
            &self.users,
            previous.as_deref(),
        )
        .await
        {
            return Ok(Grants::Failed(error.chain_line()));
        }
        record_confirmed(home, &self.users, &users_file.archive)?;
        Ok(Grants::Issued("the bus confirmed its new users".to_owned()))
    }

    /// Publishes a declaration on its node's subject, trying a bus that does not take it
    /// again for up to [`SEND_RETRY_LIMIT`]; a users archive it names is put in the store
    /// first.
    ///
    /// # Errors
    /// The store did not take the users archive; the bus did not store the declaration within
    /// the limit.
    async fn send(&mut self, declaration: &Outgoing) -> Result<()> {
        self.publish_users_of(declaration.declaration()).await?;
        publish_patiently(&self.bus, declaration).await
    }

    /// Overlapped: at most [`SEND_CONCURRENCY`] declarations in flight at once.
    async fn send_many(&mut self, declarations: &[&Outgoing]) -> Sent {
        use futures_util::StreamExt as _;
        for declaration in declarations {
            if let Err(error) = self.publish_users_of(declaration.declaration()).await {
                return Sent {
                    taken: Vec::new(),
                    failed: Some(error),
                };
            }
        }
        let bus = &self.bus;
        let sends: Vec<_> = declarations
            .iter()
            .enumerate()
            .map(|(index, declaration)| {
                Box::pin(async move { (index, publish_patiently(bus, declaration).await) })
            })
            .collect();
        let mut sends = futures_util::stream::iter(sends).buffer_unordered(SEND_CONCURRENCY);
        let mut sent = Sent {
            taken: Vec::with_capacity(declarations.len()),
            failed: None,
        };
        while let Some((index, published)) = sends.next().await {
            match published {
                Ok(()) => sent.taken.push(index),
                Err(error) => {
                    sent.failed.get_or_insert(error);
                }
            }
        }
        drop(sends);
        sent
    }

    /// The next report heard within `wait`.
    ///
    /// # Errors
    /// None: a reports consumer lost is made again (said in the log).
    async fn next_report(&mut self, wait: Duration) -> Result<Option<ReportHeard>> {
        self.next_report_of(wait, &|_| true).await
    }

    /// A report of a node not wanted is passed over by its subject, never parsed: at 100,000
    /// hosts their heartbeats alone are 3,333 reports a second.
    async fn next_report_of(
        &mut self,
        wait: Duration,
        wanted: &(dyn for<'n> Fn(&'n str) -> bool + Sync),
    ) -> Result<Option<ReportHeard>> {
        let until = tokio::time::Instant::now() + wait;
        let limit = self.home.report_limit();
        let mut passed_over = 0;
        while let Some(stored) = self.reports.next(until).await {
            let node = stored.subject.strip_prefix(&subjects::report(""));
            if node.is_some_and(|node| !wanted(node)) {
                passed_over += 1;
                if passed_over >= super::PASSED_OVER {
                    return Ok(None);
                }
                continue;
            }
            if let Some(heard) = heard_report(&stored.subject, &stored.payload, limit) {
                return Ok(Some(heard));
            }
        }
        Ok(None)
    }
}
