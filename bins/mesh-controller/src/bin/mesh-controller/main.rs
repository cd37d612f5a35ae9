//! `mesh-controller`: composes each node's declaration from the catalogue and inventory, shows
//! it, sends it, and keeps what was sent and what each node reported.
//!
//! The binary parses arguments and renders; everything it does is a call into the
//! [`mesh_controller`] library. Start at [`Command`]; what a person reads is rendered in
//! [`render`]; `demo` and `init` are the binary's own.

#[path = "../../../../cli_docs.rs"]
mod cli_docs;
mod demo;
mod init;
mod render;

use mesh_controller::{
    broker, builds, daemon, executor, fleet, http, plans, preview, push, records, repos, runtimes,
    settings, status,
};

use anyhow::{bail, Context, Result};
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

/// The mesh's controller: composes what each machine should hold, shows it, and sends it.
///
/// Exit codes: 0 success; 1 error (nothing was changed unless the message says otherwise);
/// 2 refused or held, see the message (e.g. `push` with no node, a held move, `plan --diff
/// --detailed-exitcode` with a difference); 3 sent, but some node did not converge, or a
/// plan stopped (a build failed or a rollout stopped at a node).
#[derive(Parser)]
#[command(version, about, long_about)]
pub struct Cli {
    /// The mesh home: inventory, catalogue, settings, what was sent, reports.
    #[arg(long, env = "MESH_HOME", default_value = "mesh-home", global = true)]
    home: PathBuf,
    /// The archive store: `oci:PATH` (an OCI image layout directory) or `http://HOST:PORT`
    /// (an OCI registry). Default: `oci:<home>/store/oci`.
    #[arg(
        long,
        env = "MESH_STORE",
        global = true,
        value_name = "oci:PATH|http://HOST:PORT"
    )]
    store: Option<String>,
    /// Output for people (`text`) or scripts (`json`).
    #[arg(long, value_enum, default_value = "text", global = true)]
    output: Output,
    /// A fleet's bus (NATS JetStream), e.g. `nats://bus.example:4222`: `push` sends to the
    /// hosts running `mesh-host serve` and waits for their reports, grants first; `merge`,
    /// `plans resume` and `push --behind` roll out to them, one machine first; `runtimes` and
    /// `broker` need it. Without it, the embedded default: hosts run in this process.
    #[arg(long, env = "MESH_BUS", global = true, value_name = "URL")]
    bus: Option<String>,
    /// The controller's bus password file (default `<home>/bus/passwords/controller`), used
    /// while it has no seed (mode 0600: refused when others may read it).
    #[arg(
        long,
        env = "MESH_BUS_PASSWORD_FILE",
        global = true,
        value_name = "FILE"
    )]
    bus_password_file: Option<PathBuf>,
    /// The controller's NKey seed file, which it signs with (default `<home>/bus/nkey.seed`
    /// when `broker keygen` made it; mode 0600: refused when others may read it).
    #[arg(long, env = "MESH_BUS_SEED", global = true, value_name = "FILE")]
    bus_seed: Option<PathBuf>,
    /// How many copies the mesh's streams, records bucket and module state buckets keep
    /// (recorded on the bus, so later runs keep it); default: the recorded number, else 1 on
    /// a single server and 3 when the server reports a cluster. Streams made earlier with
    /// fewer are listed by `broker replicas` and raised by `broker raise-replicas`.
    #[arg(long, env = "MESH_BUS_REPLICAS", global = true, value_name = "N")]
    bus_replicas: Option<usize>,
    /// The bus server's CA (a PEM file): TLS is then required and only these CAs are trusted.
    #[arg(long, env = "MESH_BUS_CA", global = true, value_name = "FILE")]
    bus_ca: Option<PathBuf>,
    /// The controller's client certificate (PEM), for a bus that verifies clients (mTLS;
    /// needs `--bus-key`).
    #[arg(
        long,
        env = "MESH_BUS_CERT",
        global = true,
        value_name = "FILE",
        requires = "bus_key"
    )]
    bus_cert: Option<PathBuf>,
    /// The key of `--bus-cert` (PEM, mode 0600: refused when others may read it).
    #[arg(
        long,
        env = "MESH_BUS_KEY",
        global = true,
        value_name = "FILE",
        requires = "bus_cert"
    )]
    bus_key: Option<PathBuf>,
    /// The registry's CA (a PEM file), over `https://`: its certificate must be signed by one
    /// of these, and only these are trusted.
    #[arg(long, env = "MESH_STORE_CA", global = true, value_name = "FILE")]
    store_ca: Option<PathBuf>,
    /// The controller's registry credentials (it pushes and deletes): a file holding
    /// `USER:PASSWORD` on one line, mode 0600 (refused when others may read it).
    #[arg(
        long,
        env = "MESH_STORE_CREDENTIALS",
        global = true,
        value_name = "FILE"
    )]
    store_credentials: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// How results are printed.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// For people.
    Text,
    /// For scripts: one JSON document on standard output.
    Json,
}

