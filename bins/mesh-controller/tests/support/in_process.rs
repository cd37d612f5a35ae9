//! The controller called as a library, in process, on a test [`Mesh`]'s home: each method does
//! what its command's `exec` does (`src/bin/mesh-controller/commands/`), without the rendering,
//! and answers with what the command prints with `--output json` — as that JSON, so a test's
//! assertions on it read the same, or as the library's value it is printed from — beside the
//! progress lines it would have printed and the library's value that decides its exit code.
//!
//! What only the binary does — parsing, rendering, exit codes as a process ends with them, a
//! fail point's death — stays with [`Mesh::run`] and its kin.

use super::Mesh;
use mesh_controller::plans::MergeOutcome;
use mesh_controller::push::{self, PushResult, Verdict};
use mesh_controller::runtime::{self, DriveMode, MeshOptions, Runtime};
use mesh_controller::{
    alert, check, heads, newest, orphans, plans, preview, repos, settings, status,
};
use mesh_model::plan::Plan;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

impl Mesh {
    /// The mesh of this home opened as a Rust tool opens it: the embedded default (the records
    /// under the home, one host agent per node in this process) and the home's store.
    pub fn library(&self) -> Library {
        self.library_with(MeshOptions::default())
            .unwrap_or_else(|error| panic!("opening the mesh: {error}"))
    }

    /// The mesh of this home opened with `options` (another store, a bus); the error as the
    /// binary says it.
    pub fn library_with(&self, options: MeshOptions) -> Result<Library, String> {
        let mesh = runtime::Mesh::open(self.home(), options).map_err(|e| said(&e))?;
        Ok(Library {
            mesh: Arc::new(mesh),
            tokio: tokio::runtime::Runtime::new().expect("a tokio runtime"),
        })
    }
}

impl super::fleet::Bed {
    /// The bed's mesh opened as a Rust tool opens it on the fleet's bus: the records on the bus,
    /// the store the controller commands are given, the sends to the real hosts — what the
    /// bed's controller commands are given as flags.
    pub fn library(&self) -> Library {
        self.try_library()
            .unwrap_or_else(|error| panic!("opening the mesh on the bus: {error}"))
    }

    /// [`Bed::library`](super::fleet::Bed::library), the error as the binary says it (a bus
    /// reloading its users refuses the controller's login for a moment).
    pub fn try_library(&self) -> Result<Library, String> {
        let secured = self
            .registry
            .secured
            .as_ref()
            .expect("the bed's store is secured");
        let store_access = mesh_store::store::StoreAccess {
            ca_file: Some(secured.pki.ca_file.clone()),
            credentials_file: Some(secured.controller_credentials.clone()),
        };
        let bus = mesh_controller::credentials::BusArgs {
            url: self.url.clone(),
            tls: mesh_bus::BusTls {
                ca_file: Some(self.pki.ca_file.clone()),
                client_certificate: None,
            },
            store_access: store_access.clone(),
            retry_limit: self.retry_limit(),
            ..Default::default()
        };
        let mesh = runtime::Mesh::open(
            self.home.path(),
            MeshOptions {
                bus: Some(bus),
                store: Some(self.registry.url().parse().expect("the store's URL")),
                store_access,
                report_limit: None,
            },
        )
        .map_err(|e| said(&e))?;
        Ok(Library {
            mesh: Arc::new(mesh),
            tokio: tokio::runtime::Runtime::new().expect("a tokio runtime"),
        })
    }
}

/// A mesh opened in process, and the runtime its async calls run on.
pub struct Library {
    mesh: Arc<runtime::Mesh>,
    tokio: tokio::runtime::Runtime,
}

/// What a merge did (`merge`).
pub struct Merged {
    /// The library's answer.
    pub outcome: MergeOutcome,
    /// What `merge --output json` prints: the outcome, and its `preview` with `--plan-only`.
    pub json: Value,
    /// The progress lines, one a line: what `merge` prints before the outcome.
    pub lines: String,
    /// Whether the plan stopped: `merge` exits 3 then, else 0.
    pub stopped: bool,
}

/// What a drive of the open plans did (`plans resume`, `build --behind`).
pub struct Driven {
    /// The plans driven, as they stand: what `--output json` prints.
    pub plans: Vec<Plan>,
    /// The progress lines, one a line.
    pub lines: String,
    /// Whether one of them stopped: the command exits 3 then, else 0.
    pub stopped: bool,
}

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

