//! An OCI registry as the store, through `oci-client` (Debian's `docker-registry`, CNCF
//! distribution 2.8, is what the tests run against).
//!
//! Pushes, blob checks, tag listing and blob reads go through `oci-client`; the manifest HEAD
//! that checks a holding and the manifest DELETE that releases one are sent directly with
//! reqwest (oci-client has no delete; its HEAD helper falls back to a GET on 404).
//!
//! # Guarantees
//! - Requests per call: [`ArchiveStore::holding`] 1, [`ArchiveStore::list_held`] 1 (distribution
//!   2.8 returns every tag at once), [`ArchiveStore::release`] 2, [`ArchiveStore::hold`] 1 once
//!   the empty config is known to be there (2–3 the first time in a process).
//! - A 405 to a DELETE is [`StoreError::DeletionDisabled`], never taken for success.
//! - An operation whose transport fails (not one the registry answered) is tried once more
//!   on a fresh connection; every operation is idempotent.
//! - Over `https://`, the registry's certificate is verified against the CA file of its
//!   [`StoreAccess`] when one is given (and only against it), the system's CAs otherwise; a
//!   certificate neither signed is [`StoreError::Untrusted`], never tried again, never
//!   accepted.
//! - Credentials ([`StoreAccess::credentials_file`]) go on every request as basic auth; a
//!   request the registry refuses for them is [`StoreError::Refused`]. No error or log line
//!   holds the password: messages name the credentials file.

use crate::archive::Archive;
use crate::manifest::{
    archive_digest_of_tag, holding_manifest, holding_manifest_digest, holding_tag, EMPTY_CONFIG,
    EMPTY_CONFIG_DIGEST, MANIFEST_MEDIA_TYPE,
};
use crate::store::{
    ArchiveStore, Holding, RegistryCredentials, Release, StoreAccess, StoreError, StoreSpec,
};
use async_trait::async_trait;
use mesh_model::build::ArchiveRef;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::Reference;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// An OCI registry repository holding the mesh's archives.
pub struct RegistryStore {
    client: oci_client::Client,
    http: reqwest::Client,
    base_url: String,
    registry: String,
    repository: String,
    spec: String,
    config_present: AtomicBool,
    auth: RegistryAuth,
    credentials: Option<RegistryCredentials>,
    /// For messages: what the registry's certificate is checked against.
    trust: String,
    /// For messages: where the credentials came from.
    credentials_from: Option<PathBuf>,
}

