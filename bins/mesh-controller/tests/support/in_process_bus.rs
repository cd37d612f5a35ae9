//! The controller called as a library, in process, on a fleet bed's real bus
//! ([`super::fleet::Bed`]) — or on any home, [`FleetLibrary::open`] — what the bed's controller
//! commands do with `--bus`, the bus's own commands among them (`broker`, `runtimes`,
//! `records`), and `push` and `status` with the flags the fleet's tests give them (`--timeout`,
//! `--silent-after`, `--report-limit`). Each method does what its
//! command's `exec` does (`src/bin/mesh-controller/commands/`), without the rendering, and
//! answers with what the command prints with `--output json` beside the value deciding its
//! exit code, as [`super::in_process::Library`] does on a test mesh's home.
//!
//! The bed's [`Bed::run`](super::fleet::Bed::run) and kin stay for what only the binary does.

use super::fleet::Bed;
use super::in_process::{said, Driven, Merged, Pushed, Status};
use mesh_controller::runtime::{self, MeshOptions, Runtime};
use mesh_controller::{alert, backup, broker, push, records, runtimes, status, users};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A mesh opened in process on a fleet's bus (or a home's records, to see them refused), and the
/// runtime its async calls run on.
pub struct FleetLibrary {
    mesh: Arc<runtime::Mesh>,
    tokio: tokio::runtime::Runtime,
}

impl Bed {
    /// What the bed's controller commands are given as flags, as the options a Rust tool opens
    /// the mesh with: the bus and its CA, the secured store, the retry limit on a cluster.
    pub fn mesh_options(&self) -> MeshOptions {
        let secured = self
            .registry
            .secured
            .as_ref()
            .expect("the bed's store is secured");
        let store_access = mesh_store::store::StoreAccess {
            ca_file: Some(secured.pki.ca_file.clone()),
            credentials_file: Some(secured.controller_credentials.clone()),
        };
        MeshOptions {
            bus: Some(mesh_controller::credentials::BusArgs {
                url: self.url.clone(),
                tls: mesh_bus::BusTls {
                    ca_file: Some(self.pki.ca_file.clone()),
                    client_certificate: None,
                },
                store_access: store_access.clone(),
                retry_limit: self.retry_limit(),
                ..Default::default()
            }),
            store: Some(self.registry.url().parse().expect("the store's URL")),
            store_access,
            report_limit: None,
        }
    }

    /// The bed's mesh opened in process on its bus.
    pub fn fleet_library(&self) -> FleetLibrary {
        self.try_fleet_library()
            .unwrap_or_else(|error| panic!("opening the mesh on the bus: {error}"))
    }

    /// [`Bed::fleet_library`], the error as the binary says it (a bus reloading its users
    /// refuses the controller's login for a moment).
    pub fn try_fleet_library(&self) -> Result<FleetLibrary, String> {
        FleetLibrary::open(self.home.path(), self.mesh_options())
    }

    /// `push --all --timeout TIMEOUT --output json` through the library, its results by node;
    /// `code` is the exit code `push` ends with (0 converged, 2 held, 3 not converged), checked
    /// as [`Bed::push_all`](super::fleet::Bed::push_all) checks it.
    pub fn library_push_all(&self, timeout: u64, code: u8) -> BTreeMap<String, Value> {
        let pushed = self
            .fleet_library()
            .push_all(timeout)
            .unwrap_or_else(|error| panic!("push --all: {error}"));
        assert_eq!(
            push_code(pushed.verdict),
            code,
            "push --all: {:?}\n{:#}\n{}",
            pushed.verdict,
            pushed.json,
            pushed.lines
        );
        by_node(&pushed.json)
    }

    /// One of the controller's records, as `records get` gives it (`None`: there is none), read
    /// through the library as [`Bed::record`](super::fleet::Bed::record) reads it.
    pub fn library_record(&self, key: &str) -> Option<String> {
        self.fleet_library().record(key)
    }

    /// `records put inventory.toml FILE` through the library, `text` the file's.
    pub fn library_put_inventory(&self, text: &str) {
        let outcome = self
            .fleet_library()
            .put_inventory(text)
            .unwrap_or_else(|error| panic!("records put: {error}"));
        assert_eq!(outcome, records::PutOutcome::Replaced);
    }
}

/// The exit code `push` ends with for `verdict` (a `--behind` plan that stopped aside).
pub fn push_code(verdict: push::Verdict) -> u8 {
    match verdict {
        push::Verdict::Converged => 0,
        push::Verdict::Held => 2,
        push::Verdict::NotConverged => 3,
    }
}

/// A push's results (`push --output json`) by node.
pub fn by_node(results: &Value) -> BTreeMap<String, Value> {
    results
        .as_array()
        .expect("a push's results are a list")
        .iter()
        .map(|r| (r["node"].as_str().unwrap().to_owned(), r.clone()))
        .collect()
}

