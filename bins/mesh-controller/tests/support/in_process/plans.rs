//! Repositories, merges, plans and builds, `check` and `plan` through the library.

use super::{lines, said, set, Library};
use mesh_controller::catalogue;
use mesh_controller::plans;
use mesh_controller::plans::MergeOutcome;
use mesh_controller::settings;
use mesh_controller::DriveMode;
use mesh_controller::DriveOptions;
use mesh_controller::MergeOptions;
use mesh_controller::Runtime;

use mesh_model::plan::Plan;
use serde_json::Value;
use std::collections::BTreeSet;

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

impl Library {
    /// `repo add NAME PATH`.
    pub fn repo_add(&self, name: &str, path: &std::path::Path) -> Result<Value, String> {
        self.repo_add_with(
            name,
            path,
            &catalogue::AddOptions {
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
        options: &catalogue::AddOptions,
    ) -> Result<Value, String> {
        let record = catalogue::add_with(self.home(), name, path, options).map_err(|e| said(&e))?;
        Ok(serde_json::to_value(record).unwrap())
    }

    /// `merge REPO`.
    pub fn merge(&self, repo: &str) -> Result<Merged, String> {
        self.merge_with(repo, MergeFlags::default())
    }

    /// `merge REPO --plan-only`.
    pub fn merge_plan_only(&self, repo: &str) -> Result<Merged, String> {
        self.merge_with(
            repo,
            MergeFlags {
                plan_only: true,
                ..MergeFlags::default()
            },
        )
    }

    /// `merge REPO`, expected to exit `code` (0, or 3 when the plan stopped): its progress
    /// lines, as `merge` prints them.
    pub fn merge_expecting(&self, repo: &str, code: u8) -> String {
        let merged = self
            .merge(repo)
            .unwrap_or_else(|error| panic!("merge {repo}: {error}"));
        assert_eq!(
            u8::from(merged.stopped) * 3,
            code,
            "{}\n{:#}",
            merged.lines,
            merged.json
        );
        merged.lines
    }

    /// `merge REPO` with its flags.
    pub fn merge_with(&self, repo: &str, flags: MergeFlags<'_>) -> Result<Merged, String> {
        self.home().require().map_err(|e| said(&e))?;
        let (drives, progress) = self.drives();
        let options = MergeOptions {
            commit: flags.commit.map(str::to_owned),
            plan_only: flags.plan_only,
            moves: set(flags.moves),
            drop_settings: set(flags.drop_settings),
        };
        let merged = self
            .tokio
            .block_on(mesh_controller::preview_merge(&drives, repo, &options))
            .map_err(|e| said(&e))?;
        Ok(Merged {
            stopped: merged.outcome.stopped(),
            json: serde_json::to_value(&merged).unwrap(),
            outcome: merged.outcome,
            lines: lines(&progress),
        })
    }

    /// `plans show ID --output json`.
    pub fn plan(&self, id: &str) -> Result<Value, String> {
        let record = self.home().plans().get(id).map_err(|e| said(&e))?;
        Ok(serde_json::to_value(record).unwrap())
    }

    /// `plans --output json`.
    pub fn plans(&self) -> Value {
        let plans: Vec<Plan> = self
            .home()
            .plans()
            .all()
            .unwrap_or_else(|e| panic!("{}", said(&e)))
            .into_iter()
            .map(|record| record.plan)
            .collect();
        serde_json::to_value(plans).unwrap()
    }

    /// `plans show ID --preview --output json`.
    pub fn plan_preview(&self, id: &str) -> Result<Value, String> {
        self.home().require().map_err(|e| said(&e))?;
        let record = self.home().plans().get(id).map_err(|e| said(&e))?;
        let (drives, _) = self.drives();
        let preview = self
            .tokio
            .block_on(mesh_controller::preview(
                &drives.ctx(&BTreeSet::new(), &BTreeSet::new()),
                &record,
            ))
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
        let options = DriveOptions {
            plan: id.map(str::to_owned),
            mode: DriveMode::All,
            moves: set(moves),
            drop_settings: set(drop_settings),
        };
        self.drive_open(&drives, &progress, &options)
    }

    /// `plans retry ID`.
    pub fn plans_retry(&self, id: &str) -> Result<Driven, String> {
        self.home().require().map_err(|e| said(&e))?;
        let (drives, progress) = self.drives();
        let options = DriveOptions {
            plan: Some(id.to_owned()),
            ..DriveOptions::default()
        };
        let plans = self
            .tokio
            .block_on(drives.retry(&options))
            .map_err(|e| said(&e))?;
        Ok(Driven {
            stopped: plans::any_stopped(&plans),
            plans,
            lines: lines(&progress),
        })
    }

    /// `build --behind`.
    pub fn build_behind(&self) -> Result<Driven, String> {
        self.home().require().map_err(|e| said(&e))?;
        let (drives, progress) = self.drives();
        let options = DriveOptions {
            mode: DriveMode::BuildOnly,
            ..DriveOptions::default()
        };
        self.drive_open(&drives, &progress, &options)
    }

    fn drive_open(
        &self,
        drives: &Runtime,
        progress: &mesh_controller::Collected,
        options: &DriveOptions,
    ) -> Result<Driven, String> {
        let plans = self
            .tokio
            .block_on(drives.drive_open(options))
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

    /// `repo list --output json`.
    pub fn repo_list(&self) -> Result<Value, String> {
        let repos = self.home().repos().all().map_err(|e| said(&e))?;
        Ok(serde_json::to_value(repos).unwrap())
    }

    /// `merge REPO --announce` on the mesh's bus: the merge of the branch's head announced to
    /// the daemon (`--output json` prints it).
    pub fn merge_announce(&self, repo: &str) -> Result<mesh_controller::bus::Announced, String> {
        self.tokio
            .block_on(mesh_controller::bus::announce_head(
                self.home(),
                self.bus()?,
                repo,
            ))
            .map_err(|e| said(&e))
    }

    /// `check`: what it finds (`--output json` prints it; `check` exits 1 unless it is
    /// sound, [`mesh_controller::Check::sound`]).
    pub fn check(&self) -> Result<mesh_controller::Check, String> {
        let checked = self.checked()?;
        mesh_controller::check(self.home(), &checked).map_err(|e| said(&e))
    }

    /// `plan NODE --output json`: the declaration the node would be sent now, a secret shown
    /// as its keyed digest.
    pub fn plan_node(&self, node: &str) -> Result<Value, String> {
        let checked = self.checked()?;
        let declaration =
            mesh_controller::compose_node(self.home(), &checked, node).map_err(|e| said(&e))?;
        Ok(mesh_model::secret::shown_wire(
            &serde_json::to_value(&declaration).unwrap(),
        ))
    }

    /// `plan NODE --diff --output json`, and whether nothing differs and nothing is orphaned
    /// (the text `plan NODE --diff` prints is empty then).
    pub fn plan_diff(&self, node: &str) -> Result<(Value, bool), String> {
        let checked = self.checked()?;
        let running = catalogue::read(self.home()).map_err(|e| said(&e))?;
        let diff = mesh_controller::diff(self.home(), &checked, node).map_err(|e| said(&e))?;
        let orphans = settings::in_open_plans(self.home(), &checked, node).map_err(|e| said(&e))?;
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
}