impl std::fmt::Debug for RegistryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryStore")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl RegistryStore {
    /// A store for a [`StoreSpec::Registry`], anonymous, trusting the system's CAs. Nothing is
    /// contacted yet.
    ///
    /// # Errors
    /// [`StoreError::Spec`] for a layout spec, or when the HTTP client cannot be built.
    pub fn new(spec: &StoreSpec) -> Result<RegistryStore, StoreError> {
        RegistryStore::with_access(spec, &StoreAccess::default())
    }

    /// A store for a [`StoreSpec::Registry`] reached with `access`: its CA file and
    /// credentials are read now. Nothing is contacted yet.
    ///
    /// # Errors
    /// [`StoreError::Spec`] for a layout spec, or when the HTTP client cannot be built;
    /// [`StoreError::Access`] when the CA file cannot be read or holds no certificate;
    /// [`StoreError::Secret`] or [`StoreError::Access`] for the credentials file (readable by
    /// others, not `USER:PASSWORD`).
    pub fn with_access(
        spec: &StoreSpec,
        access: &StoreAccess,
    ) -> Result<RegistryStore, StoreError> {
        let StoreSpec::Registry {
            plain_http,
            registry,
            repository,
        } = spec
        else {
            return Err(StoreError::Spec {
                spec: spec.to_string(),
                reason: "not a registry".to_owned(),
            });
        };
        let name = spec.to_string();
        let ca = access
            .ca_file
            .as_deref()
            .map(|path| read_ca_file(&name, path))
            .transpose()?;
        let credentials = access
            .credentials_file
            .as_deref()
            .map(|path| RegistryCredentials::read(&name, path))
            .transpose()?;
        let config = ClientConfig {
            protocol: if *plain_http {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            connect_timeout: Some(Duration::from_secs(5)),
            read_timeout: Some(Duration::from_secs(60)),
            tls_certs_only: ca
                .iter()
                .map(|pem| Certificate {
                    encoding: CertificateEncoding::Pem,
                    data: pem.clone(),
                })
                .collect(),
            ..ClientConfig::default()
        };
        let client_error = |e: &dyn std::fmt::Display| StoreError::Spec {
            spec: name.clone(),
            reason: format!("cannot build an HTTP client: {e}"),
        };
        let mut http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(60));
        if let Some(pem) = &ca {
            let certificates =
                reqwest::Certificate::from_pem_bundle(pem).map_err(|e| client_error(&e))?;
            http = http.tls_certs_only(certificates);
        }
        let http = http.build().map_err(|e| client_error(&e))?;
        let client = oci_client::Client::try_from(config).map_err(|e| client_error(&e))?;
        let auth = match &credentials {
            Some(c) => RegistryAuth::Basic(c.user.clone(), c.password.clone()),
            None => RegistryAuth::Anonymous,
        };
        let scheme = if *plain_http { "http" } else { "https" };
        Ok(RegistryStore {
            client,
            auth,
            credentials,
            trust: match &access.ca_file {
                Some(path) => format!("CA file {}", path.display()),
                None => "the system's CAs".to_owned(),
            },
            credentials_from: access.credentials_file.clone(),
            http,
            base_url: format!("{scheme}://{registry}"),
            registry: registry.clone(),
            repository: repository.clone(),
            spec: spec.to_string(),
            config_present: AtomicBool::new(false),
        })
    }

    /// The repository archives live in.
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// `http(s)://HOST:PORT`: where the registry answers.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    fn reference(&self, tag: &str) -> Reference {
        Reference::with_tag(
            self.registry.clone(),
            self.repository.clone(),
            tag.to_owned(),
        )
    }

    fn oci_error(
        &self,
        operation: &'static str,
        digest: &str,
        source: OciDistributionError,
    ) -> StoreError {
        if let Some(detail) = untrusted_certificate(&source) {
            return self.untrusted(operation, digest, detail);
        }
        if let Some(status) = refused_status(&source) {
            return self.refused(operation, digest, status);
        }
        StoreError::Registry {
            store: self.spec.clone(),
            operation,
            digest: digest.to_owned(),
            source: Box::new(source),
        }
    }

    fn unreachable(
        &self,
        operation: &'static str,
        digest: &str,
        source: reqwest::Error,
    ) -> StoreError {
        if let Some(detail) = untrusted_certificate(&source) {
            return self.untrusted(operation, digest, detail);
        }
        StoreError::Unreachable {
            store: self.spec.clone(),
            operation,
            digest: digest.to_owned(),
            source,
        }
    }

    fn untrusted(&self, operation: &'static str, digest: &str, detail: String) -> StoreError {
        StoreError::Untrusted {
            store: self.spec.clone(),
            operation,
            digest: digest.to_owned(),
            trust: self.trust.clone(),
            detail,
        }
    }

    fn refused(&self, operation: &'static str, digest: &str, status: u16) -> StoreError {
        StoreError::Refused {
            store: self.spec.clone(),
            operation,
            digest: digest.to_owned(),
            status,
            why: match &self.credentials_from {
                Some(path) => format!(
                    "the credentials of {} were not accepted for it",
                    path.display()
                ),
                None => "no credentials were given (a credentials file)".to_owned(),
            },
        }
    }

    /// The status of a direct request, a 401 or 403 taken as [`StoreError::Refused`].
    fn answered(
        &self,
        operation: &'static str,
        digest: &str,
        response: reqwest::Response,
    ) -> Result<reqwest::Response, StoreError> {
        match response.status().as_u16() {
            status @ (401 | 403) => Err(self.refused(operation, digest, status)),
            _ => Ok(response),
        }
    }

    /// A direct request with this store's credentials.
    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.credentials {
            Some(c) => request.basic_auth(&c.user, Some(&c.password)),
            None => request,
        }
    }

    /// Gives oci-client this store's credentials for the registry (once; it keeps them). An
    /// anonymous store gives none, so no request is spent asking the registry how to
    /// authenticate.
    async fn authenticate(&self) {
        if self.credentials.is_some() {
            self.client
                .store_auth_if_needed(&self.registry, &self.auth)
                .await;
        }
    }

    async fn ensure_empty_config(&self) -> Result<(), StoreError> {
        if self.config_present.load(Ordering::Acquire) {
            return Ok(());
        }
        self.authenticate().await;
        let reference = self.reference("config");
        let present = self
            .client
            .blob_exists(&reference, EMPTY_CONFIG_DIGEST)
            .await
            .map_err(|e| self.oci_error("check blob", EMPTY_CONFIG_DIGEST, e))?;
        if !present {
            self.client
                .push_blob(&reference, EMPTY_CONFIG, EMPTY_CONFIG_DIGEST)
                .await
                .map_err(|e| self.oci_error("push blob", EMPTY_CONFIG_DIGEST, e))?;
        }
        self.config_present.store(true, Ordering::Release);
        Ok(())
    }

    async fn push_holding_manifest(
        &self,
        archive: &ArchiveRef,
    ) -> Result<(), OciDistributionError> {
        let reference = self.reference(&holding_tag(&archive.digest));
        self.client
            .push_manifest_raw(
                &reference,
                holding_manifest(archive),
                reqwest::header::HeaderValue::from_static(MANIFEST_MEDIA_TYPE),
            )
            .await
            .map(|_| ())
    }
}