/// The controller's commands.
#[derive(Subcommand)]
pub enum Command {
    /// Makes a new mesh home.
    ///
    /// With `--example`, the home holds the book's example mesh: six modules, three nodes
    /// (control, home, laptop) and their settings, with sandbox roots under `<home>/roots`.
    Init {
        /// Start from the book's example mesh.
        #[arg(long)]
        example: bool,
    },
    /// Validates the catalogue and the inventory, listing every problem at once.
    Check,
    /// Prints the declaration a node would be sent now, or with `--diff` what would change.
    Plan {
        /// The node.
        node: String,
        /// Show what differs from what the node was last sent: resources added, changed and
        /// removed, with old and new values; a container's fields that make it recreate are
        /// marked. An unchanged node prints nothing.
        #[arg(long)]
        diff: bool,
        /// With `--diff`: exit 2 when there is a difference, 0 when there is none.
        #[arg(long, requires = "diff")]
        detailed_exitcode: bool,
    },
    /// Composes, sends and applies declarations, then prints what each node reported.
    ///
    /// Name the nodes, or say `--all`: a push with no node is refused. With `--bus`, it sends to
    /// the fleet's hosts (`mesh-host serve`) and waits for their reports, grants first: when
    /// the bus's users changed, the node holding the bus is sent them first, and a grant that
    /// fails fails the send (exit 1, nothing else sent). `--behind` instead rolls
    /// out, one machine first, what the open plans built and have not rolled out.
    ///
    /// Exit codes: 0 every node converged (`--behind`: the plans went as far as their builds);
    /// 1 error; 2 refused or held; 3 some node did not converge (`--behind`: a plan stopped).
    Push {
        /// The nodes to send to.
        nodes: Vec<String>,
        /// Send to every node.
        #[arg(long, conflicts_with = "nodes")]
        all: bool,
        /// Send a module whose running container would get another host directory at a mount
        /// (its data moving); without it such a node's push is held. Repeatable.
        #[arg(long = "move", value_name = "MODULE")]
        moves: Vec<String>,
        /// Seconds to wait for each node's report.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
        /// Instead of nodes: roll out the modules the open plans built and have not rolled
        /// out (the same list `status` calls behind), one machine first. With `--move MODULE`,
        /// that module's nodes held for a move are sent.
        #[arg(long, conflicts_with_all = ["nodes", "all"])]
        behind: bool,
    },
    /// Each node's last report, the open plans and what each waits on, the modules behind,
    /// stopped rollouts, and nodes stuck, mid-change or with a window open.
    ///
    /// "Behind" is only what the open plans have yet to build or roll out. On a fleet
    /// (`--bus`) each node's last report is read from the bus's reports stream, which every
    /// report reaches (heartbeats too), so what a host did between pushes is shown; a node not
    /// heard for three heartbeats is "silent since …".
    ///
    /// Exit codes: 0 all well; 3 something needs attention (a node stuck, mid-change, silent,
    /// with drift or a window open; a node held for a move; a stopped rollout; a failure
    /// recorded); 1 error reading the home.
    Status {
        /// On a fleet, seconds without a report after which a node is called silent (default:
        /// three of a host's default 30 s heartbeats; set it to three of yours).
        #[arg(long, value_name = "SECS", default_value_t = mesh_controller::push::SILENT_AFTER_SECS)]
        silent_after: u64,
        /// On a fleet, keep going: on a terminal, redraw on every report a host publishes (and
        /// every 5 s, so a node falling silent shows); otherwise print a line for each change
        /// (with `--output json`, one overview a line). Runs until interrupted.
        #[arg(long)]
        watch: bool,
    },
    /// Registers catalogue repositories.
    #[command(subcommand)]
    Repo(RepoCommand),
    /// Hears a merge to a registered repository: plans it, then builds and rolls it out.
    ///
    /// The paths changed since the repository's last planned commit are read whole from git;
    /// the modules they belong to and every module depending on them are planned in tiers (the
    /// first merge plans every module). Older open plans of the same repository and branch are
    /// superseded, their unfinished modules taken in. Each tier's modules are built (a build
    /// byte-identical to the deployed one is not redeployed) and rolled out one machine first.
    /// A merge heard twice makes one plan. Open plans of other repositories are resumed after.
    /// With `--bus`, the rollouts go to the fleet's hosts, each send's grants issued first.
    ///
    /// Exit codes: 0 the plan is done (or was already made, or `--plan-only`); 1 error (a
    /// dependency cycle among the affected modules is named; no plan is made); 3 the plan
    /// stopped (a build failed, or a rollout stopped at a node: `status` says where and why).
    Merge {
        /// The repository.
        repo: String,
        /// The merged commit (default: the head of the repository's branch).
        #[arg(long)]
        commit: Option<String>,
        /// Make the plan and stop there: nothing is built or sent until `plans resume`,
        /// `build --behind`, `push --behind` or the next merge.
        #[arg(long)]
        plan_only: bool,
        /// Send a module's nodes whose running container would get another host directory at
        /// a mount (its data moving); without it the rollout holds such a node, names module,
        /// mount and both directories, and goes on with the others. Repeatable.
        #[arg(long = "move", value_name = "MODULE")]
        moves: Vec<String>,
    },
    /// Builds modules into the store: each at the commit of the newest open plan naming it
    /// (for that plan), else at its repository's last planned commit.
    ///
    /// A build is published held by its manifest and recorded; it is rolled out only by a
    /// plan. `--dry-run` archives and prints the digest: nothing is published or recorded and
    /// nothing can send it.
    ///
    /// Exit codes: 0 built; 1 error (a module that does not validate is named with every
    /// problem; no registered repository holds it).
    Build {
        /// The modules.
        #[arg(required_unless_present = "behind")]
        modules: Vec<String>,
        /// Build what the open plans have yet to build (the list `status` calls behind).
        #[arg(long, conflicts_with = "modules")]
        behind: bool,
        /// Archive and print the digest only.
        #[arg(long, conflicts_with = "behind")]
        dry_run: bool,
    },
    /// Lists the plans; `plans show`, `plans close`, `plans resume`.
    ///
    /// Exit codes: 0 success; 1 error (no such plan; closing or resuming a plan that is not
    /// open); 3 `plans resume` left a plan stopped.
    Plans {
        /// What to do (default: list every plan).
        #[command(subcommand)]
        command: Option<PlansCommand>,
    },
    /// Reads and replaces settings layers; every replaced layer is kept.
    #[command(subcommand)]
    Settings(SettingsCommand),
    /// Runs init, plan, push and status in a temporary home, explaining each step.
    Demo,
    /// Prints shell completions on standard output, e.g.
    /// `mesh-controller completions bash > /usr/share/bash-completion/completions/mesh-controller`.
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Prints the manual page (roff) on standard output, e.g. `mesh-controller man | man -l -`; with
    /// `--dir DIR`, writes one page per command and subcommand there and lists them.
    Man {
        /// Where to write every page (`mesh-controller.1`, `mesh-controller-COMMAND.1`, …).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Runs the controller as a daemon on a fleet (needs `--bus`).
    ///
    /// It makes the mesh's streams, answers discovery, and plans each merge announced on the
    /// bus, heard once however often it is announced, then builds and rolls out the open plans
    /// to the fleet's hosts (as `merge NAME --commit C` would); open plans left mid-rollout are
    /// driven on when it starts. SIGTERM or SIGINT stop it, mid-rollout too (the plan resumes
    /// where it was).
    ///
    /// With `--http ADDR` it also serves a read-only status page at `/`, the Prometheus
    /// text format at `/metrics` and `/status.json` (the document `status --output json`
    /// prints), and prints the page's URL on standard output once it listens.
    ///
    /// Exit codes: 0 stopped by a signal; 1 error (the bus cannot be reached; the status page's
    /// address refused or taken, its certificate or key unreadable).
    Serve {
        /// Serve the status page, `/metrics` and `/status.json` on this address, e.g.
        /// `127.0.0.1:9480` (port 0 picks a free one). Only a loopback address, unless
        /// `--http-cert` (TLS) or `--http-public` is given.
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
        /// Serve the status page over HTTPS with this certificate chain (PEM; needs
        /// `--http-key`), e.g. the bus server's.
        #[arg(long, value_name = "FILE", requires_all = ["http", "http_key"])]
        http_cert: Option<PathBuf>,
        /// The key of `--http-cert` (PEM, mode 0600: refused when others may read it).
        #[arg(long, value_name = "FILE", requires = "http_cert")]
        http_key: Option<PathBuf>,
        /// Answer only HTTPS clients presenting a certificate signed by this CA (PEM), e.g. the
        /// bus's `--bus-ca`.
        #[arg(long, value_name = "FILE", requires = "http_cert")]
        http_client_ca: Option<PathBuf>,
        /// Serve a non-loopback `--http` address in the clear, without TLS: anyone who reaches
        /// it reads the fleet's status.
        #[arg(long, requires = "http")]
        http_public: bool,
        /// For the status page: seconds without a report after which a node is called silent
        /// (as `status --silent-after`).
        #[arg(long, value_name = "SECS", default_value_t = mesh_controller::push::SILENT_AFTER_SECS)]
        silent_after: u64,
    },
    /// Asks the bus who is there (needs `--bus`).
    ///
    /// Lists each runtime with its answer time, size and modules, the runtimes that said they
    /// are there and not what they serve, and the nodes no runtime answered for. Waits at least
    /// 750 ms, and up to 5 s for every runtime that said it is there.
    ///
    /// Against the inventory: a module assigned to a heard node that its host does not serve is
    /// "missing on <node>"; a module a host serves that is assigned only to other nodes is
    /// "running elsewhere". While a node's runtime is not heard, nothing is said of its modules
    /// but that they are not known.
    ///
    /// Exit codes: 0 every node heard, each serving what the inventory assigns it; 2 a module
    /// missing or running elsewhere (whether or not some runtime was also not heard); 3 some
    /// runtime or node not heard, and nothing missing or elsewhere among those heard; 1 error.
    Runtimes,
    /// Looks after the bus (needs `--bus`, except `users`).
    #[command(subcommand)]
    Broker(BrokerCommand),
    /// The fleet's nodes and how they prove themselves to the bus.
    #[command(subcommand)]
    Node(NodeCommand),
    /// Where the controller's records are (needs `--bus`).
    ///
    /// Without `--bus` the records (inventory, settings and their history, what was sent,
    /// reports, plans, builds, repositories, the nodes' bus passwords) are files under the
    /// home; with `--bus` they are the bus's records bucket, so a controller restarted or
    /// started on another machine resumes from them.
    #[command(subcommand)]
    Records(RecordsCommand),
}

/// `node` subcommands.
#[derive(Subcommand)]
pub enum NodeCommand {
    /// Enrolls a node's NKey: PUBLIC-KEY is what `mesh-host keygen` printed on that node (its
    /// seed never leaves it). The key is recorded, the node's bus password dropped from the
    /// records, and the next push sends the bus users naming the node by its key (no secret);
    /// from then on its host signs with its seed (`mesh-host serve` without
    /// `--password-file`). Enrolling a node again replaces its key, and says so.
    ///
    /// Exit codes: 0 enrolled; 1 error (not a node of the mesh, not an NKey user public key,
    /// a seed given by mistake: nothing was changed).
    Enroll {
        /// The node.
        node: String,
        /// Its NKey user public key (`U…`, 56 characters).
        public_key: String,
    },
}

/// `records` subcommands.
#[derive(Subcommand)]
pub enum RecordsCommand {
    /// Moves the home's records onto the bus (`--bus`): every record is copied, the inventory
    /// last, and the home is marked as moved, so a later command on it without `--bus` is
    /// refused rather than reading records no longer kept. The catalogue, sandbox roots and
    /// the controller's own password stay in the home.
    ///
    /// Exit codes: 0 copied; 1 error (the bus already holds a mesh: nothing was copied; a
    /// record could not be copied: run it again).
    Import,
    /// Lists the records one level under DIR (default: the top), as a directory would.
    List {
        /// The directory, e.g. `plans` or `settings/web`.
        #[arg(default_value = "")]
        dir: String,
    },
    /// Removes the declarations no record names any more: each is kept once by its digest,
    /// and kept while what a node was last sent, or an open plan's rollout (what a node is
    /// sent, what it ran before, what it was sent back), names it. One written within the
    /// grace is kept all the same (a push writes it before the record naming it). Also removes
    /// the chunks of replaced records on a fleet's bus. Says how many were removed and their
    /// bytes. Waits while a plan is being driven.
    ///
    /// Exit codes: 0 collected; 1 error (a record could not be read: nothing was removed).
    Collect {
        /// Keep what no record names when it was written less than this many minutes ago.
        #[arg(long, value_name = "MINUTES", default_value_t = 10)]
        grace_minutes: u64,
    },
    /// Prints one record, e.g. `inventory.toml` or `plans/plan-3.json`.
    ///
    /// Exit codes: 0 printed; 1 error (no such record).
    Get {
        /// The record's key.
        key: String,
    },
    /// Replaces the inventory (`inventory.toml`) with FILE (`-`: standard input) — on a fleet
    /// the way to edit it, as the file under the home is edited without `--bus`. The new
    /// inventory must read as one; a node added, removed or re-assigned reaches the fleet
    /// with the next push or rollout. Settings layers are changed with `settings set`.
    ///
    /// With `--base` (the inventory as `records get` gave it when the edit began) the put is
    /// compare-and-set: refused, nothing changed, when another operator changed the
    /// inventory since.
    ///
    /// Exit codes: 0 replaced; 1 error (not an inventory: nothing was changed); 2 refused:
    /// the inventory is no longer `--base` (nothing was changed: read it again, edit, put).
    Put {
        /// The record's key: `inventory.toml`.
        key: String,
        /// The file holding the new record, or `-` for standard input.
        file: PathBuf,
        /// The inventory the edit started from: the put goes ahead only while the inventory
        /// is still exactly this.
        #[arg(long, value_name = "FILE")]
        base: Option<PathBuf>,
    },
}

/// `broker` subcommands.
#[derive(Subcommand)]
pub enum BrokerCommand {
    /// Re-makes a stuck durable consumer from now, every other setting kept; afterwards
    /// nothing is pending. Restart the process reading it afterwards.
    ///
    /// Exit codes: 0 reset; 2 refused: the stream is a work queue, whose pending messages are
    /// work to do; 1 error (no such stream or consumer).
    ConsumerReset {
        /// The stream, e.g. `MESH_EVENTS`.
        stream: String,
        /// The durable consumer, e.g. `controller`.
        consumer: String,
    },
    /// Lists the mesh's streams and key-value buckets (records, module state) with fewer
    /// copies than it keeps (`--bus-replicas`, the record of it, or 1 on a single server and 3
    /// on a cluster). Changes nothing.
    ///
    /// Exit codes: 0 every stream has its copies; 3 some have fewer (a person raises them with
    /// `broker raise-replicas`); 1 error.
    Replicas,
    /// Raises the named streams (`MESH_DECLARATIONS`, `KV_mesh-records`, …; default: every one
    /// `broker replicas` lists) to the copies the mesh keeps, every other setting kept; never
    /// lowers. The new copies catch up from the existing one while the stream takes writes.
    RaiseReplicas {
        /// The streams (a bucket's is `KV_<bucket>`).
        streams: Vec<String>,
    },
    /// Prints the bus's users (the server's `authorization` block) as the next push would send
    /// them to the node holding the bus: to start its server with the first time. Makes each
    /// node's password if it has none (with `--bus` in the records on the bus, else under
    /// `<home>/bus/passwords/`).
    Users,
    /// Makes the controller's NKey seed (`<home>/bus/nkey.seed`, mode 0600; it stays on this
    /// machine) or shows the one there, and prints its public key: the next push puts the key
    /// in the bus's users instead of the controller's password, and the controller signs with
    /// the seed from then on.
    Keygen,
    /// Prints a node's bus password, for its host's `--password-file` (made if it has none);
    /// refused for a node enrolled with an NKey, which has none.
    Password {
        /// The node.
        node: String,
    },
}

/// `repo` subcommands.
#[derive(Subcommand)]
pub enum RepoCommand {
    /// Registers a git repository of modules (`modules/<name>/module.toml`).
    ///
    /// Exit codes: 0 registered; 1 error (not a git repository, no such branch, a repository of
    /// that name already registered).
    Add {
        /// The name merges use.
        name: String,
        /// Where the repository is.
        path: PathBuf,
        /// The branch merges are heard on (default: the repository's current branch).
        #[arg(long)]
        branch: Option<String>,
        /// The directory holding the module directories, relative to the repository's root.
        #[arg(long, default_value = "modules")]
        modules_dir: String,
    },
    /// Lists the registered repositories and their last planned commits.
    List,
}

/// `plans` subcommands.
#[derive(Subcommand)]
pub enum PlansCommand {
    /// Lists every plan (the default).
    List,
    /// Shows one plan: what changed, its tiers, each module's build and rollout.
    Show {
        /// The plan's id (`plan-3`).
        id: String,
        /// Instead, what its rollouts would do across the fleet (as `merge --plan-only`
        /// answers): per tier and module the first machine, each node that changes and how,
        /// the nodes held for a move or in a window, and those unchanged. Reads only; sends
        /// nothing.
        #[arg(long)]
        preview: bool,
    },
    /// Closes an open plan by hand; it is never resumed.
    Close {
        /// The plan's id.
        id: String,
        /// Why, kept in the plan.
        #[arg(long, default_value = "")]
        note: String,
    },
    /// Drives the open plans (or one) on from where they stand: a controller stopped
    /// mid-rollout resumes here (with `--bus`, on the fleet's hosts).
    Resume {
        /// Only this plan.
        id: Option<String>,
        /// Send the nodes of MODULE held because its running container's data would move
        /// (see `status`). Repeatable.
        #[arg(long = "move", value_name = "MODULE")]
        moves: Vec<String>,
    },
}

/// `settings` subcommands.
#[derive(Subcommand)]
pub enum SettingsCommand {
    /// Prints a layer as it is (JSON); with `--history`, every earlier layer too.
    Show {
        /// The module.
        module: String,
        /// The node's layer (default: the mesh layer).
        #[arg(long)]
        node: Option<String>,
        /// Also print every layer it replaced, newest first, with when and by which command.
        #[arg(long)]
        history: bool,
    },
    /// Replaces a layer whole with JSON, answering with the keys added, changed and removed.
    ///
    /// A set that would remove any key is refused (nothing changes, exit 2) unless
    /// `--replace`. A set that only adds or changes keys needs nothing. The replaced layer is
    /// kept in the history.
    Set {
        /// The module.
        module: String,
        /// The new layer, a JSON object (e.g. '{"port": 8097}').
        json: String,
        /// The node's layer (default: the mesh layer).
        #[arg(long)]
        node: Option<String>,
        /// Allow the new layer to remove keys.
        #[arg(long)]
        replace: bool,
    },
    /// Removes a layer; it is kept in the history like a set.
    Clear {
        /// The module.
        module: String,
        /// The node's layer (default: the mesh layer).
        #[arg(long)]
        node: Option<String>,
    },
    /// Puts back a layer from the history (`settings show --history` lists revisions).
    Restore {
        /// The module.
        module: String,
        /// The revision to put back.
        revision: u64,
        /// The node's layer (default: the mesh layer).
        #[arg(long)]
        node: Option<String>,
    },
}

/// Progress lines as the binary prints them: on standard output for text, on standard error
/// when standard output carries JSON. On a terminal (standard error, text output, `NO_COLOR`
/// unset or not), a rollout also draws a bar on standard error: the plan and module, nodes
/// applied of all, and the machine awaited while it goes first, with the time it has taken.
struct Lines {
    to_stderr: bool,
    /// The bar of the module rolling out, when a bar is drawn.
    bar: Option<std::sync::Mutex<Option<(String, indicatif::ProgressBar)>>>,
}

impl Lines {
    fn new(output: Output) -> Lines {
        use std::io::IsTerminal as _;
        let drawn = output == Output::Text && std::io::stderr().is_terminal();
        Lines {
            to_stderr: output == Output::Json,
            bar: drawn.then(|| std::sync::Mutex::new(None)),
        }
    }
}

impl mesh_controller::Progress for Lines {
    fn line(&self, text: &str) {
        if let Some(bar) = &self.bar {
            if let Some((_, bar)) = bar.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                bar.suspend(|| println!("{text}"));
                return;
            }
        }
        if self.to_stderr {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    }

