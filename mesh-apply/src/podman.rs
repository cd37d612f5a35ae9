//! [`Podman`]: the real [`ContainerRuntime`], driving the `podman` command line (rule 8).
//!
//! Start with [`Podman::apply`]'s contract (through the trait), then the labels below.
//!
//! Every container it makes carries these labels:
//!
//! | label | value |
//! |---|---|
//! | [`LABEL_MADE_BY`] | `mesh-host`: the mesh made it |
//! | [`LABEL_HOST`] | the root prefix of the host that made it (`/` on a real machine) |
//! | [`LABEL_MODULE`] | the module that declares it |
//! | [`LABEL_RESOURCE`] | its resource id (`<module>/container/<name>`) |
//! | [`LABEL_SPEC`] | how it runs, as [`RunSpec`] JSON (versioned), to name changed fields |
//! | [`LABEL_SPEC_DIGEST`] | the sha256 of that JSON: equal means nothing that runs changed |
//!
//! # Invariants
//! - It never touches a container without [`LABEL_MADE_BY`], nor one labelled for another
//!   resource or another host (root prefix — several sandboxed hosts share one podman in the
//!   embedded mode and in tests): a same-name container it did not make is a conflict, reported,
//!   never removed.
//! - A mount's source is a machine path applied under the root prefix exactly as files are; it
//!   must be a real directory there, reached through no symbolic link (rule 3), or the container
//!   is refused before podman is asked anything.
//! - Removing a container never removes a mount's data (bind mounts only; no volumes).
//! - Environment values never appear on podman's command line (they are passed through the
//!   environment of the `podman` process), and the spec label keeps only their digests.

use crate::containers::{ContainerRuntime, DeclaredContainer, SetAside};
use crate::paths::RootPaths;
use crate::progress::pause_point;
use crate::state::ContainerWas;
use mesh_model::declaration::ContainerSpec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Label: the mesh made this container (value `mesh-host`).
pub const LABEL_MADE_BY: &str = "io.mesh.made-by";
/// Label: the root prefix of the host that made the container.
pub const LABEL_HOST: &str = "io.mesh.host";
/// Label: the module that declares the container.
pub const LABEL_MODULE: &str = "io.mesh.module";
/// Label: the container's resource id.
pub const LABEL_RESOURCE: &str = "io.mesh.resource";
/// Label: the container's [`RunSpec`] as JSON.
pub const LABEL_SPEC: &str = "io.mesh.spec";
/// Label: the sha256 (`sha256:<hex>`) of [`LABEL_SPEC`]'s value.
pub const LABEL_SPEC_DIGEST: &str = "io.mesh.spec-digest";
/// The value of [`LABEL_MADE_BY`].
pub const MADE_BY: &str = "mesh-host";

/// The version of [`RunSpec`] this build writes and reads.
pub const RUN_SPEC_FORMAT: u32 = 1;

/// How to run podman on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodmanConfig {
    /// The `podman` program (looked up on `PATH` when it has no slash).
    pub program: PathBuf,
    /// Arguments before every subcommand (e.g. `--root DIR`, `--storage-driver vfs`).
    pub global_args: Vec<String>,
    /// Extra arguments to `podman run` (e.g. `--ulimit nofile=N:N --ulimit nproc=N:N`, which
    /// podman needs on machines whose defaults exceed the hard limits).
    pub run_args: Vec<String>,
    /// Seconds podman waits after SIGTERM before it kills a container it stops, restarts or
    /// removes.
    pub stop_timeout_secs: u32,
}

impl Default for PodmanConfig {
    /// `podman` from `PATH`, no extra arguments, a stop timeout of 10 seconds.
    fn default() -> Self {
        PodmanConfig {
            program: PathBuf::from("podman"),
            global_args: Vec::new(),
            run_args: Vec::new(),
            stop_timeout_secs: 10,
        }
    }
}

