//! Why podman could not do what was asked.

use super::LABEL_MADE_BY;
use std::io;
use std::path::PathBuf;

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
    /// A host port the container publishes (or listens on) is held by another program.
    #[error(
        "host port {port} is held by another program, {holder}; the container cannot serve it"
    )]
    PortHeld {
        /// The container's name.
        name: String,
        /// The host side of the port (`127.0.0.1:8080/tcp`).
        port: String,
        /// The program that holds it (`` `python3` (pid 812) ``).
        holder: String,
    },
    /// A network of that name exists that the mesh did not make for this resource.
    #[error("a network named `{name}` exists that {whose}; it is left alone")]
    ForeignNetwork {
        /// The network's name.
        name: String,
        /// Whose it is (`the mesh did not make (…)`).
        whose: String,
    },
    /// No container of that name exists.
    #[error("there is no container named `{name}`")]
    Missing {
        /// The container's name.
        name: String,
    },
    /// The container is not running after its settle time (*a container is applied only
    /// when it runs*).
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
    /// Its restart policy restarted it (it crashed), and it ran again each time it was looked
    /// at, so its exit code was not seen: podman clears it when it starts the container again.
    #[error(
        "crashed: restarted {restarts} times by its restart policy, its exit code not seen (it \
         ran again each time it was looked at); the last lines of its log: {log}"
    )]
    Restarted {
        /// The container's name.
        name: String,
        /// How many times its policy restarted it since it was started.
        restarts: u32,
        /// The last lines of its log, joined with ` | ` (`(empty)` when it wrote nothing).
        log: String,
    },
    /// Its health command did not pass within its deadline (*a container is applied only when it
    /// runs*).
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
    /// A job's container still ran after its timeout: it was stopped.
    #[error(
        "job `{name}` still ran after its timeout of {timeout_secs} s and was stopped; the last \
         lines of its log: {log}"
    )]
    JobTimedOut {
        /// The container's name.
        name: String,
        /// Its timeout.
        timeout_secs: u64,
        /// The last lines of its log.
        log: String,
    },
}