fn blob_unknown(error: &OciDistributionError) -> Option<String> {
    match error {
        OciDistributionError::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .find(|e| {
                matches!(
                    e.code,
                    OciErrorCode::BlobUnknown | OciErrorCode::ManifestBlobUnknown
                )
            })
            .map(|e| e.detail.to_string()),
        _ => None,
    }
}

/// The digest a registry names for the manifest it answered with.
fn content_digest(response: &reqwest::Response) -> Option<&str> {
    response
        .headers()
        .get("docker-content-digest")
        .and_then(|v| v.to_str().ok())
}

fn name_unknown(error: &OciDistributionError) -> bool {
    match error {
        OciDistributionError::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|e| matches!(e.code, OciErrorCode::NameUnknown)),
        _ => false,
    }
}

impl RegistryStore {
    async fn put_blob_once(&self, archive: &Archive) -> Result<(), StoreError> {
        self.authenticate().await;
        let digest = &archive.reference.digest;
        self.client
            .push_blob(&self.reference("archive"), archive.bytes.clone(), digest)
            .await
            .map_err(|e| self.oci_error("push blob", digest, e))?;
        Ok(())
    }

    async fn hold_once(&self, archive: &ArchiveRef) -> Result<(), StoreError> {
        let cached = self.config_present.load(Ordering::Acquire);
        self.ensure_empty_config().await?;
        match self.push_holding_manifest(archive).await {
            Ok(()) => Ok(()),
            Err(error) => match blob_unknown(&error) {
                // The config we took to be there was collected since: push it, try once more.
                Some(detail) if cached && detail.contains(EMPTY_CONFIG_DIGEST) => {
                    self.config_present.store(false, Ordering::Release);
                    self.ensure_empty_config().await?;
                    self.push_holding_manifest(archive)
                        .await
                        .map_err(|e| self.oci_error("push manifest for", &archive.digest, e))
                }
                Some(_) => Err(StoreError::Missing {
                    store: self.spec.clone(),
                    digest: archive.digest.clone(),
                }),
                None => Err(self.oci_error("push manifest for", &archive.digest, error)),
            },
        }
    }

