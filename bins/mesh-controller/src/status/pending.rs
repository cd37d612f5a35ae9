//! Pending nodes: those whose intent ([`crate::intent`]) differs from what they were
//! last sent — what differs, module by module and why, and what will send it (an open plan's
//! rollout, or a `push` of the node when nothing will).
//!
//! Start at [`pending`]. A node runs what it was sent once it reports it current; so a node
//! whose sent build of a module is not the deployed one (a stopped rollout's, a revert's) is
//! named with both builds ([`Difference::Build`]).
//!
//! # Guarantees
//! - Reads the intents' digests, the sent digests and, for a pending node only, the declaration
//!   it was sent: nothing is composed here.

use crate::error::Result;
use crate::home::Home;
use crate::intent::{self, IntentRecord};
use crate::plans::PlanRecord;
use crate::push::NodeStatus;
use mesh_model::declaration::Declaration;
use serde::Serialize;
use std::collections::BTreeMap;

/// What differs between a node's intent and what it was sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "why", rename_all = "kebab-case")]
pub enum Difference {
    /// It was never sent anything.
    NeverSent,
    /// A module assigned to it was never sent to it.
    ModuleNotSent {
        /// The module.
        module: String,
    },
    /// It was sent a module it is no longer assigned (or that no catalogue the nodes run has).
    ModuleRemoved {
        /// The module.
        module: String,
    },
    /// It was sent a build of a module other than the deployed one (a stopped rollout's, or
    /// a new deployed build not sent yet).
    Build {
        /// The module.
        module: String,
        /// The build it was sent (`None`: none, the home's catalogue).
        sent: Option<String>,
        /// The deployed build (`None`: none, the home's catalogue).
        deployed: Option<String>,
    },
    /// The module's settings (or the inventory) changed since it was sent.
    Settings {
        /// The module.
        module: String,
    },
    /// The module's secrets changed since it was sent: a new value, or a newer secret key
    /// (`secrets rotate`).
    Secrets {
        /// The module.
        module: String,
    },
    /// Every module's part is the same and the declaration still differs (its format).
    Declaration,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let build = |digest: &Option<String>| match digest {
            Some(digest) => format!("build {}", mesh_host::short(digest)),
            None => "the home's catalogue".to_owned(),
        };
        match self {
            Difference::NeverSent => write!(f, "never sent"),
            Difference::ModuleNotSent { module } => write!(f, "`{module}` not sent yet"),
            Difference::ModuleRemoved { module } => {
                write!(f, "`{module}` no longer assigned, still as sent")
            }
            Difference::Build {
                module,
                sent,
                deployed,
            } => write!(
                f,
                "`{module}` sent {}, deployed is {}",
                build(sent),
                build(deployed)
            ),
            Difference::Settings { module } => write!(f, "`{module}`'s settings changed"),
            Difference::Secrets { module } => write!(
                f,
                "`{module}`'s secrets changed (a new value or a newer secret key)"
            ),
            Difference::Declaration => write!(f, "its declaration's format changed"),
        }
    }
}

/// A node whose intent differs from what it was sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct PendingNode {
    /// The node.
    pub node: String,
    /// Its intent's digest.
    pub intent: String,
    /// What it was last sent (`None`: nothing).
    pub sent: Option<String>,
    /// What differs, module by module.
    pub differences: Vec<Difference>,
    /// The open plan whose rollout will send it, if one will.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// What sends it: the open plan, or `push NODE`.
    pub command: String,
    /// The modules it runs a stopped rollout's build of, when nothing will send it: the push
    /// takes it back to the older deployed build, and is held until that is allowed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub downgrades: Vec<String>,
}

