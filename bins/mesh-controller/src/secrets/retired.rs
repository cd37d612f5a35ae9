//! The mesh keys `secrets rotate` retired (the rule “A secret is readable only where it is
//! used”). A build keeps its module's secret files as they were sealed at its commit, to the
//! mesh key of then, and a send opens them to seal them again to each node's key: after a
//! rotation, a push of a module whose deployed build came before it (or a plan built before
//! it) still needs the old key. So the old key is not dropped but retired, kept beside the new
//! one as `secrets/retired/<age1…>.key` (0600); the controller opens with it
//! ([`crate::secrets::keyring`]) as long as it is kept.
//!
//! Start at [`sweep`]: it drops every retired key no build the mesh may still send needs —
//! the deployed build of each module, and each build of an open plan — and says what needs
//! the others. `secrets rotate` sweeps once done, and a drive sweeps after each module it
//! deploys: the merge of the rotation's commit deploys the files sealed to the new key, and
//! the first sweep after the last such build is deployed drops the old key.
//!
//! What it must never do: drop a key a build the mesh may send still needs.

use crate::catalogue::builds::short_commit;
use crate::error::{Context, Result};
use crate::home::Home;
use crate::secrets::{secrets_error, RETIRED_DIR};
use mesh_model::build::ArchiveRef;
use mesh_model::module::EntryKind;
use mesh_model::secret::SecretValue;
use mesh_secrets::Identity;
use mesh_store::store::ArchiveStore;
use serde::Serialize;

/// A retired key still kept, and the builds that need it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Kept {
    /// Its public half (`age1…`).
    pub key: String,
    /// Its file, relative to the home.
    pub file: String,
    /// The builds holding a secret file only it opens (`the deployed build of `vault` (cat
    /// at 1a2b3c4d5e6f)`, `plan-3's build of `vault` …`).
    pub needed_by: Vec<String>,
}

/// What a sweep found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Retirement {
    /// The retired keys kept.
    pub kept: Vec<Kept>,
    /// The retired keys dropped (their public halves).
    pub dropped: Vec<String>,
}

/// The file a retired key is kept in, relative to the home.
fn retired_file(identity: &Identity) -> String {
    format!("{RETIRED_DIR}/{}.key", identity.recipient())
}

/// Keeps `identity`, the mesh key a rotation replaces, as a retired key (0600); one kept
/// already is left as it is (a rotation run again).
///
/// # Errors
/// The file cannot be written.
pub(crate) fn retire(home: &Home, identity: &Identity) -> Result<()> {
    match identity.keep(&home.root().join(retired_file(identity))) {
        Err(mesh_secrets::SecretsError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::AlreadyExists =>
        {
            Ok(())
        }
        other => other.map_err(secrets_error("retiring the old mesh key".into())),
    }
}

/// A build the mesh may still send: what a person calls it, and its archive.
struct Sendable {
    label: String,
    module: String,
    archive: ArchiveRef,
}

/// Every build the mesh may still send: each module's deployed build, and each build of an
/// open plan.
fn sendable_builds(home: &Home) -> Result<Vec<Sendable>> {
    let mut builds: Vec<Sendable> = home
        .deployed()
        .all()?
        .into_iter()
        .map(|deployed| Sendable {
            label: format!(
                "the deployed build of `{}` ({} at {})",
                deployed.module,
                deployed.repository,
                short_commit(&deployed.commit)
            ),
            module: deployed.module,
            archive: deployed.archive,
        })
        .collect();
    for record in home.plans().all()? {
        if !record.plan.state.is_open() {
            continue;
        }
        for (module, work) in &record.work {
            if let Some(build) = &work.build {
                builds.push(Sendable {
                    label: format!(
                        "{}'s build of `{module}` ({} at {}), not yet deployed",
                        record.plan.id,
                        build.repository,
                        short_commit(&build.commit)
                    ),
                    module: module.clone(),
                    archive: build.archive.clone(),
                });
            }
        }
    }
    Ok(builds)
}

/// Drops every retired key that no build the mesh may still send needs; answers what it
/// dropped, and what needs each key it kept. Nothing is read when no key is retired.
///
/// A build needs a retired key when one of its files is a sealed secret that neither the
/// mesh key nor the next one of a rotation under way opens, and that key does.
///
/// # Errors
/// A key file that cannot be read or removed; a build that cannot be read from the store (no
/// key is dropped then).
pub(crate) async fn sweep(home: &Home, store: &dyn ArchiveStore) -> Result<Retirement> {
    let retired = crate::secrets::retired_keys(home)?;
    if retired.is_empty() {
        return Ok(Retirement::default());
    }
    let current = crate::secrets::sealing_key(home)?;
    let mesh = crate::secrets::mesh_key(home)?;
    let mut needed_by: Vec<Vec<String>> = vec![Vec::new(); retired.len()];
    for build in sendable_builds(home)? {
        let archive = store
            .fetch(&build.archive)
            .await
            .for_module(&build.module, || {
                format!("reading {} from {}", build.label, store.name())
            })?;
        let tree = mesh_store::archive::unpack_archive(&archive.bytes, Some(&build.archive))
            .for_module(&build.module, || format!("unpacking {}", build.label))?;
        for entry in tree.entries.values() {
            let EntryKind::File { bytes, .. } = entry else {
                continue;
            };
            let Ok(secret) = SecretValue::from_file(bytes) else {
                continue;
            };
            if current.open(&secret).is_ok() || mesh.open(&secret).is_ok() {
                continue;
            }
            if let Some(index) = retired
                .iter()
                .position(|(_, identity)| identity.open(&secret).is_ok())
            {
                if !needed_by[index].contains(&build.label) {
                    needed_by[index].push(build.label.clone());
                }
            }
        }
    }
    let mut answer = Retirement::default();
    for ((path, identity), needed_by) in retired.into_iter().zip(needed_by) {
        let key = identity.recipient().to_string();
        if needed_by.is_empty() {
            std::fs::remove_file(&path).map_err(crate::error::file_error(
                "dropping the retired mesh key",
                &path,
            ))?;
            answer.dropped.push(key);
        } else {
            answer.kept.push(Kept {
                key,
                file: retired_file(&identity),
                needed_by,
            });
        }
    }
    Ok(answer)
}

/// What a sweep found, as lines for a person (none when nothing is retired).
pub fn said(retirement: &Retirement) -> Vec<String> {
    let mut lines = Vec::new();
    for kept in &retirement.kept {
        lines.push(format!(
            "the retired mesh key {} is kept ({}): builds the mesh may still send hold secret \
             files sealed to it — {}; it is dropped by the first merge (or `plans resume`) \
             that leaves none deployed or planned: merge the rotation's commit",
            kept.key,
            kept.file,
            kept.needed_by.join("; ")
        ));
    }
    for key in &retirement.dropped {
        lines.push(format!(
            "the retired mesh key {key} is dropped: no build the mesh may still send needs it"
        ));
    }
    lines
}
