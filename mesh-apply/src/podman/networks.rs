//! Podman networks a module declares: made with the host's labels, left alone when the mesh did
//! not make them, removed when no longer declared (*the host never destroys what it did not
//! make*).

use super::{command_error, MADE_BY};
use super::{os, Podman, PodmanError, LABEL_HOST, LABEL_MADE_BY, LABEL_MODULE, LABEL_RESOURCE};
use serde::Deserialize;
use std::collections::BTreeMap;

/// What `podman network inspect` says of a network, as far as the host needs it.
#[derive(Deserialize)]
struct InspectedNetwork {
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
}

impl Podman {
    /// The labels of the network `name`, `None` when there is none.
    fn network_labels(&self, name: &str) -> Result<Option<BTreeMap<String, String>>, PodmanError> {
        let args = os(&["network", "inspect", "--format", "json", name]);
        let output = self.run(&args, &[])?;
        if !output.status.success() {
            if String::from_utf8_lossy(&output.stderr).contains("not found") {
                return Ok(None);
            }
            return Err(command_error(&args, &output));
        }
        let found: Vec<InspectedNetwork> =
            serde_json::from_slice(&output.stdout).map_err(|e| PodmanError::Answer {
                command: "network inspect".to_owned(),
                reason: e.to_string(),
            })?;
        Ok(found
            .into_iter()
            .next()
            .map(|network| network.labels.unwrap_or_default()))
    }

    /// Why the network with `labels` is not this host's for `resource` (any resource when
    /// `None`), if it is not.
    fn not_ours(
        &self,
        labels: &BTreeMap<String, String>,
        resource: Option<&str>,
    ) -> Option<String> {
        let label = |key: &str| labels.get(key).map(String::as_str).unwrap_or_default();
        if label(LABEL_MADE_BY) != MADE_BY {
            Some(format!(
                "the mesh did not make (no `{LABEL_MADE_BY}` label)"
            ))
        } else if label(LABEL_HOST) != self.host_label() {
            Some(format!(
                "the mesh of another host made (root `{}`)",
                label(LABEL_HOST)
            ))
        } else if resource.is_some_and(|r| label(LABEL_RESOURCE) != r) {
            Some(format!("the mesh made for `{}`", label(LABEL_RESOURCE)))
        } else {
            None
        }
    }

    /// [`crate::ContainerRuntime::ensure_network`] with a typed error.
    ///
    /// # Errors
    /// [`PodmanError::ForeignNetwork`] for a network of that name the mesh did not make (for
    /// this resource, on this host); podman's failures.
    pub fn ensure_network_made(
        &self,
        resource: &str,
        module: &str,
        name: &str,
    ) -> Result<Vec<String>, PodmanError> {
        if let Some(labels) = self.network_labels(name)? {
            return match self.not_ours(&labels, Some(resource)) {
                None => Ok(Vec::new()),
                Some(whose) => Err(PodmanError::ForeignNetwork {
                    name: name.to_owned(),
                    whose,
                }),
            };
        }
        let mut args = os(&["network", "create"]);
        for (key, value) in [
            (LABEL_MADE_BY, MADE_BY),
            (LABEL_HOST, &self.host_label()),
            (LABEL_MODULE, module),
            (LABEL_RESOURCE, resource),
        ] {
            args.push("--label".into());
            args.push(format!("{key}={value}").into());
        }
        args.push(name.into());
        self.run_ok(&args, &[])?;
        Ok(vec!["created".to_owned()])
    }

    /// [`crate::ContainerRuntime::network_made`] with a typed error.
    ///
    /// # Errors
    /// Podman's failures.
    pub fn network_made_for(&self, resource: &str, name: &str) -> Result<bool, PodmanError> {
        Ok(self
            .network_labels(name)?
            .is_some_and(|labels| self.not_ours(&labels, Some(resource)).is_none()))
    }

    /// [`crate::ContainerRuntime::remove_network`] with a typed error.
    ///
    /// # Errors
    /// Podman's failures (a container still joins it, say). A network the mesh did not make is
    /// left alone, and that is said, not an error.
    pub fn remove_network_made(&self, name: &str) -> Result<String, PodmanError> {
        let Some(labels) = self.network_labels(name)? else {
            return Ok(format!("network `{name}` the mesh made was already gone"));
        };
        if let Some(whose) = self.not_ours(&labels, None) {
            return Ok(format!("left network `{name}` alone: it is one {whose}"));
        }
        self.run_ok(&os(&["network", "rm", name]), &[])?;
        Ok(format!("removed network `{name}`, which the mesh made"))
    }
}
