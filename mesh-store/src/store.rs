//! The store: one small trait over the two backends, how a store is named, and publishing.
//!
//! Start with [`ArchiveStore`] and [`publish`]. A store is named by a [`StoreSpec`]:
//! `oci:PATH` for an OCI image layout directory ([`crate::layout::OciLayoutStore`], the
//! embedded default) or `http://HOST:PORT[/REPOSITORY]` (`https://` too) for an OCI registry
//! ([`crate::registry::RegistryStore`]); [`crate::open::open_store`] opens either.
//!
//! # Naming in a registry
//! Every archive of the mesh lives in one repository, [`DEFAULT_REPOSITORY`] (`mesh/archives`)
//! unless the spec names another; its holding manifest is tagged
//! [`crate::manifest::holding_tag`] (`mesh-archive-<hex of the archive digest>`). One
//! repository makes the whole held set one tag listing, and the tag is a function of the
//! archive digest alone, as the manifest is.

use crate::archive::Archive;
use async_trait::async_trait;
use mesh_model::build::ArchiveRef;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// The repository archives live in when a registry spec names none.
pub const DEFAULT_REPOSITORY: &str = "mesh/archives";

/// An error talking to a store. Every variant names the store (as its spec) and what was
/// being done.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A store spec that is neither `oci:PATH` nor `http(s)://HOST:PORT[/REPOSITORY]`.
    #[error("`{spec}` is not a store: {reason} (use oci:PATH or http://HOST:PORT[/REPOSITORY])")]
    Spec {
        /// The spec given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A file of an OCI layout could not be read or written.
    #[error("store {store}: cannot {operation} {path}")]
    Io {
        /// The store.
        store: String,
        /// What was being done.
        operation: &'static str,
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An OCI layout's `index.json` or a manifest in it is not what the layout spec says.
    #[error("store {store}: {path} is not valid: {reason}")]
    Corrupt {
        /// The store.
        store: String,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A registry request that oci-client made failed.
    #[error("store {store}: {operation} {digest} failed")]
    Registry {
        /// The store.
        store: String,
        /// What was being done.
        operation: &'static str,
        /// The digest or tag it was about.
        digest: String,
        /// oci-client's error.
        #[source]
        source: Box<oci_client::errors::OciDistributionError>,
    },
    /// A registry request made directly (HEAD, DELETE) could not be sent or read.
    #[error("store {store}: {operation} {digest}: the registry did not answer")]
    Unreachable {
        /// The store.
        store: String,
        /// What was being done.
        operation: &'static str,
        /// The digest or tag it was about.
        digest: String,
        /// The transport's error.
        #[source]
        source: reqwest::Error,
    },
    /// A registry answered with a status this operation does not expect.
    #[error("store {store}: {operation} {digest}: the registry answered {status}")]
    Status {
        /// The store.
        store: String,
        /// What was being done.
        operation: &'static str,
        /// The digest or tag it was about.
        digest: String,
        /// The HTTP status.
        status: u16,
    },
    /// The registry answered 405 to a manifest DELETE: deletion is disabled.
    #[error(
        "store {store}: the registry does not allow deletion (405 deleting manifest {digest}); \
         set storage.delete.enabled: true in its configuration"
    )]
    DeletionDisabled {
        /// The store.
        store: String,
        /// The manifest digest.
        digest: String,
    },
    /// An archive asked for is not in the store.
    #[error("store {store}: archive {digest} is not there")]
    Missing {
        /// The store.
        store: String,
        /// The archive digest.
        digest: String,
    },
    /// The registry's TLS certificate is not signed by a CA this client trusts.
    #[error(
        "store {store}: {operation} {digest}: the registry's certificate is not trusted \
         ({trust}): {detail}"
    )]
    Untrusted {
        /// The store.
        store: String,
        /// What was being done.
        operation: &'static str,
        /// The digest or tag it was about.
        digest: String,
        /// What this client trusts: the CA file given, or the system's roots.
        trust: String,
        /// What the TLS library said.
        detail: String,
    },
    /// The registry refused the request's credentials (401 or 403), or wanted some and none
    /// were given.
    #[error("store {store}: {operation} {digest}: the registry refused it ({status}): {why}")]
    Refused {
        /// The store.
        store: String,
        /// What was being done.
        operation: &'static str,
        /// The digest or tag it was about.
        digest: String,
        /// The HTTP status.
        status: u16,
        /// Whether credentials were sent, and from which file (never what they are).
        why: String,
    },
    /// The CA file or the credentials file of a registry cannot be used.
    #[error("store {store}: {what} {path}: {reason}")]
    Access {
        /// The store.
        store: String,
        /// Which file: `CA file` or `credentials file`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong (never what the file holds).
        reason: String,
    },
    /// A secret file (the credentials) is readable by others, or unreadable.
    #[error("store {store}: {source}")]
    Secret {
        /// The store.
        store: String,
        /// Why.
        #[source]
        source: mesh_records::secret::SecretFileError,
    },
    /// Bytes read from the store are not the digest asked for.
    #[error("store {store}: blob {expected} read back as {actual}")]
    Digest {
        /// The store.
        store: String,
        /// The digest asked for.
        expected: String,
        /// The digest of what came back.
        actual: String,
    },
}

