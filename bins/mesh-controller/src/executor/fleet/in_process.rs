//! The embedded default's fleet: one host agent per node in this process, on the in-process
//! bus, each applying to the node's sandbox root under the home.
//!
//! An agent is started for a node the first time it is sent something, so a push to two nodes
//! of a thousand starts two.
//!
//! What it must never do: apply to this machine's own root (every agent is given the node's
//! sandbox root and state directory under the home).

use super::{Fleet, Grants, ReportHeard};
use crate::error::{file_error, Context, Error, Result};
use crate::home::Home;
use mesh_apply::HostConfig;
use mesh_bus::{subjects, Bus, InProcessBus, Subscription};
use mesh_model::declaration::Outgoing;
use mesh_model::inventory::Inventory;
use mesh_model::module::Catalogue;
use mesh_store::store::StoreSpec;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The in-process fleet: a bus with one host agent per node sent to.
pub struct InProcessFleet {
    home: Home,
    bus: Arc<dyn Bus>,
    reports: Subscription,
    store: StoreSpec,
    inventory: Option<Inventory>,
    agents: BTreeMap<String, tokio::task::JoinHandle<()>>,
}

impl InProcessFleet {
    /// A fleet of `home`'s nodes whose agents read archives from their caches, then from
    /// `store`.
    ///
    /// # Errors
    /// The in-process bus cannot be subscribed to (it always can).
    pub async fn start(home: &Home, store: StoreSpec) -> Result<InProcessFleet> {
        let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new());
        let reports = bus.subscribe(subjects::ALL_REPORTS).await?;
        Ok(InProcessFleet {
            home: home.clone(),
            bus,
            reports,
            store,
            inventory: None,
            agents: BTreeMap::new(),
        })
    }

    /// Starts `node`'s agent unless it runs.
    async fn agent(&mut self, node: &str) -> Result<()> {
        let home = &self.home;
        if self.agents.contains_key(node) {
            return Ok(());
        }
        let inventory = match &self.inventory {
            Some(inventory) => inventory.clone(),
            None => home.inventory()?,
        };
        let config = HostConfig {
            root: home.node_root(node, &inventory),
            state_dir: home.node_state_dir(node),
            container_prefix: container_prefix(home, node),
            ..HostConfig::default()
        };
        std::fs::create_dir_all(&config.root)
            .map_err(file_error("creating", &config.root))
            .for_node(node, || format!("creating the root of `{node}`"))?;
        let archives = crate::catalogue::builds::host_archives(home, node, &self.store)?;
        let agent = mesh_host::start(Arc::clone(&self.bus), node.to_owned(), config, archives)
            .await
            .for_node(node, || format!("starting the host agent of `{node}`"))?;
        self.agents.insert(node.to_owned(), agent);
        Ok(())
    }
}

/// The prefix of the containers `node`'s in-process host makes: every node of the embedded
/// default shares this machine's podman, so each gets its own — `m<8 hex of the home's path>-
/// <node>-` — and neither two nodes nor two homes (two tests, a demo) collide.
pub fn container_prefix(home: &Home, node: &str) -> String {
    let digest = mesh_model::sha256_digest(home.root().as_os_str().as_encoded_bytes());
    let hex = digest.strip_prefix("sha256:").unwrap_or(&digest);
    format!("m{}-{node}-", &hex[..8])
}

#[async_trait::async_trait]
impl Fleet for InProcessFleet {
    fn prepare(&mut self, _catalogue: &Catalogue, inventory: &Inventory) -> Result<()> {
        self.inventory = Some(inventory.clone());
        Ok(())
    }

    fn users_change(&self, grants_change: bool) -> Option<String> {
        grants_change.then(|| "its grants change the bus's users".to_owned())
    }

    fn users_file(&self) -> Option<crate::bus::users::UsersFile> {
        None
    }

    fn host_state_dir(&self, node: &str) -> Option<std::path::PathBuf> {
        Some(self.home.node_state_dir(node))
    }

    async fn issue_grants(&mut self, _nodes: &[String]) -> Result<Grants> {
        Ok(Grants::Issued(
            "the in-process bus has no permissions to issue".to_owned(),
        ))
    }

    async fn send(&mut self, declaration: &Outgoing) -> Result<()> {
        let node = declaration.node();
        self.agent(node).await?;
        // The send's id goes with it, as on a fleet's bus, and the host's report names it.
        let named;
        let declaration = match declaration.send() {
            Some(_) => declaration,
            None => {
                named = crate::executor::named_send(declaration.clone())?;
                &named
            }
        };
        let send = declaration.send().unwrap_or_default();
        self.bus
            .publish_with_id(
                &subjects::declaration(node),
                declaration.json().to_vec(),
                send,
            )
            .await
            .for_node(node, || format!("sending `{node}` its declaration"))?;
        Ok(())
    }

    /// The next report on the in-process bus, judged as on a fleet ([`crate::home::heard::judge`]):
    /// one that does not read is its node's problem, passed on.
    async fn next_report(&mut self, wait: Duration) -> Result<Option<ReportHeard>> {
        match tokio::time::timeout(wait, self.reports.next()).await {
            Ok(Some(message)) => {
                let Some(node) = message.subject.strip_prefix(&subjects::report("")) else {
                    return Ok(None);
                };
                let limit = self.home.report_limit();
                Ok(Some(
                    match crate::home::heard::judge(
                        node,
                        &message.payload,
                        mesh_store::clock::now(),
                        limit,
                    ) {
                        crate::home::heard::Heard::Read { report, .. } => {
                            ReportHeard::Report(report)
                        }
                        crate::home::heard::Heard::Unreadable(report) => {
                            tracing::warn!(subject = %message.subject, reason = %report.reason,
                                "an unreadable report: its node's problem");
                            ReportHeard::Unreadable {
                                node: node.to_owned(),
                                report,
                            }
                        }
                    },
                ))
            }
            Ok(None) => Err(Error::bus("the in-process bus closed")),
            Err(_) => Ok(None),
        }
    }
}

impl Drop for InProcessFleet {
    fn drop(&mut self) {
        for agent in self.agents.values() {
            agent.abort();
        }
    }
}
