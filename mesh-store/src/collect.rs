//! Collection: deleting the blobs nothing holds, only once every kept archive is held
//! The rules “The sweep holds before it lets go” and “An archive is published with a manifest that
//! holds it”.
//!
//! Start with [`collect`]: it sweeps, and collects for real only when the sweep reports every
//! kept archive held ("N of N held") with nothing failed; otherwise it runs the collection dry
//! and says why. Each backend collects its own way, behind [`GarbageCollector`]:
//! - the OCI layout by its own mark-and-sweep from `index.json` ([`LayoutCollector`]);
//! - a registry by the registry's own `garbage-collect` ([`RegistryCollector`]), never with
//!   `--delete-untagged`, with the registry stopped for the run and started again after (its
//!   blob-descriptor cache would otherwise answer for swept blobs).
//!
//! # Controlling the registry process
//! The collector does not own the registry: it is given the registry's binary, its
//! configuration file (the same one the registry serves with, so `garbage-collect` sees the
//! same storage) and a [`RegistryProcess`] that stops and starts it. On the command line that
//! is two shell commands (`--registry-stop`, `--registry-start`, e.g. `systemctl stop
//! docker-registry`), see [`CommandProcess`]; in the tests, the test owns the process.
//!
//! # Guarantees
//! - A real collection runs only after a sweep under the same [`SweepLock`] found every kept
//!   archive held; no publish overlaps it.
//! - The registry is started again on every path once it was stopped, and the collection
//!   waits until it answers.
//! - After a real collection, every kept archive's blob is checked again; one that is gone is
//!   reported ([`CollectReport::lost`]).

pub use crate::garbage::GarbageReport;
use crate::keep::KeepSet;
use crate::layout::OciLayoutStore;
use crate::lock::SweepLock;
use crate::store::{ArchiveStore, StoreError};
use crate::sweep::{sweep, SweepReport};
use async_trait::async_trait;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// An error collecting.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Stopping, starting or running part of the registry failed.
    #[error("cannot {what}")]
    Process {
        /// What was being done ("stop the registry", "run docker-registry garbage-collect").
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The registry's `garbage-collect` ran and failed.
    #[error("{binary} garbage-collect {config} exited with {status}: {output}")]
    GarbageCollect {
        /// The binary.
        binary: PathBuf,
        /// The configuration file.
        config: PathBuf,
        /// Its exit status.
        status: String,
        /// What it printed.
        output: String,
    },
    /// The registry did not answer after it was started again.
    #[error("the registry at {url} did not answer within {seconds} s of being started again")]
    NotBack {
        /// Where it was asked.
        url: String,
        /// How long it was given.
        seconds: u64,
    },
}

/// One backend's way of deleting what nothing holds.
#[async_trait]
pub trait GarbageCollector: Send {
    /// What is collected, for messages.
    fn describe(&self) -> String;

    /// Deletes every blob no manifest holds; with `dry_run`, lists them only.
    ///
    /// # Errors
    /// [`CollectError`] naming what failed.
    async fn collect_garbage(&mut self, dry_run: bool) -> Result<GarbageReport, CollectError>;
}

/// Collects an OCI layout by mark-and-sweep from its `index.json`.
#[derive(Debug, Clone)]
pub struct LayoutCollector {
    /// The layout.
    pub layout: OciLayoutStore,
}

#[async_trait]
impl GarbageCollector for LayoutCollector {
    fn describe(&self) -> String {
        self.layout.name()
    }

    async fn collect_garbage(&mut self, dry_run: bool) -> Result<GarbageReport, CollectError> {
        Ok(self.layout.collect_garbage(dry_run)?)
    }
}

/// Stops and starts the registry process around a real collection.
#[async_trait]
pub trait RegistryProcess: Send {
    /// Stops the registry; returns once it no longer serves.
    ///
    /// # Errors
    /// The IO error of whatever stops it.
    async fn stop(&mut self) -> std::io::Result<()>;

