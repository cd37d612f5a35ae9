//! Announcing a merge to the daemon (`mesh-controller serve`) instead of planning it here: what
//! `merge NAME --announce`, the webhooks ([`crate::hooks`]) and polling ([`crate::hooks::poll`])
//! do.
//!
//! Start at [`announce`] (a repository's commit announced on the bus, as
//! [`mesh_bus::jetstream::publish_merge`] stores it) and [`announce_head`] (the registered
//! branch's head, for a person or a git hook).
//!
//! # Invariants
//! - A merge is announced once per repository, branch and commit however often it is asked
//!   for (the rule “A merge heard twice makes one plan”): the events stream stores it once, and
//!   the daemon hears it once.
//! - Only the daemon plans what is announced: nothing here writes a plan, so two controllers
//!   never drive one plan.

use crate::bus::credentials::{connect, BusConfig};
use crate::catalogue::repos::{self, RepoRecord};
use crate::error::{bus_error, Error, Result};
use crate::home::Home;
use mesh_bus::NatsBus;

/// The durable consumer through which `mesh-controller serve` hears merges on `MESH_EVENTS`.
pub const MERGE_CONSUMER: &str = "controller";

/// A merge announced to the daemon.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Announced {
    /// The repository (its registered name).
    pub repository: String,
    /// Its registered branch.
    pub branch: String,
    /// The commit the branch points at.
    pub commit: String,
    /// Its sequence in the events stream (the first announcement's, for one announced again).
    pub sequence: u64,
    /// It had been announced already (within the stream's deduplication window): not stored
    /// again, and not planned again.
    pub already_announced: bool,
}

/// Announces `commit` of `repo`'s registered branch on `bus`.
///
/// # Guarantees
/// Returns once the events stream stored it, or said it had it already.
///
/// # Errors
/// [`Error::Bus`] when the stream did not acknowledge it.
pub(crate) async fn announce(bus: &NatsBus, repo: &RepoRecord, commit: &str) -> Result<Announced> {
    let published =
        mesh_bus::jetstream::publish_merge(&bus.jetstream(), &repo.name, &repo.branch, commit)
            .await
            .map_err(bus_error(|| {
                format!(
                    "announcing the merge of `{}` {} at {}",
                    repo.name,
                    repo.branch,
                    crate::catalogue::builds::short_commit(commit)
                )
            }))?;
    Ok(Announced {
        repository: repo.name.clone(),
        branch: repo.branch.clone(),
        commit: commit.to_owned(),
        sequence: published.sequence,
        already_announced: published.duplicate,
    })
}

/// `merge NAME --announce`: announces the head of repository `name`'s registered branch (read
/// after fetching it, for a repository kept as a clone of a remote) to the daemon on `bus_config`'s
/// bus.
///
/// # Errors
/// The repository is not registered or its branch cannot be read; the bus cannot be reached;
/// no daemon has ever heard merges on this bus (its consumer [`MERGE_CONSUMER`] is not there,
/// so nothing would hear the announcement: `mesh-controller serve` is named); the stream did
/// not acknowledge it.
pub async fn announce_head(home: &Home, bus_config: &BusConfig, name: &str) -> Result<Announced> {
    let repo = home.repos().get(name)?;
    let commit = {
        let repo = repo.clone();
        tokio::task::spawn_blocking(move || repos::head(&repo))
            .await
            .map_err(|source| Error::Internal {
                doing: "reading the branch's head".to_owned(),
                source: Some(Box::new(source)),
            })??
    };
    let bus = connect(home, bus_config).await?;
    let stream = bus
        .jetstream()
        .get_stream(mesh_bus::subjects::EVENTS_STREAM)
        .await;
    let heard = match stream {
        Ok(stream) => stream.consumer_info(MERGE_CONSUMER).await.is_ok(),
        Err(_) => false,
    };
    if !heard {
        return Err(Error::refused(format!(
            "no daemon hears merges on the bus at {}: start `mesh-controller serve` there \
             (merges announced before its first start are never heard); nothing was announced",
            bus_config.url
        )));
    }
    announce(&bus, &repo, &commit).await
}