impl PodmanConfig {
    /// The default, with `run_args` taken from the environment variable
    /// [`PodmanConfig::RUN_ARGS_VAR`] (split on whitespace) when it is set — what
    /// `scripts/podman-env.sh` exports on machines that need explicit ulimits.
    pub fn from_environment() -> Self {
        PodmanConfig {
            run_args: std::env::var(Self::RUN_ARGS_VAR)
                .map(|v| v.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default(),
            ..PodmanConfig::default()
        }
    }

    /// The environment variable [`PodmanConfig::from_environment`] reads `run_args` from.
    pub const RUN_ARGS_VAR: &'static str = "MESH_PODMAN_ULIMITS";
}

/// Why podman could not do what was asked. Its display is the sentence a report carries.
#[derive(Debug, thiserror::Error)]
pub enum PodmanError {
    /// The `podman` program is not there.
    #[error("podman is not installed")]
    NotInstalled,
    /// The `podman` program could not be started.
    #[error("cannot run `{}`: {source}", program.display())]
    Spawn {
        /// The program.
        program: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A podman command failed.
    #[error("`podman {command}` failed ({status}): {stderr}")]
    Command {
        /// The subcommand and its leading arguments.
        command: String,
        /// How it exited.
        status: String,
        /// What it said.
        stderr: String,
    },
    /// Podman's answer could not be read.
    #[error("cannot read what `podman {command}` answered: {reason}")]
    Answer {
        /// The subcommand.
        command: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A container of that name exists that the mesh did not make.
    #[error(
        "a container named `{name}` exists that the mesh did not make (no `{LABEL_MADE_BY}` \
         label); it is left alone"
    )]
    Foreign {
        /// The container's name.
        name: String,
    },
    /// A container of that name exists that the mesh made for another resource.
    #[error("the container named `{name}` was made by the mesh for `{owner}`; it is left alone")]
    OtherResource {
        /// The container's name.
        name: String,
        /// The resource its label names.
        owner: String,
    },
    /// A container of that name exists that the mesh of another host (root prefix) made.
    #[error(
        "the container named `{name}` was made by the mesh of another host (root `{host}`); it \
         is left alone"
    )]
    OtherHost {
        /// The container's name.
        name: String,
        /// The root prefix its label names.
        host: String,
    },
    /// A mount cannot be used.
    #[error("mount at `{at}`: {reason}")]
    Mount {
        /// The path inside the container.
        at: String,
        /// Why.
        reason: String,
    },
    /// No container of that name exists.
    #[error("there is no container named `{name}`")]
    Missing {
        /// The container's name.
        name: String,
    },
    /// The container is not running after its settle time (rule 29).
    #[error("exited with code {code} ({status}); the last lines of its log: {log}")]
    Exited {
        /// The container's name.
        name: String,
        /// Its exit code.
        code: i32,
        /// Podman's word for its state (`exited`, `restarting`, …).
        status: String,
        /// The last lines of its log, joined with ` | ` (`(empty)` when it wrote nothing).
        log: String,
    },
    /// Its health command did not pass within its deadline (rule 29).
    #[error(
        "its health command `{command}` did not pass within {within_ms} ms; it last said: \
         {output}"
    )]
    Unhealthy {
        /// The container's name.
        name: String,
        /// The command, joined with spaces.
        command: String,
        /// The deadline.
        within_ms: u64,
        /// The end of what the last attempt printed, and how it exited.
        output: String,
    },
}

/// How many of a dead container's last log lines a report carries.
pub const LOG_TAIL_LINES: usize = 10;

/// How a container runs, as kept in its [`LABEL_SPEC`] label (version [`RUN_SPEC_FORMAT`]):
/// every field whose change makes the mesh recreate the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RunSpec {
    /// The format version.
    pub format: u32,
    /// The image reference.
    pub image: String,
    /// Command and arguments (empty: the image's).
    pub command: Vec<String>,
    /// Per environment variable, the sha256 of its value (values are not kept in labels).
    pub env: BTreeMap<String, String>,
    /// The mounts, sorted by `at`.
    pub mounts: Vec<RunMount>,
}

/// One mount of a [`RunSpec`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RunMount {
    /// The host directory, as a machine path (before the root prefix).
    pub source: String,
    /// The path inside the container.
    pub at: String,
    /// Read-only.
    pub read_only: bool,
}

impl RunSpec {
    /// The run spec of a declared container.
    pub fn of(spec: &ContainerSpec) -> Self {
        let mut mounts: Vec<RunMount> = spec
            .mounts
            .iter()
            .map(|m| RunMount {
                source: m.source.clone(),
                at: m.at.clone(),
                read_only: m.read_only,
            })
            .collect();
        mounts.sort_by(|a, b| a.at.cmp(&b.at));
        RunSpec {
            format: RUN_SPEC_FORMAT,
            image: spec.image.clone(),
            command: spec.command.clone(),
            env: spec
                .env
                .iter()
                .map(|(k, v)| (k.clone(), mesh_model::sha256_digest(v.as_bytes())))
                .collect(),
            mounts,
        }
    }