/// What [`ArchiveStore::release`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The holding manifest was removed.
    Removed,
    /// There was no holding manifest to remove.
    AlreadyGone,
}

/// Whether an archive is held, as [`ArchiveStore::holding`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// Its holding tag names exactly the manifest [`crate::manifest::holding_manifest`] makes.
    Held,
    /// No holding manifest, or a tag that names something else.
    Unheld,
}

/// The two backends' common ground: blobs, holding manifests, and letting go.
///
/// Implementations: [`crate::layout::OciLayoutStore`] and [`crate::registry::RegistryStore`].
/// Collection is not here: each backend collects its own way ([`crate::collect`]).
#[async_trait]
pub trait ArchiveStore: Send + Sync {
    /// The store's spec, for messages (`oci:/var/mesh/store`,
    /// `http://127.0.0.1:5000/mesh/archives`).
    fn name(&self) -> String;

    /// Puts an archive's bytes as a bare blob, held by nothing. Idempotent.
    ///
    /// # Errors
    /// [`StoreError`] naming the store and digest.
    async fn put_blob(&self, archive: &Archive) -> Result<(), StoreError>;

    /// Holds an archive whose blob is in the store: puts the empty config (where needed) and
    /// the holding manifest, tagged [`crate::manifest::holding_tag`]. Idempotent.
    ///
    /// # Errors
    /// [`StoreError`] naming the store and digest; a registry refuses a manifest whose blob it
    /// does not have.
    async fn hold(&self, archive: &ArchiveRef) -> Result<(), StoreError>;

    /// The digests of every archive that has a holding tag (one listing request on a
    /// registry). Tags that are not holding tags are ignored.
    ///
    /// # Errors
    /// [`StoreError`] when the listing cannot be read whole.
    async fn list_held(&self) -> Result<BTreeSet<String>, StoreError>;

    /// Whether an archive is held by exactly its holding manifest. One request on a registry.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot say.
    async fn holding(&self, archive: &ArchiveRef) -> Result<Holding, StoreError>;

    /// Whether the store has a blob.
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot say.
    async fn has_blob(&self, digest: &str) -> Result<bool, StoreError>;

    /// Lets go of an archive, named by its digest: removes the manifest its holding tag names
    /// (and so the tag). The blob stays until a collection. Two requests on a registry (the
    /// tag's manifest digest, then the DELETE).
    ///
    /// # Errors
    /// [`StoreError::DeletionDisabled`] from a registry that refuses deletion; [`StoreError`]
    /// naming the store and digest otherwise.
    async fn release(&self, archive_digest: &str) -> Result<Release, StoreError>;

    /// Reads an archive back, checking its digest.
    ///
    /// # Errors
    /// [`StoreError::Missing`] when it is not there, [`StoreError::Digest`] when the bytes are
    /// not what was asked for.
    async fn fetch(&self, archive: &ArchiveRef) -> Result<Archive, StoreError>;
}