    async fn list_held_once(&self) -> Result<BTreeSet<String>, StoreError> {
        match self
            .client
            .list_tags(&self.reference("list"), &self.auth, None, None)
            .await
        {
            Ok(response) => Ok(response
                .tags
                .iter()
                .filter_map(|tag| archive_digest_of_tag(tag))
                .collect()),
            Err(error) if name_unknown(&error) => Ok(BTreeSet::new()),
            Err(error) => Err(self.oci_error("list tags of", &self.repository, error)),
        }
    }

    /// Asks for the holding manifest of an archive by its tag (a HEAD): whether it is there and
    /// its digest. `operation` names the call when the registry cannot be reached.
    async fn head_holding_manifest(
        &self,
        operation: &'static str,
        archive_digest: &str,
    ) -> Result<reqwest::Response, StoreError> {
        let tag = holding_tag(archive_digest);
        let url = format!("{}/v2/{}/manifests/{tag}", self.base_url, self.repository);
        let response = self
            .authorized(self.http.head(&url))
            .header(reqwest::header::ACCEPT, MANIFEST_MEDIA_TYPE)
            .send()
            .await
            .map_err(|e| self.unreachable(operation, archive_digest, e))?;
        self.answered(operation, archive_digest, response)
    }

    async fn holding_once(&self, archive: &ArchiveRef) -> Result<Holding, StoreError> {
        let response = self
            .head_holding_manifest("check holding of", &archive.digest)
            .await?;
        match response.status().as_u16() {
            200 => {
                let expected = holding_manifest_digest(archive);
                Ok(if content_digest(&response) == Some(expected.as_str()) {
                    Holding::Held
                } else {
                    Holding::Unheld
                })
            }
            404 => Ok(Holding::Unheld),
            status => Err(StoreError::Status {
                store: self.spec.clone(),
                operation: "check holding of",
                digest: archive.digest.clone(),
                status,
            }),
        }
    }

    async fn has_blob_once(&self, digest: &str) -> Result<bool, StoreError> {
        self.authenticate().await;
        self.client
            .blob_exists(&self.reference("archive"), digest)
            .await
            .map_err(|e| self.oci_error("check blob", digest, e))
    }

    async fn release_once(&self, archive_digest: &str) -> Result<Release, StoreError> {
        let response = self
            .head_holding_manifest("find the holding manifest of", archive_digest)
            .await?;
        let manifest = match response.status().as_u16() {
            200 => content_digest(&response)
                .map(str::to_owned)
                .ok_or_else(|| StoreError::Status {
                    store: self.spec.clone(),
                    operation: "find the holding manifest (no digest header) of",
                    digest: archive_digest.to_owned(),
                    status: 200,
                })?,
            404 => return Ok(Release::AlreadyGone),
            status => {
                return Err(StoreError::Status {
                    store: self.spec.clone(),
                    operation: "find the holding manifest of",
                    digest: archive_digest.to_owned(),
                    status,
                })
            }
        };
        let url = format!(
            "{}/v2/{}/manifests/{manifest}",
            self.base_url, self.repository
        );
        let response = self
            .authorized(self.http.delete(&url))
            .send()
            .await
            .map_err(|e| self.unreachable("delete manifest", &manifest, e))?;
        let response = self.answered("delete manifest", &manifest, response)?;
        match response.status().as_u16() {
            200 | 202 => Ok(Release::Removed),
            404 => Ok(Release::AlreadyGone),
            405 => Err(StoreError::DeletionDisabled {
                store: self.spec.clone(),
                digest: manifest,
            }),
            status => Err(StoreError::Status {
                store: self.spec.clone(),
                operation: "delete manifest",
                digest: manifest,
                status,
            }),
        }
    }

    async fn fetch_once(&self, archive: &ArchiveRef) -> Result<Archive, StoreError> {
        if !self.has_blob_once(&archive.digest).await? {
            return Err(StoreError::Missing {
                store: self.spec.clone(),
                digest: archive.digest.clone(),
            });
        }
        self.authenticate().await;
        let mut bytes: Vec<u8> = Vec::with_capacity(archive.size as usize);
        self.client
            .pull_blob(
                &self.reference("archive"),
                archive.digest.as_str(),
                &mut bytes,
            )
            .await
            .map_err(|e| self.oci_error("pull blob", &archive.digest, e))?;
        let fetched = Archive::from_bytes(bytes);
        if fetched.reference.digest != archive.digest {
            return Err(StoreError::Digest {
                store: self.spec.clone(),
                expected: archive.digest.clone(),
                actual: fetched.reference.digest,
            });
        }
        Ok(fetched)
    }
}

