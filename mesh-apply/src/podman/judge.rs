//! Judging a container just (re)started: running after its settle time, healthy within its
//! deadline, or failed with its exit code and log tail.

use super::{os, ContainerStatus, Podman, PodmanError};
use mesh_model::declaration::ContainerSpec;
use std::ffi::OsString;
use std::time::{Duration, Instant};

/// How many of a dead container's last log lines a report carries.
pub const LOG_TAIL_LINES: usize = 10;

impl Podman {
    /// Judges a container just (re)started (*a container is applied only when it runs*): after
    /// its settle time it must be running (not exited, not being restarted), and its health
    /// command, if it declares one, must pass within its deadline. A container its restart
    /// policy restarted meanwhile (podman's count of such restarts past `restarts_before`, what
    /// it was before it was started) crashed: it is failed as one that exited, even when it
    /// runs again (*a container is applied only when it runs*: a crash is still reported).
    ///
    /// # Errors
    /// [`PodmanError::Exited`] with its exit code and log tail; [`PodmanError::Unhealthy`];
    /// podman's failures.
    pub fn judge(&self, spec: &ContainerSpec, restarts_before: u32) -> Result<(), PodmanError> {
        std::thread::sleep(Duration::from_millis(spec.settle_ms()));
        let status = self
            .judge_now(&spec.name)
            .map_err(|error| blame_held_port(spec, error))?;
        if status.restart_count > restarts_before {
            return Err(blame_held_port(
                spec,
                self.crashed(spec, status, restarts_before)?,
            ));
        }
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

    /// What a container its restart policy restarted is failed as: [`PodmanError::Exited`]
    /// with its exit code. Podman clears the exit code when it starts the container again, so
    /// one found running again is looked at until it is seen stopped (at most
    /// [`CRASH_WATCH`]); one never seen stopped is [`PodmanError::Restarted`], its code not
    /// invented.
    ///
    /// # Errors
    /// Podman's failures.
    fn crashed(
        &self,
        spec: &ContainerSpec,
        mut status: ContainerStatus,
        restarts_before: u32,
    ) -> Result<PodmanError, PodmanError> {
        let deadline = Instant::now() + CRASH_WATCH;
        while status.running && !status.restarting && Instant::now() < deadline {
            // Only paces the looks at a container that crashes again and again.
            std::thread::sleep(CRASH_LOOK);
            match self.inspect(&spec.name)? {
                Some(now) => status = now,
                None => break,
            }
        }
        let restarts = status.restart_count.saturating_sub(restarts_before);
        let log = self.log_tail(&spec.name);
        Ok(if status.running && !status.restarting {
            PodmanError::Restarted {
                name: spec.name.clone(),
                restarts,
                log,
            }
        } else {
            PodmanError::Exited {
                name: spec.name.clone(),
                code: status.exit_code,
                status: format!("restarted {restarts} times by its restart policy"),
                log,
            }
        })
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

    /// The last `LOG_TAIL_LINES` lines of a container's log (stdout and stderr), joined with
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
}

/// A container that exited while a host port it serves is held by another program is failed
/// as that, naming the port and the program, not as its exit (a program that cannot bind may
/// exit 0).
fn blame_held_port(spec: &ContainerSpec, error: PodmanError) -> PodmanError {
    match error {
        PodmanError::Exited { .. } | PodmanError::Restarted { .. } => {
            super::ports_free(spec).err().unwrap_or(error)
        }
        other => other,
    }
}

/// How long a crashed container found running again is looked at for its exit code.
const CRASH_WATCH: Duration = Duration::from_secs(5);

/// The time between two looks at it.
const CRASH_LOOK: Duration = Duration::from_millis(50);

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
