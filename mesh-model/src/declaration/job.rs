//! A job resource: a container the host runs to completion, such as a migration, before what
//! comes after it.

use super::container::ContainerSpec;
use super::FileSpec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How long a job may run when its module says nothing (10 minutes).
pub const DEFAULT_JOB_TIMEOUT_SECS: u64 = 600;

/// A container that must run to completion and exit 0. It runs when it has never succeeded on
/// the machine, or when what it runs has changed since it last did: its image, command,
/// environment, or the content of a file named in [`JobSpec::rerun_on`] ([`JobSpec::run_digest`]);
/// never otherwise. What is declared after it waits until it has succeeded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct JobSpec {
    /// How its container runs: its name on the machine, image, command, environment, mounts,
    /// user, network and limits. A job publishes no port, has no restart policy, health
    /// command, settle time nor `restart-on` (its `rerun-on` says when it runs again).
    pub run: ContainerSpec,
    /// Ids of the files (of its module) whose content it runs again on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rerun_on: Vec<String>,
    /// Seconds it may run before it is stopped and failed; absent:
    /// [`DEFAULT_JOB_TIMEOUT_SECS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
}

impl JobSpec {
    /// The seconds it may run.
    pub fn timeout_secs(&self) -> u64 {
        self.timeout_secs.unwrap_or(DEFAULT_JOB_TIMEOUT_SECS)
    }

    /// Every rule it breaks, each a sentence (empty when sound).
    pub fn problems(&self) -> Vec<String> {
        let mut out = self.run.problems();
        let run = &self.run;
        if !run.ports.is_empty() {
            out.push("a job publishes no port".to_owned());
        }
        if run.restart.is_some() {
            out.push("a job has no restart policy (it is retried with backoff)".to_owned());
        }
        if run.health.is_some() || run.settle_ms.is_some() {
            out.push("a job has no health command nor settle time: it exits".to_owned());
        }
        if !run.restart_on.is_empty() {
            out.push("a job names the files it runs again on in `rerun-on`".to_owned());
        }
        if self.timeout_secs == Some(0) {
            out.push("a timeout of 0 lets the job run nothing".to_owned());
        }
        out
    }

    /// The digest of what it runs: its image, command and environment, and the content digest
    /// of each file in `rerun_on` (`files`: id → the digest of its declared content, `None`
    /// for a file not known). Equal digests: the job has run this already, and does not run
    /// again.
    pub fn run_digest(&self, files: &BTreeMap<&str, Option<&str>>) -> String {
        let rerun_on: BTreeMap<&str, Option<&str>> = self
            .rerun_on
            .iter()
            .map(|id| (id.as_str(), files.get(id.as_str()).copied().flatten()))
            .collect();
        let what = serde_json::json!({
            "image": self.run.image,
            "command": self.run.command,
            "env": self.run.env,
            "rerun-on": rerun_on,
        });
        crate::sha256_digest(&serde_json::to_vec(&what).expect("a job's digest serializes"))
    }
}

/// What a job that runs again on `file` compares: the digest of its declared content, or, for a
/// template of secrets, of its text and its secrets' keyed digests (never a ciphertext, so a
/// secret sealed again to another key runs nothing again).
pub fn rerun_file_digest(file: &FileSpec) -> Option<String> {
    file.content_digest()
        .or_else(|| file.sealed.as_deref().map(crate::secret::sealed_digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> JobSpec {
        JobSpec {
            run: ContainerSpec {
                name: "mesh-app-job-migrate".to_owned(),
                image: "localhost/app:1".to_owned(),
                command: vec!["migrate".to_owned()],
                ..ContainerSpec::default()
            },
            rerun_on: vec!["app/file/conf".to_owned()],
            timeout_secs: None,
        }
    }

    #[test]
    fn the_run_digest_changes_with_image_command_env_and_the_files_it_reruns_on_only() {
        let files = BTreeMap::from([("app/file/conf", Some("sha256:a"))]);
        let base = job().run_digest(&files);
        assert_eq!(base, job().run_digest(&files), "a pure function");
        let mut other = job();
        other.run.image = "localhost/app:2".to_owned();
        assert_ne!(other.run_digest(&files), base);
        let mut other = job();
        other.run.command.push("--all".to_owned());
        assert_ne!(other.run_digest(&files), base);
        let mut other = job();
        other.run.env.insert("LEVEL".to_owned(), "debug".to_owned());
        assert_ne!(other.run_digest(&files), base);
        let changed = BTreeMap::from([("app/file/conf", Some("sha256:b"))]);
        assert_ne!(job().run_digest(&changed), base);
        // What does not change what it runs does not run it again.
        let mut other = job();
        other.run.user = Some("2345:2345".to_owned());
        other.run.limits.memory = Some("64m".to_owned());
        other.timeout_secs = Some(30);
        assert_eq!(other.run_digest(&files), base);
        let unrelated = BTreeMap::from([
            ("app/file/conf", Some("sha256:a")),
            ("app/file/other", Some("sha256:c")),
        ]);
        assert_eq!(job().run_digest(&unrelated), base);
    }

    #[test]
    fn a_template_of_secrets_reruns_on_its_secrets_digests_never_on_their_ciphertext() {
        use crate::secret::{SealedPiece, SecretValue};
        let sealed = |digest: &str, ciphertext: &str| FileSpec {
            content: None,
            sealed: Some(vec![
                SealedPiece::Text("password = ".to_owned()),
                SealedPiece::Secret {
                    key: "password".to_owned(),
                    value: SecretValue {
                        digest: digest.to_owned(),
                        ciphertext: ciphertext.to_owned(),
                    },
                },
            ]),
            ..FileSpec::inline("/etc/app/conf", "", 0o640, "root", "root")
        };
        let base = rerun_file_digest(&sealed("sha256:a", "one")).unwrap();
        assert_eq!(rerun_file_digest(&sealed("sha256:a", "two")).unwrap(), base);
        assert_ne!(rerun_file_digest(&sealed("sha256:b", "one")).unwrap(), base);
        let plain = FileSpec::inline("/etc/app/conf", "a = 1\n", 0o644, "root", "root");
        assert_eq!(rerun_file_digest(&plain), plain.content_digest());
    }

    #[test]
    fn a_job_that_serves_or_restarts_is_refused_saying_why() {
        let mut spec = job();
        spec.run.ports = vec![super::super::PortMapping::parse("8080:80").unwrap()];
        spec.run.restart = Some("always".to_owned());
        spec.run.restart_on = vec!["app/file/conf".to_owned()];
        spec.timeout_secs = Some(0);
        let problems = spec.problems().join("\n");
        for says in [
            "a job publishes no port",
            "no restart policy",
            "`rerun-on`",
            "a timeout of 0",
        ] {
            assert!(problems.contains(says), "{says}: {problems}");
        }
        assert!(job().problems().is_empty());
    }
}
