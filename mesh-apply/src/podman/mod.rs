//! [`Podman`]: the real [`ContainerRuntime`], driving the `podman` command line
//! (*the host touches only its own containers*).
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
//!   must be a real directory there, reached through no symbolic link (*no symbolic links to move
//!   data*), or the container is refused before podman is asked anything.
//! - Removing a container never removes a mount's data (bind mounts only; no volumes).
//! - Environment values never appear on podman's command line (they are passed through the
//!   environment of the `podman` process), and the spec label keeps only their digests.
//!
//! The runtime is in files of their own: `error` (what podman could not do), `run_spec` (how a
//! container runs, as its label keeps it, and the fields that changed), `lifecycle` (create,
//! replace, set aside, put back, remove: the [`ContainerRuntime`] seam), `judge` (whether a
//! container just started runs, and its log tail), `ports` (who holds a host port),
//! `networks` (the podman networks a module declares) and `job` (a job's container run to its
//! end).

mod error;
mod job;
mod judge;
mod lifecycle;
mod networks;
mod ports;
mod run_spec;

pub use error::PodmanError;
pub use run_spec::{run_args, RunFields, RunMount, RunSpec};

use crate::containers::DeclaredContainer;
use crate::paths::RootPaths;
use mesh_model::declaration::ContainerSpec;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
    /// How many times podman restarted it by its restart policy (it crashed).
    pub restart_count: u32,
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

    /// The seconds podman gives `spec`'s container after SIGTERM: its own stop timeout, or the
    /// host's.
    fn stop_timeout(&self, spec: &ContainerSpec) -> String {
        spec.stop_timeout
            .unwrap_or(self.config.stop_timeout_secs)
            .to_string()
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
                    restart_count: c.restart_count,
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
        ports_free(spec)?;
        let args = self.run_arguments(declared, sources);
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

    /// `podman run --detach` of the declared container, with its labels, mounts (at
    /// `sources`) and every field it declares; its environment's values are given to podman's
    /// own environment, never here.
    fn run_arguments(
        &self,
        declared: &DeclaredContainer<'_>,
        sources: &[PathBuf],
    ) -> Vec<OsString> {
        let spec = declared.spec;
        let run_spec = RunSpec::of(spec);
        let (spec_json, digest) = run_spec.label();
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
        args.extend(run_args(spec));
        args.push(spec.image.clone().into());
        args.extend(spec.command.iter().map(OsString::from));
        args
    }

    fn remove_container(&self, name: &str) -> Result<(), PodmanError> {
        self.remove_container_within(name, &self.config.stop_timeout_secs.to_string())
    }

    /// Removes a container, giving it `timeout` seconds after SIGTERM.
    ///
    /// A container under a restart policy can stop, or start again, between podman reading its
    /// state and signalling it: `rm --force` then fails with "container state improper" though
    /// nothing is wrong. The removal is asked again, up to [`REMOVE_TRIES`] times, while that is
    /// its answer; any other failure is returned at once.
    fn remove_container_within(&self, name: &str, timeout: &str) -> Result<(), PodmanError> {
        let args = os(&["container", "rm", "--force", "--time", timeout, name]);
        let mut tries = 1;
        loop {
            match self.run_ok(&args, &[]) {
                Err(PodmanError::Command { stderr, .. })
                    if tries < REMOVE_TRIES && lost_a_race_with_a_restart(&stderr) =>
                {
                    tries += 1;
                }
                done => return done.map(drop),
            }
        }
    }
}

/// How many times a removal is asked while it loses a race with a restart policy.
const REMOVE_TRIES: usize = 10;

/// Whether podman refused a forced removal only because the container's state changed under it
/// (a restart policy restarting or stopping it as podman signalled it).
fn lost_a_race_with_a_restart(stderr: &str) -> bool {
    stderr.contains("container state improper")
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Inspected {
    id: String,
    #[serde(default)]
    restart_count: u32,
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

/// Fails, naming the port and the program, when a host port `spec` publishes (or, on host
/// networking, listens on) is held by another program: podman would fail, or the container's
/// program would exit as if it had nothing to say.
fn ports_free(spec: &ContainerSpec) -> Result<(), PodmanError> {
    for port in &spec.ports {
        if let Some(holder) = ports::holder(port) {
            return Err(PodmanError::PortHeld {
                name: spec.name.clone(),
                port: port.host_side(),
                holder,
            });
        }
    }
    Ok(())
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
