//! The nodes' parts of a module's rollout, kept beside its plan so that a controller stopped
//! anywhere resumes knowing where every node stood.
//!
//! # Layout
//! Under `rollouts/<plan>/<module>`:
//! - `steps/<n>.json` ([`RolloutStepRecord`]): the nodes whose progress one step changed, one
//!   record a step, numbered from 0 in the order the steps were saved. A step that sends
//!   10,000 nodes is one record (kept in chunks, as any large record), not 10,000.
//! - beside that directory, `rollouts/<plan>/<module>.running.json` ([`RolloutRunningRecord`]):
//!   the nodes the rollout found running at its start. One no step names waits for its send.
//! - `<node>.json` ([`RolloutNodeRecord`]): a node's own record, as an earlier mesh wrote one
//!   for every node whose progress changed; still read, so a rollout it began resumes here.
//!
//! A node's part is its latest: its own record, overridden by each step naming it, in order
//! ([`RolloutNodesRecorded`]). The plan's fold removes them all with the plan's directory.

use crate::error::{bad_record, Result};
use crate::plans::PlanStore;
use mesh_plan::rollout::NodeProgress;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The format version of a node's record of a rollout.
pub const ROLLOUT_NODE_FORMAT: u32 = 1;

/// Format version of [`RolloutRunningRecord`].
pub(crate) const ROLLOUT_RUNNING_FORMAT: u32 = 1;

/// Format version of [`RolloutStepRecord`].
pub(crate) const ROLLOUT_STEP_FORMAT: u32 = 1;

/// One node's part of one module's rollout (disk format, version [`ROLLOUT_NODE_FORMAT`]): an
/// entry of a step's record ([`RolloutStepRecord`]), or a record of its own at
/// `rollouts/<plan>/<module>/<node>.json` as an earlier mesh kept it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RolloutNodeRecord {
    /// Format version.
    pub format: u32,
    /// The node.
    pub node: String,
    /// Whether it runs (only running nodes are sent to).
    pub running: bool,
    /// The digest of the declaration it is sent (its report must name it); a node not running,
    /// the one it would be sent. Empty for a running node not yet sent: its declaration is
    /// composed by its send.
    pub declaration: String,
    /// The digest of what it had been sent before this rollout (a revert sends it back; kept
    /// under `declarations/`).
    pub before: Option<String>,
    /// Where it stands.
    pub progress: NodeProgress,
}

/// The nodes whose progress one step of a rollout changed (disk format, version
/// [`ROLLOUT_STEP_FORMAT`]), at `rollouts/<plan>/<module>/steps/<n>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct RolloutStepRecord {
    /// Format version.
    pub format: u32,
    /// The nodes, each where it stood after the step.
    pub nodes: Vec<RolloutNodeRecord>,
}

/// The nodes a module's rollout found running at its start (disk format, version
/// [`ROLLOUT_RUNNING_FORMAT`]), at `rollouts/<plan>/<module>.running.json`, written once as the
/// rollout begins, before any send. Each of them no step names is waiting for its send — or was
/// sent by a controller stopped before it saved the step: what each ran before is kept here, so
/// a revert after a resume still sends that back. At 10,000 nodes this is one record (in
/// chunks) instead of 10,000 written at the start of every module's rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct RolloutRunningRecord {
    /// Format version.
    pub format: u32,
    /// The nodes, sorted by name.
    pub running: Vec<RunningNode>,
}

/// A node a rollout found running at its start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RunningNode {
    /// The node.
    pub node: String,
    /// The digest of what it had been sent before the rollout, if anything.
    pub before: Option<String>,
}

/// The record key of a node's own record of a rollout (as an earlier mesh wrote them).
pub(crate) fn rollout_node_key(plan: &str, module: &str, node: &str) -> String {
    format!("rollouts/{plan}/{module}/{node}.json")
}

/// The record key of a rollout's step `step` ([`RolloutStepRecord`]): numbered so that the
/// keys sort in the order the steps were saved.
pub(crate) fn rollout_step_key(plan: &str, module: &str, step: u64) -> String {
    format!("rollouts/{plan}/{module}/steps/{step:010}.json")
}

/// The record key of the nodes a rollout found running ([`RolloutRunningRecord`]): beside
/// the directory of its steps, not in it.
pub(crate) fn rollout_running_key(plan: &str, module: &str) -> String {
    format!("rollouts/{plan}/{module}.running.json")
}

/// A module's rollout as its records hold it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RolloutNodesRecorded {
    /// Every node some record names, where it stood last, by node name.
    pub records: Vec<RolloutNodeRecord>,
    /// The nodes running at the rollout's start, sorted (none for a rollout an earlier mesh
    /// began: it wrote a record for every node).
    pub running: Vec<RunningNode>,
    /// The number the rollout's next step is saved under.
    pub next_step: u64,
}

impl RolloutNodesRecorded {
    /// Every node of the rollout: where some record says it stood, or, for a node running at
    /// the start that none names, waiting for its send (no declaration composed yet).
    pub fn all(self) -> Vec<RolloutNodeRecord> {
        let mut all = self.records;
        let named: std::collections::BTreeSet<String> =
            all.iter().map(|record| record.node.clone()).collect();
        all.extend(
            self.running
                .into_iter()
                .filter(|running| !named.contains(&running.node))
                .map(|running| RolloutNodeRecord {
                    format: ROLLOUT_NODE_FORMAT,
                    node: running.node,
                    running: true,
                    declaration: String::new(),
                    before: running.before,
                    progress: NodeProgress::Waiting,
                }),
        );
        all.sort_by(|a, b| a.node.cmp(&b.node));
        all
    }
}