    /// Starts the registry again (whether it answers yet is checked by the caller).
    ///
    /// # Errors
    /// The IO error of whatever starts it.
    async fn start(&mut self) -> std::io::Result<()>;
}

/// A [`RegistryProcess`] run by two shell commands (`sh -c`), e.g. `systemctl stop
/// docker-registry` and `systemctl start docker-registry`.
#[derive(Debug, Clone)]
pub struct CommandProcess {
    /// The command that stops the registry.
    pub stop: String,
    /// The command that starts it.
    pub start: String,
}

async fn run_shell(command: &str) -> std::io::Result<()> {
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .status()
        .await?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "`{command}` exited with {status}"
        )))
    }
}

#[async_trait]
impl RegistryProcess for CommandProcess {
    async fn stop(&mut self) -> std::io::Result<()> {
        run_shell(&self.stop).await
    }

    async fn start(&mut self) -> std::io::Result<()> {
        run_shell(&self.start).await
    }
}

/// Collects a registry with its own `garbage-collect` (distribution's mark-and-sweep from every
/// manifest revision), never `--delete-untagged`.
pub struct RegistryCollector {
    /// The registry binary (`/usr/bin/docker-registry`).
    pub binary: PathBuf,
    /// The configuration file the registry serves with.
    pub config: PathBuf,
    /// How to stop and start it.
    pub process: Box<dyn RegistryProcess + Sync>,
    /// Where it answers (`http://HOST:PORT`), to wait for it after starting it again.
    pub base_url: String,
    /// The CA file its certificate is signed by, over `https://` (`None`: the system's CAs).
    pub ca_file: Option<PathBuf>,
}

/// Whether `garbage-collect` failed only because the registry holds no repository yet
/// (distribution: `Path not found: /docker/registry/v2/repositories`).
fn nothing_stored_yet(output: &str) -> bool {
    output.contains("Path not found") && output.contains("/docker/registry/v2/repositories")
}

impl RegistryCollector {
    async fn run_garbage_collect(&self, dry_run: bool) -> Result<GarbageReport, CollectError> {
        let mut command = tokio::process::Command::new(&self.binary);
        command.arg("garbage-collect");
        if dry_run {
            command.arg("--dry-run");
        }
        command.arg(&self.config);
        let output = command
            .output()
            .await
            .map_err(|source| CollectError::Process {
                what: format!("run {} garbage-collect", self.binary.display()),
                source,
            })?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        if !output.status.success() && nothing_stored_yet(&text) {
            // A registry nothing was ever pushed to has no repositories directory, and its
            // garbage-collect fails saying so: there is nothing to collect.
            return Ok(GarbageReport {
                dry_run,
                deleted: Vec::new(),
                blobs_marked: 0,
                output: text,
            });
        }
        if !output.status.success() {
            return Err(CollectError::GarbageCollect {
                binary: self.binary.clone(),
                config: self.config.clone(),
                status: output.status.to_string(),
                output: text,
            });
        }
        let mut deleted = Vec::new();
        let mut blobs_marked = 0;
        for line in text.lines() {
            if let Some(rest) = line.split("blob eligible for deletion: ").nth(1) {
                let digest = rest.split_whitespace().next().unwrap_or_default();
                deleted.push(digest.trim_matches('"').to_owned());
            }
            if let Some(count) = line
                .split(" blobs marked")
                .next()
                .filter(|_| line.contains(" blobs marked"))
                .and_then(|head| head.split_whitespace().last())
                .and_then(|n| n.trim_matches('"').parse().ok())
            {
                blobs_marked = count;
            }
        }
        deleted.sort();
        deleted.dedup();
        Ok(GarbageReport {
            dry_run,
            deleted,
            blobs_marked,
            output: text,
        })
    }