impl PendingNode {
    /// What differs, in words.
    pub fn differences_words(&self) -> String {
        self.differences
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The pending nodes among `nodes` (their `intent` set here from `intents`; the node holding
/// the bus compared without the bus's users file), in node order. A node not running, or whose
/// intent is unknown, is never pending: nothing can be sent to it, or nothing is known of what
/// it should run.
///
/// # Errors
/// A declaration kept as sent cannot be read.
pub(crate) fn pending(
    home: &Home,
    nodes: &mut [NodeStatus],
    intents: &BTreeMap<String, IntentRecord>,
    running: &dyn Fn(&str) -> bool,
    plans: &[PlanRecord],
) -> Result<Vec<PendingNode>> {
    let mut builds = None;
    let mut out = Vec::new();
    for node in nodes.iter_mut() {
        let Some(intent) = intents.get(&node.node) else {
            continue;
        };
        node.intent = Some(intent.declaration.clone());
        if node.sent.as_deref() == Some(intent.declaration.as_str())
            || node.unconfirmed.as_deref() == Some(intent.declaration.as_str())
        {
            // Sent it — or wrote that it was sending it, unconfirmed: in progress until the
            // node reports it (a send cut in two), not pending.
            continue;
        }
        let builds = match &builds {
            Some(builds) => builds,
            None => builds.insert(Builds::read(home, plans)?),
        };
        let sent = match &node.sent {
            Some(digest) => home.sent().declaration(digest)?,
            None => None,
        };
        if let Some(sent) = &sent {
            if node.bus_node && intent::without_users_file(sent).digest() == intent.declaration {
                // The bus's users file is carried over: it runs what it should.
                node.intent.clone_from(&node.sent);
                continue;
            }
        }
        if !running(&node.node) {
            continue;
        }
        let differences = match &sent {
            None => vec![Difference::NeverSent],
            Some(sent) => differences(intent, sent, builds),
        };
        if differences.is_empty() {
            // It differs only by modules no catalogue the nodes run has: not judged.
            continue;
        }
        let plan = plans
            .iter()
            .find(|record| sends(record, &node.modules, &differences))
            .map(|record| record.plan.id.clone());
        // A module it runs a stopped rollout's build of: a push would take it back to the
        // older deployed build, and holds it until that is allowed.
        let back: Vec<&str> = differences
            .iter()
            .filter_map(|difference| match difference {
                Difference::Build {
                    module,
                    sent: Some(sent),
                    ..
                } if builds.stopped.get(&(node.node.clone(), module.clone())) == Some(sent) => {
                    Some(module.as_str())
                }
                _ => None,
            })
            .collect();
        let command = match &plan {
            Some(plan) => format!("{plan}'s rollout sends it"),
            None => format!("push {}", node.node),
        };
        let downgrades: Vec<String> = match &plan {
            Some(_) => Vec::new(),
            None => back.into_iter().map(str::to_owned).collect(),
        };
        out.push(PendingNode {
            node: node.node.clone(),
            intent: intent.declaration.clone(),
            sent: node.sent.clone(),
            differences,
            plan,
            command,
            downgrades,
        });
    }
    Ok(out)
}

/// Whether `record` is an open plan whose rollout will send a node assigned `modules` what
/// `differences` name: a rollout of one of its modules not yet finished (a rollout sends a node
/// its whole declaration).
fn sends(
    record: &PlanRecord,
    modules: &std::collections::BTreeSet<String>,
    differences: &[Difference],
) -> bool {
    if !record.plan.state.is_open() || differences.is_empty() {
        return false;
    }
    record.plan.modules.iter().any(|module| {
        modules.contains(module)
            && record
                .plan
                .rollouts
                .get(module)
                .is_none_or(|rollout| rollout.outcome.is_none())
    })
}

/// The builds a node may run that the declarations do not name (a module with no files names no
/// archive): each module's deployed build, and the build a stopped rollout left on the node it
/// stopped at (unless it was sent back what it ran before).
pub(crate) struct Builds {
    /// Each deployed module's build, by module.
    deployed: BTreeMap<String, String>,
    /// `(node, module)` → the build a stopped rollout sent the node, the latest plan's.
    stopped: BTreeMap<(String, String), String>,
}

impl Builds {
    /// Read from the deployed records and `plans` (oldest first).
    fn read(home: &Home, plans: &[PlanRecord]) -> Result<Builds> {
        let deployed = home
            .deployed()
            .all()?
            .into_iter()
            .map(|record| (record.module, record.archive.digest))
            .collect();
        let mut stopped = BTreeMap::new();
        for record in plans {
            if matches!(
                record.plan.state,
                mesh_model::plan::PlanState::Closed { .. }
            ) {
                continue;
            }
            for (module, rollout) in &record.plan.rollouts {
                let Some(mesh_model::plan::RolloutOutcome::Stopped { node, .. }) = &rollout.outcome
                else {
                    continue;
                };
                let Some(work) = record.work.get(module) else {
                    continue;
                };
                if node.is_empty() || work.reverted.contains_key(node) {
                    continue;
                }
                if let Some(build) = &work.build {
                    stopped.insert((node.clone(), module.clone()), build.archive.digest.clone());
                }
            }
        }
        Ok(Builds { deployed, stopped })
    }
}

/// What differs between `intent` and the declaration `sent`, module by module (nothing when it
/// differs only by modules no catalogue the nodes run has).
pub(crate) fn differences(
    intent: &IntentRecord,
    sent: &Declaration,
    builds: &Builds,
) -> Vec<Difference> {
    let sent_parts = intent::module_parts(&intent::without_users_file(sent));
    let sent_builds = intent::builds_of(sent);
    let mut out = Vec::new();
    for (module, digest) in &intent.modules {
        let Some(part) = sent_parts.get(module) else {
            out.push(Difference::ModuleNotSent {
                module: module.clone(),
            });
            continue;
        };
        if part.digest() == *digest {
            continue;
        }
        // The build it was sent and the deployed one: those the declarations name, else (a
        // module with no files names none) the one a stopped rollout left on it.
        let named = (
            sent_builds.get(module).cloned().flatten(),
            intent.builds.get(module).cloned().flatten(),
        );
        let stopped = builds
            .stopped
            .get(&(intent.node.clone(), module.clone()))
            .map(|build| (Some(build.clone()), builds.deployed.get(module).cloned()));
        let other_build = if named.0 != named.1 {
            Some(named)
        } else {
            stopped.filter(|(sent, deployed)| sent != deployed)
        };
        if let Some((sent, deployed)) = other_build {
            out.push(Difference::Build {
                module: module.clone(),
                sent,
                deployed,
            });
        } else if secrets_only(intent, module, part) {
            out.push(Difference::Secrets {
                module: module.clone(),
            });
        } else {
            out.push(Difference::Settings {
                module: module.clone(),
            });
        }
    }
    for module in sent_parts.keys() {
        if !intent.modules.contains_key(module) && !intent.unknown.contains(module) {
            out.push(Difference::ModuleRemoved {
                module: module.clone(),
            });
        }
    }
    let judged = |module: &String| !intent.unknown.contains(module);
    if out.is_empty() && sent_parts.keys().all(judged) {
        out.push(Difference::Declaration);
    }
    out
}

/// Whether a sent part whose digest is not the intent's is told from it by its secrets alone:
/// with every secret's keyed digest left out, the two are the same.
fn secrets_only(intent: &IntentRecord, module: &str, part: &Declaration) -> bool {
    part.holds_secrets()
        && intent
            .without_secrets
            .get(module)
            .is_some_and(|digest| *digest == intent::digest_without_secrets(part))
}

/// Each node's state in a word, in node order: `silent` (unheard for three heartbeats);
/// `attention` (its last report needs a person or is partial, its rollout stopped at it, a
/// rollout held it, or its last report could not be read); `pending` (what it should run
/// differs from what it was sent, and nothing will send it); `in-progress` (an open plan will
/// send it, it has yet to report what it was sent, or it is mid-change); `never-sent` (nothing
/// sent, nothing to send: not running, or its intent unknown); `current` (it reported what it
/// was sent, and that is what it should run).
pub(crate) fn node_states(overview: &crate::status::Overview) -> Vec<(&str, &'static str)> {
    use std::collections::BTreeSet;
    let attention: BTreeSet<&str> = overview
        .attention
        .iter()
        .map(|a| a.node.as_str())
        .chain(overview.held.iter().map(|h| h.node.as_str()))
        .chain(overview.stopped.iter().map(|s| s.node.as_str()))
        .collect();
    let pending: BTreeMap<&str, &PendingNode> = overview
        .pending
        .iter()
        .map(|p| (p.node.as_str(), p))
        .collect();
    overview
        .nodes
        .iter()
        .map(|node| {
            let name = node.node.as_str();
            let machine = node.report.as_ref().map(|r| r.machine);
            let word = if node.silent_since.is_some() {
                "silent"
            } else if attention.contains(name)
                || node.unreadable.is_some()
                || machine == Some(mesh_model::report::MachineState::Partial)
            {
                "attention"
            } else if let Some(pending) = pending.get(name) {
                match pending.plan {
                    Some(_) => "in-progress",
                    None => "pending",
                }
            } else if node.sent.is_none() {
                "never-sent"
            } else if node.current && machine != Some(mesh_model::report::MachineState::MidChange) {
                "current"
            } else {
                "in-progress"
            };
            (name, word)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_model::build::ArchiveRef;
    use mesh_model::declaration::{resource_id, FileSpec, Resource, Spec};
    use mesh_model::secret::SecretValue;

    fn file(module: &str, content: &str) -> Resource {
        Resource {
            id: resource_id(module, "file", "conf"),
            module: module.to_owned(),
            together: None,
            after: Vec::new(),
            spec: Spec::File(FileSpec::inline(
                format!("/etc/{module}.conf"),
                content,
                0o644,
                "root",
                "root",
            )),
        }
    }

    fn sealed(module: &str, digest: &str, ciphertext: &str) -> Resource {
        mesh_test_support::sealed::sealed_file(
            module,
            "secret",
            &format!("/etc/{module}.secret"),
            mesh_test_support::sealed::password_pieces(SecretValue {
                digest: digest.to_owned(),
                ciphertext: ciphertext.to_owned(),
            }),
        )
    }

    fn archive(digest: char) -> ArchiveRef {
        ArchiveRef {
            digest: format!("sha256:{}", digest.to_string().repeat(64)),
            size: 1,
        }
    }

    fn declaration(resources: Vec<Resource>, archives: &[(&str, char)]) -> Declaration {
        Declaration::with_archives(
            "n",
            resources,
            archives
                .iter()
                .map(|(module, digest)| ((*module).to_owned(), archive(*digest)))
                .collect(),
        )
    }

    fn no_builds() -> Builds {
        Builds {
            deployed: BTreeMap::new(),
            stopped: BTreeMap::new(),
        }
    }

    #[test]
    fn each_difference_is_named_by_module_and_why() {
        let intent = intent::record_of(&declaration(
            vec![
                file("web", "v1"),
                file("base", "motd = new"),
                sealed("db", "sha256:new", "age-new"),
                file("added", "x"),
            ],
            &[("web", 'a')],
        ));
        let sent = declaration(
            vec![
                file("web", "v1"),
                file("base", "motd = old"),
                sealed("db", "sha256:old", "age-old"),
                file("gone", "x"),
            ],
            &[("web", 'b')],
        );
        assert_eq!(
            differences(&intent, &sent, &no_builds()),
            [
                Difference::ModuleNotSent {
                    module: "added".into()
                },
                Difference::Settings {
                    module: "base".into()
                },
                Difference::Secrets {
                    module: "db".into()
                },
                Difference::Build {
                    module: "web".into(),
                    sent: Some(archive('b').digest),
                    deployed: Some(archive('a').digest),
                },
                Difference::ModuleRemoved {
                    module: "gone".into()
                },
            ]
        );
    }

    #[test]
    fn a_secret_sealed_again_to_another_key_with_its_keyed_digest_kept_is_no_difference() {
        let intent = intent::record_of(&declaration(
            vec![sealed("db", "sha256:same", "age-one")],
            &[],
        ));
        let sent = declaration(vec![sealed("db", "sha256:same", "age-two")], &[]);
        assert_eq!(sent.digest(), intent.declaration);
        assert_eq!(intent.modules["db"], intent::module_digests(&sent)["db"]);
    }

    #[test]
    fn a_module_with_no_files_left_by_a_stopped_rollout_is_named_with_both_builds() {
        let intent = intent::record_of(&declaration(vec![file("app", "listen 1")], &[]));
        let sent = declaration(vec![file("app", "listen 2")], &[]);
        let builds = Builds {
            deployed: BTreeMap::from([("app".to_owned(), archive('d').digest)]),
            stopped: BTreeMap::from([(("n".to_owned(), "app".to_owned()), archive('s').digest)]),
        };
        assert_eq!(
            differences(&intent, &sent, &builds),
            [Difference::Build {
                module: "app".into(),
                sent: Some(archive('s').digest),
                deployed: Some(archive('d').digest),
            }]
        );
        assert_eq!(
            differences(&intent, &sent, &no_builds()),
            [Difference::Settings {
                module: "app".into()
            }]
        );
    }

    #[test]
    fn a_module_no_catalogue_has_is_not_judged() {
        let mut intent = intent::record_of(&declaration(vec![file("base", "x")], &[]));
        intent.unknown.insert("site".to_owned());
        let sent = declaration(vec![file("base", "x"), file("site", "y")], &[]);
        assert!(differences(&intent, &sent, &no_builds()).is_empty());
    }
}
