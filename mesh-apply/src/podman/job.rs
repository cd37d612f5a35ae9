//! A job's container run to its end: made as a container is (labelled as the host's own), waited
//! for within its timeout, its exit code and log tail read, and removed.

use super::{os, Podman, PodmanError};
use crate::containers::{DeclaredContainer, JobRun};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How often a running job is looked at.
const JOB_POLL: Duration = Duration::from_millis(100);

impl Podman {
    /// Runs a job's container to its end, for at most `timeout_secs`: its exit code and the
    /// last lines of its log. A container of its name left by an earlier run (the host stopped
    /// while it ran) is removed first when the mesh made it for this job; one it did not make
    /// is left alone and fails the job. The container is removed once it has ended.
    ///
    /// # Errors
    /// [`PodmanError`]: a refused mount, a container it did not make, a job that ran past its
    /// timeout (stopped then), or podman's failures.
    pub fn run_job(
        &self,
        declared: &DeclaredContainer<'_>,
        timeout_secs: u64,
    ) -> Result<JobRun, PodmanError> {
        let spec = declared.spec;
        let sources = self.mount_sources(spec)?;
        if self.ours(&spec.name, Some(declared.id))?.is_some() {
            self.remove_container(&spec.name)?;
        }
        let env: Vec<(&str, &str)> = spec
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        if let Err(error) = self.run_ok(&self.run_arguments(declared, &sources), &env) {
            if let Ok(Some(_)) = self.ours(&spec.name, Some(declared.id)) {
                let _ = self.remove_container(&spec.name);
            }
            return Err(error);
        }
        let ended = self.wait_for_end(&spec.name, Duration::from_secs(timeout_secs));
        let log = self.log_tail(&spec.name);
        let removed = self.remove_container_within(&spec.name, "0");
        let exit_code = match ended? {
            Some(code) => code,
            None => {
                return Err(PodmanError::JobTimedOut {
                    name: spec.name.clone(),
                    timeout_secs,
                    log,
                })
            }
        };
        removed?;
        Ok(JobRun { exit_code, log })
    }

    /// Waits for the container to end: its exit code, or `None` when it still runs after
    /// `timeout`.
    fn wait_for_end(&self, name: &str, timeout: Duration) -> Result<Option<i32>, PodmanError> {
        let args = os(&["wait", name]);
        let mut child = Command::new(&self.config.program)
            .args(&self.config.global_args)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| PodmanError::Spawn {
                program: self.config.program.clone(),
                source,
            })?;
        let deadline = Instant::now() + timeout;
        loop {
            let done = child.try_wait().map_err(|source| PodmanError::Spawn {
                program: self.config.program.clone(),
                source,
            })?;
            if done.is_some() {
                break;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Ok(None);
            }
            std::thread::sleep(JOB_POLL);
        }
        let output = child
            .wait_with_output()
            .map_err(|source| PodmanError::Spawn {
                program: self.config.program.clone(),
                source,
            })?;
        if !output.status.success() {
            return Err(super::command_error(&args, &output));
        }
        let said = String::from_utf8_lossy(&output.stdout);
        said.trim()
            .parse::<i32>()
            .map(Some)
            .map_err(|_| PodmanError::Answer {
                command: "wait".to_owned(),
                reason: format!("`{}` is not an exit code", said.trim()),
            })
    }
}