impl FleetLibrary {
    /// The mesh at `home` opened with `options`; the error as the binary says it.
    pub fn open(home: &Path, options: MeshOptions) -> Result<FleetLibrary, String> {
        let mesh = runtime::Mesh::open(home, options).map_err(|e| said(&e))?;
        Ok(FleetLibrary {
            mesh: Arc::new(mesh),
            tokio: tokio::runtime::Runtime::new().expect("a tokio runtime"),
        })
    }

    fn home(&self) -> &mesh_controller::home::Home {
        self.mesh.home()
    }

    /// The bus (the command's `--bus`), as a command that needs one asks for it.
    fn bus(&self) -> Result<&mesh_controller::credentials::BusArgs, String> {
        self.mesh.bus().ok_or_else(|| {
            "this command talks to a fleet's bus: give --bus URL (or MESH_BUS)".to_owned()
        })
    }

    /// A runtime of the mesh whose progress is collected.
    fn drives(&self) -> (Runtime, Arc<mesh_controller::Collected>) {
        let progress = Arc::new(mesh_controller::Collected::default());
        let runtime = Runtime::new(Arc::clone(&self.mesh), Arc::clone(&progress) as _);
        (runtime, progress)
    }

    /// The catalogue the mesh composes from and its problems (the binary's `Env::checked`).
    fn checked(&self) -> Result<push::Checked, String> {
        self.home().require().map_err(|e| said(&e))?;
        self.tokio
            .block_on(mesh_controller::builds::effective_catalogue(
                self.home(),
                self.mesh.store(),
            ))
            .map_err(|e| said(&e))
    }

    /// `push NODE… --timeout TIMEOUT`.
    pub fn push(&self, nodes: &[&str], timeout: u64) -> Result<Pushed, String> {
        self.push_moving(nodes, &[], timeout)
    }

    /// `push NODE… --move MODULE… --timeout TIMEOUT`.
    pub fn push_moving(
        &self,
        nodes: &[&str],
        moves: &[&str],
        timeout: u64,
    ) -> Result<Pushed, String> {
        let nodes = nodes.iter().map(|n| (*n).to_owned()).collect();
        self.push_to(nodes, false, moves, timeout)
    }

    /// `push --all --timeout TIMEOUT`.
    pub fn push_all(&self, timeout: u64) -> Result<Pushed, String> {
        self.push_to(Vec::new(), true, &[], timeout)
    }

    fn push_to(
        &self,
        nodes: Vec<String>,
        all: bool,
        moves: &[&str],
        timeout: u64,
    ) -> Result<Pushed, String> {
        let inventory = self.home().inventory().map_err(|e| said(&e))?;
        let nodes = push::targets(&inventory, nodes, all).map_err(|refused| refused.to_string())?;
        let checked = self.checked()?;
        let (drives, progress) = self.drives();
        let moves: BTreeSet<String> = moves.iter().map(|m| (*m).to_owned()).collect();
        let results = self
            .tokio
            .block_on(drives.push(&checked, &nodes, &moves, Duration::from_secs(timeout)))
            .map_err(|e| said(&e))?;
        Ok(Pushed {
            verdict: push::verdict(&results),
            json: serde_json::to_value(&results).unwrap(),
            lines: lines(&progress),
            stopped: false,
        })
    }

    /// `merge REPO`: built and rolled out over the bus (it exits 3 when the plan stopped).
    pub fn merge(&self, repo: &str) -> Result<Merged, String> {
        self.home().require().map_err(|e| said(&e))?;
        let (drives, progress) = self.drives();
        let (outcome, _) = self
            .tokio
            .block_on(mesh_controller::preview::merge(
                &drives,
                repo,
                None,
                false,
                &BTreeSet::new(),
            ))
            .map_err(|e| said(&e))?;
        Ok(Merged {
            stopped: outcome.stopped(),
            json: serde_json::to_value(&outcome).unwrap(),
            outcome,
            lines: lines(&progress),
        })
    }

    /// `merge REPO --announce`: the merge of the branch's head announced to the daemon
    /// (`--output json` prints it).
    pub fn announce(&self, repo: &str) -> Result<mesh_controller::announce::Announced, String> {
        self.tokio
            .block_on(mesh_controller::announce::announce_head(
                self.home(),
                self.bus()?,
                repo,
            ))
            .map_err(|e| said(&e))
    }

    /// `repo list --output json`.
    pub fn repos(&self) -> Result<Value, String> {
        let repos = self.home().repos().map_err(|e| said(&e))?;
        Ok(serde_json::to_value(repos).unwrap())
    }

    /// `plans resume`: the open plans driven (it exits 3 when one of them stopped).
    pub fn plans_resume(&self) -> Result<Driven, String> {
        self.home().require().map_err(|e| said(&e))?;
        let (drives, progress) = self.drives();
        let plans = self
            .tokio
            .block_on(drives.drive_open(None, runtime::DriveMode::All, &BTreeSet::new()))
            .map_err(|e| said(&e))?;
        Ok(Driven {
            stopped: mesh_controller::plans::any_stopped(&plans),
            plans,
            lines: lines(&progress),
        })
    }

