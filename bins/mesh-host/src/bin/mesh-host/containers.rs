//! The container runtime flags every `mesh-host` command shares, turned into the
//! [`ContainerRuntimeChoice`] of a [`mesh_apply::HostConfig`].

use clap::{Args, ValueEnum};
use mesh_apply::{ContainerRuntimeChoice, PodmanConfig};

/// How this host runs containers.
#[derive(Args, Debug, Clone)]
pub struct ContainerArgs {
    /// The container runtime: `podman` (the default; when podman is not installed each container
    /// is reported failed, saying so) or `none` (containers are reported not supported).
    #[arg(
        long,
        value_enum,
        default_value = "podman",
        env = "MESH_HOST_CONTAINERS",
        global = true
    )]
    pub containers: Runtime,
    /// Seconds podman gives a container after SIGTERM before it kills it, when the host stops,
    /// restarts or removes one.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 10,
        env = "MESH_PODMAN_STOP_TIMEOUT",
        global = true
    )]
    pub podman_stop_timeout: u32,
    /// Put before every declared container's name to make its name on this machine (letters,
    /// digits, `_`, `.`, `-`; empty: the declared name, `mesh-<module>-<container>`). Two hosts
    /// sharing one machine's podman each need their own, or they collide on names.
    #[arg(
        long,
        value_name = "PREFIX",
        default_value = "",
        env = "MESH_HOST_CONTAINER_PREFIX",
        value_parser = container_prefix,
        global = true
    )]
    pub container_prefix: String,
}

fn container_prefix(prefix: &str) -> Result<String, String> {
    if mesh_apply::is_container_prefix(prefix) {
        Ok(prefix.to_owned())
    } else {
        Err(format!(
            "`{prefix}` cannot start a container's name: a letter or digit, then letters, digits, \
             `_`, `.` or `-`"
        ))
    }
}

/// A container runtime by name.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Runtime {
    /// Podman, with the `podman run` arguments in `MESH_PODMAN_ULIMITS` when it is set.
    Podman,
    /// No containers.
    None,
}

impl ContainerArgs {
    /// The runtime these flags choose.
    pub fn choice(&self) -> ContainerRuntimeChoice {
        match self.containers {
            Runtime::Podman => ContainerRuntimeChoice::Podman(PodmanConfig {
                stop_timeout_secs: self.podman_stop_timeout,
                ..PodmanConfig::from_environment()
            }),
            Runtime::None => ContainerRuntimeChoice::Unsupported,
        }
    }
}
