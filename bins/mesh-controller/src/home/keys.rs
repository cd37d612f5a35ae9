//! Which records exist: every family of the controller's records, the directory its keys are
//! under, what it holds and the store that reads and writes it. One table, so that one file
//! tells what a home holds; `records export`, `records import` and the buckets a bus makes for
//! the records are read from it ([`RECORD_DIRS`]).
//!
//! A family's records are read and written through its store; the records' collection and
//! `records export`/`import` go through them all. Besides them a home holds its inventory,
//! `inventory.toml` (read and written by [`crate::home::Home::inventory`] and
//! [`crate::home::Home::write_inventory`]).

/// One family of records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Family {
    /// The directory its keys are under.
    pub dir: &'static str,
    /// What it holds, and its keys.
    pub holds: &'static str,
    /// The store that reads and writes it.
    pub store: &'static str,
}

/// Every family of records a home holds, besides its inventory.
pub(crate) const FAMILIES: [Family; 17] = [
    Family {
        dir: "settings",
        holds: "each module's settings layers: `settings/<module>/mesh.json` and \
                `settings/<module>/nodes/<node>.json`",
        store: "home::LayerStore (Home::layers)",
    },
    Family {
        dir: "history",
        holds: "every settings layer replaced: `history/settings/<module>/mesh/<revision>.json`, \
                `…/nodes/<node>/<revision>.json`",
        store: "home::LayerStore (Home::layers)",
    },
    Family {
        dir: "declarations",
        holds: "each declaration sent, once by its digest: `declarations/<hex>.json`",
        store: "home::SentStore (Home::sent)",
    },
    Family {
        dir: "sent",
        holds: "the digest last sent to each node: `sent/<node>.json`; what is about to be \
                sent, written before it is: `sent/sending/<node>.json`",
        store: "home::SentStore (Home::sent)",
    },
    Family {
        dir: "intents",
        holds: "what each node should run now, by digest and module by module: \
                `intents/nodes/<node>.json`, and what they were composed from: \
                `intents/fingerprint.json`",
        store: "mesh_controller::intent::IntentStore (Home::intents)",
    },
    Family {
        dir: "reports",
        holds: "each node's last report in the embedded default: `reports/<node>.json`",
        store: "home::ReportStore (Home::reports)",
    },
    Family {
        dir: "heard",
        holds: "each node's last report that read, when its latest does not: `heard/<node>.json`",
        store: "home::ReportStore (Home::reports)",
    },
    Family {
        dir: "problems",
        holds: "failures until they are resolved: `problems/<kind>/<subject>.json`",
        store: "home::ProblemStore (Home::problems)",
    },
    Family {
        dir: "plans",
        holds: "each plan: `plans/<id>.json`",
        store: "plans::PlanStore (Home::plans)",
    },
    Family {
        dir: "rollouts",
        holds: "what each rollout keeps of its nodes: `rollouts/<plan>/<module>/<node>.json`, \
                `…/steps/<n>.json`, `rollouts/<plan>/<module>.running.json`",
        store: "plans::PlanStore (Home::plans)",
    },
    Family {
        dir: "repos",
        holds: "each registered repository: `repos/<name>.json`",
        store: "catalogue::repos::RepoStore (Home::repos)",
    },
    Family {
        dir: "deployed",
        holds: "each module's deployed build: `deployed/<module>.json`",
        store: "catalogue::builds::DeployedStore (Home::deployed)",
    },
    Family {
        dir: "store/modules",
        holds: "the modules the store keeps builds of, for its collector",
        store: "mesh_store::records (the store's module records)",
    },
    Family {
        dir: "bus",
        holds: "the bus's users and their proof, the nodes' passwords and NKeys, the replicas: \
                `bus/passwords/<node>`, `bus/nkeys/<node>`, `bus/authorization.json`, \
                `bus/replicas.json`",
        store: "bus::credentials, bus::enroll, bus::users, bus::broker",
    },
    Family {
        dir: "acks",
        holds: "the drift a person acknowledged on each node: `acks/<node>.json`",
        store: "status::acks",
    },
    Family {
        dir: "daemon",
        holds: "the daemon's last heartbeat: `daemon/heartbeat.json`",
        store: "bus::heartbeat",
    },
    Family {
        dir: "secrets/nodes",
        holds: "each node's age key: `secrets/nodes/<node>`",
        store: "secrets",
    },
];

/// The directory of each family ([`FAMILIES`]): what `records import` moves onto a bus and
/// what an export of the embedded default holds.
pub(crate) const RECORD_DIRS: [&str; 17] = {
    let mut dirs = [""; 17];
    let mut at = 0;
    while at < FAMILIES.len() {
        dirs[at] = FAMILIES[at].dir;
        at += 1;
    }
    dirs
};