    fn rollout(&self, at: &mesh_controller::RolloutProgress) {
        let Some(slot) = &self.bar else {
            return;
        };
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        let key = format!("{} {}", at.plan, at.module);
        if slot.as_ref().is_none_or(|(k, _)| *k != key) {
            if let Some((_, old)) = slot.take() {
                old.finish_and_clear();
            }
            let bar = indicatif::ProgressBar::with_draw_target(
                Some(at.total as u64),
                indicatif::ProgressDrawTarget::stderr(),
            );
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{prefix} [{bar:30}] {pos}/{len} applied {msg} ({elapsed})",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_prefix(if at.module.is_empty() {
                format!("{}: nodes", at.plan)
            } else {
                format!("{} `{}`", at.plan, at.module)
            });
            bar.enable_steady_tick(std::time::Duration::from_millis(500));
            *slot = Some((key, bar));
        }
        let Some((_, bar)) = slot.as_ref() else {
            return;
        };
        bar.set_length(at.total as u64);
        bar.set_position(at.applied as u64);
        let mut message = match &at.waiting_on {
            Some(node) => format!("waiting on `{node}`, going first"),
            None if at.in_flight > 0 && at.module.is_empty() => {
                format!("{} not yet heard", at.in_flight)
            }
            None if at.in_flight > 0 => format!("{} in flight", at.in_flight),
            None => String::new(),
        };
        if at.held > 0 {
            message.push_str(&format!(", {} held for a move", at.held));
        }
        bar.set_message(message);
        if matches!(at.stage, "done" | "stopped" | "held") {
            if let Some((_, bar)) = slot.take() {
                bar.finish_and_clear();
            }
        }
    }
}