    /// Its label value (JSON) and that value's digest.
    pub fn label(&self) -> (String, String) {
        let json = serde_json::to_string(self).expect("a run spec always serializes");
        let digest = mesh_model::sha256_digest(json.as_bytes());
        (json, digest)
    }

    /// The fields that differ from `old`, named as `mesh-controller plan --diff` names them:
    /// `image`, `command`, `env.<NAME>`, `mounts[<at>]` (added or removed),
    /// `mounts[<at>].source`, `mounts[<at>].read-only`.
    pub fn changed_fields(&self, old: &RunSpec) -> Vec<String> {
        let mut changed = Vec::new();
        if self.image != old.image {
            changed.push("image".to_owned());
        }
        if self.command != old.command {
            changed.push("command".to_owned());
        }
        let names: std::collections::BTreeSet<&String> =
            self.env.keys().chain(old.env.keys()).collect();
        for name in names {
            if self.env.get(name) != old.env.get(name) {
                changed.push(format!("env.{name}"));
            }
        }
        let new_mounts: BTreeMap<&str, &RunMount> =
            self.mounts.iter().map(|m| (m.at.as_str(), m)).collect();
        let old_mounts: BTreeMap<&str, &RunMount> =
            old.mounts.iter().map(|m| (m.at.as_str(), m)).collect();
        let ats: std::collections::BTreeSet<&str> = new_mounts
            .keys()
            .chain(old_mounts.keys())
            .copied()
            .collect();
        for at in ats {
            match (old_mounts.get(at), new_mounts.get(at)) {
                (Some(a), Some(b)) => {
                    if a.source != b.source {
                        changed.push(format!("mounts[{at}].source"));
                    }
                    if a.read_only != b.read_only {
                        changed.push(format!("mounts[{at}].read-only"));
                    }
                }
                _ => changed.push(format!("mounts[{at}]")),
            }
        }
        changed
    }
}

/// A container as podman shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerStatus {
    /// Podman's id for it (a recreated container has a new one).
    pub id: String,
    /// Its name.
    pub name: String,
    /// Whether it runs.
    pub running: bool,
    /// When it last started, as podman prints it (RFC 3339, nanoseconds).
    pub started_at: String,
    /// Podman's word for its state (`running`, `exited`, `created`, …).
    pub status: String,
    /// Whether podman is restarting it (it keeps exiting).
    pub restarting: bool,
    /// Its main process's exit code, when it has exited.
    pub exit_code: i32,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
}

impl ContainerStatus {
    /// Whether the mesh made it ([`LABEL_MADE_BY`]).
    pub fn made_by_mesh(&self) -> bool {
        self.labels.get(LABEL_MADE_BY).map(String::as_str) == Some(MADE_BY)
    }
}

/// The podman runtime: containers under the `podman` command line, mount sources under a root
/// prefix.
#[derive(Debug, Clone)]
pub struct Podman {
    config: PodmanConfig,
    root: PathBuf,
}

impl Podman {
    /// A runtime whose mount sources are machine paths under `root` (the host's root prefix).
    pub fn new(config: PodmanConfig, root: &Path) -> Self {
        Podman {
            config,
            root: root.to_path_buf(),
        }
    }

    /// The value of [`LABEL_HOST`] for containers this runtime makes.
    fn host_label(&self) -> String {
        self.root.display().to_string()
    }

    /// Runs `podman <global args> <args>` with `env` added to its environment.
    fn run(&self, args: &[OsString], env: &[(&str, &str)]) -> Result<Output, PodmanError> {
        let mut command = Command::new(&self.config.program);
        command.args(&self.config.global_args).args(args);
        for (key, value) in env {
            command.env(key, value);
        }
        command.stdin(std::process::Stdio::null());
        command.output().map_err(|source| {
            if source.kind() == io::ErrorKind::NotFound {
                PodmanError::NotInstalled
            } else {
                PodmanError::Spawn {
                    program: self.config.program.clone(),
                    source,
                }
            }
        })
    }

    /// As [`Podman::run`], failing unless podman exits 0.
    fn run_ok(&self, args: &[OsString], env: &[(&str, &str)]) -> Result<Output, PodmanError> {
        let output = self.run(args, env)?;
        if output.status.success() {
            Ok(output)
        } else {
            Err(command_error(args, &output))
        }
    }

