//! A container's life under the mesh: made, replaced when its spec changed, started, restarted,
//! set aside and put back for a together group, and removed — each only when the mesh made it
//! for this resource on this host. The [`ContainerRuntime`] seam is implemented here.

use super::run_spec::replaced_fields;
use super::{os, ports_free, Podman, PodmanError};
use crate::containers::{ContainerRuntime, DeclaredContainer, JobRun, SetAside};
use crate::progress::pause_point;
use crate::state::ContainerWas;

impl Podman {
    /// Stops a container the mesh made (for a maintenance window).
    ///
    /// # Errors
    /// [`PodmanError::Foreign`] for a container the mesh did not make, [`PodmanError::Missing`]
    /// when there is none, and podman's failures.
    pub fn stop(&self, name: &str) -> Result<(), PodmanError> {
        self.ours(name, None)?.ok_or_else(|| PodmanError::Missing {
            name: name.to_owned(),
        })?;
        let timeout = self.config.stop_timeout_secs.to_string();
        self.run_ok(&os(&["container", "stop", "--time", &timeout, name]), &[])
            .map(drop)
    }

    /// Starts a container the mesh made (a no-op when it runs).
    ///
    /// # Errors
    /// As [`Podman::stop`].
    pub fn start(&self, name: &str) -> Result<(), PodmanError> {
        let status = self.ours(name, None)?.ok_or_else(|| PodmanError::Missing {
            name: name.to_owned(),
        })?;
        if status.running {
            return Ok(());
        }
        self.run_ok(&os(&["container", "start", name]), &[])
            .map(drop)
    }

    /// [`ContainerRuntime::apply`] with a typed error.
    ///
    /// # Errors
    /// [`PodmanError`]: a refused mount, a container it did not make, or podman's failure.
    pub fn apply_container(
        &self,
        declared: &DeclaredContainer<'_>,
        restart: bool,
    ) -> Result<Vec<String>, PodmanError> {
        let spec = declared.spec;
        let sources = self.mount_sources(spec)?;
        let Some(current) = self.ours(&spec.name, Some(declared.id))? else {
            self.create(declared, &sources)?;
            pause_point("created", declared.id);
            self.judge(spec, 0)?;
            return Ok(vec!["created".to_owned()]);
        };
        if let Some(changed) = replaced_fields(spec, &current) {
            self.remove_container_within(&spec.name, &self.stop_timeout(spec))?;
            self.create(declared, &sources)?;
            pause_point("created", declared.id);
            self.judge(spec, 0)?;
            return Ok(changed);
        }
        if !current.running {
            ports_free(spec)?;
            self.run_ok(&os(&["container", "start", &spec.name]), &[])?;
            self.judge(spec, current.restart_count)?;
            return Ok(vec!["started".to_owned()]);
        }
        if restart {
            let timeout = self.stop_timeout(spec);
            self.run_ok(
                &os(&["container", "restart", "--time", &timeout, &spec.name]),
                &[],
            )?;
            self.judge(spec, current.restart_count)?;
            return Ok(vec!["restarted".to_owned()]);
        }
        Ok(Vec::new())
    }

    /// [`ContainerRuntime::judge_again`] with a typed error: the container this host made for
    /// the resource, judged as one just started ([`Podman::judge`]), counting only the restarts
    /// its restart policy makes from now.
    ///
    /// # Errors
    /// [`PodmanError::Missing`] when there is none, [`PodmanError::Exited`],
    /// [`PodmanError::Unhealthy`], a container it did not make, podman's failures.
    pub fn judge_again_container(
        &self,
        declared: &DeclaredContainer<'_>,
    ) -> Result<(), PodmanError> {
        let spec = declared.spec;
        let current =
            self.ours(&spec.name, Some(declared.id))?
                .ok_or_else(|| PodmanError::Missing {
                    name: spec.name.clone(),
                })?;
        self.judge(spec, current.restart_count)
    }

    /// [`ContainerRuntime::runs_as_declared`] with a typed error: its mounts' sources are as
    /// an apply accepts them, and the container this host made for the resource runs with the
    /// declared spec.
    ///
    /// # Errors
    /// [`PodmanError`]: a container it did not make, or podman's failure.
    pub fn runs_as_declared_container(
        &self,
        declared: &DeclaredContainer<'_>,
    ) -> Result<bool, PodmanError> {
        let spec = declared.spec;
        if self.mount_sources(spec).is_err() {
            // The apply refuses it, naming why.
            return Ok(false);
        }
        Ok(self
            .ours(&spec.name, Some(declared.id))?
            .is_some_and(|current| current.running && replaced_fields(spec, &current).is_none()))
    }