/// How a store is named on a command line (`--store`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// `oci:PATH`: an OCI image layout directory.
    Layout(PathBuf),
    /// `http(s)://HOST:PORT[/REPOSITORY]`: an OCI registry.
    Registry {
        /// Whether to speak plain HTTP (`http://`) rather than HTTPS.
        plain_http: bool,
        /// `HOST:PORT`.
        registry: String,
        /// The repository archives live in.
        repository: String,
    },
}

impl std::str::FromStr for StoreSpec {
    type Err = StoreError;

    fn from_str(spec: &str) -> Result<StoreSpec, StoreError> {
        let fail = |reason: &str| StoreError::Spec {
            spec: spec.to_owned(),
            reason: reason.to_owned(),
        };
        if let Some(path) = spec.strip_prefix("oci:") {
            if path.is_empty() {
                return Err(fail("no path after oci:"));
            }
            return Ok(StoreSpec::Layout(PathBuf::from(path)));
        }
        let (plain_http, rest) = if let Some(rest) = spec.strip_prefix("http://") {
            (true, rest)
        } else if let Some(rest) = spec.strip_prefix("https://") {
            (false, rest)
        } else {
            return Err(fail("unknown scheme"));
        };
        let (registry, repository) = match rest.split_once('/') {
            Some((registry, repository)) => (registry, repository.trim_end_matches('/')),
            None => (rest, ""),
        };
        if registry.is_empty() {
            return Err(fail("no host"));
        }
        let repository = if repository.is_empty() {
            DEFAULT_REPOSITORY
        } else {
            repository
        };
        let valid_repository = repository.split('/').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
        });
        if !valid_repository {
            return Err(fail("a repository is lower-case path components"));
        }
        Ok(StoreSpec::Registry {
            plain_http,
            registry: registry.to_owned(),
            repository: repository.to_owned(),
        })
    }
}

impl StoreSpec {
    /// `http(s)://HOST:PORT` of a registry spec; `None` for a layout.
    pub fn registry_base_url(&self) -> Option<String> {
        match self {
            StoreSpec::Layout(_) => None,
            StoreSpec::Registry {
                plain_http,
                registry,
                ..
            } => {
                let scheme = if *plain_http { "http" } else { "https" };
                Some(format!("{scheme}://{registry}"))
            }
        }
    }
}

impl std::fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreSpec::Layout(path) => write!(f, "oci:{}", path.display()),
            StoreSpec::Registry {
                plain_http,
                registry,
                repository,
            } => {
                let scheme = if *plain_http { "http" } else { "https" };
                write!(f, "{scheme}://{registry}/{repository}")
            }
        }
    }
}

/// The store a mesh uses when none is named: the OCI layout `<home>/store/oci`.
pub fn default_store_spec(home: &std::path::Path) -> StoreSpec {
    StoreSpec::Layout(home.join("store").join("oci"))
}

/// How to reach a registry beyond its address: which CA signs its certificate, and who this
/// client is. The default trusts the system's CAs and sends no credentials.
///
/// Credentials are basic auth (distribution's `htpasswd`): the controller's (which push and
/// delete) and the hosts' (which only pull; distribution cannot make a credential read-only,
/// see the book's store page). They are given by file, never on a command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreAccess {
    /// A PEM file of the CA certificate(s) the registry's certificate must be signed by; when
    /// given, only these are trusted (not the system's).
    pub ca_file: Option<PathBuf>,
    /// A file holding `USER:PASSWORD` on one line, readable by its owner only (`0600`; `0640`
    /// is accepted). Refused when others may read it.
    pub credentials_file: Option<PathBuf>,
}

/// A user and password for a registry, read from a [`StoreAccess::credentials_file`]. Its
/// `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct RegistryCredentials {
    /// The user.
    pub user: String,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for RegistryCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryCredentials")
            .field("user", &self.user)
            .field("password", &"<hidden>")
            .finish()
    }
}