    async fn wait_until_answering(&self) -> Result<(), CollectError> {
        let url = format!("{}/v2/", self.base_url);
        let mut client = reqwest::Client::builder();
        if let Some(path) = &self.ca_file {
            let certificates = std::fs::read(path)
                .map_err(std::io::Error::other)
                .and_then(|pem| {
                    reqwest::Certificate::from_pem_bundle(&pem).map_err(std::io::Error::other)
                })
                .map_err(|source| CollectError::Process {
                    what: format!("read the registry's CA file {}", path.display()),
                    source,
                })?;
            client = client.tls_certs_only(certificates);
        }
        let client = client.build().map_err(|e| CollectError::Process {
            what: "build an HTTP client".to_owned(),
            source: std::io::Error::other(e),
        })?;
        let seconds = 30;
        for _ in 0..seconds * 10 {
            if let Ok(response) = client.get(&url).send().await {
                if response.status().is_success() || response.status().as_u16() == 401 {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(CollectError::NotBack { url, seconds })
    }
}

#[async_trait]
impl GarbageCollector for RegistryCollector {
    fn describe(&self) -> String {
        format!(
            "{} garbage-collect {}",
            self.binary.display(),
            self.config.display()
        )
    }

    async fn collect_garbage(&mut self, dry_run: bool) -> Result<GarbageReport, CollectError> {
        if dry_run {
            // Reading only: the registry may keep serving.
            return self.run_garbage_collect(true).await;
        }
        self.process
            .stop()
            .await
            .map_err(|source| CollectError::Process {
                what: "stop the registry".to_owned(),
                source,
            })?;
        let collected = self.run_garbage_collect(false).await;
        // Started again on every path, then waited for.
        let started = self
            .process
            .start()
            .await
            .map_err(|source| CollectError::Process {
                what: "start the registry again".to_owned(),
                source,
            });
        let report = collected?;
        started?;
        self.wait_until_answering().await?;
        Ok(report)
    }
}

/// The answer of [`collect`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CollectReport {
    /// The sweep that ran first.
    pub sweep: SweepReport,
    /// Whether the collection was real (it deleted).
    pub collected_for_real: bool,
    /// Why it ran dry when a real one was asked for (`None` when real, or dry by request).
    pub refused: Option<String>,
    /// The collection itself.
    pub garbage: GarbageReport,
    /// Kept archives whose blob was gone after a real collection (always empty unless
    /// something outside the mesh deleted them).
    pub lost: Vec<String>,
}

/// Sweeps, then collects: for real only when `dry_run` is false and the sweep reports every
/// kept archive held and nothing failed; dry otherwise, saying why in
/// [`CollectReport::refused`].
///
/// # Guarantees
/// See the module docs. Nothing is deleted while any kept archive is unheld.
///
/// # Errors
/// [`CollectError`] when the collection itself fails (the sweep's failures are in its report
/// and make the collection run dry instead).
pub async fn collect(
    store: &dyn ArchiveStore,
    lock: &SweepLock,
    keep: &KeepSet,
    collector: &mut dyn GarbageCollector,
    dry_run: bool,
) -> Result<CollectReport, CollectError> {
    let swept = sweep(store, lock, keep, dry_run).await;
    let refused = if dry_run {
        None
    } else if !swept.failures.is_empty() {
        Some(format!(
            "the sweep failed ({} failure(s)), {}: nothing is deleted on a partial view",
            swept.failures.len(),
            swept.held_line()
        ))
    } else if !swept.all_held() {
        Some(format!(
            "{}: {} kept archive(s) missing; collection runs dry until every kept archive is held",
            swept.held_line(),
            swept.kept_count() - swept.held_count()
        ))
    } else {
        None
    };
    let real = !dry_run && refused.is_none();
    let garbage = collector.collect_garbage(!real).await?;
    let mut lost = Vec::new();
    if real {
        for kept in keep.archives.values() {
            if !store.has_blob(&kept.archive.digest).await? {
                lost.push(kept.archive.digest.clone());
            }
        }
    }
    Ok(CollectReport {
        sweep: swept,
        collected_for_real: real,
        refused,
        garbage,
        lost,
    })
}