    /// [`ContainerRuntime::set_aside`] with a typed error.
    ///
    /// # Errors
    /// [`PodmanError`]: a container it did not make, or podman's failure.
    pub fn set_aside_container(
        &self,
        declared: &DeclaredContainer<'_>,
    ) -> Result<Option<SetAside>, PodmanError> {
        let spec = declared.spec;
        let Some(current) = self.ours(&spec.name, Some(declared.id))? else {
            return Ok(None);
        };
        let Some(changed) = replaced_fields(spec, &current) else {
            return Ok(None);
        };
        let kept_as = kept_name(&spec.name);
        if self.ours(&kept_as, None)?.is_some() {
            self.remove_container(&kept_as)?;
        }
        let timeout = self.stop_timeout(spec);
        self.run_ok(
            &os(&["container", "stop", "--time", &timeout, &spec.name]),
            &[],
        )?;
        pause_point("stopped", declared.id);
        if let Err(error) = self.run_ok(&os(&["container", "rename", &spec.name, &kept_as]), &[]) {
            let _ = self.run_ok(&os(&["container", "start", &spec.name]), &[]);
            return Err(error);
        }
        pause_point("kept", declared.id);
        Ok(Some(SetAside { kept_as, changed }))
    }

    /// [`ContainerRuntime::before_commit`] with a typed error.
    ///
    /// # Errors
    /// [`PodmanError`]: a container it did not make, or podman's failure.
    pub fn before_commit_container(
        &self,
        declared: &DeclaredContainer<'_>,
    ) -> Result<ContainerWas, PodmanError> {
        let spec = declared.spec;
        let Some(current) = self.ours(&spec.name, Some(declared.id))? else {
            return Ok(ContainerWas::Absent);
        };
        Ok(if replaced_fields(spec, &current).is_some() {
            ContainerWas::Replaced {
                kept_as: kept_name(&spec.name),
                id: current.id,
                running: current.running,
            }
        } else if current.running {
            ContainerWas::Running
        } else {
            ContainerWas::Stopped
        })
    }

    /// [`ContainerRuntime::restore`] with a typed error.
    ///
    /// # Errors
    /// [`PodmanError`]: podman's failure.
    pub fn restore_container(
        &self,
        resource: &str,
        name: &str,
        was: &ContainerWas,
    ) -> Result<(), PodmanError> {
        // Only this host's container for this resource is ever changed under `name`.
        let ours_now = || match self.ours(name, Some(resource)) {
            Ok(found) => Ok(found),
            Err(
                PodmanError::Foreign { .. }
                | PodmanError::OtherHost { .. }
                | PodmanError::OtherResource { .. },
            ) => Ok(None),
            Err(e) => Err(e),
        };
        match was {
            ContainerWas::Absent => {
                if ours_now()?.is_some() {
                    self.remove_container(name)?;
                }
            }
            ContainerWas::Stopped => {
                if ours_now()?.is_some_and(|c| c.running) {
                    let timeout = self.config.stop_timeout_secs.to_string();
                    self.run_ok(&os(&["container", "stop", "--time", &timeout, name]), &[])?;
                }
            }
            ContainerWas::Running => {}
            ContainerWas::Replaced {
                kept_as,
                id,
                running,
            } => {
                let kept = self.inspect(kept_as)?.filter(|c| c.id == *id);
                if kept.is_some() {
                    // Set aside: its replacement (if made) goes, and it gets its name back.
                    if ours_now()?.is_some_and(|c| c.id != *id) {
                        self.remove_container(name)?;
                    }
                    self.run_ok(&os(&["container", "rename", kept_as, name]), &[])?;
                } else if self.inspect(name)?.is_none_or(|c| c.id != *id) {
                    // Neither under its name nor kept: it is gone (removed by hand); the next
                    // apply converges the container.
                    return Ok(());
                }
                // Under its name again (or never renamed): running if it ran.
                if *running && self.inspect(name)?.is_some_and(|c| !c.running) {
                    self.run_ok(&os(&["container", "start", name]), &[])?;
                }
            }
        }
        Ok(())
    }