    /// `status --output json --silent-after SECS`, judged now as `status` judges it.
    pub fn status_with(&self, silent_after: u64) -> Result<Status, String> {
        let now = mesh_host::now();
        let options = status::StatusOptions {
            silent_after_secs: silent_after,
            ..Default::default()
        };
        let mut overview =
            status::overview_with(self.home(), now, &options).map_err(|e| said(&e))?;
        // On a fleet with a daemon, the merges waiting on its consumer, read from the bus.
        if let (Some(_), Some(bus)) = (&overview.daemon, self.mesh.bus()) {
            if let Some(waiting) = self
                .tokio
                .block_on(mesh_controller::heartbeat::merges_waiting(self.home(), bus))
            {
                overview.set_merges_waiting(waiting, now);
            }
        }
        let verdict = alert::judge(&overview, now, alert::DEFAULT_MID_CHANGE_AFTER_SECS);
        let document = overview.json_document().map_err(|e| said(&e))?;
        Ok(Status {
            json: serde_json::from_str(&document).unwrap(),
            document,
            code: verdict.health.exit_code(),
        })
    }

    /// `status --output json` (the default `--silent-after`).
    pub fn status(&self) -> Result<Status, String> {
        self.status_with(push::SILENT_AFTER_SECS)
    }

    /// `broker users`: the bus's users as the next push would send them to the bus node.
    pub fn broker_users(&self) -> Result<String, String> {
        let checked = self.checked()?;
        users::users_text(self.home(), &checked, self.bus()?).map_err(|e| said(&e))
    }

    /// `runtimes --output json`, and the exit code it ends with (0 every node heard serving
    /// what it is assigned, 2 a module missing or elsewhere, 3 something not heard).
    pub fn runtimes(&self) -> Result<(Value, u8), String> {
        self.home().require().map_err(|e| said(&e))?;
        let found = self
            .tokio
            .block_on(runtimes::runtimes(self.home(), self.bus()?))
            .map_err(|e| said(&e))?;
        Ok((
            serde_json::to_value(&found).unwrap(),
            runtimes::runtimes_exit_code(&found),
        ))
    }

    /// `records get KEY`: the record's bytes.
    pub fn records_get(&self, key: &str) -> Result<Vec<u8>, String> {
        records::get(self.home(), key).map_err(|e| said(&e))
    }

    /// One record as text (`None`: there is none, the refusal `records get` prints then).
    pub fn record(&self, key: &str) -> Option<String> {
        match self.records_get(key) {
            Ok(bytes) => Some(String::from_utf8(bytes).expect("a record of text")),
            Err(error) => {
                assert!(error.contains("there is no record"), "{error}");
                None
            }
        }
    }

    /// `records list DIR --output json`.
    pub fn records_list(&self, dir: &str) -> Result<Vec<String>, String> {
        self.home().require().map_err(|e| said(&e))?;
        self.home()
            .records()
            .list(dir.trim_end_matches('/'))
            .map_err(|e| said(&e))
    }

    /// `records put KEY FILE [--base BASE]`.
    pub fn records_put(
        &self,
        key: &str,
        file: &Path,
        base: Option<&Path>,
    ) -> Result<records::PutOutcome, String> {
        records::put_by_hand(self.home(), key, file, base).map_err(|e| said(&e))
    }

    /// `records put inventory.toml FILE`, the file holding `text`.
    pub fn put_inventory(&self, text: &str) -> Result<records::PutOutcome, String> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("inventory.toml");
        std::fs::write(&file, text).unwrap();
        self.records_put("inventory.toml", &file, None)
    }

    /// `records import` (no file): the home's records at `home` moved onto the bus
    /// (`--output json` prints what was copied).
    pub fn records_import(&self, home: &Path) -> Result<Value, String> {
        let bus = self.bus()?;
        let imported = records::import(home, self.home(), &bus.url).map_err(|e| said(&e))?;
        Ok(serde_json::to_value(imported).unwrap())
    }

    /// `records export FILE` (`--output json` prints what was written).
    pub fn records_export(&self, file: &Path) -> Result<backup::Exported, String> {
        backup::export(self.home(), file, mesh_host::now()).map_err(|e| said(&e))
    }

    /// `records import FILE`: the archive restored into the records (`--output json` prints
    /// what was restored).
    pub fn records_restore(&self, file: &Path) -> Result<backup::Restored, String> {
        backup::import(self.home(), file).map_err(|e| said(&e))
    }

    /// `broker consumer-reset STREAM CONSUMER`: what was reset (`--output json` prints it), or
    /// the refusal `broker consumer-reset` prints, exiting 2.
    pub fn consumer_reset(
        &self,
        stream: &str,
        consumer: &str,
    ) -> Result<Result<broker::ResetLine, String>, String> {
        self.tokio
            .block_on(broker::consumer_reset(
                self.home(),
                self.bus()?,
                stream,
                consumer,
            ))
            .map_err(|e| said(&e))
    }
}

/// The progress lines collected, one a line, as the binary prints them.
fn lines(progress: &mesh_controller::Collected) -> String {
    progress
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|line| format!("{line}\n"))
        .collect()
}