impl RegistryCredentials {
    /// Reads `USER:PASSWORD` from a secret file (see [`mesh_records::secret::read_secret`]).
    ///
    /// # Errors
    /// [`StoreError::Secret`] when others may read it or it cannot be read;
    /// [`StoreError::Access`] when it is not `USER:PASSWORD` (the message never holds what
    /// the file holds).
    pub fn read(store: &str, path: &std::path::Path) -> Result<RegistryCredentials, StoreError> {
        let text =
            mesh_records::secret::read_secret(path).map_err(|source| StoreError::Secret {
                store: store.to_owned(),
                source,
            })?;
        match text.split_once(':') {
            Some((user, password))
                if !user.is_empty() && !password.is_empty() && !text.contains('\n') =>
            {
                Ok(RegistryCredentials {
                    user: user.to_owned(),
                    password: password.to_owned(),
                })
            }
            _ => Err(StoreError::Access {
                store: store.to_owned(),
                what: "credentials file",
                path: path.to_owned(),
                reason: "it must hold one line USER:PASSWORD, both non-empty".to_owned(),
            }),
        }
    }
}

/// What a publish put in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The archive.
    pub archive: ArchiveRef,
    /// The digest of its holding manifest.
    pub manifest_digest: String,
    /// The tag naming the holding manifest.
    pub tag: String,
}

/// Publishes an archive held by its manifest (the rule “An archive is published with a manifest
/// that holds it”): the blob, then the holding manifest. Take the [`crate::lock::PublishLock`]
/// first, and record the build (see [`crate::records::record_build`]) before dropping it.
///
/// # Guarantees
/// Idempotent: publishing the same archive again changes nothing. When it returns `Ok`, the
/// archive is held.
///
/// # Errors
/// [`StoreError`] naming the store and digest; a failed publish may leave a bare blob, which
/// the next collection removes unless a record keeps it (then the sweep holds it).
pub async fn publish(
    store: &dyn ArchiveStore,
    _lock: &crate::lock::PublishLock,
    archive: &Archive,
) -> Result<Published, StoreError> {
    store.put_blob(archive).await?;
    store.hold(&archive.reference).await?;
    Ok(Published {
        archive: archive.reference.clone(),
        manifest_digest: crate::manifest::holding_manifest_digest(&archive.reference),
        tag: crate::manifest::holding_tag(&archive.reference.digest),
    })
}

/// How many archives [`publish_all`] keeps in flight by default.
pub const PUBLISH_CONCURRENCY: usize = 4;

/// Publishes many archives (a tier's builds, say), up to `concurrency` at a time, each exactly
/// as [`publish`] does. The answers are in the order of `archives`.
///
/// # Guarantees
/// As [`publish`], for each archive: one that answers `Ok` is held. A failure of one does not
/// stop the others.
pub async fn publish_all(
    store: &dyn ArchiveStore,
    lock: &crate::lock::PublishLock,
    archives: &[Archive],
    concurrency: usize,
) -> Vec<Result<Published, StoreError>> {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::Poll;

    type InFlight<'a> =
        Pin<Box<dyn Future<Output = (usize, Result<Published, StoreError>)> + Send + 'a>>;
    let mut answers: Vec<Option<Result<Published, StoreError>>> =
        archives.iter().map(|_| None).collect();
    let mut next = 0;
    let mut in_flight: Vec<InFlight<'_>> = Vec::new();
    loop {
        while in_flight.len() < concurrency.max(1) && next < archives.len() {
            let index = next;
            let archive = &archives[index];
            in_flight.push(Box::pin(async move {
                (index, publish(store, lock, archive).await)
            }));
            next += 1;
        }
        if in_flight.is_empty() {
            break;
        }
        let done = std::future::poll_fn(|cx| {
            let mut finished = Vec::new();
            let mut position = 0;
            while position < in_flight.len() {
                match in_flight[position].as_mut().poll(cx) {
                    Poll::Ready(answer) => {
                        finished.push(answer);
                        drop(in_flight.swap_remove(position));
                    }
                    Poll::Pending => position += 1,
                }
            }
            if finished.is_empty() {
                Poll::Pending
            } else {
                Poll::Ready(finished)
            }
        })
        .await;
        for (index, answer) in done {
            answers[index] = Some(answer);
        }
    }
    answers
        .into_iter()
        .map(|a| a.expect("every archive was published"))
        .collect()
}