    /// [`ContainerRuntime::let_go_leftover`] with a typed error.
    ///
    /// # Errors
    /// [`PodmanError`]: podman's failure.
    pub fn let_go_leftover_container(&self, name: &str) -> Result<Option<String>, PodmanError> {
        let kept_as = kept_name(name);
        match self.ours(&kept_as, None) {
            Ok(None) | Err(PodmanError::Foreign { .. } | PodmanError::OtherHost { .. }) => Ok(None),
            Err(e) => Err(e),
            Ok(Some(_)) => {
                self.remove_container(&kept_as)?;
                Ok(Some(format!(
                    "removed container `{kept_as}`, kept aside by a together group whose commit \
                     completed before the host stopped"
                )))
            }
        }
    }
    /// [`ContainerRuntime::remove`] with a typed error.
    ///
    /// # Errors
    /// Podman's failures. A container the mesh did not make is left alone, and that is said, not
    /// an error.
    pub fn remove_made(&self, name: &str) -> Result<String, PodmanError> {
        match self.ours(name, None) {
            Ok(None) => Ok(format!("container `{name}` the mesh made was already gone")),
            Err(PodmanError::Foreign { .. } | PodmanError::OtherHost { .. }) => Ok(format!(
                "left container `{name}` alone: it is no longer the container the mesh made"
            )),
            Err(e) => Err(e),
            Ok(Some(_)) => {
                self.remove_container(name)?;
                Ok(format!(
                    "removed container `{name}`, which the mesh made (its mounts' data is kept)"
                ))
            }
        }
    }
}

impl ContainerRuntime for Podman {
    fn check(&self, declared: &DeclaredContainer<'_>) -> Result<(), String> {
        self.mount_sources(declared.spec)
            .map_err(|e| e.to_string())?;
        self.ours(&declared.spec.name, Some(declared.id))
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn apply(
        &self,
        declared: &DeclaredContainer<'_>,
        restart: bool,
    ) -> Result<Vec<String>, String> {
        self.apply_container(declared, restart)
            .map_err(|e| e.to_string())
    }

    fn runs_as_declared(&self, declared: &DeclaredContainer<'_>) -> Result<bool, String> {
        self.runs_as_declared_container(declared)
            .map_err(|e| e.to_string())
    }

    fn made(&self, declared: &DeclaredContainer<'_>) -> Result<bool, String> {
        match self.ours(&declared.spec.name, Some(declared.id)) {
            Ok(found) => Ok(found.is_some()),
            Err(
                PodmanError::Foreign { .. }
                | PodmanError::OtherHost { .. }
                | PodmanError::OtherResource { .. },
            ) => Ok(false),
            Err(error) => Err(error.to_string()),
        }
    }

    fn judge_again(&self, declared: &DeclaredContainer<'_>) -> Result<(), String> {
        self.judge_again_container(declared)
            .map_err(|e| e.to_string())
    }

    fn remove(&self, name: &str) -> Result<String, String> {
        self.remove_made(name).map_err(|e| e.to_string())
    }

    fn run_job(
        &self,
        declared: &DeclaredContainer<'_>,
        timeout_secs: u64,
    ) -> Result<JobRun, String> {
        Podman::run_job(self, declared, timeout_secs).map_err(|e| e.to_string())
    }

    fn stop(&self, name: &str) -> Result<(), String> {
        Podman::stop(self, name).map_err(|e| e.to_string())
    }

    fn start(&self, name: &str) -> Result<(), String> {
        Podman::start(self, name).map_err(|e| e.to_string())
    }

    fn examine(&self, name: &str) -> Result<Option<String>, String> {
        match self.judge_now(name) {
            Ok(_) => Ok(None),
            Err(error @ (PodmanError::Exited { .. } | PodmanError::Missing { .. })) => {
                Ok(Some(error.to_string()))
            }
            Err(error) => Err(error.to_string()),
        }
    }

    fn set_aside(&self, declared: &DeclaredContainer<'_>) -> Result<Option<SetAside>, String> {
        self.set_aside_container(declared)
            .map_err(|e| e.to_string())
    }

    fn before_commit(&self, declared: &DeclaredContainer<'_>) -> Result<ContainerWas, String> {
        self.before_commit_container(declared)
            .map_err(|e| e.to_string())
    }

    fn restore(&self, resource: &str, name: &str, was: &ContainerWas) -> Result<(), String> {
        self.restore_container(resource, name, was)
            .map_err(|e| e.to_string())
    }

    fn let_go_leftover(&self, name: &str) -> Result<Option<String>, String> {
        self.let_go_leftover_container(name)
            .map_err(|e| e.to_string())
    }

    fn ensure_network(
        &self,
        resource: &str,
        module: &str,
        name: &str,
    ) -> Result<Vec<String>, String> {
        self.ensure_network_made(resource, module, name)
            .map_err(|e| e.to_string())
    }

    fn network_made(&self, resource: &str, name: &str) -> Result<bool, String> {
        self.network_made_for(resource, name)
            .map_err(|e| e.to_string())
    }

    fn remove_network(&self, name: &str) -> Result<String, String> {
        self.remove_network_made(name).map_err(|e| e.to_string())
    }

    fn let_go(&self, aside: &SetAside) -> Result<(), String> {
        self.remove_container(&aside.kept_as)
            .map_err(|e| e.to_string())
    }
}

/// The name a container replaced in a together group is kept under until the group is whole.
fn kept_name(name: &str) -> String {
    format!("{name}.mesh-old")
}