    /// The container named `name`, if there is one.
    ///
    /// # Errors
    /// [`PodmanError`] when podman cannot be asked or its answer cannot be read.
    pub fn inspect(&self, name: &str) -> Result<Option<ContainerStatus>, PodmanError> {
        let args = os(&["container", "inspect", "--format", "json", name]);
        let output = self.run(&args, &[])?;
        let answer: Result<Vec<Inspected>, _> = serde_json::from_slice(&output.stdout);
        match answer {
            Ok(found) if found.is_empty() => {
                if output.status.success()
                    || String::from_utf8_lossy(&output.stderr).contains("no such")
                {
                    Ok(None)
                } else {
                    Err(command_error(&args, &output))
                }
            }
            Ok(mut found) => {
                let c = found.swap_remove(0);
                Ok(Some(ContainerStatus {
                    id: c.id,
                    name: c.name,
                    running: c.state.running,
                    started_at: c.state.started_at,
                    status: c.state.status,
                    restarting: c.state.restarting,
                    exit_code: c.state.exit_code,
                    labels: c.config.labels.unwrap_or_default(),
                }))
            }
            Err(_) if !output.status.success() => Err(command_error(&args, &output)),
            Err(e) => Err(PodmanError::Answer {
                command: "container inspect".to_owned(),
                reason: e.to_string(),
            }),
        }
    }

    /// The container named `name` if the mesh made it for `resource` (any resource when
    /// `None`); `None` when there is no such container.
    fn ours(
        &self,
        name: &str,
        resource: Option<&str>,
    ) -> Result<Option<ContainerStatus>, PodmanError> {
        let Some(status) = self.inspect(name)? else {
            return Ok(None);
        };
        if !status.made_by_mesh() {
            return Err(PodmanError::Foreign {
                name: name.to_owned(),
            });
        }
        let host = status.labels.get(LABEL_HOST).cloned().unwrap_or_default();
        if host != self.host_label() {
            return Err(PodmanError::OtherHost {
                name: name.to_owned(),
                host,
            });
        }
        if let Some(resource) = resource {
            let owner = status
                .labels
                .get(LABEL_RESOURCE)
                .cloned()
                .unwrap_or_default();
            if owner != resource {
                return Err(PodmanError::OtherResource {
                    name: name.to_owned(),
                    owner,
                });
            }
        }
        Ok(Some(status))
    }

    /// The mount sources under the root, each checked to be a real directory reached through no
    /// symbolic link.
    fn mount_sources(&self, spec: &ContainerSpec) -> Result<Vec<PathBuf>, PodmanError> {
        let mut paths = RootPaths::new(&self.root);
        spec.mounts
            .iter()
            .map(|mount| {
                let refuse = |reason: String| PodmanError::Mount {
                    at: mount.at.clone(),
                    reason,
                };
                if !mount.at.starts_with('/') {
                    return Err(refuse(format!(
                        "`{}` inside the container is not an absolute path",
                        mount.at
                    )));
                }
                for path in [&mount.source, &mount.at] {
                    if path.contains(',') {
                        return Err(refuse(format!("`{path}` holds a comma")));
                    }
                }
                let resolved = paths.resolve(&mount.source).map_err(refuse)?;
                match &resolved.meta {
                    Some(meta) if meta.is_dir() => Ok(resolved.full),
                    Some(_) => Err(refuse(format!(
                        "source `{}` is not a directory",
                        mount.source
                    ))),
                    None => Err(refuse(format!(
                        "source `{}` does not exist; a mount's source must be a real directory",
                        mount.source
                    ))),
                }
            })
            .collect()
    }

    /// Creates and starts the container.
    fn create(
        &self,
        declared: &DeclaredContainer<'_>,
        sources: &[PathBuf],
    ) -> Result<(), PodmanError> {
        let spec = declared.spec;
        let (spec_json, digest) = RunSpec::of(spec).label();
        let mut args = os(&["run", "--detach", "--name", &spec.name]);
        for (key, value) in [
            (LABEL_MADE_BY, MADE_BY),
            (LABEL_HOST, &self.host_label()),
            (LABEL_MODULE, declared.module),
            (LABEL_RESOURCE, declared.id),
            (LABEL_SPEC, &spec_json),
            (LABEL_SPEC_DIGEST, &digest),
        ] {
            args.push("--label".into());
            args.push(format!("{key}={value}").into());
        }
        args.extend(self.config.run_args.iter().map(OsString::from));
        for key in spec.env.keys() {
            // The value comes from podman's own environment: never on a command line.
            args.push("--env".into());
            args.push(key.into());
        }
        for (mount, source) in spec.mounts.iter().zip(sources) {
            let mut value = OsString::from("type=bind,source=");
            value.push(source);
            value.push(format!(",destination={}", mount.at));
            if mount.read_only {
                value.push(",readonly=true");
            }
            args.push("--mount".into());
            args.push(value);
        }
        args.push(spec.image.clone().into());
        args.extend(spec.command.iter().map(OsString::from));
        let env: Vec<(&str, &str)> = spec
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        match self.run_ok(&args, &env) {
            Ok(_) => Ok(()),
            Err(error) => {
                // A container made but not started would be found next time as ours and merely
                // started; remove it so the next apply creates it afresh.
                if let Ok(Some(_)) = self.ours(&spec.name, Some(declared.id)) {
                    let _ = self.remove_container(&spec.name);
                }
                Err(error)
            }
        }
    }

