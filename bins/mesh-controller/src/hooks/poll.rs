//! Polling: the daemon fetches each repository registered with `--poll SECS` every SECS and
//! announces a new head of its branch — Flux's and Argo CD's pull model, which needs no
//! inbound connection at all.
//!
//! Start at [`spawn`] (the daemon starts it once its merge consumer is there).
//!
//! # Invariants
//! - A head is announced only when it is neither the repository's last planned commit nor one
//!   this poller announced already; the daemon hears it once however often it is announced.
//! - A fetch that fails is a problem of the repository in `status` (the rule “Nothing fails
//!   silently”), cleared by its next fetch that succeeds; the poller goes on.
//! - The registered repositories are read again every turn: one added or removed while the
//!   daemon runs is polled or dropped without a restart.

use crate::bus::announce;
use crate::catalogue::repos::{self, RepoRecord};
use crate::home::Home;
use mesh_bus::NatsBus;
use mesh_store::problems::ProblemKind;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::time::Instant;

/// How often the poller looks for repositories due a fetch.
pub(crate) const TURN: Duration = Duration::from_secs(1);

/// What the poller remembers of a repository.
#[derive(Debug, Default)]
struct Polled {
    /// When it is next fetched.
    due: Option<Instant>,
    /// The last head announced.
    announced: Option<String>,
    /// Its last fetch failed (a problem is recorded).
    failing: bool,
}

/// The poller, aborted when dropped.
#[derive(Debug)]
pub(crate) struct Poller(tokio::task::JoinHandle<()>);

impl Drop for Poller {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts polling `home`'s repositories registered with `--poll`, announcing on `bus`.
pub(crate) fn spawn(home: Home, bus: NatsBus) -> Poller {
    Poller(tokio::spawn(run(home, bus)))
}

async fn run(home: Home, bus: NatsBus) {
    let mut polled: BTreeMap<String, Polled> = BTreeMap::new();
    loop {
        let read = {
            let home = home.clone();
            tokio::task::spawn_blocking(move || home.repos().all()).await
        };
        match read {
            Ok(Ok(repos)) => {
                let names: BTreeSet<String> = repos.iter().map(|r| r.name.clone()).collect();
                polled.retain(|name, _| names.contains(name));
                for repo in repos {
                    let Some(secs) = repo.remote.as_ref().and_then(|r| r.poll_secs) else {
                        continue;
                    };
                    let state = polled.entry(repo.name.clone()).or_default();
                    if state.due.is_some_and(|due| due > Instant::now()) {
                        continue;
                    }
                    state.due = Some(Instant::now() + Duration::from_secs(secs.max(1)));
                    poll(&home, &bus, repo, state).await;
                }
            }
            Ok(Err(error)) => tracing::error!(
                error = error.chain_line(),
                "polling: the registered repositories could not be read"
            ),
            Err(error) => tracing::error!(%error, "polling: reading the repositories failed"),
        }
        tokio::time::sleep(TURN).await;
    }
}

/// Fetches `repo` and announces its head when it is new.
async fn poll(home: &Home, bus: &NatsBus, repo: RepoRecord, state: &mut Polled) {
    let name = repo.name.clone();
    let fetched = {
        let repo = repo.clone();
        tokio::task::spawn_blocking(move || repos::head(&repo)).await
    };
    let head = match fetched {
        Ok(Ok(head)) => head,
        Ok(Err(error)) => {
            tracing::warn!(repository = %name, error = error.chain_line(), "polling: the fetch failed");
            let what = format!("polling `{name}`: the fetch failed: {error}");
            let causes = error.chain().skip(1).map(ToString::to_string).collect();
            let home = home.clone();
            let subject = name.clone();
            let recorded = tokio::task::spawn_blocking(move || {
                home.problems().record(
                    ProblemKind::Merge,
                    &subject,
                    &what,
                    causes,
                    mesh_store::clock::now(),
                )
            })
            .await;
            if !matches!(recorded, Ok(Ok(_))) {
                tracing::error!(repository = %name, "polling: the fetch's problem could not be recorded");
            }
            state.failing = true;
            return;
        }
        Err(error) => {
            tracing::error!(repository = %name, %error, "polling: the fetch panicked");
            return;
        }
    };
    if state.failing {
        let home = home.clone();
        let subject = name.clone();
        let cleared = tokio::task::spawn_blocking(move || {
            home.problems().clear(ProblemKind::Merge, &subject)
        })
        .await;
        state.failing = !matches!(cleared, Ok(Ok(_)));
    }
    if repo.last_planned.as_deref() == Some(head.as_str())
        || state.announced.as_deref() == Some(head.as_str())
    {
        return;
    }
    match announce::announce(bus, &repo, &head).await {
        Ok(announced) => {
            tracing::info!(repository = %name, commit = %head,
                already = announced.already_announced, "polling: a new head announced");
            state.announced = Some(head);
        }
        Err(error) => {
            tracing::warn!(repository = %name, error = error.chain_line(),
                "polling: a new head could not be announced; tried again at the next fetch");
        }
    }
}
