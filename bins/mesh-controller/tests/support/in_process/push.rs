//! `push` through the library.

use super::{lines, said, set, Library};
use crate::support::fleet::Bed;

use mesh_controller::catalogue;
use mesh_controller::plans;
use mesh_controller::DriveMode;
use mesh_controller::DriveOptions;
use mesh_controller::PushOptions;
use mesh_controller::PushResult;
use mesh_controller::Verdict;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// What a push did (`push`, `push --behind`).
pub struct Pushed {
    /// What `push --output json` prints: each node's result (with `--behind`, the document
    /// of the plans driven, the nodes sent and those still not running).
    pub json: Value,
    /// The progress lines, one a line.
    pub lines: String,
    /// What the results come to: `push` exits 0 converged, 2 held, 3 not converged.
    pub verdict: Verdict,
    /// With `--behind`, whether a plan it drove stopped (it exits 3 then).
    pub stopped: bool,
}

impl Pushed {
    /// The exit code `push` ends with: 3 when a plan it drove stopped, else 0 converged, 2
    /// held, 3 not converged.
    pub fn code(&self) -> u8 {
        match self.verdict {
            _ if self.stopped => 3,
            Verdict::Converged => 0,
            Verdict::Held => 2,
            Verdict::NotConverged => 3,
        }
    }

    /// Each node's result by node, as `push --output json` lists them (without `--behind`).
    pub fn by_node(&self) -> std::collections::BTreeMap<String, Value> {
        self.json
            .as_array()
            .expect("push's results are a list")
            .iter()
            .map(|result| (result["node"].as_str().unwrap().to_owned(), result.clone()))
            .collect()
    }
}

/// What `push` waits for each node's report by default (`--timeout`).
const PUSH_TIMEOUT: Duration = PushOptions::DEFAULT_TIMEOUT;

impl Library {
    /// `push NODE…`.
    pub fn push(&self, nodes: &[&str]) -> Result<Pushed, String> {
        self.push_moving(nodes, &[])
    }

    /// `push NODE`: whether it exits 0 (every node converged), and what it said (its lines and
    /// JSON, or the error).
    pub fn push_converged(&self, node: &str) -> (bool, String) {
        match self.push(&[node]) {
            Ok(pushed) => (
                pushed.verdict == mesh_controller::Verdict::Converged,
                format!("{}{}", pushed.lines, pushed.json),
            ),
            Err(error) => (false, error),
        }
    }

    /// `push NODE… --move MODULE…`.
    pub fn push_moving(&self, nodes: &[&str], moves: &[&str]) -> Result<Pushed, String> {
        let nodes = nodes.iter().map(|n| (*n).to_owned()).collect();
        self.push_to(nodes, false, (moves, &[]), PUSH_TIMEOUT)
    }

    /// `push NODE… --downgrade MODULE…`.
    pub fn push_downgrading(&self, nodes: &[&str], downgrades: &[&str]) -> Result<Pushed, String> {
        let nodes = nodes.iter().map(|n| (*n).to_owned()).collect();
        self.push_to(nodes, false, (&[], downgrades), PUSH_TIMEOUT)
    }

    /// `push --all --downgrade MODULE…`.
    pub fn push_all_downgrading(&self, downgrades: &[&str]) -> Result<Pushed, String> {
        self.push_to(Vec::new(), true, (&[], downgrades), PUSH_TIMEOUT)
    }

    /// `push NODE… [--move MODULE…] --timeout SECONDS`: each node's report waited for
    /// `timeout`.
    pub fn push_within(
        &self,
        nodes: &[&str],
        moves: &[&str],
        timeout: Duration,
    ) -> Result<Pushed, String> {
        let nodes = nodes.iter().map(|n| (*n).to_owned()).collect();
        self.push_to(nodes, false, (moves, &[]), timeout)
    }

    /// `push --all`.
    pub fn push_all(&self) -> Result<Pushed, String> {
        self.push_all_within(PUSH_TIMEOUT)
    }

    /// `push --all --timeout SECONDS`: each node's report waited for `timeout`.
    pub fn push_all_within(&self, timeout: Duration) -> Result<Pushed, String> {
        self.push_to(Vec::new(), true, (&[], &[]), timeout)
    }

    fn push_to(
        &self,
        nodes: Vec<String>,
        all: bool,
        (moves, downgrades): (&[&str], &[&str]),
        timeout: Duration,
    ) -> Result<Pushed, String> {
        let inventory = self.home().inventory().map_err(|e| said(&e))?;
        let nodes = mesh_controller::targets(&inventory, nodes, all)
            .map_err(|refused| refused.to_string())?;
        let checked = self.checked()?;
        let (drives, progress) = self.drives();
        let results = self
            .tokio
            .block_on(drives.push(
                &checked,
                &nodes,
                &PushOptions {
                    moves: set(moves),
                    downgrades: set(downgrades),
                    timeout,
                },
            ))
            .map_err(|e| said(&e))?;
        Ok(Pushed {
            verdict: mesh_controller::verdict(&results),
            json: serde_json::to_value(&results).unwrap(),
            lines: lines(&progress),
            stopped: false,
        })
    }

    /// `push --behind`: the open plans' rollouts driven, then the nodes a finished rollout
    /// passed over that run now sent what the mesh runs.
    pub fn push_behind(&self) -> Result<Pushed, String> {
        let (drives, progress) = self.drives();
        let options = DriveOptions {
            mode: DriveMode::RolloutOnly,
            ..DriveOptions::default()
        };
        let plans = self
            .tokio
            .block_on(drives.drive_open(&options))
            .map_err(|e| said(&e))?;
        let behind = mesh_controller::status::to_send(self.home()).map_err(|e| said(&e))?;
        let results: Vec<PushResult> = if behind.running.is_empty() {
            Vec::new()
        } else {
            let checked = self.checked()?;
            self.tokio
                .block_on(drives.push(&checked, &behind.running, &PushOptions::default()))
                .map_err(|e| said(&e))?
        };
        Ok(Pushed {
            verdict: mesh_controller::verdict(&results),
            stopped: plans::any_stopped(&plans),
            json: serde_json::to_value(mesh_controller::status::BehindPushed {
                read: catalogue::read(self.home()).map_err(|e| said(&e))?,
                plans,
                nodes: results,
                not_running: behind.not_running,
            })
            .unwrap(),
            lines: lines(&progress),
        })
    }
}

impl Bed {
    /// `push --all --timeout TIMEOUT --output json` through the library, its results by node;
    /// `code` is the exit code `push` ends with (0 converged, 2 held, 3 not converged), checked
    /// the binary's run checked.
    pub fn push_all(&self, timeout: u64, code: u8) -> BTreeMap<String, Value> {
        let pushed = self
            .library()
            .push_all_within(Duration::from_secs(timeout))
            .unwrap_or_else(|error| panic!("push --all: {error}"));
        assert_eq!(
            pushed.code(),
            code,
            "push --all: {:?}\n{:#}\n{}",
            pushed.verdict,
            pushed.json,
            pushed.lines
        );
        pushed.by_node()
    }
}