    fn remove_container(&self, name: &str) -> Result<(), PodmanError> {
        let timeout = self.config.stop_timeout_secs.to_string();
        self.run_ok(
            &os(&["container", "rm", "--force", "--time", &timeout, name]),
            &[],
        )
        .map(drop)
    }

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
            self.judge(spec)?;
            return Ok(vec!["created".to_owned()]);
        };
        if let Some(changed) = replaced_fields(spec, &current) {
            self.remove_container(&spec.name)?;
            self.create(declared, &sources)?;
            pause_point("created", declared.id);
            self.judge(spec)?;
            return Ok(changed);
        }
        if !current.running {
            self.run_ok(&os(&["container", "start", &spec.name]), &[])?;
            self.judge(spec)?;
            return Ok(vec!["started".to_owned()]);
        }
        if restart {
            let timeout = self.config.stop_timeout_secs.to_string();
            self.run_ok(
                &os(&["container", "restart", "--time", &timeout, &spec.name]),
                &[],
            )?;
            self.judge(spec)?;
            return Ok(vec!["restarted".to_owned()]);
        }
        Ok(Vec::new())
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
        let timeout = self.config.stop_timeout_secs.to_string();
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

    /// Judges a container just (re)started (rule 29): after its settle time it must be running
    /// (not exited, not being restarted), and its health command, if it declares one, must pass
    /// within its deadline.
    ///
    /// # Errors
    /// [`PodmanError::Exited`] with its exit code and log tail; [`PodmanError::Unhealthy`];
    /// podman's failures.
    pub fn judge(&self, spec: &ContainerSpec) -> Result<(), PodmanError> {
        std::thread::sleep(Duration::from_millis(spec.settle_ms()));
        self.judge_now(&spec.name)?;
        let Some(health) = &spec.health else {
            return Ok(());
        };
        let deadline = Instant::now() + Duration::from_millis(health.within_ms);
        let mut args = os(&["exec", &spec.name]);
        args.extend(health.command.iter().map(OsString::from));
        loop {
            let output = self.run(&args, &[])?;
            if output.status.success() {
                return Ok(());
            }
            // A container that died meanwhile is said as such, not as unhealthy.
            self.judge_now(&spec.name)?;
            if Instant::now() >= deadline {
                let said = format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                );
                return Err(PodmanError::Unhealthy {
                    name: spec.name.clone(),
                    command: health.command.join(" "),
                    within_ms: health.within_ms,
                    output: format!("{} ({})", tail(&said, 3), output.status),
                });
            }
            std::thread::sleep(HEALTH_RETRY);
        }
    }

    /// Whether the container runs now: [`PodmanError::Exited`] (with its exit code and log
    /// tail) when it does not.
    ///
    /// # Errors
    /// [`PodmanError::Exited`], [`PodmanError::Missing`], podman's failures.
    pub fn judge_now(&self, name: &str) -> Result<ContainerStatus, PodmanError> {
        let status = self.inspect(name)?.ok_or_else(|| PodmanError::Missing {
            name: name.to_owned(),
        })?;
        if status.running && !status.restarting {
            return Ok(status);
        }
        Err(PodmanError::Exited {
            name: name.to_owned(),
            code: status.exit_code,
            status: status.status,
            log: self.log_tail(name),
        })
    }

    /// The last [`LOG_TAIL_LINES`] lines of a container's log (stdout and stderr), joined with
    /// ` | `.
    pub fn log_tail(&self, name: &str) -> String {
        let lines = LOG_TAIL_LINES.to_string();
        match self.run(&os(&["logs", "--tail", &lines, name]), &[]) {
            Ok(output) => {
                let said = format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                );
                let tail = tail(&said, LOG_TAIL_LINES);
                if tail.is_empty() {
                    "(empty)".to_owned()
                } else {
                    tail
                }
            }
            Err(error) => format!("(cannot read it: {error})"),
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

    fn remove(&self, name: &str) -> Result<String, String> {
        self.remove_made(name).map_err(|e| e.to_string())
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

    fn let_go(&self, aside: &SetAside) -> Result<(), String> {
        self.remove_container(&aside.kept_as)
            .map_err(|e| e.to_string())
    }
}

/// The name a container replaced in a together group is kept under until the group is whole.
fn kept_name(name: &str) -> String {
    format!("{name}.mesh-old")
}

/// The fields in which the container `current` differs from `spec` — when it does, bringing it to
/// `spec` replaces it — or `None` when its spec is the declared one.
fn replaced_fields(spec: &ContainerSpec, current: &ContainerStatus) -> Option<Vec<String>> {
    let wanted = RunSpec::of(spec);
    let (_, digest) = wanted.label();
    if current.labels.get(LABEL_SPEC_DIGEST) == Some(&digest) {
        return None;
    }
    let changed = match current
        .labels
        .get(LABEL_SPEC)
        .and_then(|json| serde_json::from_str::<RunSpec>(json).ok())
        .filter(|old| old.format == RUN_SPEC_FORMAT)
    {
        Some(old) => wanted.changed_fields(&old),
        None => Vec::new(),
    };
    Some(if changed.is_empty() {
        // Its label is from another format: all we know is that it differs.
        vec!["spec".to_owned()]
    } else {
        changed
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Inspected {
    id: String,
    name: String,
    state: InspectedState,
    config: InspectedConfig,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct InspectedState {
    running: bool,
    #[serde(default)]
    started_at: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    restarting: bool,
    #[serde(default)]
    exit_code: i32,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct InspectedConfig {
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
}

/// The time between two tries of a health command.
const HEALTH_RETRY: Duration = Duration::from_millis(250);

/// The last `lines` non-empty lines of `text`, joined with ` | `.
fn tail(text: &str, lines: usize) -> String {
    let kept: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|line| !line.trim().is_empty())
        .collect();
    kept[kept.len().saturating_sub(lines)..].join(" | ")
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

fn command_error(args: &[OsString], output: &Output) -> PodmanError {
    let command: Vec<String> = args
        .iter()
        .take(2)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    PodmanError::Command {
        command: command.join(" "),
        status: output.status.to_string(),
        // Podman says what went wrong last (`Error: ...`), after any progress lines.
        stderr: String::from_utf8_lossy(&output.stderr)
            .lines()
            .rev()
            .find(|line| !line.trim().is_empty())
            .unwrap_or_default()
            .trim()
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_model::declaration::Mount;

    fn spec() -> ContainerSpec {
        ContainerSpec {
            name: "mesh-media-media".to_owned(),
            image: "localhost/busybox:1".to_owned(),
            command: vec!["sleep".to_owned(), "1000".to_owned()],
            env: [("A".to_owned(), "1".to_owned())].into(),
            mounts: vec![Mount {
                place: "media".to_owned(),
                source: "/srv/disk1/media".to_owned(),
                at: "/media".to_owned(),
                read_only: false,
            }],
            restart_on: vec!["media/file/conf".to_owned()],
            settle_ms: None,
            health: None,
        }
    }

    #[test]
    fn changed_fields_name_what_differs_and_nothing_else() {
        let old = spec();
        let mut new = spec();
        new.image = "localhost/busybox:2".to_owned();
        new.env.insert("A".to_owned(), "2".to_owned());
        new.env.insert("B".to_owned(), "x".to_owned());
        new.mounts[0].source = "/mnt/disk2/media".to_owned();
        new.mounts.push(Mount {
            place: "config".to_owned(),
            source: "/etc/media".to_owned(),
            at: "/config".to_owned(),
            read_only: true,
        });
        new.restart_on.clear();
        assert_eq!(
            RunSpec::of(&new).changed_fields(&RunSpec::of(&old)),
            [
                "image",
                "env.A",
                "env.B",
                "mounts[/config]",
                "mounts[/media].source"
            ]
        );
    }

    #[test]
    fn restart_on_and_place_names_do_not_change_the_digest() {
        let old = spec();
        let mut new = spec();
        new.restart_on.clear();
        new.mounts[0].place = "other".to_owned();
        assert_eq!(RunSpec::of(&new).label(), RunSpec::of(&old).label());
        assert!(
            !RunSpec::of(&old).label().0.contains("\"1\""),
            "env values are digested"
        );
    }
}