fn main() -> ExitCode {
    // The permission probe's logins refused on purpose are async-nats's errors: not ours.
    let filter = tracing_subscriber::EnvFilter::try_from_env("MESH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error,async_nats::connector=off"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(mesh_host::log_in_colour())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(1)
        }
    }
}

/// `status --watch` (rule 27): the overview again on every report heard on the bus.
fn watch_status(
    home: &mesh_controller::home::Home,
    bus: Option<&fleet::BusArgs>,
    silent_after: u64,
    output: Output,
) -> Result<ExitCode> {
    use std::io::{IsTerminal as _, Write as _};
    let Some(bus) = bus else {
        eprintln!(
            "status --watch hears the reports hosts publish on a fleet's bus: give --bus URL \
             (the embedded default has no bus to hear; run `status` after a push)"
        );
        return Ok(ExitCode::from(2));
    };
    let watch = status::ReportWatch::open(home, bus)?;
    let terminal = std::io::stdout().is_terminal();
    let mut last: Option<status::Overview> = None;
    loop {
        let now = mesh_host::now();
        let overview = status::overview(home, now, silent_after)?;
        let mut out = std::io::stdout().lock();
        match output {
            Output::Json => writeln!(out, "{}", serde_json::to_string(&overview)?)?,
            Output::Text if terminal => {
                // Home, clear, then the status as `status` prints it.
                write!(out, "\x1b[H\x1b[2J{}", render::status(&overview))?;
            }
            Output::Text => {
                for line in status::changes(last.as_ref(), &overview) {
                    writeln!(out, "{now} {line}")?;
                }
            }
        }
        out.flush()?;
        drop(out);
        last = Some(overview);
        watch.next(std::time::Duration::from_secs(5))?;
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    // What documents the command line needs no home.
    match &cli.command {
        Command::Completions { shell } => {
            cli_docs::print_completions(*shell, Cli::command())
                .context("writing the completions")?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Man { dir } => {
            cli_docs::man(Cli::command(), dir.as_deref()).context("writing the manual pages")?;
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }
    let bus_args = |url: String| fleet::BusArgs {
        url,
        password_file: cli.bus_password_file.clone(),
        seed_file: cli.bus_seed.clone(),
        tls: mesh_bus::BusTls {
            ca_file: cli.bus_ca.clone(),
            client_certificate: match (&cli.bus_cert, &cli.bus_key) {
                (Some(cert_file), Some(key_file)) => Some(mesh_bus::ClientCertificate {
                    cert_file: cert_file.clone(),
                    key_file: key_file.clone(),
                }),
                _ => None,
            },
        },
        store_access: mesh_store::store::StoreAccess {
            ca_file: cli.store_ca.clone(),
            credentials_file: cli.store_credentials.clone(),
        },
        replicas: cli.bus_replicas,
    };
    let bus = cli.bus.clone().map(bus_args);
    if let (Command::Init { .. }, Some(bus)) = (&cli.command, &bus) {
        bail!(
            "`init` makes a mesh home on this machine, not on a bus; make it without --bus, then \
             move its records with `mesh-controller --home {} --bus {} records import`",
            cli.home.display(),
            bus.url
        );
    }
    let home = records::open_home(&cli.home, bus.as_ref())?;
    let output = cli.output;
    let store_spec: mesh_store::store::StoreSpec = match &cli.store {
        Some(spec) => spec.parse().with_context(|| format!("--store {spec}"))?,
        None => mesh_store::store::default_store_spec(home.root()),
    };
    let store = mesh_store::store::open_store_with(
        &store_spec,
        &mesh_store::store::StoreAccess {
            ca_file: cli.store_ca.clone(),
            credentials_file: cli.store_credentials.clone(),
        },
    )
    .with_context(|| format!("opening the store {store_spec}"))?;
    let runtime = tokio::runtime::Runtime::new()?;
    let need_bus = || {
        bus.clone()
            .context("this command talks to a fleet's bus: give --bus URL (or MESH_BUS)")
    };
    let moves = match &cli.command {
        Command::Push { moves, .. }
        | Command::Merge { moves, .. }
        | Command::Plans {
            command: Some(PlansCommand::Resume { moves, .. }),
        } => moves.iter().cloned().collect(),
        _ => std::collections::BTreeSet::new(),
    };
    let progress = Lines::new(output);
    let ctx = plans::Ctx {
        home: &home,
        store: store.as_ref(),
        progress: &progress,
        bus: bus.clone(),
        moves,
        fleet: None,
    };
    let checked = || -> Result<push::Checked> {
        home.require()?;
        Ok(runtime.block_on(builds::effective_catalogue(&home, store.as_ref()))?)
    };
    let command = cli.command;
    let done = (|| -> Result<ExitCode> {
        match command {
            Command::Init { example } => {
                init::init(&home, example)?;
                println!("made a mesh home at {}", home.root().display());
                Ok(ExitCode::SUCCESS)
            }
            Command::Check => {
                let problems = push::problems(&home, &checked()?)?;
                print_problems(output, &problems)?;
                Ok(if problems.is_empty() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                })
            }
            Command::Plan {
                node,
                diff: true,
                detailed_exitcode,
            } => {
                let mut declaration = push::compose_node(&home, &checked()?, &node)?;
                let sent = home.sent(&node)?;
                // On a fleet the bus node is also sent the bus's users: they are not the modules'
                // doing, `broker users` shows them, and this diff compares what the modules
                // change — so the file it was sent is carried over, not shown gone.
                if let Some(sent) = &sent {
                    declaration = fleet::with_users_file_of(declaration, sent);
                }
                let diff = mesh_plan::diff(sent.as_ref(), &declaration);
                match output {
                    Output::Json => println!("{}", serde_json::to_string_pretty(&diff)?),
                    Output::Text => print!("{}", diff.render_text()),
                }
                Ok(if detailed_exitcode && !diff.is_empty() {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                })
            }
            Command::Plan { node, .. } => {
                let declaration = push::compose_node(&home, &checked()?, &node)?;
                match output {
                    Output::Json => println!("{}", serde_json::to_string_pretty(&declaration)?),
                    Output::Text => print!("{}", render::declaration(&declaration)),
                }
                Ok(ExitCode::SUCCESS)
            }
            Command::Push { behind: true, .. } => {
                let plans = runtime.block_on(plans::drive_open(
                    &ctx,
                    None,
                    plans::DriveMode::RolloutOnly,
                ))?;
                print_plans_driven(output, &plans)
            }
            Command::Push {
                nodes,
                all,
                moves,
                timeout,
                behind: false,
            } => {
                let inventory = home.inventory()?;
                let nodes = if all {
                    inventory.file.nodes.keys().cloned().collect()
                } else if nodes.is_empty() {
                    eprintln!(
                        "error: push names no node; name the nodes (`push home laptop`) or say `--all`"
                    );
                    return Ok(ExitCode::from(2));
                } else {
                    nodes
                };
                let checked = checked()?;
                let results = runtime.block_on(async {
                    let mut fleet = plans::start_fleet(&ctx).await?;
                    executor::push_telling(
                        &home,
                        fleet.as_mut(),
                        &checked,
                        &nodes,
                        &moves.into_iter().collect(),
                        std::time::Duration::from_secs(timeout),
                        &progress,
                    )
                    .await
                })?;
                match output {
                    Output::Json => println!("{}", serde_json::to_string_pretty(&results)?),
                    Output::Text => print!("{}", render::push(&results)),
                }
                Ok(push_exit_code(&results))
            }
            Command::Status {
                silent_after,
                watch: true,
            } => watch_status(&home, bus.as_ref(), silent_after, output),
            Command::Status {
                silent_after,
                watch: false,
            } => {
                let status = status::overview(&home, mesh_host::now(), silent_after)?;
                match output {
                    Output::Json => print!("{}", status.json_document()?),
                    Output::Text => print!("{}", render::status(&status)),
                }
                Ok(if status.needs_attention() {
                    ExitCode::from(3)
                } else {
                    ExitCode::SUCCESS
                })
            }
            Command::Settings(command) => {
                let now = mesh_host::now();
                let (catalogue, _) = checked()?;
                let command_line = settings::invoked_command();
                let on = settings::On {
                    home: &home,
                    catalogue: &catalogue,
                    command: &command_line,
                };
                let answer = match command {
                    SettingsCommand::Show {
                        module,
                        node,
                        history,
                    } => {
                        let shown = settings::show(&on, &module, node.as_deref(), history)?;
                        match output {
                            Output::Json => println!("{}", serde_json::to_string_pretty(&shown)?),
                            Output::Text => print!("{}", render::settings_shown(&shown)?),
                        }
                        return Ok(ExitCode::SUCCESS);
                    }
                    SettingsCommand::Set {
                        module,
                        json,
                        node,
                        replace,
                    } => settings::set(&on, &module, node.as_deref(), &json, replace, now)?,
                    SettingsCommand::Clear { module, node } => {
                        settings::clear(&on, &module, node.as_deref(), now)?
                    }
                    SettingsCommand::Restore {
                        module,
                        revision,
                        node,
                    } => settings::restore(&on, &module, node.as_deref(), revision, now)?,
                };
                match output {
                    Output::Json => println!("{}", serde_json::to_string_pretty(&answer)?),
                    Output::Text => print!("{}", render::settings_answer(&answer)),
                }
                Ok(if answer.refused() {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                })
            }
            Command::Demo => demo::run(),
            Command::Completions { .. } | Command::Man { .. } => Ok(ExitCode::SUCCESS),
            Command::Serve {
                http: address,
                http_cert,
                http_key,
                http_client_ca,
                http_public,
                silent_after,
            } => {
                home.require()?;
                let bus = need_bus()?;
                runtime.block_on(async {
                    // The pages share the home's records (dropped with it, after the runtime).
                    let pages = match address {
                        Some(addr) => {
                            let listen = http::Listen {
                                addr,
                                tls: match (http_cert, http_key) {
                                    (Some(cert_file), Some(key_file)) => Some(http::Tls {
                                        cert_file,
                                        key_file,
                                        client_ca_file: http_client_ca,
                                    }),
                                    _ => None,
                                },
                                public: http_public,
                            };
                            let bound = http::bind(&listen).await?;
                            println!("serving the status page on {}", bound.url());
                            let pages =
                                std::sync::Arc::new(http::Pages::new(home.clone(), silent_after));
                            Some(tokio::spawn(http::serve(
                                bound,
                                pages,
                                std::future::pending(),
                            )))
                        }
                        None => None,
                    };
                    let served =
                        daemon::serve(&ctx, &bus, mesh_host::serve::shutdown_signal()).await;
                    if let Some(pages) = pages {
                        pages.abort();
                    }
                    served
                })?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Runtimes => {
                home.require()?;
                let found = runtime.block_on(runtimes::runtimes(&home, &need_bus()?))?;
                match output {
                    Output::Json => println!("{}", serde_json::to_string_pretty(&found)?),
                    Output::Text => print!("{}", render::runtimes(&found)),
                }
                Ok(ExitCode::from(runtimes::runtimes_exit_code(&found)))
            }
            Command::Broker(BrokerCommand::ConsumerReset { stream, consumer }) => {
                let reset = runtime.block_on(broker::consumer_reset(
                    &home,
                    &need_bus()?,
                    &stream,
                    &consumer,
                ))?;
                match reset {
                    Ok(line) => {
                        match output {
                            Output::Json => println!("{}", serde_json::to_string_pretty(&line)?),
                            Output::Text => println!(
                                "consumer `{consumer}` on `{stream}` made again from now: {} pending \
                                 before ({} delivered and unacknowledged), {} now",
                                line.pending_before, line.ack_pending_before, line.pending_after
                            ),
                        }
                        Ok(ExitCode::SUCCESS)
                    }
                    Err(refused) => {
                        eprintln!("error: {refused}; nothing was changed");
                        Ok(ExitCode::from(2))
                    }
                }
            }
            Command::Broker(BrokerCommand::Password { node }) => {
                push::require_node(&home.inventory()?, &node)?;
                println!("{}", fleet::node_password(&home, &node)?);
                Ok(ExitCode::SUCCESS)
            }
            Command::Broker(BrokerCommand::Keygen) => {
                let made = fleet::controller_keygen(&home)?;
                match output {
                    Output::Json => println!(
                        "{}",
                        serde_json::to_string_pretty(&serde_json::json!({
                            "seed_file": made.path,
                            "public_key": made.public_key,
                            "made": made.made,
                        }))?
                    ),
                    Output::Text => {
                        println!("{}", made.public_key);
                        eprintln!(
                            "seed {} ({}; mode 0600, it stays on this machine)",
                            made.path.display(),
                            if made.made {
                                "made"
                            } else {
                                "already there, kept"
                            }
                        );
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
            Command::Node(NodeCommand::Enroll { node, public_key }) => {
                home.require()?;
                let enrolled = mesh_controller::enroll::enroll(&home, &node, &public_key)?;
                match output {
                    Output::Json => println!("{}", serde_json::to_string_pretty(&enrolled)?),
                    Output::Text => print!("{}", render::enrolled(&enrolled)),
                }
                Ok(ExitCode::SUCCESS)
            }
            Command::Records(RecordsCommand::Import) => {
                let bus = need_bus()?;
                let imported = records::import(&cli.home, &home, &bus.url)?;
                match output {
                    Output::Json => println!("{}", serde_json::to_string_pretty(&imported)?),
                    Output::Text => println!(
                        "copied {} records from {} to {}; the home is marked as moved: give \
                         --bus {} with every command on it from now on",
                        imported.keys.len(),
                        imported.home,
                        imported.records,
                        bus.url
                    ),
                }
                Ok(ExitCode::SUCCESS)
            }
            Command::Records(RecordsCommand::List { dir }) => {
                home.require()?;
                let names = home.records().list(dir.trim_end_matches('/'))?;
                match output {
                    Output::Json => println!("{}", serde_json::to_string_pretty(&names)?),
                    Output::Text => names.iter().for_each(|name| println!("{name}")),
                }
                Ok(ExitCode::SUCCESS)
            }
            Command::Records(RecordsCommand::Collect { grace_minutes }) => {
                let collected = records::collect_declarations(
                    &home,
                    mesh_host::now(),
                    std::time::Duration::from_secs(grace_minutes.saturating_mul(60)),
                )?;
                match output {
                    Output::Json => println!("{}", serde_json::to_string_pretty(&collected)?),
                    Output::Text => print!("{}", render::declarations_collected(&collected)),
                }
                Ok(ExitCode::SUCCESS)
            }
            Command::Records(RecordsCommand::Get { key }) => {
                home.require()?;
                let bytes = home.get(&key)?.with_context(|| {
                    format!("there is no record {}", home.records().locate(&key))
                })?;
                use std::io::Write as _;
                std::io::stdout().write_all(&bytes)?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Records(RecordsCommand::Put { key, file, base }) => {
                match records::put_by_hand(&home, &key, &file, base.as_deref())? {
                    records::PutOutcome::Replaced => {
                        println!("replaced {}", home.records().locate(&key));
                        Ok(ExitCode::SUCCESS)
                    }
                    records::PutOutcome::BaseChanged => {
                        println!(
                            "refused: {} is no longer the inventory --base holds (it was changed \
                             since); nothing was changed: read it again with `records get {key}`, \
                             make the edit on that, and put it again",
                            home.records().locate(&key)
                        );
                        Ok(ExitCode::from(2))
                    }
                }
            }
            Command::Broker(BrokerCommand::Replicas) => {
                let answer = runtime.block_on(broker::replicas(&home, &need_bus()?))?;
                match output {
                    Output::Json => println!("{}", serde_json::to_string_pretty(&answer)?),
                    Output::Text => print!("{}", render::replicas(&answer)),
                }
                Ok(if answer.short.is_empty() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(3)
                })
            }
            Command::Broker(BrokerCommand::RaiseReplicas { streams }) => {
                let raised =
                    runtime.block_on(broker::raise_replicas(&home, &need_bus()?, &streams))?;
                match output {
                    Output::Json => println!("{}", serde_json::to_string_pretty(&raised)?),
                    Output::Text => print!("{}", render::raised_replicas(&raised)),
                }
                Ok(ExitCode::SUCCESS)
            }
            Command::Broker(BrokerCommand::Users) => {
                let checked = checked()?;
                let local = bus.clone().unwrap_or_else(|| bus_args(String::new()));
                print!("{}", fleet::users_text(&home, &checked, &local)?);
                Ok(ExitCode::SUCCESS)
            }
            Command::Repo(RepoCommand::Add {
                name,
                path,
                branch,
                modules_dir,
            }) => {
                let record = repos::add(&home, &name, &path, branch.as_deref(), &modules_dir)?;
                match output {
                    Output::Json => println!("{}", serde_json::to_string_pretty(&record)?),
                    Output::Text => println!(
                        "registered `{}`: {} branch {} (modules in `{}/`); its first merge plans every module",
                        record.name,
                        record.path.display(),
                        record.branch,
                        record.modules_dir
                    ),
                }
                Ok(ExitCode::SUCCESS)
            }
            Command::Repo(RepoCommand::List) => {
                let repos = home.repos()?;
                match output {
                    Output::Json => println!("{}", serde_json::to_string_pretty(&repos)?),
                    Output::Text if repos.is_empty() => {
                        println!("no repositories; `repo add NAME PATH` registers one")
                    }
                    Output::Text => {
                        for repo in repos {
                            println!(
                                "{}: {} branch {}, last planned {}",
                                repo.name,
                                repo.path.display(),
                                repo.branch,
                                repo.last_planned
                                    .as_deref()
                                    .map_or("never", builds::short_commit)
                            );
                        }
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
            Command::Merge {
                repo,
                commit,
                plan_only,
                ..
            } => {
                home.require()?;
                let outcome =
                    runtime.block_on(plans::merge(&ctx, &repo, commit.as_deref(), plan_only))?;
                // With --plan-only, what the plan's rollouts would do across the fleet.
                let preview = match (&outcome, plan_only) {
                    (plans::MergeOutcome::Planned { plan, .. }, true) => {
                        let record = home.plan(&plan.id)?;
                        Some(runtime.block_on(preview::preview(&ctx, &record))?)
                    }
                    _ => None,
                };
                match output {
                    Output::Json => {
                        let mut value = serde_json::to_value(&outcome)?;
                        if let (Some(preview), Some(object)) = (&preview, value.as_object_mut()) {
                            object.insert("preview".to_owned(), serde_json::to_value(preview)?);
                        }
                        println!("{}", serde_json::to_string_pretty(&value)?);
                    }
                    Output::Text => {
                        print!("{}", render::merge(&outcome));
                        if let Some(preview) = &preview {
                            print!("{}", render::preview(preview));
                        }
                    }
                }
                Ok(match &outcome {
                    plans::MergeOutcome::Planned { plan, .. }
                        if matches!(plan.state, mesh_model::plan::PlanState::Stopped { .. }) =>
                    {
                        ExitCode::from(3)
                    }
                    plans::MergeOutcome::Planned { .. }
                    | plans::MergeOutcome::AlreadyPlanned { .. } => ExitCode::SUCCESS,
                })
            }
            Command::Build {
                modules,
                behind: true,
                ..
            } => {
                debug_assert!(modules.is_empty());
                home.require()?;
                let plans =
                    runtime.block_on(plans::drive_open(&ctx, None, plans::DriveMode::BuildOnly))?;
                print_plans_driven(output, &plans)
            }
            Command::Build {
                modules,
                behind: false,
                dry_run,
            } => {
                home.require()?;
                let built = runtime.block_on(plans::build_named(&ctx, &modules, dry_run))?;
                match output {
                    Output::Json => println!("{}", serde_json::to_string_pretty(&built)?),
                    Output::Text => print!("{}", render::builds(&built, dry_run)),
                }
                Ok(ExitCode::SUCCESS)
            }
            Command::Plans { command } => match command.unwrap_or(PlansCommand::List) {
                PlansCommand::List => {
                    let plans = home.plans()?;
                    match output {
                        Output::Json => {
                            let plans: Vec<_> = plans.into_iter().map(|p| p.plan).collect();
                            println!("{}", serde_json::to_string_pretty(&plans)?)
                        }
                        Output::Text => print!("{}", render::plans_list(&plans)),
                    }
                    Ok(ExitCode::SUCCESS)
                }
                PlansCommand::Show { id, preview: true } => {
                    home.require()?;
                    let record = home.plan(&id)?;
                    let preview = runtime.block_on(preview::preview(&ctx, &record))?;
                    match output {
                        Output::Json => println!("{}", serde_json::to_string_pretty(&preview)?),
                        Output::Text => print!("{}", render::preview(&preview)),
                    }
                    Ok(ExitCode::SUCCESS)
                }
                PlansCommand::Show { id, preview: false } => {
                    let record = home.plan(&id)?;
                    match output {
                        Output::Json => println!("{}", serde_json::to_string_pretty(&record)?),
                        Output::Text => print!("{}", render::plan_show(&record)),
                    }
                    Ok(ExitCode::SUCCESS)
                }
                PlansCommand::Close { id, note } => {
                    let record = plans::close(&home, &id, &note)?;
                    match output {
                        Output::Json => println!("{}", serde_json::to_string_pretty(&record.plan)?),
                        Output::Text => print!("{}", render::plan_summary(&record.plan)),
                    }
                    Ok(ExitCode::SUCCESS)
                }
                PlansCommand::Resume { id, .. } => {
                    home.require()?;
                    let plans = runtime.block_on(plans::drive_open(
                        &ctx,
                        id.as_deref(),
                        plans::DriveMode::All,
                    ))?;
                    print_plans_driven(output, &plans)
                }
            },
        }
    })();
    // Records read in an older format were migrated on the way: say so, once.
    for note in home.take_migrations() {
        eprintln!("note: {note}");
    }
    done
}

fn print_plans_driven(output: Output, plans: &[mesh_model::plan::Plan]) -> Result<ExitCode> {
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(plans)?),
        Output::Text if plans.is_empty() => println!("no open plans"),
        Output::Text => {
            for plan in plans {
                print!("{}", render::plan_summary(plan));
            }
        }
    }
    let stopped = plans
        .iter()
        .any(|p| matches!(p.state, mesh_model::plan::PlanState::Stopped { .. }));
    Ok(if stopped {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_problems(output: Output, problems: &[mesh_model::Diagnostic]) -> Result<()> {
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(problems)?),
        Output::Text if problems.is_empty() => println!("the catalogue and inventory are sound"),
        Output::Text => {
            for problem in problems {
                println!("{problem}");
            }
            println!("{} problem(s)", problems.len());
        }
    }
    Ok(())
}

/// The exit code a push's results call for: 2 when any node was held, else 0 when every node
/// converged, else 3.
fn push_exit_code(results: &[push::PushResult]) -> ExitCode {
    if results
        .iter()
        .any(|r| matches!(r.result, push::NodeResult::Held { .. }))
    {
        return ExitCode::from(2);
    }
    let converged = results.iter().all(|r| {
        matches!(&r.result, push::NodeResult::Reported { report, .. }
            if report.machine == mesh_model::report::MachineState::Converged)
    });
    if converged {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    }
}
