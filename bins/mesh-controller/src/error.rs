//! The controller library's one error type: what failed, naming the node, module, plan,
//! repository, record or file it failed for.
//!
//! Every call of the library returns [`Result`]. An error is one [`Error`] variant, most often a
//! subject ([`Error::Node`], [`Error::Module`], [`Error::Plan`], [`Error::Repo`]) wrapping the
//! cause (`#[source]`), so a program can match what it cares about — a refusal
//! ([`Error::Refused`]), a node that is not in the mesh ([`Error::UnknownNode`]), problems in the
//! catalogue or inventory ([`Error::Problems`]), another controller holding the plans
//! ([`Error::Lease`]) — and a person reads the whole chain (`{:#}` through `anyhow`, or
//! [`std::error::Error::source`] in turn): "composing the declaration of `web`: …".
//!
//! Messages are lower-case, without a trailing period, and never carry a secret.

use std::path::PathBuf;

use mesh_store::record_store::RecordStoreError;

/// The library's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Any other crate's error, kept as the cause.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong in a call of the controller library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Something done for one node failed.
    #[error("{doing}")]
    Node {
        /// The node.
        node: String,
        /// What was being done, naming the node ("composing the declaration of `web`").
        doing: String,
        /// Why it failed.
        #[source]
        source: Box<Error>,
    },
    /// Something done for one module failed.
    #[error("{doing}")]
    Module {
        /// The module.
        module: String,
        /// What was being done, naming the module.
        doing: String,
        /// Why it failed.
        #[source]
        source: Box<Error>,
    },
    /// Something done for one plan failed.
    #[error("{doing}")]
    Plan {
        /// The plan's id.
        plan: String,
        /// What was being done, naming the plan.
        doing: String,
        /// Why it failed.
        #[source]
        source: Box<Error>,
    },
    /// Something done with one registered repository failed.
    #[error("{doing}")]
    Repo {
        /// The repository's name.
        repo: String,
        /// What was being done, naming the repository.
        doing: String,
        /// Why it failed.
        #[source]
        source: Box<Error>,
    },
    /// The records (files under the home, or the bus's records bucket) could not be read or
    /// written.
    #[error(transparent)]
    Records(#[from] RecordStoreError),
    /// A bus key (an NKey seed or public key) is not what it should be, or its file cannot be
    /// read (the error names the file, never what it holds).
    #[error(transparent)]
    Key(#[from] mesh_bus::keys::KeyError),
    /// A plan could not be closed (mesh-plan's answer, naming the plan's state).
    #[error(transparent)]
    Close(#[from] mesh_plan::plans::CloseError),
    /// A declaration could not be composed (mesh-plan's answer, naming module and key).
    #[error(transparent)]
    Compose(#[from] mesh_plan::ComposeError),
    /// A record holds what this build cannot read.
    #[error("{location} is not {what}")]
    BadRecord {
        /// Where the record is (its file, or its bucket and key).
        location: String,
        /// What it should have been ("a plan record", "valid JSON").
        what: String,
        /// The parser's complaint, when there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// A record written in a format this build does not read.
    #[error("{location} has format {found}, this build reads format {expected}")]
    Format {
        /// Where the record is.
        location: String,
        /// The format it has ("none" when it names none).
        found: String,
        /// The format this build reads.
        expected: u32,
    },
    /// The home holds no mesh, or its records were moved to a bus this call was not given.
    #[error("{}", no_mesh(home, why))]
    NoMesh {
        /// The home (or, on a bus, the bus's URL) that holds no mesh.
        home: String,
        /// Why it holds none.
        why: NoMesh,
    },
    /// What was given for one of a call's options is refused, or an option the call needs
    /// was not given. The library says it in its own words; a program phrases it with its
    /// own name for the option (the binary, with its flag).
    #[error("{}", given(*option, value.as_deref(), why))]
    Given {
        /// The option.
        option: Given,
        /// What was given for it, when something was.
        value: Option<String>,
        /// Why it is refused (what was given is named before it), or, with nothing given, what
        /// needs it ([`Given::ask`] follows).
        why: String,
    },
    /// A file or directory could not be read or written.
    #[error("{doing} {}", path.display())]
    File {
        /// What was being done ("reading", "creating").
        doing: String,
        /// The file or directory.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A node that is not in the mesh's inventory.
    #[error("`{node}` is not a node of this mesh{}", its_nodes(known))]
    UnknownNode {
        /// The name given.
        node: String,
        /// The nodes there are, when the message should list them.
        known: Vec<String>,
    },
    /// The catalogue or inventory has problems, so nothing was sent.
    #[error(
        "the catalogue or inventory has {} problem(s); nothing was sent:\n{}",
        problems.len(),
        listed(problems)
    )]
    Problems {
        /// Every problem found, each naming file, module and key.
        problems: Vec<mesh_model::Diagnostic>,
    },
    /// A module does not validate at a commit, so it is not built.
    #[error(
        "`{module}` at {repository} {} does not validate ({} problem(s)):\n{}",
        &commit[..commit.len().min(12)],
        problems.len(),
        listed(problems)
    )]
    DoesNotValidate {
        /// The module.
        module: String,
        /// The repository it was built from.
        repository: String,
        /// The commit.
        commit: String,
        /// Every problem, each naming file, module and key.
        problems: Vec<mesh_model::Diagnostic>,
    },
    /// A rule of the mesh refused the call; what it says was not done was not done.
    #[error("{reason}")]
    Refused {
        /// What was refused and why, and what was left as it was.
        reason: String,
    },
    /// What a person gave (a name, a file's contents, a value) is not what the call takes.
    #[error("{what}")]
    Invalid {
        /// What is wrong with it.
        what: String,
        /// The parser's complaint, when there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// A `git` command in a registered repository failed.
    #[error("{doing}")]
    Git {
        /// The repository's directory.
        repo: PathBuf,
        /// What was being done, with what git said.
        doing: String,
        /// The cause, when it was not git's own answer.
        #[source]
        source: Option<BoxError>,
    },
    /// The bus failed.
    #[error("{doing}")]
    Bus {
        /// What was being done on the bus.
        doing: String,
        /// The bus's error.
        #[source]
        source: Option<BoxError>,
    },
    /// The store failed (its error names the store and the archive).
    #[error(transparent)]
    Store(#[from] mesh_store::store::StoreError),
    /// An archive could not be made or read.
    #[error(transparent)]
    Archive(#[from] mesh_store::archive::ArchiveError),
    /// The store's publish or sweep lock could not be taken.
    #[error(transparent)]
    StoreLock(#[from] mesh_store::lock::LockError),
    /// The plans are held by another controller, or this controller's hold on them was taken
    /// over (the lease's error names the holder).
    #[error(transparent)]
    Lease(#[from] mesh_store::lease::LeaseError),
    /// Something inside a call failed that the call's other variants do not name (a
    /// host library's apply, a value that could not be encoded); the source says what.
    #[error("{doing}")]
    Internal {
        /// What was being done.
        doing: String,
        /// The cause.
        #[source]
        source: Option<BoxError>,
    },
}

impl Error {
    /// A refusal saying `reason`.
    pub fn refused(reason: impl Into<String>) -> Error {
        Error::Refused {
            reason: reason.into(),
        }
    }

    /// Bad input described by `what`.
    pub fn invalid(what: impl Into<String>) -> Error {
        Error::Invalid {
            what: what.into(),
            source: None,
        }
    }

    /// A failure of the bus, described by `doing`, with no other cause.
    pub fn bus(doing: impl Into<String>) -> Error {
        Error::Bus {
            doing: doing.into(),
            source: None,
        }
    }

    /// An internal failure described by `doing`, with no other cause.
    pub fn internal(doing: impl Into<String>) -> Error {
        Error::Internal {
            doing: doing.into(),
            source: None,
        }
    }

    /// This error and every cause under it, outermost first.
    pub fn chain(&self) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
        std::iter::successors(Some(self as &(dyn std::error::Error + 'static)), |error| {
            error.source()
        })
    }

    /// The whole chain on one line, "outer: inner: …" (as `anyhow` prints `{:#}`).
    pub fn chain_line(&self) -> String {
        self.chain()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(": ")
    }

    /// The node this error names, outermost first, if any.
    pub fn node(&self) -> Option<&str> {
        match self {
            Error::Node { node, .. } | Error::UnknownNode { node, .. } => Some(node),
            Error::Module { source, .. }
            | Error::Plan { source, .. }
            | Error::Repo { source, .. } => source.node(),
            _ => None,
        }
    }

    /// The module this error names, outermost first, if any.
    pub fn module(&self) -> Option<&str> {
        match self {
            Error::Module { module, .. } | Error::DoesNotValidate { module, .. } => Some(module),
            Error::Node { source, .. }
            | Error::Plan { source, .. }
            | Error::Repo { source, .. } => source.module(),
            _ => None,
        }
    }

    /// The plan this error names, if any.
    pub fn plan(&self) -> Option<&str> {
        match self {
            Error::Plan { plan, .. } => Some(plan),
            Error::Node { source, .. }
            | Error::Module { source, .. }
            | Error::Repo { source, .. } => source.plan(),
            _ => None,
        }
    }

    /// Whether this error, or the one it wraps, is a refusal by a rule of the mesh.
    pub fn is_refusal(&self) -> bool {
        match self {
            Error::Refused { .. } | Error::Problems { .. } | Error::DoesNotValidate { .. } => true,
            Error::Node { source, .. }
            | Error::Module { source, .. }
            | Error::Plan { source, .. }
            | Error::Repo { source, .. } => source.is_refusal(),
            _ => false,
        }
    }
}

/// Why a home holds no mesh ([`Error::NoMesh`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoMesh {
    /// Its records were moved to the bus at this URL, and the call was not given that bus:
    /// nothing reads the old ones.
    MovedToBus(String),
    /// The bus's records bucket holds no inventory: a home's records were never moved there.
    EmptyBus,
    /// The directory holds no inventory: no mesh was made there.
    NotAHome,
}

fn no_mesh(home: &str, why: &NoMesh) -> String {
    match why {
        NoMesh::MovedToBus(url) => format!(
            "the records of {home} were moved to a bus ({url}): open the mesh on that bus, so \
             nothing reads the old ones"
        ),
        NoMesh::EmptyBus => format!(
            "{home} holds no mesh (no {}); move a home's records there first",
            mesh_model::inventory::INVENTORY_FILE
        ),
        NoMesh::NotAHome => format!(
            "{home} is not a mesh home (no {}); make one first",
            mesh_model::inventory::INVENTORY_FILE
        ),
    }
}

/// [`Error::Given`] in the library's words: the option and what was given, then why; with
/// nothing given, what needs it, then what to give ([`Given::ask`]).
fn given(option: Given, value: Option<&str>, why: &str) -> String {
    match value {
        Some(value) => format!("{} {value}: {why}", option.words()),
        None => format!("{why}: {}", option.ask()),
    }
}

/// One of the options a call of the library takes, named in an [`Error::Given`] so that a
/// program can phrase the error with its own name for it (the binary names its flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Given {
    /// A fleet's bus ([`crate::runtime::MeshOptions::bus`]).
    Bus,
    /// How many copies each stream and bucket keeps
    /// ([`crate::bus::credentials::BusConfig::with_replicas`]).
    Replicas,
    /// How often a repository registered by URL is fetched.
    PollInterval,
    /// The branch a repository registered by URL is read from.
    Branch,
    /// The address the status page listens on.
    HttpListen,
    /// The address the webhooks listen on.
    HooksListen,
    /// The controller's bus seed or password file
    /// ([`crate::bus::credentials::BusConfig::with_seed_file`], `with_password_file`).
    ControllerSecret,
}

impl Given {
    /// The option in the library's words.
    pub fn words(self) -> &'static str {
        match self {
            Given::Bus => "a fleet's bus",
            Given::Replicas => "the bus's replicas",
            Given::PollInterval => "the poll interval",
            Given::Branch => "the branch",
            Given::HttpListen => "the status page's address",
            Given::HooksListen => "the webhooks' address",
            Given::ControllerSecret => "the controller's bus seed or password file",
        }
    }

    /// What to do when the option was needed and not given, in the library's words.
    pub fn ask(self) -> String {
        match self {
            Given::Bus => "open the mesh on one".to_owned(),
            Given::Branch => "give the branch to read".to_owned(),
            Given::Replicas
            | Given::PollInterval
            | Given::HttpListen
            | Given::HooksListen
            | Given::ControllerSecret => {
                format!("give {}", self.words())
            }
        }
    }
}

/// Problems one to a line, indented.
fn listed(problems: &[mesh_model::Diagnostic]) -> String {
    problems
        .iter()
        .map(|p| format!("  {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// "; its nodes are: a, b", or nothing when none are listed.
fn its_nodes(known: &[String]) -> String {
    if known.is_empty() {
        String::new()
    } else {
        format!("; its nodes are: {}", known.join(", "))
    }
}

impl From<mesh_bus::BusError> for Error {
    fn from(source: mesh_bus::BusError) -> Error {
        Error::Bus {
            doing: "the bus failed".to_owned(),
            source: Some(Box::new(source)),
        }
    }
}

impl From<mesh_bus::NatsError> for Error {
    fn from(source: mesh_bus::NatsError) -> Error {
        Error::Bus {
            doing: "the bus failed".to_owned(),
            source: Some(Box::new(source)),
        }
    }
}

impl From<serde_json::Error> for Error {
    fn from(source: serde_json::Error) -> Error {
        Error::Internal {
            doing: "encoding a record as JSON".to_owned(),
            source: Some(Box::new(source)),
        }
    }
}

impl From<mesh_store::records::RecordError> for Error {
    fn from(source: mesh_store::records::RecordError) -> Error {
        match source {
            mesh_store::records::RecordError::Store(store) => Error::Records(store),
            other => Error::BadRecord {
                location: "the store's module records".to_owned(),
                what: "readable".to_owned(),
                source: Some(Box::new(other)),
            },
        }
    }
}

impl From<mesh_store::problems::ProblemError> for Error {
    fn from(source: mesh_store::problems::ProblemError) -> Error {
        match source {
            mesh_store::problems::ProblemError::Store(store) => Error::Records(store),
            other => Error::BadRecord {
                location: "the problem records".to_owned(),
                what: "readable".to_owned(),
                source: Some(Box::new(other)),
            },
        }
    }
}

/// Naming the subject of a failure: `result.for_node(node, || format!("sending `{node}` …"))`.
pub(crate) trait Context<T> {
    /// The error, as something done for `node`.
    fn for_node(self, node: &str, doing: impl FnOnce() -> String) -> Result<T>;
    /// The error, as something done for `module`.
    fn for_module(self, module: &str, doing: impl FnOnce() -> String) -> Result<T>;
    /// The error, as something done for `plan`.
    fn for_plan(self, plan: &str, doing: impl FnOnce() -> String) -> Result<T>;
    /// The error, as something done with the repository `repo`.
    fn for_repo(self, repo: &str, doing: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn for_node(self, node: &str, doing: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::Node {
            node: node.to_owned(),
            doing: doing(),
            source: Box::new(e.into()),
        })
    }

    fn for_module(self, module: &str, doing: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::Module {
            module: module.to_owned(),
            doing: doing(),
            source: Box::new(e.into()),
        })
    }

    fn for_plan(self, plan: &str, doing: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::Plan {
            plan: plan.to_owned(),
            doing: doing(),
            source: Box::new(e.into()),
        })
    }

    fn for_repo(self, repo: &str, doing: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::Repo {
            repo: repo.to_owned(),
            doing: doing(),
            source: Box::new(e.into()),
        })
    }
}

/// A file's IO error, naming the file.
pub(crate) fn file_error(
    doing: &str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.into();
    let doing = doing.to_owned();
    move |source| Error::File {
        doing,
        path,
        source,
    }
}

/// A bus error, saying what was being done.
pub(crate) fn bus_error<E: std::error::Error + Send + Sync + 'static>(
    doing: impl FnOnce() -> String,
) -> impl FnOnce(E) -> Error {
    move |source| Error::Bus {
        doing: doing(),
        source: Some(Box::new(source)),
    }
}

/// A record that is not what it should be, naming where it is.
pub(crate) fn bad_record<E: std::error::Error + Send + Sync + 'static>(
    location: impl Into<String>,
    what: &str,
) -> impl FnOnce(E) -> Error {
    let location = location.into();
    let what = what.to_owned();
    move |source| Error::BadRecord {
        location,
        what,
        source: Some(Box::new(source)),
    }
}