/// Reads a CA file: PEM holding at least one certificate.
fn read_ca_file(store: &str, path: &std::path::Path) -> Result<Vec<u8>, StoreError> {
    let access = |reason: String| StoreError::Access {
        store: store.to_owned(),
        what: "CA file",
        path: path.to_owned(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| access(format!("cannot be read: {e}")))?;
    if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
        return Err(access("holds no PEM certificate".to_owned()));
    }
    Ok(pem)
}

/// What the TLS library said when an error (or one of its sources) is a certificate it could
/// not verify against the CAs it trusts.
fn untrusted_certificate(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(error);
    while let Some(error) = next {
        let text = error.to_string();
        let lower = text.to_ascii_lowercase();
        if lower.contains("certificate verify failed")
            || lower.contains("invalid peer certificate")
            || lower.contains("unknownissuer")
        {
            return Some(text);
        }
        next = error.source();
    }
    None
}

/// The status of an oci-client error that is the registry refusing the credentials (or
/// wanting some).
fn refused_status(error: &OciDistributionError) -> Option<u16> {
    match error {
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => Some(401),
        OciDistributionError::ServerError { code, .. } if matches!(code, 401 | 403) => Some(*code),
        OciDistributionError::RequestError(e) => e
            .status()
            .map(|status| status.as_u16())
            .filter(|status| matches!(status, 401 | 403)),
        OciDistributionError::RegistryError { envelope, .. } => {
            envelope.errors.iter().find_map(|e| match e.code {
                OciErrorCode::Unauthorized => Some(401),
                OciErrorCode::Denied => Some(403),
                _ => None,
            })
        }
        _ => None,
    }
}

/// Whether an error is the transport failing (a pooled connection to a registry that was
/// restarted since, say) rather than the registry answering.
fn transport_failed(error: &StoreError) -> bool {
    let request = match error {
        StoreError::Unreachable { source, .. } => Some(source),
        StoreError::Registry { source, .. } => match source.as_ref() {
            OciDistributionError::RequestError(e) => Some(e),
            _ => None,
        },
        _ => None,
    };
    request.is_some_and(|e| e.is_request() || e.is_connect())
}

/// Every operation here is idempotent; one whose transport failed is tried once more, on a
/// fresh connection (after a collection restarts the registry, pooled connections are dead).
macro_rules! once_more {
    ($call:expr) => {
        match $call.await {
            Err(error) if transport_failed(&error) => $call.await,
            answer => answer,
        }
    };
}

#[async_trait]
impl ArchiveStore for RegistryStore {
    fn name(&self) -> String {
        self.spec.clone()
    }

    async fn put_blob(&self, archive: &Archive) -> Result<(), StoreError> {
        once_more!(self.put_blob_once(archive))
    }

    async fn hold(&self, archive: &ArchiveRef) -> Result<(), StoreError> {
        once_more!(self.hold_once(archive))
    }

    async fn list_held(&self) -> Result<BTreeSet<String>, StoreError> {
        once_more!(self.list_held_once())
    }

    async fn holding(&self, archive: &ArchiveRef) -> Result<Holding, StoreError> {
        once_more!(self.holding_once(archive))
    }

    async fn has_blob(&self, digest: &str) -> Result<bool, StoreError> {
        once_more!(self.has_blob_once(digest))
    }

    async fn release(&self, archive_digest: &str) -> Result<Release, StoreError> {
        once_more!(self.release_once(archive_digest))
    }

    async fn fetch(&self, archive: &ArchiveRef) -> Result<Archive, StoreError> {
        once_more!(self.fetch_once(archive))
    }
}