impl PlanStore<'_> {
    /// Writes a node's own record of a rollout — unless the plans lease was taken over.
    ///
    /// # Errors
    /// The lease was taken over; the record cannot be written.
    pub fn write_rollout_node(
        &self,
        plan: &str,
        module: &str,
        record: &RolloutNodeRecord,
    ) -> Result<()> {
        self.home.check_lease()?;
        self.home.put(
            &rollout_node_key(plan, module, &record.node),
            &serde_json::to_vec(record)?,
        )
    }

    /// Writes step `step` of a rollout: the nodes it changed, in one record — unless the plans
    /// lease was taken over.
    ///
    /// # Errors
    /// The lease was taken over (nothing is written); the record cannot be written.
    pub fn write_rollout_step(
        &self,
        plan: &str,
        module: &str,
        step: u64,
        nodes: Vec<RolloutNodeRecord>,
    ) -> Result<()> {
        self.home.check_lease()?;
        self.home.put(
            &rollout_step_key(plan, module, step),
            &serde_json::to_vec(&RolloutStepRecord {
                format: ROLLOUT_STEP_FORMAT,
                nodes,
            })?,
        )
    }

    /// Removes what an earlier start of a module's rollout left of its nodes' records (a
    /// controller stopped before its first step was saved in the plan) — unless the plans
    /// lease was taken over. A rollout begins from none.
    ///
    /// # Errors
    /// The lease was taken over; the records cannot be removed.
    pub(crate) fn clear_rollout_nodes(&self, plan: &str, module: &str) -> Result<()> {
        self.home.check_lease()?;
        self.home
            .records()
            .delete_under(&format!("rollouts/{plan}/{module}"))?;
        Ok(())
    }

    /// Writes the nodes a rollout found running at its start ([`RolloutRunningRecord`]) —
    /// unless the plans lease was taken over.
    ///
    /// # Errors
    /// The lease was taken over; the record cannot be written.
    pub fn write_rollout_running(
        &self,
        plan: &str,
        module: &str,
        running: Vec<RunningNode>,
    ) -> Result<()> {
        self.home.check_lease()?;
        self.home.put_json(
            &rollout_running_key(plan, module),
            &RolloutRunningRecord {
                format: ROLLOUT_RUNNING_FORMAT,
                running,
            },
        )
    }

    /// Every node's part of a module's rollout in a plan, by node name
    /// ([`RolloutNodesRecorded::all`]).
    ///
    /// # Errors
    /// A record cannot be read.
    pub fn rollout_nodes(&self, plan: &str, module: &str) -> Result<Vec<RolloutNodeRecord>> {
        Ok(self.rollout_nodes_recorded(plan, module)?.all())
    }

    /// A module's rollout in a plan as its records hold it: each node where it stood last (its
    /// own record, overridden by every step naming it, in order), the nodes running at its
    /// start, and the number of its next step.
    ///
    /// # Errors
    /// A record cannot be read, or is of another format.
    pub fn rollout_nodes_recorded(&self, plan: &str, module: &str) -> Result<RolloutNodesRecorded> {
        let dir = format!("rollouts/{plan}/{module}");
        let mut latest: BTreeMap<String, RolloutNodeRecord> = BTreeMap::new();
        let mut steps: BTreeMap<u64, Vec<RolloutNodeRecord>> = BTreeMap::new();
        // One listing with the values, not a read per node or step.
        for (key, bytes) in self.home.records().values_under(&dir)? {
            let Some(name) = key
                .strip_prefix(&dir)
                .and_then(|rest| rest.strip_prefix('/'))
                .and_then(|rest| rest.strip_suffix(".json"))
            else {
                continue;
            };
            match name.split_once('/') {
                None => {
                    let record: RolloutNodeRecord = self.read_formatted(
                        &key,
                        &bytes,
                        ROLLOUT_NODE_FORMAT,
                        "a node's record of a rollout",
                    )?;
                    latest.insert(record.node.clone(), record);
                }
                Some(("steps", number)) => {
                    let Ok(number) = number.parse::<u64>() else {
                        continue;
                    };
                    let step: RolloutStepRecord = self.read_formatted(
                        &key,
                        &bytes,
                        ROLLOUT_STEP_FORMAT,
                        "a step's record of a rollout",
                    )?;
                    steps.insert(number, step.nodes);
                }
                Some(_) => {}
            }
        }
        let next_step = steps.last_key_value().map_or(0, |(last, _)| last + 1);
        for (_, nodes) in steps {
            for record in nodes {
                latest.insert(record.node.clone(), record);
            }
        }
        Ok(RolloutNodesRecorded {
            records: latest.into_values().collect(),
            running: self.rollout_running(plan, module)?,
            next_step,
        })
    }

    /// The nodes a rollout found running at its start; none for a rollout begun by an earlier
    /// mesh (every node has a record of its own).
    fn rollout_running(&self, plan: &str, module: &str) -> Result<Vec<RunningNode>> {
        let key = rollout_running_key(plan, module);
        let Some(bytes) = self.home.get(&key)? else {
            return Ok(Vec::new());
        };
        let record: RolloutRunningRecord = self.read_formatted(
            &key,
            &bytes,
            ROLLOUT_RUNNING_FORMAT,
            "the nodes a rollout found running at its start",
        )?;
        Ok(record.running)
    }

    /// `bytes`, the record `key`, read as JSON of format `expected` ([`Home::versioned`]).
    fn read_formatted<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
        bytes: &[u8],
        expected: u32,
        what: &str,
    ) -> Result<T> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(bad_record(self.home.records().locate(key), "JSON"))?;
        self.home.versioned(key, value, what, expected)
    }
}