/// What `status` says.
pub struct Status {
    /// What `status --output json` prints.
    pub json: Value,
    /// The same, byte for byte as printed.
    pub document: String,
    /// The exit code the overview is judged to (`alert::judge`): 0 settled, 2 in progress, 3
    /// needs attention.
    pub code: u8,
}

/// The flags of a merge.
#[derive(Default, Clone, Copy)]
pub struct MergeFlags<'a> {
    /// `--commit`.
    pub commit: Option<&'a str>,
    /// `--plan-only`.
    pub plan_only: bool,
    /// `--move`.
    pub moves: &'a [&'a str],
    /// `--drop-settings`.
    pub drop_settings: &'a [&'a str],
}

/// What `push` waits for each node's report by default (`--timeout`).
const PUSH_TIMEOUT: Duration = Duration::from_secs(120);

impl Library {
    fn home(&self) -> &mesh_controller::home::Home {
        self.mesh.home()
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

    /// What records read in an older format were migrated on the way (the binary says each,
    /// once, as a `note:` after the command).
    pub fn migrations(&self) -> Vec<String> {
        self.home().take_migrations()
    }

    /// `repo add NAME PATH`.
    pub fn repo_add(&self, name: &str, path: &std::path::Path) -> Result<Value, String> {
        self.repo_add_with(
            name,
            path,
            &repos::AddOptions {
                modules_dir: "modules".to_owned(),
                ..Default::default()
            },
        )
    }

    /// `repo add NAME PATH` with its options (`--modules-dir`, `--branch`, …).
    pub fn repo_add_with(
        &self,
        name: &str,
        path: &std::path::Path,
        options: &repos::AddOptions,
    ) -> Result<Value, String> {
        let record = repos::add_with(self.home(), name, path, options).map_err(|e| said(&e))?;
        Ok(serde_json::to_value(record).unwrap())
    }

    /// `merge REPO`.
    pub fn merge(&self, repo: &str) -> Result<Merged, String> {
        self.merge_with(repo, MergeFlags::default())
    }

    /// `merge REPO` with its flags.
    pub fn merge_with(&self, repo: &str, flags: MergeFlags<'_>) -> Result<Merged, String> {
        self.home().require().map_err(|e| said(&e))?;
        let (drives, progress) = self.drives();
        let drives = drives.dropping_settings(&set(flags.drop_settings));
        let (outcome, preview) = self
            .tokio
            .block_on(preview::merge(
                &drives,
                repo,
                flags.commit,
                flags.plan_only,
                &set(flags.moves),
            ))
            .map_err(|e| said(&e))?;
        let mut json = serde_json::to_value(&outcome).unwrap();
        if let (Some(preview), Some(object)) = (&preview, json.as_object_mut()) {
            object.insert("preview".to_owned(), serde_json::to_value(preview).unwrap());
        }
        Ok(Merged {
            stopped: outcome.stopped(),
            outcome,
            json,
            lines: lines(&progress),
        })
    }

    /// `plans show ID --output json`.
    pub fn plan(&self, id: &str) -> Result<Value, String> {
        let record = self.home().plan(id).map_err(|e| said(&e))?;
        Ok(serde_json::to_value(record).unwrap())
    }

    /// `plans --output json`.
    pub fn plans(&self) -> Value {
        let plans: Vec<Plan> = self
            .home()
            .plans()
            .unwrap_or_else(|e| panic!("{}", said(&e)))
            .into_iter()
            .map(|record| record.plan)
            .collect();
        serde_json::to_value(plans).unwrap()
    }

    /// `plans show ID --preview --output json`.
    pub fn plan_preview(&self, id: &str) -> Result<Value, String> {
        self.home().require().map_err(|e| said(&e))?;
        let record = self.home().plan(id).map_err(|e| said(&e))?;
        let (drives, _) = self.drives();
        let preview = self
            .tokio
            .block_on(preview::preview(&drives.ctx(&BTreeSet::new()), &record))
            .map_err(|e| said(&e))?;
        Ok(serde_json::to_value(preview).unwrap())
    }

    /// `plans close ID --note NOTE`: the plan as it stands.
    pub fn plans_close(&self, id: &str, note: &str) -> Result<Plan, String> {
        let record = plans::close(self.home(), id, note).map_err(|e| said(&e))?;
        Ok(record.plan)
    }

    /// `plans resume [ID]`.
    pub fn plans_resume(&self, id: Option<&str>) -> Result<Driven, String> {
        self.plans_resume_with(id, &[], &[])
    }

    /// `plans resume [ID]` with `--move` and `--drop-settings`.
    pub fn plans_resume_with(
        &self,
        id: Option<&str>,
        moves: &[&str],
        drop_settings: &[&str],
    ) -> Result<Driven, String> {
        self.home().require().map_err(|e| said(&e))?;
        let (drives, progress) = self.drives();
        let drives = drives.dropping_settings(&set(drop_settings));
        self.drive_open(&drives, &progress, id, DriveMode::All, moves)
    }

    /// `build --behind`.
    pub fn build_behind(&self) -> Result<Driven, String> {
        self.home().require().map_err(|e| said(&e))?;
        let (drives, progress) = self.drives();
        self.drive_open(&drives, &progress, None, DriveMode::BuildOnly, &[])
    }

    fn drive_open(
        &self,
        drives: &Runtime,
        progress: &mesh_controller::Collected,
        id: Option<&str>,
        mode: DriveMode,
        moves: &[&str],
    ) -> Result<Driven, String> {
        let plans = self
            .tokio
            .block_on(drives.drive_open(id, mode, &set(moves)))
            .map_err(|e| said(&e))?;
        Ok(Driven {
            stopped: plans::any_stopped(&plans),
            plans,
            lines: lines(progress),
        })
    }

    /// `build MODULE… [--dry-run] --output json`.
    pub fn build(&self, modules: &[&str], dry_run: bool) -> Result<Value, String> {
        self.home().require().map_err(|e| said(&e))?;
        let modules: Vec<String> = modules.iter().map(|m| (*m).to_owned()).collect();
        let built = self
            .tokio
            .block_on(plans::build_named(
                self.home(),
                self.mesh.store(),
                &modules,
                dry_run,
            ))
            .map_err(|e| said(&e))?;
        Ok(serde_json::to_value(built).unwrap())
    }

    /// `push NODE…`.
    pub fn push(&self, nodes: &[&str]) -> Result<Pushed, String> {
        self.push_moving(nodes, &[])
    }

    /// `push NODE… --move MODULE…`.
    pub fn push_moving(&self, nodes: &[&str], moves: &[&str]) -> Result<Pushed, String> {
        let nodes = nodes.iter().map(|n| (*n).to_owned()).collect();
        self.push_to(nodes, false, moves, PUSH_TIMEOUT)
    }

    /// `push --all`.
    pub fn push_all(&self) -> Result<Pushed, String> {
        self.push_all_within(PUSH_TIMEOUT)
    }

    /// `push --all --timeout SECONDS`: each node's report waited for `timeout`.
    pub fn push_all_within(&self, timeout: Duration) -> Result<Pushed, String> {
        self.push_to(Vec::new(), true, &[], timeout)
    }

    fn push_to(
        &self,
        nodes: Vec<String>,
        all: bool,
        moves: &[&str],
        timeout: Duration,
    ) -> Result<Pushed, String> {
        let inventory = self.home().inventory().map_err(|e| said(&e))?;
        let nodes = push::targets(&inventory, nodes, all).map_err(|refused| refused.to_string())?;
        let checked = self.checked()?;
        let (drives, progress) = self.drives();
        let results = self
            .tokio
            .block_on(drives.push(&checked, &nodes, &set(moves), timeout))
            .map_err(|e| said(&e))?;
        Ok(Pushed {
            verdict: push::verdict(&results),
            json: serde_json::to_value(&results).unwrap(),
            lines: lines(&progress),
            stopped: false,
        })
    }

    /// `push --behind`: the open plans' rollouts driven, then the nodes a finished rollout
    /// passed over that run now sent what the mesh runs.
    pub fn push_behind(&self) -> Result<Pushed, String> {
        let (drives, progress) = self.drives();
        let moves = BTreeSet::new();
        let plans = self
            .tokio
            .block_on(drives.drive_open(None, DriveMode::RolloutOnly, &moves))
            .map_err(|e| said(&e))?;
        let behind = mesh_controller::behind::to_send(self.home()).map_err(|e| said(&e))?;
        let results: Vec<PushResult> = if behind.running.is_empty() {
            Vec::new()
        } else {
            let checked = self.checked()?;
            self.tokio
                .block_on(drives.push(&checked, &behind.running, &moves, PUSH_TIMEOUT))
                .map_err(|e| said(&e))?
        };
        let still = &behind.not_running;
        Ok(Pushed {
            verdict: push::verdict(&results),
            stopped: plans::any_stopped(&plans),
            json: serde_json::json!({
                "read": heads::read(self.home()).map_err(|e| said(&e))?,
                "plans": plans,
                "nodes": results,
                "not-running": still,
            }),
            lines: lines(&progress),
        })
    }

    /// `status --output json`, judged now as `status` judges it.
    pub fn status(&self) -> Status {
        self.try_status().unwrap_or_else(|error| panic!("{error}"))
    }

    /// [`Library::status`], the error as the binary says it.
    pub fn try_status(&self) -> Result<Status, String> {
        let now = mesh_host::now();
        let mut overview =
            status::overview_with(self.home(), now, &status::StatusOptions::default())
                .map_err(|e| said(&e))?;
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

    /// Calls `f` with what a `settings` command works on: the home and the catalogue the mesh
    /// composes from; `command` is the command line kept in the history (the binary keeps its
    /// own, `settings::invoked_command`).
    fn settings<T>(
        &self,
        command: &str,
        f: impl FnOnce(&settings::On<'_>) -> mesh_controller::Result<T>,
    ) -> Result<T, String> {
        let (catalogue, _) = self.checked()?;
        let command = format!("mesh-controller {command}");
        let on = settings::On {
            home: self.home(),
            catalogue: &catalogue,
            command: &command,
        };
        f(&on).map_err(|e| said(&e))
    }

    /// `settings set MODULE JSON [--node NODE] [--replace]`: the answer (`--output json`
    /// prints it; `settings set` exits 2 when it was refused).
    pub fn settings_set(
        &self,
        module: &str,
        node: Option<&str>,
        json: &str,
        replace: bool,
    ) -> Result<settings::Answer, String> {
        self.settings(&format!("settings set {module} {json}"), |on| {
            settings::set(on, module, node, json, replace, mesh_host::now())
        })
    }

    /// `settings set-secret MODULE KEY [--node NODE]`, `value` as read from standard input.
    pub fn settings_set_secret(
        &self,
        module: &str,
        node: Option<&str>,
        key: &str,
        value: &[u8],
    ) -> Result<settings::Answer, String> {
        self.settings(&format!("settings set-secret {module} {key}"), |on| {
            settings::set_secret(on, module, node, key, value, mesh_host::now())
        })
    }

    /// `settings clear MODULE [--node NODE]`.
    pub fn settings_clear(
        &self,
        module: &str,
        node: Option<&str>,
    ) -> Result<settings::Answer, String> {
        self.settings(&format!("settings clear {module}"), |on| {
            settings::clear(on, module, node, mesh_host::now())
        })
    }

    /// `settings restore MODULE REVISION [--node NODE]`.
    pub fn settings_restore(
        &self,
        module: &str,
        node: Option<&str>,
        revision: u64,
    ) -> Result<settings::Answer, String> {
        self.settings(&format!("settings restore {module} {revision}"), |on| {
            settings::restore(on, module, node, revision, mesh_host::now())
        })
    }

    /// `settings show MODULE [--node NODE] [--history]` (`--output json` prints it).
    pub fn settings_show(
        &self,
        module: &str,
        node: Option<&str>,
        history: bool,
    ) -> Result<settings::Shown, String> {
        self.settings(&format!("settings show {module}"), |on| {
            settings::show(on, module, node, history)
        })
    }

    /// `settings rename MODULE OLD NEW`, checked against the newest version of the module the
    /// mesh knows (`--output json` prints it).
    pub fn settings_rename(
        &self,
        module: &str,
        old: &str,
        new: &str,
    ) -> Result<settings::Renamed, String> {
        self.settings(&format!("settings rename {module} {old} {new}"), |on| {
            let newest = newest::newest_known(on.home, on.catalogue, module)?;
            settings::rename(on, module, (old, new), &newest, mesh_host::now())
        })
    }

    /// `check`: what it finds (`--output json` prints it; `check` exits 1 unless it is
    /// sound, [`check::Check::sound`]).
    pub fn check(&self) -> Result<check::Check, String> {
        let checked = self.checked()?;
        check::check(self.home(), &checked).map_err(|e| said(&e))
    }

    /// `plan NODE --output json`: the declaration the node would be sent now, a secret shown
    /// as its keyed digest.
    pub fn plan_node(&self, node: &str) -> Result<Value, String> {
        let checked = self.checked()?;
        let declaration = push::compose_node(self.home(), &checked, node).map_err(|e| said(&e))?;
        Ok(mesh_model::secret::shown_wire(
            &serde_json::to_value(&declaration).unwrap(),
        ))
    }

    /// `plan NODE --diff --output json`, and whether nothing differs and nothing is orphaned
    /// (the text `plan NODE --diff` prints is empty then).
    pub fn plan_diff(&self, node: &str) -> Result<(Value, bool), String> {
        let checked = self.checked()?;
        let running = heads::read(self.home()).map_err(|e| said(&e))?;
        let diff = preview::diff(self.home(), &checked, node).map_err(|e| said(&e))?;
        let orphans = orphans::in_open_plans(self.home(), &checked, node).map_err(|e| said(&e))?;
        let mut json = serde_json::to_value(&diff).unwrap();
        let object = json.as_object_mut().expect("a diff is an object");
        object.insert("read".to_owned(), serde_json::to_value(&running).unwrap());
        if !orphans.is_empty() {
            object.insert(
                "orphans".to_owned(),
                serde_json::to_value(&orphans).unwrap(),
            );
        }
        Ok((json, diff.is_empty() && orphans.is_empty()))
    }

    /// `secrets recipients add KEY` (`--output json` prints the answer).
    pub fn secrets_recipients_add(
        &self,
        key: &str,
    ) -> Result<mesh_controller::secrets::RecipientsAnswer, String> {
        mesh_controller::secrets::change_recipients(self.home(), key, true).map_err(|e| said(&e))
    }

    /// `secrets recipients remove KEY` (`--output json` prints the answer).
    pub fn secrets_recipients_remove(
        &self,
        key: &str,
    ) -> Result<mesh_controller::secrets::RecipientsAnswer, String> {
        mesh_controller::secrets::change_recipients(self.home(), key, false).map_err(|e| said(&e))
    }

    /// `secrets encrypt FILE` (`--output json` prints it).
    pub fn secrets_encrypt(
        &self,
        file: &std::path::Path,
    ) -> Result<mesh_controller::secret_files::Encrypted, String> {
        mesh_controller::secret_files::encrypt_file(self.home(), file).map_err(|e| said(&e))
    }

    /// `secrets rotate` (`--output json` prints it; it exits 1 while a repository is pending,
    /// [`Rotated::pending`](mesh_controller::rotate::Rotated::pending)). A repository with a
    /// working tree is committed to by `git` with the identity of this process's environment:
    /// a test that needs its own runs the binary.
    pub fn secrets_rotate(&self) -> Result<mesh_controller::rotate::Rotated, String> {
        self.tokio
            .block_on(mesh_controller::rotate::rotate(
                self.home(),
                self.mesh.store(),
            ))
            .map_err(|e| said(&e))
    }

    /// `records collect --grace-minutes MINUTES` (`--output json` prints it).
    pub fn records_collect(
        &self,
        grace_minutes: u64,
    ) -> Result<mesh_controller::records::DeclarationsCollected, String> {
        mesh_controller::records::collect(
            self.home(),
            mesh_host::now(),
            Duration::from_secs(grace_minutes.saturating_mul(60)),
            mesh_controller::plans::fold::KEEP_PLANS,
        )
        .map_err(|e| said(&e))
    }

    /// What `plan` and `push` say they read, on standard error after `read `: the home's
    /// catalogue, overlaid with each module's deployed build.
    pub fn read(&self) -> Result<heads::Running, String> {
        heads::read(self.home()).map_err(|e| said(&e))
    }

    /// `merge REPO --announce` on the mesh's bus (`--output json` prints what was announced).
    pub fn merge_announce(&self, repo: &str) -> Result<Value, String> {
        let bus = self
            .mesh
            .bus()
            .ok_or("this command talks to a fleet's bus: give --bus URL (or MESH_BUS)")?;
        let announced = self
            .tokio
            .block_on(mesh_controller::announce::announce_head(
                self.home(),
                bus,
                repo,
            ))
            .map_err(|e| said(&e))?;
        Ok(serde_json::to_value(announced).unwrap())
    }
}

/// The modules (or nodes) a flag names, as a set.
fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|name| (*name).to_owned()).collect()
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

/// An error as the binary says it after `error: `: each cause after the one it explains.
pub fn said(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
